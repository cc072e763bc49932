//! When a task runs and where it is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::failure::FailReason;

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
