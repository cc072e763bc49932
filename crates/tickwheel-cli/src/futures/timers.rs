//! Each W8 entrant behind [`AsyncTimers`]: its sleep, its timeout and its way of moving a
//! sleep's deadline, called as its own documentation shows, nothing cached or pooled.
//!
//! Every timeout is wrapped the same way (an `async fn` mapping its result to an
//! `Option`), so the wrapper costs every entrant alike, [`NoTimer`] included.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// The timer API of one entrant, as its users call it.
pub trait AsyncTimers: Send + Sync + 'static {
    /// Whether its sleeps ever complete ([`NoTimer`]'s do not: it has no timer).
    const FIRES: bool = true;

    /// Its sleep future.
    type Sleep<'a>: Future + Send + 'a
    where
        Self: 'a;

    /// A sleep of `delay` from now.
    fn sleep(&self, delay: Duration) -> Self::Sleep<'_>;

    /// Moves a sleep, pending or not, to `deadline` (an idle timeout pushed back).
    fn reset(sleep: Pin<&mut Self::Sleep<'_>>, deadline: Instant);

    /// `future` under a timeout of `delay`: `Some` of its output, `None` if the timeout
    /// fired first.
    fn timeout<'a, F>(
        &'a self,
        delay: Duration,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + Send + 'a
    where
        F: Future + Send + 'a;
}

/// tickwheel's free functions `tickwheel::sleep` and `tickwheel::timeout`, on the default
/// service (started by the first one used).
#[derive(Debug)]
pub struct TickwheelFree;

impl AsyncTimers for TickwheelFree {
    type Sleep<'a> = tickwheel::Sleep<'static>;

    fn sleep(&self, delay: Duration) -> Self::Sleep<'_> {
        tickwheel::sleep(delay)
    }

    fn reset(sleep: Pin<&mut Self::Sleep<'_>>, deadline: Instant) {
        sleep.get_mut().reset(deadline);
    }

    async fn timeout<'a, F>(&'a self, delay: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send + 'a,
    {
        tickwheel::timeout(delay, future).await.ok()
    }
}

/// The methods `service.sleep` and `service.timeout` of a `TimerService` built with
/// `TimerService::new()`; the futures borrow the service, which the tasks share in an `Arc`.
#[derive(Debug)]
pub struct TickwheelService(pub tickwheel::TimerService);

impl AsyncTimers for TickwheelService {
    type Sleep<'a> = tickwheel::Sleep<'a>;

    fn sleep(&self, delay: Duration) -> Self::Sleep<'_> {
        self.0.sleep(delay)
    }

    fn reset(sleep: Pin<&mut Self::Sleep<'_>>, deadline: Instant) {
        sleep.get_mut().reset(deadline);
    }

    async fn timeout<'a, F>(&'a self, delay: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send + 'a,
    {
        self.0.timeout(delay, future).await.ok()
    }
}

/// `tokio::time::sleep`, `tokio::time::timeout` and `Sleep::reset`, on the runtime's own
/// timer.
#[derive(Debug)]
pub struct TokioTime;

impl AsyncTimers for TokioTime {
    type Sleep<'a> = tokio::time::Sleep;

    fn sleep(&self, delay: Duration) -> Self::Sleep<'_> {
        tokio::time::sleep(delay)
    }

    fn reset(sleep: Pin<&mut Self::Sleep<'_>>, deadline: Instant) {
        sleep.reset(tokio::time::Instant::from_std(deadline));
    }

    async fn timeout<'a, F>(&'a self, delay: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send + 'a,
    {
        tokio::time::timeout(delay, future).await.ok()
    }
}

/// async-io's `Timer` (smol's timer), driven by async-io's own reactor thread: `Timer::after`
/// to sleep, `Timer::set_at` to move one, and a timeout the way smol's documentation writes
/// it, `future::or` of the future and a timer.
#[derive(Debug)]
pub struct AsyncIo;

impl AsyncTimers for AsyncIo {
    type Sleep<'a> = async_io::Timer;

    fn sleep(&self, delay: Duration) -> Self::Sleep<'_> {
        async_io::Timer::after(delay)
    }

    fn reset(sleep: Pin<&mut Self::Sleep<'_>>, deadline: Instant) {
        sleep.get_mut().set_at(deadline);
    }

    async fn timeout<'a, F>(&'a self, delay: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send + 'a,
    {
        futures_lite::future::or(async { Some(future.await) }, async {
            async_io::Timer::after(delay).await;
            None
        })
        .await
    }
}

/// Not a timer: the same loops with no timer at all (a timeout only awaits its future, a
/// sleep never ends, a reset does nothing). A floor: what the runtime and the harness cost.
#[derive(Debug)]
pub struct NoTimer;

impl AsyncTimers for NoTimer {
    const FIRES: bool = false;

    type Sleep<'a> = std::future::Pending<()>;

    fn sleep(&self, _delay: Duration) -> Self::Sleep<'_> {
        std::future::pending()
    }

    fn reset(_sleep: Pin<&mut Self::Sleep<'_>>, _deadline: Instant) {}

    async fn timeout<'a, F>(&'a self, _delay: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send + 'a,
    {
        Some(future.await)
    }
}
