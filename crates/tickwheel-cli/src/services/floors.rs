//! The W4 floors: not timers but the least work W4 can be done with, to tell what a design
//! costs from what this machine costs. [`BucketFloor`] files (1 ms bucket, task id) pairs and
//! runs each bucket on its own thread; [`FloorWorkers`] hands the buckets to workers instead;
//! [`FloorClosures`] stores with each task the callback record any callback service must
//! store, instead of a bare id, and [`FloorClosures::indexed`] keeps those records where the
//! producer wrote them and files their indices instead. [`FloorDirect`] has the producer file
//! each callback record in its millisecond's vector itself, so its thread only runs them.

use super::{Log, RealTimeTimer};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A floor's bucket width.
const MS: Duration = Duration::from_millis(1);

/// What a floor's producer and thread share: the staged (bucket, task) pairs, the run's log,
/// the stop flag. A task is a `T`: a task id, or a [`Task`] record.
struct FloorShared<T> {
    base: Instant,
    staged: Mutex<Vec<(u32, T)>>,
    log: OnceLock<Arc<Log>>,
    stop: AtomicBool,
}

impl<T> FloorShared<T> {
    fn new() -> Arc<FloorShared<T>> {
        Arc::new(FloorShared {
            base: Instant::now(),
            staged: Mutex::new(Vec::new()),
            log: OnceLock::new(),
            stop: AtomicBool::new(false),
        })
    }

    /// Sleeps until millisecond `now_ms` has passed; `false`, without sleeping, once stopped.
    fn sleep_past(&self, now_ms: usize) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let wake = self.base + MS * (now_ms as u32 + 1);
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        true
    }

    /// Stages `task` in the 1 ms bucket where `deadline` has passed (rounded up, so a bucket
    /// never runs early).
    fn stage(&self, deadline: Instant, task: T) {
        let after = deadline.saturating_duration_since(self.base);
        let bucket = after.as_nanos().div_ceil(MS.as_nanos()) as u32;
        self.staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((bucket, task));
    }
}

/// A floor's thread: swaps the staged vector out, files each task in a vector per
/// millisecond, hands every bucket whose millisecond has started to `due` (with the run's
/// log, set by the first schedule, before any task is staged), sleeps to the next
/// millisecond; until stopped.
fn floor_loop<T>(shared: &FloorShared<T>, mut due: impl FnMut(&Log, Vec<T>)) {
    let mut buckets: Vec<Vec<T>> = Vec::new();
    let mut swap: Vec<(u32, T)> = Vec::new();
    let mut next = 0usize;
    loop {
        std::mem::swap(
            &mut *shared.staged.lock().unwrap_or_else(PoisonError::into_inner),
            &mut swap,
        );
        for (bucket, task) in swap.drain(..) {
            let bucket = (bucket as usize).max(next);
            if buckets.len() <= bucket {
                buckets.resize_with(bucket + 1, Vec::new);
            }
            buckets[bucket].push(task);
        }
        let now_ms = (shared.base.elapsed().as_nanos() / MS.as_nanos()) as usize;
        if let Some(log) = shared.log.get() {
            while next <= now_ms && next < buckets.len() {
                let bucket = std::mem::take(&mut buckets[next]);
                next += 1;
                if !bucket.is_empty() {
                    due(log, bucket);
                }
            }
        }
        next = next.max(now_ms.min(buckets.len()));
        if !shared.sleep_past(now_ms) {
            return;
        }
    }
}

/// [`floor_loop`] for [`FloorClosures::indexed`]: each staged vector swapped out is kept
/// whole (the producer gets a new one, with room for [`INDEXED_STAGE`] tasks), and the thread
/// files each task's place in it, 8 bytes, in the vector of its millisecond; a due bucket's
/// tasks are called where the producer wrote them. Every staged vector is kept until the
/// thread stops: a floor, not a timer.
fn indexed_loop(shared: &FloorShared<Task>) {
    let mut staged: Vec<Vec<(u32, Task)>> = Vec::new();
    let mut buckets: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut next = 0usize;
    loop {
        let mut swap = Vec::with_capacity(INDEXED_STAGE);
        std::mem::swap(
            &mut *shared.staged.lock().unwrap_or_else(PoisonError::into_inner),
            &mut swap,
        );
        let vector = staged.len() as u32;
        for (at, (bucket, _)) in swap.iter().enumerate() {
            let bucket = (*bucket as usize).max(next);
            if buckets.len() <= bucket {
                buckets.resize_with(bucket + 1, Vec::new);
            }
            buckets[bucket].push((vector, at as u32));
        }
        staged.push(swap);
        let now_ms = (shared.base.elapsed().as_nanos() / MS.as_nanos()) as usize;
        if shared.log.get().is_some() {
            while next <= now_ms && next < buckets.len() {
                for (vector, at) in std::mem::take(&mut buckets[next]) {
                    let task = &staged[vector as usize][at as usize].1;
                    (task.call)(task.log, task.id);
                }
                next += 1;
            }
        }
        next = next.max(now_ms.min(buckets.len()));
        if !shared.sleep_past(now_ms) {
            return;
        }
    }
}

/// The room a new staged vector of [`FloorClosures::indexed`] has: a millisecond's tasks at
/// W4's rates, so that the producer's appends do not reallocate.
const INDEXED_STAGE: usize = 1 << 14;

/// A floor's shared state and thread.
struct Floor<T> {
    shared: Arc<FloorShared<T>>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> Floor<T> {
    /// Starts thread `name` running [`floor_loop`] with `due`.
    fn start(name: &str, due: impl FnMut(&Log, Vec<T>) + Send + 'static) -> Result<Floor<T>> {
        Floor::spawn(name, move |shared| floor_loop(shared, due))
    }

    /// Starts thread `name` running `body` on the shared state.
    fn spawn(name: &str, body: impl FnOnce(&FloorShared<T>) + Send + 'static) -> Result<Floor<T>> {
        let shared = FloorShared::new();
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&worker))
            .map_err(|e| Error::io("cannot start a floor's thread", e))?;
        Ok(Floor {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the thread and joins it.
    fn stop(mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A floor, not a timer: the least work W4 can be done with, to tell what a design costs from
/// what this machine costs. A schedule appends (1 ms bucket, task id) to one vector under a
/// mutex; one thread swaps that vector out, files each task in a vector per millisecond,
/// runs every bucket whose millisecond has started, and sleeps to the next millisecond. No
/// cancel, no handle, no order within a millisecond, one producer's worth of locking, memory
/// for every millisecond up to the last deadline.
pub struct BucketFloor(Floor<u32>);

impl BucketFloor {
    /// Starts the thread.
    pub fn new() -> Result<BucketFloor> {
        Floor::start("bucket-floor", |log: &Log, bucket: Vec<u32>| {
            bucket.into_iter().for_each(|id| log.fire(id));
        })
        .map(BucketFloor)
    }
}

impl RealTimeTimer for BucketFloor {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        self.0.shared.log.get_or_init(|| Arc::clone(log));
        self.0.shared.stage(deadline, id);
    }

    fn shutdown(self: Box<Self>) {
        self.0.stop();
    }
}

/// A callback as a service that takes arbitrary closures stores it, without allocating: a
/// code pointer and the closure's captured state, 16 bytes (tickwheel's inline callback is
/// the same size: two words of state and a vtable reference). Here the state is W4's, a
/// `&'static Log` and the task id, and the code pointer is called with it, so the record
/// costs what an erased closure costs to store, move and call, without `unsafe`.
struct Task {
    call: fn(&'static Log, u32),
    log: &'static Log,
    id: u32,
}

/// [`BucketFloor`] with a callback record per task ([`Task`], 24 bytes; 32 with its bucket
/// where the floor stages 8) instead of a task id, called through its code pointer by the
/// floor's thread: the floor of any design that accepts arbitrary callbacks, to tell what
/// storing them costs on this machine from what the service adds to it.
pub struct FloorClosures {
    floor: Floor<Task>,
    log: OnceLock<&'static Log>,
}

impl FloorClosures {
    /// Starts the thread.
    pub fn new() -> Result<FloorClosures> {
        let floor = Floor::start("floor-closures", |_: &Log, bucket: Vec<Task>| {
            bucket
                .into_iter()
                .for_each(|task| (task.call)(task.log, task.id));
        })?;
        Ok(FloorClosures {
            floor,
            log: OnceLock::new(),
        })
    }

    /// The same producer, but the thread does not copy a task's record out of the staged
    /// vector: it keeps the vector and files the task's place in it (see [`indexed_loop`]),
    /// so the record is written once, by the producer, and the thread writes 8 bytes a task
    /// where [`FloorClosures::new`]'s writes 24 and [`BucketFloor`]'s 4. The floor of a design
    /// that stores callbacks where they were staged, which a service of arbitrary callbacks
    /// might be built as.
    pub fn indexed() -> Result<FloorClosures> {
        Ok(FloorClosures {
            floor: Floor::spawn("floor-indexed", indexed_loop)?,
            log: OnceLock::new(),
        })
    }
}

impl RealTimeTimer for FloorClosures {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let shared = &self.floor.shared;
        shared.log.get_or_init(|| Arc::clone(log));
        // Captured as the tickwheel entrants capture it (see `adapters::leaked`).
        let log = super::adapters::leaked(&self.log, log);
        let call = Log::fire;
        shared.stage(deadline, Task { call, log, id });
    }

    fn shutdown(self: Box<Self>) {
        self.floor.stop();
    }
}

/// [`FloorDirect`]'s state: the vector of each millisecond from the first not yet run on,
/// which the producer files into and the thread takes due ones out of, under one mutex.
struct DirectBuckets {
    buckets: VecDeque<Vec<Task>>,
    /// The millisecond of `buckets[0]`.
    first: usize,
}

/// [`FloorClosures`]' callback records filed by the producer itself: a schedule locks the
/// buckets and appends its task to the vector of its millisecond (or of the first one not yet
/// run, if that has passed); the thread takes each due vector out under the lock, runs it
/// and sleeps to the next millisecond. So the thread stays as light as [`BucketFloor`]'s and
/// the producer pays for filing, as a service whose producers file their own bursts does
/// (tickwheel's `TimerService`, see its `HELP_AT`). Not a timer either: no cancel, no order
/// within a millisecond.
pub struct FloorDirect {
    shared: Arc<FloorShared<Task>>,
    buckets: Arc<Mutex<DirectBuckets>>,
    thread: Option<JoinHandle<()>>,
    log: OnceLock<&'static Log>,
}

impl FloorDirect {
    /// Starts the thread.
    pub fn new() -> Result<FloorDirect> {
        let shared = FloorShared::new();
        let buckets = Arc::new(Mutex::new(DirectBuckets {
            buckets: VecDeque::new(),
            first: 0,
        }));
        let (worker, due) = (Arc::clone(&shared), Arc::clone(&buckets));
        let thread = std::thread::Builder::new()
            .name("floor-direct".into())
            .spawn(move || direct_loop(&worker, &due))
            .map_err(|e| Error::io("cannot start a floor's thread", e))?;
        Ok(FloorDirect {
            shared,
            buckets,
            thread: Some(thread),
            log: OnceLock::new(),
        })
    }
}

/// [`FloorDirect`]'s thread: takes every vector whose millisecond has started out of the
/// buckets, runs their tasks, sleeps to the next millisecond; until stopped.
fn direct_loop(shared: &FloorShared<Task>, buckets: &Mutex<DirectBuckets>) {
    let mut due = Vec::new();
    loop {
        let now_ms = (shared.base.elapsed().as_nanos() / MS.as_nanos()) as usize;
        {
            let mut b = buckets.lock().unwrap_or_else(PoisonError::into_inner);
            while b.first <= now_ms {
                let Some(bucket) = b.buckets.pop_front() else {
                    b.first = now_ms + 1;
                    break;
                };
                b.first += 1;
                due.push(bucket);
            }
        }
        for task in due.drain(..).flatten() {
            (task.call)(task.log, task.id);
        }
        if !shared.sleep_past(now_ms) {
            return;
        }
    }
}

impl RealTimeTimer for FloorDirect {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        // Captured as the tickwheel entrants capture it (see `adapters::leaked`).
        let log = super::adapters::leaked(&self.log, log);
        let after = deadline.saturating_duration_since(self.shared.base);
        let ms = after.as_nanos().div_ceil(MS.as_nanos()) as usize;
        let mut b = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let at = ms.saturating_sub(b.first);
        if b.buckets.len() <= at {
            b.buckets.resize_with(at + 1, Vec::new);
        }
        let call = Log::fire;
        b.buckets[at].push(Task { call, log, id });
    }

    fn shutdown(mut self: Box<Self>) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the floor with workers adds to the floor's shared state: the due buckets on their
/// way to the workers, whether the workers are to stop, how many wait for a bucket.
#[derive(Default)]
struct Handoff {
    due: Mutex<(VecDeque<Vec<u32>>, usize, bool)>,
    work: Condvar,
}

/// The floor with a worker hand-off: [`BucketFloor`]'s producer and thread, but the thread
/// hands each due millisecond's bucket to a pool of worker threads (one a core, as
/// `TimerService` has by default) instead of running it: a mutex-guarded queue of buckets and
/// a condition variable, notified only when a worker waits. Not a timer either: what the
/// least work W4 costs once callbacks run off the timer thread, to tell what the hand-off
/// costs on this machine from what the service adds to it.
pub struct FloorWorkers {
    floor: Floor<u32>,
    handoff: Arc<Handoff>,
    workers: Vec<JoinHandle<()>>,
}

impl FloorWorkers {
    /// Starts the thread and the workers.
    pub fn new() -> Result<FloorWorkers> {
        let handoff = Arc::new(Handoff::default());
        let to_workers = Arc::clone(&handoff);
        let floor = Floor::start("floor-handoff", move |_: &Log, bucket: Vec<u32>| {
            let mut due = to_workers
                .due
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            due.0.push_back(bucket);
            let waiting = due.1 > 0;
            drop(due);
            if waiting {
                to_workers.work.notify_one();
            }
        })?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = (0..cores)
            .map(|i| {
                let (shared, handoff) = (Arc::clone(&floor.shared), Arc::clone(&handoff));
                std::thread::Builder::new()
                    .name(format!("floor-worker-{i}"))
                    .spawn(move || floor_worker(&shared, &handoff))
                    .map_err(|e| Error::io("cannot start a floor worker", e))
            })
            .collect::<Result<Vec<_>>>();
        let workers = match workers {
            Ok(workers) => workers,
            Err(e) => {
                floor.stop();
                return Err(e);
            }
        };
        Ok(FloorWorkers {
            floor,
            handoff,
            workers,
        })
    }
}

fn floor_worker(shared: &FloorShared<u32>, handoff: &Handoff) {
    let mut due = handoff.due.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(bucket) = due.0.pop_front() {
            drop(due);
            if let Some(log) = shared.log.get() {
                bucket.into_iter().for_each(|id| log.fire(id));
            }
            due = handoff.due.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        if due.2 {
            return;
        }
        due.1 += 1;
        due = handoff
            .work
            .wait(due)
            .unwrap_or_else(PoisonError::into_inner);
        due.1 -= 1;
    }
}

impl RealTimeTimer for FloorWorkers {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        self.floor.shared.log.get_or_init(|| Arc::clone(log));
        self.floor.shared.stage(deadline, id);
    }

    fn shutdown(self: Box<Self>) {
        let FloorWorkers {
            floor,
            handoff,
            workers,
        } = *self;
        floor.stop();
        handoff.due.lock().unwrap_or_else(PoisonError::into_inner).2 = true;
        handoff.work.notify_all();
        for worker in workers {
            let _ = worker.join();
        }
    }
}
