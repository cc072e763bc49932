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
    array, bytes, connect, int, query_pipe, string, Con, Config, Endpoint, Error, Namespace,
    TimeSource,
};
use crate::recurrence::{Recurrence, Rule};
use crate::scripts::scripts;

/// One delivery of a task to a handler: everything it needs to do the work and to
/// de-duplicate (a task is delivered at least once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The task's id.
    pub id: String,
    /// The payload it was scheduled with.
    pub payload: Vec<u8>,
    /// The run-at instant it is delivered for, ms since the Unix epoch.
    pub due_ms: u64,
    /// 1 for the first delivery, then 2, 3, ... for redeliveries.
    pub attempt: u32,
    /// The task's version: it changes whenever the id is scheduled again or rescheduled, so
    /// `(id, version, attempt)` names one delivery.
    pub version: u64,
    /// The shard it lives in.
    pub shard: u32,
    /// The shard epoch (fencing token) under which it was claimed.
    pub epoch: u64,
    /// When Redis handed it out, ms since the Unix epoch (by the namespace's clock).
    pub claimed_at_ms: u64,
    /// For a run of a recurring task, how it repeats: acknowledging the run re-arms the task
    /// at its next run, in the same step. `None` for a one-shot task.
    pub recurrence: Option<Recurrence>,
}

impl Delivery {
    /// The run-at instant as a `SystemTime`.
    pub fn due(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.due_ms)
    }
}

/// What a handler asks the worker to do with a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: remove the task (a recurring one is re-armed at its next run instead).
    Ack,
    /// Deliver it again after this delay (its attempt count is kept and grows).
    RetryAfter(Duration),
    /// Do nothing now: the task is delivered again after the visibility timeout.
    Leave,
}

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Deliveries handed to the handler.
    pub delivered: u64,
    /// Acknowledgements Redis accepted.
    pub acked: u64,
    /// Acknowledgements of deliveries that were no longer current (the task was replaced).
    pub stale_acks: u64,
    /// Retries accepted.
    pub retried: u64,
    /// Claims, acknowledgements, retries or loads refused because the shard's epoch moved on.
    pub fenced: u64,
    /// Shards this worker took.
    pub acquired: u64,
    /// Shards this worker lost (fenced or lease not renewed) or gave up to rebalance.
    pub dropped: u64,
    /// Redis errors the run loop recovered from (with backoff and a reconnect).
    pub redis_errors: u64,
    /// Acknowledgements not sent because the run's stored recurrence cannot be evaluated here
    /// (a time zone this machine does not know, say): the run is left in flight and delivered
    /// again after the visibility timeout, never dropped.
    pub bad_recurrences: u64,
    /// Claimed tasks not handed to the handler because the worker could no longer be sure of
    /// its lease on their shard when they fell due (it stalled, lost or gave up the shard):
    /// they stay in flight in Redis and the shard's next owner delivers them.
    pub lapsed: u64,
}

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

#[derive(Debug)]
enum Notice {
    Task {
        shard: u32,
        version: u64,
        run_at: u64,
        id: String,
    },
    Up,
    Down,
    Stop,
    /// The delivery thread of `run` handled (or dropped) claimed tasks.
    Done(Vec<Done>),
}

/// A claimed task waiting for its run-at, and what acknowledging it re-arms: `None` for a
/// one-shot task, `Some(None)` when this worker cannot evaluate its recurrence, else
/// `Some(Some(next run ms, 0 when none))`.
#[derive(Debug)]
struct Claimed {
    delivery: Delivery,
    next: Option<Option<u64>>,
    /// The node whose clock judged the claim (an index of [`Clock::node`]): the one its
    /// delivery waits for.
    node: u32,
}

/// What became of a claimed task: `outcome` is `None` when it was not delivered (lapsed).
#[derive(Debug)]
struct Done {
    shard: u32,
    epoch: u64,
    id: String,
    version: u64,
    attempt: u32,
    next: Option<Option<u64>>,
    outcome: Option<Outcome>,
}

/// A lease as the worker reckons it: the epoch, and the local instant (µs, see
/// [`Clock::lease_us`]) until which no other worker can have taken the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    epoch: u64,
    valid_until_us: u64,
}

/// The local clock the estimates are reckoned against: the system clock, or (in unit tests)
/// a virtual one.
#[derive(Clone, Debug)]
enum Local {
    System,
    #[cfg(test)]
    Manual(Arc<std::sync::atomic::AtomicU64>),
}

/// One node's clock as estimated: its clock minus the local clock, µs, a lower bound (see
/// [`Clock::observe`]), and the local µs of the last sample.
#[derive(Clone, Copy, Debug)]
struct NodeClock {
    offset_us: i64,
    observed_at_us: u64,
}

impl NodeClock {
    /// The offset at local `at_us`: the last lower bound, slid down by 1 ms per second since
    /// (the local clock may run faster than the node's).
    fn offset_at(&self, at_us: u64) -> i64 {
        self.offset_us - (at_us.saturating_sub(self.observed_at_us) / 1000) as i64
    }
}

/// The estimates of every node's clock seen, by node (a Cluster node id; `""` for one
/// server), and an index for each node id.
#[derive(Debug, Default)]
struct Nodes {
    ids: HashMap<String, u32>,
    clocks: Vec<Option<NodeClock>>,
}

/// The namespace's clock as a worker estimates it, shared with its delivery thread and its
/// clock thread.
///
/// Every node has a clock of its own (the one server, or each node of a Cluster), and a claim
/// is judged by the clock of the node that runs it, so the estimate is kept per node: a
/// task claimed ahead is delivered when the estimate of the clock of *the node that claimed
/// it* reaches its run-at. Each estimate is fed only by replies that name their node (the
/// claim replies carry it, and so do the clock thread's probes), so a shard that moves to
/// another node (a resharding, a failover) cannot lend one node's clock to another's claims.
#[derive(Clone, Debug)]
struct Clock {
    time: TimeSource,
    local: Local,
    nodes: Arc<Mutex<Nodes>>,
}

impl Clock {
    fn new(time: TimeSource) -> Clock {
        Clock {
            time,
            local: Local::System,
            nodes: Arc::default(),
        }
    }

    /// The local clock, µs since the Unix epoch.
    fn local_us(&self) -> u64 {
        match &self.local {
            Local::System => local_us(),
            #[cfg(test)]
            Local::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Nodes> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of `node` (a Cluster node id, `""` for one server).
    fn node(&self, node: &str) -> u32 {
        let mut n = self.lock();
        if let Some(&i) = n.ids.get(node) {
            return i;
        }
        let i = n.clocks.len() as u32;
        n.ids.insert(node.to_string(), i);
        n.clocks.push(None);
        i
    }

    /// Takes in a reading of `node`'s clock (`server_us`) from a reply that arrived at local
    /// `after_us`; returns the node's index. The node read its clock before replying, so
    /// `server_us - after_us` is a lower bound of its offset; the estimate is the tightest
    /// recent lower bound, allowed to slide down by 1 ms per second for clock drift. An
    /// estimate that is never ahead means no early delivery.
    fn observe(&self, node: &str, server_us: i64, after_us: u64) -> u32 {
        let i = self.node(node);
        if !matches!(self.time, TimeSource::Server) {
            return i;
        }
        let mut n = self.lock();
        let slot = &mut n.clocks[i as usize];
        let sample = server_us - after_us as i64;
        *slot = Some(match *slot {
            None => NodeClock {
                offset_us: sample,
                observed_at_us: after_us,
            },
            Some(c) => NodeClock {
                offset_us: sample.max(c.offset_at(after_us)),
                observed_at_us: after_us.max(c.observed_at_us),
            },
        });
        i
    }

    /// Now by the clock of node `node` (an index from [`Clock::observe`]), µs since the Unix
    /// epoch, never ahead of that node's clock; `None` before any reading of it.
    fn node_now_us(&self, node: u32) -> Option<u64> {
        match &self.time {
            TimeSource::Manual(t) => Some(t.now_ms() * 1000),
            TimeSource::Server => {
                let local = self.local_us();
                let c = (*self.lock().clocks.get(node as usize)?)?;
                Some((local as i64 + c.offset_at(local)).max(0) as u64)
            }
        }
    }

    /// Now by the namespace's clock, µs since the Unix epoch: the latest of the nodes'
    /// estimates (the local clock before any reading). It paces the I/O side (when to claim,
    /// to renew, to read); it may run ahead of some node's clock by as much as the node
    /// clocks disagree, so deliveries go by [`Clock::node_now_us`] instead.
    fn now_us(&self) -> u64 {
        match &self.time {
            TimeSource::Manual(t) => t.now_ms() * 1000,
            TimeSource::Server => {
                let local = self.local_us();
                let n = self.lock();
                let best = n.clocks.iter().flatten().map(|c| c.offset_at(local)).max();
                (local as i64 + best.unwrap_or(0)).max(0) as u64
            }
        }
    }

    fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// The clock leases are reckoned on, µs: the local clock (a lease is renewed for `lease`
    /// from the moment Redis runs the renewal, which is after the worker sent it), or the
    /// manual clock, which the scripts use as their now.
    fn lease_us(&self) -> u64 {
        match &self.time {
            TimeSource::Manual(t) => t.now_ms() * 1000,
            TimeSource::Server => self.local_us(),
        }
    }
}

/// Claimed tasks waiting for their run-at, delivered by `tick` or by `run`'s delivery
/// thread. A task is handed to the handler only once the estimate of the clock of the node
/// that claimed it reaches its run-at, and only while the lease it was claimed under is valid
/// by the worker's reckoning: a worker that stalled past its lease delivers nothing more.
#[derive(Debug)]
struct Deliverer {
    /// By node (index of [`Clock::node`]), in run-at order.
    ready: Vec<BTreeMap<(u64, u64), Claimed>>,
    seq: u64,
    leases: HashMap<u32, Lease>,
    clock: Clock,
}

impl Deliverer {
    fn new(clock: Clock) -> Deliverer {
        Deliverer {
            ready: Vec::new(),
            seq: 0,
            leases: HashMap::new(),
            clock,
        }
    }

    fn push(&mut self, c: Claimed) {
        self.seq += 1;
        let node = c.node as usize;
        if self.ready.len() <= node {
            self.ready.resize_with(node + 1, BTreeMap::new);
        }
        self.ready[node].insert((c.delivery.due_ms, self.seq), c);
    }

    /// Takes every claimed task out (to hand them to another thread).
    fn take_all(&mut self) -> Vec<Claimed> {
        self.ready
            .iter_mut()
            .flat_map(|q| std::mem::take(q).into_values())
            .collect()
    }

    /// Takes in the leases held now; claims under any other lease are dropped (reported as
    /// lapsed).
    fn set_leases(&mut self, leases: HashMap<u32, Lease>, done: &mut dyn FnMut(Done)) {
        self.leases = leases;
        let leases = &self.leases;
        for q in &mut self.ready {
            let gone: Vec<(u64, u64)> = q
                .iter()
                .filter(|(_, c)| {
                    leases
                        .get(&c.delivery.shard)
                        .is_none_or(|l| l.epoch != c.delivery.epoch)
                })
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                if let Some(c) = q.remove(&k) {
                    done(finish(c, None));
                }
            }
        }
    }

    /// How long until the next claimed task falls due by its node's clock, µs (`None`: none
    /// held). A node without a reading yet (no claim comes without one) is looked at again
    /// after 100 ms.
    fn next_wait_us(&self) -> Option<u64> {
        self.ready
            .iter()
            .enumerate()
            .filter_map(|(node, q)| {
                let due = q.keys().next()?.0;
                Some(match self.clock.node_now_us(node as u32) {
                    Some(now) => (due * 1000).saturating_sub(now),
                    None => 100_000,
                })
            })
            .min()
    }

    /// Hands every claimed task due by now (by its node's clock) to `handler`, in run-at
    /// order.
    fn deliver(
        &mut self,
        handler: &mut dyn FnMut(&Delivery) -> Outcome,
        done: &mut dyn FnMut(Done),
    ) -> usize {
        let nows: Vec<Option<u64>> = (0..self.ready.len())
            .map(|node| self.clock.node_now_us(node as u32).map(|us| us / 1000))
            .collect();
        let mut n = 0;
        loop {
            // The earliest task due by its own node's clock.
            let next = self
                .ready
                .iter()
                .zip(&nows)
                .enumerate()
                .filter_map(|(node, (q, now))| {
                    let k = *q.keys().next()?;
                    (k.0 <= (*now)?).then_some((k, node))
                })
                .min();
            let Some((k, node)) = next else {
                break;
            };
            let c = self.ready[node].remove(&k).expect("a key just seen");
            let valid = self.leases.get(&c.delivery.shard).is_some_and(|l| {
                l.epoch == c.delivery.epoch && self.clock.lease_us() < l.valid_until_us
            });
            if valid {
                n += 1;
                let outcome = handler(&c.delivery);
                done(finish(c, Some(outcome)));
            } else {
                done(finish(c, None));
            }
        }
        n
    }
}

fn finish(c: Claimed, outcome: Option<Outcome>) -> Done {
    let d = c.delivery;
    Done {
        shard: d.shard,
        epoch: d.epoch,
        id: d.id,
        version: d.version,
        attempt: d.attempt,
        next: c.next,
        outcome,
    }
}

/// What `run`'s I/O thread tells its delivery thread.
enum ToDeliverer {
    Claims(Vec<Claimed>),
    /// The leases held now; the sender, when given, is answered once they are in force (no
    /// handler call under a dropped lease after that).
    Leases(HashMap<u32, Lease>, Option<Sender<()>>),
}

/// The delivery thread of `run`: waits for the next claimed task's run-at or a message,
/// delivers, and reports every outcome to the I/O thread. Ends when the I/O thread hangs up.
fn deliver_loop(
    handler: &mut dyn FnMut(&Delivery) -> Outcome,
    rx: &Receiver<ToDeliverer>,
    done_tx: &Sender<Notice>,
    clock: Clock,
) {
    let mut d = Deliverer::new(clock);
    // Outcomes go to the I/O thread in one message per round, not one per task.
    let mut done: Vec<Done> = Vec::new();
    let send = |done: &mut Vec<Done>| {
        if !done.is_empty() {
            let _ = done_tx.send(Notice::Done(std::mem::take(done)));
        }
    };
    loop {
        let msg = match d.next_wait_us() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(wait) => rx.recv_timeout(Duration::from_micros(wait)),
        };
        let apply = |m: ToDeliverer, d: &mut Deliverer, done: &mut Vec<Done>| match m {
            ToDeliverer::Claims(v) => v.into_iter().for_each(|c| d.push(c)),
            ToDeliverer::Leases(l, confirm) => {
                d.set_leases(l, &mut |x| done.push(x));
                if let Some(c) = confirm {
                    // What the new leases dropped reaches the I/O thread before the answer.
                    send(done);
                    let _ = c.send(());
                }
            }
        };
        match msg {
            Ok(m) => apply(m, &mut d, &mut done),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while let Ok(m) = rx.try_recv() {
            apply(m, &mut d, &mut done);
        }
        d.deliver(handler, &mut |x| done.push(x));
        send(&mut done);
    }
}

/// An acknowledgement waiting to be sent.
#[derive(Clone, Debug)]
struct PendingAck {
    shard: u32,
    epoch: u64,
    id: String,
    version: u64,
    attempt: u32,
    /// A recurring task's next run (ms), 0 for none: the ACK script re-arms it.
    next: u64,
}

/// Where a window read goes on: the first bucket not read to its end, the generation of its
/// list that was read (empty: none), and how many of that generation's entries were read.
/// A list deleted and created again has a new generation, read from its start: no entry is
/// skipped whatever happens to a bucket between two reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Resume {
    bucket: u64,
    generation: String,
    offset: u64,
}

/// How long the I/O thread may hold an acknowledgement for a claim to carry it, ms: fewer
/// write round trips (fsync waits under `appendfsync always`) while deliveries are frequent,
/// at the price of that much more redelivery after a crash.
const ACK_DELAY_MS: u64 = 20;

/// Held acknowledgements that go out at once.
const ACK_MAX: usize = 4096;

/// The longest wait between two reconnection attempts (the wait starts at 50 ms and doubles):
/// once Redis answers again, a worker is back within this, not seconds later.
const RECONNECT_MAX: Duration = Duration::from_millis(200);

#[derive(Clone, Debug)]
struct Owned {
    epoch: u64,
    /// Local instant (µs, [`Clock::lease_us`]) until which the lease surely holds.
    valid_until_us: u64,
    /// End of the window loaded into the wheel (the shard's horizon); `None`: load it.
    loaded_until: Option<u64>,
    /// Where the next read goes on; `more` when the last read stopped at its limit.
    resume: Resume,
    more: bool,
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
    lose_claim_replies: bool,
    /// Claimed tasks waiting for their run-at (in `run`, moved to the delivery thread).
    deliverer: Deliverer,
    /// In `run`: the channel to the delivery thread, and the leases it was last told.
    link: Option<(Sender<ToDeliverer>, HashMap<u32, Lease>)>,
    /// Stored recurrences seen, evaluable or not (cleared when it grows past 1024).
    rules: HashMap<String, Option<(Recurrence, Rule)>>,
    live: u64,
    stats: WorkerStats,
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

fn local_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Worker {
    /// Connects, checks the namespace and subscribes to its notifications. The worker takes
    /// shards on its first [`tick`](Worker::tick) or in [`run`](Worker::run).
    pub fn connect(cfg: &Config) -> Result<Worker, Error> {
        cfg.validate()?;
        let client = cfg.client()?;
        let mut con = connect(cfg, &client)?;
        let ns = Namespace::open(cfg, &mut con)?;
        let random = RandomState::new().hash_one(local_us());
        let id = format!("{}-{:016x}", std::process::id(), random);
        let (tx, notices) = mpsc::channel();
        let sub_stop = Arc::new(AtomicBool::new(false));
        {
            let (client, channel, tx, stop) = (
                client.clone(),
                ns.channel.clone(),
                tx.clone(),
                sub_stop.clone(),
            );
            let timeout = cfg.io_timeout;
            std::thread::Builder::new()
                .name("tickwheel-redis-sub".into())
                .spawn(move || subscribe_loop(client, channel, tx, stop, timeout))
                .map_err(|e| Error::Server(format!("cannot start the subscriber thread: {e}")))?;
        }
        let clock = Clock::new(cfg.time.clone());
        if let TimeSource::Server = &cfg.time {
            let (c, clock, stop) = (client.clone(), clock.clone(), sub_stop.clone());
            let timeout = cfg.io_timeout;
            std::thread::Builder::new()
                .name("tickwheel-redis-clock".into())
                .spawn(move || clock_loop(c, clock, stop, timeout))
                .map_err(|e| Error::Server(format!("cannot start the clock thread: {e}")))?;
        }
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
            refill_pending: false,
            pending_acks: Vec::new(),
            acks_due_ms: 0,
            pending_retries: Vec::new(),
            unsure: Vec::new(),
            #[cfg(test)]
            lose_claim_replies: false,
            deliverer: Deliverer::new(clock),
            link: None,
            rules: HashMap::new(),
            live: 1,
            stats: WorkerStats::default(),
        };
        // Wait for the subscription: windows are loaded only while notifications flow.
        match w.notices.recv_timeout(cfg.io_timeout) {
            Ok(Notice::Up) => w.subscribed = true,
            Ok(other) => w.handle_notice(other),
            Err(_) => {
                return Err(Error::Protocol(
                    "no pub/sub subscription within io_timeout".into(),
                ))
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

    /// Drops the in-memory windows; the next [`tick`](Worker::tick) loads them again from
    /// Redis. Workers do this by themselves after a reconnect; callers need it only to make a
    /// step deterministic (tests on a manual clock, where a notification may still be on its
    /// way when the clock moves).
    pub fn reload_windows(&mut self) {
        self.wheel = Wheel::with_start(self.now_ms());
        self.index.clear();
        for o in self.owned.values_mut() {
            o.loaded_until = None;
        }
        self.next_maintenance = 0;
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

    /// The scripts' node argument (see `node_id` in the scripts).
    fn node_arg(&self) -> &'static str {
        if self.on_cluster() {
            "1"
        } else {
            "0"
        }
    }

    fn con(&mut self) -> Result<&mut Con, Error> {
        if self.con.is_none() {
            self.con = Some(connect(&self.cfg, &self.client)?);
        }
        Ok(self.con.as_mut().expect("connected above"))
    }

    fn shard_call(
        &mut self,
        script: &redis::Script,
        shard: u32,
        args: &[String],
    ) -> Result<Value, Error> {
        let mut inv = script.prepare_invoke();
        for k in &self.ns.shards[shard as usize].0 {
            inv.key(k);
        }
        for a in args {
            inv.arg(a);
        }
        Ok(inv.invoke(self.con()?)?)
    }

    /// One step without blocking: takes in notifications, renews leases, rebalances and
    /// refills windows when due, claims the tasks due within [`Config::claim_ahead`], then
    /// delivers every claimed task due now to `handler` (while its lease holds) and sends
    /// the acknowledgements. Returns how many deliveries it made. Tests on a manual clock
    /// call it directly; [`run`](Worker::run) does the same work on two threads.
    pub fn tick(&mut self, handler: &mut dyn FnMut(&Delivery) -> Outcome) -> Result<usize, Error> {
        self.io_step(false)?;
        let leases = self.leases();
        let mut done = Vec::new();
        self.deliverer.set_leases(leases, &mut |d| done.push(d));
        let n = self.deliverer.deliver(handler, &mut |d| done.push(d));
        for d in done {
            self.settle(d);
        }
        self.send_outcomes(true)?;
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
            let every = self.cfg.maintenance_interval.min(self.cfg.lease / 3);
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

    /// Sends the retries the handler asked for, and the acknowledgements when `force`d, when
    /// many are held or when the oldest has waited [`ACK_DELAY_MS`] (they also ride with
    /// every claim and go before every renewal).
    fn send_outcomes(&mut self, force: bool) -> Result<(), Error> {
        self.send_retries()?;
        if force || self.pending_acks.len() >= ACK_MAX || self.now_ms() >= self.acks_due_ms {
            self.flush_acks()?;
        }
        Ok(())
    }

    /// The leases held now, as the delivery side checks them.
    fn leases(&self) -> HashMap<u32, Lease> {
        self.owned
            .iter()
            .map(|(&s, o)| {
                (
                    s,
                    Lease {
                        epoch: o.epoch,
                        valid_until_us: o.valid_until_us,
                    },
                )
            })
            .collect()
    }

    /// Takes in what became of a claimed task.
    fn settle(&mut self, d: Done) {
        let Some(outcome) = d.outcome else {
            self.stats.lapsed += 1;
            self.pending_retries.push((d, None));
            return;
        };
        self.stats.delivered += 1;
        match outcome {
            Outcome::Ack => match d.next {
                Some(None) => self.stats.bad_recurrences += 1,
                next => {
                    if self.pending_acks.is_empty() {
                        self.acks_due_ms = self.now_ms() + ACK_DELAY_MS;
                    }
                    self.pending_acks.push(PendingAck {
                        shard: d.shard,
                        epoch: d.epoch,
                        id: d.id,
                        version: d.version,
                        attempt: d.attempt,
                        next: next.flatten().unwrap_or(0),
                    })
                }
            },
            Outcome::RetryAfter(after) => self.pending_retries.push((d, Some(after))),
            Outcome::Leave => {}
        }
    }

    /// In `run`: hands the claimed tasks to the delivery thread and tells it of lease changes.
    /// With `confirm`, waits until the delivery thread has the new leases in force (it
    /// finishes the handler call in hand first), so no delivery under a dropped lease can
    /// follow, then takes in the outcomes it reported.
    fn forward(&mut self, confirm: bool) {
        let Some((to, told)) = self.link.as_mut() else {
            return;
        };
        let ready = self.deliverer.take_all();
        if !ready.is_empty() && to.send(ToDeliverer::Claims(ready)).is_err() {
            return;
        }
        let leases: HashMap<u32, Lease> = self
            .owned
            .iter()
            .map(|(&s, o)| {
                (
                    s,
                    Lease {
                        epoch: o.epoch,
                        valid_until_us: o.valid_until_us,
                    },
                )
            })
            .collect();
        if !confirm && leases == *told {
            return;
        }
        *told = leases.clone();
        let (ctx, crx) = mpsc::channel();
        let confirm_tx = confirm.then_some(ctx);
        if to.send(ToDeliverer::Leases(leases, confirm_tx)).is_err() || !confirm {
            return;
        }
        // A lapsed lease makes the delivery thread refuse on its own: no need to wait longer.
        let _ = crx.recv_timeout(self.cfg.lease);
        while let Ok(n) = self.notices.try_recv() {
            self.handle_notice(n);
        }
    }

    /// Delivers tasks until [`StopHandle::stop`]. Two threads share the work: this one calls
    /// `handler` for each claimed task at its run-at (so the handler need not be `Send`), and
    /// an I/O thread renews leases, reads windows, claims tasks [`Config::claim_ahead`]
    /// before their run-at and sends the acknowledgements; it sleeps until the wheel's next
    /// deadline, a notification, an outcome or the next maintenance. Redis's latency (an
    /// fsync per write under `appendfsync always`) therefore delays claims, not deliveries.
    /// Redis errors are retried with backoff (50 ms doubling to 200 ms) after dropping the
    /// in-memory windows, which are loaded again from Redis; tasks already claimed are still
    /// delivered while their leases hold. Returns `Err` only for errors a retry cannot fix.
    /// On stop it releases its shards so other workers take them at once.
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
                .map_err(|e| Error::Server(format!("cannot start the I/O thread: {e}")))?;
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
        let r = loop {
            if self.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            match self.io_step(true) {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    self.forward(false);
                    self.wait();
                }
                Err(Error::Redis(_)) => {
                    self.stats.redis_errors += 1;
                    self.reset();
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

    /// Forgets the connection and the in-memory windows. Kept: the leases (renewed next), the
    /// claimed tasks (delivered while their leases hold) and every outcome not yet answered
    /// by Redis - acknowledgements, retries, lapsed claims - sent once Redis answers again,
    /// each fenced by the epoch it was delivered under.
    fn reset(&mut self) {
        self.con = None;
        self.reload_windows();
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
        let now = self.cfg.now_arg();
        let (key, id) = (self.ns.workers_key.clone(), self.id.clone());
        if let Ok(con) = self.con() {
            let _: Result<Value, _> = scripts()
                .heartbeat
                .key(&key)
                .arg(now)
                .arg(id)
                .arg(0)
                .invoke(con);
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

    fn handle_notice(&mut self, n: Notice) {
        match n {
            Notice::Task {
                shard,
                version,
                run_at,
                id,
            } => {
                let Some(o) = self.owned.get(&shard) else {
                    return;
                };
                if o.loaded_until.is_some_and(|h| run_at <= h) {
                    self.arm(shard, id, run_at, version);
                }
            }
            Notice::Up => {
                // Notifications may have been missed while down: load every window again.
                self.subscribed = true;
                for o in self.owned.values_mut() {
                    o.loaded_until = None;
                }
                self.next_maintenance = 0;
            }
            Notice::Down => self.subscribed = false,
            Notice::Stop => {}
            Notice::Done(v) => v.into_iter().for_each(|d| self.settle(d)),
        }
    }

    /// Puts (or moves) a shard's task in the wheel, unless the wheel holds a newer version.
    fn arm(&mut self, shard: u32, id: String, at: u64, version: u64) {
        let k = (shard, id);
        if let Some((key, v)) = self.index.get_mut(&k) {
            if version < *v {
                return;
            }
            *v = version;
            if self.wheel.reset(*key, at) {
                return;
            }
        }
        let key = self.wheel.insert(at, k.clone());
        self.index.insert(k, (key, version));
    }

    fn disarm(&mut self, shard: u32, id: String) {
        if let Some((key, _)) = self.index.remove(&(shard, id)) {
            self.wheel.remove(key);
        }
    }

    /// Forgets a shard (lost or released): its tasks leave the wheel.
    fn drop_shard(&mut self, shard: u32) {
        if self.owned.remove(&shard).is_none() {
            return;
        }
        self.stats.dropped += 1;
        let keys: Vec<(u32, String)> = self
            .index
            .keys()
            .filter(|(s, _)| *s == shard)
            .cloned()
            .collect();
        for k in keys {
            if let Some((key, _)) = self.index.remove(&k) {
                self.wheel.remove(key);
            }
        }
    }

    /// Gives a shard up: first no more deliveries under its lease, then its acknowledgements
    /// (under its epoch), then the release in Redis.
    fn release(&mut self, shard: u32) {
        let Some(o) = self.owned.get_mut(&shard) else {
            return;
        };
        o.valid_until_us = 0;
        self.forward(true);
        self.settle_local();
        let _ = self.send_outcomes(true);
        self.release_now(shard);
    }

    fn release_now(&mut self, shard: u32) {
        if let Some(epoch) = self.owned.get(&shard).map(|o| o.epoch) {
            let id = self.id.clone();
            let _ = self.shard_call(&scripts().release, shard, &[id, epoch.to_string()]);
            self.drop_shard(shard);
        }
    }

    /// Applies the current leases to the claims held in this thread (`tick`, or claims not
    /// yet forwarded), and takes in what that drops.
    fn settle_local(&mut self) {
        let leases = self.leases();
        let mut done = Vec::new();
        self.deliverer.set_leases(leases, &mut |d| done.push(d));
        for d in done {
            self.settle(d);
        }
    }

    /// How long a lease is counted on after the renewal was sent, µs: the lease less a
    /// twentieth, for the local clock running slower than the server's.
    fn lease_us_reckoned(&self) -> u64 {
        let lease = self.cfg.lease.as_micros() as u64;
        lease - lease / 20
    }

    fn maintain(&mut self) -> Result<(), Error> {
        // Before any shard may be released: held acknowledgements go out under their epoch.
        self.flush_acks()?;
        let lease = self.cfg.lease.as_millis() as u64;
        let (now_arg, id) = (self.cfg.now_arg(), self.id.clone());
        // The heartbeat and every renewal in one pipeline: one round trip (one fsync).
        let held: Vec<(u32, u64)> = self.owned.iter().map(|(&s, o)| (s, o.epoch)).collect();
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(scripts().heartbeat.get_hash())
            .arg(1)
            .arg(&self.ns.workers_key)
            .arg(&now_arg)
            .arg(&id)
            .arg(lease)
            .arg(self.node_arg());
        for &(s, epoch) in &held {
            pipe.cmd("EVALSHA")
                .arg(scripts().acquire.get_hash())
                .arg(4)
                .arg(self.ns.shards[s as usize].0.as_slice())
                .arg(&now_arg)
                .arg(&id)
                .arg(lease)
                .arg(epoch);
        }
        let sent = self.clock.lease_us();
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let after = self.clock.local_us();
        let mut replies = replies.into_iter();
        let reply = array(
            replies
                .next()
                .ok_or_else(|| Error::Protocol("HEARTBEAT".into()))?,
        )?;
        self.live = int(reply
            .first()
            .ok_or_else(|| Error::Protocol("HEARTBEAT".into()))?)?
        .max(1) as u64;
        if let (Some(us), Some(node)) = (reply.get(2), reply.get(3)) {
            self.clock.observe(&string(node.clone())?, int(us)?, after);
        }
        // Whatever fails to renew is lost.
        for ((s, _), r) in held.into_iter().zip(replies) {
            let r = array(r)?;
            if int(r.first().ok_or_else(|| Error::Protocol("ACQUIRE".into()))?)? == 0 {
                self.stats.fenced += 1;
                self.drop_shard(s);
            } else {
                let until = sent + self.lease_us_reckoned();
                if let Some(o) = self.owned.get_mut(&s) {
                    o.valid_until_us = until;
                }
            }
        }

        // Rebalance towards a fair share.
        let total = self.ns.shards.len() as u64;
        let fair = total.div_ceil(self.live) as usize;
        while self.owned.len() > fair {
            let s = *self.owned.keys().next_back().expect("non-empty");
            self.release(s);
        }
        if self.owned.len() < fair {
            let start = RandomState::new().hash_one(&self.id) % total;
            for i in 0..total {
                let s = ((start + i) % total) as u32;
                if self.owned.contains_key(&s) {
                    continue;
                }
                let sent = self.clock.lease_us();
                let r = array(self.shard_call(
                    &scripts().acquire,
                    s,
                    &[
                        now_arg.clone(),
                        id.clone(),
                        lease.to_string(),
                        "0".to_string(),
                    ],
                )?)?;
                let epoch = int(r.first().ok_or_else(|| Error::Protocol("ACQUIRE".into()))?)?;
                if epoch > 0 {
                    self.stats.acquired += 1;
                    self.owned.insert(
                        s,
                        Owned {
                            epoch: epoch as u64,
                            valid_until_us: sent + self.lease_us_reckoned(),
                            loaded_until: None,
                            resume: Resume::default(),
                            more: false,
                        },
                    );
                    if self.owned.len() >= fair {
                        break;
                    }
                }
            }
        }

        Ok(())
    }

    /// Tops windows up, reading at most [`Config::window_limit`] tasks per call so that a
    /// refill never holds Redis, or the deliveries waiting behind it, for long; the rest
    /// follows on the next ticks. A window is topped up once a quarter of it has passed.
    /// Returns whether more remains to read. Only while notifications flow (see
    /// `Notice::Up`).
    fn refill(&mut self) -> Result<bool, Error> {
        if !self.subscribed {
            return Ok(false);
        }
        let now = self.now_ms();
        let window = self.cfg.window.as_millis() as u64;
        let to = now + window;
        let wanted: Vec<(u32, u64, Option<Resume>)> = self
            .owned
            .iter()
            .filter_map(|(&s, o)| match o.loaded_until {
                None => Some((s, o.epoch, None)),
                Some(h) if o.more || h < now + window * 3 / 4 => {
                    Some((s, o.epoch, Some(o.resume.clone())))
                }
                Some(_) => None,
            })
            .collect();
        if wanted.is_empty() {
            return Ok(false);
        }
        // One pipeline (one round trip) reads a share of the budget for every shard.
        let limit = (self.cfg.window_limit / wanted.len()).max(100);
        let mut pipe = redis::pipe();
        for (s, epoch, from) in &wanted {
            let (from_arg, generation, offset) = from
                .as_ref()
                .map_or(("-inf".to_string(), String::new(), 0), |r| {
                    (r.bucket.to_string(), r.generation.clone(), r.offset)
                });
            pipe.cmd("EVALSHA")
                .arg(scripts().load.get_hash())
                .arg(4)
                .arg(self.ns.shards[*s as usize].0.as_slice())
                .arg(epoch)
                .arg(from_arg)
                .arg(generation)
                .arg(offset)
                .arg(to)
                .arg(limit)
                .arg(if from.is_none() { "1" } else { "0" });
        }
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let mut more = false;
        for ((shard, _, _), reply) in wanted.into_iter().zip(replies) {
            let mut r = array(reply)?.into_iter();
            let horizon = int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)?;
            if horizon < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard);
                continue;
            }
            let mut head = || -> Result<u64, Error> {
                Ok(int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)? as u64)
            };
            let bucket = head()?;
            let generation = string(r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)?;
            let mut head = || -> Result<u64, Error> {
                Ok(int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)? as u64)
            };
            let offset = head()?;
            let partial = head()? == 1;
            let resume = Resume {
                bucket,
                generation,
                offset,
            };
            // Pending tasks are armed at their run-at, in-flight ones at their visibility
            // deadline plus the claim horizon (the wheel is polled that far ahead).
            for (list, shift) in r.zip([0, self.cfg.ahead_ms()]) {
                let mut it = array(list)?.into_iter();
                while let (Some(id), Some(at), Some(v)) = (it.next(), it.next(), it.next()) {
                    let (id, at, v) = (string(id)?, int(&at)? as u64, int(&v)? as u64);
                    self.arm(shard, id, at + shift, v);
                }
            }
            if let Some(o) = self.owned.get_mut(&shard) {
                o.loaded_until = Some(horizon as u64);
                o.resume = resume;
                o.more = partial;
            }
            more |= partial;
        }
        Ok(more)
    }

    /// Claims everything due within the claim horizon in one pipeline (one script call per
    /// shard and batch, carrying the acknowledgements held so far) and puts the claims in the
    /// deliverer, to be handed out at their run-at: one write round trip per wake-up whatever
    /// the number of shards, which matters when every write waits for an fsync
    /// (`appendfsync always`).
    fn claim_due(&mut self) -> Result<(), Error> {
        let ahead = self.cfg.ahead_ms();
        let now = self.now_ms();
        let mut due: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        while let Some((_, k)) = self.wheel.poll_expired(now + ahead) {
            self.index.remove(&k);
            due.entry(k.0).or_default().push(k.1);
        }
        // Claims whose reply was lost, still under the epoch they were sent with.
        let mut unsure: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (shard, epoch, id) in std::mem::take(&mut self.unsure) {
            if self.owned.get(&shard).is_some_and(|o| o.epoch == epoch) {
                unsure.entry(shard).or_default().push(id);
            }
        }
        if due.is_empty() && unsure.is_empty() {
            return Ok(());
        }
        let vis = self.cfg.visibility_timeout.as_millis() as u64;
        let now_arg = self.cfg.now_arg();
        let sha = scripts().deliver.get_hash().to_string();
        let node_arg = self.node_arg();
        let mut pipe = redis::pipe();
        let acks = std::mem::take(&mut self.pending_acks);
        let ack_calls = self.ack_calls(&mut pipe, &acks);
        let mut calls: Vec<(u32, u64)> = Vec::new();
        let mut sent: Vec<(u32, u64, String)> = Vec::new();
        for (set, force) in [(&due, "0"), (&unsure, "1")] {
            for (shard, ids) in set {
                let Some(epoch) = self.owned.get(shard).map(|o| o.epoch) else {
                    continue;
                };
                for chunk in ids.chunks(self.cfg.batch) {
                    let keys = &self.ns.shards[*shard as usize].0;
                    let cmd = pipe.cmd("EVALSHA").arg(&sha).arg(4).arg(keys.as_slice());
                    cmd.arg(&now_arg)
                        .arg(epoch)
                        .arg(vis)
                        .arg(ahead)
                        .arg(node_arg)
                        .arg(force);
                    cmd.arg(chunk);
                    calls.push((*shard, epoch));
                    sent.extend(chunk.iter().map(|id| (*shard, epoch, id.clone())));
                }
            }
        }
        if calls.is_empty() {
            self.pending_acks = acks;
            return Ok(());
        }
        let replies = self
            .con()
            .and_then(|c| Ok(query_pipe::<Vec<Value>>(c, &pipe)?));
        #[cfg(test)]
        let replies = match std::mem::take(&mut self.lose_claim_replies) {
            true => replies.and_then(|_| {
                let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reply lost");
                Err(Error::Redis(e.into()))
            }),
            false => replies,
        };
        // Without replies these claims may or may not have been applied: sent again, forced.
        let replies = match replies {
            Ok(r) => r,
            Err(e) => {
                // Unanswered: the acknowledgements are held for the next try (see
                // `flush_acks`), ahead of any settled since.
                self.unsure = sent;
                let later = std::mem::replace(&mut self.pending_acks, acks);
                self.pending_acks.extend(later);
                return Err(e);
            }
        };
        let after = self.clock.local_us();
        let mut replies = replies.into_iter();
        let ack_replies: Vec<Value> = replies.by_ref().take(ack_calls.len()).collect();
        self.ack_replies(&acks, ack_calls, ack_replies)?;
        for ((shard, epoch), reply) in calls.into_iter().zip(replies) {
            let mut reply = array(reply)?.into_iter();
            let mut head = || {
                reply
                    .next()
                    .ok_or_else(|| Error::Protocol("DELIVER".into()))
            };
            let status = int(&head()?)?;
            let server_now = int(&head()?)? as u64;
            let server_us = int(&head()?)?;
            // The claims below wait for this node's clock, whatever node holds the shard
            // later on.
            let node = self.clock.observe(&string(head()?)?, server_us, after);
            if status < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard);
                continue;
            }
            for entry in reply {
                let mut e = array(entry)?.into_iter();
                let mut next = || {
                    e.next()
                        .ok_or_else(|| Error::Protocol("DELIVER entry".into()))
                };
                match int(&next()?)? {
                    1 => {
                        let id = string(next()?)?;
                        let version = int(&next()?)? as u64;
                        let attempt = int(&next()?)? as u32;
                        let due_ms = int(&next()?)? as u64;
                        let payload = bytes(next()?)?;
                        let rec = string(next()?)?;
                        let visible_at = int(&next()?)? as u64;
                        // Claimed again if still unacknowledged at its visibility deadline.
                        self.arm(shard, id.clone(), visible_at + ahead, version);
                        let (recurrence, next_run) = self.next_run(&rec, due_ms, server_now);
                        self.deliverer.push(Claimed {
                            delivery: Delivery {
                                id,
                                payload,
                                due_ms,
                                attempt,
                                version,
                                shard,
                                epoch,
                                claimed_at_ms: server_now,
                                recurrence,
                            },
                            next: next_run,
                            node,
                        });
                    }
                    2 => {
                        let id = string(next()?)?;
                        let at = int(&next()?)? as u64;
                        let version = int(&next()?)? as u64;
                        // Not before the next millisecond, should the estimate be ahead.
                        let at = at.max(self.now_ms() + ahead + 1);
                        self.arm(shard, id, at, version);
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// A claimed run's recurrence (decoded from its stored form `rec`) and what its
    /// acknowledgement re-arms: `None` for a one-shot task, `Some(None)` when this worker
    /// cannot evaluate the recurrence, else `Some(Some(next run ms, 0 when none))`.
    fn next_run(
        &mut self,
        rec: &str,
        due_ms: u64,
        claimed_ms: u64,
    ) -> (Option<Recurrence>, Option<Option<u64>>) {
        if rec.is_empty() {
            return (None, None);
        }
        if self.rules.len() > 1024 {
            self.rules.clear();
        }
        let entry = self.rules.entry(rec.to_string()).or_insert_with(|| {
            let r = Recurrence::decode(rec).ok().flatten()?;
            let rule = r.rule().ok()?;
            Some((r, rule))
        });
        match entry {
            Some((r, rule)) => (
                Some(r.clone()),
                Some(Some(rule.next_after(due_ms, claimed_ms).unwrap_or(0))),
            ),
            None => (Recurrence::decode(rec).ok().flatten(), Some(None)),
        }
    }

    /// Sends the held acknowledgements now. They stay held until Redis answers for them: an
    /// error (an outage, a lost reply) keeps them for the next try, fenced by their epoch as
    /// ever, so a task delivered during an outage is not delivered again after it.
    fn flush_acks(&mut self) -> Result<(), Error> {
        if self.pending_acks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        let calls = self.ack_calls(&mut pipe, &self.pending_acks);
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let acks = std::mem::take(&mut self.pending_acks);
        self.ack_replies(&acks, calls, replies)
    }

    /// Adds ACK script calls for `acks` (grouped by shard and epoch, [`Config::batch`] a call)
    /// to `pipe`; returns each call's shard and the indices of its acks.
    fn ack_calls(&self, pipe: &mut redis::Pipeline, acks: &[PendingAck]) -> Vec<(u32, Vec<usize>)> {
        let mut groups: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
        for (i, a) in acks.iter().enumerate() {
            groups.entry((a.shard, a.epoch)).or_default().push(i);
        }
        let sha = scripts().ack.get_hash();
        let mut calls = Vec::new();
        for ((shard, epoch), idx) in groups {
            for chunk in idx.chunks(self.cfg.batch) {
                let keys = &self.ns.shards[shard as usize].0;
                let cmd = pipe
                    .cmd("EVALSHA")
                    .arg(sha)
                    .arg(4)
                    .arg(keys.as_slice())
                    .arg(epoch)
                    .arg(&self.ns.channel)
                    .arg(shard);
                for &i in chunk {
                    cmd.arg(&acks[i].id)
                        .arg(acks[i].version)
                        .arg(acks[i].attempt)
                        .arg(acks[i].next);
                }
                calls.push((shard, chunk.to_vec()));
            }
        }
        calls
    }

    fn ack_replies(
        &mut self,
        acks: &[PendingAck],
        calls: Vec<(u32, Vec<usize>)>,
        replies: Vec<Value>,
    ) -> Result<(), Error> {
        for ((shard, idx), reply) in calls.into_iter().zip(replies) {
            let mut reply = array(reply)?.into_iter();
            if int(&reply.next().ok_or_else(|| Error::Protocol("ACK".into()))?)? < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard);
                continue;
            }
            for (i, ok) in idx.into_iter().zip(reply) {
                if int(&ok)? == 1 {
                    self.stats.acked += 1;
                    self.disarm(shard, acks[i].id.clone());
                } else {
                    self.stats.stale_acks += 1;
                }
            }
        }
        Ok(())
    }

    /// Sends retries and put-backs of lapsed claims in one pipeline.
    fn send_retries(&mut self) -> Result<(), Error> {
        if self.pending_retries.is_empty() {
            return Ok(());
        }
        let now_arg = self.cfg.now_arg();
        let sha = scripts().retry.get_hash().to_string();
        let mut pipe = redis::pipe();
        for (d, after) in &self.pending_retries {
            let keys = &self.ns.shards[d.shard as usize].0;
            pipe.cmd("EVALSHA")
                .arg(&sha)
                .arg(4)
                .arg(keys.as_slice())
                .arg(&now_arg)
                .arg(d.epoch)
                .arg(&d.id)
                .arg(d.version)
                .arg(d.attempt)
                .arg(after.map_or(0, |a| a.as_millis() as u64))
                .arg(if after.is_none() { "1" } else { "0" });
        }
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        for ((d, after), r) in std::mem::take(&mut self.pending_retries)
            .into_iter()
            .zip(replies)
        {
            let r = array(r)?;
            match int(r.first().ok_or_else(|| Error::Protocol("RETRY".into()))?)? {
                1 => {
                    if after.is_some() {
                        self.stats.retried += 1;
                    }
                    let at = int(r.get(1).ok_or_else(|| Error::Protocol("RETRY".into()))?)?;
                    if self.owned.get(&d.shard).is_some_and(|o| o.epoch == d.epoch) {
                        self.arm(d.shard, d.id, at as u64, d.version);
                    }
                }
                -1 => {
                    self.stats.fenced += 1;
                    self.drop_shard(d.shard);
                }
                _ => self.stats.stale_acks += 1,
            }
        }
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.sub_stop.store(true, Ordering::SeqCst);
    }
}

/// A notification: `shard:` then, per task, `version:run_at:id length:id` (one message per
/// script call however many tasks it stored). `None` when malformed.
fn parse_notice(b: &[u8]) -> Option<Vec<Notice>> {
    fn field<'a>(b: &mut &'a [u8]) -> Option<&'a str> {
        let i = b.iter().position(|&c| c == b':')?;
        let f = std::str::from_utf8(&b[..i]).ok()?;
        *b = &b[i + 1..];
        Some(f)
    }
    let mut b = b;
    let shard: u32 = field(&mut b)?.parse().ok()?;
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

/// Reads the server's clock every 100 ms on a connection of its own, for the clock
/// estimates. Replies to the scripts are poorer samples while Redis is busy: under
/// `appendfsync always` a reply waits for the fsync of every write of its event-loop round,
/// and an estimate fed only by them falls behind (the worker then delivers late by as much).
/// A probe writes nothing, so one that lands in a round without writes comes back at once;
/// the estimate keeps the tightest. One server: `TIME`. A Cluster: each primary in turn,
/// with a script that returns the node's id beside its clock (each node has a clock of its
/// own, and each sample must go to its own node's estimate); the primaries are looked up
/// again every 5 s and after an error.
fn clock_loop(client: Endpoint, clock: Clock, stop: Arc<AtomicBool>, io_timeout: Duration) {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
    let mut single = None;
    let mut cluster = None;
    let mut primaries: Vec<(String, u16)> = Vec::new();
    let mut round = 0u64;
    let mut probe = redis::cmd("EVAL");
    probe.arg(crate::scripts::PROBE).arg(0);
    // {seconds, microseconds, node id} from the probe script.
    let observe = |v: Value, after: u64| -> Result<(), Error> {
        let v = array(v)?;
        let [secs, micros, node] =
            <[Value; 3]>::try_from(v).map_err(|_| Error::Protocol("clock probe".into()))?;
        clock.observe(
            &string(node)?,
            int(&secs)? * 1_000_000 + int(&micros)?,
            after,
        );
        Ok(())
    };
    while !stop.load(Ordering::SeqCst) {
        match &client {
            Endpoint::Single(c) => {
                if single.is_none() {
                    single = c.get_connection_with_timeout(io_timeout).ok();
                    if let Some(c) = &single {
                        let _ = c.set_read_timeout(Some(io_timeout));
                    }
                }
                if let Some(c) = single.as_mut() {
                    match redis::cmd("TIME").query::<(i64, i64)>(c) {
                        Ok((secs, micros)) => {
                            clock.observe("", secs * 1_000_000 + micros, clock.local_us());
                        }
                        Err(_) => single = None,
                    }
                }
            }
            Endpoint::Cluster(c, _) => {
                if cluster.is_none() {
                    cluster = c.get_connection().ok();
                    primaries.clear();
                }
                if let Some(c) = cluster.as_mut() {
                    let ok = if primaries.is_empty() || round % 50 == 0 {
                        // Every primary at once: their addresses, and a sample of each
                        // (stamped when the last one answered: a looser bound, still a bound).
                        let all =
                            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                        c.route_command(&probe, all).ok().and_then(|v| {
                            let after = clock.local_us();
                            let Value::Map(m) = v else { return None };
                            primaries.clear();
                            for (addr, v) in m {
                                let addr = string(addr).ok()?;
                                let (host, port) = addr.rsplit_once(':')?;
                                primaries.push((host.to_string(), port.parse().ok()?));
                                observe(v, after).ok()?;
                            }
                            Some(())
                        })
                    } else {
                        primaries.iter().try_for_each(|(host, port)| {
                            let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                host: host.clone(),
                                port: *port,
                            });
                            let v = c.route_command(&probe, to).ok()?;
                            observe(v, clock.local_us()).ok()
                        })
                    };
                    if ok.is_none() {
                        cluster = None;
                    }
                }
            }
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn subscribe_loop(
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
            let mut con = client.pubsub_connection(io_timeout)?;
            con.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut ps = con.as_pubsub();
            ps.subscribe(&channel)?;
            up = true;
            if tx.send(Notice::Up).is_err() {
                return Ok(());
            }
            loop {
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                match ps.get_message() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// A server-clock estimate over a virtual local clock (µs).
    fn virtual_clock(local_us: u64) -> (Clock, Arc<AtomicU64>) {
        let local = Arc::new(AtomicU64::new(local_us));
        let clock = Clock {
            local: Local::Manual(local.clone()),
            ..Clock::new(TimeSource::Server)
        };
        (clock, local)
    }

    fn claimed(id: &str, shard: u32, due_ms: u64, node: u32) -> Claimed {
        Claimed {
            delivery: Delivery {
                id: id.into(),
                payload: Vec::new(),
                due_ms,
                attempt: 1,
                version: 1,
                shard,
                epoch: 1,
                claimed_at_ms: 0,
                recurrence: None,
            },
            next: None,
            node,
        }
    }

    /// Two Cluster nodes whose clocks disagree by 50 ms, each holding a shard, and a task
    /// claimed ahead on each, both with the same run-at. Steps the local clock 100 µs at a
    /// time and records, for each delivery, what its node's clock read then: never before
    /// the run-at, and late by less than a millisecond. A single estimate fed by both nodes
    /// (the later of the two) hands node b's task out with node a's, 50 ms before node b's
    /// clock reaches the run-at. Then shard 1 moves from node b to node a (a resharding): a
    /// task claimed on node b before the move waits for node b's clock, one claimed on node a
    /// after it for node a's.
    #[test]
    fn a_claim_waits_for_the_clock_of_the_node_that_claimed_it() {
        let t0: u64 = 1_800_000_000_000_000;
        let (clock, local) = virtual_clock(t0);
        let offset = |node: &str| -> i64 {
            match node {
                "node-a" => 30_000, // node a's clock: local + 30 ms
                _ => -20_000,       // node b's clock: local - 20 ms
            }
        };
        // Exact samples: the reply arrived the instant the node read its clock.
        let sample = |node: &str| {
            let now = local.load(Ordering::SeqCst);
            clock.observe(node, now as i64 + offset(node), now)
        };
        let a = sample("node-a");
        let b = sample("node-b");
        assert_ne!(a, b);
        let mut d = Deliverer::new(clock.clone());
        let lease = Lease {
            epoch: 1,
            valid_until_us: u64::MAX,
        };
        d.set_leases(HashMap::from([(0, lease), (1, lease)]), &mut |_| {});
        // Both due 200 ms from now by the local clock: node a's clock reaches that 30 ms
        // early, node b's 20 ms late.
        let due = t0 / 1000 + 200;
        d.push(claimed("on-b", 1, due, b));
        d.push(claimed("on-a", 0, due, a));

        // Node clock readings at delivery, by task id.
        let mut seen: Vec<(String, u64, u64)> = Vec::new();
        let run = |d: &mut Deliverer, until_us: u64, seen: &mut Vec<(String, u64, u64)>| {
            while local.load(Ordering::SeqCst) < until_us {
                local.fetch_add(100, Ordering::SeqCst);
                let now = local.load(Ordering::SeqCst);
                if now % 100_000 == 0 {
                    // The clock thread's probes, every 100 ms.
                    sample("node-a");
                    sample("node-b");
                }
                d.deliver(
                    &mut |x| {
                        let node = if x.id.ends_with("-a") {
                            "node-a"
                        } else {
                            "node-b"
                        };
                        let node_now_us = (now as i64 + offset(node)) as u64;
                        seen.push((x.id.clone(), node_now_us, x.due_ms));
                        Outcome::Ack
                    },
                    &mut |_| {},
                );
            }
        };
        run(&mut d, t0 + 400_000, &mut seen);
        assert_eq!(seen.len(), 2, "{seen:?}");
        for (id, node_now_us, due_ms) in &seen {
            assert!(
                *node_now_us >= due_ms * 1000,
                "{id} delivered {} µs before its node's clock reached its run-at",
                due_ms * 1000 - node_now_us
            );
            assert!(
                *node_now_us < due_ms * 1000 + 1_000,
                "{id} delivered {} µs late",
                node_now_us - due_ms * 1000
            );
        }
        assert_eq!(seen[0].0, "on-a", "node a's clock reaches its run-at first");

        // Shard 1 moves to node a. The claim made on node b before the move still waits for
        // node b's clock; a claim made on node a after it waits for node a's.
        seen.clear();
        let base = local.load(Ordering::SeqCst);
        let due = base / 1000 + 100;
        d.push(claimed("before-move-b", 1, due, b));
        d.push(claimed("after-move-a", 1, due, a));
        run(&mut d, base + 300_000, &mut seen);
        assert_eq!(seen.len(), 2, "{seen:?}");
        for (id, node_now_us, due_ms) in &seen {
            assert!(*node_now_us >= due_ms * 1000, "{id} early: {seen:?}");
            assert!(*node_now_us < due_ms * 1000 + 1_000, "{id} late: {seen:?}");
        }
        assert_eq!(seen[0].0, "after-move-a");
    }

    /// A node's estimate is a lower bound: a late reply (one that waited, say, for an fsync)
    /// lowers nothing, an exact one tightens it, and without samples it slides back 1 ms a
    /// second; a node never read has no estimate at all, so nothing claimed on it could be
    /// delivered.
    #[test]
    fn node_estimates_are_lower_bounds_of_their_own_node() {
        let t0: u64 = 1_800_000_000_000_000;
        let (clock, local) = virtual_clock(t0);
        let server = t0 as i64 + 5_000; // the node's clock: local + 5 ms
                                        // A reply that took 3 ms to arrive after the node read its clock.
        let n = clock.observe("n", server, t0 + 3_000);
        local.store(t0 + 3_000, Ordering::SeqCst);
        assert_eq!(clock.node_now_us(n), Some(t0 + 3_000 + 2_000));
        // An exact reply tightens it ...
        clock.observe("n", server + 3_000, t0 + 3_000);
        assert_eq!(clock.node_now_us(n), Some(t0 + 3_000 + 5_000));
        // ... a late one (10 ms on its way) does not loosen it: 10 ms later the estimate has
        // slid back by 10 µs (1 ms a second), not by 10 ms.
        clock.observe("n", server + 3_000, t0 + 13_000);
        local.store(t0 + 13_000, Ordering::SeqCst);
        assert_eq!(clock.node_now_us(n), Some(t0 + 13_000 + 5_000 - 10));
        // Ten seconds without a sample: 10 ms behind, never ahead.
        local.store(t0 + 10_013_000, Ordering::SeqCst);
        assert_eq!(clock.node_now_us(n), Some(t0 + 10_013_000 + 5_000 - 10_010));
        let never = clock.node("never-read");
        assert_eq!(clock.node_now_us(never), None);
        let mut d = Deliverer::new(clock.clone());
        d.push(claimed("x", 0, 0, never));
        assert_eq!(d.deliver(&mut |_| Outcome::Ack, &mut |_| {}), 0);
    }

    #[test]
    fn notices_carry_one_or_many_tasks_and_reject_garbage() {
        let got: Vec<(u32, u64, u64, String)> = parse_notice(b"3:7:1000:2:a:8:1001:4:b:c:")
            .unwrap()
            .into_iter()
            .map(|n| match n {
                Notice::Task {
                    shard,
                    version,
                    run_at,
                    id,
                } => (shard, version, run_at, id),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![(3, 7, 1000, "a:".into()), (3, 8, 1001, "b:c:".into())]
        );
        assert!(parse_notice(b"3:7:1000:9:short").is_none());
        assert!(parse_notice(b"x:7:1000:1:a").is_none());
        assert!(parse_notice(b"3").is_none());
    }

    /// On a real 3-node Redis Cluster, on the server's clock: every claim is filed under the
    /// node that holds its shard (by the node id its reply carries), the worker ends up with
    /// one estimate per node and no other, and each delivery comes when its own node's clock
    /// (read right then with `TIME` on that node) has reached its run-at. (The nodes share
    /// this machine's clock, so the disagreement itself is the unit test's above.)
    #[test]
    fn on_a_cluster_claims_are_filed_under_the_node_that_ran_them() {
        let c = crate::server::RedisCluster::start(3)
            .unwrap_or_else(|e| panic!("cannot run the Redis Cluster test: {e}"));
        let mut cfg = Config::cluster(&c.seeds(), "clk");
        cfg.shards = 12;
        let mut nodes: Vec<(String, redis::Connection)> = c
            .nodes()
            .iter()
            .map(|n| {
                let mut con = redis::Client::open(n.url().as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap();
                (id, con)
            })
            .collect();
        let mut p = crate::Producer::connect(&cfg).unwrap();
        let mut w = Worker::connect(&cfg).unwrap();
        // Each shard's node: the one that serves its keys (the others answer MOVED).
        let shard_node: Vec<usize> = (0..12)
            .map(|s| {
                let key = &w.ns.shards[s].0[3];
                let owners: Vec<usize> = (0..nodes.len())
                    .filter(|&n| {
                        redis::cmd("EXISTS")
                            .arg(key)
                            .query::<i64>(&mut nodes[n].1)
                            .is_ok()
                    })
                    .collect();
                assert_eq!(owners.len(), 1, "shard {s}: {owners:?}");
                owners[0]
            })
            .collect();
        let ids: Vec<String> = (0..48).map(|i| format!("task-{i}")).collect();
        for id in &ids {
            p.schedule(id, crate::RunAt::After(Duration::from_millis(300)), b"")
                .unwrap();
        }
        // One step takes the shards, reads the windows and claims everything (due within the
        // claim horizon): each claim must sit in its shard's node's queue.
        w.io_step(false).unwrap();
        let names: HashMap<u32, String> = w
            .clock
            .lock()
            .ids
            .iter()
            .map(|(id, &i)| (i, id.clone()))
            .collect();
        let mut filed = 0;
        for (i, q) in w.deliverer.ready.iter().enumerate() {
            for c in q.values() {
                assert_eq!(c.node, i as u32);
                let holder = &nodes[shard_node[c.delivery.shard as usize]].0;
                assert_eq!(
                    &names[&c.node], holder,
                    "{} filed under another node",
                    c.delivery.id
                );
                filed += 1;
            }
        }
        assert_eq!(filed, ids.len(), "all claimed in one step");
        let mut delivered = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while delivered < ids.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "{delivered} delivered"
            );
            delivered += w
                .tick(&mut |d| {
                    let con = &mut nodes[shard_node[d.shard as usize]].1;
                    let (secs, us): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
                    let node_now_us = secs * 1_000_000 + us;
                    assert!(
                        node_now_us >= d.due_ms * 1000,
                        "{} delivered {} µs before its node's clock reached its run-at",
                        d.id,
                        d.due_ms * 1000 - node_now_us
                    );
                    Outcome::Ack
                })
                .unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut seen: Vec<String> = w.clock.lock().ids.keys().cloned().collect();
        let mut all: Vec<String> = nodes.iter().map(|(id, _)| id.clone()).collect();
        seen.sort();
        all.sort();
        assert_eq!(seen, all, "one estimate per node, and only those");
        assert!(w.clock.lock().clocks.iter().all(Option::is_some));

        // The clock thread alone reads every primary, each under its own id.
        let clock = Clock::new(TimeSource::Server);
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (client, clock, stop) = (cfg.client().unwrap(), clock.clone(), stop.clone());
            std::thread::spawn(move || clock_loop(client, clock, stop, Duration::from_secs(5)))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut probed: Vec<String> = Vec::new();
        while std::time::Instant::now() < deadline {
            probed = clock.lock().ids.keys().cloned().collect();
            probed.sort();
            if probed == all {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Later rounds read the primaries one by one: every estimate stays fresh.
        std::thread::sleep(Duration::from_millis(350));
        let fresh = clock
            .lock()
            .clocks
            .iter()
            .all(|c| c.is_some_and(|c| c.observed_at_us + 250_000 > local_us()));
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap();
        assert_eq!(probed, all);
        assert!(fresh, "{:?}", clock.lock());
    }

    /// A claim Redis applied whose reply never came (the connection died on the way back):
    /// the worker sends it again, forced, on its next step, and the task is delivered at its
    /// run-at, not after the visibility timeout (30 s here). Nothing is delivered before the
    /// run-at, and a claim whose reply is lost again stays unsure until one comes back. Each
    /// applied claim counts as an attempt (here 3: two lost, one delivered). Manual clock.
    #[test]
    fn a_claim_whose_reply_was_lost_is_delivered_at_its_run_at() {
        let server = crate::server::RedisServer::start()
            .unwrap_or_else(|e| panic!("cannot run the Redis tests: {e}"));
        let t0 = 1_000_000;
        let time = crate::ManualTime::new(t0);
        let mut cfg = Config::new(server.url(), "lost");
        cfg.shards = 2;
        cfg.time = TimeSource::Manual(time.clone());
        let mut p = crate::Producer::connect(&cfg).unwrap();
        let mut w = Worker::connect(&cfg).unwrap();
        p.schedule("lost", crate::RunAt::AtMillis(t0 + 500), b"x")
            .unwrap();
        let mut got: Vec<(String, u32, u64)> = Vec::new();
        let tick = |w: &mut Worker, got: &mut Vec<(String, u32, u64)>| {
            w.tick(&mut |d| {
                got.push((d.id.clone(), d.attempt, time.now_ms()));
                Outcome::Ack
            })
        };
        // The first step claims it (due within claim_ahead); the reply is lost.
        w.lose_claim_replies = true;
        assert!(matches!(tick(&mut w, &mut got), Err(Error::Redis(_))));
        let in_flight = |p: &mut crate::Producer| {
            matches!(
                p.state("lost").unwrap(),
                crate::TaskState::InFlight { attempt: 1, .. }
            )
        };
        assert!(in_flight(&mut p), "Redis applied the claim");
        // Lost again: still unsure.
        time.set_ms(t0 + 100);
        w.lose_claim_replies = true;
        let lost_again = tick(&mut w, &mut got).is_err();
        // The next step claims it again and holds it until its run-at.
        time.set_ms(t0 + 499);
        assert_eq!(tick(&mut w, &mut got).unwrap(), 0);
        time.set_ms(t0 + 500);
        assert_eq!(tick(&mut w, &mut got).unwrap(), 1);
        assert_eq!(got, vec![("lost".to_string(), 3, t0 + 500)]);
        assert!(lost_again, "the second step sent the claim again");
        assert_eq!(
            p.state("lost").unwrap(),
            crate::TaskState::Unknown,
            "acknowledged"
        );
    }
    /// The reply to a lease acquisition is lost (Redis restarted just after applying it): the
    /// shard is the worker's in Redis, unknown to the worker. Asking again takes it at once,
    /// not after the lease runs out.
    #[test]
    fn an_acquisition_whose_reply_was_lost_is_repeated_at_once() {
        let server = crate::server::RedisServer::start()
            .unwrap_or_else(|e| panic!("cannot run the Redis tests: {e}"));
        let t0 = 1_000_000;
        let time = crate::ManualTime::new(t0);
        let mut cfg = Config::new(server.url(), "lost-lease");
        cfg.shards = 1;
        cfg.time = TimeSource::Manual(time.clone());
        let mut p = crate::Producer::connect(&cfg).unwrap();
        let mut w = Worker::connect(&cfg).unwrap();
        p.schedule("a", crate::RunAt::AtMillis(t0 + 100), b"x")
            .unwrap();
        // The worker's own acquisition, applied by Redis; its reply never reached the worker.
        let lease = cfg.lease.as_millis().to_string();
        let (id, now) = (w.id().to_string(), cfg.now_arg());
        let r = w
            .shard_call(&scripts().acquire, 0, &[now, id, lease, "0".into()])
            .unwrap();
        assert!(int(&array(r).unwrap()[0]).unwrap() > 0, "acquired in Redis");
        let mut got = Vec::new();
        for ms in [0, 50, 100] {
            time.set_ms(t0 + ms);
            w.tick(&mut |d| {
                got.push((d.id.clone(), time.now_ms()));
                Outcome::Ack
            })
            .unwrap();
        }
        assert_eq!(w.owned_shards(), [0], "the worker holds its shard");
        assert_eq!(got, [("a".to_string(), t0 + 100)], "delivered on time");
    }
}
