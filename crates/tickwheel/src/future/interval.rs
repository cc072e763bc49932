//! [`Interval`]: ticks at `start + k·period`, with a policy for ticks it falls behind on.
//!
//! The tick rules are documented on [`Interval`].

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::Sleep;
use crate::service::ServiceRef;
use crate::time::MissedTickBehavior;

/// A stream of ticks at `start + k·period`. Created by [`interval`](fn@super::interval),
/// [`interval_at`](super::interval_at) or the same methods of a
/// [`TimerService`](crate::TimerService). `Send + Sync + Unpin`; dropping it cancels its timer.
///
/// # Ticks and missed ticks
///
/// The first tick completes at `start` (at once for [`interval`](fn@super::interval)); each tick
/// yields the instant it was *scheduled* for, not the time it was observed. When a tick is
/// yielded so late that the next one is already due (`now >= scheduled + period`), the
/// [`MissedTickBehavior`] picks the next deadline — tokio's three policies, with tokio's
/// formulas (`tokio::time::MissedTickBehavior`):
///
/// * `Burst`: `scheduled + period` — the missed ticks complete at once, one after another,
///   until the interval has caught up; the schedule never drifts.
/// * `Delay`: `now + period` — the schedule restarts from the late tick.
/// * `Skip`: `now + period - (now - scheduled) % period` — the next multiple of `period` after
///   now on the original schedule; missed ticks are dropped.
///
/// Unlike tokio (which counts a tick as missed when it is more than 5 ms late), a tick counts
/// as missed exactly when the next tick is already due. This is deterministic on a
/// [`ManualClock`](crate::time::ManualClock) and keeps a slightly late `Delay` interval from
/// drifting by the lateness of every tick.
///
/// A zero period is replaced by one tick of the service's resolution (tokio panics instead).
/// A period so long that the next tick is not representable (`Duration::MAX`) ticks once, at
/// `start`, and then never again.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::{ManualClock, TimerService};
///
/// let clock = ManualClock::new();
/// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
/// let start = clock.now();
/// let mut interval = service.interval(Duration::from_millis(10));
/// futures::executor::block_on(async {
///     assert_eq!(interval.tick().await, start); // the first tick is immediate
///     clock.advance(Duration::from_millis(10));
///     assert_eq!(interval.tick().await, start + Duration::from_millis(10));
/// });
/// ```
#[derive(Debug)]
#[must_use = "an interval does nothing unless ticked"]
pub struct Interval {
    sleep: Sleep<'static>,
    period: Duration,
    missed: MissedTickBehavior,
}

impl Interval {
    /// An interval on `service` whose first tick is `start`.
    pub(crate) fn on(service: ServiceRef, start: Instant, period: Duration) -> Interval {
        let sleep = Sleep::until(service, Some(start));
        let resolution = sleep.resolution();
        Interval::new(sleep, period, resolution)
    }

    /// An interval whose first tick is `start` (the sleep's deadline).
    fn new(sleep: Sleep<'static>, period: Duration, resolution: Duration) -> Interval {
        let period = if period.is_zero() { resolution } else { period };
        Interval {
            sleep,
            period,
            missed: MissedTickBehavior::default(),
        }
    }

    /// Completes at the next tick with the instant it was scheduled for.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick: `Ready` with the instant it was scheduled for, or `Pending`
    /// with `cx`'s waker registered.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let Some(scheduled) = self.sleep.deadline() else {
            return Poll::Pending; // Never: unreachable, a `None` deadline never completes.
        };
        let now = self.sleep.now();
        let next = match scheduled.checked_add(self.period) {
            None => None,
            Some(regular) if now < regular => Some(regular),
            Some(_) => self.missed.next(scheduled, now, self.period),
        };
        self.sleep.reset_to(next);
        Poll::Ready(scheduled)
    }

    /// Restarts the schedule: the next tick is one period from now.
    pub fn reset(&mut self) {
        let next = self.sleep.now().checked_add(self.period);
        self.sleep.reset_to(next);
    }

    /// Restarts the schedule at `start`: the next tick is at `start`, then every period.
    pub fn reset_at(&mut self, start: Instant) {
        self.sleep.reset(start);
    }

    /// The period between ticks.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The policy for missed ticks.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed
    }

    /// Sets the policy for missed ticks.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed = behavior;
    }
}
