//! [`MissedTickBehavior`]: the policy of a periodic timer for the ticks it falls behind on,
//! shared by the futures' `Interval` (layer 4) and the service's recurring series (layer 3).

use std::time::{Duration, Instant};

/// What a periodic timer does when it falls behind: an
/// [`Interval`](crate::future::Interval#ticks-and-missed-ticks) or a recurring series
/// ([`Recurrence`](crate::service::Recurrence#rules)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissedTickBehavior {
    /// Complete the missed ticks at once until caught up (the default, as in tokio).
    #[default]
    Burst,
    /// Schedule the next tick one period after the late one.
    Delay,
    /// Skip to the next tick of the original schedule that is still ahead.
    Skip,
}

impl MissedTickBehavior {
    /// The next deadline after the tick scheduled at `scheduled`, yielded at `now`, when a
    /// tick was missed (`now >= scheduled + period`). `None`: not representable, never.
    pub(crate) fn next(
        self,
        scheduled: Instant,
        now: Instant,
        period: Duration,
    ) -> Option<Instant> {
        match self {
            MissedTickBehavior::Burst => scheduled.checked_add(period),
            MissedTickBehavior::Delay => now.checked_add(period),
            MissedTickBehavior::Skip => {
                let behind = now.saturating_duration_since(scheduled).as_nanos();
                // `period` is at least 1 ns, so the remainder fits below `period`.
                let rem = behind % period.as_nanos().max(1);
                let rem = Duration::from_nanos(u64::try_from(rem).unwrap_or(u64::MAX));
                now.checked_add(period.saturating_sub(rem))
            }
        }
    }
}
