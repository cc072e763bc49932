//! Adapter for tickwheel's own queues: any [`TimerQueue<u32>`] (`Wheel`, `HashedWheel`,
//! `Heap`). Handles are [`TimerKey`]s; `reset` keeps the key.

use super::VirtualTimeQueue;
use tickwheel::{TimerKey, TimerQueue};

/// A tickwheel queue holding timer ids.
#[derive(Debug, Default)]
pub struct TickwheelQueue<Q>(pub Q);

impl<Q: TimerQueue<u32>> VirtualTimeQueue for TickwheelQueue<Q> {
    type Handle = TimerKey;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> TimerKey {
        self.0.insert(deadline, id)
    }

    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.remove(key).is_some()
    }

    #[inline]
    fn reset(&mut self, key: TimerKey, _id: u32, deadline: u64) -> TimerKey {
        self.0.reset(key, deadline);
        key
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((_, id)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}
