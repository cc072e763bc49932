//! The worker pool: where expired callbacks run, so that user code never delays the clock.
//!
//! # Hand-off
//!
//! The timer thread (or a `settle` call) pushes due callbacks in **batches** onto one
//! mutex-guarded queue and notifies once per push, not once per callback. A batch is at most
//! [`MAX_BATCH`] callbacks. A large due list is split so that every worker gets a share; a
//! small one is not split below [`MIN_SHARE`] callbacks a batch: waking a second worker (a
//! futex wake, then a context switch in and out, several microseconds on a virtual machine)
//! costs more than the first worker spends running a few dozen short callbacks, and at a fine
//! resolution a drain every few ticks would otherwise wake every worker every time. Workers
//! take batches in push order, so callbacks *start* in the order they were pushed (deadline
//! order, see the service docs); with one worker they also *run* in that order.
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

use super::core::Core;
use super::shard::Job;
use super::stats::Histogram;
use crate::sync::{lock, wait, Condvar, Counter, Mutex};

/// The largest batch handed to one worker at once.
pub(crate) const MAX_BATCH: usize = 256;

/// The smallest share a due list is split into (see the module docs); a shorter list is one
/// batch.
pub(crate) const MIN_SHARE: usize = 64;

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
        }
    }

    /// Hands `jobs` (already in order) to the workers, in batches; leaves `jobs` empty.
    pub(crate) fn push(&self, jobs: &mut Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let size = jobs
            .len()
            .div_ceil(self.workers)
            .clamp(MIN_SHARE, MAX_BATCH);
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
        let wake = q.waiting.min(count);
        drop(q);
        match wake {
            0 => {}
            1 => self.work.notify_one(),
            _ => self.work.notify_all(),
        }
    }

    /// How many due callbacks a drain collects before it hands them on ([`MAX_BATCH`] a
    /// worker): below that it keeps draining and pushes once at its end (see `state.rs`).
    pub(crate) fn handoff_at(&self) -> usize {
        MAX_BATCH * self.workers
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
        for job in batch {
            run_job(job, core, stats, on_panic);
        }
        stats.fired.add(finished as u64);
    }
}

pub(crate) fn run_job(job: Job, core: &Core, stats: &WorkerStats, on_panic: Option<&PanicHandler>) {
    if let Some(late_ns) = core.ticks.nanos_after(job.deadline, core.clock.now()) {
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

    fn jobs(n: usize) -> Vec<Job> {
        (0..n)
            .map(|i| Job {
                callback: Callback::new(|| {}),
                deadline: i as u64,
            })
            .collect()
    }

    /// The batch sizes a push of `n` callbacks makes for `workers` workers, in queue order,
    /// and whether the deadlines come out in the order they went in.
    #[cfg(not(loom))]
    fn split(workers: usize, n: usize) -> Vec<usize> {
        let dispatch = Dispatch::new(workers);
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
        assert_eq!(split(2, 0), Vec::<usize>::new());
        assert_eq!(split(2, 1), [1]);
        // Below two shares of `MIN_SHARE`: one batch, one worker woken.
        assert_eq!(split(2, MIN_SHARE), [MIN_SHARE]);
        assert_eq!(split(4, 2 * MIN_SHARE - 1), [MIN_SHARE, MIN_SHARE - 1]);
        // Enough for every worker: a share each.
        assert_eq!(split(2, 300), [150, 150]);
        // Never more than `MAX_BATCH` a batch.
        assert_eq!(split(1, 600), [MAX_BATCH, MAX_BATCH, 600 - 2 * MAX_BATCH]);
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
