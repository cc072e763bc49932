//! [`Sleep`]: a future that completes at a deadline, woken by the service's timer thread.
//!
//! # Ground rules
//!
//! * **Nothing before the first poll.** Creating a `Sleep` reads the clock once; it registers
//!   no timer, so creating and dropping one unpolled takes no lock and allocates nothing.
//! * **The waker lives in the queue entry.** A registration is a timer whose callback is the
//!   task's `Waker` ([`Callback::waker`](crate::service)): no allocation besides the queue's
//!   own storage, and no state shared outside the shard. The timer thread takes the entry out
//!   under the shard lock and wakes the waker after unlocking; a later poll that brings
//!   another task's waker swaps it in place under the same lock. The shard decides each entry
//!   once — swapped before the drain (the new waker is woken) or drained first (the swap finds
//!   nothing) — so no wake-up is lost (loom tests in `service/shard/tests.rs`).
//! * **A re-poll by the same task takes no lock.** The `Sleep` keeps the [`WakerId`] of the
//!   waker its entry holds (only its own polls change that waker; a reset keeps it). A poll
//!   that finds the clock short of the deadline and brings a waker with that id returns
//!   `Pending` without touching the shard: the clock being short means the timer has not
//!   fired (see below), so it is still queued — or discarded at shutdown, which woke the
//!   task already — and its waker wakes this very task. The entry's waker keeps its data
//!   alive while queued, so no other task's waker can show the same id meanwhile. (Loom:
//!   `loom_same_waker_repoll_vs_fire_loses_no_wakeup` below.)
//! * **A reset to a later deadline takes no lock.** It only stores the deadline: the entry
//!   stays at the tick it was queued for (the *queued deadline*, never later than the
//!   sleep's), fires there and wakes the task once more than needed; the poll that follows
//!   finds the clock past the queued deadline but short of the sleep's, and re-arms the timer
//!   at the new tick (one lock). An idle timeout pushed back on every message thus costs one
//!   lock per idle period, not one per message (tokio's `Sleep::reset` defers the same way, in
//!   its driver). A reset to an *earlier* deadline moves the entry in place (one lock), as it
//!   must fire sooner. The lock-free re-poll above holds only while the clock is short of the
//!   queued deadline — the entry cannot have fired, so its waker is still alive. (Model:
//!   `resets_polls_and_fires_against_a_model` below; loom:
//!   `loom_rearm_after_a_deferred_reset_vs_fire_loses_no_wakeup`.)
//! * **Done means the clock says so.** A poll completes once the service's clock reads at or
//!   after the deadline. The timer fires at the start of the deadline's tick, rounded *up*,
//!   read from that same clock, which never goes back: a fired timer implies a clock at or
//!   past the deadline, so a poll needs no shared "fired" flag. A poll that finds its entry
//!   gone reads the clock again, which then shows the deadline passed — unless the service
//!   discarded the timer at shutdown.
//! * **Drop cancels.** Dropping a registered `Sleep` removes its entry if it is still queued
//!   (one shard lock); the service decides cancel-vs-fire exactly once. A poll that
//!   completes does the same, so no wake-up arrives after `Ready`.
//! * **Never early.** The tick is computed only when a timer is registered (a 128-bit division
//!   kept off the create/drop path). `Duration::MAX` has no deadline instant and is registered
//!   at tick [`NEVER`], which the clock never reaches: it stays pending, nothing overflows.
//! * **Shutdown.** If the service shuts down, a pending timer is discarded: its task is woken
//!   once, and the `Sleep` completes only if polled again after its deadline (nothing wakes it
//!   then). A `Sleep` first polled after shutdown is woken at once, likewise. The default
//!   service never shuts down.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::service::{ServiceLink, TimerHandle, WakerId};
use crate::time::NEVER;

/// A future that completes at a deadline (never before it). Created by [`sleep`](fn@super::sleep),
/// [`sleep_until`](super::sleep_until) or the same methods of a
/// [`TimerService`](crate::TimerService).
///
/// It registers its timer at its first poll, is `Send + Sync + Unpin`, and dropping it cancels
/// the timer. See the [guarantees](crate::future#guarantees).
///
/// The lifetime is that of the [`TimerService`](crate::TimerService) it borrows when made by
/// one of its methods (which thus touch no reference count: see
/// [`into_owned`](Self::into_owned) to keep one longer); `'static` when made by the free
/// functions, on the default service.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::{ManualClock, TimerService};
///
/// let clock = ManualClock::new();
/// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
/// let mut sleep = service.sleep(Duration::from_millis(10));
/// let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
/// clock.advance(Duration::from_millis(10));
/// service.settle(); // the timer thread has fired the timer and woken the task
/// assert!(sleep.is_elapsed());
/// assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_ready());
/// # use std::future::Future;
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Sleep<'a> {
    service: ServiceLink<'a>,
    /// `None` when `now + delay` overflowed `Instant` (`Duration::MAX`): never.
    deadline: Option<Instant>,
    /// The first poll reads the clock to complete at once when the deadline has passed. Off
    /// for `sleep(delay)` with `delay` of a tick or more: polled right after creation it cannot
    /// be due, and polled late it is registered at a past tick, which the timer thread fires at
    /// once (a `Pending`, then a prompt wake-up — never early).
    check_first_poll: bool,
    /// The queued timer whose callback wakes the task, once polled.
    timer: Option<Queued>,
}

/// A [`Sleep`]'s queued timer.
struct Queued {
    handle: TimerHandle,
    /// The id of the waker its entry holds (the last one this sleep gave it).
    woken: WakerId,
    /// The deadline its tick was computed from (`None`: never). Never later than the sleep's:
    /// a reset to a later deadline leaves the entry here (see the module's doc).
    at: Option<Instant>,
}

/// Whether deadline `a` is at or after deadline `b` (`None` is never, after every instant).
fn at_or_after(a: Option<Instant>, b: Option<Instant>) -> bool {
    match (a, b) {
        (_, None) => a.is_none(),
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a >= b,
    }
}

impl<'a> Sleep<'a> {
    /// A sleep until `deadline` (`None`: never) on `service`.
    pub(crate) fn until(service: ServiceLink<'a>, deadline: Option<Instant>) -> Sleep<'a> {
        Sleep {
            service,
            deadline,
            check_first_poll: true,
            timer: None,
        }
    }

    /// A sleep of `delay` from now on `service` (`Duration::MAX`: never).
    pub(crate) fn after(service: ServiceLink<'a>, delay: Duration) -> Sleep<'a> {
        let deadline = service.now().checked_add(delay);
        let mut sleep = Sleep::until(service, deadline);
        sleep.check_first_poll = delay < sleep.resolution();
        sleep
    }

    /// The current time of the service's clock.
    pub(crate) fn now(&self) -> Instant {
        self.service.now()
    }

    /// The length of one tick of the service.
    pub(crate) fn resolution(&self) -> Duration {
        self.service.ticks().resolution()
    }

    /// The instant this sleep completes at (it completes at the start of the first tick at or
    /// after it). `None` for a sleep that never completes because its deadline is not
    /// representable (`sleep(Duration::MAX)`).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has passed: the service's clock reads at or after it (its timer
    /// fires at that moment or just after). The next poll then completes.
    pub fn is_elapsed(&self) -> bool {
        self.clock_reached()
    }

    /// Whether the service's clock reads at or after the deadline (never without one).
    fn clock_reached(&self) -> bool {
        self.deadline.is_some_and(|d| self.service.now() >= d)
    }

    /// The deadline rounded up to the service's tick, [`NEVER`] without one.
    fn tick(&self) -> u64 {
        self.deadline
            .map_or(NEVER, |d| self.service.ticks().deadline_tick(d))
    }

    /// Moves the deadline to `deadline`, whether or not the sleep has completed (a completed
    /// sleep becomes pending again if `deadline` is ahead; poll it again to be woken).
    ///
    /// * Later than the deadline its timer is queued for: no lock, nothing moves. The timer
    ///   fires at its old deadline and wakes the task of the last poll that returned
    ///   `Pending`; polled then (as a woken task polls its futures), the sleep finds itself
    ///   not yet due and re-arms its timer at the new deadline. So a task woken by a sleep may
    ///   find it still pending — at most once per such reset in between, and never with the
    ///   sleep completing early.
    /// * Earlier: a timer still queued is moved in place (one shard lock) and keeps its waker,
    ///   so that task is woken at the new deadline without polling again.
    ///
    /// A timer that already fired has woken its task; the next poll registers a new one.
    pub fn reset(&mut self, deadline: Instant) {
        self.reset_to(Some(deadline));
    }

    /// [`reset`](Self::reset) to a deadline that may be never (`None`).
    pub(crate) fn reset_to(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.check_first_poll = true;
        let Some(queued) = &mut self.timer else {
            return; // Registered at the first poll.
        };
        if at_or_after(deadline, queued.at) {
            return; // Deferred: the poll after the queued deadline re-arms it.
        }
        let tick = deadline.map_or(NEVER, |d| self.service.ticks().deadline_tick(d));
        if queued.handle.reset_tick(tick) {
            queued.at = deadline;
        } else {
            self.timer = None; // Fired (its task was woken) or discarded: re-register.
        }
    }

    /// The same sleep, no longer borrowing the [`TimerService`](crate::TimerService) it was
    /// made from: for a sleep that must outlive that borrow (a field of a struct that also
    /// holds the service, a task spawned without it). It takes one reference count of the
    /// service, which a borrowed sleep never touches. Its timer, if registered, is kept.
    /// On the default service it costs nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tickwheel::{future::Sleep, TimerService};
    ///
    /// struct Idle {
    ///     service: Arc<TimerService>,
    ///     sleep: Sleep<'static>,
    /// }
    ///
    /// let service = Arc::new(TimerService::new().unwrap());
    /// let sleep = service.sleep(Duration::from_secs(30)).into_owned();
    /// let idle = Idle { service, sleep };
    /// # drop(idle);
    /// ```
    pub fn into_owned(mut self) -> Sleep<'static> {
        Sleep {
            service: self.service.to_owned_ref(),
            deadline: self.deadline,
            check_first_poll: self.check_first_poll,
            timer: self.timer.take(), // `self` is dropped with nothing to cancel
        }
    }
}

impl Sleep<'_> {
    /// Drops the timer of a sleep that is done by the clock. The clock can reach the deadline
    /// before the timer fires (the deadline sits inside its tick, and the timer thread fires
    /// at the tick's end): a timer left queued would later wake a task that already got
    /// `Ready`. Later polls see the clock and complete without registering.
    fn complete(&mut self) {
        if let Some(queued) = self.timer.take() {
            queued.handle.cancel(); // a fired timer's key is stale: a no-op
        }
        self.check_first_poll = true;
    }

    /// Queues a timer for the deadline that wakes `waker` (a new entry: the last one fired,
    /// or there was none).
    fn register(&mut self, waker: &std::task::Waker) {
        let tick = self.tick();
        let waker = waker.clone();
        let woken = WakerId::of(&waker);
        let handle = self.service.schedule_waker(tick, waker);
        self.timer = Some(Queued {
            handle,
            woken,
            at: self.deadline,
        });
    }

    /// The clock has passed the queued deadline but not the sleep's (a deferred reset): moves
    /// the entry to the deadline if it has not fired yet and makes it wake `waker`, or queues a
    /// new one if it has.
    fn rearm(&mut self, waker: &std::task::Waker) {
        let tick = self.tick();
        if let Some(queued) = &mut self.timer {
            if queued.handle.reset_tick(tick) {
                queued.at = self.deadline;
                if queued.woken == WakerId::of(waker) {
                    return;
                }
                if let Some(id) = queued.handle.update_waker(waker) {
                    queued.woken = id;
                    return;
                }
                // Fired at its new tick in between: the clock is past the deadline now, and
                // the new entry below fires at once.
            }
        }
        self.register(waker);
    }
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let Some(queued) = &mut this.timer else {
            if this.check_first_poll && this.clock_reached() {
                return Poll::Ready(()); // Due already: no timer at all.
            }
            // The waker is in the entry from the start, so no wake-up can be missed.
            this.register(cx.waker());
            return Poll::Pending;
        };
        let now = this.service.now();
        if this.deadline.is_some_and(|d| now >= d) {
            this.complete();
            return Poll::Ready(());
        }
        if queued.at.is_some_and(|at| now >= at) {
            // Past the queued deadline of a deferred reset: the entry fired or is about to.
            this.rearm(cx.waker());
            return Poll::Pending;
        }
        // Short of the queued deadline, so not fired: normally still queued. Polled by the
        // task its entry wakes already, there is nothing to do (no lock); otherwise the swap
        // makes sure the timer wakes *this* task.
        if queued.woken == WakerId::of(cx.waker()) {
            return Poll::Pending;
        }
        match queued.handle.update_waker(cx.waker()) {
            Some(id) => queued.woken = id,
            // Gone: it fired between the clock read and the lock (the clock now shows its
            // queued deadline), or was discarded at shutdown (nothing to re-arm: stay pending).
            None => {
                let now = this.service.now();
                if this.deadline.is_some_and(|d| now >= d) {
                    this.timer = None; // known gone: nothing to cancel
                    this.complete();
                    return Poll::Ready(());
                }
                if queued.at.is_some_and(|at| now >= at) {
                    this.register(cx.waker());
                }
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        if let Some(queued) = self.timer.take() {
            // Removes the entry if it is still queued; a fired one is a stale key (no-op).
            queued.handle.cancel();
        }
    }
}

impl fmt::Debug for Sleep<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("registered", &self.timer.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc as StdArc;
    use std::task::Waker;

    use super::*;
    use crate::service::manual_service;
    use crate::sync::{model, spawn, Ordering};

    const MS: Duration = Duration::from_millis(1);

    /// A waker that counts its wake-ups (std atomics: the count orders nothing in the models).
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: StdArc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (StdArc<Count>, Waker) {
        let count = StdArc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    fn wakes(count: &StdArc<Count>) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    fn poll(sleep: &mut Sleep, waker: &Waker) -> Poll<()> {
        Pin::new(sleep).poll(&mut Context::from_waker(waker))
    }

    /// A one-shard manual service (1 ms ticks), a sleep `ticks` ahead on it, registered by a
    /// pending poll with the returned counting waker.
    fn registered(
        ticks: u32,
    ) -> (
        crate::time::ManualClock,
        crate::service::ServiceRef,
        Sleep<'static>,
        StdArc<Count>,
        Waker,
    ) {
        let (clock, service) = manual_service(MS);
        let mut sleep = Sleep::until(service.clone(), Some(clock.now() + ticks * MS));
        let (count, waker) = counter();
        assert!(poll(&mut sleep, &waker).is_pending()); // registers
        (clock, service, sleep, count, waker)
    }

    #[cfg(not(loom))]
    #[test]
    fn a_repoll_with_the_waker_it_holds_takes_no_lock() {
        let (clock, service, mut sleep, first, waker) = registered(10); // registers
        let locks = service.producer_locks();
        // The same waker, and a clone of it (the same task): no lock.
        assert!(poll(&mut sleep, &waker).is_pending());
        assert!(poll(&mut sleep, &waker.clone()).is_pending());
        assert_eq!(
            service.producer_locks(),
            locks,
            "a same-task re-poll locked"
        );
        // Another task's waker is swapped in under the lock, once; its re-polls lock no more.
        let (second, other) = counter();
        assert!(poll(&mut sleep, &other).is_pending());
        assert_eq!(service.producer_locks(), locks + 1);
        assert!(poll(&mut sleep, &other).is_pending());
        assert_eq!(service.producer_locks(), locks + 1);
        // The fire wakes the task of the last poll, once; that task's poll completes.
        clock.advance(10 * MS);
        assert_eq!(service.drain_due(10), 1);
        assert_eq!((wakes(&first), wakes(&second)), (0, 1));
        assert!(poll(&mut sleep, &other).is_ready());
    }

    #[cfg(not(loom))]
    #[test]
    fn a_reset_to_an_earlier_deadline_moves_the_timer_and_keeps_the_lock_free_repoll() {
        let (clock, service, mut sleep, count, waker) = registered(20);
        let locks = service.producer_locks();
        sleep.reset(clock.now() + 10 * MS); // moved in place, the entry keeps the waker
        assert_eq!(service.producer_locks(), locks + 1);
        assert!(poll(&mut sleep, &waker).is_pending());
        assert_eq!(
            service.producer_locks(),
            locks + 1,
            "a same-task re-poll locked"
        );
        clock.advance(10 * MS);
        assert_eq!(service.drain_due(10), 1);
        assert_eq!(wakes(&count), 1);
        assert!(poll(&mut sleep, &waker).is_ready());
        clock.advance(10 * MS);
        assert_eq!(service.drain_due(20), 0, "moved away from tick 20");
        assert_eq!(wakes(&count), 1);
    }

    /// A reset to a later deadline stores it and takes no lock; the entry fires at the queued
    /// deadline and wakes the task once, whose poll re-arms it (one lock) at the new one.
    #[cfg(not(loom))]
    #[test]
    fn a_reset_to_a_later_deadline_takes_no_lock_and_is_re_armed_by_the_next_poll() {
        let (clock, service, mut sleep, count, waker) = registered(10);
        let locks = service.producer_locks();
        for ms in 11..=20 {
            sleep.reset(clock.now() + ms * MS);
            assert!(poll(&mut sleep, &waker).is_pending());
        }
        assert_eq!(
            service.producer_locks(),
            locks,
            "a later reset or a re-poll locked"
        );
        clock.advance(10 * MS);
        assert_eq!(
            service.drain_due(10),
            1,
            "the entry stayed at its queued deadline"
        );
        assert_eq!(wakes(&count), 1);
        assert!(
            poll(&mut sleep, &waker).is_pending(),
            "done before the new deadline"
        );
        // Re-armed: a move that finds the entry fired, then a new entry.
        assert_eq!(service.producer_locks(), locks + 2);
        assert!(poll(&mut sleep, &waker).is_pending());
        assert_eq!(service.producer_locks(), locks + 2);
        clock.advance(9 * MS);
        assert_eq!(service.drain_due(19), 0);
        assert!(poll(&mut sleep, &waker).is_pending());
        clock.advance(MS);
        assert_eq!(service.drain_due(20), 1);
        assert_eq!(wakes(&count), 2);
        assert!(poll(&mut sleep, &waker).is_ready());
    }

    /// Past the queued deadline of a deferred reset but before the timer thread drained it:
    /// the poll moves the entry (still queued) rather than leaving it to fire early.
    #[cfg(not(loom))]
    #[test]
    fn a_poll_past_the_queued_deadline_before_the_drain_moves_the_entry() {
        let (clock, service, mut sleep, count, _) = registered(10);
        let (other_count, other) = counter();
        sleep.reset(clock.now() + 30 * MS);
        clock.advance(10 * MS);
        // Another task polls first: the entry moves to tick 30 and wakes that task.
        assert!(poll(&mut sleep, &other).is_pending());
        assert_eq!(service.drain_due(10), 0, "moved before it fired");
        clock.advance(20 * MS);
        assert_eq!(service.drain_due(30), 1);
        assert_eq!((wakes(&count), wakes(&other_count)), (0, 1));
        assert!(poll(&mut sleep, &other).is_ready());
    }

    /// The re-arm after a deferred reset against the fire at the queued deadline: the entry is
    /// queued for tick 1, the sleep reset to tick 2 (no lock); the timer thread moves the clock
    /// to tick 1 and drains it while the task polls. Whether the poll moves the entry before
    /// the drain, finds it fired and queues a new one, or comes before the clock moved (and is
    /// woken by the fire), the task is woken by the drain of tick 2 at the latest, its sleep
    /// then completes, and no waker is left in the shard.
    #[test]
    fn loom_rearm_after_a_deferred_reset_vs_fire_loses_no_wakeup() {
        model(|| {
            let (clock, service, mut sleep, count, waker) = registered(1); // registered at tick 1
            sleep.reset(clock.now() + 2 * MS); // deferred: the entry stays at tick 1
            let firer = {
                let (clock, service) = (clock.clone(), service.clone());
                spawn(move || {
                    clock.advance(MS);
                    service.drain_due(1)
                })
            };
            let poller = {
                let waker = waker.clone();
                spawn(move || {
                    let pending = poll(&mut sleep, &waker).is_pending();
                    (sleep, pending)
                })
            };
            let (mut sleep, pending) = poller.join().unwrap();
            assert!(pending, "done a tick early");
            firer.join().unwrap();
            clock.advance(MS);
            service.drain_due(2);
            assert!(wakes(&count) >= 1, "pending, and never woken");
            assert!(poll(&mut sleep, &waker).is_ready());
            drop(sleep);
            assert_eq!(StdArc::strong_count(&count), 2, "a waker left in the shard");
        });
    }

    /// What [`resets_polls_and_fires_against_a_model`] does to a sleep.
    #[cfg(not(loom))]
    #[derive(Clone, Debug)]
    enum Op {
        /// A poll by task 0 or 1.
        Poll(usize),
        /// A reset to `now` plus this many µs (`None`: never).
        Reset(Option<u64>),
        /// The clock moves this many µs and the timer thread drains what is due.
        Advance(u64),
    }

    #[cfg(not(loom))]
    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..2usize).prop_map(Op::Poll),
            3 => proptest::option::weighted(0.9, 0..40_000u64).prop_map(Op::Reset),
            3 => (0..8_000u64).prop_map(Op::Advance),
        ]
    }

    proptest::proptest! {
        /// Polls by two tasks, resets both ways and drains, against the contract: a poll is
        /// ready exactly when the clock reads at or after the deadline; after a pending poll
        /// the task of the last pending poll is woken by the drain of the deadline's tick at
        /// the latest; no task is woken between a ready poll and the next pending one; and
        /// every wake-up answers a pending poll (at most one each).
        #[cfg(not(loom))]
        #[test]
        fn resets_polls_and_fires_against_a_model(
            first in 0..40_000u64,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let (clock, service) = manual_service(MS);
            let origin = clock.now();
            let mut deadline = Some(origin + Duration::from_micros(first));
            let mut sleep = Sleep::until(service.clone(), deadline);
            let tasks = [counter(), counter()];
            let wakes_now = || [wakes(&tasks[0].0), wakes(&tasks[1].0)];
            // The task the sleep owes a wake-up (its last poll was pending) and its count then.
            let mut owed: Option<(usize, usize)> = None;
            let mut pending_polls = 0;
            let mut after_ready: Option<[usize; 2]> = None;
            for op in ops {
                match op {
                    Op::Poll(task) => {
                        let ready = poll(&mut sleep, &tasks[task].1).is_ready();
                        let due = deadline.is_some_and(|d| clock.now() >= d);
                        proptest::prop_assert_eq!(ready, due, "ready differs from the clock");
                        if ready {
                            owed = None;
                            after_ready = Some(wakes_now());
                        } else {
                            pending_polls += 1;
                            owed = Some((task, wakes(&tasks[task].0)));
                            after_ready = None;
                        }
                    }
                    Op::Reset(ahead) => {
                        deadline = ahead.map(|us| clock.now() + Duration::from_micros(us));
                        match deadline {
                            Some(d) => sleep.reset(d),
                            None => sleep.reset_to(None),
                        }
                    }
                    Op::Advance(us) => {
                        clock.advance(Duration::from_micros(us));
                        // The tick that has begun (the timer thread drains it then).
                        let tick = ((clock.now() - origin).as_nanos() / MS.as_nanos()) as u64;
                        service.drain_due(tick);
                        if let Some(before) = after_ready {
                            proptest::prop_assert_eq!(wakes_now(), before, "woken after ready");
                        }
                        let reached = deadline.is_some_and(|d| {
                            service.ticks().deadline_tick(d) <= tick
                        });
                        if let (Some((task, at)), true) = (owed, reached) {
                            proptest::prop_assert!(
                                wakes(&tasks[task].0) > at,
                                "task {} not woken by the drain of its deadline's tick", task
                            );
                        }
                    }
                }
                let total: usize = wakes_now().iter().sum();
                proptest::prop_assert!(
                    total <= pending_polls,
                    "{} wakes for {} pending polls",
                    total,
                    pending_polls
                );
            }
        }
    }

    /// The lock-free re-poll against the fire: the task polls again with the waker its entry
    /// holds while the timer thread moves the clock to the deadline and fires. In every
    /// interleaving the poll completes or the task is woken (so it polls again, and that poll
    /// completes), and the waker is never left behind in the shard. (The clock is `std`'s
    /// atomics, not loom's: loom runs one thread at a time, so the clock store lands between
    /// the model's steps in program order, which is all the model needs.)
    #[test]
    fn loom_same_waker_repoll_vs_fire_loses_no_wakeup() {
        model(|| {
            let (clock, service, mut sleep, count, waker) = registered(1); // registered at tick 1
            let firer = {
                let service = service.clone();
                spawn(move || {
                    clock.advance(MS);
                    service.drain_due(1)
                })
            };
            let poller = {
                let waker = waker.clone();
                spawn(move || {
                    let ready = poll(&mut sleep, &waker).is_ready();
                    (sleep, ready)
                })
            };
            let (mut sleep, ready) = poller.join().unwrap();
            // Not fired only if the poll saw the clock first, completed and cancelled it.
            let fired = firer.join().unwrap();
            assert!(ready || fired == 1, "pending, and never woken");
            assert_eq!(wakes(&count), fired, "woken exactly when fired");
            assert!(poll(&mut sleep, &waker).is_ready());
            drop(sleep);
            // Only the test's own wakers are left: the entry's was woken and dropped.
            assert_eq!(StdArc::strong_count(&count), 2);
        });
    }
}
