//! The service entrants, each behind [`RealTimeTimer`]: tickwheel's `TimerService` (without
//! and with handles), tokio `sleep` tasks, tokio-util's `DelayQueue` fed through a channel, and a
//! `BinaryHeap`-plus-thread baseline.

use super::{Log, RealTimeTimer, TickwheelSetup};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwheel::{TimerHandle, TimerService};
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;

/// A `TimerService` with its defaults (a worker a core, sharded wheels) but for `setup`
/// and the worker count if `workers` is given.
fn service(setup: TickwheelSetup, workers: Option<usize>) -> Result<TimerService> {
    let builder = TimerService::builder()
        .resolution(setup.tick)
        .wake_interval(setup.wake_interval);
    match workers {
        Some(n) => builder.worker_threads(n),
        None => builder,
    }
    .build()
    .map_err(|e| Error::io("TimerService", e))
}

/// The run's log as a `&'static Log`: one reference leaked on the first call (a W4 run is
/// one process, so it is one log of 16 bytes a task, freed with the process).
pub(super) fn leaked(cell: &OnceLock<&'static Log>, log: &Arc<Log>) -> &'static Log {
    cell.get_or_init(|| Box::leak(Box::new(Arc::clone(log))))
}

/// tickwheel's `TimerService` (see [`service`]): each task is a callback scheduled with
/// `schedule_detached_at(deadline, f)`: W4 never cancels, so it takes no handle (and
/// `schedule_detached(delay, f)` would read the clock a second time). The detached path
/// stages the timer in its shard's inbox; the timer thread queues it later (or, in a burst, the
/// producer itself, every 1024 timers).
///
/// Lean like the peers (no reference count per task): the callback captures the task id and
/// a `&'static Log` (see [`leaked`]). With `worker_threads(0)` (`tickwheel-service-here`)
/// the timer thread runs the callbacks itself, as the heap thread does.
pub struct TickwheelService {
    service: TimerService,
    log: OnceLock<&'static Log>,
}

impl TickwheelService {
    /// Starts a service as `setup` says, with `workers` workers (default: a core each).
    pub fn new(setup: TickwheelSetup, workers: Option<usize>) -> Result<TickwheelService> {
        Ok(TickwheelService {
            service: service(setup, workers)?,
            log: OnceLock::new(),
        })
    }
}

impl RealTimeTimer for TickwheelService {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let log = leaked(&self.log, log);
        // W4 never cancels, so no handle: the detached path.
        self.service
            .schedule_detached_at(deadline, move || log.fire(id));
    }

    fn shutdown(self: Box<Self>) {
        self.service.shutdown();
    }
}

/// tickwheel's `TimerService` as a program that needs its timers' handles uses it: each task
/// is scheduled with `schedule_at(deadline, f)`, which stages the timer in its shard's inbox
/// with a cell and returns a [`TimerHandle`] that can cancel, reset or wait for it; the
/// handle is kept (pushed into a vector preallocated for every task, as a server would keep
/// it in the request's state) until the run ends. Dropping a handle would not cancel its
/// timer, so keeping it changes no firing: the difference to [`TickwheelService`] is the
/// cost of the handle path (the cell, the handle's reference count) and the 24 bytes a task
/// the handles take, both counted.
pub struct TickwheelServiceHandles {
    service: TimerService,
    log: OnceLock<&'static Log>,
    handles: RefCell<Vec<TimerHandle>>,
}

impl TickwheelServiceHandles {
    /// Starts a service as `setup` says, with room for `n` handles.
    pub fn new(setup: TickwheelSetup, n: usize) -> Result<TickwheelServiceHandles> {
        Ok(TickwheelServiceHandles {
            service: service(setup, None)?,
            log: OnceLock::new(),
            handles: RefCell::new(Vec::with_capacity(n)),
        })
    }
}

impl RealTimeTimer for TickwheelServiceHandles {
    fn schedule(&self, id: u32, deadline: Instant, log: &Arc<Log>) {
        let log = leaked(&self.log, log);
        let handle = self.service.schedule_at(deadline, move || log.fire(id));
        self.handles.borrow_mut().push(handle);
    }

    fn shutdown(self: Box<Self>) {
        self.service.shutdown();
        // The handles go with `self`, after the run's measurements.
    }
}

/// One tokio task per timer: `sleep_until(deadline).await`, then the callback, on a
/// multi-thread runtime with one worker per core (tokio's default).
pub struct TokioSleep {
    runtime: tokio::runtime::Runtime,
}

impl TokioSleep {
    /// A fresh multi-thread runtime.
    pub fn new() -> Result<TokioSleep> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
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

/// Timers the `DelayQueue` task takes off the channel before it looks at expiry again.
const CHANNEL_BATCH: usize = 1024;

/// The usual way to put tokio-util's `DelayQueue` (which is `!Sync` and lives in one task)
/// behind a cheap schedule call: producers send `(deadline, task)` on an unbounded channel;
/// one task on a current-thread runtime, on its own thread, moves what arrived into the
/// queue and runs the expired tasks itself. Accepting a timer is a channel send; how late it
/// fires depends on how far that one task is behind. A timer is sent and queued as
/// `(deadline, task id)`, its callback state in an array indexed by task id (W4's [`Log`],
/// handed over once), so no task is boxed or reference-counted.
pub struct DelayQueueChannel {
    log: Arc<OnceLock<Arc<Log>>>,
    sender: Option<mpsc::UnboundedSender<(Instant, u32)>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayQueueChannel {
    /// Starts the runtime thread and its queue task.
    pub fn new() -> Result<DelayQueueChannel> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let log = Arc::new(OnceLock::new());
        let task_log = Arc::clone(&log);
        let thread = std::thread::Builder::new()
            .name("delay-queue".into())
            .spawn(move || runtime.block_on(delay_queue_task(receiver, &task_log)))
            .map_err(|e| Error::io("cannot start the delay queue thread", e))?;
        Ok(DelayQueueChannel {
            log,
            sender: Some(sender),
            thread: Some(thread),
        })
    }
}

/// Until the channel is closed and the queue empty: take in up to [`CHANNEL_BATCH`] sent
/// timers, run every expired one, repeat; sleep (`Pending`) when neither made progress.
async fn delay_queue_task(
    mut receiver: mpsc::UnboundedReceiver<(Instant, u32)>,
    log: &OnceLock<Arc<Log>>,
) {
    let mut queue: DelayQueue<u32> = DelayQueue::new();
    let mut closed = false;
    std::future::poll_fn(|cx| loop {
        let mut progressed = false;
        for _ in 0..CHANNEL_BATCH {
            match receiver.poll_recv(cx) {
                Poll::Ready(Some((deadline, id))) => {
                    queue.insert_at(id, deadline.into());
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
            // A task is only sent after the log is set, so it is set here.
            if let Some(log) = log.get() {
                log.fire(expired.into_inner());
            }
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
        // One adapter serves one W4 run, so one log: kept on the first call.
        self.log.get_or_init(|| Arc::clone(log));
        if let Some(sender) = &self.sender {
            // Fails only once the queue task is gone, which `shutdown` alone causes.
            let _ = sender.send((deadline, id));
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

/// What the heap thread shares with the producers: the heap of `(deadline, task id)` under
/// one mutex, the condvar the thread sleeps on, and the callback state, which is W4's
/// [`Log`], preallocated, set once on the first schedule.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    log: OnceLock<Arc<Log>>,
}

/// The heap (a max-heap of `Reverse`, so the earliest deadline is on top; equal deadlines
/// pop in id order) and the shutdown flag.
#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
    shutdown: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The timer most projects write first, in its lean form: a std `BinaryHeap` of
/// `(deadline, task id)` behind a mutex, one thread that sleeps with `wait_timeout` until the
/// earliest deadline, pops what is due under the lock and runs the callbacks outside it. A
/// task is 20 bytes in the heap: no boxed callback and no reference count per task, as the
/// callback state lives in an array indexed by task id. Producers notify the thread only
/// when they push a new earliest deadline.
pub struct HeapThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl HeapThread {
    /// Starts the timer thread.
    pub fn new() -> Result<HeapThread> {
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("heap-timer".into())
            .spawn(move || timer_thread(&worker))
            .map_err(|e| Error::io("cannot start the heap timer thread", e))?;
        Ok(HeapThread {
            shared,
            thread: Some(thread),
        })
    }
}

fn timer_thread(shared: &Shared) {
    let mut due: Vec<u32> = Vec::new();
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        while let Some(&Reverse((deadline, id))) = state.heap.peek() {
            if deadline > now {
                break;
            }
            state.heap.pop();
            due.push(id);
        }
        if !due.is_empty() {
            drop(state);
            // A task is only pushed after the log is set, so it is set here.
            if let Some(log) = shared.log.get() {
                due.drain(..).for_each(|id| log.fire(id));
            }
            due.clear();
            state = shared.lock();
            continue;
        }
        state = match state
            .heap
            .peek()
            .map(|Reverse((deadline, _))| *deadline - now)
        {
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
        // One adapter serves one W4 run, so one log: kept on the first call.
        self.shared.log.get_or_init(|| Arc::clone(log));
        let mut state = self.shared.lock();
        let earliest = state
            .heap
            .peek()
            .is_none_or(|Reverse((top, _))| deadline < *top);
        state.heap.push(Reverse((deadline, id)));
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
