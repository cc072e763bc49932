//! A mio TCP echo server that closes connections idle for longer than `--idle-ms`.
//!
//! ```text
//! cargo run -p tickwheel --example idle_timeouts -- --listen 127.0.0.1:7000 --idle-ms 5000
//! cargo run -p tickwheel --example idle_timeouts -- --portable   # poll timeout, no timerfd
//! ```
//!
//! Prints `listening on ADDR` first, then one line per closed connection. Every connection
//! has one timer in a [`TimerFd`]; every read resets it (an idle timeout refreshed
//! by every packet), so a busy connection never expires and an idle one is closed no
//! earlier than `--idle-ms` after its last byte. The timerfd sits in the same `mio::Poll` as
//! the sockets, armed at the earliest expiry: the loop blocks with no timeout and wakes only
//! for I/O or a due timer. With `--portable` the same server keeps its timers in a plain
//! [`Wheel`] and passes [`sys::poll_timeout`] to `Poll::poll` instead (the libco style, for
//! any OS), converting instants with the same [`Ticks`] the timerfd uses.
//!
//! The server is a library-style [`Server`] so the integration test
//! (`tests/idle_timeouts.rs`) runs the same code on a thread and stops it with a
//! [`Stopper`]; `main` only parses arguments and prints.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use tickwheel::sys;
use tickwheel::time::Ticks;
use tickwheel::{TimerFd, TimerKey, TimerQueue, Wheel};

const LISTENER: Token = Token(0);
const TIMERS: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_CONN: usize = 3;
/// Echo bytes waiting for a slow reader before the server stops reading from it.
const MAX_PENDING: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Pending-connection queue of the listener (the kernel caps it at `net.core.somaxconn`).
/// std and mio use 128, too few for a burst of thousands of connects: past it the kernel
/// drops SYNs and clients wait a retransmission timeout (a second) to get in.
const BACKLOG: i32 = 4096;

/// Server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on (`--listen`, default `127.0.0.1:0`: any free port).
    pub listen: SocketAddr,
    /// Close a connection after this long without a byte from it (`--idle-ms`, default 30 s).
    pub idle: Duration,
    /// Timer resolution (`--tick-ms`, default 1 ms, at most 1 s); deadlines round up to it.
    pub tick: Duration,
    /// Use the portable poll-timeout path instead of the timerfd (`--portable`).
    pub portable: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            idle: Duration::from_millis(30_000),
            tick: Duration::from_millis(1),
            portable: false,
        }
    }
}

impl Config {
    /// Parses `--listen ADDR`, `--idle-ms N`, `--tick-ms N` and `--portable`.
    pub fn from_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
        let mut config = Config::default();
        while let Some(flag) = args.next() {
            if flag == "--portable" {
                config.portable = true;
                continue;
            }
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--listen" => config.listen = value.parse().map_err(|e| bad(&e))?,
                "--idle-ms" => config.idle = millis(&value).map_err(|e| bad(&e))?,
                "--tick-ms" => config.tick = millis(&value).map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(config)
    }
}

fn millis(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_millis)
}

/// Why a connection was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// No byte for the idle timeout.
    Idle,
    /// The client closed its side.
    PeerClosed,
    /// A socket error.
    Error(ErrorKind),
}

/// What the server reports to its caller.
#[derive(Clone, Debug)]
pub enum Event {
    /// A connection was accepted (`main` does not print these).
    Accepted {
        /// The client's address.
        peer: SocketAddr,
    },
    /// A connection was closed.
    Closed {
        /// The client's address.
        peer: SocketAddr,
        /// Why.
        reason: CloseReason,
        /// Time since its last byte (or since accept if it sent none).
        quiet_for: Duration,
        /// Connections still open.
        open: usize,
    },
    /// `accept` failed (e.g. out of file descriptors); the server keeps running.
    AcceptFailed(ErrorKind),
}

/// Stops a running [`Server`] from another thread.
#[derive(Clone, Debug)]
pub struct Stopper {
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
}

impl Stopper {
    /// Asks the server to close every connection and return from [`Server::run`].
    pub fn stop(&self) -> io::Result<()> {
        self.stop.store(true, Ordering::Release);
        self.waker.wake()
    }
}

/// Where the idle timers live: the two integration patterns.
enum Timers {
    /// A [`TimerFd`] registered in the poll: the kernel wakes the loop (Linux).
    Fd(TimerFd<Token>),
    /// A plain wheel; the loop blocks at most until its next expiry (any OS).
    Portable { wheel: Wheel<Token>, ticks: Ticks },
}

impl Timers {
    fn deadline_after(&self, delay: Duration) -> u64 {
        match self {
            Timers::Fd(fd) => fd.deadline_after(delay),
            Timers::Portable { ticks, .. } => ticks.delay_tick(Instant::now(), delay),
        }
    }

    fn insert(&mut self, deadline: u64, token: Token) -> TimerKey {
        match self {
            Timers::Fd(fd) => fd.insert(deadline, token),
            Timers::Portable { wheel, .. } => wheel.insert(deadline, token),
        }
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) {
        match self {
            Timers::Fd(fd) => fd.reset(key, deadline),
            Timers::Portable { wheel, .. } => wheel.reset(key, deadline),
        };
    }

    fn remove(&mut self, key: TimerKey) {
        match self {
            Timers::Fd(fd) => fd.remove(key),
            Timers::Portable { wheel, .. } => wheel.remove(key),
        };
    }

    /// The timeout for `Poll::poll`: none with the timerfd (it wakes the loop itself).
    fn poll_timeout(&self) -> Option<Duration> {
        match self {
            Timers::Fd(_) => None,
            Timers::Portable { wheel, ticks } => sys::poll_timeout(ticks, wheel, Instant::now()),
        }
    }

    /// The connections whose timer is due now.
    fn expired(&mut self) -> Vec<Token> {
        match self {
            Timers::Fd(fd) => fd.drain(fd.now_tick()).map(|(_, t)| t).collect(),
            Timers::Portable { wheel, ticks } => {
                let now = ticks.now_tick(Instant::now());
                wheel.drain_expired(now).map(|(_, t)| t).collect()
            }
        }
    }
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    timer: TimerKey,
    last_byte: Instant,
    pending: Vec<u8>,
}

/// The echo server: one `mio::Poll` with the listener, the connections and (unless
/// `portable`) the [`TimerFd`].
pub struct Server {
    poll: Poll,
    listener: TcpListener,
    timers: Timers,
    conns: HashMap<Token, Conn>,
    next_token: usize,
    idle: Duration,
    stopper: Stopper,
    buf: Vec<u8>,
}

impl Server {
    /// Binds the listener and registers it, the timerfd and the stop waker.
    pub fn bind(config: &Config) -> io::Result<Server> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(config.listen)?;
        rustix::net::listen(&listener, BACKLOG)?; // on Linux, listening again resizes the queue
        let registry = poll.registry();
        registry.register(&mut listener, LISTENER, Interest::READABLE)?;
        let timers = if config.portable {
            let ticks = Ticks::new(Instant::now(), config.tick);
            Timers::Portable {
                wheel: Wheel::new(),
                ticks,
            }
        } else {
            let timers = TimerFd::new(config.tick)?;
            let fd = timers.as_raw_fd();
            registry.register(&mut SourceFd(&fd), TIMERS, Interest::READABLE)?;
            Timers::Fd(timers)
        };
        let waker = Arc::new(Waker::new(registry, WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        Ok(Server {
            poll,
            listener,
            timers,
            conns: HashMap::new(),
            next_token: FIRST_CONN,
            idle: config.idle,
            stopper: Stopper { waker, stop },
            buf: vec![0; READ_CHUNK],
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that stops [`run`](Server::run) from another thread.
    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Serves until stopped, reporting accepts and closes to `on_event`; then closes everything.
    pub fn run(mut self, mut on_event: impl FnMut(Event)) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        loop {
            // With the timerfd, no timeout: it wakes the loop when the earliest timer is due.
            match self.poll.poll(&mut events, self.timers.poll_timeout()) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                other => other?,
            }
            let mut timers_due = matches!(self.timers, Timers::Portable { .. });
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(&mut on_event),
                    TIMERS => timers_due = true,
                    WAKER if self.stopper.stop.load(Ordering::Acquire) => return Ok(()),
                    WAKER => {}
                    token => self.service(token, &mut on_event),
                }
            }
            if timers_due {
                self.expire(&mut on_event);
            }
        }
    }

    fn accept_all(&mut self, on_event: &mut impl FnMut(Event)) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => match self.add(stream, peer) {
                    Ok(()) => on_event(Event::Accepted { peer }),
                    Err(e) => on_event(Event::AcceptFailed(e.kind())),
                },
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                Err(e) => return on_event(Event::AcceptFailed(e.kind())),
            }
        }
    }

    fn add(&mut self, mut stream: TcpStream, peer: SocketAddr) -> io::Result<()> {
        let token = Token(self.next_token);
        self.next_token += 1;
        let interest = Interest::READABLE | Interest::WRITABLE;
        // On error the stream is dropped, which closes it.
        self.poll
            .registry()
            .register(&mut stream, token, interest)?;
        let timer = self
            .timers
            .insert(self.timers.deadline_after(self.idle), token);
        let last_byte = Instant::now();
        let pending = Vec::new();
        let conn = Conn {
            stream,
            peer,
            timer,
            last_byte,
            pending,
        };
        self.conns.insert(token, conn);
        Ok(())
    }

    /// Echoes what can be echoed; closes the connection on EOF or error.
    fn service(&mut self, token: Token, on_event: &mut impl FnMut(Event)) {
        if let Err(reason) = self.pump(token) {
            self.close(token, reason, on_event);
        }
    }

    /// Alternates flushing and reading until the socket would block either way (edge
    /// triggered: every readable byte is consumed unless the reader is too slow).
    fn pump(&mut self, token: Token) -> Result<(), CloseReason> {
        let Some(conn) = self.conns.get_mut(&token) else {
            return Ok(()); // already closed in this batch of events
        };
        loop {
            flush(conn)?;
            if conn.pending.len() >= MAX_PENDING {
                return Ok(()); // resume on the next writable event
            }
            match conn.stream.read(&mut self.buf) {
                Ok(0) => return Err(CloseReason::PeerClosed),
                Ok(n) => {
                    conn.pending.extend_from_slice(&self.buf[..n]);
                    conn.last_byte = Instant::now();
                    let deadline = self.timers.deadline_after(self.idle);
                    self.timers.reset(conn.timer, deadline);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return flush(conn),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(CloseReason::Error(e.kind())),
            }
        }
    }

    fn expire(&mut self, on_event: &mut impl FnMut(Event)) {
        for token in self.timers.expired() {
            self.close(token, CloseReason::Idle, on_event);
        }
    }

    fn close(&mut self, token: Token, reason: CloseReason, on_event: &mut impl FnMut(Event)) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        // A stale key (the timer just fired) is fine: remove returns None.
        self.timers.remove(conn.timer);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let quiet_for = conn.last_byte.elapsed();
        let (peer, open) = (conn.peer, self.conns.len());
        drop(conn); // closes the socket
        on_event(Event::Closed {
            peer,
            reason,
            quiet_for,
            open,
        });
    }
}

/// Writes pending echo bytes until done or the socket would block.
fn flush(conn: &mut Conn) -> Result<(), CloseReason> {
    while !conn.pending.is_empty() {
        match conn.stream.write(&conn.pending) {
            Ok(0) => return Err(CloseReason::Error(ErrorKind::WriteZero)),
            Ok(n) => drop(conn.pending.drain(..n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(CloseReason::Error(e.kind())),
        }
    }
    Ok(())
}

fn main() {
    let config = match Config::from_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!(
                "error: {e}\nusage: idle_timeouts [--listen ADDR] [--idle-ms N] [--tick-ms N] [--portable]"
            );
            std::process::exit(2);
        }
    };
    let result = Server::bind(&config).and_then(|server| {
        println!("listening on {}", server.local_addr()?);
        server.run(|event| match event {
            Event::Closed {
                peer,
                reason,
                quiet_for,
                open,
            } => {
                println!("closed {peer}: {reason:?} after {quiet_for:.3?} quiet, {open} open");
            }
            Event::AcceptFailed(kind) => eprintln!("accept failed: {kind:?}"),
            Event::Accepted { .. } => {}
        })
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
