//! The worker pool: where expired callbacks run, so that user code never delays the clock.
//!
//! # Hand-off
//!
//! The timer thread (or a `settle` call) pushes due callbacks in **batches** onto one
//! mutex-guarded queue and notifies once per batch, not once per callback. A batch is at most
//! [`MAX_BATCH`] callbacks and the due list is split so that every worker gets a share. Workers
//! take batches in push order, so callbacks *start* in the order they were pushed (deadline
//! order, see the service docs); with one worker they also *run* in that order.
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

/// A user-supplied panic handler.
pub(crate) type PanicHandler = std::sync::Arc<dyn Fn(&(dyn Any + Send)) + Send + Sync>;

struct Queue {
    batches: VecDeque<Vec<Job>>,
    in_flight: usize,
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
        let size = jobs.len().div_ceil(self.workers).clamp(1, MAX_BATCH);
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
        drop(q);
        if count == 1 {
            self.work.notify_one();
        } else {
            self.work.notify_all();
        }
    }

    /// Blocks until every pushed callback has finished.
    pub(crate) fn wait_idle(&self) {
        let mut q = lock(&self.queue);
        while q.in_flight > 0 {
            q = wait(&self.idle, q);
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
        if finished > 0 {
            q.in_flight -= finished;
            if q.in_flight == 0 {
                self.idle.notify_all();
            }
        }
        loop {
            if let Some(batch) = q.batches.pop_front() {
                return Some(batch);
            }
            if q.stopping {
                return None;
            }
            q = wait(&self.work, q);
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

fn run_job(job: Job, core: &Core, stats: &WorkerStats, on_panic: Option<&PanicHandler>) {
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
