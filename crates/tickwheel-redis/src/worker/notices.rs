//! Notices: the pub/sub messages that name tasks stored inside a loaded window.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::outcomes::Done;
use super::{Worker, RECONNECT_MAX};
use crate::namespace::Endpoint;

/// The worker's side of its helper threads: the notices they (and `run`'s delivery thread,
/// and [`StopHandle`](super::StopHandle)s) send, whether the subscription is up, and the
/// flags that stop `run` and the helpers.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) notices: Receiver<Notice>,
    pub(crate) tx: Sender<Notice>,
    /// Notifications flow: windows may be read (see `Notice::Up`).
    pub(crate) subscribed: bool,
    /// Set by a [`StopHandle`](super::StopHandle): `run` returns.
    pub(crate) stop: Arc<AtomicBool>,
    /// Set when the worker is dropped: the subscriber and the clock prober end.
    pub(crate) sub_stop: Arc<AtomicBool>,
}

impl Link {
    pub(crate) fn new() -> Link {
        let (tx, notices) = mpsc::channel();
        Link {
            notices,
            tx,
            subscribed: false,
            stop: Arc::new(AtomicBool::new(false)),
            sub_stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

#[derive(Debug)]
pub(crate) enum Notice {
    Task {
        shard: u32,
        version: u64,
        run_at: u64,
        id: String,
    },
    /// A shard was paused (`true`) or resumed (see `pause.lua`).
    Paused {
        shard: u32,
        paused: bool,
    },
    Up,
    Down,
    Stop,
    /// The delivery thread of `run` handled (or dropped) claimed tasks.
    Done(Vec<Done>),
}

/// A notification: `shard:` then, per task, `version:run_at:id length:id` (one message per
/// script call however many tasks it stored), or `shard:!pause` / `shard:!resume`. `None`
/// when malformed.
pub(crate) fn parse_notice(b: &[u8]) -> Option<Vec<Notice>> {
    pub(crate) fn field<'a>(b: &mut &'a [u8]) -> Option<&'a str> {
        let i = b.iter().position(|&c| c == b':')?;
        let f = std::str::from_utf8(&b[..i]).ok()?;
        *b = &b[i + 1..];
        Some(f)
    }
    let mut b = b;
    let shard: u32 = field(&mut b)?.parse().ok()?;
    match b {
        b"!pause" | b"!resume" => {
            let paused = b == b"!pause";
            return Some(vec![Notice::Paused { shard, paused }]);
        }
        _ => {}
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let version = field(&mut b)?.parse().ok()?;
        let run_at = field(&mut b)?.parse().ok()?;
        let len: usize = field(&mut b)?.parse().ok()?;
        let id = std::str::from_utf8(b.get(..len)?).ok()?.to_string();
        b = &b[len..];
        out.push(Notice::Task {
            shard,
            version,
            run_at,
            id,
        });
    }
    Some(out)
}

/// How long the subscription waits for a message before it looks at `stop` and the node again.
const READ_TIMEOUT: Duration = Duration::from_millis(200);

/// How often the subscription's node must answer a `PING` (and, on a Cluster, say it is in
/// order and hear a probe).
const PING_EVERY: Duration = Duration::from_secs(1);

/// A name for a subscription's probe channel that no other subscription has: this process's
/// id, the time, and a count.
fn probe_id() -> String {
    use std::sync::atomic::AtomicU64;
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos}-{count}", std::process::id())
}

pub(crate) fn subscribe_loop(
    client: Endpoint,
    channel: String,
    tx: Sender<Notice>,
    stop: Arc<AtomicBool>,
    io_timeout: Duration,
) {
    let mut backoff = Duration::from_millis(50);
    while !stop.load(Ordering::SeqCst) {
        let mut up = false;
        let r = (|| -> redis::RedisResult<()> {
            let (mut con, mut watch) = client.subscription(io_timeout)?;
            con.set_read_timeout(Some(READ_TIMEOUT))?;
            let mut ps = con.as_pubsub();
            ps.subscribe(&channel)?;
            // This subscription's own channel for its probes (see `Watch`).
            let probes = format!("{channel}:probe:{}", probe_id());
            if watch.as_ref().is_some_and(|w| w.through.is_some()) {
                ps.subscribe(&probes)?;
            }
            // The probe published last and not heard yet, and when it was sent.
            let mut probe: Option<(u64, Instant)> = None;
            let mut sent = 0u64;
            up = true;
            if tx.send(Notice::Up).is_err() {
                return Ok(());
            }
            let mut pinged = Instant::now();
            loop {
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                // Under Sentinel, a subscription on a demoted primary goes on (a replica
                // serves it) and one on a stopped primary hears nothing without an error:
                // each second, whether the sentinels still name its node.
                if client.primary_moved(io_timeout) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "the primary moved",
                    )
                    .into());
                }
                // A node that stops answering (hung, stopped, cut off) raises no error on a
                // connection that only reads: silence looks like no news. Each second it must
                // answer a `PING` within the I/O timeout, or the subscription says `Down` and
                // is made again (on a Cluster, to the next seed in turn that answers: every
                // node of a Cluster in order hears every `PUBLISH`).
                if pinged.elapsed() >= PING_EVERY {
                    ps.set_read_timeout(Some(io_timeout))?;
                    ps.ping::<Value>()?;
                    ps.set_read_timeout(Some(READ_TIMEOUT))?;
                    pinged = Instant::now();
                    // On a Cluster, a node cut off from the others still answers, but hears
                    // no `PUBLISH` made on their side: it must say the Cluster is in order,
                    // and hear within the I/O timeout a probe published through another
                    // seed, or the subscription is made again on another node (and, down and
                    // up again, the worker reads its windows again, finding what it missed).
                    if let Some(watch) = watch.as_mut() {
                        let deaf = |why: &'static str| -> redis::RedisError {
                            std::io::Error::new(std::io::ErrorKind::NotConnected, why).into()
                        };
                        if !watch.cluster_ok()? {
                            return Err(deaf(
                                "the subscription's node is not in a Cluster in order",
                            ));
                        }
                        match (probe, watch.through.as_mut()) {
                            (Some((_, at)), _) if at.elapsed() > io_timeout.max(PING_EVERY) => {
                                return Err(deaf("the subscription did not hear its probe"));
                            }
                            (None, Some(through)) => {
                                sent += 1;
                                let published = redis::cmd("PUBLISH")
                                    .arg(&probes)
                                    .arg(sent)
                                    .query::<i64>(through);
                                // A seed that fails to take a probe stops carrying them; the
                                // next subscription takes another.
                                match published {
                                    Ok(_) => probe = Some((sent, Instant::now())),
                                    Err(_) => watch.through = None,
                                }
                            }
                            _ => {}
                        }
                    }
                }
                match ps.get_message() {
                    Ok(msg) if msg.get_channel_name() == probes => {
                        let heard = std::str::from_utf8(msg.get_payload_bytes())
                            .ok()
                            .and_then(|n| n.parse::<u64>().ok());
                        if probe.is_some_and(|(n, _)| heard == Some(n)) {
                            probe = None;
                        }
                    }
                    Ok(msg) => {
                        for n in parse_notice(msg.get_payload_bytes()).unwrap_or_default() {
                            if tx.send(n).is_err() {
                                return Ok(());
                            }
                        }
                    }
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => return Err(e),
                }
            }
        })();
        if r.is_ok() {
            return;
        }
        if up {
            backoff = Duration::from_millis(50);
            if tx.send(Notice::Down).is_err() {
                return;
            }
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

impl Worker {
    pub(crate) fn handle_notice(&mut self, n: Notice) {
        match n {
            Notice::Task {
                shard,
                version,
                run_at,
                id,
            } => {
                let Some(o) = self.shards.get(shard) else {
                    return;
                };
                if o.window.covers(run_at) {
                    // Stored after its run-at: its first delivery is timed from now.
                    let now = self.now_ms();
                    let late = (run_at < now).then_some(now);
                    self.schedule.arm_noticed(shard, id, run_at, version, late);
                }
            }
            Notice::Paused { shard, paused } => {
                if self.shards.set_paused(shard, paused) {
                    // The delivery side hears of it at once: what it holds of the shard
                    // lapses and is put back (see `Shards::leases`).
                    self.forward(false);
                }
            }
            Notice::Up => {
                // Notifications may have been missed while down: load every window again.
                self.link.subscribed = true;
                self.shards.unload_all();
            }
            Notice::Down => self.link.subscribed = false,
            Notice::Stop => {}
            Notice::Done(v) => v.into_iter().for_each(|d| self.take_outcome(d)),
        }
    }
}
