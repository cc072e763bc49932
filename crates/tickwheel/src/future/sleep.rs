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
    /// The queued timer whose callback wakes the task, once polled, and the id of the waker
    /// its entry holds (the last one this sleep gave it).
    timer: Option<(TimerHandle, WakerId)>,
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
    /// sleep becomes pending again if `deadline` is ahead; poll it again to be woken). A timer
    /// still queued is moved in place (one shard lock) and keeps the waker of the last poll
    /// that returned `Pending`, so that task is woken at the new deadline without polling
    /// again. A timer that already fired has woken its task; the next poll registers a new one.
    pub fn reset(&mut self, deadline: Instant) {
        self.reset_to(Some(deadline));
    }

    /// [`reset`](Self::reset) to a deadline that may be never (`None`).
    pub(crate) fn reset_to(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.check_first_poll = true;
        let Some((timer, _)) = &self.timer else {
            return; // Registered at the first poll.
        };
        if !timer.reset_tick(self.tick()) {
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
        if let Some((timer, _)) = self.timer.take() {
            timer.cancel(); // a fired timer's key is stale: a no-op
        }
        self.check_first_poll = true;
    }
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let Some((timer, woken)) = &mut this.timer else {
            if this.check_first_poll && this.clock_reached() {
                return Poll::Ready(()); // Due already: no timer at all.
            }
            // The waker is in the entry from the start, so no wake-up can be missed.
            let tick = this.tick();
            let waker = cx.waker().clone();
            let id = WakerId::of(&waker);
            this.timer = Some((this.service.schedule_waker(tick, waker), id));
            return Poll::Pending;
        };
        if this.deadline.is_some_and(|d| this.service.now() >= d) {
            this.complete();
            return Poll::Ready(());
        }
        // Not due by the clock, so not fired: normally still queued. Polled by the task its
        // entry wakes already, there is nothing to do (no lock); otherwise the swap makes sure
        // the timer wakes *this* task.
        if *woken == WakerId::of(cx.waker()) {
            return Poll::Pending;
        }
        match timer.update_waker(cx.waker()) {
            Some(id) => *woken = id,
            // Gone: it fired between the clock read and the lock (the clock now shows it), or
            // was discarded at shutdown.
            None if this.clock_reached() => {
                this.timer = None; // known gone: nothing to cancel
                this.complete();
                return Poll::Ready(());
            }
            None => {}
        }
        Poll::Pending
    }
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        if let Some((timer, _)) = self.timer.take() {
            // Removes the entry if it is still queued; a fired one is a stale key (no-op).
            timer.cancel();
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

    #[test]
    fn a_repoll_with_the_waker_it_holds_takes_no_lock() {
        let (clock, service) = manual_service(MS);
        let mut sleep = Sleep::until(service.clone(), Some(clock.now() + 10 * MS));
        let (first, waker) = counter();
        assert!(poll(&mut sleep, &waker).is_pending()); // registers
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

    #[test]
    fn a_reset_keeps_the_lock_free_repoll() {
        let (clock, service) = manual_service(MS);
        let mut sleep = Sleep::until(service.clone(), Some(clock.now() + 10 * MS));
        let (count, waker) = counter();
        assert!(poll(&mut sleep, &waker).is_pending());
        sleep.reset(clock.now() + 20 * MS); // moved in place, the entry keeps the waker
        let locks = service.producer_locks();
        assert!(poll(&mut sleep, &waker).is_pending());
        assert_eq!(service.producer_locks(), locks);
        clock.advance(10 * MS);
        assert_eq!(service.drain_due(10), 0, "moved away from tick 10");
        clock.advance(10 * MS);
        assert_eq!(service.drain_due(20), 1);
        assert_eq!(wakes(&count), 1);
        assert!(poll(&mut sleep, &waker).is_ready());
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
            let (clock, service) = manual_service(MS);
            let mut sleep = Sleep::until(service.clone(), Some(clock.now() + MS));
            let (count, waker) = counter();
            assert!(poll(&mut sleep, &waker).is_pending()); // registered at tick 1
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
