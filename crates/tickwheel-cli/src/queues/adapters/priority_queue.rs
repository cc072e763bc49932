//! Peer: the `priority-queue` crate's `PriorityQueue`, an indexed binary heap (a hash map
//! from item to heap position), the crate Rust users pick when they need to remove or
//! re-prioritise arbitrary entries.
//!
//! Items are timer ids, priorities `Reverse(deadline)` (the crate's heap is a max-heap).
//! Cancel is `remove` and reset is `change_priority`, both a real O(log n) sift, so no
//! garbage is ever left behind. The hasher is rustc-hash's `FxBuildHasher`, the fast choice
//! for integer keys (the default SipHash would cost this peer ~2x on every operation).

use super::VirtualTimeQueue;
use priority_queue::PriorityQueue;
use rustc_hash::FxBuildHasher;
use std::cmp::Reverse;

/// An indexed heap of timer ids by deadline.
pub struct IndexedPriorityQueue {
    queue: PriorityQueue<u32, Reverse<u64>, FxBuildHasher>,
}

impl std::fmt::Debug for IndexedPriorityQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedPriorityQueue")
            .field("len", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Default for IndexedPriorityQueue {
    fn default() -> Self {
        IndexedPriorityQueue {
            queue: PriorityQueue::with_default_hasher(),
        }
    }
}

impl VirtualTimeQueue for IndexedPriorityQueue {
    type Handle = u32;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> u32 {
        self.queue.push(id, Reverse(deadline));
        id
    }

    #[inline]
    fn cancel(&mut self, id: u32) -> bool {
        self.queue.remove(&id).is_some()
    }

    #[inline]
    fn reset(&mut self, id: u32, _: u32, deadline: u64) -> u32 {
        self.queue.change_priority(&id, Reverse(deadline));
        id
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((_, &Reverse(deadline))) = self.queue.peek() {
            if deadline > now {
                break;
            }
            if let Some((id, _)) = self.queue.pop() {
                fired.push((id, now));
            }
        }
    }
}
