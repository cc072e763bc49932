//! The worker side: leases, the window in a wheel, claims and acknowledgements.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::namespace::{connect, Con, Config, Endpoint, Error, Namespace, TimeSource};
use crate::protocol;
use crate::recurrence::{Recurrence, Rule};

mod claims;
mod clock;
mod delivery;
mod leases;
mod notices;
mod outcomes;
mod schedule;
mod status;
#[cfg(test)]
mod tests;
mod window;

use clock::{clock_loop, ServerClock};
use delivery::{deliver_loop, Handoff};
pub use delivery::{Delivery, Outcome};
use leases::Shards;
use notices::{subscribe_loop, Link, Notice};
use outcomes::Outbox;
use schedule::Schedule;
pub use status::{
    Lateness, Redelivery, RedeliveryCounts, ShardLoss, ShardStatus, WorkerEvent, WorkerSnapshot,
    WorkerStats, WorkerStatus,
};

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

/// The connection to Redis: the endpoint, and the connection opened on it unless the last
/// one broke.
pub(crate) struct Redis {
    pub(crate) client: Endpoint,
    pub(crate) con: Option<Con>,
    /// Under Sentinel, the primary moved since the last [`Worker::reset`].
    pub(crate) moved: bool,
    /// The last step failed with a Redis error, and none has succeeded since (see
    /// [`Worker::track_link`]).
    pub(crate) down: bool,
    /// The connection's [`Con::remaps`] when last looked at.
    pub(crate) remaps: u64,
}

impl Redis {
    /// The connection, opened again if the last one broke. Under Sentinel, a connection to
    /// a primary the sentinels no longer name is an error, as a broken one is: the worker
    /// then reads its windows again from the new primary (what it read from the old one
    /// since the failover, and the horizons it recorded there, are lost with it).
    pub(crate) fn con_or_reconnect(&mut self, cfg: &Config) -> Result<&mut Con, Error> {
        if self.con.is_some() && self.client.primary_moved(cfg.io_timeout) {
            self.con = None;
            self.moved = true;
            let moved = std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the sentinels name another primary",
            );
            return Err(Error::Redis(moved.into()));
        }
        if self.con.is_none() {
            self.con = Some(connect(cfg, &self.client)?);
        }
        Ok(self.con.as_mut().expect("opened above"))
    }

    /// Whether the connection followed a change of the Cluster's topology since this was last
    /// asked (a connection opened again counts from 0: its opening was a reset already).
    pub(crate) fn remapped(&mut self) -> bool {
        let now = self.con.as_ref().map_or(0, Con::remaps);
        let remapped = now > self.remaps;
        self.remaps = now;
        remapped
    }

    /// Whether the namespace lives on a Redis Cluster (whose nodes each have a clock).
    pub(crate) fn on_cluster(&self) -> bool {
        matches!(self.client, Endpoint::Cluster(..))
    }
}

/// Stored recurrences seen, evaluable or not (cleared when it grows past 1024).
type Rules = HashMap<String, Option<(Recurrence, Rule)>>;

/// A worker: holds leases on a fair share of the namespace's shards, keeps their next window
/// in a wheel and delivers each task at its run-at instant.
//
// Each piece of its state has one owner: `Shards` the leases and windows, `Schedule` the
// wheel of tasks to claim and its index, `Outbox` the outcomes not yet answered by Redis,
// `Handoff` the claimed tasks waiting for their run-at, `Link` the helper threads and their
// notices.
pub struct Worker {
    cfg: Config,
    redis: Redis,
    ns: Namespace,
    id: String,
    /// The leases held, their windows, and when to renew and read next.
    shards: Shards,
    /// The tasks to claim, each at its instant.
    schedule: Schedule,
    /// Outcomes held until Redis answers for them.
    outbox: Outbox,
    /// The notices, and the stop flags of the helper threads and of `run`.
    link: Link,
    /// The namespace's clock estimate (shared with `run`'s delivery thread).
    clock: ServerClock,
    /// Claimed tasks waiting for their run-at, or in `run` the channel to the thread that
    /// holds them.
    handoff: Handoff,
    rules: Rules,
    stats: WorkerStats,
    /// What `status()` handles read, and the event subscribers.
    status: WorkerStatus,
    /// Tests: the next claim pipeline's replies are dropped as if the connection died.
    #[cfg(test)]
    lose_replies: bool,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("namespace", &self.cfg.namespace)
            .field("owned", &self.shards.ids())
            .field("pending_in_wheel", &self.schedule.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Starts a worker's helper threads: the notification subscriber, and on the server's clock
/// the clock prober. Both stop when `stop` is set.
fn spawn_helpers(
    cfg: &Config,
    client: &Endpoint,
    ns: &Namespace,
    tx: &Sender<Notice>,
    clock: &ServerClock,
    stop: &Arc<AtomicBool>,
) -> Result<(), Error> {
    let (c, channel, tx, s) = (client.clone(), ns.channel.clone(), tx.clone(), stop.clone());
    let timeout = cfg.io_timeout;
    std::thread::Builder::new()
        .name("tickwheel-redis-sub".into())
        .spawn(move || subscribe_loop(c, channel, tx, s, timeout))
        .map_err(|source| Error::Thread {
            thread: "worker's subscriber",
            source,
        })?;
    if let TimeSource::Server = &cfg.time {
        let (c, clock, s) = (client.clone(), clock.clone(), stop.clone());
        std::thread::Builder::new()
            .name("tickwheel-redis-clock".into())
            .spawn(move || clock_loop(c, clock, s, timeout))
            .map_err(|source| Error::Thread {
                thread: "worker's clock",
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
        let link = Link::new();
        let clock = ServerClock::new(cfg.time.clone());
        spawn_helpers(cfg, &client, &ns, &link.tx, &clock, &link.sub_stop)?;
        let mut w = Worker {
            cfg: cfg.clone(),
            redis: Redis {
                client,
                con: Some(con),
                moved: false,
                down: false,
                remaps: 0,
            },
            ns,
            id,
            shards: Shards::default(),
            schedule: Schedule::new(0),
            outbox: Outbox::default(),
            link,
            clock: clock.clone(),
            handoff: Handoff::new(clock),
            rules: HashMap::new(),
            stats: WorkerStats::default(),
            status: WorkerStatus::default(),
            #[cfg(test)]
            lose_replies: false,
        };
        // Wait for the subscription: windows are loaded only while notifications flow.
        match w.link.notices.recv_timeout(cfg.io_timeout) {
            Ok(Notice::Up) => w.link.subscribed = true,
            Ok(other) => w.handle_notice(other),
            Err(_) => {
                return Err(Error::NoSubscription {
                    waited: cfg.io_timeout,
                })
            }
        }
        w.schedule = Schedule::new(w.now_ms());
        // Redis may have just come back: owners get a grace to renew (see `rebalance`).
        w.shards.joined_until_us = w.clock.lease_us() + w.grace_us();
        Ok(w)
    }

    /// This worker's id (the lease owner name it uses).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The shards this worker holds now.
    pub fn owned_shards(&self) -> Vec<u32> {
        self.shards.ids()
    }

    /// The worker's counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Tasks in the worker's wheel (its loaded windows and in-flight deliveries).
    pub fn in_wheel(&self) -> usize {
        self.schedule.len()
    }

    /// A handle that stops [`run`](Worker::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            flag: self.link.stop.clone(),
            tx: self.link.tx.clone(),
        }
    }

    /// Now by the namespace's clock, ms since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// One step without blocking: takes in notifications, renews leases, rebalances and
    /// refills windows when due, claims the tasks due within [`Config::claim_ahead`], then
    /// delivers every claimed task due now to `handler` (while its lease holds) and sends
    /// the acknowledgements. Returns how many deliveries it made. Tests on a manual clock
    /// call it directly; [`run`](Worker::run) does the same work on two threads.
    ///
    /// A panic in `handler` is caught: the attempt failed, its message is the error kept
    /// with the task, and the retry policy decides what comes next, as for
    /// [`Outcome::Failed`]. The handler is called again for the next task, so whatever state
    /// it shares must stay sound across a panic.
    pub fn tick(&mut self, handler: &mut dyn FnMut(&Delivery) -> Outcome) -> Result<usize, Error> {
        let step = self.io_step(false);
        self.track_link(&step);
        self.publish_status(step.is_ok());
        step?;
        let leases = self.shards.leases();
        let mut done = Vec::new();
        self.handoff.local.set_leases(leases, &mut |d| done.push(d));
        let n = self.handoff.local.deliver(handler, &mut |d| done.push(d));
        for d in done {
            self.take_outcome(d);
        }
        let sent = self.send_outcomes(true);
        self.track_link(&sent);
        self.publish_status(sent.is_ok());
        sent?;
        Ok(n)
    }

    /// The Redis side of a step: notifications, maintenance, refills and claims (carrying
    /// the acknowledgements held so far; in `run` claims go first, in `tick` the windows are
    /// read first so a step after a reload still claims), retries and acknowledgements.
    fn io_step(&mut self, claims_first: bool) -> Result<(), Error> {
        while let Ok(n) = self.link.notices.try_recv() {
            self.handle_notice(n);
        }
        // After a failover on a Cluster: the old node's last notices may have gone to nobody.
        if self.redis.remapped() {
            self.shards.unload_all();
        }
        if self.now_ms() >= self.shards.next_maintenance_ms {
            self.maintain()?;
            let every = self.cfg.maintenance_interval;
            self.shards.next_maintenance_ms = self.now_ms() + every.as_millis() as u64;
        }
        if claims_first {
            // A window read can take a while, and what is due soon should not wait for it.
            self.claim_due()?;
            self.shards.reading_on = self.refill()?;
        } else {
            self.shards.reading_on = self.refill()?;
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
    /// A panic in `handler` is caught, as in [`tick`](Worker::tick): a failed attempt with
    /// the panic's message as its error.
    pub fn run(&mut self, mut handler: impl FnMut(&Delivery) -> Outcome) -> Result<(), Error> {
        let (to, from_io) = mpsc::channel();
        self.handoff.thread = Some((to, HashMap::new()));
        let done_tx = self.link.tx.clone();
        let clock = self.clock.clone();
        let stop = self.stop_handle();
        let r = std::thread::scope(|scope| {
            let io = std::thread::Builder::new()
                .name("tickwheel-redis-io".into())
                .spawn_scoped(scope, || self.io_loop())
                .map_err(|source| Error::Thread {
                    thread: "worker's I/O",
                    source,
                })?;
            // Should the delivery loop itself panic, the I/O thread stops too (and releases
            // the shards).
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
        self.handoff.thread = None;
        r
    }

    /// `run`'s I/O thread.
    fn io_loop(&mut self) -> Result<(), Error> {
        let mut backoff = Duration::from_millis(50);
        let r = loop {
            if self.link.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            let step = self.io_step(true);
            self.track_link(&step);
            match step {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    self.publish_status(true);
                    self.forward(false);
                    self.wait();
                }
                Err(Error::Redis(_) | Error::NotConfirmed { .. }) => {
                    self.publish_status(false);
                    self.forward(false);
                    let until = std::time::Instant::now() + backoff;
                    while std::time::Instant::now() < until
                        && !self.link.stop.load(Ordering::SeqCst)
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                }
                Err(e) => break Err(e),
            }
        };
        self.shutdown();
        // Hanging up ends the delivery thread.
        self.handoff.thread = None;
        r
    }

    /// Follows the link to Redis across steps, the same for [`tick`](Worker::tick) and
    /// `run`'s I/O thread: the one place a step's Redis error is handled.
    ///
    /// After a Redis error: [`reset`](Worker::reset) (the next step reconnects, under
    /// Sentinel to the primary the sentinels name then, and reads the windows again), and no
    /// shard is acquired until Redis answers again (leases may run out while Redis is away,
    /// their owners alive). A write too few replicas confirmed ([`Error::NotConfirmed`]) is
    /// handled as a lost reply (it may be lost in a failover: its outcomes held and sent
    /// again, its claims sent again before any is delivered, a renewal not counted), but
    /// its connection is kept: its next `WAIT` covers the earlier writes too. The first
    /// error of an outage emits [`WorkerEvent::Disconnected`].
    ///
    /// The first step that succeeds after errors emits [`WorkerEvent::Reconnected`] and
    /// starts the grace: the other workers are back within a reconnection wait too, and a
    /// live owner renews in its first step, so a shard still unrenewed a grace later is an
    /// orphan (see `rebalance`).
    fn track_link(&mut self, step: &Result<(), Error>) {
        match step {
            Ok(()) => {
                if std::mem::take(&mut self.redis.down) {
                    self.shards.acquire_after_us = self.clock.lease_us() + self.grace_us();
                    self.emit(WorkerEvent::Reconnected);
                }
            }
            Err(e @ (Error::Redis(_) | Error::NotConfirmed { .. })) => {
                let keep = match e {
                    Error::NotConfirmed { .. } => self.redis.con.take(),
                    _ => None,
                };
                self.stats.redis_errors += 1;
                self.shards.acquire_after_us = u64::MAX;
                if !std::mem::replace(&mut self.redis.down, true) {
                    self.emit(WorkerEvent::Disconnected {
                        error: e.to_string(),
                    });
                }
                self.reset();
                if keep.is_some() {
                    self.redis.con = keep;
                }
            }
            Err(_) => {}
        }
    }

    /// Forgets the connection (and, after a failover under Sentinel, the old primary's clock
    /// estimate), and marks every window to be read again (notices may have been missed
    /// meanwhile). Kept: the leases (renewed next); the wheel, so that what it
    /// holds is claimed as soon as Redis answers, before the windows are read again (a claim
    /// checks each task against Redis: one cancelled or moved meanwhile is answered "gone"
    /// or "not yet"); the claimed tasks (delivered while their leases hold); and every
    /// outcome not yet answered by Redis - acknowledgements, retries, lapsed claims - sent
    /// once Redis answers again, each fenced by the epoch it was delivered under.
    fn reset(&mut self) {
        self.redis.con = None;
        if std::mem::take(&mut self.redis.moved) {
            // The one server's clock is the new primary's now.
            self.clock.forget("");
        }
        self.shards.unload_all();
    }

    /// Releases every shard and leaves the worker set (best effort: errors are ignored, the
    /// leases then expire on their own). Claimed tasks not yet handed to the handler are put
    /// back first as they were before the claim (pending at their run-at, the attempt
    /// undone), so the shards' next owners deliver them as first deliveries; should Redis
    /// not answer, they stay in flight and are delivered again after the visibility
    /// timeout.
    pub fn shutdown(&mut self) {
        let held = self.shards.ids();
        for &s in &held {
            self.shards.revoke(s);
        }
        self.forward(true);
        self.apply_leases_locally();
        let _ = self.send_outcomes(true);
        for s in held {
            self.release_now(s);
        }
        let leave = protocol::Heartbeat {
            workers_key: &self.ns.workers_key,
            now: protocol::now(&self.cfg),
            worker: &self.id,
            ttl_ms: 0,
            cluster: self.redis.on_cluster(),
        };
        // Unconfirmed: should a failover lose it, the worker's entry expires there.
        if let Ok(con) = self.redis.con_or_reconnect(&self.cfg) {
            let _ = con.unconfirmed(|con| protocol::invoke(con, &leave));
        }
    }

    fn wait(&mut self) {
        let now_us = self.clock.now_us();
        let mut deadline = self.shards.next_maintenance_ms;
        if self.shards.reading_on || self.outbox.wants_io_now() {
            deadline = 0;
        }
        if let Some(due) = self.outbox.acks_due_ms() {
            deadline = deadline.min(due);
        }
        if let Some(t) = self.schedule.next_expiration() {
            deadline = deadline.min(t.saturating_sub(self.cfg.ahead_ms()));
        }
        let timeout = Duration::from_micros((deadline * 1000).saturating_sub(now_us));
        match self.link.notices.recv_timeout(timeout) {
            Ok(n) => self.handle_notice(n),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(timeout),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.link.sub_stop.store(true, Ordering::SeqCst);
    }
}
