//! [`Heap`]: an indexed 4-ary min-heap of timers (Boost.Asio's `timer_queue`, libevent's
//! `min_heap`), the comparison point for the wheels.
//!
//! # Implementation
//!
//! The heap is a `Vec` of small nodes `(deadline, seq, index)` ordered by `(deadline, seq)`,
//! where `deadline` is the effective deadline and `seq` a per-queue insertion counter that
//! every insert and every reset takes afresh. Ordering by that pair *is* the contract's firing
//! order, so the root is always the next timer to fire and
//! [`next_expiration`](TimerQueue::next_expiration) is exact.
//!
//! The timer values live in the shared slab; each occupied slab entry's link holds the heap
//! position of its node, so
//! [`remove`](TimerQueue::remove) and [`reset`](TimerQueue::reset) find their node in O(1) and
//! restore the heap in O(log n). Four children a node halve the depth of a binary heap and keep
//! the children of a node in one or two cache lines (the usual d-ary heap trade: a few more
//! comparisons going down, fewer cache misses).
//!
//! # Invariants
//!
//! * `nodes[p]` is never ordered after any of its children `nodes[4p+1..=4p+4]`;
//! * for every node at position `p`, the slab entry `nodes[p].index` is occupied and its link
//!   is `p`; `nodes.len() == slab.len()`;
//! * every node's deadline is `>= now`: effective deadlines are at least `now` when inserted,
//!   and `now` only moves up to the deadline of the node it pops or to a tick before the root.

use core::fmt;

use super::slab::Slab;
use super::{TimerKey, TimerQueue};
use alloc::vec::Vec;

/// Children per node.
const ARITY: usize = 4;

/// A heap node: what the sift loops compare and move. 24 bytes.
#[derive(Clone, Copy)]
struct Node {
    /// Effective deadline.
    deadline: u64,
    /// Insertion order; unique within a queue.
    seq: u64,
    /// Slab index of the timer.
    index: u32,
}

impl Node {
    /// The firing order as one integer: a single wide comparison, no branch on the tie.
    #[inline(always)]
    fn order(&self) -> u128 {
        (u128::from(self.deadline) << 64) | u128::from(self.seq)
    }
}

/// The slab link: the node's position in the heap.
#[derive(Clone, Copy)]
struct HeapPos(u32);

/// An indexed 4-ary min-heap of timers: O(log n) insert, remove, reset and expiry, exact
/// [`next_expiration`](TimerQueue::next_expiration).
///
/// It keeps the [`TimerQueue`] contract exactly like the wheels do; choose it when timers are
/// few, or when deadlines are spread so widely and sparsely that a wheel's slots would mostly
/// be empty.
///
/// ```
/// use tickwheel::{Heap, TimerQueue};
///
/// let mut heap = Heap::with_start(100);
/// let late = heap.insert(500, "late");
/// heap.insert(150, "soon");
/// heap.insert(20, "overdue"); // in the past: effective deadline is now, 100
/// assert_eq!(heap.next_expiration(), Some(100));
/// assert!(heap.reset(late, 120));
///
/// let order: Vec<_> = heap.drain_expired(200).map(|(_, v)| v).collect();
/// assert_eq!(order, ["overdue", "late", "soon"]);
/// assert_eq!(heap.now(), 200);
/// ```
pub struct Heap<T> {
    nodes: Vec<Node>,
    slab: Slab<HeapPos, T>,
    now: u64,
    /// The `seq` the next insert or reset takes.
    next_seq: u64,
}

impl<T> Heap<T> {
    /// An empty heap at tick 0.
    pub const fn new() -> Self {
        Heap::with_start(0)
    }

    /// An empty heap at tick 0 with room for `capacity` timers before it allocates.
    ///
    /// ```
    /// use tickwheel::{Heap, TimerQueue};
    ///
    /// let mut heap = Heap::with_capacity(1_000);
    /// heap.insert(5, ());
    /// assert_eq!(heap.len(), 1);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        Heap {
            nodes: Vec::with_capacity(capacity),
            slab: Slab::with_capacity(capacity),
            ..Heap::new()
        }
    }

    /// How many timers the slab holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// An empty heap whose clock starts at tick `start` ([`now()`](TimerQueue::now)` == start`).
    ///
    /// ```
    /// use tickwheel::{Heap, TimerQueue};
    ///
    /// let mut heap = Heap::with_start(1_000);
    /// let key = heap.insert(10, "past");
    /// assert_eq!(heap.deadline(key), Some(1_000));
    /// ```
    pub const fn with_start(start: u64) -> Self {
        Heap {
            nodes: Vec::new(),
            slab: Slab::new(),
            now: start,
            next_seq: 0,
        }
    }

    /// Takes the next insertion sequence number.
    #[inline]
    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        // 2^64 inserts take centuries at any realistic rate; wrapping keeps it panic-free.
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    /// Writes `node` at `pos` and records the position in its slab link.
    #[inline(always)]
    fn place(&mut self, pos: usize, node: Node) {
        self.nodes[pos] = node;
        // Positions are < nodes.len() <= slab.len() < u32::MAX.
        self.slab.link_mut(node.index).0 = pos as u32;
    }

    /// Moves the hole at `pos` up until `node` fits, then fills it.
    #[inline]
    fn sift_up(&mut self, mut pos: usize, node: Node) {
        let order = node.order();
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let up = self.nodes[parent];
            if up.order() <= order {
                break;
            }
            self.place(pos, up);
            pos = parent;
        }
        self.place(pos, node);
    }

    /// Moves the hole at `pos` down until `node` fits, then fills it.
    #[inline]
    fn sift_down(&mut self, mut pos: usize, node: Node) {
        let order = node.order();
        let len = self.nodes.len();
        loop {
            let first = pos.saturating_mul(ARITY).saturating_add(1);
            if first >= len {
                break;
            }
            let end = len.min(first + ARITY);
            let mut best = first;
            let mut best_order = self.nodes[first].order();
            for child in first + 1..end {
                let child_order = self.nodes[child].order();
                if child_order < best_order {
                    best = child;
                    best_order = child_order;
                }
            }
            if order <= best_order {
                break;
            }
            self.place(pos, self.nodes[best]);
            pos = best;
        }
        self.place(pos, node);
    }

    /// Puts `node` at `pos` (whose old node is gone) and restores the heap around it.
    #[inline]
    fn fix(&mut self, pos: usize, node: Node) {
        if pos > 0 && node.order() < self.nodes[(pos - 1) / ARITY].order() {
            self.sift_up(pos, node);
        } else {
            self.sift_down(pos, node);
        }
    }

    /// Takes the node at `pos` out of the heap (its slab entry is left alone).
    fn remove_node(&mut self, pos: usize) {
        let Some(last) = self.nodes.pop() else {
            return;
        };
        if pos < self.nodes.len() {
            self.fix(pos, last);
        }
    }
}

impl<T> TimerQueue<T> for Heap<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let seq = self.take_seq();
        let pos = self.nodes.len();
        let (index, key) = self.slab.insert(HeapPos(pos as u32), value);
        let node = Node {
            deadline: deadline.max(self.now),
            seq,
            index,
        };
        self.nodes.push(node);
        self.sift_up(pos, node);
        key
    }

    fn remove(&mut self, key: TimerKey) -> Option<T> {
        let index = self.slab.find(key)?;
        let pos = self.slab.link(index).0 as usize;
        self.remove_node(pos);
        self.slab.remove(index)
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(index) = self.slab.find(key) else {
            return false;
        };
        let pos = self.slab.link(index).0 as usize;
        let node = Node {
            deadline: deadline.max(self.now),
            seq: self.take_seq(),
            index,
        };
        self.fix(pos, node);
        true
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        let index = self.slab.find(key)?;
        Some(self.nodes[self.slab.link(index).0 as usize].deadline)
    }

    #[inline]
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.slab.get_mut(key)
    }

    #[inline]
    fn len(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now
    }

    #[inline]
    fn next_expiration(&self) -> Option<u64> {
        self.nodes.first().map(|root| root.deadline)
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if now < self.now {
            return None;
        }
        match self.nodes.first() {
            Some(root) if root.deadline <= now => {
                let (index, deadline) = (root.index, root.deadline);
                self.now = deadline;
                let key = self.slab.key(index);
                self.remove_node(0);
                self.slab.remove(index).map(|value| (key, value))
            }
            _ => {
                self.now = now;
                None
            }
        }
    }

    fn shrink_to_fit(&mut self) {
        // The slab keeps live entries where they are, so heap nodes need no fixing.
        self.slab.shrink_to_fit();
        self.nodes.shrink_to_fit();
    }
}

impl<T> Default for Heap<T> {
    fn default() -> Self {
        Heap::new()
    }
}

impl<T> fmt::Debug for Heap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heap")
            .field("len", &self.nodes.len())
            .field("now", &self.now)
            .field("next_expiration", &self.next_expiration())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every invariant in the module header.
    fn check<T>(heap: &Heap<T>) {
        assert_eq!(heap.nodes.len(), heap.slab.len());
        for (pos, node) in heap.nodes.iter().enumerate() {
            assert_eq!(heap.slab.link(node.index).0 as usize, pos);
            assert!(node.deadline >= heap.now);
            if pos > 0 {
                assert!(heap.nodes[(pos - 1) / ARITY].order() < node.order());
            }
        }
    }

    #[test]
    fn invariants_hold_through_mixed_operations() {
        let mut heap = Heap::new();
        let mut keys = Vec::new();
        let mut x = 7u64;
        for round in 0..2_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let deadline = heap.now() + (x >> 54);
            match round % 5 {
                0 | 1 => keys.push(heap.insert(deadline, round)),
                2 => {
                    let key = keys[(x as usize >> 8) % keys.len()];
                    heap.reset(key, deadline);
                }
                3 => {
                    let key = keys.swap_remove((x as usize >> 8) % keys.len());
                    heap.remove(key);
                }
                _ => while heap.poll_expired(heap.now() + 3).is_some() {},
            }
            check(&heap);
        }
    }

    #[test]
    fn node_is_24_bytes() {
        assert_eq!(core::mem::size_of::<Node>(), 24);
    }
}
