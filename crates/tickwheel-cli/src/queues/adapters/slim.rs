//! Adapter for `tickwheel::SlimWheel`: the `Wheel`'s levels over 8-byte records. Handles are
//! [`TimerKey`]s; a reset returns the timer's new key, and a cancel uses
//! [`SlimWheel::cancel`], which does not read the (`u32`) value back.

use super::VirtualTimeQueue;
use tickwheel::{SlimWheel, TimerKey};

/// A `SlimWheel` holding timer ids.
#[derive(Debug, Default)]
pub struct SlimQueue(pub SlimWheel<u32>);

impl VirtualTimeQueue for SlimQueue {
    type Handle = TimerKey;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> TimerKey {
        self.0.insert(deadline, id)
    }

    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.cancel(key)
    }

    #[inline]
    fn reset(&mut self, key: TimerKey, id: u32, deadline: u64) -> TimerKey {
        // A stale handle is a bug of the runner: insert anew, as the lazy peers do.
        self.0
            .reset(key, deadline)
            .unwrap_or_else(|| self.0.insert(deadline, id))
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((_, id)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}
