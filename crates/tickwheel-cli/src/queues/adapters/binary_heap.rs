//! Peer: `std::collections::BinaryHeap` with lazy cancellation — the timer queue most Rust
//! code writes by hand, in the version a careful engineer writes.
//!
//! `BinaryHeap` cannot remove an arbitrary element, so each timer id has a generation;
//! cancelling or resetting bumps it, and popped entries whose generation is stale are
//! skipped. Left alone, stale entries pile up under resets and cancels (memory grows with
//! every operation, not with the timers pending), so the heap compacts itself: when its stale
//! entries outnumber the live ones, one `retain` keeps the live ones. That costs O(heap) once
//! per at least as many cancels as there are live timers, so O(1) amortized per cancel, and
//! bounds the heap at twice the live timers.
//!
//! Invariants: `generation[id]` is odd while the timer is pending, even otherwise; exactly one
//! heap entry per pending timer carries the current generation; `live` counts the pending
//! timers, so `heap.len() - live` entries are stale, and after every cancel or reset
//! `heap.len() <= 2 * live` (or the heap is empty).

use super::VirtualTimeQueue;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A min-heap of `(deadline, sequence, id, generation)` with lazy deletion and compaction.
#[derive(Debug, Default)]
pub struct LazyBinaryHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    generation: Vec<u32>,
    sequence: u64,
    live: usize,
}

impl LazyBinaryHeap {
    fn push(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let slot = id as usize;
        if slot >= self.generation.len() {
            self.generation.resize(slot + 1, 0);
        }
        self.generation[slot] = (self.generation[slot] | 1).wrapping_add(2);
        let generation = self.generation[slot];
        self.sequence += 1;
        self.live += 1;
        self.heap
            .push(Reverse((deadline, self.sequence, id, generation)));
        (id, generation)
    }

    /// Marks the timer stale; `true` if it was pending.
    fn forget(&mut self, (id, generation): (u32, u32)) -> bool {
        let current = &mut self.generation[id as usize];
        if *current != generation {
            return false;
        }
        *current = current.wrapping_add(1);
        self.live -= 1;
        true
    }

    /// Drops every stale entry once they outnumber the live ones.
    fn compact_if_mostly_stale(&mut self) {
        if self.heap.len() - self.live > self.live {
            let generation = &self.generation;
            self.heap
                .retain(|&Reverse((_, _, id, g))| generation[id as usize] == g);
            debug_assert_eq!(self.heap.len(), self.live);
        }
    }
}

impl VirtualTimeQueue for LazyBinaryHeap {
    type Handle = (u32, u32);

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        self.push(id, deadline)
    }

    #[inline]
    fn cancel(&mut self, handle: (u32, u32)) -> bool {
        let was_pending = self.forget(handle);
        self.compact_if_mostly_stale();
        was_pending
    }

    #[inline]
    fn reset(&mut self, handle: (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        self.forget(handle);
        let handle = self.push(id, deadline);
        self.compact_if_mostly_stale();
        handle
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some(&Reverse((deadline, _, id, generation))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            let current = &mut self.generation[id as usize];
            if *current == generation {
                *current = current.wrapping_add(1);
                self.live -= 1;
                fired.push((id, now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_never_outnumber_live_ones() {
        let mut q = LazyBinaryHeap::default();
        let mut handles: Vec<_> = (0..100)
            .map(|id| q.insert(id, 1_000 + u64::from(id)))
            .collect();
        for round in 0..50u64 {
            for (id, h) in handles.iter_mut().enumerate() {
                *h = q.reset(*h, id as u32, 2_000 + round);
                assert!(q.heap.len() <= 2 * q.live, "round {round}");
            }
        }
        assert_eq!(q.live, 100);
        for h in handles.drain(..90) {
            assert!(q.cancel(h));
        }
        assert!(q.heap.len() <= 2 * q.live && q.live == 10);
        let mut fired = Vec::new();
        q.advance(10_000, &mut fired);
        let mut ids: Vec<u32> = fired.iter().map(|f| f.0).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (90..100).collect::<Vec<_>>(),
            "the live ones, once each"
        );
        assert_eq!((q.live, q.heap.len()), (0, 0));
    }
}
