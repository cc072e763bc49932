//! A task as a producer gives it, when it runs, and where it is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::failure::FailReason;
use crate::failure::RetryPolicy;
use crate::recurrence::Recurrence;

/// When a task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAt {
    /// At this wall-clock instant (rounded up to the millisecond, so never early).
    At(SystemTime),
    /// At this many milliseconds since the Unix epoch.
    AtMillis(u64),
    /// This long after the instant Redis stores it (by the namespace's clock).
    After(Duration),
}

impl RunAt {
    /// Run-at instants are below this many ms since the Unix epoch (2^52, in the year
    /// 144 683), and delays below this many ms: what a Redis score (a double) holds exactly.
    /// Beyond it, [`Error::InvalidRunAt`].
    pub const MAX_MS: u64 = 1 << 52;

    /// (`a`|`d`, ms): an absolute instant or a delay.
    pub(crate) fn encode(self) -> Result<(&'static str, u64), Error> {
        let (mode, ms) = match self {
            RunAt::At(t) => {
                let d = t
                    .duration_since(UNIX_EPOCH)
                    .map_err(|_| Error::InvalidRunAt)?;
                ("a", ceil_ms(d).ok_or(Error::InvalidRunAt)?)
            }
            RunAt::AtMillis(ms) => ("a", ms),
            RunAt::After(d) => ("d", ceil_ms(d).ok_or(Error::InvalidRunAt)?),
        };
        if ms >= RunAt::MAX_MS {
            return Err(Error::InvalidRunAt);
        }
        Ok((mode, ms))
    }
}

/// `d` in whole milliseconds, rounded up (so never early); `None` past `u64::MAX` ms.
pub(crate) fn ceil_ms(d: Duration) -> Option<u64> {
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
    u64::try_from(ms).ok()
}

/// One task of a bulk [`Producer::schedule_many`](crate::Producer::schedule_many) (or
/// [`Producer::schedule_once_many`](crate::Producer::schedule_once_many)).
#[derive(Clone, Copy, Debug)]
pub struct Task<'a> {
    /// The task's id; `schedule_many` replaces a task with the same id, `schedule_once_many`
    /// stores nothing then.
    pub id: &'a str,
    /// When it runs.
    pub run_at: RunAt,
    /// The bytes handed to the handler.
    pub payload: &'a [u8],
    /// `Some` for a recurring task, stored as
    /// [`Producer::schedule_recurring`](crate::Producer::schedule_recurring) stores it (`run_at` is
    /// then its first run); `None` for a one-shot task.
    pub recurrence: Option<&'a Recurrence>,
    /// `Some` for a task that fails by a policy of its own, stored with it; `None` follows the
    /// namespace's ([`Config::retry`](crate::Config::retry), as the worker that delivers it has
    /// it).
    pub retry: Option<RetryPolicy>,
}

impl<'a> Task<'a> {
    /// A one-shot task (the struct literal works as well).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tickwheel_redis::{Recurrence, RunAt, Task};
    /// let once = Task::new("remind-7", RunAt::After(Duration::from_secs(60)), b"remind");
    /// let every = Recurrence::Every(Duration::from_secs(60));
    /// let ticking = Task::new("tick", RunAt::AtMillis(1_800_000_000_000), b"").recurring(&every);
    /// assert!(once.recurrence.is_none() && ticking.recurrence.is_some());
    /// ```
    pub fn new(id: &'a str, run_at: RunAt, payload: &'a [u8]) -> Task<'a> {
        Task {
            id,
            run_at,
            payload,
            recurrence: None,
            retry: None,
        }
    }

    /// The same task, recurring as `recurrence` says (`run_at` is then its first run).
    pub fn recurring(self, recurrence: &'a Recurrence) -> Task<'a> {
        Task {
            recurrence: Some(recurrence),
            ..self
        }
    }

    /// The same task, retried by `policy` instead of the namespace's
    /// [`Config::retry`](crate::Config::retry).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tickwheel_redis::{RetryPolicy, RunAt, Task};
    /// let charge = Task::new("charge-9", RunAt::After(Duration::ZERO), b"9")
    ///     .retry(RetryPolicy::fixed(3, Duration::from_secs(10)));
    /// assert_eq!(charge.retry.unwrap().max_attempts, 3);
    /// ```
    pub fn retry(self, policy: RetryPolicy) -> Task<'a> {
        Task {
            retry: Some(policy),
            ..self
        }
    }
}

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// No such task: never scheduled, cancelled, or acknowledged.
    Unknown,
    /// Waiting for its run-at instant.
    Pending {
        /// Run-at, ms since the Unix epoch.
        run_at_ms: u64,
        /// Deliveries so far (non-zero after a retry or a lease takeover).
        attempts: u32,
        /// The task's version (changes with every schedule and reschedule).
        version: u64,
    },
    /// Delivered and not yet acknowledged.
    InFlight {
        /// The run-at it was delivered for, ms since the Unix epoch.
        due_ms: u64,
        /// The attempt being delivered (1 for the first delivery).
        attempt: u32,
        /// The task's version.
        version: u64,
        /// When it becomes deliverable again if not acknowledged, ms since the Unix epoch.
        visible_at_ms: u64,
    },
    /// In the failed set: its attempts failed ([`FailReason::Exhausted`]) or one failed
    /// for good ([`FailReason::NonRetryable`]). Kept with its payload and errors until an
    /// operator retries or discards it, or the retention bound removes it
    /// ([`Config::failed_retention`](crate::Config::failed_retention)). Reported only when no
    /// live task has the id (a recurring series goes on after a failed run, under the same
    /// id): [`Inspector::show`](crate::Inspector::show) reads both.
    Failed {
        /// When it failed, ms since the Unix epoch.
        failed_at_ms: u64,
        /// Deliveries of the attempt that failed (see
        /// [`Delivery::attempt`](crate::Delivery::attempt)).
        attempts: u32,
        /// The task's version.
        version: u64,
        /// Why it failed.
        reason: FailReason,
    },
}
