//! When a task runs and where it is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;

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
    /// (`a`|`d`, ms): an absolute instant or a delay.
    pub(crate) fn encode(self) -> Result<(&'static str, u64), Error> {
        const MAX: u64 = 1 << 52; // exact in a Redis score (a double)
        let (mode, ms) = match self {
            RunAt::At(t) => {
                let d = t
                    .duration_since(UNIX_EPOCH)
                    .map_err(|_| Error::InvalidRunAt)?;
                let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
                ("a", u64::try_from(ms).map_err(|_| Error::InvalidRunAt)?)
            }
            RunAt::AtMillis(ms) => ("a", ms),
            RunAt::After(d) => {
                let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
                ("d", u64::try_from(ms).map_err(|_| Error::InvalidRunAt)?)
            }
        };
        if ms >= MAX {
            return Err(Error::InvalidRunAt);
        }
        Ok((mode, ms))
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
}
