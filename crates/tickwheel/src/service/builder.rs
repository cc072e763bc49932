//! [`Builder`]: the knobs of a [`TimerService`].

use std::any::Any;
use std::fmt;
use std::io;
use std::time::Duration;

use super::flavor::QueueFlavor;
use super::sleeper::SleepPolicy;
use super::TimerService;
use crate::time::{Clock, MonotonicClock, MAX_RESOLUTION, MIN_RESOLUTION};
use std::sync::Arc;

/// Configures and starts a [`TimerService`].
///
/// ```
/// use std::time::Duration;
/// use tickwheel::service::{QueueFlavor, TimerService};
///
/// let service = TimerService::builder()
///     .resolution(Duration::from_micros(100))
///     .queue(QueueFlavor::Heap)
///     .worker_threads(2)
///     .max_pending(1_000_000)
///     .build()
///     .unwrap();
/// assert_eq!(service.resolution(), Duration::from_micros(100));
/// ```
pub struct Builder {
    pub(crate) resolution: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) flavor: QueueFlavor,
    pub(crate) workers: Option<usize>,
    pub(crate) shards: Option<usize>,
    pub(crate) cap: Option<usize>,
    pub(crate) on_panic: Option<super::worker::PanicHandler>,
    pub(crate) name: String,
    /// How the timer thread sleeps: [`busy_wait`](Builder::busy_wait) and
    /// [`wake_interval`](Builder::wake_interval), handed to the timer thread as one value.
    pub(crate) sleep_policy: SleepPolicy,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            resolution: Duration::from_millis(1),
            clock: Arc::new(MonotonicClock),
            flavor: QueueFlavor::Wheel,
            workers: None,
            shards: None,
            cap: None,
            on_panic: None,
            name: "tickwheel".into(),
            sleep_policy: SleepPolicy::default(),
        }
    }
}

impl Builder {
    /// The most queue shards a service takes: [`shards`](Builder::shards) above it makes
    /// `build` fail with `InvalidInput`.
    pub const MAX_SHARDS: usize = 1 << 16;

    /// The most worker threads a service takes: [`worker_threads`](Builder::worker_threads)
    /// above it makes `build` fail with `InvalidInput`.
    pub const MAX_WORKER_THREADS: usize = 1 << 16;

    /// The length of a tick, from 1 µs to 1 s (default 1 ms). Deadlines round up to it.
    /// `build` fails with `InvalidInput` outside that range.
    pub fn resolution(mut self, resolution: Duration) -> Self {
        self.resolution = resolution;
        self
    }

    /// The clock (default [`MonotonicClock`]). With a virtual clock such as
    /// [`ManualClock`](crate::time::ManualClock) the service fires timers only when the clock
    /// moves.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The queue each shard keeps its timers in (default [`QueueFlavor::Wheel`]).
    pub fn queue(mut self, flavor: QueueFlavor) -> Self {
        self.flavor = flavor;
        self
    }

    /// Threads that run callbacks (default: available cores).
    ///
    /// `0` runs every callback on the thread that takes it out of the queue: the timer thread
    /// (or a thread inside [`settle`](TimerService::settle)), in deadline order, one at a time
    /// on each such thread. This is the design of a timer thread that runs its own tasks (a
    /// `BinaryHeap` thread, Netty's `HashedWheelTimer`): no hand-off, so the least CPU and
    /// lateness for short callbacks, especially at a fine resolution. The price: a slow
    /// callback makes every timer after it late, and a callback that blocks (on a lock held
    /// elsewhere, on I/O) stops the service's clock until it returns. So a callback must
    /// not [`wait`](super::TimerHandle::wait) for another of this service's timers: nothing
    /// would be left to fire it. A panic is still caught and counted.
    ///
    /// `build` fails with `InvalidInput` above [`MAX_WORKER_THREADS`](Builder::MAX_WORKER_THREADS),
    /// and with the operating system's error when it cannot start a thread.
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Queue shards (rounded up to a power of two; default: twice the available cores). Each
    /// thread schedules into one shard, so producers on different shards never share a lock.
    /// `build` fails with `InvalidInput` for 0 and above [`MAX_SHARDS`](Builder::MAX_SHARDS).
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// A cap on pending timers: [`try_schedule`](TimerService::try_schedule) fails with
    /// [`TryScheduleError::Full`](super::TryScheduleError::Full) at the cap. The count is one
    /// atomic shared by all producers, so a cap costs some multi-thread throughput.
    pub fn max_pending(mut self, cap: usize) -> Self {
        self.cap = Some(cap);
        self
    }

    /// Called on the worker with the payload of every panicking callback, after it has been
    /// caught and counted (the standard panic hook has already printed it). A panic in the
    /// handler itself is caught and ignored.
    pub fn on_panic(mut self, handler: impl Fn(&(dyn Any + Send)) + Send + Sync + 'static) -> Self {
        self.on_panic = Some(Arc::new(handler));
        self
    }

    /// The longest the timer thread may spin before a tick instead of sleeping (default
    /// 50 µs; `Duration::ZERO` never spins).
    ///
    /// A timed sleep ends late (tens of microseconds on a virtual machine), and that is
    /// lateness for every timer of the tick. The timer thread measures how late its
    /// sleeps end, wakes twice that early (at most `max`) and spins to the tick's start. It
    /// spins only when it has timers due and the sleep is at least 500 µs and four such
    /// margins long, so an idle service still uses no CPU and a fine resolution with a timer
    /// every tick does not turn the timer thread into a busy loop. With a virtual clock it
    /// never spins.
    ///
    /// Why 50 µs: with a cap near the typical overshoot, the thread wakes about as early as it
    /// needs and seldom spins; a larger cap spins the difference before every tick with work.
    /// Measured on a shared 2-core VM (10^4 tasks sleeping 0.5-1.5 s in a loop in a 2-worker
    /// tokio runtime, 1 ms ticks, 3 runs each; `tests/futures.rs`,
    /// `sleepers_cpu_and_lateness`): the process used 0.094 / 0.116 / 0.106 cores with
    /// 100 µs, 0.083 / 0.084 / 0.082 with 50 µs, 0.075 / 0.065 / 0.070 with 25 µs and
    /// 0.072 / 0.076 / 0.065 with none (tokio's own timer: about 0.05); the median lateness
    /// of a wake-up after its tick's start was 38 / 42 / 37 µs, 38 / 38 / 36, 45 / 42 / 46 and
    /// 72 / 75 / 75 µs. 50 µs keeps the median of 100 µs for about a fifth less CPU; with
    /// no spin the median doubles. Raise it where sleeps overshoot more and precision is
    /// worth a core's few percent; set zero where CPU matters more than some 30 µs.
    pub fn busy_wait(mut self, max: Duration) -> Self {
        self.sleep_policy.busy_wait = max;
        self
    }

    /// About the shortest time between two timed wake-ups of the timer thread (default
    /// `Duration::ZERO`: a wake-up at the start of every tick that has timers due).
    ///
    /// Every timed wake-up costs CPU of its own, however short the sleep. When the next due
    /// tick starts sooner than this after the timer thread's last wake-up, it sleeps until the
    /// interval is over and then runs every tick that has started meanwhile at once. Timers
    /// are never early by this, and at most about one interval later than with a wake-up per
    /// tick. At resolutions of the interval or coarser (the default 1 ms) it changes nothing
    /// but for a timer scheduled already due, which may wait for the end of the current
    /// interval. A longer interval saves more wake-ups at a fine resolution and costs as much
    /// more lateness: measure both on the machine that runs it. With a virtual clock it has no
    /// effect. An interval longer than a second (the coarsest resolution) is taken as a
    /// second.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::service::TimerService;
    ///
    /// let service = TimerService::builder()
    ///     .resolution(Duration::from_micros(10))
    ///     .wake_interval(Duration::from_micros(50))
    ///     .build()
    ///     .unwrap();
    /// # drop(service);
    /// ```
    pub fn wake_interval(mut self, interval: Duration) -> Self {
        self.sleep_policy.wake_interval = interval.min(MAX_RESOLUTION);
        self
    }

    /// The prefix of the service's thread names (default `tickwheel`).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Starts the timer thread and the workers.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a resolution outside 1 µs..=1 s or zero shards; the OS
    /// error if a thread cannot be spawned (threads already started are stopped again).
    pub fn build(self) -> io::Result<TimerService> {
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if !(MIN_RESOLUTION..=MAX_RESOLUTION).contains(&self.resolution) {
            return invalid(format!(
                "tickwheel: resolution must be within 1 µs..=1 s, not {:?}",
                self.resolution
            ));
        }
        match self.shards {
            Some(0) => return invalid("tickwheel: shards must be at least 1".into()),
            Some(n) if n > Builder::MAX_SHARDS => {
                return invalid(format!(
                    "tickwheel: shards must be at most {}, not {n}",
                    Builder::MAX_SHARDS
                ))
            }
            _ => {}
        }
        if let Some(n) = self.workers.filter(|&n| n > Builder::MAX_WORKER_THREADS) {
            return invalid(format!(
                "tickwheel: worker_threads must be at most {}, not {n}",
                Builder::MAX_WORKER_THREADS
            ));
        }
        TimerService::start(self)
    }
}

/// The default for worker threads: the available cores.
pub(crate) fn default_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("resolution", &self.resolution)
            .field("clock", &self.clock)
            .field("flavor", &self.flavor)
            .field("workers", &self.workers)
            .field("shards", &self.shards)
            .field("cap", &self.cap)
            .field("busy_wait", &self.sleep_policy.busy_wait)
            .field("wake_interval", &self.sleep_policy.wake_interval)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Duration::MAX` must not reach the timer thread, where `now + interval` would
    /// overflow an `Instant`.
    #[test]
    fn a_huge_wake_interval_is_capped_at_a_second() {
        let b = Builder::default().wake_interval(Duration::MAX);
        assert_eq!(b.sleep_policy.wake_interval, MAX_RESOLUTION);
        let b = Builder::default().wake_interval(Duration::from_micros(50));
        assert_eq!(b.sleep_policy.wake_interval, Duration::from_micros(50));
    }
}
