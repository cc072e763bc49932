//! The worker side: leases, the window in a wheel, claims and acknowledgements.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;
use tickwheel::{TimerKey, TimerQueue, Wheel};

use crate::namespace::{
    connect, query_pipe, string, Con, Config, Endpoint, Error, Namespace, TimeSource,
};
use crate::protocol;
use crate::recurrence::{Recurrence, Rule};

mod claims;
mod clock;
mod delivery;
mod leases;
mod notices;
mod outcomes;
mod status;
#[cfg(test)]
mod tests;
mod window;

use clock::*;
use delivery::*;
pub use delivery::{Delivery, Outcome};
use notices::*;
use outcomes::*;
pub use status::{
    Lateness, Redelivery, RedeliveryCounts, ShardLoss, ShardStatus, WorkerEvent, WorkerSnapshot,
    WorkerStats, WorkerStatus,
};
use window::*;

/// Stops a running [`Worker::run`] from any thread.
#[derive(Clone, Debug)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
    tx: Sender<Notice>,
}

impl StopHandle {
    /// Asks the worker to stop: it finishes the delivery in hand, releases its shards and
    /// returns from `run`.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = self.tx.send(Notice::Stop);
    }
}

/// The longest wait between two reconnection attempts (the wait starts at 50 ms and doubles):
/// once Redis answers again, a worker is back within this, not seconds later.
const RECONNECT_MAX: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
struct Owned {
    epoch: u64,
    /// Local instant (µs, [`Clock::lease_us`]) until which the lease surely holds.
    valid_until_us: u64,
    /// What of the shard's pending tasks the wheel holds.
    window: Window,
}

/// A worker: holds leases on a fair share of the namespace's shards, keeps their next window
/// in a wheel and delivers each task at its run-at instant.
pub struct Worker {
    cfg: Config,
    client: Endpoint,
    con: Option<Con>,
    ns: Namespace,
    id: String,
    owned: BTreeMap<u32, Owned>,
    wheel: Wheel<(u32, String)>,
    index: HashMap<(u32, String), (TimerKey, u64)>,
    notices: Receiver<Notice>,
    tx: Sender<Notice>,
    subscribed: bool,
    stop: Arc<AtomicBool>,
    sub_stop: Arc<AtomicBool>,
    /// The namespace's clock estimate (shared with `run`'s delivery thread).
    clock: Clock,
    next_maintenance: u64,
    /// Local instant (µs, [`Clock::lease_us`]) before which the worker takes no shard it
    /// does not hold: after an outage, the shards' owners get a lease's time to renew first
    /// (see `rebalance`).
    acquire_after_us: u64,
    /// A window is partly read: the next tick reads on.
    refill_pending: bool,
    /// Acknowledgements not sent yet: they ride with the next claim, or go once the oldest
    /// has waited [`ACK_DELAY_MS`] (see `send_outcomes`).
    pending_acks: Vec<PendingAck>,
    /// When the held acknowledgements go out at the latest, namespace-clock ms.
    acks_due_ms: u64,
    /// Retries the handler asked for (`Some(delay)`), and claims that lapsed undelivered
    /// (`None`: put back as they were, so they are claimed again at once should the worker
    /// still hold their shard, instead of after the visibility timeout), not sent yet.
    pending_retries: Vec<(Done, Option<Duration>)>,
    /// Claims sent whose reply never came (shard, epoch, id): Redis may have applied them.
    /// The next claim sends them again with `force`, which takes a task in flight too, so a
    /// claim that was applied is delivered at its run-at instead of after the visibility
    /// timeout (see `claim_due`).
    unsure: Vec<(u32, u64, String)>,
    /// Tests: the next claim pipeline's replies are dropped as if the connection died.
    #[cfg(test)]
    lose_replies: bool,
    /// Claimed tasks waiting for their run-at (in `run`, moved to the delivery thread).
    deliverer: Deliverer,
    /// In `run`: the channel to the delivery thread, and the leases it was last told.
    link: Option<(Sender<ToDeliverer>, HashMap<u32, Lease>)>,
    /// Stored recurrences seen, evaluable or not (cleared when it grows past 1024).
    rules: HashMap<String, Option<(Recurrence, Rule)>>,
    live: u64,
    stats: WorkerStats,
    /// What `status()` handles read, and the event subscribers.
    status: WorkerStatus,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("namespace", &self.cfg.namespace)
            .field("owned", &self.owned.keys().collect::<Vec<_>>())
            .field("pending_in_wheel", &self.wheel.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// The connection, opened again if the last one broke. A function of the fields (not of the
/// worker) so that a call may borrow the namespace's keys meanwhile.
fn open_con<'a>(
    con: &'a mut Option<Con>,
    cfg: &Config,
    client: &Endpoint,
) -> Result<&'a mut Con, Error> {
    match con {
        Some(c) => Ok(c),
        None => Ok(con.insert(connect(cfg, client)?)),
    }
}

/// Starts a worker's helper threads: the notification subscriber, and on the server's clock
/// the clock prober. Both stop when `stop` is set.
fn spawn_helpers(
    cfg: &Config,
    client: &Endpoint,
    ns: &Namespace,
    tx: &Sender<Notice>,
    clock: &Clock,
    stop: &Arc<AtomicBool>,
) -> Result<(), Error> {
    let (c, channel, tx, s) = (client.clone(), ns.channel.clone(), tx.clone(), stop.clone());
    let timeout = cfg.io_timeout;
    std::thread::Builder::new()
        .name("tickwheel-redis-sub".into())
        .spawn(move || subscribe_loop(c, channel, tx, s, timeout))
        .map_err(|source| Error::Thread {
            thread: "subscriber",
            source,
        })?;
    if let TimeSource::Server = &cfg.time {
        let (c, clock, s) = (client.clone(), clock.clone(), stop.clone());
        std::thread::Builder::new()
            .name("tickwheel-redis-clock".into())
            .spawn(move || clock_loop(c, clock, s, timeout))
            .map_err(|source| Error::Thread {
                thread: "clock",
                source,
            })?;
    }
    Ok(())
}

fn local_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Worker {
    /// Connects, checks the namespace and subscribes to its notifications. The worker takes
    /// shards on its first [`tick`](Worker::tick) or in [`run`](Worker::run).
    pub fn connect(cfg: &Config) -> Result<Worker, Error> {
        let (client, con, ns) = crate::namespace::open(cfg)?;
        let random = RandomState::new().hash_one(local_us());
        let id = format!("{}-{:016x}", std::process::id(), random);
        let (tx, notices) = mpsc::channel();
        let sub_stop = Arc::new(AtomicBool::new(false));
        let clock = Clock::new(cfg.time.clone());
        spawn_helpers(cfg, &client, &ns, &tx, &clock, &sub_stop)?;
        let mut w = Worker {
            cfg: cfg.clone(),
            client,
            con: Some(con),
            ns,
            id,
            owned: BTreeMap::new(),
            wheel: Wheel::new(),
            index: HashMap::new(),
            notices,
            tx,
            subscribed: false,
            stop: Arc::new(AtomicBool::new(false)),
            sub_stop,
            clock: clock.clone(),
            next_maintenance: 0,
            acquire_after_us: 0,
            refill_pending: false,
            pending_acks: Vec::new(),
            acks_due_ms: 0,
            pending_retries: Vec::new(),
            unsure: Vec::new(),
            #[cfg(test)]
            lose_replies: false,
            deliverer: Deliverer::new(clock),
            link: None,
            rules: HashMap::new(),
            live: 1,
            stats: WorkerStats::default(),
            status: WorkerStatus::default(),
        };
        // Wait for the subscription: windows are loaded only while notifications flow.
        match w.notices.recv_timeout(cfg.io_timeout) {
            Ok(Notice::Up) => w.subscribed = true,
            Ok(other) => w.handle_notice(other),
            Err(_) => {
                return Err(Error::NoSubscription {
                    waited: cfg.io_timeout,
                })
            }
        }
        w.wheel = Wheel::with_start(w.now_ms());
        Ok(w)
    }

    /// This worker's id (the lease owner name it uses).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The shards this worker holds now.
    pub fn owned_shards(&self) -> Vec<u32> {
        self.owned.keys().copied().collect()
    }

    /// The worker's counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Tasks in the worker's wheel (its loaded windows and in-flight deliveries).
    pub fn in_wheel(&self) -> usize {
        self.wheel.len()
    }

    /// A handle that stops [`run`](Worker::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            flag: self.stop.clone(),
            tx: self.tx.clone(),
        }
    }

    /// Now by the namespace's clock, ms since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether the namespace lives on a Redis Cluster (whose nodes each have a clock).
    fn on_cluster(&self) -> bool {
        matches!(self.client, Endpoint::Cluster(..))
    }

    /// One step without blocking: takes in notifications, renews leases, rebalances and
    /// refills windows when due, claims the tasks due within [`Config::claim_ahead`], then
    /// delivers every claimed task due now to `handler` (while its lease holds) and sends
    /// the acknowledgements. Returns how many deliveries it made. Tests on a manual clock
    /// call it directly; [`run`](Worker::run) does the same work on two threads.
    ///
    /// A panic in `handler` passes on to the caller. The task it was handling stays in
    /// flight and is delivered again after the visibility timeout (by this worker or
    /// another), as after a crash; nothing is lost.
    pub fn tick(&mut self, handler: &mut dyn FnMut(&Delivery) -> Outcome) -> Result<usize, Error> {
        let step = self.io_step(false);
        self.publish_status(step.is_ok());
        step?;
        let leases = self.leases();
        let mut done = Vec::new();
        self.deliverer.set_leases(leases, &mut |d| done.push(d));
        let n = self.deliverer.deliver(handler, &mut |d| done.push(d));
        for d in done {
            self.settle(d);
        }
        let sent = self.send_outcomes(true);
        self.publish_status(sent.is_ok());
        sent?;
        Ok(n)
    }

    /// The Redis side of a step: notifications, maintenance, refills and claims (carrying
    /// the acknowledgements held so far; in `run` claims go first, in `tick` the windows are
    /// read first so a step after a reload still claims), retries and acknowledgements.
    fn io_step(&mut self, claims_first: bool) -> Result<(), Error> {
        while let Ok(n) = self.notices.try_recv() {
            self.handle_notice(n);
        }
        if self.now_ms() >= self.next_maintenance {
            self.maintain()?;
            let every = self.cfg.maintenance_interval;
            self.next_maintenance = self.now_ms() + every.as_millis() as u64;
        }
        if claims_first {
            // A window read can take a while, and what is due soon should not wait for it.
            self.claim_due()?;
            self.refill_pending = self.refill()?;
        } else {
            self.refill_pending = self.refill()?;
            self.claim_due()?;
        }
        self.send_outcomes(false)
    }

    /// Delivers tasks until [`StopHandle::stop`]. Two threads share the work: this one calls
    /// `handler` for each claimed task at its run-at (so the handler need not be `Send`), and
    /// an I/O thread renews leases, reads windows, claims tasks [`Config::claim_ahead`]
    /// before their run-at and sends the acknowledgements; it sleeps until the wheel's next
    /// deadline, a notification, an outcome or the next maintenance. Redis's latency (an
    /// fsync per write under `appendfsync always`) therefore delays claims, not deliveries.
    /// Redis errors are retried with backoff (50 ms doubling to 100 ms); once Redis answers,
    /// what the wheel holds is claimed at once and the windows are read again (notices may
    /// have been missed); tasks already claimed are still delivered while their leases hold,
    /// and their outcomes are held until Redis answers for them. Returns `Err` only for
    /// errors a retry cannot fix.
    /// On stop it releases its shards so other workers take them at once.
    ///
    /// A panic in `handler` stops the I/O thread too (the shards are released) and passes
    /// on to the caller. The task it was handling stays in flight and is delivered again
    /// after the visibility timeout, by another worker or this one run again; nothing is
    /// lost.
    pub fn run(&mut self, mut handler: impl FnMut(&Delivery) -> Outcome) -> Result<(), Error> {
        let (to, from_io) = mpsc::channel();
        self.link = Some((to, HashMap::new()));
        let done_tx = self.tx.clone();
        let clock = self.clock.clone();
        let stop = self.stop_handle();
        let r = std::thread::scope(|scope| {
            let io = std::thread::Builder::new()
                .name("tickwheel-redis-io".into())
                .spawn_scoped(scope, || self.io_loop())
                .map_err(|source| Error::Thread {
                    thread: "I/O",
                    source,
                })?;
            // Should the handler panic, the I/O thread stops too (and releases the shards).
            struct StopOnDrop(StopHandle);
            impl Drop for StopOnDrop {
                fn drop(&mut self) {
                    self.0.stop();
                }
            }
            let guard = StopOnDrop(stop);
            deliver_loop(&mut handler, &from_io, &done_tx, clock);
            drop(guard);
            io.join()
                .unwrap_or_else(|_| Err(Error::Protocol("the I/O thread panicked".into())))
        });
        self.link = None;
        r
    }

    /// `run`'s I/O thread.
    fn io_loop(&mut self) -> Result<(), Error> {
        let mut backoff = Duration::from_millis(50);
        let mut disconnected = false;
        let r = loop {
            if self.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            match self.io_step(true) {
                Ok(()) => {
                    if std::mem::take(&mut disconnected) {
                        self.emit(WorkerEvent::Reconnected);
                    }
                    backoff = Duration::from_millis(50);
                    self.publish_status(true);
                    self.forward(false);
                    self.wait();
                }
                Err(Error::Redis(e)) => {
                    self.stats.redis_errors += 1;
                    // Leases may run out while Redis is away, their owners alive: once it is
                    // back, they renew first (see `rebalance`).
                    let lease = self.cfg.lease.as_micros() as u64;
                    self.acquire_after_us = self.clock.lease_us() + lease;
                    if !std::mem::replace(&mut disconnected, true) {
                        self.emit(WorkerEvent::Disconnected {
                            error: e.to_string(),
                        });
                    }
                    self.reset();
                    self.publish_status(false);
                    self.forward(false);
                    let until = std::time::Instant::now() + backoff;
                    while std::time::Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                }
                Err(e) => break Err(e),
            }
        };
        self.shutdown();
        // Hanging up ends the delivery thread.
        self.link = None;
        r
    }

    /// Forgets the connection, and marks every window to be read again (notices may have
    /// been missed meanwhile). Kept: the leases (renewed next); the wheel, so that what it
    /// holds is claimed as soon as Redis answers, before the windows are read again (a claim
    /// checks each task against Redis: one cancelled or moved meanwhile is answered "gone"
    /// or "not yet"); the claimed tasks (delivered while their leases hold); and every
    /// outcome not yet answered by Redis - acknowledgements, retries, lapsed claims - sent
    /// once Redis answers again, each fenced by the epoch it was delivered under.
    fn reset(&mut self) {
        self.con = None;
        for o in self.owned.values_mut() {
            o.window = Window::Unloaded;
        }
        self.next_maintenance = 0;
    }

    /// Releases every shard and leaves the worker set (best effort: errors are ignored, the
    /// leases then expire on their own). Claimed tasks not yet delivered stay in flight in
    /// Redis: the shards' next owners deliver them at once.
    pub fn shutdown(&mut self) {
        let held: Vec<u32> = self.owned.keys().copied().collect();
        for &s in &held {
            if let Some(o) = self.owned.get_mut(&s) {
                o.valid_until_us = 0;
            }
        }
        self.forward(true);
        self.settle_local();
        let _ = self.send_outcomes(true);
        for s in held {
            self.release_now(s);
        }
        let leave = protocol::Heartbeat {
            workers_key: &self.ns.workers_key,
            now: protocol::now(&self.cfg),
            worker: &self.id,
            ttl_ms: 0,
            cluster: self.on_cluster(),
        };
        if let Ok(con) = open_con(&mut self.con, &self.cfg, &self.client) {
            let _ = protocol::invoke(con, &leave);
        }
    }

    fn wait(&mut self) {
        let now_us = self.clock.now_us();
        let mut deadline = self.next_maintenance;
        if self.refill_pending || !self.pending_retries.is_empty() || !self.unsure.is_empty() {
            deadline = 0;
        }
        if !self.pending_acks.is_empty() {
            deadline = deadline.min(self.acks_due_ms);
        }
        if let Some(t) = self.wheel.next_expiration() {
            deadline = deadline.min(t.saturating_sub(self.cfg.ahead_ms()));
        }
        let timeout = Duration::from_micros((deadline * 1000).saturating_sub(now_us));
        match self.notices.recv_timeout(timeout) {
            Ok(n) => self.handle_notice(n),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(timeout),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.sub_stop.store(true, Ordering::SeqCst);
    }
}
