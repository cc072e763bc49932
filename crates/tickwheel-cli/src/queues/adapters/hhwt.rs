//! Peer: `hierarchical_hash_wheel_timer`'s cancellable `QuadWheelWithOverflow` (four byte
//! levels plus an overflow list; Kompact's timer).
//!
//! Its API is relative: entries carry a delay from the wheel's current tick, `tick()` moves
//! one tick and returns what expired, `cancel(id)` drops the entry from a hash map (the wheel
//! slot is cleaned lazily). We track the current tick to turn deadlines into delays. A reset
//! is cancel + insert under the same id (the crate has no reset). A zero delay is refused by
//! the crate (`Expired`); we keep such timers aside and report them at the next tick, so no
//! timer is lost.

use super::VirtualTimeQueue;
use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use hierarchical_hash_wheel_timer::{IdOnlyTimerEntry, TimerError};
use std::time::Duration;

/// The cancellable quad wheel holding timer ids.
pub struct HierarchicalHashWheel {
    wheel: QuadWheelWithOverflow<IdOnlyTimerEntry<u32>>,
    now: u64,
    due_now: Vec<u32>,
}

impl std::fmt::Debug for HierarchicalHashWheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HierarchicalHashWheel")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl Default for HierarchicalHashWheel {
    fn default() -> Self {
        HierarchicalHashWheel {
            wheel: QuadWheelWithOverflow::new(),
            now: 0,
            due_now: Vec::new(),
        }
    }
}

impl VirtualTimeQueue for HierarchicalHashWheel {
    type Handle = u32;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> u32 {
        let delay = Duration::from_millis(deadline.saturating_sub(self.now));
        if let Err(TimerError::Expired(_)) = self.wheel.insert(IdOnlyTimerEntry { id, delay }) {
            self.due_now.push(id);
        }
        id
    }

    #[inline]
    fn cancel(&mut self, id: u32) -> bool {
        self.wheel.cancel(&id).is_ok()
    }

    #[inline]
    fn reset(&mut self, id: u32, _: u32, deadline: u64) -> u32 {
        let _ = self.wheel.cancel(&id);
        self.insert(id, deadline)
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        fired.extend(self.due_now.drain(..).map(|id| (id, now)));
        while self.now < now {
            self.now += 1;
            fired.extend(self.wheel.tick().into_iter().map(|e| (e.id, now)));
        }
    }
}
