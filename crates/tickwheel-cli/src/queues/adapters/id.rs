//! Adapter for `tickwheel::IdWheel`: the `SlimWheel` named by the caller's ids. The workloads'
//! timer ids are dense (`0..n`, or W5's slot numbers), so they are the wheel's ids as they are,
//! as the lazy `BinaryHeap` is told them: the handle is the id, a reset is by the id the runner
//! passes (not the handle it loads), and a cancel uses [`IdWheel::cancel`], which does not read
//! the (`u32`) value back. The wheel starts empty with no id limit to speak of (`u32::MAX`):
//! its records grow with the ids inserted, inside the measured region, as every other
//! entrant's storage does.

use super::VirtualTimeQueue;
use tickwheel::IdWheel;

/// An `IdWheel` holding timer ids (as every adapter's values are).
#[derive(Debug)]
pub struct IdQueue(pub IdWheel<u32>);

impl Default for IdQueue {
    fn default() -> IdQueue {
        IdQueue(IdWheel::new(u32::MAX))
    }
}

impl VirtualTimeQueue for IdQueue {
    type Handle = u32;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> u32 {
        // An insert on a pending id would replace it; the runners insert only idle ids.
        let replaced = self.0.insert(id, deadline, id).expect("id below u32::MAX");
        debug_assert!(replaced.is_none(), "timer {id} inserted twice");
        id
    }

    #[inline]
    fn cancel(&mut self, id: u32) -> bool {
        self.0.cancel(id)
    }

    #[inline]
    fn reset(&mut self, _handle: u32, id: u32, deadline: u64) -> u32 {
        // An idle id is a bug of the runner: insert anew, as the lazy peers do.
        if !self.0.reset(id, deadline) {
            self.insert(id, deadline);
        }
        id
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((id, _)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}
