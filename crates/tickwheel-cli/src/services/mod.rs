//! The real-time services family: timer services with their own threads on the real clock,
//! measured on W4 (N tasks with delays; schedule rate, wall and CPU time, memory, lateness;
//! defined in `docs/ARCHITECTURE.md`, "Workloads").
//!
//! Layout: [`adapters`] puts each timer entrant behind [`RealTimeTimer`], [`floors`] each
//! floor (W4 done with the least work, not timers); this file runs W4 and
//! checks it; [`isolated`] runs it in a child process; [`report`] holds the samples and
//! renders their table.
//!
//! Invariants:
//! * Every entrant gets the same delays and the same callback: [`Log::fire`], which appends
//!   (task, firing time) to a chunk of a preallocated log that its thread claimed (16 bytes a
//!   task, allocated and touched before measuring, so it is not counted as the timer's
//!   memory). Appending keeps the callback's own cost small and the same on every thread: a
//!   slot per task, written in firing order, would cost each callback a cache miss (tasks
//!   fire in deadline order, not in id order), which on two cores is CPU taken from the timer
//!   under test. Runs twice and tasks never run are found when the log is read back.
//! * A task's deadline is taken as `Instant::now()` read just *before* it is scheduled plus
//!   its delay, so a correct timer (which reads the clock later) is never early by this
//!   measure. Firing before that deadline, firing twice, or not firing within
//!   [`GRACE`] after the last deadline fails the run.
//! * Lateness = firing stamp − deadline, over all tasks and, apart, over the tasks due after
//!   the producer finished scheduling ("after producer"): those measure the timer's precision
//!   alone, without a producer competing for the cores. Peak memory is `VmHWM` after a reset of the
//!   kernel's mark, minus the RSS before scheduling; CPU is the whole process's user+system;
//!   the scheduling thread's own CPU time while it schedules is measured apart (it does not
//!   count time the thread waited for a core, so it holds on a busy machine).
//!   `tickwheel bench` runs each entrant in its own process ([`run_isolated`]) so these are
//!   the entrant's own.

use crate::error::{Error, Result};
use crate::machine;
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod adapters;
mod floors;
mod isolated;
pub mod report;

pub use isolated::run_isolated;
use report::{Lateness, ServiceSample};

/// A timer service that runs the real-time workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceEntrant {
    /// tickwheel's `TimerService` with callbacks, scheduled with `schedule_detached_at`
    /// (no handle).
    TimerService,
    /// tickwheel's `TimerService` with callbacks, scheduled with `schedule_at`; every handle
    /// is kept until the run ends.
    TimerServiceHandles,
    /// tickwheel's `TimerService` with no workers (`worker_threads(0)`): the timer thread
    /// runs the callbacks itself; scheduled with `schedule_detached_at`.
    TimerServiceHere,
    /// tokio `sleep` tasks on a multi-thread runtime.
    TokioSleep,
    /// tokio-util's `DelayQueue` in one task, fed through an unbounded channel.
    DelayQueueChannel,
    /// A `BinaryHeap` behind a mutex plus one timer thread.
    HeapThread,
    /// A floor, not a timer: 1 ms buckets filled and run by one thread (see
    /// [`floors::BucketFloor`]).
    BucketFloor,
    /// A floor with a worker hand-off: the bucket floor whose thread hands each due bucket to
    /// worker threads (see [`floors::FloorWorkers`]).
    FloorWorkers,
    /// A floor with callbacks: the bucket floor whose tasks each carry a callback record as a
    /// service of arbitrary closures stores it (see [`floors::FloorClosures`]).
    FloorClosures,
    /// A floor with callbacks kept where they were staged: the callback records stay in the
    /// producer's vectors and the buckets hold their places (see
    /// [`floors::FloorClosures::indexed`]).
    FloorIndexed,
    /// A floor with callbacks filed by the producer: each schedule appends its callback
    /// record to its millisecond's vector itself, and the floor's thread only runs them (see
    /// [`floors::FloorDirect`]).
    FloorDirect,
}

impl ServiceEntrant {
    /// All service entrants, in table order (tickwheel first, then peers).
    pub const ALL: [ServiceEntrant; 11] = [
        ServiceEntrant::TimerService,
        ServiceEntrant::TimerServiceHandles,
        ServiceEntrant::TimerServiceHere,
        ServiceEntrant::TokioSleep,
        ServiceEntrant::DelayQueueChannel,
        ServiceEntrant::HeapThread,
        ServiceEntrant::BucketFloor,
        ServiceEntrant::FloorWorkers,
        ServiceEntrant::FloorClosures,
        ServiceEntrant::FloorIndexed,
        ServiceEntrant::FloorDirect,
    ];

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            ServiceEntrant::TimerService => "tickwheel-service",
            ServiceEntrant::TimerServiceHandles => "tickwheel-service-handle",
            ServiceEntrant::TimerServiceHere => "tickwheel-service-here",
            ServiceEntrant::TokioSleep => "tokio-sleep",
            ServiceEntrant::DelayQueueChannel => "delayqueue-channel",
            ServiceEntrant::HeapThread => "binaryheap-thread",
            ServiceEntrant::BucketFloor => "bucket-floor",
            ServiceEntrant::FloorWorkers => "floor-workers",
            ServiceEntrant::FloorClosures => "floor-closures",
            ServiceEntrant::FloorIndexed => "floor-indexed",
            ServiceEntrant::FloorDirect => "floor-direct",
        }
    }

    /// Whether this entrant is tickwheel's own (as opposed to a peer).
    pub fn is_tickwheel(self) -> bool {
        matches!(
            self,
            ServiceEntrant::TimerService
                | ServiceEntrant::TimerServiceHandles
                | ServiceEntrant::TimerServiceHere
        )
    }
}

/// How long after the last deadline a missing task counts as lost.
pub const GRACE: Duration = Duration::from_secs(30);

impl std::fmt::Display for ServiceEntrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The shared record of a W4 run: (task, firing stamp) pairs, appended in chunks.
///
/// Each thread that runs callbacks claims [`CHUNK`] entries at a time (one atomic addition)
/// and fills them in order; entries never claimed or not yet filled hold [`EMPTY`]. The count
/// of tasks run is striped over cache-line-padded counters, one picked per thread: with one
/// shared counter, entrants that run callbacks on several threads (the tickwheel service's
/// workers, tokio's) would pay for the harness's own contention on every callback, which
/// single-threaded entrants do not.
#[derive(Debug)]
pub struct Log {
    base: Instant,
    /// This log's number, unique in the process: a thread's claimed chunk belongs to it.
    id: usize,
    n: usize,
    /// The task of each entry ([`EMPTY`] if none).
    tasks: Vec<AtomicU64>,
    /// The firing stamp of each entry.
    stamps: Vec<AtomicU64>,
    /// The next unclaimed entry.
    claimed: AtomicUsize,
    /// Entries recorded once every chunk is claimed (not expected: room is left for 256
    /// threads' partly filled chunks).
    overflow: std::sync::Mutex<Vec<(u32, u64)>>,
    fired: [Stripe; STRIPES],
}

/// Entries a thread claims at once.
const CHUNK: usize = 1024;

/// An entry no task was recorded in.
const EMPTY: u64 = u64::MAX;

/// Counters of `Log::fired`; a power of two.
const STRIPES: usize = 16;

/// One counter on cache lines of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(AtomicUsize);

/// Hands out stripes to threads, round robin.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// Numbers logs.
static NEXT_LOG: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The stripe of `Log::fired` this thread counts in.
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
    /// This thread's chunk: (log number, next entry, end of the chunk).
    static CHUNK_OF: std::cell::Cell<(usize, usize, usize)> = const { std::cell::Cell::new((0, 0, 0)) };
}

impl Log {
    /// A log for `n` tasks, every entry touched.
    pub fn new(n: usize) -> Log {
        let entries = n + 256 * CHUNK;
        Log {
            base: Instant::now(),
            id: NEXT_LOG.fetch_add(1, Ordering::Relaxed),
            n,
            tasks: (0..entries).map(|_| AtomicU64::new(EMPTY)).collect(),
            stamps: (0..entries).map(|_| AtomicU64::new(0)).collect(),
            claimed: AtomicUsize::new(0),
            overflow: std::sync::Mutex::new(Vec::new()),
            fired: Default::default(),
        }
    }

    /// Nanoseconds since the log's base instant.
    pub fn stamp(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// The callback of task `id`: records when it ran.
    pub fn fire(&self, id: u32) {
        let stamp = self.stamp();
        match self.entry() {
            Some(at) => {
                self.tasks[at].store(u64::from(id), Ordering::Relaxed);
                self.stamps[at].store(stamp, Ordering::Relaxed);
            }
            None => self
                .overflow
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((id, stamp)),
        }
        let stripe = STRIPE.with(|s| *s);
        // Release: whoever sees the count sees the entry.
        self.fired[stripe].0.fetch_add(1, Ordering::Release);
    }

    /// The calling thread's next entry, claiming a chunk when its own is used up.
    fn entry(&self) -> Option<usize> {
        CHUNK_OF.with(|chunk| {
            let (log, next, end) = chunk.get();
            if log == self.id && next < end {
                chunk.set((log, next + 1, end));
                return Some(next);
            }
            let start = self.claimed.fetch_add(CHUNK, Ordering::Relaxed);
            if start + CHUNK > self.tasks.len() {
                return None;
            }
            chunk.set((self.id, start + 1, start + CHUNK));
            Some(start)
        })
    }

    /// Each task's firing stamp plus one (0: never ran), read back from the entries once
    /// every task has run; `Err` names a task that ran twice.
    fn fired_at(&self) -> Result<Vec<u64>> {
        let mut fired_at = vec![0u64; self.n];
        let claimed = self.claimed.load(Ordering::Relaxed).min(self.tasks.len());
        let overflow = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
        let entries = (0..claimed)
            .map(|at| {
                let task = self.tasks[at].load(Ordering::Relaxed);
                (task, self.stamps[at].load(Ordering::Relaxed))
            })
            .filter(|&(task, _)| task != EMPTY)
            .chain(
                overflow
                    .iter()
                    .map(|&(task, stamp)| (u64::from(task), stamp)),
            );
        for (task, stamp) in entries {
            let Some(slot) = fired_at.get_mut(task as usize) else {
                return Err(Error::Check(format!(
                    "task {task} is not a task of this run"
                )));
            };
            if *slot != 0 {
                return Err(Error::Check(format!("task {task} ran twice")));
            }
            *slot = stamp + 1;
        }
        Ok(fired_at)
    }

    /// How many tasks have run.
    pub fn fired(&self) -> usize {
        self.fired.iter().map(|s| s.0.load(Ordering::Acquire)).sum()
    }
}

/// A real-time timer that runs W4's callbacks.
pub trait RealTimeTimer {
    /// Schedules `log.fire(id)` at `deadline` (the harness's `Instant::now()` plus the task's
    /// delay: every entrant gets the instant the harness read, none reads the clock again).
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>);
    /// Stops the timer and joins its threads.
    fn shutdown(self: Box<Self>);
}

/// How the tickwheel entrants' services are built (peers keep their own settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickwheelSetup {
    /// The resolution.
    pub tick: Duration,
    /// `Builder::wake_interval` (zero: the default, a wake-up at every tick with timers).
    pub wake_interval: Duration,
}

/// Starts the timer of a service entrant for `n` tasks; `setup` is how the tickwheel
/// entrants are built.
pub fn start(
    entrant: ServiceEntrant,
    n: usize,
    setup: TickwheelSetup,
) -> Result<Box<dyn RealTimeTimer>> {
    Ok(match entrant {
        ServiceEntrant::TimerService => Box::new(adapters::TickwheelService::new(setup, None)?),
        ServiceEntrant::TimerServiceHere => {
            Box::new(adapters::TickwheelService::new(setup, Some(0))?)
        }
        ServiceEntrant::TimerServiceHandles => {
            Box::new(adapters::TickwheelServiceHandles::new(setup, n)?)
        }
        ServiceEntrant::TokioSleep => Box::new(adapters::TokioSleep::new()?),
        ServiceEntrant::DelayQueueChannel => Box::new(adapters::DelayQueueChannel::new()?),
        ServiceEntrant::HeapThread => Box::new(adapters::HeapThread::new()?),
        ServiceEntrant::BucketFloor => Box::new(floors::BucketFloor::new()?),
        ServiceEntrant::FloorWorkers => Box::new(floors::FloorWorkers::new()?),
        ServiceEntrant::FloorClosures => Box::new(floors::FloorClosures::new()?),
        ServiceEntrant::FloorIndexed => Box::new(floors::FloorClosures::indexed()?),
        ServiceEntrant::FloorDirect => Box::new(floors::FloorDirect::new()?),
    })
}

/// Runs W4 with `delays` (ms) on `entrant`, the tickwheel entrants built as `setup` says;
/// `progress` shows tasks fired.
pub fn run(
    entrant: ServiceEntrant,
    delays: &[u64],
    setup: TickwheelSetup,
    progress: Option<&ProgressBar>,
) -> Result<ServiceSample> {
    let n = delays.len();
    let adapter = start(entrant, n, setup)?;
    let log = Arc::new(Log::new(n));
    let mut deadlines = vec![0u64; n];
    // Touch the pages now, so the RSS baseline below already holds them.
    deadlines.iter_mut().for_each(|d| *d = 1);
    machine::reset_peak_rss();
    let rss_before = machine::rss_bytes();
    let cpu_before = machine::cpu_time();
    let thread_cpu_before = thread_cpu();
    let threads_before = machine::ThreadTimes::now();
    let start = log.stamp();
    for (id, &delay_ms) in delays.iter().enumerate() {
        let now = Instant::now();
        let delay = Duration::from_millis(delay_ms);
        deadlines[id] = (now - log.base).as_nanos() as u64 + delay.as_nanos() as u64;
        adapter.schedule(id as u32, now + delay, &log);
    }
    let scheduled = log.stamp();
    let schedule = Duration::from_nanos(scheduled - start);
    let schedule_cpu = thread_cpu()
        .zip(thread_cpu_before)
        .map(|(a, b)| a.saturating_sub(b));
    let schedule_others_cpu = threads_before
        .and_then(|t| t.elapsed())
        .zip(schedule_cpu)
        .map(|(all, mine)| all.saturating_sub(mine));
    let max_delay = Duration::from_millis(delays.iter().copied().max().unwrap_or(0));
    let waited = wait_all(&log, max_delay + GRACE, progress);
    let cpu = machine::cpu_time()
        .zip(cpu_before)
        .map(|(a, b)| a.saturating_sub(b));
    let peak_rss = machine::peak_rss_bytes()
        .zip(rss_before)
        .map(|(a, b)| a.saturating_sub(b));
    adapter.shutdown();
    let failed = |e| Error::Failed {
        entrant: entrant.name(),
        workload: "W4",
        source: Box::new(e),
    };
    waited.map_err(failed)?;
    let mut sample = summarize(&log, &deadlines, start, scheduled).map_err(failed)?;
    sample.entrant = entrant;
    sample.max_delay_ms = max_delay.as_millis() as u64;
    sample.schedule = schedule;
    sample.schedule_cpu = schedule_cpu;
    sample.schedule_others_cpu = schedule_others_cpu;
    sample.cpu = cpu;
    sample.peak_rss = peak_rss;
    sample.tick = entrant.is_tickwheel().then_some(setup.tick);
    Ok(sample)
}

/// The calling thread's CPU time so far (its time on a core, from the scheduler's
/// statistics), where the kernel reports it.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn wait_all(log: &Log, timeout: Duration, progress: Option<&ProgressBar>) -> Result<()> {
    let n = log.n;
    let give_up = Instant::now() + timeout;
    loop {
        let fired = log.fired();
        if let Some(bar) = progress {
            bar.set_position(fired as u64);
        }
        if fired > n {
            return Err(Error::Check(format!(
                "{} runs more than the {n} tasks",
                fired - n
            )));
        }
        if fired == n {
            return Ok(());
        }
        if Instant::now() > give_up {
            return Err(Error::Check(format!(
                "{} of {n} tasks never ran",
                n - fired
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks every firing and sums up lateness: over all tasks, and over those due after
/// `scheduled` (the stamp when the producer finished).
fn summarize(log: &Log, deadlines: &[u64], start: u64, scheduled: u64) -> Result<ServiceSample> {
    let mut late = Vec::with_capacity(deadlines.len());
    let mut after = Vec::new();
    let mut last = start;
    let fired_at = log.fired_at()?;
    for (id, (&slot, &deadline)) in fired_at.iter().zip(deadlines).enumerate() {
        let Some(fired) = slot.checked_sub(1) else {
            return Err(Error::Check(format!("task {id} never ran")));
        };
        if fired < deadline {
            return Err(Error::Check(format!(
                "task {id} ran {} µs early",
                (deadline - fired) / 1000
            )));
        }
        last = last.max(fired);
        late.push(fired - deadline);
        if deadline > scheduled {
            after.push(fired - deadline);
        }
    }
    late.sort_unstable();
    after.sort_unstable();
    Ok(ServiceSample {
        entrant: ServiceEntrant::TimerService,
        n: deadlines.len(),
        max_delay_ms: 0,
        schedule: Duration::ZERO,
        schedule_cpu: None,
        schedule_others_cpu: None,
        wall: Duration::from_nanos(last - start),
        cpu: None,
        peak_rss: None,
        tick: None,
        lateness: Lateness::of(&late),
        after_producer_n: after.len(),
        after_producer: Lateness::of(&after),
        cdf: cdf(&late),
        histogram: histogram(&late),
    })
}

/// The `q` quantile of sorted values (nearest rank).
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn cdf(sorted: &[u64]) -> Vec<(f64, f64)> {
    let mut qs: Vec<f64> = (0..=100).map(|i| f64::from(i) / 100.0).collect();
    qs.extend([0.995, 0.999, 0.9995, 0.9999]);
    qs.sort_by(f64::total_cmp);
    qs.into_iter()
        .map(|q| (quantile(sorted, q) as f64 / 1e6, q))
        .collect()
}

/// Bucket upper bounds of the lateness histogram, in ms.
pub const HISTOGRAM_MS: [f64; 9] = [0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 100.0, f64::INFINITY];

fn histogram(sorted: &[u64]) -> Vec<(f64, usize)> {
    let mut counts = vec![0usize; HISTOGRAM_MS.len()];
    for &ns in sorted {
        let ms = ns as f64 / 1e6;
        let bucket = HISTOGRAM_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(HISTOGRAM_MS.len() - 1);
        counts[bucket] += 1;
    }
    HISTOGRAM_MS.iter().copied().zip(counts).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(quantile(&v, 0.5), 500);
        assert_eq!(quantile(&v, 0.999), 999);
        assert_eq!(quantile(&v, 1.0), 1000);
        assert_eq!(quantile(&v, 0.0), 1);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn histogram_counts_every_task_once() {
        let h = histogram(&[0, 200_000, 3_000_000, 1_000_000_000]);
        assert_eq!(h.iter().map(|(_, c)| c).sum::<usize>(), 4);
        assert_eq!(h[0].1, 1);
        assert_eq!(h.last().unwrap().1, 1);
    }

    #[test]
    fn log_finds_doubles_and_tasks_never_run() {
        let log = Log::new(3);
        log.fire(0);
        log.fire(2);
        assert_eq!(log.fired(), 2);
        assert_eq!(log.fired_at().unwrap()[1], 0, "task 1 never ran");
        log.fire(0);
        assert_eq!(log.fired_at().unwrap_err().to_string(), "task 0 ran twice");
    }

    #[test]
    fn log_keeps_every_thread_s_entries_apart() {
        let log = Arc::new(Log::new(4 * 3000));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || (0..3000).for_each(|i| log.fire(t * 3000 + i)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let fired_at = log.fired_at().unwrap();
        assert!(fired_at.iter().all(|&f| f != 0));
        // A second log on these threads does not write into the first one's chunks.
        let other = Log::new(1);
        other.fire(0);
        assert_eq!(log.fired_at().unwrap(), fired_at);
        assert_ne!(other.fired_at().unwrap()[0], 0);
    }

    #[test]
    fn after_producer_lateness_counts_only_tasks_due_after_scheduling_ended() {
        let log = Log::new(3);
        // Due at 10 (before scheduling ended at 50), 60 and 100; fired 7, 5 and 3 late.
        let deadlines = [10, 60, 100];
        for (id, fired) in [17, 65, 103].into_iter().enumerate() {
            log.tasks[id].store(id as u64, Ordering::Relaxed);
            log.stamps[id].store(fired, Ordering::Relaxed);
        }
        log.claimed.store(3, Ordering::Relaxed);
        let s = summarize(&log, &deadlines, 0, 50).unwrap();
        assert_eq!((s.lateness.p50, s.lateness.max), (5, 7));
        assert_eq!(s.after_producer_n, 2);
        assert_eq!((s.after_producer.p50, s.after_producer.max), (3, 5));
    }

    #[test]
    fn peers_run_a_tiny_w4_exactly_once_never_early() {
        let delays: Vec<u64> = (0..200).map(|i| i % 7).collect();
        for entrant in ServiceEntrant::ALL {
            let setup = TickwheelSetup {
                tick: Duration::from_millis(1),
                wake_interval: Duration::ZERO,
            };
            let sample = run(entrant, &delays, setup, None).unwrap();
            assert_eq!(sample.n, 200);
            assert_eq!(sample.histogram.iter().map(|(_, c)| c).sum::<usize>(), 200);
            let tick = entrant.is_tickwheel().then_some(Duration::from_millis(1));
            assert_eq!(sample.tick, tick, "{entrant}");
        }
    }

    #[test]
    fn tickwheel_entrants_run_a_tiny_w4_at_10_us() {
        let delays: Vec<u64> = (0..200).map(|i| i % 7).collect();
        for entrant in ServiceEntrant::ALL.into_iter().filter(|e| e.is_tickwheel()) {
            let setup = TickwheelSetup {
                tick: Duration::from_micros(10),
                wake_interval: Duration::from_micros(40),
            };
            let sample = run(entrant, &delays, setup, None).unwrap();
            assert_eq!(sample.n, 200);
            assert_eq!(sample.tick, Some(Duration::from_micros(10)));
        }
    }
}
