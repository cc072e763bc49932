//! The worker side: leases, the window in a wheel, claims and acknowledgements.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
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

/// How long `run` may hold acknowledgements for the next claim to carry them, ms.
const ACK_HOLD_MS: u64 = 2;

#[derive(Clone, Copy, Debug)]
struct Owned {
    epoch: u64,
    /// End of the window loaded into the wheel (the shard's horizon); `None`: load it.
    loaded_until: Option<u64>,
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
    /// Server clock minus local clock, µs: a lower bound (see `observe_clock`), so the worker
    /// never believes the server's clock is further than it is and wakes early.
    offset_us: i64,
    /// Local µs of the last clock observation.
    observed_at_us: u64,
    next_maintenance: u64,
    /// A window is partly read: the next tick reads on.
    refill_pending: bool,
    /// Acknowledgements not sent yet: they ride with the next claim (see `step`).
    pending_acks: Vec<PendingAck>,
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
            offset_us: 0,
            observed_at_us: 0,
            next_maintenance: 0,
            refill_pending: false,
            pending_acks: Vec::new(),
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
        match &self.cfg.time {
            TimeSource::Manual(t) => t.now_ms(),
            TimeSource::Server => ((local_us() as i64 + self.offset_us) / 1000).max(0) as u64,
        }
    }

    /// Takes in a reading of the server's clock (`server_us`) from a reply that arrived at
    /// local `after_us`. The server read its clock before replying, so `server_us - after_us`
    /// is a lower bound of the offset; the estimate is the tightest recent lower bound,
    /// allowed to slide down by 1 ms per second for clock drift. An estimate that is never
    /// ahead means no early wake-ups: no "not yet" answers to spin on.
    fn observe_clock(&mut self, server_us: i64, after_us: u64) {
        if !matches!(self.cfg.time, TimeSource::Server) {
            return;
        }
        let sample = server_us - after_us as i64;
        let decay = (after_us.saturating_sub(self.observed_at_us) / 1000) as i64;
        self.offset_us = if self.observed_at_us == 0 {
            sample
        } else {
            sample.max(self.offset_us - decay)
        };
        self.observed_at_us = after_us;
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
    /// refills windows when due, then delivers every task due now to `handler`. Returns how
    /// many deliveries it made. [`run`](Worker::run) calls it in a loop; tests on a manual
    /// clock call it directly.
    pub fn tick(&mut self, handler: &mut dyn FnMut(&Delivery) -> Outcome) -> Result<usize, Error> {
        self.step(handler, false)
    }

    /// One step. With `hold`, acknowledgements are kept back when another claim is due within
    /// [`ACK_HOLD_MS`]: the claim's pipeline carries them, so a busy worker pays one write
    /// round trip (one fsync under `appendfsync always`) per wake-up instead of two. Held
    /// acknowledgements are only ever late, never lost: a task whose acknowledgement has not
    /// reached Redis is delivered again after a crash, as at-least-once allows.
    fn step(
        &mut self,
        handler: &mut dyn FnMut(&Delivery) -> Outcome,
        hold: bool,
    ) -> Result<usize, Error> {
        while let Ok(n) = self.notices.try_recv() {
            self.handle_notice(n);
        }
        if self.now_ms() >= self.next_maintenance {
            self.maintain()?;
            let every = self.cfg.maintenance_interval.min(self.cfg.lease / 3);
            self.next_maintenance = self.now_ms() + every.as_millis() as u64;
        }
        self.refill_pending = self.refill()?;
        let n = self.deliver_due(handler)?;
        let soon = self
            .wheel
            .next_expiration()
            .is_some_and(|t| t <= self.now_ms() + ACK_HOLD_MS);
        if !(hold && soon) {
            self.flush_acks()?;
        }
        Ok(n)
    }

    /// Delivers tasks until [`StopHandle::stop`]: sleeps until the wheel's next deadline, a
    /// notification or the next maintenance, whichever comes first. Redis errors are retried
    /// with backoff (50 ms doubling to 2 s) after dropping the in-memory windows, which are
    /// loaded again from Redis. Returns `Err` only for errors a retry cannot fix. On stop it
    /// releases its shards so other workers take them at once.
    pub fn run(&mut self, mut handler: impl FnMut(&Delivery) -> Outcome) -> Result<(), Error> {
        let mut backoff = Duration::from_millis(50);
        while !self.stop.load(Ordering::SeqCst) {
            match self.step(&mut handler, true) {
                Ok(_) => {
                    backoff = Duration::from_millis(50);
                    self.wait();
                }
                Err(Error::Redis(_)) => {
                    self.stats.redis_errors += 1;
                    self.reset();
                    let until = std::time::Instant::now() + backoff;
                    while std::time::Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    self.shutdown();
                    return Err(e);
                }
            }
        }
        self.shutdown();
        Ok(())
    }

    /// Forgets the connection and the in-memory windows (kept: the leases, renewed next).
    fn reset(&mut self) {
        self.con = None;
        self.pending_acks.clear(); // delivered again later: at least once
        self.reload_windows();
    }

    /// Releases every shard and leaves the worker set (best effort: errors are ignored, the
    /// leases then expire on their own).
    pub fn shutdown(&mut self) {
        let _ = self.flush_acks();
        let shards: Vec<u32> = self.owned.keys().copied().collect();
        for s in shards {
            self.release(s);
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
        let now_us = match &self.cfg.time {
            TimeSource::Manual(t) => t.now_ms() * 1000,
            TimeSource::Server => (local_us() as i64 + self.offset_us).max(0) as u64,
        };
        let mut deadline = self.next_maintenance;
        if self.refill_pending {
            deadline = 0;
        }
        if let Some(t) = self.wheel.next_expiration() {
            deadline = deadline.min(t);
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

    fn release(&mut self, shard: u32) {
        if let Some(o) = self.owned.get(&shard).copied() {
            let id = self.id.clone();
            let _ = self.shard_call(&scripts().release, shard, &[id, o.epoch.to_string()]);
            self.drop_shard(shard);
        }
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
            .arg(lease);
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
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let after = local_us();
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
        if let Some(us) = reply.get(2) {
            self.observe_clock(int(us)?, after);
        }
        // Whatever fails to renew is lost.
        for ((s, _), r) in held.into_iter().zip(replies) {
            let r = array(r)?;
            if int(r.first().ok_or_else(|| Error::Protocol("ACQUIRE".into()))?)? == 0 {
                self.stats.fenced += 1;
                self.drop_shard(s);
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
                            loaded_until: None,
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
        let wanted: Vec<(u32, u64, Option<u64>)> = self
            .owned
            .iter()
            .filter_map(|(&s, o)| match o.loaded_until {
                None => Some((s, o.epoch, None)),
                Some(h) if h < now + window * 3 / 4 => Some((s, o.epoch, Some(h))),
                Some(_) => None,
            })
            .collect();
        if wanted.is_empty() {
            return Ok(false);
        }
        // One pipeline (one round trip) reads a share of the budget for every shard.
        let limit = (self.cfg.window_limit / wanted.len()).max(100);
        let mut pipe = redis::pipe();
        for &(s, epoch, from) in &wanted {
            let from_arg = from.map_or_else(|| "-inf".to_string(), |f| f.to_string());
            pipe.cmd("EVALSHA")
                .arg(scripts().load.get_hash())
                .arg(4)
                .arg(self.ns.shards[s as usize].0.as_slice())
                .arg(epoch)
                .arg(from_arg)
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
            for list in r {
                let mut it = array(list)?.into_iter();
                while let (Some(id), Some(at), Some(v)) = (it.next(), it.next(), it.next()) {
                    let (id, at, v) = (string(id)?, int(&at)? as u64, int(&v)? as u64);
                    self.arm(shard, id, at, v);
                }
            }
            if let Some(o) = self.owned.get_mut(&shard) {
                o.loaded_until = Some(horizon as u64);
            }
            more |= (horizon as u64) < to;
        }
        Ok(more)
    }

    /// Claims everything due in one pipeline (one script call per shard and batch), hands
    /// the claims to the handler, then acknowledges them in one pipeline: two round trips per
    /// wake-up whatever the number of shards, which matters when every write waits for an
    /// fsync (`appendfsync always`).
    fn deliver_due(
        &mut self,
        handler: &mut dyn FnMut(&Delivery) -> Outcome,
    ) -> Result<usize, Error> {
        let now = self.now_ms();
        let mut due: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        while let Some((_, k)) = self.wheel.poll_expired(now) {
            self.index.remove(&k);
            due.entry(k.0).or_default().push(k.1);
        }
        if due.is_empty() {
            return Ok(0);
        }
        let vis = self.cfg.visibility_timeout.as_millis() as u64;
        let now_arg = self.cfg.now_arg();
        let sha = scripts().deliver.get_hash().to_string();
        let mut pipe = redis::pipe();
        let acks = std::mem::take(&mut self.pending_acks);
        let ack_calls = self.ack_calls(&mut pipe, &acks);
        let mut calls: Vec<(u32, u64)> = Vec::new();
        for (shard, ids) in &due {
            let Some(epoch) = self.owned.get(shard).map(|o| o.epoch) else {
                continue;
            };
            for chunk in ids.chunks(self.cfg.batch) {
                let keys = &self.ns.shards[*shard as usize].0;
                let cmd = pipe.cmd("EVALSHA").arg(&sha).arg(4).arg(keys.as_slice());
                cmd.arg(&now_arg).arg(epoch).arg(vis).arg(chunk);
                calls.push((*shard, epoch));
            }
        }
        if calls.is_empty() {
            self.pending_acks = acks;
            return Ok(0);
        }
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let after = local_us();
        let mut replies = replies.into_iter();
        let ack_replies: Vec<Value> = replies.by_ref().take(ack_calls.len()).collect();
        self.ack_replies(&acks, ack_calls, ack_replies)?;
        let mut claimed: Vec<Delivery> = Vec::new();
        // Per claim: `None` one-shot, `Some(None)` a recurrence this worker cannot evaluate,
        // `Some(Some(next))` the next run (0: the series ends).
        let mut nexts: Vec<Option<Option<u64>>> = Vec::new();
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
            self.observe_clock(server_us, after);
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
                        self.arm(shard, id.clone(), server_now + vis, version);
                        let (recurrence, next_run) = self.next_run(&rec, due_ms, server_now);
                        nexts.push(next_run);
                        claimed.push(Delivery {
                            id,
                            payload,
                            due_ms,
                            attempt,
                            version,
                            shard,
                            epoch,
                            claimed_at_ms: server_now,
                            recurrence,
                        });
                    }
                    2 => {
                        let id = string(next()?)?;
                        let at = int(&next()?)? as u64;
                        let version = int(&next()?)? as u64;
                        // Not before the next millisecond, should the estimate be ahead.
                        let at = at.max(self.now_ms() + 1);
                        self.arm(shard, id, at, version);
                    }
                    _ => {}
                }
            }
        }
        let mut retries = Vec::new();
        for (d, next) in claimed.iter().zip(nexts) {
            self.stats.delivered += 1;
            match handler(d) {
                Outcome::Ack => match next {
                    Some(None) => self.stats.bad_recurrences += 1,
                    next => self.pending_acks.push(PendingAck {
                        shard: d.shard,
                        epoch: d.epoch,
                        id: d.id.clone(),
                        version: d.version,
                        attempt: d.attempt,
                        next: next.flatten().unwrap_or(0),
                    }),
                },
                Outcome::RetryAfter(after) => retries.push((d, after)),
                Outcome::Leave => {}
            }
        }
        for (d, after) in retries {
            self.retry(d, after)?;
        }
        Ok(claimed.len())
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

    /// Sends the held acknowledgements now.
    fn flush_acks(&mut self) -> Result<(), Error> {
        if self.pending_acks.is_empty() {
            return Ok(());
        }
        let acks = std::mem::take(&mut self.pending_acks);
        let mut pipe = redis::pipe();
        let calls = self.ack_calls(&mut pipe, &acks);
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
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

    fn retry(&mut self, d: &Delivery, after: Duration) -> Result<(), Error> {
        let now_arg = self.cfg.now_arg();
        let delay = after.as_millis() as u64;
        let r = self.shard_call(
            &scripts().retry,
            d.shard,
            &[
                now_arg,
                d.epoch.to_string(),
                d.id.clone(),
                d.version.to_string(),
                d.attempt.to_string(),
                delay.to_string(),
            ],
        )?;
        let r = array(r)?;
        match int(r.first().ok_or_else(|| Error::Protocol("RETRY".into()))?)? {
            1 => {
                self.stats.retried += 1;
                let at = int(r.get(1).ok_or_else(|| Error::Protocol("RETRY".into()))?)? as u64;
                self.arm(d.shard, d.id.clone(), at, d.version);
            }
            -1 => {
                self.stats.fenced += 1;
                self.drop_shard(d.shard);
            }
            _ => self.stats.stale_acks += 1,
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
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
