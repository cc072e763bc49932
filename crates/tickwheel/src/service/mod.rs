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
//! * **The state** (`state.rs`, `ServiceState`): what the service's threads, handles and
//!   futures share — the shards, the hand-off to the workers, the counters — with the code
//!   that queues a timer into it and drains due timers out of it.
//! * **Shards** (`shard/`, `Shard`: the inbox, cells, calendar and drain each in a file of their
//!   own): a power of two of `Mutex<queue>`s (default twice the cores), each with an inbox of
//!   detached timers on their way into its queue. Each thread schedules into one shard picked by a
//!   thread-local index, so producers on different shards never touch the same lock or cache line;
//!   a [`TimerHandle`] remembers its shard, so cancel and reset lock only that one. Each shard
//!   publishes a lower bound of its earliest deadline tick (staged timers included) in an atomic.
//! * **The timer thread** (`driver.rs`) sleeps until the earliest published tick
//!   and is woken early only when an insert lowers it (no tick loop: an idle service sleeps
//!   with no timeout). It drains due timers from every shard, merges them by deadline and
//!   hands them to the workers in batches.
//! * **Workers** (`worker.rs`) run callbacks under `catch_unwind`: a slow or
//!   panicking callback never delays the timer thread; panics are counted in [`Stats`].
//!   With no workers ([`Builder::worker_threads`]`(0)`) the thread that drains runs the
//!   callbacks itself once it has released the drain lock, in deadline order together with
//!   the timer-thread entries; a slow callback then delays every timer after it.
//! * `core.rs` (`Core`: the clock, ticks, waking the timer thread, the cap), `callback.rs`
//!   (`Callback`: a closure stored inline when small), `sleeper.rs` (how the timer thread
//!   sleeps to a tick's start), `handle.rs`, `builder.rs`, `flavor.rs`, `stats.rs`.
//!
//! Every method of [`TimerService`] that belongs to this layer is in this file (one-shot and
//! recurring timers, settling, stats, shutdown; `recurring.rs` holds the series' machinery).
//! The constructors of the layer above ([`sleep`](TimerService::sleep),
//! [`timeout`](TimerService::timeout), [`interval`](TimerService::interval),
//! [`deadlines`](TimerService::deadlines), [`cron_stream`](TimerService::cron_stream)) are
//! methods of the service too, but they live in that layer (`src/on_service.rs`), beside the
//! types they build: this module imports nothing from a layer above it.
//!
//! # Costs of `schedule`
//!
//! One clock read (never a cached "now": a stale now would make timers fire early), one
//! uncontended lock of the caller's shard's *inbox* (a buffer under a lock of its own, which
//! the timer thread holds only to swap buffers), a 40-byte append to memory that is reused
//! from batch to batch, a cell for the handle taken from a pool under that same lock, and one
//! uncontended `Arc` increment for the handle. No queue lock, no queue entry (but in a burst,
//! below), no syscall unless the new timer becomes the earliest one the timer thread is
//! sleeping towards. The closure is stored in the entry itself when it captures at most two
//! words (an `Arc` and an id, a channel sender); only a larger one is boxed. No global lock or counter (unless a cap is configured). Threads on
//! different shards do not contend.
//!
//! The timer thread moves staged timers into the queue at its next wake-up (due timers
//! first, handed to the workers before the rest is queued).
//! A detached timer due within 2048 ticks goes to the shard's calendar instead, a vector per
//! tick that holds it in place (no key, no record to move down: `shard/calendar.rs`); drains merge
//! the two by (tick, sequence number), so the order is the same.
//! The queue work is thus off the calling thread — unless it stages a burst: the thread that
//! stages the 1024th timer since the timer thread last took its shard's inbox queues them
//! itself. A burst is filed by the threads that make it, so producers scale with their number,
//! and the timer thread, never busy with a burst, wakes on time (see DESIGN-NOTES, "What does
//! a `schedule` cost?").
//!
//! `cancel` of a timer among the last few dozen its thread staged (a timeout cancelled soon
//! after it was scheduled) takes it out of the inbox, under the inbox lock: it is never
//! queued. Otherwise `cancel`, `reset`, `deadline`, `is_pending` and `wait` lock the timer's
//! shard once; on a timer still staged they first queue the shard's staged timers (the work
//! the timer thread would have done), so the first such call after a burst costs the
//! burst's queuing, and later ones an O(1) queue operation.
//! [`schedule_detached`](TimerService::schedule_detached) skips the handle (no cell, no `Arc`)
//! for timers nobody will cancel. A direct insert (the futures' wakers, `Deadlines`, recurring
//! runs) and a reset first queue the inbox, so one thread's timers keep their schedule order
//! at equal deadlines whichever way they were scheduled.
//!
//! Under load, how late a callback starts is bounded by how long one drain holds the timer
//! thread: a drain takes each shard's lock for at most one chunk of timers at a time, and the
//! wheel never moves a whole upper-level slot in one poll (it moves the next slots down in
//! paced steps ahead of time) nor reallocates a slot's storage on the timer thread (see the
//! wheel's module docs).
//!
//! # Order
//!
//! Due entries are started in deadline order: ordered by (deadline tick, shard, insertion
//! within the shard), whether they run on a worker or on the timer thread; see `state.rs`.
//! One thread's timers at equal deadlines keep their schedule order.
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
//! [`shutdown`](TimerService::shutdown) (also run by `Drop`): the timer thread stops; every timer
//! still pending is **discarded** — its closure is dropped without running, it counts in
//! [`Stats::discarded`], `wait()`ers are released and its handle reports not pending; callbacks
//! already handed to workers run to completion; then every thread is joined. Scheduling after
//! shutdown queues nothing: [`try_schedule`](TimerService::try_schedule) returns
//! [`TryScheduleError::ShutDown`] with the closure and [`schedule`](TimerService::schedule) drops
//! the closure and returns a handle that is not pending.
//!
//! # The futures layer's hooks (crate-internal)
//!
//! Two kinds of entries run on the timer thread itself (or on a thread inside `settle`),
//! with no hand-off to a worker; both are `Callback`s, so they cost no more queue storage
//! than a user callback and allocate nothing of their own:
//!
//! * `ServiceLink::schedule_waker(tick, Waker)`: a `Sleep`'s timer. It wakes the waker;
//!   `TimerHandle::update_waker` swaps the waker in place while the entry is queued and
//!   returns the `WakerId` the entry now holds (`None` once it is not). At shutdown a pending
//!   one is woken.
//! * `ServiceLink::schedule_notify(tick, Arc<dyn Expire>)`: a `Deadlines` timer. It calls
//!   `Expire::expire(Expiry::Fired)`; at shutdown a pending one gets
//!   `expire(Expiry::Discarded)`.
//!
//! `TimerHandle::cancel` removes either (`true`: it was not and will not be run),
//! `TimerHandle::reset_tick` moves it. A `ServiceLink` (`TimerService::service_link`, which
//! borrows the service; `service_ref`, a `ServiceRef` that holds a reference count; or
//! `static_ref` for the lazily started [`TimerService::default_service`]) gives the ticks
//! (`ServiceLink::ticks`) and the clock's time (`ServiceLink::now`). Wakers and `expire` must
//! not block — they run on the thread that keeps every other timer on time; a panic in one is
//! caught and ignored.

mod builder;
mod callback;
mod core;
mod driver;
mod error;
mod flavor;
mod handle;
mod recurring;
mod shard;
mod sleeper;
mod state;
mod stats;
mod worker;

use std::fmt;
use std::io;
use std::sync::{Mutex as StdMutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub use builder::Builder;
pub use error::{ScheduleError, TryScheduleError};
pub use flavor::QueueFlavor;
pub use handle::TimerHandle;
pub use recurring::{Recurrence, RecurringHandle};
pub use stats::{LatenessHistogram, Stats};

pub(crate) use callback::{Expire, Expiry, WakerId};
#[cfg(test)]
pub(crate) use state::manual_service;
pub(crate) use state::{ServiceLink, ServiceRef};

use self::core::{AtCap, Core};
use crate::sync::{Arc, Ordering};
use crate::time::Ticks;
use callback::{prepare, Kept};
use shard::{Closed, Shard};
use state::{Refused, ServiceState};

/// A timer thread, sharded queues and a pool of workers that run callbacks at their deadlines.
/// See the [module documentation](self) for the design.
pub struct TimerService {
    state: Arc<ServiceState>,
    threads: StdMutex<Vec<JoinHandle<()>>>,
    /// Keeps the clock listener alive (the clock holds it weakly).
    _listener: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

/// Starting, scheduling, settling, inspecting and stopping.
impl TimerService {
    /// A [`Builder`] with the defaults: 1 ms resolution,
    /// [`MonotonicClock`](crate::time::MonotonicClock), [`QueueFlavor::Wheel`], one worker a core,
    /// two shards a core, no cap.
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
        let state = Arc::new(ServiceState::new(
            core,
            shards,
            workers,
            b.on_panic,
            virtual_clock,
        ));
        let service = TimerService {
            state,
            threads: StdMutex::new(Vec::with_capacity(workers + 1)),
            _listener: virtual_clock.then_some(listener),
        };
        let sleep_policy = b.sleep_policy;
        service.spawn(format!("{}-timer", b.name), move |s| {
            driver::run(s, sleep_policy)
        })?;
        for i in 0..workers {
            service.spawn(format!("{}-worker-{i}", b.name), move |s| {
                s.enter_worker();
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
        body: impl FnOnce(&ServiceState) + Send + 'static,
    ) -> io::Result<()> {
        let state = self.state.clone();
        let handle = thread::Builder::new()
            .name(name)
            .spawn(move || body(&state))?;
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
        let tick = self.ticks().delay_tick(self.state.core.clock.now(), delay);
        self.schedule_staged(tick, f)
    }

    /// Runs `f` on a worker at `deadline` (rounded up to the next tick). An instant in the past
    /// fires at once; an instant past the service's tick range never fires.
    pub fn schedule_at<F>(&self, deadline: Instant, f: F) -> TimerHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().deadline_tick(deadline);
        self.schedule_staged(tick, f)
    }

    /// Runs `f` on a worker after `delay`, like [`schedule`](Self::schedule), but returns no
    /// handle: the timer cannot be cancelled, reset or waited for, and in exchange costs the
    /// calling thread a little less (no cell for a handle, no `Arc` increment). Like every
    /// timer it is appended to an inbox of its thread's shard, which the timer thread moves
    /// into the queue (see [Costs of `schedule`](self#costs-of-schedule)). Every other promise
    /// is the same: never
    /// early, once, in deadline order, drained by [`settle`](Self::settle), discarded by
    /// shutdown (and dropped at once after it), counted toward the cap without being refused
    /// and in [`Stats`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::service::TimerService;
    /// use tickwheel::time::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// service.schedule_detached(Duration::from_millis(10), move || tx.send(()).unwrap());
    /// clock.advance(Duration::from_millis(10));
    /// service.settle();
    /// assert!(rx.try_recv().is_ok());
    /// ```
    pub fn schedule_detached<F>(&self, delay: Duration, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().delay_tick(self.state.core.clock.now(), delay);
        self.schedule_detached_tick(tick, f);
    }

    /// Runs `f` on a worker at `deadline` (rounded up to the next tick), with no handle: the
    /// [`schedule_at`](Self::schedule_at) of [`schedule_detached`](Self::schedule_detached).
    pub fn schedule_detached_at<F>(&self, deadline: Instant, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().deadline_tick(deadline);
        self.schedule_detached_tick(tick, f);
    }

    /// Stages `f` at `tick` with a handle (see [`prepare`]).
    #[inline]
    fn schedule_staged<F>(&self, tick: u64, f: F) -> TimerHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let staged = prepare(
            f,
            |c| self.state.schedule_staged(tick, c, AtCap::Admit),
            |c| self.state.schedule_staged(tick, c, AtCap::Admit),
        );
        staged.unwrap_or_else(|_| self.inert_handle())
    }

    /// Stages `f` at `tick` with no handle (see [`prepare`]).
    #[inline]
    fn schedule_detached_tick<F>(&self, tick: u64, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        prepare(
            f,
            |c| self.state.schedule_detached(tick, c),
            |c| self.state.schedule_detached(tick, c),
        );
    }

    /// Like [`schedule`](Self::schedule), but fails instead of exceeding the cap set with
    /// [`Builder::max_pending`], or after shutdown, and then gives `f` back. (A closure that
    /// captures more than 16 bytes is boxed as it is stored, under the inbox's lock, rather
    /// than before it.)
    ///
    /// # Errors
    ///
    /// [`TryScheduleError::Full`] at the cap, [`TryScheduleError::ShutDown`] after shutdown,
    /// each holding `f`.
    pub fn try_schedule<F>(&self, delay: Duration, f: F) -> Result<TimerHandle, TryScheduleError<F>>
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.ticks().delay_tick(self.state.core.clock.now(), delay);
        self.state
            .try_schedule_staged(tick, Kept(f), AtCap::Refuse)
            .map_err(|refused| match refused {
                Refused::Full(Kept(f)) => TryScheduleError::Full(f),
                Refused::ShutDown(Kept(f)) => TryScheduleError::ShutDown(f),
            })
    }

    /// Runs `f` on a worker at every run of `schedule` until the returned handle cancels the
    /// series (or the service shuts down, or a calendar has no further run). See the
    /// [rules](Recurrence#rules).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tickwheel::service::Recurrence;
    /// use tickwheel::{ManualClock, TimerService};
    ///
    /// let clock = ManualClock::new();
    /// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let r = runs.clone();
    /// let handle = service.schedule_recurring(Recurrence::every(Duration::from_secs(1)), move || {
    ///     r.fetch_add(1, Ordering::SeqCst);
    /// });
    /// for _ in 0..3 {
    ///     clock.advance(Duration::from_secs(1));
    ///     service.settle();
    /// }
    /// assert_eq!(runs.load(Ordering::SeqCst), 3);
    /// assert!(handle.cancel()); // no run starts after this
    /// assert!(!handle.cancel());
    /// ```
    pub fn schedule_recurring<F>(&self, recurrence: Recurrence, f: F) -> RecurringHandle
    where
        F: Fn() + Send + Sync + 'static,
    {
        recurring::start(self, recurrence, f)
    }

    /// `f` at a fixed rate: [`schedule_recurring`](Self::schedule_recurring) with
    /// [`Recurrence::every`]`(period)`.
    pub fn schedule_every<F>(&self, period: Duration, f: F) -> RecurringHandle
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.schedule_recurring(Recurrence::every(period), f)
    }

    fn inert_handle(&self) -> TimerHandle {
        self.state.inert_handle()
    }

    /// The service's tick conversion (origin and resolution).
    pub fn ticks(&self) -> &Ticks {
        &self.state.core.ticks
    }

    /// The length of one tick.
    pub fn resolution(&self) -> Duration {
        self.ticks().resolution()
    }

    /// The current time of the service's clock.
    pub fn now(&self) -> Instant {
        self.state.core.clock.now()
    }

    /// Returns once every timer due at the clock's current time has fired **and its callback
    /// has finished** — also timers scheduled by those callbacks that are already due. With a
    /// [`ManualClock`](crate::time::ManualClock): move the clock, then `settle()`, then
    /// observe. Callbacks are started in deadline order ordered by deadline tick, then
    /// shard, then insertion (see [Order](self#order)); with one worker they also run in
    /// that order.
    ///
    /// Called from one of this service's callbacks, it drains what is due but does not wait
    /// for callbacks (it would wait for itself). A callback that keeps scheduling already-due
    /// timers keeps `settle` busy.
    pub fn settle(&self) {
        let on_worker = self.state.on_worker();
        loop {
            let now = self.state.core.now_tick();
            self.state.drain_due(now);
            if on_worker {
                return;
            }
            self.state.dispatch.wait_idle();
            if self.state.settled(self.state.core.now_tick()) {
                #[cfg(all(debug_assertions, not(loom)))]
                self.state.debug_check();
                return;
            }
        }
    }

    /// A snapshot of the service's counters.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in self.state.shards.iter() {
            let c = shard.counts();
            stats.pending += c.pending;
            stats.high_water += c.high_water;
            stats.capacity += c.capacity;
            stats.scheduled += c.scheduled;
            stats.cancelled += c.cancelled;
        }
        for w in self.state.worker_stats.iter() {
            stats.fired += w.fired.get();
            stats.panicked += w.panicked.get();
            w.lateness.add_to(&mut stats.lateness);
        }
        stats.fired += self.state.notified.get();
        stats.discarded = self.state.discarded.get();
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
        for shard in self.state.shards.iter() {
            shard.shrink_to_fit();
        }
    }

    /// Stops the service: see [Shutdown](self#shutdown). Idempotent; returns once every thread
    /// has been joined (from one of the service's own callbacks it cannot join that worker,
    /// which then exits after its current batch).
    pub fn shutdown(&self) {
        if self.state.stopping.swap(true, Ordering::AcqRel) {
            return self.join_threads();
        }
        self.state.core.unpark_driver();
        // Join the timer thread first: after it, no drain is in progress but a settle's.
        let driver = {
            let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
            (!threads.is_empty()).then(|| threads.remove(0))
        };
        // Not from the timer thread itself (a callback of a service with no workers): it
        // exits when that callback returns and its drain is done.
        if let Some(driver) = driver.filter(|d| d.thread().id() != thread::current().id()) {
            let _ = driver.join();
        }
        let pending = self.state.close();
        let discarded: usize = pending.iter().map(Closed::len).sum();
        self.state.discarded.add(discarded as u64);
        // Dropped here, outside every lock: a closure's `Drop` may run any code.
        pending.into_iter().for_each(Closed::discard);
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

    /// A `'static` reference to this service's state, for the futures layer.
    pub(crate) fn service_ref(&self) -> ServiceRef {
        ServiceLink::Owned(self.state.clone())
    }

    /// A reference to this service's state that borrows the service (no reference count), for
    /// the futures layer.
    #[inline]
    pub(crate) fn service_link(&self) -> ServiceLink<'_> {
        ServiceLink::Borrowed(&self.state)
    }

    /// How many references to this service's state exist (tests only).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn state_refs(&self) -> usize {
        Arc::strong_count(&self.state)
    }

    /// Like [`service_ref`](Self::service_ref), without a reference count, for a service
    /// that lives forever.
    pub(crate) fn static_ref(&'static self) -> ServiceRef {
        ServiceLink::Static(&self.state)
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
            .field("shards", &self.state.shards.len())
            .field(
                "workers",
                &if self.state.run_here {
                    0
                } else {
                    self.state.worker_stats.len()
                },
            )
            .finish_non_exhaustive()
    }
}

// Not under loom: the test runs a real service (loom's primitives work only in a model).
#[cfg(all(test, not(loom)))]
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
        service.state.check_invariants();
        service.shutdown();
        service.state.check_invariants();
        assert_eq!(probe.discarded.load(Ordering::SeqCst), 1);
        assert!(!pending.is_pending());
        assert_eq!(service.stats().discarded, 1);
        assert_eq!(probe.fired.load(Ordering::SeqCst), 2);
    }
}
