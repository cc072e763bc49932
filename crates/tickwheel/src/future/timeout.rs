//! [`Timeout`]: a future with a deadline, and its error [`Elapsed`].
//!
//! The inner future is polled **first**: a future that is ready at its first poll completes
//! with `Ok` and never registers a timer (no lock, no allocation). The deadline's [`Sleep`] is
//! polled only while the inner future is pending, so it registers at the first poll that
//! returns `Pending`. When both are ready in the same poll, the inner future's output wins.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;

use super::Sleep;

/// The error of a [`Timeout`] whose deadline passed before its future completed.
///
/// Converts into an [`io::Error`] of kind [`TimedOut`](io::ErrorKind::TimedOut), so `?` works
/// in functions returning `io::Result`.
///
/// ```
/// use std::io;
/// use tickwheel::future::Elapsed;
///
/// fn check(e: Elapsed) -> io::Error {
///     e.into()
/// }
/// # let _ = check;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Elapsed {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(e: Elapsed) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, e)
    }
}

pin_project! {
    /// A future that completes with its inner future's output, or with [`Elapsed`] once its
    /// deadline passes first. Created by [`timeout`](super::timeout),
    /// [`timeout_at`](super::timeout_at), [`FutureExt::timeout`](super::FutureExt::timeout)
    /// or the same methods of a [`TimerService`](crate::TimerService).
    ///
    /// `Send`/`Sync`/`Unpin` exactly when the inner future is. Dropping it cancels its timer.
    ///
    /// The lifetime is that of the [`TimerService`](crate::TimerService) it borrows when made
    /// by [`TimerService::timeout`](crate::TimerService::timeout) or
    /// [`timeout_at`](crate::TimerService::timeout_at): making, polling and dropping it touch
    /// no reference count of the service, so a timeout on an own service costs what one on the
    /// default service does. [`into_owned`](Self::into_owned) lifts the borrow (a timeout
    /// kept in a struct beside the service, or spawned without it). `'static` when made by the
    /// free functions or [`FutureExt`](super::FutureExt), on the default service.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::future::timeout;
    ///
    /// let ready = futures::executor::block_on(timeout(Duration::from_secs(1), async { 7 }));
    /// assert_eq!(ready, Ok(7));
    /// let never = std::future::pending::<()>();
    /// let late = futures::executor::block_on(timeout(Duration::from_millis(1), never));
    /// let err: std::io::Error = late.unwrap_err().into();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<'a, F> {
        #[pin]
        future: F,
        sleep: Sleep<'a>,
    }
}

impl<'a, F> Timeout<'a, F> {
    pub(crate) fn new(future: F, sleep: Sleep<'a>) -> Timeout<'a, F> {
        Timeout { future, sleep }
    }

    /// The same timeout, no longer borrowing the [`TimerService`](crate::TimerService) it was
    /// made from (one reference count of the service; see [`Sleep::into_owned`]). Its timer,
    /// if registered, is kept.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tickwheel::TimerService;
    ///
    /// let service = Arc::new(TimerService::new().unwrap());
    /// // A thread that outlives this scope's borrow of `service` takes an owned timeout.
    /// let t = service.timeout(Duration::from_secs(1), async { 7 }).into_owned();
    /// let out = std::thread::spawn(move || futures::executor::block_on(t)).join().unwrap();
    /// assert_eq!(out, Ok(7));
    /// ```
    pub fn into_owned(self) -> Timeout<'static, F> {
        Timeout {
            future: self.future,
            sleep: self.sleep.into_owned(),
        }
    }

    /// The deadline (`None`: never, for `Duration::MAX`).
    pub fn deadline(&self) -> Option<Instant> {
        self.sleep.deadline()
    }

    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future; the timer is cancelled.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<'_, F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed::new())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}
