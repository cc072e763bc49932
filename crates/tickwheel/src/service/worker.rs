//! The worker pool: where expired callbacks run, so that user code never delays the clock.
//!
//! # Hand-off
//!
//! The timer thread (or a `settle` call) pushes due callbacks in **batches** onto one
//! mutex-guarded queue and notifies once per push, not once per callback. A large due list is
//! split so that every worker gets a share; a small one is not split below a **share**: the
//! callbacks that take [`SHARE_NS`] to run, by the workers' running estimate of what one
//! callback takes ([`Dispatch::cost_ns`], measured per batch). Waking a worker (a futex wake,
//! then a context switch in and out, several microseconds on a virtual machine, and a core
//! taken from whatever else runs) costs more than running a few hundred short callbacks, so a
//! list of short callbacks goes to one worker and wakes one; a list of slow ones is spread
//! over every worker, down to one callback a batch. A batch is at most [`MAX_BATCH`]
//! callbacks, or a share when that is larger. Workers take batches in push order, so
//! callbacks *start* in the order they were pushed (deadline order, see the service docs);
//! with one worker they also *run* in that order.
//!
//! A drain pushes what it took out in few pushes (at least [`Dispatch::handoff_at`] callbacks
//! each, the rest at its end; see `state.rs`), not one a chunk it drains: each push that
//! finds a worker waiting costs a futex wake and a context switch, and a worker that has run
//! a small batch is waiting again before the drain has taken the next one out.
//!
//! A push wakes only workers that wait: the queue counts them, and with none waiting (every
//! worker still busy with earlier batches, which it looks for again before it waits) the
//! push makes no syscall at all. Likewise a worker that finishes the last callback in flight
//! notifies `idle` only when a `settle` waits on it.
//!
//! # Panics
//!
//! Each callback runs under `catch_unwind`. A panic is counted, passed to the panic handler
//! if one was configured, and the worker goes on with the next callback.
//!
//! # Idle
//!
//! `in_flight` counts callbacks pushed but not finished; `settle` waits on `idle` until it is
//! zero, then checks under the driver's drain lock that it still is and nothing is due.
//! Idle workers block on a condition variable: no polling.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::core::Core;
use super::shard::Job;
use super::stats::Histogram;
use crate::sync::{lock, wait, AtomicU64, Condvar, Counter, Mutex, Ordering};

/// The largest batch handed to one worker at once, unless a share is larger.
pub(crate) const MAX_BATCH: usize = 256;

/// The running time worth a worker's wake-up: a due list is not split into batches that take
/// less (see the module docs). Ten times what a wake-up costs a virtual machine.
pub(crate) const SHARE_NS: u64 = 50_000;

/// The cost of one callback assumed before the workers have measured any (1 µs: shares of
/// 50 callbacks).
pub(crate) const FIRST_COST_NS: u64 = 1_000;

/// How much running time of callbacks may pass between two clock reads for their lateness,
/// by the workers' estimate ([`Lateness`]).
const LATENESS_READ_NS: u64 = 10_000;

/// The largest share: a list of callbacks that take no time still goes out in batches that
/// the next worker can take while the first runs.
const MAX_SHARE: usize = 4_096;

/// How many callbacks make a share when one takes `cost_ns` (see the module docs).
fn share(cost_ns: u64) -> usize {
    let share = SHARE_NS / cost_ns.max(1);
    usize::try_from(share)
        .unwrap_or(MAX_SHARE)
        .clamp(1, MAX_SHARE)
}

/// The batches `len` due callbacks are split into for `workers` workers when one takes
/// `cost_ns`: `(batch size, workers to wake at most)`. A worker is woken per share, and at
/// least one: the batches beyond are taken by workers already running.
fn split(len: usize, workers: usize, cost_ns: u64) -> (usize, usize) {
    let share = share(cost_ns);
    let size = len.div_ceil(workers).clamp(share, MAX_BATCH.max(share));
    (size, (len / share).max(1))
}

/// A user-supplied panic handler.
pub(crate) type PanicHandler = std::sync::Arc<dyn Fn(&(dyn Any + Send)) + Send + Sync>;

struct Queue {
    batches: VecDeque<Vec<Job>>,
    in_flight: usize,
    /// Workers blocked in `take` (counted from before their wait until after it).
    waiting: usize,
    /// Threads blocked in `wait_idle`, counted the same way.
    idle_waiting: usize,
    stopping: bool,
}

/// The queue between the timer thread and the workers.
pub(crate) struct Dispatch {
    queue: Mutex<Queue>,
    work: Condvar,
    idle: Condvar,
    workers: usize,
    /// The workers' running estimate of one callback's run time, in nanoseconds (an average
    /// over batches, each weighing a quarter; see [`run`]).
    cost_ns: AtomicU64,
}

/// Counters one worker writes and `stats()` reads (relaxed; one writer each).
#[derive(Default)]
pub(crate) struct WorkerStats {
    pub(crate) fired: Counter,
    pub(crate) panicked: Counter,
    pub(crate) lateness: Histogram,
}

impl Dispatch {
    pub(crate) fn new(workers: usize) -> Dispatch {
        Dispatch {
            queue: Mutex::new(Queue {
                batches: VecDeque::new(),
                in_flight: 0,
                waiting: 0,
                idle_waiting: 0,
                stopping: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            workers: workers.max(1),
            cost_ns: AtomicU64::new(FIRST_COST_NS),
        }
    }

    /// The estimate of one callback's run time (see [`Self::cost_ns`]).
    pub(crate) fn cost_ns(&self) -> u64 {
        self.cost_ns.load(Ordering::Relaxed)
    }

    /// Takes a batch of `n` callbacks that ran in `elapsed` into the estimate.
    pub(crate) fn note_cost(&self, n: usize, elapsed: Duration) {
        let Some(n) = u64::try_from(n).ok().filter(|&n| n > 0) else {
            return;
        };
        let sample = u64::try_from(elapsed.as_nanos() / u128::from(n)).unwrap_or(u64::MAX);
        let old = self.cost_ns();
        let new = old - old / 4 + sample / 4;
        self.cost_ns.store(new, Ordering::Relaxed);
    }

    /// Hands `jobs` (already in order) to the workers, in batches; leaves `jobs` empty.
    pub(crate) fn push(&self, jobs: &mut Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let (size, shares) = split(jobs.len(), self.workers, self.cost_ns());
        let mut batches = Vec::with_capacity(jobs.len().div_ceil(size));
        let mut rest = jobs.drain(..);
        loop {
            let batch: Vec<Job> = rest.by_ref().take(size).collect();
            if batch.is_empty() {
                break;
            }
            batches.push(batch);
        }
        drop(rest);
        let count = batches.len();
        let mut q = lock(&self.queue);
        for batch in batches {
            q.in_flight += batch.len();
            q.batches.push_back(batch);
        }
        // A worker not waiting looks at the queue before it waits: it needs no wake-up.
        let wake = q.waiting.min(count).min(shares);
        drop(q);
        match wake {
            0 => {}
            1 => self.work.notify_one(),
            _ => self.work.notify_all(),
        }
    }

    /// How many due callbacks a drain collects before it hands them on (a largest batch a
    /// worker): below that it keeps draining and pushes once at its end (see `state.rs`).
    pub(crate) fn handoff_at(&self) -> usize {
        MAX_BATCH.max(share(self.cost_ns())) * self.workers
    }

    /// The sizes of the batches queued, in order (tests only).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn batch_sizes(&self) -> Vec<usize> {
        lock(&self.queue).batches.iter().map(Vec::len).collect()
    }

    /// Counts `n` callbacks as in flight that the calling thread will run itself (a service
    /// with no workers); [`finish`](Self::finish) ends them. Called under the drain lock, so
    /// `settle` never sees them neither queued nor in flight.
    pub(crate) fn begin(&self, n: usize) {
        lock(&self.queue).in_flight += n;
    }

    /// Ends `n` callbacks counted by [`begin`](Self::begin).
    pub(crate) fn finish(&self, n: usize) {
        let mut q = lock(&self.queue);
        self.finished(&mut q, n);
    }

    /// Takes `n` finished callbacks off `in_flight`, telling a waiting `settle` when none is
    /// left.
    fn finished(&self, q: &mut Queue, n: usize) {
        if n > 0 {
            q.in_flight -= n;
            if q.in_flight == 0 && q.idle_waiting > 0 {
                self.idle.notify_all();
            }
        }
    }

    /// Blocks until every pushed callback has finished.
    pub(crate) fn wait_idle(&self) {
        let mut q = lock(&self.queue);
        while q.in_flight > 0 {
            q.idle_waiting += 1;
            q = wait(&self.idle, q);
            q.idle_waiting -= 1;
        }
    }

    /// Whether no callback is queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        lock(&self.queue).in_flight == 0
    }

    /// Tells the workers to finish the queued batches and exit.
    pub(crate) fn stop(&self) {
        lock(&self.queue).stopping = true;
        self.work.notify_all();
    }

    /// The next batch, or `None` once stopping and empty.
    fn take(&self, finished: usize) -> Option<Vec<Job>> {
        let mut q = lock(&self.queue);
        self.finished(&mut q, finished);
        loop {
            if let Some(batch) = q.batches.pop_front() {
                return Some(batch);
            }
            if q.stopping {
                return None;
            }
            q.waiting += 1;
            q = wait(&self.work, q);
            q.waiting -= 1;
        }
    }
}

/// A worker thread's loop: run batches until the dispatch stops.
pub(crate) fn run(
    dispatch: &Dispatch,
    core: &Core,
    stats: &WorkerStats,
    on_panic: Option<&PanicHandler>,
) {
    let mut finished = 0;
    while let Some(batch) = dispatch.take(finished) {
        finished = batch.len();
        // Real time, whatever the service's clock: what the callbacks cost this machine.
        let start = Instant::now();
        let mut lateness = Lateness::new(dispatch.cost_ns());
        for job in batch {
            run_job(job, core, stats, &mut lateness, on_panic);
        }
        dispatch.note_cost(finished, start.elapsed());
        stats.fired.add(finished as u64);
    }
}

/// When a thread running a list of callbacks reads the clock for their lateness: before the
/// first, then once per [`LATENESS_READ_NS`] of callbacks by the estimate of what one costs.
/// A clock read costs tens of nanoseconds on a virtual machine, as much as a short callback.
/// A callback's lateness is then the time from its tick to the last read: short of the real
/// one by at most about [`LATENESS_READ_NS`] while the estimate holds (by the run time of the
/// callbacks since the read when it does not), never over it.
pub(crate) struct Lateness {
    now: Option<Instant>,
    /// Callbacks left to run before the next read.
    left: u64,
    /// Callbacks between two reads.
    every: u64,
}

impl Lateness {
    /// For callbacks estimated to take `cost_ns` each.
    pub(crate) fn new(cost_ns: u64) -> Lateness {
        Lateness {
            now: None,
            left: 0,
            every: (LATENESS_READ_NS / cost_ns.max(1)).max(1),
        }
    }

    /// The time to take a callback's lateness from, reading `core`'s clock when due.
    fn now(&mut self, core: &Core) -> Instant {
        match self.now {
            Some(now) if self.left > 0 => {
                self.left -= 1;
                now
            }
            _ => {
                let now = core.clock.now();
                self.now = Some(now);
                self.left = self.every - 1;
                now
            }
        }
    }
}

pub(crate) fn run_job(
    job: Job,
    core: &Core,
    stats: &WorkerStats,
    lateness: &mut Lateness,
    on_panic: Option<&PanicHandler>,
) {
    if let Some(late_ns) = core.ticks.nanos_after(job.deadline, lateness.now(core)) {
        stats.lateness.record(late_ns);
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| job.callback.call())) {
        stats.panicked.add(1);
        if let Some(handler) = on_panic {
            // A panicking handler must not take the worker down either.
            let _ = catch_unwind(AssertUnwindSafe(|| handler(&*payload)));
        }
        // Dropping a panic payload can itself panic; contain that too.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::callback::Callback;
    use crate::sync::{model, spawn, Arc};

    /// A clock that moves 1 µs at every read, counting its reads.
    #[cfg(not(loom))]
    #[derive(Debug, Default)]
    struct CountingClock {
        reads: std::sync::atomic::AtomicU64,
        origin: std::sync::OnceLock<Instant>,
    }

    #[cfg(not(loom))]
    impl crate::time::Clock for CountingClock {
        fn now(&self) -> Instant {
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            *self.origin.get_or_init(Instant::now) + Duration::from_micros(n)
        }
    }

    /// A list of callbacks reads the clock before the first and then once per
    /// `LATENESS_READ_NS` of them by the cost estimate (a table); the instants handed out
    /// never go back.
    #[cfg(not(loom))]
    #[test]
    fn lateness_reads_the_clock_once_per_10_us_of_callbacks() {
        for (cost_ns, callbacks, reads) in [
            (1_000, 25, 3), // every 10th
            (100, 250, 3),  // every 100th
            (20_000, 5, 5), // a slow callback: each
            (0, 50_000, 5), // free: every 10 000th
            (10_000, 3, 3), // exactly 10 µs: each
        ] {
            let clock = std::sync::Arc::new(CountingClock::default());
            let ticks =
                crate::time::Ticks::new(crate::time::Clock::now(&*clock), Duration::from_micros(1));
            let core = Core::new(clock.clone(), ticks, None);
            let mut lateness = Lateness::new(cost_ns);
            let stamps: Vec<Instant> = (0..callbacks).map(|_| lateness.now(&core)).collect();
            // One read for `Ticks::new` above.
            let made = clock.reads.load(std::sync::atomic::Ordering::SeqCst) - 1;
            assert_eq!(
                made, reads,
                "{cost_ns} ns a callback, {callbacks} callbacks"
            );
            assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    fn jobs(n: usize) -> Vec<Job> {
        (0..n)
            .map(|i| Job {
                callback: Callback::new(|| {}),
                deadline: i as u64,
            })
            .collect()
    }

    /// The batch sizes a push of `n` callbacks makes for `workers` workers when a callback
    /// is estimated to take `cost_ns`, in queue order; asserts that the deadlines come out in
    /// the order they went in.
    #[cfg(not(loom))]
    fn batches(workers: usize, n: usize, cost_ns: u64) -> Vec<usize> {
        let dispatch = Dispatch::new(workers);
        dispatch.cost_ns.store(cost_ns, Ordering::Relaxed);
        dispatch.push(&mut jobs(n));
        let q = lock(&dispatch.queue);
        assert_eq!(q.in_flight, n);
        let order: Vec<u64> = q.batches.iter().flatten().map(|j| j.deadline).collect();
        assert_eq!(order, (0..n as u64).collect::<Vec<_>>());
        q.batches.iter().map(Vec::len).collect()
    }

    #[cfg(not(loom))]
    #[test]
    fn small_drains_are_one_batch_large_ones_a_share_a_worker() {
        // The first estimate, 1 µs a callback: a share is 50 callbacks.
        let first = FIRST_COST_NS;
        assert_eq!(batches(2, 0, first), Vec::<usize>::new());
        assert_eq!(batches(2, 1, first), [1]);
        // Below two shares: one batch.
        assert_eq!(batches(2, 50, first), [50]);
        assert_eq!(batches(4, 99, first), [50, 49]);
        // Enough for every worker: a share each.
        assert_eq!(batches(2, 300, first), [150, 150]);
        // Never more than `MAX_BATCH` a batch while a share is smaller.
        assert_eq!(
            batches(1, 600, first),
            [MAX_BATCH, MAX_BATCH, 600 - 2 * MAX_BATCH]
        );
        // Short callbacks, 50 ns: a share is 1000 of them, a batch larger than `MAX_BATCH`.
        assert_eq!(batches(2, 1000, 50), [1000]);
        assert_eq!(batches(2, 3000, 50), [1000, 1000, 1000]);
        // Callbacks that take no measurable time: shares of `MAX_SHARE`.
        assert_eq!(batches(2, 5000, 0), [MAX_SHARE, 5000 - MAX_SHARE]);
        // Slow callbacks, 100 µs: spread over every worker, down to one a batch.
        assert_eq!(batches(4, 8, 100_000), [2, 2, 2, 2]);
        assert_eq!(batches(4, 3, 100_000), [1, 1, 1]);
    }

    /// How many workers a push may wake: one a share, at least one (the table of `split`).
    #[test]
    fn a_push_wakes_a_worker_a_share() {
        // (callbacks, workers, cost in ns) -> (batch size, workers to wake at most)
        let table = [
            ((1, 2, 1_000), (50, 1)),
            ((99, 2, 1_000), (50, 1)),
            ((100, 2, 1_000), (50, 2)),
            ((1_000, 2, 1_000), (256, 20)),
            ((1_000, 2, 50), (1_000, 1)),
            ((1_999, 2, 50), (1_000, 1)),
            ((2_000, 2, 50), (1_000, 2)),
            ((10, 2, 100_000), (5, 10)),
            ((10, 2, u64::MAX), (5, 10)),
        ];
        for ((len, workers, cost), expected) in table {
            assert_eq!(
                split(len, workers, cost),
                expected,
                "{len} {workers} {cost}"
            );
        }
    }

    /// The estimate moves a quarter of the way to each batch's cost a callback.
    #[cfg(not(loom))]
    #[test]
    fn the_cost_estimate_follows_the_batches() {
        let dispatch = Dispatch::new(1);
        assert_eq!(dispatch.cost_ns(), FIRST_COST_NS);
        dispatch.note_cost(100, Duration::from_micros(10));
        assert_eq!(dispatch.cost_ns(), 775);
        dispatch.note_cost(0, Duration::from_secs(1));
        assert_eq!(dispatch.cost_ns(), 775, "an empty batch says nothing");
        for _ in 0..100 {
            dispatch.note_cost(10, Duration::from_micros(1));
        }
        // (Rounded down at each step, it settles a little above.)
        assert!(
            (100..=104).contains(&dispatch.cost_ns()),
            "{}",
            dispatch.cost_ns()
        );
        dispatch.note_cost(1, Duration::MAX);
        assert!(
            dispatch.cost_ns() > 1 << 60,
            "saturates instead of wrapping"
        );
    }

    #[cfg(not(loom))]
    #[test]
    fn a_push_with_no_worker_waiting_needs_no_wake_up_and_nothing_is_lost() {
        let dispatch = Dispatch::new(1);
        // No worker waits yet: the push only queues.
        dispatch.push(&mut jobs(3));
        assert_eq!(lock(&dispatch.queue).waiting, 0);
        // A worker that arrives later finds the batch before it would wait.
        let batch = dispatch.take(0).unwrap();
        assert_eq!(batch.len(), 3);
        assert!(!dispatch.is_idle());
        dispatch.stop();
        assert!(dispatch.take(batch.len()).is_none());
        assert!(dispatch.is_idle());
        let q = lock(&dispatch.queue);
        assert_eq!((q.waiting, q.idle_waiting), (0, 0));
    }

    /// A push races a worker on its way into its wait, and a `settle`-like waiter races the
    /// worker finishing the callback: with wake-ups made only for counted waiters, no
    /// interleaving may lose one (loom reports a deadlock if a thread is left waiting).
    #[test]
    fn loom_counted_waiters_never_miss_a_push_or_the_idle_moment() {
        model(|| {
            let dispatch = Arc::new(Dispatch::new(1));
            let worker = {
                let dispatch = dispatch.clone();
                spawn(move || {
                    let batch = dispatch.take(0).expect("a batch before the stop");
                    let n = batch.len();
                    drop(batch);
                    // Reports the batch finished, then waits until the stop.
                    assert!(dispatch.take(n).is_none());
                    n
                })
            };
            // The timer thread's part and then `settle`'s: push, wait until idle, stop.
            let settler = {
                let dispatch = dispatch.clone();
                spawn(move || {
                    dispatch.push(&mut jobs(1));
                    dispatch.wait_idle();
                    dispatch.stop();
                })
            };
            settler.join().unwrap();
            assert_eq!(worker.join().unwrap(), 1);
            assert!(dispatch.is_idle());
        });
    }
}
