//! The [`TimerService`] (layer 3): a timer thread, sharded queues and a worker pool that run
//! callbacks at their deadlines.
//!
//! ```
//! use std::sync::mpsc;
//! use std::time::Duration;
//! use tickwheel::service::TimerService;
//!
//! let service = TimerService::builder().worker_threads(1).build().unwrap();
//! let (tx, rx) = mpsc::channel();
//! let handle = service.schedule(Duration::from_millis(5), move || tx.send("fired").unwrap());
//! handle.wait();
//! assert_eq!(rx.recv().unwrap(), "fired");
//! ```
//!
//! # Architecture
//!
//! * **Shards** (`shard.rs`): a power of two of `Mutex<queue>`s (default twice the
//!   cores). Each thread schedules into one shard picked by a thread-local index, so producers
//!   on different shards never touch the same lock or cache line; a [`TimerHandle`] remembers
//!   its shard, so cancel and reset lock only that one. Each shard publishes a lower bound of
//!   its earliest deadline tick in an atomic.
//! * **The timer thread** (`driver.rs`) sleeps until the earliest published tick
//!   and is woken early only when an insert lowers it (no tick loop: an idle service sleeps
//!   with no timeout). It drains due timers from every shard, merges them by deadline and
//!   hands them to the workers in batches.
//! * **Workers** (`worker.rs`) run callbacks under `catch_unwind`: a slow or
//!   panicking callback never delays the timer thread; panics are counted in [`Stats`].
//!
//! # Costs of `schedule`
//!
//! One clock read (never a cached "now": a stale now would make timers fire early), one `Box`
//! of the closure, one uncontended lock of the caller's shard, an O(1) wheel insert and one
//! uncontended `Arc` increment for the handle. No syscall unless the new timer becomes the
//! earliest one the timer thread is sleeping towards. No global lock or counter (unless a cap
//! is configured).
//!
//! # Virtual time and `settle`
//!
//! On a [`ManualClock`](crate::time::ManualClock) the service subscribes to the clock and
//! drains due timers whenever it moves. To make tests deterministic, call
//! [`settle`](TimerService::settle) after moving the clock: it returns once every timer due at
//! the clock's current time has been taken out **and its callback has finished**, including
//! timers those callbacks scheduled that are themselves already due.
//!
//! # Shutdown
//!
//! [`shutdown`](TimerService::shutdown) (also run by `Drop`): the timer thread stops; every
//! timer still pending is **discarded** — its closure is dropped without running, it counts in
//! [`Stats::discarded`], `wait()`ers are released and its handle reports not pending; callbacks
//! already handed to workers run to completion; then every thread is joined. Scheduling after
//! shutdown queues nothing: [`try_schedule`](TimerService::try_schedule) returns
//! [`ScheduleError::ShutDown`] and [`schedule`](TimerService::schedule) drops the closure and
//! returns a handle that is not pending.
//!
//! # The futures layer's hooks (crate-internal)
//!
//! Two kinds of entries run on the timer thread itself (or on a thread inside `settle`),
//! with no hand-off to a worker; both are `Callback`s, so they cost no more queue storage
//! than a user callback and allocate nothing of their own:
//!
//! * `ServiceRef::schedule_waker(tick, Waker)`: a `Sleep`'s timer. It wakes the waker;
//!   `TimerHandle::update_waker` swaps the waker in place while the entry is queued (`false`
//!   once it is not). At shutdown a pending one is woken.
//! * `ServiceRef::schedule_notify(tick, Arc<dyn Expire>)`: a `Deadlines` timer. It calls
//!   `Expire::expire(Expiry::Fired)`; at shutdown a pending one gets
//!   `expire(Expiry::Discarded)`.
//!
//! `TimerHandle::cancel` removes either (`true`: it was not and will not be run),
//! `TimerHandle::reset_tick` moves it. Ticks come from [`TimerService::ticks`], the clock
//! from `TimerService::clock()`, the lazily started service from
//! [`TimerService::default_service`]. Wakers and `expire` must not block — they run on the
//! thread that keeps every other timer on time; a panic in one is caught and ignored.
//!
//! # Where the time goes (measured, see `benches/service.rs` and `examples/delayed_tasks.rs`)
//!
//! A schedule + cancel pair costs one clock read (~25 ns in the VM measured) and six atomic
//! read-modify-writes (two lock/unlock pairs, the handle's `Arc`), about 95 ns on one thread;
//! threads on different shards scale. Under load, lateness is set by how long one drain holds
//! the timer thread: the wheel never moves a whole upper-level slot at once (it moves the next
//! slots down in paced steps ahead of time; a classic cascade at 1 ms resolution and 1 M timers
//! a second is ~64 k timers in one poll, 5 ms under the shard lock), and it grows slot vectors
//! without `realloc` (under glibc a `realloc` on the timer thread consolidated the callbacks
//! the workers had freed: 20–30 ms drains). See the wheel's module docs.

mod builder;
mod callback;
mod core;
mod driver;
mod flavor;
mod handle;
mod shard;
mod sleeper;
mod stats;
mod worker;

use std::cell::Cell;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};
use std::sync::{Mutex as StdMutex, OnceLock};
use std::task::Waker;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub use builder::Builder;
pub use flavor::QueueFlavor;
pub use handle::TimerHandle;
pub use stats::{LatenessHistogram, Stats};

pub(crate) use callback::{Expire, Expiry};

use self::core::Core;
use crate::sync::Arc;
use crate::time::Ticks;
use callback::Callback;
use driver::Shared;
use shard::{Closed, Shard};

/// Why [`TimerService::try_schedule`] did not schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cap set with [`Builder::max_pending`] is reached.
    Full,
    /// The service has shut down.
    ShutDown,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Full => "timer service is at its cap of pending timers",
            ScheduleError::ShutDown => "timer service has shut down",
        })
    }
}

impl std::error::Error for ScheduleError {}

/// Hands out thread indices for shard selection, round robin.
static NEXT_THREAD_INDEX: StdAtomicUsize = StdAtomicUsize::new(0);

thread_local! {
    static THREAD_INDEX: usize = NEXT_THREAD_INDEX.fetch_add(1, StdOrdering::Relaxed);
    /// The service whose worker this thread is (its `Shared` address), or 0.
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
}

/// A timer thread, sharded queues and a pool of workers that run callbacks at their deadlines.
/// See the [module documentation](self) for the design.
pub struct TimerService {
    shared: Arc<Shared>,
    threads: StdMutex<Vec<JoinHandle<()>>>,
    /// Keeps the clock listener alive (the clock holds it weakly).
    _listener: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl TimerService {
    /// A [`Builder`] with the defaults: 1 ms resolution, [`MonotonicClock`](crate::time::MonotonicClock),
    /// [`QueueFlavor::Wheel`], one worker a core, two shards a core, no cap.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A service with the defaults.
    ///
    /// # Errors
    ///
    /// The OS error if a thread cannot be spawned.
    pub fn new() -> io::Result<TimerService> {
        Builder::default().build()
    }

    /// The process-wide service with the defaults, started on first use and never shut down.
    /// The free functions of the futures layer use it.
    ///
    /// # Panics
    ///
    /// If its threads cannot be spawned on first use (as `std::thread::spawn` would).
    pub fn default_service() -> &'static TimerService {
        static DEFAULT: OnceLock<TimerService> = OnceLock::new();
        DEFAULT.get_or_init(|| {
            TimerService::builder()
                .thread_name("tickwheel-default")
                .build()
                .expect("tickwheel: cannot start the default timer service")
        })
    }

    fn start(b: Builder) -> io::Result<TimerService> {
        let origin = b.clock.now();
        let core = Arc::new(Core::new(
            b.clock.clone(),
            Ticks::new(origin, b.resolution),
            b.cap,
        ));
        let parallelism = builder::default_parallelism();
        let nshards = b.shards.unwrap_or(2 * parallelism).next_power_of_two();
        let shards = (0..nshards)
            .map(|_| Arc::new(Shard::new(core.clone(), b.flavor)))
            .collect();
        let workers = b.workers.unwrap_or(parallelism);
        let listener_core = core.clone();
        let listener: std::sync::Arc<dyn Fn() + Send + Sync> =
            std::sync::Arc::new(move || listener_core.unpark_driver());
        let virtual_clock = b.clock.subscribe(std::sync::Arc::downgrade(&listener));
        let shared = Arc::new(Shared::new(
            core,
            shards,
            workers,
            b.on_panic,
            virtual_clock,
        ));
        let service = TimerService {
            shared,
            threads: StdMutex::new(Vec::with_capacity(workers + 1)),
            _listener: virtual_clock.then_some(listener),
        };
        let busy_wait = b.busy_wait;
        service.spawn(format!("{}-timer", b.name), move |s| {
            s.run_driver(busy_wait)
        })?;
        for i in 0..workers {
            service.spawn(format!("{}-worker-{i}", b.name), move |s| {
                WORKER_OF.with(|w| w.set(Arc::as_ptr(s) as usize));
                worker::run(
                    &s.dispatch,
                    &s.core,
                    &s.worker_stats[i],
                    s.on_panic.as_ref(),
                );
            })?;
        }
        Ok(service)
    }

    /// Spawns a service thread; on error the service is dropped by the caller (stopping the
    /// threads already started).
    fn spawn(
        &self,
        name: String,
        body: impl FnOnce(&Arc<Shared>) + Send + 'static,
    ) -> io::Result<()> {
        let shared = self.shared.clone();
        let handle = thread::Builder::new()
            .name(name)
            .spawn(move || body(&shared))?;
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
        Ok(())
    }

    /// Runs `f` on a worker after `delay` (rounded up to the next tick: never early, a sub-tick
    /// delay waits one tick). `Duration::MAX` never fires (the timer stays pending until
    /// cancelled). Never blocks and ignores the cap (see [`try_schedule`](Self::try_schedule)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::service::TimerService;
    /// use tickwheel::time::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// service.schedule(Duration::from_millis(10), move || tx.send(()).unwrap());
    /// clock.advance(Duration::from_millis(9));
    /// service.settle();
    /// assert!(rx.try_recv().is_err()); // not yet: never early
    /// clock.advance(Duration::from_millis(1));
    /// service.settle();
    /// assert!(rx.try_recv().is_ok());
    /// ```
    pub fn schedule<F>(&self, delay: Duration, f: F) -> TimerHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().delay_tick(self.shared.core.clock.now(), delay);
        self.shared
            .schedule_callback(tick, Callback::new(f), false)
            .unwrap_or_else(|_| self.inert_handle())
    }

    /// Runs `f` on a worker at `deadline` (rounded up to the next tick). An instant in the past
    /// fires at once; an instant past the service's tick range never fires.
    pub fn schedule_at<F>(&self, deadline: Instant, f: F) -> TimerHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().deadline_tick(deadline);
        self.shared
            .schedule_callback(tick, Callback::new(f), false)
            .unwrap_or_else(|_| self.inert_handle())
    }

    /// Like [`schedule`](Self::schedule), but fails instead of exceeding the cap set with
    /// [`Builder::max_pending`], or after shutdown. On error `f` is dropped.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Full`] at the cap, [`ScheduleError::ShutDown`] after shutdown.
    pub fn try_schedule<F>(&self, delay: Duration, f: F) -> Result<TimerHandle, ScheduleError>
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().delay_tick(self.shared.core.clock.now(), delay);
        self.shared.schedule_callback(tick, Callback::new(f), true)
    }

    fn inert_handle(&self) -> TimerHandle {
        self.shared.inert_handle()
    }

    /// The service's tick conversion (origin and resolution).
    pub fn ticks(&self) -> &Ticks {
        &self.shared.core.ticks
    }

    /// The length of one tick.
    pub fn resolution(&self) -> Duration {
        self.ticks().resolution()
    }

    /// The current time of the service's clock.
    pub fn now(&self) -> Instant {
        self.shared.core.clock.now()
    }

    /// Returns once every timer due at the clock's current time has fired **and its callback
    /// has finished** — also timers scheduled by those callbacks that are already due. With a
    /// [`ManualClock`](crate::time::ManualClock): move the clock, then `settle()`, then
    /// observe. Callbacks are started in deadline order (see the `driver.rs` docs: ordered by deadline tick, then shard, then insertion); with
    /// one worker they also run in that order.
    ///
    /// Called from one of this service's callbacks, it drains what is due but does not wait
    /// for callbacks (it would wait for itself). A callback that keeps scheduling already-due
    /// timers keeps `settle` busy.
    pub fn settle(&self) {
        let own = Arc::as_ptr(&self.shared) as usize;
        let on_worker = WORKER_OF.with(|w| w.get()) == own;
        loop {
            let now = self.shared.core.now_tick();
            self.shared.drain_due(now);
            if on_worker {
                return;
            }
            self.shared.dispatch.wait_idle();
            if self.shared.settled(self.shared.core.now_tick()) {
                return;
            }
        }
    }

    /// A snapshot of the service's counters.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in self.shared.shards.iter() {
            let c = shard.counts();
            stats.pending += c.pending;
            stats.high_water += c.high_water;
            stats.capacity += c.capacity;
            stats.scheduled += c.scheduled;
            stats.cancelled += c.cancelled;
        }
        for w in self.shared.worker_stats.iter() {
            stats.fired += w.fired.load(StdOrdering::Relaxed);
            stats.panicked += w.panicked.load(StdOrdering::Relaxed);
            w.lateness.add_to(&mut stats.lateness);
        }
        stats.fired += self.shared.notified.load(StdOrdering::Relaxed);
        stats.discarded = self.shared.discarded.load(StdOrdering::Relaxed);
        stats
    }

    /// Gives back memory held for timers that are gone: after a burst, the queues keep the
    /// entries of fired and cancelled timers for reuse ([`Stats::capacity`]), and this returns
    /// what it can. Pending timers, their handles and futures are unaffected.
    ///
    /// A queue can return only the entries past its last pending timer (a timer's handle names
    /// its entry, so entries are never moved). So each call also makes the next timers reuse
    /// the lowest free entries first: the tail empties as its timers leave, and a later call
    /// returns it. Call it now and then after a burst (say once a minute), not on a hot path:
    /// it takes each shard's lock in turn for time linear in what that shard holds.
    pub fn shrink_to_fit(&self) {
        for shard in self.shared.shards.iter() {
            shard.shrink_to_fit();
        }
    }

    /// Stops the service: see [Shutdown](self#shutdown). Idempotent; returns once every thread
    /// has been joined (from one of the service's own callbacks it cannot join that worker,
    /// which then exits after its current batch).
    pub fn shutdown(&self) {
        if self.shared.stopping.swap(true, StdOrdering::AcqRel) {
            return self.join_threads();
        }
        self.shared.core.unpark_driver();
        // Join the timer thread first: after it, no drain is in progress but a settle's.
        let driver = {
            let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
            (!threads.is_empty()).then(|| threads.remove(0))
        };
        if let Some(driver) = driver {
            let _ = driver.join();
        }
        let pending = self.shared.close();
        let discarded: usize = pending.iter().map(Closed::len).sum();
        self.shared
            .discarded
            .fetch_add(discarded as u64, StdOrdering::Relaxed);
        // Dropped here, outside every lock: a closure's `Drop` may run any code.
        for closed in pending {
            match closed {
                Closed::Queue(queue, _) => drop(queue),
                Closed::Callbacks(all) => all.into_iter().for_each(Callback::discard),
            }
        }
        self.join_threads();
    }

    fn join_threads(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let me = thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Shared {
    /// The implementation of [`ServiceRef::schedule_notify`]: after shutdown the target is told `Discarded` and the
    /// handle is inert.
    #[inline]
    fn schedule_notify(&self, tick: u64, target: std::sync::Arc<dyn Expire>) -> TimerHandle {
        self.schedule_callback(tick, Callback::notify(target), false)
            .unwrap_or_else(|_| self.inert_handle())
    }

    /// Queues an entry that wakes `waker` on the timer thread (the futures layer's timer):
    /// after shutdown the waker is woken at once and the handle is inert.
    #[inline]
    fn schedule_waker(&self, tick: u64, waker: Waker) -> TimerHandle {
        self.schedule_callback(tick, Callback::waker(waker), false)
            .unwrap_or_else(|_| self.inert_handle())
    }

    #[inline]
    fn schedule_callback(
        &self,
        tick: u64,
        callback: Callback,
        enforce_cap: bool,
    ) -> Result<TimerHandle, ScheduleError> {
        if !self.core.reserve(enforce_cap) {
            return Err(ScheduleError::Full);
        }
        let shard = self.local_shard();
        match shard.insert(tick, callback) {
            Ok(key) => Ok(TimerHandle {
                shard: shard.clone(),
                key: Some(key),
            }),
            Err(callback) => {
                self.core.release(1);
                callback.discard();
                Err(ScheduleError::ShutDown)
            }
        }
    }

    #[inline]
    fn local_shard(&self) -> &Arc<Shard> {
        let mask = self.shards.len() - 1;
        let index = THREAD_INDEX.with(|i| *i) & mask;
        &self.shards[index]
    }

    fn inert_handle(&self) -> TimerHandle {
        TimerHandle {
            shard: self.local_shard().clone(),
            key: None,
        }
    }
}

/// How the futures layer reaches a service after the `&TimerService` a future was made from
/// is gone (a `Sleep` schedules at its first poll): the default service by `'static`
/// reference (no reference count touched), any other by a clone of its shared state. It keeps
/// the queues alive, not the threads: after shutdown it schedules nothing.
#[derive(Clone)]
pub(crate) enum ServiceRef {
    /// A service that lives forever (the default one).
    Static(&'static Shared),
    /// Any other service.
    Owned(Arc<Shared>),
}

impl TimerService {
    /// A `'static` reference to this service's state, for the futures layer.
    pub(crate) fn service_ref(&self) -> ServiceRef {
        ServiceRef::Owned(self.shared.clone())
    }

    /// Like [`service_ref`](Self::service_ref), without a reference count, for a service
    /// that lives forever.
    pub(crate) fn static_ref(&'static self) -> ServiceRef {
        ServiceRef::Static(&self.shared)
    }
}

impl ServiceRef {
    #[inline]
    fn shared(&self) -> &Shared {
        match self {
            ServiceRef::Static(shared) => shared,
            ServiceRef::Owned(shared) => shared,
        }
    }

    /// A timer at `tick` that wakes `waker` on the timer thread, on the referenced service.
    /// [`TimerHandle::update_waker`] swaps the waker in place.
    #[inline]
    pub(crate) fn schedule_waker(&self, tick: u64, waker: Waker) -> TimerHandle {
        self.shared().schedule_waker(tick, waker)
    }

    /// Queues an entry whose expiry runs `target.expire(Fired)` **on the timer thread** (no
    /// worker hand-off), on the referenced service. At shutdown a pending entry gets
    /// `expire(Discarded)`. Ignores the cap.
    #[inline]
    pub(crate) fn schedule_notify(
        &self,
        tick: u64,
        target: std::sync::Arc<dyn Expire>,
    ) -> TimerHandle {
        self.shared().schedule_notify(tick, target)
    }

    /// The service's tick conversion.
    #[inline]
    pub(crate) fn ticks(&self) -> &Ticks {
        &self.shared().core.ticks
    }

    /// The current time of the service's clock.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.shared().core.clock.now()
    }
}

impl Drop for TimerService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for TimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerService")
            .field("resolution", &self.resolution())
            .field("shards", &self.shared.shards.len())
            .field("workers", &self.shared.worker_stats.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc as StdArc, Mutex};

    use super::*;
    use crate::time::ManualClock;

    /// Records how each notify entry ended, and on which thread.
    #[derive(Default)]
    struct Probe {
        fired: AtomicUsize,
        discarded: AtomicUsize,
        threads: Mutex<Vec<String>>,
    }

    impl Expire for Probe {
        fn expire(&self, how: Expiry) {
            let counter = match how {
                Expiry::Fired => &self.fired,
                Expiry::Discarded => &self.discarded,
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let name = thread::current().name().unwrap_or("?").to_string();
            self.threads.lock().unwrap().push(name);
        }
    }

    #[test]
    fn notify_entries_expire_on_the_timer_thread_and_are_discarded_at_shutdown() {
        let clock = ManualClock::new();
        let service = TimerService::builder()
            .clock(clock.clone())
            .thread_name("probe")
            .build()
            .unwrap();
        let probe = StdArc::new(Probe::default());
        let notify = service.service_ref(); // how `Deadlines` reaches the service
        let tick = |ms| {
            service
                .ticks()
                .delay_tick(clock.now(), Duration::from_millis(ms))
        };
        let fires = notify.schedule_notify(tick(1), probe.clone());
        let cancelled = notify.schedule_notify(tick(1), probe.clone());
        let moved = notify.schedule_notify(tick(1), probe.clone());
        let pending = notify.schedule_notify(tick(50), probe.clone());
        assert!(cancelled.cancel());
        assert!(moved.reset_tick(tick(2)));
        clock.advance(Duration::from_millis(1));
        service.settle();
        assert_eq!(probe.fired.load(Ordering::SeqCst), 1);
        assert!(!fires.is_pending() && moved.is_pending());
        clock.advance(Duration::from_millis(1));
        service.settle();
        assert_eq!(probe.fired.load(Ordering::SeqCst), 2);
        // A settle may drain on the calling thread; otherwise it is the timer thread.
        let me = thread::current().name().unwrap_or("?").to_string();
        for name in probe.threads.lock().unwrap().iter() {
            assert!(name == "probe-timer" || *name == me, "expired on {name}");
        }
        service.shutdown();
        assert_eq!(probe.discarded.load(Ordering::SeqCst), 1);
        assert!(!pending.is_pending());
        assert_eq!(service.stats().discarded, 1);
        assert_eq!(probe.fired.load(Ordering::SeqCst), 2);
    }
}
