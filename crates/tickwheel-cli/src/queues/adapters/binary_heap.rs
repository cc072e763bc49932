//! Peer: `std::collections::BinaryHeap` with lazy cancellation — the timer queue most Rust
//! code writes by hand.
//!
//! `BinaryHeap` cannot remove an arbitrary element, so each timer id has a generation;
//! cancelling or resetting bumps it, and popped entries whose generation is stale are
//! skipped. Invariant: `generation[id]` is odd while the timer is pending, even otherwise,
//! and exactly one heap entry per pending timer carries the current generation.

use super::VirtualTimeQueue;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A min-heap of `(deadline, sequence, id, generation)` with lazy deletion.
#[derive(Debug, Default)]
pub struct LazyBinaryHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    generation: Vec<u32>,
    sequence: u64,
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
        self.heap
            .push(Reverse((deadline, self.sequence, id, generation)));
        (id, generation)
    }
}

impl VirtualTimeQueue for LazyBinaryHeap {
    type Handle = (u32, u32);

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        self.push(id, deadline)
    }

    #[inline]
    fn cancel(&mut self, (id, generation): (u32, u32)) -> bool {
        let current = &mut self.generation[id as usize];
        if *current != generation {
            return false;
        }
        *current = current.wrapping_add(1);
        true
    }

    #[inline]
    fn reset(&mut self, handle: (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        self.cancel(handle);
        self.push(id, deadline)
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
                fired.push((id, now));
            }
        }
    }
}
