//! The three parts of W8, written once for any [`AsyncTimers`] and run inside a 2-worker
//! tokio runtime:
//!
//! * [`timeouts`]: a `timeout` that never fires around a future that is ready at once, or
//!   pending once (it wakes its own task and is ready at the next poll, as a socket read
//!   that waits once). One task a worker, each awaiting `ops` of them in a loop, both at
//!   once; the result is CPU ns per timeout: the process's CPU time over the loops (its
//!   threads' time on a core: workers, timer threads, reactors), divided by the timeouts.
//!   On an idle machine that is the wall time a worker spends on one; on a busy one it
//!   leaves out the time the threads waited for a core.
//! * [`resets`]: a connection's idle timeout reset on each message. One task a worker, each
//!   receiving `ops` messages (each pending once), selecting between the next message and
//!   the idle sleep, and pushing the sleep back by its idle time on every message; CPU ns
//!   per message, as above. Then the sleep is moved to a few ms ahead and awaited: it must
//!   fire, not early.
//! * [`sleepers`]: `tasks` tasks that sleep in a loop, each sleep uniform in a third of
//!   `max_delay` up to `max_delay` (the first one from 0, so wake-ups are spread from the
//!   start). After a warm-up of a third of `max_delay`, a window of `window` is measured:
//!   the process's CPU time over it, and the lateness of every wake-up in it, from the
//!   deadline the task asked for (`Instant::now()` read before the sleep was made, plus its
//!   delay). A wake-up before that deadline fails the run.
//!
//! Checks: a timeout that should never fire and fires, a message lost, an idle sleep that
//! fires early or not at all, a sleep that ends early: each fails the run with a message.

use super::timers::AsyncTimers;
use crate::error::{Error, Result};
use crate::machine::ThreadTimes;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tickwheel_lab::SplitMix64;

/// Worker threads of the runtime, and tasks of the timeout and reset loops.
pub const WORKERS: usize = 2;

/// A timeout far longer than any run: it never fires.
const NEVER_FIRES: Duration = Duration::from_secs(3600);

/// A connection's idle timeout, pushed back on every message.
const IDLE: Duration = Duration::from_secs(30);

/// How far ahead the idle sleep is moved at the end of [`resets`], to see it fire.
const LAST_IDLE: Duration = Duration::from_millis(3);

/// The multi-thread runtime W8 runs in: [`WORKERS`] workers, I/O and time drivers on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the tokio runtime", e))
}

/// A future that is pending once (waking its own task at once) and then ready with `value`.
#[derive(Debug)]
pub struct PendingOnce<T> {
    value: Option<T>,
    polled: bool,
}

impl<T> PendingOnce<T> {
    /// Ready with `value` at its second poll.
    pub fn new(value: T) -> PendingOnce<T> {
        PendingOnce {
            value: Some(value),
            polled: false,
        }
    }
}

impl<T: Unpin> Future for PendingOnce<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if !self.polled {
            self.polled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.value.take().expect("PendingOnce polled after Ready"))
    }
}

/// How long the threads get to go idle after a loop before their CPU time is read: the
/// kernel brings a thread's count up to date when it leaves its core, and only at its next
/// scheduler tick while it runs.
const SETTLE: Duration = Duration::from_millis(20);

/// Runs `leg` (a [`timeouts`] or [`resets`] loop of `ops` a task) on `rt` and returns the
/// process's CPU ns per operation over it; where the kernel reports no thread CPU times, the
/// mean of the wall times its tasks report, per operation. Blocks the calling thread, which
/// must not be one of `rt`'s.
pub fn cpu_per_op(
    rt: &tokio::runtime::Runtime,
    ops: u64,
    leg: impl Future<Output = Result<Duration>>,
) -> Result<f64> {
    std::thread::sleep(SETTLE);
    let before = ThreadTimes::now();
    let wall = rt.block_on(leg)?;
    std::thread::sleep(SETTLE);
    let cpu = before.and_then(|b| b.elapsed());
    let ops = WORKERS as f64 * ops.max(1) as f64;
    Ok(cpu.unwrap_or(wall).as_nanos() as f64 / ops)
}

/// Runs `body(task)` on [`WORKERS`] tasks at once and returns the sum of the wall times they
/// report.
async fn on_every_worker<F, Fut>(body: F) -> Result<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<Duration>> + Send + 'static,
{
    let tasks: Vec<_> = (0..WORKERS).map(|t| tokio::spawn(body(t))).collect();
    let mut wall = Duration::ZERO;
    for task in tasks {
        wall += task
            .await
            .map_err(|e| Error::Check(format!("a W8 task failed: {e}")))??;
    }
    Ok(wall)
}

/// `ops` timeouts that never fire on each worker task, around a future ready at once or
/// pending once; the tasks' wall times, summed.
pub async fn timeouts<T: AsyncTimers>(
    timers: &Arc<T>,
    ops: u64,
    pending_once: bool,
) -> Result<Duration> {
    on_every_worker(|_| {
        let timers = timers.clone();
        async move {
            let timers = &*timers;
            let start = Instant::now();
            for i in 0..ops {
                let out = if pending_once {
                    timers.timeout(NEVER_FIRES, PendingOnce::new(i)).await
                } else {
                    timers.timeout(NEVER_FIRES, std::future::ready(i)).await
                };
                if out != Some(i) {
                    return Err(Error::Check(format!(
                        "a {} h timeout fired (operation {i})",
                        NEVER_FIRES.as_secs() / 3600
                    )));
                }
            }
            Ok(start.elapsed())
        }
    })
    .await
}

/// `ops` messages on each worker task, each resetting an idle sleep; then checks that the
/// sleep, moved a few ms ahead, fires and not early. The tasks' wall times over the
/// messages, summed.
pub async fn resets<T: AsyncTimers>(timers: &Arc<T>, ops: u64) -> Result<Duration> {
    on_every_worker(|_| {
        let timers = timers.clone();
        async move {
            let timers = &*timers;
            let mut idle = pin!(timers.sleep(IDLE));
            let start = Instant::now();
            for i in 0..ops {
                tokio::select! {
                    biased;
                    message = PendingOnce::new(i) => {
                        if message != i {
                            return Err(Error::Check(format!("message {i} came as {message}")));
                        }
                        T::reset(idle.as_mut(), Instant::now() + IDLE);
                    }
                    _ = idle.as_mut() => {
                        return Err(Error::Check(format!(
                            "the {} s idle sleep fired at message {i}",
                            IDLE.as_secs()
                        )));
                    }
                }
            }
            let elapsed = start.elapsed();
            if T::FIRES {
                let due = Instant::now() + LAST_IDLE;
                T::reset(idle.as_mut(), due);
                idle.as_mut().await;
                let early = due.saturating_duration_since(Instant::now());
                if !early.is_zero() {
                    return Err(Error::Check(format!("a reset sleep fired {early:?} early")));
                }
            }
            Ok(elapsed)
        }
    })
    .await
}

/// What [`sleepers`] measured.
#[derive(Debug, Clone)]
pub struct Sleepers {
    /// Wake-ups in the window.
    pub wakes: usize,
    /// The process's CPU time over the window (`None` without `/proc`).
    pub cpu: Option<Duration>,
    /// The window's real length.
    pub wall: Duration,
    /// The lateness of each wake-up in the window, ns, sorted.
    pub late_ns: Vec<u64>,
}

/// `tasks` tasks sleeping in a loop on `rt` (see the module's doc); blocks the calling
/// thread, which must not be one of `rt`'s.
pub fn sleepers<T: AsyncTimers>(
    rt: &tokio::runtime::Runtime,
    timers: &Arc<T>,
    tasks: usize,
    max_delay: Duration,
    window: Duration,
    seed: u64,
) -> Result<Sleepers> {
    let max_ns = max_delay.as_nanos().max(3) as u64;
    let start = Instant::now();
    let from = start + max_delay / 3;
    let to = from + window;
    let late: Arc<Vec<Mutex<Vec<u64>>>> = Arc::new((0..tasks).map(|_| Mutex::default()).collect());
    let early: Arc<Mutex<Option<(usize, Duration)>>> = Arc::default();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (timers, late, early) = (timers.clone(), late.clone(), early.clone());
            rt.spawn(async move {
                let timers = &*timers;
                let mut rng = SplitMix64::new(seed ^ (task as u64).wrapping_mul(0x9E37_79B9));
                let mut low = 0;
                loop {
                    let delay = Duration::from_nanos(rng.in_range(low..=max_ns));
                    low = max_ns / 3;
                    let deadline = Instant::now() + delay;
                    timers.sleep(delay).await;
                    let woke = Instant::now();
                    if woke < deadline {
                        *early.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((task, deadline - woke));
                    }
                    if (from..to).contains(&woke) {
                        let ns = woke.saturating_duration_since(deadline).as_nanos() as u64;
                        late[task]
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(ns);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(from.saturating_duration_since(Instant::now()));
    let (cpu_from, wall_from) = (ThreadTimes::now(), Instant::now());
    std::thread::sleep(to.saturating_duration_since(Instant::now()));
    let (cpu, wall) = (cpu_from.and_then(|c| c.elapsed()), wall_from.elapsed());
    for handle in &handles {
        handle.abort();
    }
    rt.block_on(async {
        for handle in handles {
            // Every task loops until aborted: an error that is not the abort is a panic.
            if let Err(e) = handle.await {
                if !e.is_cancelled() {
                    return Err(Error::Check(format!("a sleeping task failed: {e}")));
                }
            }
        }
        Ok(())
    })?;
    if let Some((task, by)) = *early.lock().unwrap_or_else(|p| p.into_inner()) {
        return Err(Error::Check(format!(
            "task {task}'s sleep ended {by:?} early"
        )));
    }
    let mut late_ns: Vec<u64> = late
        .iter()
        .flat_map(|slot| std::mem::take(&mut *slot.lock().unwrap_or_else(|p| p.into_inner())))
        .collect();
    late_ns.sort_unstable();
    Ok(Sleepers {
        wakes: late_ns.len(),
        cpu,
        wall,
        late_ns,
    })
}
