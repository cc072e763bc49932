//! The user API's constructors on a [`TimerService`] (layer 4): [`sleep`](TimerService::sleep),
//! [`timeout`](TimerService::timeout), [`interval`](TimerService::interval) and their
//! `_until`/`_at` forms, [`deadlines`](TimerService::deadlines) and
//! [`cron_stream`](TimerService::cron_stream).
//!
//! They are methods of the service for its users, but they build types of this layer, so they
//! live here, beside those types, and the service (layer 3) never names them: every import
//! goes downward. The service's own API (scheduling, recurring series, settling, stats,
//! shutdown) is all in `service/mod.rs`; this file is the rest of it.

use std::future::IntoFuture;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::deadlines::{Deadlines, Expired};
use crate::future::{Interval, Sleep, Timeout};
use crate::service::TimerService;
#[cfg(feature = "cron")]
use crate::{cron::Cron, future::CronStream};

/// The futures, per-id timeouts and calendar streams of the layer above the service, on this
/// service (its clock, its timer thread).
impl TimerService {
    /// [`sleep`](fn@crate::future::sleep) on this service. The sleep borrows the service (no
    /// reference count); [`Sleep::into_owned`] lifts the borrow.
    pub fn sleep(&self, duration: Duration) -> Sleep<'_> {
        Sleep::after(self.service_link(), duration)
    }

    /// [`sleep_until`](crate::future::sleep_until) on this service, borrowing it like
    /// [`sleep`](Self::sleep).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep<'_> {
        Sleep::until(self.service_link(), Some(deadline))
    }

    /// [`timeout`](fn@crate::future::timeout) on this service. The timeout borrows the service
    /// (no reference count: it costs what the free function does); [`Timeout::into_owned`]
    /// lifts the borrow.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::TimerService;
    ///
    /// let service = TimerService::new().unwrap();
    /// let out = futures::executor::block_on(service.timeout(Duration::from_secs(1), async { 7 }));
    /// assert_eq!(out, Ok(7));
    /// ```
    pub fn timeout<F: IntoFuture>(
        &self,
        duration: Duration,
        future: F,
    ) -> Timeout<'_, F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep(duration))
    }

    /// [`timeout_at`](crate::future::timeout_at) on this service, borrowing it like
    /// [`timeout`](Self::timeout).
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<'_, F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep_until(deadline))
    }

    /// [`interval`](fn@crate::future::interval) on this service.
    pub fn interval(&self, period: Duration) -> Interval {
        Interval::on(self.service_ref(), self.now(), period)
    }

    /// [`interval_at`](crate::future::interval_at) on this service.
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        Interval::on(self.service_ref(), start, period)
    }

    /// A [`Deadlines`] table on this service and its receiver.
    pub fn deadlines<K>(&self) -> (Deadlines<K>, Expired<K>)
    where
        K: Eq + Hash + Clone + Send + 'static,
    {
        Deadlines::on(self.service_ref())
    }

    /// [`cron_stream`](crate::future::cron_stream) on this service: the wall clock is the
    /// service's own clock when that is a wall clock (a
    /// [`ManualWallClock`](crate::time::ManualWallClock) in tests), otherwise the
    /// [`SystemClock`](crate::time::SystemClock).
    #[cfg(feature = "cron")]
    pub fn cron_stream(&self, cron: Cron) -> CronStream {
        CronStream::new(self.service_ref(), cron)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::future::{pending, Future};
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::*;
    use crate::time::ManualClock;

    /// The service's futures borrow it: making, polling (registering) and dropping them leave
    /// its reference count alone; `into_owned` takes one count, given back on drop.
    #[test]
    fn service_futures_touch_no_reference_count() {
        let clock = ManualClock::new();
        let service = TimerService::builder()
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let refs = service.state_refs();
        {
            let mut ready = pin!(service.timeout(Duration::from_secs(1), async { 1 }));
            assert!(ready.as_mut().poll(&mut cx).is_ready());
            let mut t =
                pin!(service.timeout_at(clock.now() + Duration::from_secs(1), pending::<()>()));
            assert!(t.as_mut().poll(&mut cx).is_pending()); // registered
            let mut s = pin!(service.sleep(Duration::from_secs(1)));
            assert!(s.as_mut().poll(&mut cx).is_pending());
            assert_eq!(service.state_refs(), refs);
        }
        assert_eq!(service.state_refs(), refs);
        let mut owned = service.timeout(Duration::from_secs(1), pending::<()>());
        assert!(std::pin::Pin::new(&mut owned).poll(&mut cx).is_pending());
        let owned = owned.into_owned();
        assert_eq!(service.state_refs(), refs + 1);
        assert_eq!(
            service.stats().pending,
            1,
            "into_owned keeps the registered timer"
        );
        drop(owned);
        assert_eq!(service.state_refs(), refs);
        assert_eq!(service.stats().pending, 0);
    }
}
