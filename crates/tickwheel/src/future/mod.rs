//! Futures (layer 4): [`sleep`](fn@sleep), [`timeout`](fn@timeout), [`interval`](fn@interval)
//! and their `_until`/`_at` forms, runtime-agnostic.
//!
//! They run under any executor — tokio, smol, `futures::executor`, a hand-written one — because
//! they need no reactor of their own: the [`TimerService`]'s timer thread wakes their `Waker`
//! at the deadline (on the timer thread itself, with no hand-off to a worker). The free
//! functions use the lazily started [`TimerService::default_service`]; the methods of the same
//! names on a [`TimerService`] use that service and its clock (a
//! [`ManualClock`](crate::time::ManualClock) service makes futures deterministic in tests).
//!
//! A [`Sleep`] or [`Timeout`] made by a method of a [`TimerService`] borrows the service
//! (`Sleep<'a>`, `Timeout<'a, F>`): it reaches the service without a reference count, so
//! workers making timeouts on one service at once share no count to bounce between their
//! caches, and a timeout on an own service costs what one on the default service does. To keep
//! one beyond the borrow, [`Sleep::into_owned`] and [`Timeout::into_owned`] take one count. The
//! free functions give `'static` futures on the default service, which lives forever.
//! [`Interval`] and [`CronStream`] always hold their service (they live long: one count each).
//!
//! # Guarantees
//!
//! * **Never early**: deadlines round up to the service's tick; a future completes only once
//!   the service's clock has reached that tick.
//! * **Lazy**: [`Sleep`], [`Timeout`] and [`Interval`] register their timer at their first
//!   pending poll. Created and dropped unpolled, they take no lock and allocate nothing; a
//!   [`Timeout`] whose future is ready at its first poll never registers a timer at all.
//! * **No allocation** per registration: the task's `Waker` is kept in the queue entry itself
//!   (the queue's storage is reused); one shard lock to register, to move earlier and to
//!   cancel, and none for a poll by the task whose waker the timer already holds (a clock
//!   read only) or for a [`Sleep::reset`] to a later deadline (the timer wakes the task at
//!   the deadline it was queued for, and the poll that follows moves it on).
//! * **Drop cancels** the timer and frees its entry.
//! * `Send + Sync + Unpin` (a [`Timeout`] is as `Send`/`Sync`/`Unpin` as its future).
//! * **Never**: `Duration::MAX` and deadlines past the service's tick range never complete and
//!   never overflow.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel::future::{sleep, FutureExt};
//!
//! futures::executor::block_on(async {
//!     sleep(Duration::from_millis(1)).await;
//!     let answer = async { 42 }.timeout(Duration::from_secs(1)).await;
//!     assert_eq!(answer, Ok(42));
//! });
//! ```

#[cfg(feature = "cron")]
mod cron_stream;
mod interval;
mod sleep;
mod timeout;

use std::future::{Future, IntoFuture};
use std::time::{Duration, Instant};

pub use crate::time::MissedTickBehavior;
#[cfg(feature = "cron")]
pub use cron_stream::{cron_stream, CronStream};
pub use interval::Interval;
pub use sleep::Sleep;
pub use timeout::{Elapsed, Timeout};

use crate::service::{ServiceRef, TimerService};

/// The default service, referenced without a reference count.
#[inline]
fn default_service() -> ServiceRef {
    TimerService::default_service().static_ref()
}

/// A future that completes `duration` from now (rounded up to the next tick of the default
/// service: never early). `Duration::MAX` never completes.
pub fn sleep(duration: Duration) -> Sleep<'static> {
    Sleep::after(default_service(), duration)
}

/// A future that completes at `deadline` (at once if it has passed).
pub fn sleep_until(deadline: Instant) -> Sleep<'static> {
    Sleep::until(default_service(), Some(deadline))
}

/// Runs `future` with a deadline `duration` from now: its output, or [`Elapsed`] if the
/// deadline passes first.
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<'static, F::IntoFuture> {
    Timeout::new(future.into_future(), sleep(duration))
}

/// Runs `future` with the deadline `deadline`: its output, or [`Elapsed`] if the deadline
/// passes first.
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<'static, F::IntoFuture> {
    Timeout::new(future.into_future(), sleep_until(deadline))
}

/// Ticks every `period`, the first tick at once. See [`Interval`].
pub fn interval(period: Duration) -> Interval {
    let service = default_service();
    let start = service.now();
    Interval::on(service, start, period)
}

/// Ticks every `period`, the first tick at `start`. See [`Interval`].
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    Interval::on(default_service(), start, period)
}

/// Timeouts as methods of any future, on the default service.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::future::FutureExt;
///
/// let late = std::future::pending::<()>().timeout(Duration::from_millis(1));
/// assert!(futures::executor::block_on(late).is_err());
/// ```
pub trait FutureExt: Future + Sized {
    /// [`timeout`](fn@timeout)`(duration, self)`.
    fn timeout(self, duration: Duration) -> Timeout<'static, Self> {
        timeout(duration, self)
    }

    /// [`timeout_at`]`(deadline, self)`.
    fn timeout_at(self, deadline: Instant) -> Timeout<'static, Self> {
        timeout_at(deadline, self)
    }
}

impl<F: Future> FutureExt for F {}
