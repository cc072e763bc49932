//! The durable workload: many tasks with delays spread over a minute, delivered by 1 to N
//! workers, beside the common design run on the same Redis in the same process: one sorted set
//! polled every second (the Sidekiq / rq-scheduler scheduler loop).
//!
//! For each design and worker count it reports the schedule rate (tasks stored per second by
//! one producer, while the workers run), delivery lateness (delivery instant minus run-at,
//! first deliveries, p50 / p99 / max) and Redis memory per pending task (`used_memory` from
//! `INFO memory`, minus the empty server's, over the tasks pending when scheduling ends).
//!
//! Workers are threads of this process, each with its own connections, as separate processes
//! would have. [`redis_benchmark_zadd`] runs `redis-benchmark -P 64 -t zadd` against the same
//! server for a reference schedule rate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Script;

use crate::server::RedisServer;
use crate::{Config, Error, Outcome, Producer, RunAt, Task, Worker};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// A Redis URL; `None`: start a private `redis-server` (AOF, `appendfsync always`).
    /// On a given server the benchmark uses its own namespace and deletes its keys afterwards.
    pub url: Option<String>,
    /// Tasks per run (default 10^6).
    pub tasks: u64,
    /// Delays are uniform in `0..=max_delay` (default 60 s).
    pub max_delay: Duration,
    /// Worker counts to run, each a separate run per design (default 1 and 4).
    pub workers: Vec<usize>,
    /// Payload bytes per task (default 64).
    pub payload: usize,
    /// The baseline's poll interval (default 1 s).
    pub poll_interval: Duration,
    /// Shards of the durable namespace (default 16).
    pub shards: u32,
    /// Run tickwheel-redis (default true).
    pub durable: bool,
    /// Run the polling baseline (default true).
    pub baseline: bool,
    /// [`Config::confirm_replicas`] of the tickwheel-redis runs: one run per value and worker
    /// count (default `[0]`). When any is above 0 and the benchmark starts its own server, it
    /// starts as many replicas of it (`REPLICAOF`, the same AOF settings) for every run, so
    /// runs with and without confirmation compare on the same set-up; on a given server
    /// ([`url`](BenchConfig::url)) its replicas must be there.
    pub confirm: Vec<u32>,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            url: None,
            tasks: 1_000_000,
            max_delay: Duration::from_secs(60),
            workers: vec![1, 4],
            payload: 64,
            poll_interval: Duration::from_secs(1),
            shards: 16,
            durable: true,
            baseline: true,
            confirm: vec![0],
        }
    }
}

/// The figures of one run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// `tickwheel-redis` or `polled zset (1 s)`.
    pub design: String,
    /// Workers that delivered.
    pub workers: usize,
    /// Tasks scheduled.
    pub tasks: u64,
    /// Tasks per second stored by one producer.
    pub schedule_rate: f64,
    /// Distinct tasks delivered before the run's time limit.
    pub delivered: u64,
    /// Deliveries beyond the first of a task.
    pub duplicates: u64,
    /// Lateness of first deliveries, ms: p50, p99, max.
    pub lateness_ms: [f64; 3],
    /// The same for tasks due after scheduling ended (the store full, the producer idle).
    pub lateness_settled_ms: [f64; 3],
    /// Redis `used_memory` growth per pending task, bytes.
    pub memory_per_task: f64,
    /// Payload bytes per task.
    pub payload: usize,
    /// Replicas that confirmed each write ([`Config::confirm_replicas`]; 0 for the baseline).
    pub confirm_replicas: u32,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Tiny deterministic generator for delays: both entrants draw the same sequence. (The
/// repository's shared generator lives in the unpublished lab crate, which this library
/// cannot depend on.)
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Redis's `used_memory` (from `INFO memory`), in bytes.
pub fn used_memory(con: &mut redis::Connection) -> Result<u64, Error> {
    let info: String = redis::cmd("INFO").arg("memory").query(con)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Error::Protocol("INFO memory without used_memory".into()))
}

fn delete_prefix(con: &mut redis::Connection, pattern: &str) -> Result<(), Error> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(con)?;
    for k in keys {
        redis::cmd("DEL").arg(k).query::<()>(con)?;
    }
    Ok(())
}

/// Collected first-delivery lateness (µs) and duplicate counts.
struct Sink {
    /// (due ms, lateness µs) of first deliveries.
    lateness_us: Vec<(u64, i64)>,
    seen: std::collections::HashSet<String>,
    duplicates: u64,
}

impl Sink {
    /// Sized for every task up front: growing a million-entry set mid-run would stall the
    /// worker thread that records into it, and show up as the design's lateness.
    fn with_capacity(n: usize) -> Sink {
        Sink {
            lateness_us: Vec::with_capacity(n),
            seen: std::collections::HashSet::with_capacity(n),
            duplicates: 0,
        }
    }

    fn record(&mut self, id: &str, due_ms: u64, at_us: u64) {
        if self.seen.insert(id.to_string()) {
            self.lateness_us
                .push((due_ms, at_us as i64 - (due_ms * 1000) as i64));
        } else {
            self.duplicates += 1;
        }
    }
}

/// Percentiles of all first deliveries, and of those due at or after `settled_ms`.
fn split_percentiles(v: &[(u64, i64)], settled_ms: u64) -> ([f64; 3], [f64; 3]) {
    let mut all: Vec<i64> = v.iter().map(|x| x.1).collect();
    let mut settled: Vec<i64> = v
        .iter()
        .filter(|x| x.0 >= settled_ms)
        .map(|x| x.1)
        .collect();
    (percentiles(&mut all), percentiles(&mut settled))
}

fn percentiles(v: &mut [i64]) -> [f64; 3] {
    if v.is_empty() {
        return [f64::NAN; 3];
    }
    v.sort_unstable();
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    [p(0.5), p(0.99), p(1.0)]
}

/// Runs every configured design and worker count; `progress` hears what is going on.
pub fn run(cfg: &BenchConfig, progress: impl FnMut(&str)) -> Result<Vec<RunReport>, Error> {
    Ok(run_with_reference(cfg, false, progress)?.0)
}

/// [`run`], and when `reference` is set also [`redis_benchmark_zadd`] (10^6 ZADDs) against the
/// same server before the runs.
pub fn run_with_reference(
    cfg: &BenchConfig,
    reference: bool,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<RunReport>, Option<f64>), Error> {
    if cfg.workers.contains(&0) || cfg.tasks == 0 {
        return Err(Error::InvalidConfig(
            "tasks and worker counts must be positive".into(),
        ));
    }
    if cfg.confirm.is_empty() {
        return Err(Error::InvalidConfig(
            "confirm needs at least one value (0: no confirmation)".into(),
        ));
    }
    let server = match &cfg.url {
        Some(_) => None,
        None => Some(RedisServer::start()?),
    };
    // Replicas of the private server, kept for every run.
    let wanted = cfg.confirm.iter().copied().max().unwrap_or(0);
    let _replicas = match &server {
        Some(primary) if wanted > 0 => {
            progress(&format!("{wanted} replica(s) of the private redis-server"));
            (0..wanted)
                .map(|_| RedisServer::start_replica_of(primary))
                .collect::<Result<Vec<_>, _>>()?
        }
        _ => Vec::new(),
    };
    let url = cfg
        .url
        .clone()
        .unwrap_or_else(|| server.as_ref().expect("started").url());
    let zadd = if reference {
        progress("redis-benchmark -P 64 -t zadd -n 1000000");
        redis_benchmark_zadd(&url, 1_000_000)
    } else {
        None
    };
    let mut reports = Vec::new();
    for &workers in &cfg.workers {
        for &confirm in cfg.confirm.iter().filter(|_| cfg.durable) {
            progress(&format!(
                "{}, {workers} worker(s), {} tasks",
                durable_design(confirm),
                cfg.tasks
            ));
            reports.push(run_durable(cfg, &url, workers, confirm)?);
        }
        if cfg.baseline {
            progress(&format!(
                "polled zset, {workers} worker(s), {} tasks",
                cfg.tasks
            ));
            reports.push(run_polled(cfg, &url, workers)?);
        }
    }
    Ok((reports, zadd))
}

/// The name of a tickwheel-redis run: `tickwheel-redis`, or with confirmation
/// `tickwheel-redis WAIT <n>`.
pub fn durable_design(confirm: u32) -> String {
    match confirm {
        0 => "tickwheel-redis".into(),
        n => format!("tickwheel-redis WAIT {n}"),
    }
}

fn run_durable(
    cfg: &BenchConfig,
    url: &str,
    workers: usize,
    confirm: u32,
) -> Result<RunReport, Error> {
    let ns = format!("bench-{}", std::process::id());
    let mut config = Config::new(url, &ns);
    config.shards = cfg.shards;
    config.confirm_replicas = confirm;
    crate::connection::Endpoint::of(&config)?; // the URL's errors, as the clients report them
                                               // The memory figures read one server's INFO: the durable workload runs on one server.
    let mut con = redis::Client::open(url)?.get_connection()?;
    delete_prefix(&mut con, &format!("tw:{{{ns}*"))?;
    let base = used_memory(&mut con)?;
    let mut producer = Producer::connect(&config)?;
    let sink = Arc::new(Mutex::new(Sink::with_capacity(cfg.tasks as usize)));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut running = Vec::new();
    for _ in 0..workers {
        running.push(spawn_durable_worker(&config, &sink, &delivered)?);
    }
    std::thread::sleep(Duration::from_millis(500)); // leases taken, windows loaded

    let started = Instant::now();
    schedule_durable(&mut producer, cfg)?;
    let secs = started.elapsed().as_secs_f64();
    let settled_ms = now_us() / 1000;
    let pending = producer.len()?;
    let memory = used_memory(&mut con)?.saturating_sub(base) as f64 / pending.max(1) as f64;
    wait_for_deliveries(&delivered, cfg);
    running.iter().for_each(|(stop, _)| stop.stop());
    for (_, h) in running {
        h.join()
            .map_err(|_| Error::Protocol("worker thread panicked".into()))??;
    }
    delete_prefix(&mut con, &format!("tw:{{{ns}*"))?;
    let sink = sink.lock().expect("sink");
    let mut r = report(
        durable_design(confirm),
        workers,
        cfg,
        secs,
        memory,
        &sink,
        settled_ms,
    );
    r.confirm_replicas = confirm;
    Ok(r)
}

/// A worker on its own thread, recording each delivery in `sink` (1024 at a time).
#[allow(clippy::type_complexity)]
fn spawn_durable_worker(
    config: &Config,
    sink: &Arc<Mutex<Sink>>,
    delivered: &Arc<AtomicU64>,
) -> Result<
    (
        crate::StopHandle,
        std::thread::JoinHandle<Result<(), Error>>,
    ),
    Error,
> {
    let mut w = Worker::connect(config)?;
    let stop = w.stop_handle();
    let (sink, delivered) = (sink.clone(), delivered.clone());
    let handle = std::thread::spawn(move || {
        let mut local: Vec<(String, u64, u64)> = Vec::new();
        let flush = |local: &mut Vec<(String, u64, u64)>| {
            let mut s = sink.lock().expect("sink");
            for (id, due, at) in local.drain(..) {
                s.record(&id, due, at);
            }
        };
        let r = w.run(|d| {
            local.push((d.id.clone(), d.due_ms, now_us()));
            delivered.fetch_add(1, Ordering::Relaxed);
            if local.len() >= 1024 {
                flush(&mut local);
            }
            Outcome::Ack
        });
        flush(&mut local);
        r
    });
    Ok((stop, handle))
}

/// The workload's tasks, 10 000 a batch: each id (`task-<n>`) with its delay in ms, uniform
/// in 0..=`max_delay`, from one seeded generator, so that both entrants get the same tasks.
fn task_batches(cfg: &BenchConfig) -> impl Iterator<Item = Vec<(String, u64)>> {
    const BATCH: u64 = 10_000;
    let (tasks, max) = (cfg.tasks, cfg.max_delay.as_millis() as u64 + 1);
    let mut rng = Lcg(42);
    (0..tasks.div_ceil(BATCH)).map(move |b| {
        (b * BATCH..((b + 1) * BATCH).min(tasks))
            .map(|j| (format!("task-{j}"), rng.next(max)))
            .collect()
    })
}

/// Schedules the workload's tasks, one `schedule_many` a batch, each after its delay.
fn schedule_durable(producer: &mut Producer, cfg: &BenchConfig) -> Result<(), Error> {
    let payload = vec![b'p'; cfg.payload];
    for batch in task_batches(cfg) {
        producer.schedule_many(batch.iter().map(|(id, delay)| {
            Task::new(id, RunAt::After(Duration::from_millis(*delay)), &payload)
        }))?;
    }
    Ok(())
}

/// Waits until every task is delivered, or the longest delay and 30 s more have passed.
fn wait_for_deliveries(delivered: &AtomicU64, cfg: &BenchConfig) {
    let limit = Instant::now() + cfg.max_delay + Duration::from_secs(30);
    while delivered.load(Ordering::Relaxed) < cfg.tasks && Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A run's report from what its sink recorded.
fn report(
    design: String,
    workers: usize,
    cfg: &BenchConfig,
    secs: f64,
    memory_per_task: f64,
    sink: &Sink,
    settled_ms: u64,
) -> RunReport {
    let (all, settled) = split_percentiles(&sink.lateness_us, settled_ms);
    RunReport {
        design,
        workers,
        tasks: cfg.tasks,
        schedule_rate: cfg.tasks as f64 / secs,
        delivered: sink.seen.len() as u64,
        duplicates: sink.duplicates,
        lateness_ms: all,
        lateness_settled_ms: settled,
        memory_per_task,
        payload: cfg.payload,
        confirm_replicas: 0,
    }
}

/// The baseline's claim: everything due, in batches, moved out atomically.
const POLL_CLAIM: &str = r#"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, 1000)
local out = {}
for i = 1, #ids, 2 do
  if redis.call('ZREM', KEYS[1], ids[i]) == 1 then
    out[#out + 1] = ids[i]
    out[#out + 1] = ids[i + 1]
    out[#out + 1] = redis.call('HGET', KEYS[2], ids[i])
    redis.call('HDEL', KEYS[2], ids[i])
  end
end
return out
"#;

fn run_polled(cfg: &BenchConfig, url: &str, workers: usize) -> Result<RunReport, Error> {
    let prefix = format!("poll-{}", std::process::id());
    let keys = (format!("{prefix}:schedule"), format!("{prefix}:payloads"));
    let client = redis::Client::open(url).map_err(|e| Error::invalid_url(url, e.to_string()))?;
    let mut con = client.get_connection()?;
    let clear = |con: &mut redis::Connection| -> Result<(), Error> {
        Ok(redis::cmd("DEL")
            .arg(&keys.0)
            .arg(&keys.1)
            .query::<()>(con)?)
    };
    clear(&mut con)?;
    let base = used_memory(&mut con)?;
    let sink = Arc::new(Mutex::new(Sink::with_capacity(cfg.tasks as usize)));
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let poller = Poller {
                client: client.clone(),
                keys: keys.clone(),
                interval: cfg.poll_interval,
                offset: cfg.poll_interval.mul_f64(w as f64 / workers as f64),
            };
            let (sink, delivered, stop) = (sink.clone(), delivered.clone(), stop.clone());
            std::thread::spawn(move || poller.run(&sink, &delivered, &stop))
        })
        .collect();

    let started = Instant::now();
    schedule_polled(&mut con, &keys, cfg)?;
    let secs = started.elapsed().as_secs_f64();
    let settled_ms = now_us() / 1000;
    let pending: u64 = redis::cmd("ZCARD").arg(&keys.0).query(&mut con)?;
    let memory = used_memory(&mut con)?.saturating_sub(base) as f64 / pending.max(1) as f64;
    wait_for_deliveries(&delivered, cfg);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join()
            .map_err(|_| Error::Protocol("poller thread panicked".into()))??;
    }
    clear(&mut con)?;
    let sink = sink.lock().expect("sink");
    let design = format!("polled zset ({} ms)", cfg.poll_interval.as_millis());
    Ok(report(
        design, workers, cfg, secs, memory, &sink, settled_ms,
    ))
}

/// One polling worker of the baseline: (sorted set, payload hash) keys, its poll interval
/// and its offset in it (workers spread their polls, as Sidekiq's random offsets do).
struct Poller {
    client: redis::Client,
    keys: (String, String),
    interval: Duration,
    offset: Duration,
}

impl Poller {
    fn run(
        &self,
        sink: &Mutex<Sink>,
        delivered: &AtomicU64,
        stop: &AtomicBool,
    ) -> Result<(), Error> {
        let mut con = self.client.get_connection()?;
        let script = Script::new(POLL_CLAIM);
        let mut next = Instant::now() + self.offset;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            next += self.interval;
            loop {
                let now_ms = now_us() / 1000;
                let got: Vec<redis::Value> = script
                    .key(&self.keys.0)
                    .key(&self.keys.1)
                    .arg(now_ms)
                    .invoke(&mut con)?;
                let n = got.len() / 3;
                let mut s = sink.lock().expect("sink");
                for t in got.chunks(3) {
                    let id = crate::connection::string(t[0].clone())?;
                    let due = crate::connection::int(&t[1])? as u64;
                    s.record(&id, due, now_us());
                }
                delivered.fetch_add(n as u64, Ordering::Relaxed);
                if n < 1000 {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// The baseline's schedule: a ZADD and an HSET per task, one pipeline a batch.
fn schedule_polled(
    con: &mut redis::Connection,
    (zset, hash): &(String, String),
    cfg: &BenchConfig,
) -> Result<(), Error> {
    let payload = vec![b'p'; cfg.payload];
    for batch in task_batches(cfg) {
        let now_ms = now_us() / 1000;
        let mut pipe = redis::pipe();
        for (id, delay) in &batch {
            pipe.cmd("ZADD")
                .arg(zset)
                .arg(now_ms + delay)
                .arg(id)
                .ignore();
            pipe.cmd("HSET").arg(hash).arg(id).arg(&payload).ignore();
        }
        pipe.query::<()>(con)?;
    }
    Ok(())
}

/// `redis-benchmark -P 64 -t zadd -n <n> -q` against `url`'s host and port: ZADDs per second,
/// or `None` when `redis-benchmark` is missing or its output is not understood. It writes the
/// key `myzset` (and deletes it afterwards).
pub fn redis_benchmark_zadd(url: &str, n: u64) -> Option<f64> {
    let info = redis::Client::open(url).ok()?.get_connection_info().clone();
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(h, p) => (h.clone(), *p),
        _ => return None,
    };
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-P",
            "64",
            "-t",
            "zadd",
            "-q",
        ])
        .args(["-n", &n.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .split(['\r', '\n'])
        .filter_map(|l| l.trim().strip_prefix("ZADD: "))
        .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .next_back()?;
    if let Ok(mut con) = redis::Client::open(url).and_then(|c| c.get_connection()) {
        let _: Result<(), _> = redis::cmd("DEL").arg("myzset").query(&mut con);
    }
    Some(rate)
}

/// The reports as a plain-text table: lateness of all first deliveries, then of those due
/// after scheduling ended ("settled").
pub fn table(reports: &[RunReport]) -> String {
    let mut s = format!(
        "{:<22} {:>3} {:>8} {:>10} {:>9} {:>23} {:>23} {:>7}\n",
        "design",
        "wkr",
        "tasks",
        "sched/s",
        "delivered",
        "late p50/p99/max ms",
        "settled p50/p99/max",
        "B/task"
    );
    let l = |x: [f64; 3]| format!("{:.1}/{:.1}/{:.0}", x[0], x[1], x[2]);
    for r in reports {
        s += &format!(
            "{:<22} {:>3} {:>8} {:>10.0} {:>9} {:>23} {:>23} {:>7.0}\n",
            r.design,
            r.workers,
            r.tasks,
            r.schedule_rate,
            r.delivered,
            l(r.lateness_ms),
            l(r.lateness_settled_ms),
            r.memory_per_task
        );
    }
    if let Some(r) = reports.first() {
        s += &format!(
            "payload {} B/task; memory target 2 x payload + 64 = {} B/task\n",
            r.payload,
            2 * r.payload + 64
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_entrants_get_every_task_once_in_batches_of_at_most_10_000() {
        let cfg = BenchConfig {
            tasks: 25_001,
            max_delay: Duration::from_millis(7),
            ..BenchConfig::default()
        };
        let batches: Vec<Vec<(String, u64)>> = task_batches(&cfg).collect();
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [10_000, 10_000, 5_001]);
        let tasks: Vec<&(String, u64)> = batches.iter().flatten().collect();
        for (j, (id, delay)) in tasks.iter().enumerate() {
            assert_eq!(*id, format!("task-{j}"));
            assert!(*delay <= 7, "{id}: {delay} ms");
        }
        let delays: std::collections::BTreeSet<u64> = tasks.iter().map(|t| t.1).collect();
        assert_eq!(delays.len(), 8, "every delay in 0..=7 ms is drawn");
        // The same tasks for the second entrant, and none for an empty workload.
        assert_eq!(task_batches(&cfg).collect::<Vec<_>>(), batches);
        let none = BenchConfig { tasks: 0, ..cfg };
        assert_eq!(task_batches(&none).count(), 0);
    }
}
