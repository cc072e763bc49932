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
    /// [`sleep`](fn@crate::future::sleep) on this service.
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::after(self.service_ref(), duration)
    }

    /// [`sleep_until`](crate::future::sleep_until) on this service.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::until(self.service_ref(), Some(deadline))
    }

    /// [`timeout`](fn@crate::future::timeout) on this service.
    pub fn timeout<F: IntoFuture>(&self, duration: Duration, future: F) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep(duration))
    }

    /// [`timeout_at`](crate::future::timeout_at) on this service.
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
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
