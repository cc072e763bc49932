//! W4's real-time entrants: tokio `sleep` tasks, a `BinaryHeap`-plus-thread baseline, and
//! the hook for tickwheel's `TimerService`.

use super::{Driver, Log};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// tickwheel's `TimerService` as a W4 entrant.
///
/// HOOK: the service is being built on another branch. Until it lands here this returns
/// `Ok(None)`, and `tickwheel bench` says that the entrant was skipped.
pub fn service_driver() -> Result<Option<Box<dyn Driver>>, String> {
    Ok(None)
}

/// One tokio task per timer: `sleep_until(deadline).await`, then the callback, on a
/// multi-thread runtime with one worker per core (tokio's default).
pub struct TokioSleep {
    runtime: tokio::runtime::Runtime,
}

impl TokioSleep {
    /// A fresh multi-thread runtime.
    pub fn new() -> Result<TokioSleep, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        Ok(TokioSleep { runtime })
    }
}

impl Driver for TokioSleep {
    fn schedule(&self, id: u32, _delay: Duration, deadline: Instant, log: &Arc<Log>) {
        let log = Arc::clone(log);
        let deadline = tokio::time::Instant::from_std(deadline);
        self.runtime.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            log.fire(id);
        });
    }

    fn shutdown(self: Box<Self>) {
        self.runtime.shutdown_timeout(Duration::from_secs(5));
    }
}

type Task = Box<dyn FnOnce() + Send>;

/// One heap entry; ordered so the `BinaryHeap` (a max-heap) pops the earliest first.
struct Entry {
    deadline: Instant,
    sequence: u64,
    task: Task,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.deadline, other.sequence).cmp(&(self.deadline, self.sequence))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Entry>,
    sequence: u64,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The timer most projects write first: a `BinaryHeap` of boxed callbacks behind a mutex,
/// one thread that sleeps on a condvar until the earliest deadline and runs due callbacks
/// itself (outside the lock). Scheduling a new earliest timer wakes it.
pub struct HeapThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl HeapThread {
    /// Starts the timer thread.
    pub fn new() -> HeapThread {
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("heap-timer".into())
            .spawn(move || timer_thread(&worker))
            .ok();
        HeapThread { shared, thread }
    }
}

fn timer_thread(shared: &Shared) {
    let mut due: Vec<Task> = Vec::new();
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        while state.heap.peek().is_some_and(|top| top.deadline <= now) {
            due.extend(state.heap.pop().map(|e| e.task));
        }
        if !due.is_empty() {
            drop(state);
            due.drain(..).for_each(|task| task());
            state = shared.lock();
            continue;
        }
        state = match state.heap.peek().map(|top| top.deadline - now) {
            Some(wait) => {
                shared
                    .wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None if state.shutdown => return,
            None => shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner),
        };
    }
}

impl Driver for HeapThread {
    fn schedule(&self, id: u32, _delay: Duration, deadline: Instant, log: &Arc<Log>) {
        let log = Arc::clone(log);
        let mut state = self.shared.lock();
        state.sequence += 1;
        let sequence = state.sequence;
        let task: Task = Box::new(move || log.fire(id));
        state.heap.push(Entry {
            deadline,
            sequence,
            task,
        });
        let earliest = state
            .heap
            .peek()
            .is_some_and(|top| top.sequence == sequence);
        drop(state);
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    fn shutdown(mut self: Box<Self>) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
