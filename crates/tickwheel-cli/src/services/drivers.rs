//! The service entrants, each behind [`RealTimeTimer`]: tickwheel's `TimerService`, tokio
//! `sleep` tasks, tokio-util's `DelayQueue` fed through a channel, and a
//! `BinaryHeap`-plus-thread baseline.

use super::{Log, RealTimeTimer};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwheel::TimerService;
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;

/// tickwheel's `TimerService` with its defaults (1 ms ticks, a worker a core, sharded
/// wheels): each task is a callback scheduled with `schedule_at(deadline, f)` (not
/// `schedule(delay, f)`, which would read the clock a second time).
pub struct TickwheelService {
    service: TimerService,
}

impl TickwheelService {
    /// Starts a service with the defaults.
    pub fn new() -> Result<TickwheelService, String> {
        let service = TimerService::new().map_err(|e| format!("TimerService: {e}"))?;
        Ok(TickwheelService { service })
    }
}

impl RealTimeTimer for TickwheelService {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let log = Arc::clone(log);
        // The handle is not needed: W4 never cancels (dropping it does not cancel).
        let _handle = self.service.schedule_at(deadline, move || log.fire(id));
    }

    fn shutdown(self: Box<Self>) {
        self.service.shutdown();
    }
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

impl RealTimeTimer for TokioSleep {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
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

/// Timers the `DelayQueue` task takes off the channel before it looks at expiry again.
const CHANNEL_BATCH: usize = 1024;

/// The usual way to put tokio-util's `DelayQueue` (which is `!Sync` and lives in one task)
/// behind a cheap schedule call: producers send `(deadline, task)` on an unbounded channel;
/// one task on a current-thread runtime, on its own thread, moves what arrived into the
/// queue and runs the expired tasks itself. Accepting a timer is a channel send; how late it
/// fires depends on how far that one task is behind. Tasks are boxed callbacks, as in the
/// `BinaryHeap` entrant.
pub struct DelayQueueChannel {
    sender: Option<mpsc::UnboundedSender<(Instant, Task)>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayQueueChannel {
    /// Starts the runtime thread and its queue task.
    pub fn new() -> Result<DelayQueueChannel, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("delay-queue".into())
            .spawn(move || runtime.block_on(delay_queue_task(receiver)))
            .map_err(|e| format!("cannot start the delay queue thread: {e}"))?;
        Ok(DelayQueueChannel {
            sender: Some(sender),
            thread: Some(thread),
        })
    }
}

/// Until the channel is closed and the queue empty: take in up to [`CHANNEL_BATCH`] sent
/// timers, run every expired one, repeat; sleep (`Pending`) when neither made progress.
async fn delay_queue_task(mut receiver: mpsc::UnboundedReceiver<(Instant, Task)>) {
    let mut queue: DelayQueue<Task> = DelayQueue::new();
    let mut closed = false;
    std::future::poll_fn(|cx| loop {
        let mut progressed = false;
        for _ in 0..CHANNEL_BATCH {
            match receiver.poll_recv(cx) {
                Poll::Ready(Some((deadline, task))) => {
                    queue.insert_at(task, deadline.into());
                    progressed = true;
                }
                Poll::Ready(None) => {
                    closed = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(expired)) = queue.poll_expired(cx) {
            (expired.into_inner())();
            progressed = true;
        }
        if closed && queue.is_empty() {
            return Poll::Ready(());
        }
        if !progressed {
            return Poll::Pending;
        }
    })
    .await;
}

impl RealTimeTimer for DelayQueueChannel {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let log = Arc::clone(log);
        let task: Task = Box::new(move || log.fire(id));
        if let Some(sender) = &self.sender {
            // Fails only once the queue task is gone, which `shutdown` alone causes.
            let _ = sender.send((deadline, task));
        }
    }

    fn shutdown(mut self: Box<Self>) {
        // Closing the channel ends the task once the queue is empty.
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

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
    pub fn new() -> Result<HeapThread, String> {
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("heap-timer".into())
            .spawn(move || timer_thread(&worker))
            .map_err(|e| format!("cannot start the heap timer thread: {e}"))?;
        Ok(HeapThread {
            shared,
            thread: Some(thread),
        })
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

impl RealTimeTimer for HeapThread {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let log = Arc::clone(log);
        // Allocated before locking: the timer thread pops under the same lock.
        let task: Task = Box::new(move || log.fire(id));
        let mut state = self.shared.lock();
        state.sequence += 1;
        let sequence = state.sequence;
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
