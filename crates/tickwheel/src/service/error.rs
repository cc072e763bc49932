//! Why a timer was not scheduled: [`ScheduleError`], and [`TryScheduleError`], which gives
//! the closure back.

use std::fmt;

#[cfg(doc)]
use super::{Builder, TimerService};

/// Why a timer was not scheduled: the reason a [`TryScheduleError`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cap set with [`Builder::max_pending`] is reached.
    Full,
    /// The service has shut down.
    ShutDown,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Full => "timer service is at its cap of pending timers",
            ScheduleError::ShutDown => "timer service has shut down",
        })
    }
}

impl std::error::Error for ScheduleError {}

/// Why [`TimerService::try_schedule`] did not schedule, with the closure it gives back (as
/// crossbeam's `TrySendError` gives back the message): nothing is dropped on a refusal.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::service::{TimerService, TryScheduleError};
///
/// let service = TimerService::builder().max_pending(1).build().unwrap();
/// let _first = service.try_schedule(Duration::from_secs(60), || ()).unwrap();
/// let job = || println!("retry me later");
/// match service.try_schedule(Duration::from_secs(60), job) {
///     Err(TryScheduleError::Full(job)) => drop(job), // keep it, retry, or run it here
///     _ => unreachable!(),
/// }
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TryScheduleError<F> {
    /// The cap set with [`Builder::max_pending`] is reached.
    Full(F),
    /// The service has shut down.
    ShutDown(F),
}

impl<F> TryScheduleError<F> {
    /// The closure that was not scheduled.
    pub fn into_inner(self) -> F {
        match self {
            TryScheduleError::Full(f) | TryScheduleError::ShutDown(f) => f,
        }
    }

    /// Why it was not scheduled.
    pub fn reason(&self) -> ScheduleError {
        match self {
            TryScheduleError::Full(_) => ScheduleError::Full,
            TryScheduleError::ShutDown(_) => ScheduleError::ShutDown,
        }
    }

    /// Whether the cap is reached.
    pub fn is_full(&self) -> bool {
        matches!(self, TryScheduleError::Full(_))
    }

    /// Whether the service has shut down.
    pub fn is_shut_down(&self) -> bool {
        matches!(self, TryScheduleError::ShutDown(_))
    }
}

/// Prints the variant without the closure (closures have no `Debug`), like crossbeam's.
impl<F> fmt::Debug for TryScheduleError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryScheduleError::Full(_) => "Full(..)",
            TryScheduleError::ShutDown(_) => "ShutDown(..)",
        })
    }
}

impl<F> fmt::Display for TryScheduleError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.reason(), f)
    }
}

impl<F> std::error::Error for TryScheduleError<F> {}

/// Compares the reason only: `assert_eq!(service.try_schedule(…).unwrap_err(),
/// ScheduleError::Full)`.
impl<F> PartialEq<ScheduleError> for TryScheduleError<F> {
    fn eq(&self, other: &ScheduleError) -> bool {
        self.reason() == *other
    }
}

impl<F> From<TryScheduleError<F>> for ScheduleError {
    fn from(error: TryScheduleError<F>) -> ScheduleError {
        error.reason()
    }
}
