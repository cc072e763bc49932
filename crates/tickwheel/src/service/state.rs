//! [`ServiceState`]: everything one service's threads and handles share, how a timer is
//! queued into it, and how due timers are taken out of it (`drain_due`). [`ServiceRef`]: how
//! the futures layer holds on to it.
//!
//! # Deadline order across shards
//!
//! Drains are serialised by the `drain` lock (the timer thread and `settle` callers both drain).
//! One drain collects every due timer of every shard at one `now`, each shard's in (deadline,
//! insertion) order, then stable-sorts the lot by deadline tick (Rust's stable sort merges those
//! sorted runs in O(n log shards)) — the worker callbacks and, apart, the entries that run on the
//! timer thread (wakers, notifications). When only one shard is due, its chunks are handed on as
//! they come out, already in order, once they add up to a share a worker
//! ([`Dispatch::handoff_at`]), so workers start early on a large tick without a push (and a
//! wake-up) for every chunk. Callbacks are therefore handed out, and timer-thread entries run,
//! ordered by (deadline tick, shard index, insertion order within the shard). A thread always
//! schedules into the same shard, so one thread's timers keep their schedule order at equal
//! deadlines; timers of *different* threads at the same tick have no defined order between them
//! (there is no global sequence counter — it would be one contended cache line on the hot path).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Waker;
use std::time::Instant;

use super::callback::{Build, Callback, Expire};
use super::core::{AtCap, Core};
use super::handle::TimerHandle;
use super::shard::{Closed, Drained, Job, Shard, Target, HELP_AT};
use super::worker::{self, Dispatch, PanicHandler, WorkerStats};
use super::ScheduleError;
use crate::sync::{lock, Arc, AtomicBool, Counter, Mutex, Ordering};
use crate::time::Ticks;

/// Hands out thread indices for shard selection, round robin.
static NEXT_THREAD_INDEX: Counter = Counter::new();

thread_local! {
    /// This thread's index: it schedules into `shards[index & mask]` of every service.
    static THREAD_INDEX: usize = NEXT_THREAD_INDEX.fetch_add(1) as usize;
    /// The service whose worker this thread is (its `ServiceState` address), or 0.
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
}

/// A timer the service refused, with its callback (unbuilt).
pub(crate) enum Refused<B> {
    /// At the cap (`AtCap::Refuse`).
    Full(B),
    /// The service has shut down.
    ShutDown(B),
}

impl<B: Build> Refused<B> {
    /// Drops or tells the callback (see [`Callback::discard`]) and names the reason: what
    /// every schedule but `try_schedule` does with a refused timer.
    fn discard(self) -> ScheduleError {
        match self {
            Refused::Full(callback) => {
                drop(callback);
                ScheduleError::Full
            }
            Refused::ShutDown(callback) => {
                callback.build().discard();
                ScheduleError::ShutDown
            }
        }
    }
}

/// What the drain lock guards.
#[derive(Default)]
struct DrainBuffers {
    /// What one shard's drain puts out.
    drained: Drained,
    /// With no workers: every due entry of this drain, to be run by the draining thread
    /// once the lock is released.
    ready: Vec<Job>,
    /// `ready` mixes timer-thread entries with callbacks, each kind in deadline order: it
    /// needs a merge.
    merge: bool,
}

/// The state of one service: its shards, the hand-off to its workers, its counters.
pub(crate) struct ServiceState {
    pub(crate) core: Arc<Core>,
    /// A power of two of shards; a thread uses `shards[thread_index & mask]`.
    pub(crate) shards: Box<[Arc<Shard>]>,
    pub(crate) dispatch: Dispatch,
    /// Serialises drains; holds the buffers they collect due timers in.
    drain: Mutex<DrainBuffers>,
    /// No workers: the thread that drains runs the callbacks (see [`Self::drain_due`]).
    pub(crate) run_here: bool,
    /// One a worker; with no workers, one for the threads that drain.
    pub(crate) worker_stats: Box<[WorkerStats]>,
    pub(crate) on_panic: Option<PanicHandler>,
    /// Entries run on the timer thread itself (wakers, notifications).
    pub(crate) notified: Counter,
    pub(crate) discarded: Counter,
    pub(crate) stopping: AtomicBool,
    /// The clock moves only by jumps (it told us so when we subscribed).
    pub(crate) virtual_clock: bool,
}

impl ServiceState {
    pub(crate) fn new(
        core: Arc<Core>,
        shards: Box<[Arc<Shard>]>,
        workers: usize,
        on_panic: Option<PanicHandler>,
        virtual_clock: bool,
    ) -> ServiceState {
        ServiceState {
            core,
            shards,
            dispatch: Dispatch::new(workers),
            drain: Mutex::new(DrainBuffers::default()),
            run_here: workers == 0,
            worker_stats: (0..workers.max(1))
                .map(|_| WorkerStats::default())
                .collect(),
            on_panic,
            notified: Counter::new(),
            discarded: Counter::new(),
            stopping: AtomicBool::new(false),
            virtual_clock,
        }
    }

    /// Marks the calling thread as one of this service's workers (see [`Self::on_worker`]).
    pub(crate) fn enter_worker(&self) {
        WORKER_OF.with(|w| w.set(self as *const ServiceState as usize));
    }

    /// Whether the calling thread is one of this service's workers.
    pub(crate) fn on_worker(&self) -> bool {
        WORKER_OF.with(|w| w.get()) == self as *const ServiceState as usize
    }

    // ---- Queuing ----

    /// Queues `callback` at `tick` in the calling thread's shard, directly (the futures'
    /// wakers, `Deadlines`, recurring runs). At the cap (if `at_cap` refuses) or after
    /// shutdown the callback is discarded and an error returned.
    #[inline]
    pub(crate) fn schedule_callback(
        &self,
        tick: u64,
        callback: Callback,
        at_cap: AtCap,
    ) -> Result<TimerHandle, ScheduleError> {
        self.schedule_with::<false, _>(tick, callback, at_cap)
            .map_err(Refused::discard)
    }

    /// Stages `callback` at `tick` in the calling thread's shard's inbox with a handle (see
    /// `shard/`): what `schedule` does. At the cap (if `at_cap` refuses) or after shutdown
    /// the callback is discarded and an error returned.
    #[inline]
    pub(crate) fn schedule_staged(
        &self,
        tick: u64,
        callback: impl Build,
        at_cap: AtCap,
    ) -> Result<TimerHandle, ScheduleError> {
        self.schedule_with::<true, _>(tick, callback, at_cap)
            .map_err(Refused::discard)
    }

    /// [`schedule_staged`](Self::schedule_staged) that gives the callback back, unbuilt, when
    /// it is refused: what `try_schedule` does (with a [`Kept`](super::callback::Kept)
    /// closure).
    #[inline]
    pub(crate) fn try_schedule_staged<B: Build>(
        &self,
        tick: u64,
        callback: B,
        at_cap: AtCap,
    ) -> Result<TimerHandle, Refused<B>> {
        self.schedule_with::<true, B>(tick, callback, at_cap)
    }

    /// [`schedule_staged`](Self::schedule_staged) with `STAGED`, otherwise
    /// [`schedule_callback`](Self::schedule_callback).
    #[inline]
    fn schedule_with<const STAGED: bool, B: Build>(
        &self,
        tick: u64,
        callback: B,
        at_cap: AtCap,
    ) -> Result<TimerHandle, Refused<B>> {
        if !self.core.reserve(at_cap) {
            return Err(Refused::Full(callback));
        }
        let shard = self.local_shard();
        let placed = if STAGED {
            shard.stage_with_cell(tick, callback).map(|(staged, cell)| {
                self.staged(shard, staged);
                Target::Cell(cell)
            })
        } else {
            shard.insert(tick, callback).map(Target::Key)
        };
        match placed {
            Ok(target) => Ok(TimerHandle {
                shard: shard.clone(),
                target,
            }),
            Err(callback) => {
                self.core.release(1);
                if STAGED {
                    // Closed (or out of cells): the direct insert refuses it or queues it.
                    return self.schedule_with::<false, B>(tick, callback, at_cap);
                }
                Err(Refused::ShutDown(callback))
            }
        }
    }

    /// Stages `callback` at `tick` in the calling thread's shard's inbox, with no handle (see
    /// `shard/`). Ignores the cap but counts toward it; after shutdown the callback is
    /// dropped.
    #[inline]
    pub(crate) fn schedule_detached(&self, tick: u64, callback: impl Build) {
        self.core.reserve(AtCap::Admit);
        let shard = self.local_shard();
        match shard.stage(tick, callback) {
            Ok(staged) => self.staged(shard, staged),
            Err(callback) => {
                self.core.release(1);
                callback.build().discard();
            }
        }
    }

    /// After a stage that left `staged` timers in `shard`'s inbox: at every [`HELP_AT`]th,
    /// this thread queues them itself (see `shard/inbox.rs`).
    #[inline]
    fn staged(&self, shard: &Shard, staged: usize) {
        if staged % HELP_AT == 0 {
            shard.help_flush();
        }
    }

    /// The implementation of [`ServiceLink::schedule_notify`]: after shutdown the target is
    /// told `Discarded` and the handle is inert.
    #[inline]
    fn schedule_notify(&self, tick: u64, target: std::sync::Arc<dyn Expire>) -> TimerHandle {
        self.schedule_callback(tick, Callback::notify(target), AtCap::Admit)
            .unwrap_or_else(|_| self.inert_handle())
    }

    /// The implementation of [`ServiceLink::schedule_waker`]: after shutdown the waker is
    /// woken at once and the handle is inert.
    #[inline]
    fn schedule_waker(&self, tick: u64, waker: Waker) -> TimerHandle {
        self.schedule_callback(tick, Callback::waker(waker), AtCap::Admit)
            .unwrap_or_else(|_| self.inert_handle())
    }

    #[inline]
    fn local_shard(&self) -> &Arc<Shard> {
        let mask = self.shards.len() - 1;
        let index = THREAD_INDEX.with(|i| *i) & mask;
        &self.shards[index]
    }

    /// A handle of a timer that was never queued: not pending, every operation a no-op.
    pub(crate) fn inert_handle(&self) -> TimerHandle {
        TimerHandle {
            shard: self.local_shard().clone(),
            target: Target::Inert,
        }
    }

    // ---- Draining ----

    /// The earliest published tick over all shards.
    pub(crate) fn earliest(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.earliest())
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Takes every timer due at `now` out of every shard and hands it on; returns how many.
    ///
    /// When one shard is due (one producer thread, or one busy one), its chunks are handed to
    /// the workers as they come out of the queue, in pushes of at least
    /// [`Dispatch::handoff_at`] callbacks (the rest at the end), so the first callbacks of a
    /// large tick start while the rest are still being drained. A push for every chunk a
    /// drain takes out (`DRAIN_CHUNK`, 128 timers) would wake a worker for each: a worker gets
    /// through a chunk faster than the drain takes the next one out, so it waits in between.
    /// Otherwise the shards' runs are merged first.
    /// Then every shard's staged timers that were not due are queued (see `shard/`).
    ///
    /// With no workers the calling thread runs every due entry itself, in deadline order,
    /// after releasing the drain lock (so a callback may call `settle` or `shutdown`), then
    /// takes the lock again to queue the staged timers.
    pub(crate) fn drain_due(&self, now: u64) -> usize {
        let mut buffers = lock(&self.drain);
        let n = self.drain_locked(now, &mut buffers);
        if self.run_here && !buffers.ready.is_empty() {
            let mut ready = std::mem::take(&mut buffers.ready);
            if std::mem::take(&mut buffers.merge) {
                ready.sort_by_key(|job| job.deadline);
            }
            // In flight before the lock is released: `settled` sees them one way or the other.
            self.dispatch.begin(ready.len());
            drop(buffers);
            self.run_ready(&mut ready);
            buffers = lock(&self.drain);
            if buffers.ready.capacity() == 0 {
                // The buffer goes back for the next drain (another may have made its own).
                buffers.ready = ready;
            }
        }
        // The detached timers not due yet: queued after the due ones were handed on, by this
        // thread rather than a producer.
        for shard in self.shards.iter() {
            shard.flush_staged(|| self.core.now_tick() > now);
        }
        n
    }

    fn drain_locked(&self, now: u64, buffers: &mut DrainBuffers) -> usize {
        let DrainBuffers {
            drained,
            ready,
            merge,
        } = buffers;
        let mut due = self.shards.iter().filter(|shard| shard.earliest() <= now);
        if let (Some(shard), None) = (due.next(), due.next()) {
            let n = shard.drain(now, drained, |chunk| {
                // The workers get the due callbacks in a few large pushes, not one a chunk:
                // a worker done with a small batch waits again, and each push would then
                // cost a wake-up (see `HANDOFF_AT`).
                let at = self.dispatch.handoff_at();
                if chunk.jobs.len() >= at || chunk.jobs.is_empty() {
                    self.hand_off(chunk, ready, merge);
                } else {
                    self.run_inline(chunk);
                }
            });
            self.hand_off(drained, ready, merge);
            return n;
        }
        let mut n = 0;
        for shard in self.shards.iter() {
            if shard.earliest() <= now {
                n += shard.drain(now, drained, |_| {});
            }
        }
        if n == 0 {
            return 0;
        }
        // Each shard's run is sorted; a stable sort merges the runs.
        drained.jobs.sort_by_key(|job| job.deadline);
        drained.inline.sort_by_key(|job| job.deadline);
        self.hand_off(drained, ready, merge);
        n
    }

    /// Runs, on the calling thread, the entries a drain took for it (a service with no
    /// workers), in order; they were counted in flight by the drain.
    fn run_ready(&self, ready: &mut Vec<Job>) {
        let n = ready.len();
        let stats = &self.worker_stats[0];
        let mut notified = 0;
        // As on a worker: `settle` from one of these callbacks must not wait for itself.
        let me = self as *const ServiceState as usize;
        let was = WORKER_OF.with(|w| w.replace(me));
        // Real time, whatever the service's clock, as on a worker: the estimate sets how often
        // `Lateness` reads the clock here too.
        let start = std::time::Instant::now();
        let mut lateness = worker::Lateness::new(self.dispatch.cost_ns());
        for job in ready.drain(..) {
            if job.callback.is_inline() {
                notified += 1;
                let _ = catch_unwind(AssertUnwindSafe(|| job.callback.call()));
            } else {
                worker::run_job(
                    job,
                    &self.core,
                    stats,
                    &mut lateness,
                    self.on_panic.as_ref(),
                );
            }
        }
        self.dispatch.note_cost(n, start.elapsed());
        WORKER_OF.with(|w| w.set(was));
        self.notified.add(notified);
        stats.fired.add((n as u64) - notified);
        self.dispatch.finish(n);
    }

    /// Checks every shard's invariants ([`Shard::check_invariants`]) under the drain lock,
    /// so that no drain holds timers half taken out meanwhile; panics naming the first rule
    /// broken. O(timers).
    #[cfg(any(all(test, not(loom)), debug_assertions))]
    pub(crate) fn check_invariants(&self) {
        let _drains = lock(&self.drain);
        for shard in self.shards.iter() {
            shard.check_invariants();
        }
    }

    /// A debug build's check at the end of a `settle`: every time while the service holds
    /// at most `CHECK_SMALL` timers, else every `CHECK_EVERY`th settle.
    #[cfg(all(debug_assertions, not(loom)))]
    pub(crate) fn debug_check(&self) {
        /// Pending timers up to which every settle checks.
        const CHECK_SMALL: usize = 10_000;
        /// Otherwise, once in this many settles.
        const CHECK_EVERY: u64 = 64;
        static SETTLES: Counter = Counter::new();
        SETTLES.add(1);
        let pending: usize = self.shards.iter().map(|s| s.counts().pending).sum();
        if pending <= CHECK_SMALL || SETTLES.get() % CHECK_EVERY == 0 {
            self.check_invariants();
        }
    }

    /// Whether nothing is due at `now` and no callback is queued or running: `settle`'s test
    /// for being done.
    ///
    /// Checked under the drain lock: a drain in progress (the timer thread's, woken by a
    /// callback that scheduled a due timer) may hold timers that are out of the queue but not
    /// yet handed to the workers, so neither `earliest` nor the workers would show them.
    pub(crate) fn settled(&self, now: u64) -> bool {
        let _drains = lock(&self.drain);
        self.earliest() > now && self.dispatch.is_idle()
    }

    /// Runs the notifications and gives the callbacks of `drained` to the workers, in order;
    /// with no workers, moves both to `ready` (see [`Self::drain_due`]), noting in `merge`
    /// that the two kinds must be merged.
    fn hand_off(&self, drained: &mut Drained, ready: &mut Vec<Job>, merge: &mut bool) {
        if self.run_here {
            *merge |= !drained.inline.is_empty();
            ready.append(&mut drained.inline);
            ready.append(&mut drained.jobs);
            return;
        }
        self.run_inline(drained);
        self.dispatch.push(&mut drained.jobs);
    }

    /// Runs the timer-thread entries (wakers, notifications) of `drained` (with workers; with
    /// none they wait in `ready` like the callbacks, see [`Self::hand_off`]).
    fn run_inline(&self, drained: &mut Drained) {
        if self.run_here || drained.inline.is_empty() {
            return;
        }
        let inline = drained.inline.len();
        for job in drained.inline.drain(..) {
            // A waker or an `expire` must not panic; should one anyway, the timer thread
            // survives it.
            let _ = catch_unwind(AssertUnwindSafe(|| job.callback.call()));
        }
        self.notified.add(inline as u64);
    }

    /// Closes every shard and stops the workers, serialised with drains: a `settle` draining
    /// concurrently has either handed its callbacks over before (the workers run them before
    /// they exit) or finds the shards closed. Returns what was still pending.
    pub(crate) fn close(&self) -> Vec<Closed> {
        let _drains = lock(&self.drain);
        let pending = self.shards.iter().map(|shard| shard.close()).collect();
        self.dispatch.stop();
        pending
    }

    /// How many times producers took a shard's queue lock, over all shards (tests only).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn producer_locks(&self) -> u64 {
        self.shards.iter().map(|s| s.producer_locks.get()).sum()
    }

    /// Whether shutdown has begun.
    #[inline]
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// How the futures layer reaches a service: the default service by `'static` reference, a
/// service a future was made from by borrowing its `TimerService` (the methods of
/// `on_service.rs`: no reference count touched, so two workers making futures on one service
/// share no written cache line), or by a clone of its state where the future must outlive the
/// borrow (`Interval`, `Deadlines`, `CronStream`, `into_owned`). It keeps the queues alive,
/// not the threads: after shutdown it schedules nothing.
#[derive(Clone)]
pub(crate) enum ServiceLink<'a> {
    /// A service that lives forever (the default one).
    Static(&'static ServiceState),
    /// A service borrowed from its `TimerService`.
    Borrowed(&'a Arc<ServiceState>),
    /// Any service, by a reference count.
    Owned(Arc<ServiceState>),
}

/// A [`ServiceLink`] that may outlive any borrow.
pub(crate) type ServiceRef = ServiceLink<'static>;

impl ServiceLink<'_> {
    #[inline]
    fn state(&self) -> &ServiceState {
        match self {
            ServiceLink::Static(state) => state,
            ServiceLink::Borrowed(state) => state,
            ServiceLink::Owned(state) => state,
        }
    }

    /// The same service, without the borrow: a borrowed one is cloned (one reference count).
    pub(crate) fn to_owned_ref(&self) -> ServiceRef {
        match self {
            ServiceLink::Static(state) => ServiceLink::Static(state),
            ServiceLink::Borrowed(state) => ServiceLink::Owned(Arc::clone(state)),
            ServiceLink::Owned(state) => ServiceLink::Owned(state.clone()),
        }
    }

    /// A timer at `tick` that wakes `waker` on the timer thread, on the referenced service.
    /// [`TimerHandle::update_waker`] swaps the waker in place. At shutdown a pending one is
    /// woken.
    #[inline]
    pub(crate) fn schedule_waker(&self, tick: u64, waker: Waker) -> TimerHandle {
        self.state().schedule_waker(tick, waker)
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
        self.state().schedule_notify(tick, target)
    }

    /// The service's tick conversion.
    #[inline]
    pub(crate) fn ticks(&self) -> &Ticks {
        &self.state().core.ticks
    }

    /// The current time of the service's clock.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.state().core.clock.now()
    }

    /// The wall clock calendars read on the referenced service ([`Core::wall_clock`]).
    #[cfg(feature = "cron")]
    pub(crate) fn wall_clock(&self) -> std::sync::Arc<dyn crate::time::WallClock> {
        self.state().core.wall_clock()
    }
}

/// A one-shard service on a virtual clock with no timer thread and no workers (a drain runs
/// its wakers itself), for models of the futures layer: drive it with `drain_due`.
#[cfg(test)]
pub(crate) fn manual_service(
    resolution: std::time::Duration,
) -> (crate::time::ManualClock, ServiceRef) {
    let clock = crate::time::ManualClock::new();
    let ticks = crate::time::Ticks::new(clock.now(), resolution);
    let core = Arc::new(Core::new(std::sync::Arc::new(clock.clone()), ticks, None));
    let shard = Arc::new(Shard::new(core.clone(), super::QueueFlavor::Wheel));
    let state = ServiceState::new(core, Box::new([shard]), 0, None, true);
    (clock, ServiceLink::Owned(Arc::new(state)))
}

#[cfg(test)]
impl ServiceLink<'_> {
    /// Drains every timer due at `tick`, as the timer thread does (tests only).
    pub(crate) fn drain_due(&self, tick: u64) -> usize {
        self.state().drain_due(tick)
    }

    /// How many times producers took a shard's queue lock (tests only).
    #[cfg(not(loom))]
    pub(crate) fn producer_locks(&self) -> u64 {
        self.state().producer_locks()
    }
}

/// `settle`'s done-check against a drain in progress, under loom with `--cfg loom`.
#[cfg(test)]
mod tests {
    // The clock is a trait object in std's `Arc` (loom's cannot coerce to `dyn`).
    use std::sync::Arc as StdArc;
    use std::time::Duration;

    use super::*;
    use crate::service::flavor::QueueFlavor;
    use crate::sync::{model, spawn};
    use crate::time::{ManualClock, Ticks};

    /// A one-shard service on a virtual clock with `workers` workers (none started) and
    /// `callback` queued at tick 1.
    fn one_timer_due_at_tick_1(callback: Callback, workers: usize) -> Arc<ServiceState> {
        let clock = ManualClock::new();
        let ticks = Ticks::new(clock.now(), Duration::from_millis(1));
        let core = Arc::new(Core::new(StdArc::new(clock), ticks, None));
        let shard = Arc::new(Shard::new(core.clone(), QueueFlavor::Wheel));
        if shard.insert(1, callback).is_err() {
            panic!("shard closed");
        }
        Arc::new(ServiceState::new(
            core,
            Box::new([shard]),
            workers,
            None,
            true,
        ))
    }

    /// A producer that stages the `HELP_AT`th timer since the inbox was last taken queues
    /// them itself (here no timer thread runs): a burst is filed by the thread that makes it,
    /// and the timer thread stays free to wake on time. Below that they wait in the inbox.
    #[cfg(not(loom))]
    #[test]
    fn the_producer_queues_every_help_at_timers_it_stages() {
        let state = one_timer_due_at_tick_1(Callback::new(|| {}), 0);
        let shard = &state.shards[0];
        for round in 1..=2 {
            for _ in 1..HELP_AT {
                state.schedule_detached(5, Callback::new(|| {}));
            }
            assert_eq!(shard.unqueued(), HELP_AT - 1, "round {round}");
            state.schedule_detached(5, Callback::new(|| {}));
            assert_eq!(shard.unqueued(), 0, "round {round}");
            assert_eq!(shard.counts().pending, 1 + round * HELP_AT);
        }
        shard.check_invariants();
    }

    /// With no workers, the thread that runs the callbacks keeps the estimate of what one
    /// costs as a worker does, so that `Lateness` reads the clock once per 10 µs of callbacks
    /// by what they cost here, not every 10 callbacks by the first estimate (1 µs) forever.
    #[cfg(not(loom))]
    #[test]
    fn a_drain_with_no_workers_keeps_the_cost_estimate() {
        // Each callback runs for at least 40 µs of real time.
        let slow = || {
            Callback::new(|| {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_micros(40) {
                    std::hint::spin_loop();
                }
            })
        };
        let state = one_timer_due_at_tick_1(slow(), 0);
        for _ in 1..10 {
            if state.shards[0].insert(1, slow()).is_err() {
                panic!("shard closed");
            }
        }
        assert_eq!(state.dispatch.cost_ns(), worker::FIRST_COST_NS);
        assert_eq!(state.drain_due(1), 10);
        // A quarter of the way from 1 µs to 40 µs or more.
        let cost = state.dispatch.cost_ns();
        assert!(cost >= 750 + 10_000, "estimate {cost} ns");
    }

    /// A drain of one shard with many due callbacks hands them to the workers in pushes of
    /// at least `handoff_at` callbacks (512 for two workers) and the rest at its end, not one
    /// push a drained chunk of 128: 1000 callbacks go in two pushes, each split in two shares
    /// (one push a chunk would have made 16 batches of 64, each push a wake-up).
    #[cfg(not(loom))]
    #[test]
    fn a_drain_hands_its_callbacks_on_in_few_pushes() {
        let state = one_timer_due_at_tick_1(Callback::new(|| {}), 2);
        for _ in 1..1000 {
            if state.shards[0].insert(1, Callback::new(|| {})).is_err() {
                panic!("shard closed");
            }
        }
        assert_eq!(state.dispatch.handoff_at(), 512);
        assert_eq!(state.drain_due(1), 1000);
        assert_eq!(state.dispatch.batch_sizes(), [256, 256, 244, 244]);
    }

    /// A timer due at tick 1 is drained by one thread (the timer thread's part) while another
    /// asks `settled` (`settle`'s part). No worker runs, so once handed over the callback stays
    /// in flight: in no interleaving may `settled` see the timer neither queued nor in flight.
    /// (The check runs on a spawned thread, not the model's main one: so placed, loom explores
    /// the interleavings; from the main thread it tried only one.)
    #[test]
    fn loom_settled_never_misses_a_drain_in_progress() {
        model(|| {
            let state = one_timer_due_at_tick_1(Callback::new(|| {}), 1);
            let drainer = {
                let state = state.clone();
                spawn(move || state.drain_due(1))
            };
            let checker = {
                let state = state.clone();
                spawn(move || state.settled(1))
            };
            assert!(!checker.join().unwrap());
            assert_eq!(drainer.join().unwrap(), 1);
            assert!(!state.settled(1));
        });
    }

    /// The same race with no workers: the draining thread runs the callback itself, after
    /// releasing the drain lock. `settled` may say yes only once the callback has finished.
    #[test]
    fn loom_settled_waits_for_a_callback_the_drainer_runs_itself() {
        model(|| {
            let ran = Arc::new(AtomicBool::new(false));
            let flag = ran.clone();
            let callback = Callback::new(move || flag.store(true, Ordering::Release));
            let state = one_timer_due_at_tick_1(callback, 0);
            let drainer = {
                let state = state.clone();
                spawn(move || state.drain_due(1))
            };
            let checker = {
                let (state, ran) = (state.clone(), ran.clone());
                spawn(move || {
                    if state.settled(1) {
                        assert!(
                            ran.load(Ordering::Acquire),
                            "settled before the callback ran"
                        );
                    }
                })
            };
            checker.join().unwrap();
            assert_eq!(drainer.join().unwrap(), 1);
            assert!(state.settled(1));
        });
    }
}
