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
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, sleep: Sleep) -> Timeout<F> {
        Timeout { future, sleep }
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

impl<F: Future> Future for Timeout<F> {
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

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}
