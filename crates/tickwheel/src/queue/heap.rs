//! [`Heap`]: an indexed 4-ary min-heap of timers laid out as libev's `ANHE` 4-heap, the
//! comparison point for the wheels.
//!
//! # Implementation
//!
//! The heap is an array of 16-byte nodes `(deadline, seq, index)` ordered by
//! `(deadline, seq)`, where `deadline` is the effective deadline and `seq` an insertion
//! counter that every insert and every reset takes afresh. Ordering by that pair *is* the
//! contract's firing order, so the root is always the next timer to fire and
//! [`next_expiration`](TimerQueue::next_expiration) is exact. The sift loops compare and move
//! nodes without ever reading a timer's slab entry: the deadline is cached beside the index
//! in the heap array, as libev's `ANHE` caches `at` beside the watcher pointer.
//!
//! The array is a vector of 64-byte-aligned cache lines of four nodes, and the root sits in
//! the last lane of line 0 (libev's `HEAP0 = 3`): node `p`'s four children `4p+1..=4p+4` then
//! fill line `p + 1` exactly, so a step down the heap reads one cache line and compares all
//! four children without a bounds check. Lanes past the last node hold a sentinel ordered
//! after every timer.
//!
//! `seq` is 32 bits so that a node fits 16 bytes. When it would run out, the heap renumbers its
//! nodes in firing order (a sorted array is a valid heap), once per 2^32 inserts and resets:
//! amortized nothing.
//!
//! The timer values live in the shared slab; each occupied slab entry's link holds the heap
//! position of its node, so [`remove`](TimerQueue::remove) and [`reset`](TimerQueue::reset)
//! find their node in O(1) and restore the heap in O(log n), touching the timer's entry, the
//! node's line, and one line a level plus the entry of each node they move.
//!
//! # Invariants
//!
//! * node `p` is never ordered after any of its children `4p+1..=4p+4`;
//! * for every node at position `p < len`, the slab entry `nodes[p].index` is occupied and its
//!   link is `p`; `len == slab.len()`; every lane from position `len` on is the sentinel, and
//!   the lines hold positions `0..len` and no more than one partial line;
//! * every node's `seq` is below `u32::MAX` (the sentinel's), and distinct;
//! * every node's deadline is `>= now`: effective deadlines are at least `now` when inserted,
//!   and `now` only moves up to the deadline of the node it pops or to a tick before the root.
//!
//! # Costs
//!
//! O(log₄ n) a operation. Memory a pending timer: a 16-byte node plus a slab entry (4-byte
//! position, 4-byte generation and the value as `Option<T>`), plus up to three sentinels in
//! the last line. A freed timer's entry stays in the slab for reuse until
//! [`shrink_to_fit`](TimerQueue::shrink_to_fit).

use alloc::vec::Vec;
use core::fmt;

use super::slab::{Slab, NIL};
use super::{TimerKey, TimerQueue};

/// Children per node.
const ARITY: usize = 4;

/// Lanes of line 0 before the root: position `p` is lane `p + OFFSET` of the array.
const OFFSET: usize = ARITY - 1;

/// A heap node: what the sift loops compare and move. 16 bytes.
///
/// The effective deadline and `seq` are stored as the two halves of one 96-bit number, the
/// firing order, split so that [`order`](Node::order) is a register pair and not a shift.
#[derive(Clone, Copy)]
struct Node {
    /// The deadline's low 32 bits above `seq` (unique within a queue, below `u32::MAX`).
    lo: u64,
    /// The deadline's high 32 bits.
    hi: u32,
    /// Slab index of the timer.
    index: u32,
}

impl Node {
    /// Fills the lanes past the last node; ordered after every real node.
    const SENTINEL: Node = Node::new(u64::MAX, u32::MAX, NIL);

    #[inline(always)]
    const fn new(deadline: u64, seq: u32, index: u32) -> Node {
        Node {
            lo: (deadline << 32) | seq as u64,
            hi: (deadline >> 32) as u32,
            index,
        }
    }

    /// Effective deadline.
    #[inline(always)]
    fn deadline(&self) -> u64 {
        (u64::from(self.hi) << 32) | (self.lo >> 32)
    }

    /// Insertion order.
    #[cfg(test)]
    fn seq(&self) -> u32 {
        self.lo as u32
    }

    /// The firing order `(deadline, seq)` as one integer: a single wide comparison, no branch
    /// on the tie.
    #[inline(always)]
    fn order(&self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }
}

/// One cache line of the array: the four children of one node.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([Node; ARITY]);

impl Line {
    const EMPTY: Line = Line([Node::SENTINEL; ARITY]);
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
    /// Position `p` is lane `(p + OFFSET) % ARITY` of line `(p + OFFSET) / ARITY`.
    lines: Vec<Line>,
    /// Nodes in the heap.
    len: usize,
    slab: Slab<HeapPos, T>,
    now: u64,
    /// The `seq` the next insert or reset takes.
    next_seq: u32,
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
            lines: Vec::with_capacity(lines_for(capacity)),
            slab: Slab::with_capacity(capacity),
            ..Heap::new()
        }
    }

    /// How many timers the slab holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Bytes of memory the heap holds (its own struct excluded): node lines and slab, at
    /// their capacity. [`shrink_to_fit`](TimerQueue::shrink_to_fit) gives back what pending
    /// timers do not need.
    pub fn allocated_bytes(&self) -> usize {
        self.lines.capacity() * core::mem::size_of::<Line>() + self.slab.allocated_bytes()
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
            lines: Vec::new(),
            len: 0,
            slab: Slab::new(),
            now: start,
            next_seq: 0,
        }
    }

    /// The node at position `pos` (`pos < len`, or a sentinel lane of the last line).
    #[inline(always)]
    fn node(&self, pos: usize) -> Node {
        let lane = pos + OFFSET;
        self.lines[lane / ARITY].0[lane % ARITY]
    }

    /// Writes `node` into the lane of position `pos`.
    #[inline(always)]
    fn set(&mut self, pos: usize, node: Node) {
        let lane = pos + OFFSET;
        self.lines[lane / ARITY].0[lane % ARITY] = node;
    }

    /// Takes the next insertion sequence number, renumbering first when they run out.
    #[inline]
    fn take_seq(&mut self) -> u32 {
        if self.next_seq == u32::MAX - 1 {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Gives the nodes the sequence numbers `0..len` in firing order and lays them out sorted
    /// (a valid heap), so that `seq` starts over without changing any order.
    #[cold]
    #[inline(never)]
    fn renumber(&mut self) {
        let mut nodes: Vec<Node> = (0..self.len).map(|pos| self.node(pos)).collect();
        nodes.sort_unstable_by_key(Node::order);
        for (pos, node) in nodes.into_iter().enumerate() {
            // `len <= slab.len() < u32::MAX - 1`.
            self.place(pos, Node::new(node.deadline(), pos as u32, node.index));
        }
        self.next_seq = self.len as u32;
    }

    /// Writes `node` at `pos` and records the position in its slab link.
    #[inline(always)]
    fn place(&mut self, pos: usize, node: Node) {
        self.set(pos, node);
        // Positions are < len == slab.len() < u32::MAX.
        self.slab.link_mut(node.index).0 = pos as u32;
    }

    /// Moves the hole at `pos` up until `node` fits, then fills it.
    #[inline(always)]
    fn sift_up(&mut self, pos: usize, node: Node) {
        let order = node.order();
        // Split borrows: the slab writes below cannot move the lines.
        let (lines, slab) = (&mut self.lines[..], &mut self.slab);
        // In lanes: the parent of lane `l` (position `l - 3`) is lane `l / 4 + 2`.
        let mut lane = pos + OFFSET;
        while lane > OFFSET {
            let parent = lane / ARITY + OFFSET - 1;
            let up = lines[parent / ARITY].0[parent % ARITY];
            if up.order() <= order {
                break;
            }
            lines[lane / ARITY].0[lane % ARITY] = up;
            slab.link_mut(up.index).0 = (lane - OFFSET) as u32;
            lane = parent;
        }
        lines[lane / ARITY].0[lane % ARITY] = node;
        slab.link_mut(node.index).0 = (lane - OFFSET) as u32;
    }

    /// Moves the hole at `pos` down until `node` fits, then fills it.
    #[inline(always)]
    fn sift_down(&mut self, mut pos: usize, node: Node) {
        let order = node.order();
        let (lines, slab) = (&mut self.lines[..], &mut self.slab);
        // Node `pos`'s children are the whole of line `pos + 1`; sentinels pad the last one.
        while let Some(&Line(children)) = lines.get(pos + 1) {
            let [a, b, c, d] = children.map(|child| child.order());
            // A tournament: two independent comparisons, then one.
            let (left, left_order) = if b < a { (1, b) } else { (0, a) };
            let (right, right_order) = if d < c { (3, d) } else { (2, c) };
            let (best, best_order) = if right_order < left_order {
                (right, right_order)
            } else {
                (left, left_order)
            };
            if order <= best_order {
                break;
            }
            // `best_order < order < the sentinel's`: a real node.
            let child = children[best];
            let lane = pos + OFFSET;
            lines[lane / ARITY].0[lane % ARITY] = child;
            slab.link_mut(child.index).0 = pos as u32;
            pos = ARITY * pos + 1 + best;
        }
        let lane = pos + OFFSET;
        lines[lane / ARITY].0[lane % ARITY] = node;
        slab.link_mut(node.index).0 = pos as u32;
    }

    /// Puts `node` at `pos` (whose old node is gone) and restores the heap around it.
    #[inline(always)]
    fn fix(&mut self, pos: usize, node: Node) {
        if pos > 0 && node.order() < self.node((pos - 1) / ARITY).order() {
            self.sift_up(pos, node);
        } else {
            self.sift_down(pos, node);
        }
    }

    /// Takes the node at `pos` out of the heap (its slab entry is left alone).
    #[inline(always)]
    fn remove_node(&mut self, pos: usize) {
        if self.len == 0 {
            return;
        }
        self.len -= 1;
        let last = self.node(self.len);
        self.set(self.len, Node::SENTINEL);
        if (self.len + OFFSET) % ARITY == 0 {
            // The last line is all sentinels now.
            self.lines.pop();
        }
        if pos < self.len {
            self.fix(pos, last);
        }
    }
}

/// Lines that hold `len` nodes.
#[inline]
fn lines_for(len: usize) -> usize {
    (len + OFFSET).div_ceil(ARITY)
}

impl<T> TimerQueue<T> for Heap<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let seq = self.take_seq();
        let pos = self.len;
        let (index, key) = self.slab.insert(HeapPos(pos as u32), value);
        let node = Node::new(deadline.max(self.now), seq, index);
        if (pos + OFFSET) / ARITY == self.lines.len() {
            self.lines.push(Line::EMPTY);
        }
        self.len += 1;
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
        let seq = self.take_seq();
        // After `take_seq`: a renumbering moves nodes.
        let pos = self.slab.link(index).0 as usize;
        let node = Node::new(deadline.max(self.now), seq, index);
        self.fix(pos, node);
        true
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        let index = self.slab.find(key)?;
        Some(self.node(self.slab.link(index).0 as usize).deadline())
    }

    fn clear(&mut self) {
        let mut from = 0;
        while let Some(key) = self.slab.next_live(&mut from) {
            self.remove(key);
        }
    }

    #[inline]
    fn get(&self, key: TimerKey) -> Option<&T> {
        self.slab.get(key)
    }

    #[inline]
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.slab.get_mut(key)
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now
    }

    #[inline]
    fn next_expiration(&self) -> Option<u64> {
        (self.len > 0).then(|| self.node(0).deadline())
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if now < self.now {
            return None;
        }
        let root = (self.len > 0).then(|| self.node(0));
        match root {
            Some(root) if root.deadline() <= now => {
                self.now = root.deadline();
                let key = self.slab.key(root.index);
                self.remove_node(0);
                self.slab.remove(root.index).map(|value| (key, value))
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
        self.lines.shrink_to_fit();
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
            .field("len", &self.len)
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
        assert_eq!(heap.len, heap.slab.len());
        // A new heap has no line yet; an emptied one keeps line 0.
        assert!(heap.lines.len() == lines_for(heap.len) || heap.len == 0 && heap.lines.is_empty());
        let mut seqs = alloc::collections::BTreeSet::new();
        for pos in 0..heap.len {
            let node = heap.node(pos);
            assert_eq!(heap.slab.link(node.index).0 as usize, pos);
            assert!(node.deadline() >= heap.now);
            assert!(node.seq() < u32::MAX && node.seq() < heap.next_seq);
            assert!(seqs.insert(node.seq()), "seq {} twice", node.seq());
            if pos > 0 {
                assert!(heap.node((pos - 1) / ARITY).order() < node.order());
            }
        }
        for lane in heap.len + OFFSET..heap.lines.len() * ARITY {
            let node = heap.lines[lane / ARITY].0[lane % ARITY];
            assert_eq!(node.order(), Node::SENTINEL.order(), "lane {lane}");
        }
    }

    /// Inserts, resets, removes and polls on a seeded mix, checking after each step.
    fn churn(heap: &mut Heap<u64>, rounds: u64) {
        let mut keys = Vec::new();
        let mut x = 7u64;
        for round in 0..rounds {
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
            check(heap);
        }
    }

    #[test]
    fn invariants_hold_through_mixed_operations() {
        churn(&mut Heap::new(), 2_000);
    }

    #[test]
    fn running_out_of_seq_renumbers_in_firing_order() {
        let mut heap = Heap::new();
        let keys: Vec<_> = (0..40u64).map(|i| heap.insert(i % 7, i)).collect();
        heap.next_seq = u32::MAX - 3;
        // Resets and inserts across the renumbering keep the (deadline, insertion) order.
        assert!(heap.reset(keys[0], 3));
        heap.insert(3, 100);
        heap.insert(3, 101);
        assert!(heap.next_seq < 100, "renumbered");
        check(&heap);
        let fired: Vec<u64> = heap.drain_expired(3).map(|(_, v)| v).collect();
        let mut expected: Vec<(u64, u64)> = (1..40u64).map(|i| (i % 7, i)).collect();
        expected.extend([(3, 0), (3, 100), (3, 101)]);
        expected.sort_by_key(|&(deadline, _)| deadline); // stable: insertion order kept
        let expected: Vec<u64> = expected
            .into_iter()
            .filter(|&(d, _)| d <= 3)
            .map(|(_, v)| v)
            .collect();
        assert_eq!(fired, expected);
        // And again over a long stretch near the limit.
        heap.next_seq = u32::MAX - 700;
        churn(&mut heap, 2_000);
    }

    #[test]
    fn node_is_16_bytes_and_a_line_is_64() {
        assert_eq!(core::mem::size_of::<Node>(), 16);
        assert_eq!(core::mem::size_of::<Line>(), 64);
        assert_eq!(core::mem::align_of::<Line>(), 64);
    }
}
