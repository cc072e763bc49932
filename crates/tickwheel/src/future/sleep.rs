//! [`Sleep`]: a future that completes at a deadline, woken by the service's timer thread.
//!
//! # Ground rules
//!
//! * **Nothing before the first poll.** Creating a `Sleep` reads the clock once; it registers
//!   no timer, so creating and dropping one unpolled takes no lock and allocates nothing.
//! * **One allocation per registration**: an `Arc<SleepState>` shared by the future and the
//!   queue entry (`Expire` target). The timer thread calls `expire` on it once: it stores the
//!   outcome, then takes the waker under the state's lock and wakes it after unlocking. `poll`
//!   stores its waker under that same lock, then re-reads the outcome. Whichever of the two
//!   takes the lock second sees the other's write, so no wake-up is lost (loom test below).
//! * **A state belongs to one registration.** Once its timer left the queue, a late `expire`
//!   may still be on its way to the state, so `reset` never re-arms a state the timer thread
//!   can still reach: it reuses it only when the future holds the only reference
//!   (`Arc::get_mut`), else it allocates a fresh one. A late `expire` then wakes the old waker
//!   at worst (a spurious wake-up), never completes the new deadline early.
//! * **Drop cancels.** Dropping a registered, unfired `Sleep` cancels its timer (one shard
//!   lock); the entry and the state are freed by whichever side drops the last `Arc`, once.
//!   The service decides cancel-vs-fire exactly once (loom-tested in `service/shard.rs`).
//! * **Never early.** A poll completes once the timer fired or the service's clock reads at
//!   or after the deadline. The timer fires at the deadline's tick, rounded *up*, so it implies
//!   the latter. The tick is computed only when a timer is registered (a 128-bit division kept
//!   off the create/drop path). `Duration::MAX` has no deadline instant and is registered at
//!   tick [`NEVER`], which the clock never reaches: it stays pending, nothing overflows.
//! * **Shutdown.** If the service shuts down, a pending timer is discarded: the task is woken
//!   once and the `Sleep` then never completes (the callback layer's rule: a discarded timer
//!   never runs). The default service never shuts down.

use std::fmt;
use std::future::Future;
// Trait objects use std's `Arc` (loom's cannot coerce to `dyn`).
use std::pin::Pin;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::service::{Expire, Expiry, ServiceRef, TimerHandle};
use crate::sync::{lock, AtomicUsize, Mutex, Ordering};
use crate::time::NEVER;

/// `SleepState::outcome` while the timer is queued.
const WAITING: usize = 0;
/// `SleepState::outcome` once the timer fired.
const FIRED: usize = 1;
/// `SleepState::outcome` once the service discarded the timer at shutdown.
const DISCARDED: usize = 2;

/// What the future and its queue entry share: the outcome and the waker to wake.
pub(crate) struct SleepState {
    outcome: AtomicUsize,
    waker: Mutex<Option<Waker>>,
}

impl SleepState {
    pub(crate) fn new(waker: Option<Waker>) -> SleepState {
        SleepState {
            outcome: AtomicUsize::new(WAITING),
            waker: Mutex::new(waker),
        }
    }

    fn outcome(&self) -> usize {
        self.outcome.load(Ordering::Acquire)
    }

    pub(crate) fn fired(&self) -> bool {
        self.outcome() == FIRED
    }

    /// `Ready` once fired; otherwise stores `cx`'s waker to be woken by `expire`.
    pub(crate) fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired() {
            return Poll::Ready(());
        }
        {
            let mut slot = lock(&self.waker);
            match &*slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        // Re-read after publishing the waker: an `expire` that took the lock first is seen.
        if self.fired() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn take_waker(&self) -> Option<Waker> {
        lock(&self.waker).take()
    }
}

impl Expire for SleepState {
    fn expire(&self, how: Expiry) {
        let outcome = match how {
            Expiry::Fired => FIRED,
            Expiry::Discarded => DISCARDED,
        };
        self.outcome.store(outcome, Ordering::Release);
        // Wake outside the lock: the executor's wake code must not run under it.
        let waker = self.take_waker();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A registered timer: the service's handle and the state its entry points to.
struct Registration {
    handle: TimerHandle,
    state: StdArc<SleepState>,
}

/// A future that completes at a deadline (never before it). Created by [`sleep`](super::sleep),
/// [`sleep_until`](super::sleep_until) or the same methods of a
/// [`TimerService`](crate::TimerService).
///
/// It registers its timer at its first poll, is `Send + Sync + Unpin`, and dropping it cancels
/// the timer. See the [guarantees](crate::future#guarantees).
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
pub struct Sleep {
    service: ServiceRef,
    /// `None` when `now + delay` overflowed `Instant` (`Duration::MAX`): never.
    deadline: Option<Instant>,
    /// The first poll reads the clock to complete at once when the deadline has passed. Off
    /// for `sleep(delay)` with `delay` of a tick or more: polled right after creation it cannot
    /// be due, and polled late it is registered at a past tick, which the timer thread fires at
    /// once (a `Pending`, then a prompt wake-up — never early).
    check_first_poll: bool,
    registration: Option<Registration>,
}

impl Sleep {
    /// A sleep until `deadline` (`None`: never) on `service`.
    pub(crate) fn until(service: ServiceRef, deadline: Option<Instant>) -> Sleep {
        Sleep {
            service,
            deadline,
            check_first_poll: true,
            registration: None,
        }
    }

    /// A sleep of `delay` from now on `service` (`Duration::MAX`: never).
    pub(crate) fn after(service: ServiceRef, delay: Duration) -> Sleep {
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

    /// Whether the deadline has passed: the timer fired, or the service's clock reads at or
    /// after the deadline. A registered sleep then completes at its next poll; a `sleep(d)`
    /// first polled after its deadline registers a past-due timer and is woken at once by the
    /// timer thread (that first poll returns `Pending`: it does not read the clock).
    pub fn is_elapsed(&self) -> bool {
        let fired = self.registration.as_ref().is_some_and(|r| r.state.fired());
        fired || self.clock_reached()
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
    /// sleep becomes pending again if `deadline` is ahead; poll it again to be woken). The
    /// waker of a poll that returned `Pending` stays registered, so that task is woken at the
    /// new deadline without polling again.
    ///
    /// A registered timer is moved in place (one shard lock); one that already fired is
    /// re-registered, reusing its state when the timer thread no longer holds it.
    pub fn reset(&mut self, deadline: Instant) {
        self.reset_to(Some(deadline));
    }

    /// [`reset`](Self::reset) to a deadline that may be never (`None`).
    pub(crate) fn reset_to(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.check_first_poll = true;
        if self.registration.is_none() {
            return; // Registered at the first poll.
        }
        let tick = self.tick();
        let Some(reg) = self.registration.as_mut() else {
            return;
        };
        if reg.state.outcome() == WAITING && reg.handle.reset_tick(tick) {
            return; // Still queued, so not fired: moved in place.
        }
        // The timer left the queue; its `expire` may still be on its way to the old state.
        let waker = reg.state.take_waker();
        match StdArc::get_mut(&mut reg.state) {
            Some(state) => *state = SleepState::new(waker),
            None => reg.state = StdArc::new(SleepState::new(waker)),
        }
        reg.handle = self.service.schedule_notify(tick, reg.state.clone());
    }

    /// Registers the timer with `cx`'s waker already in place, so no wake-up can be missed.
    fn register(&mut self, cx: &mut Context<'_>) {
        let state = StdArc::new(SleepState::new(Some(cx.waker().clone())));
        let handle = self.service.schedule_notify(self.tick(), state.clone());
        self.registration = Some(Registration { handle, state });
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match &this.registration {
            Some(reg) => {
                if reg.state.poll_fired(cx).is_ready() || this.clock_reached() {
                    return Poll::Ready(());
                }
            }
            None => {
                if this.check_first_poll && this.clock_reached() {
                    return Poll::Ready(()); // Due already: no timer at all.
                }
                this.register(cx);
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(reg) = self.registration.take() {
            // A fired or discarded timer has left the queue: nothing to cancel, no lock.
            if reg.state.outcome() == WAITING {
                reg.handle.cancel();
            }
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("registered", &self.registration.is_some())
            .finish_non_exhaustive()
    }
}

/// Drop vs wake of one registration, plain or under loom (`--cfg loom`, see [`crate::sync`]).
///
/// The queue entry is modelled as a slot the "timer thread" takes the target out of (the
/// service's real cancel-vs-drain decision is loom-tested in `service/shard.rs`); the state,
/// its waker protocol and the `Arc` ownership are the real ones.
#[cfg(test)]
mod tests {
    use std::task::Wake;

    use super::*;
    use crate::sync::{model, spawn, Arc, JoinHandle};

    /// Counts wake-ups (a std `Arc`, as `Waker`s require).
    struct CountWaker(AtomicUsize);

    impl Wake for CountWaker {
        fn wake(self: StdArc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (StdArc<CountWaker>, Waker) {
        let count = StdArc::new(CountWaker(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// The queue entry: the timer thread or a cancel takes the target out, exactly once.
    type Entry = Arc<Mutex<Option<StdArc<dyn Expire>>>>;

    fn entry_of(state: &StdArc<SleepState>) -> Entry {
        let target: StdArc<dyn Expire> = state.clone();
        Arc::new(Mutex::new(Some(target)))
    }

    /// The timer thread's side: take the entry (unless the future cancelled it first) and
    /// expire it.
    fn fire_on_timer_thread(entry: &Entry) -> JoinHandle<()> {
        let entry = entry.clone();
        spawn(move || {
            let target = lock(&entry).take();
            if let Some(target) = target {
                target.expire(Expiry::Fired);
            }
        })
    }

    #[test]
    fn loom_poll_vs_expire_loses_no_wakeup() {
        model(|| {
            let state = StdArc::new(SleepState::new(None));
            let entry = entry_of(&state);
            let timer = fire_on_timer_thread(&entry);
            let (count, waker) = counting_waker();
            let mut cx = Context::from_waker(&waker);
            let ready = state.poll_fired(&mut cx).is_ready();
            timer.join().unwrap();
            // Either the poll saw the firing, or the firing woke the waker the poll stored.
            let woken = count.0.load(Ordering::SeqCst);
            assert!(ready || woken == 1, "lost wake-up");
            assert!(woken <= 1);
            assert!(state.fired());
        });
    }

    #[test]
    fn loom_drop_vs_expire_frees_once() {
        model(|| {
            let state = StdArc::new(SleepState::new(None));
            let entry = entry_of(&state);
            let (count, waker) = counting_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(state.poll_fired(&mut cx).is_pending());
            let timer = fire_on_timer_thread(&entry);
            // The future is dropped: it cancels (takes the entry) if it was not fired.
            let cancelled = lock(&entry).take().is_some();
            let weak = StdArc::downgrade(&state);
            drop(state);
            timer.join().unwrap();
            // Exactly one side had the entry; a wake-up happened exactly when the timer won.
            assert_eq!(count.0.load(Ordering::SeqCst), usize::from(!cancelled));
            // Both references are gone: the state was freed, once, by the last owner.
            assert!(weak.upgrade().is_none());
        });
    }

    #[test]
    fn discarded_wakes_but_never_completes() {
        model(|| {
            let state = SleepState::new(None);
            let (count, waker) = counting_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(state.poll_fired(&mut cx).is_pending());
            state.expire(Expiry::Discarded);
            assert_eq!(count.0.load(Ordering::SeqCst), 1);
            assert!(state.poll_fired(&mut cx).is_pending());
        });
    }
}
