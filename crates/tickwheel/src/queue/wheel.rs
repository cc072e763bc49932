//! The hierarchical timing wheel: tickwheel's default queue.
//!
//! Varghese & Lauck's scheme 7 ("Hashed and Hierarchical Timing Wheels", 1987), laid out as
//! the Linux kernel's tv1..tv5 and tokio's driver: levels of [`SLOTS`] slots, level `L`
//! resolving bits `6L..6L+6` of the deadline. [`LEVELS`] levels cover the whole `u64` tick
//! range, so no deadline is clamped (libco clamps to one minute), rejected (tokio-util's
//! `DelayQueue` panics past ~2 years) or parked on an overflow list.
//!
//! # Invariants
//!
//! * Every timer in a slot has an effective deadline `d > now`, and sits at level
//!   [`level_for(now, d)`](level_for) — the level of the highest bit where `d` and `now`
//!   differ — in slot [`slot_for(d, level)`](slot_for). So a timer's place is a function of its
//!   deadline and `now`: nothing but the deadline is stored to find it again.
//! * Every timer on the *ready* list has effective deadline `== now`, in firing order.
//! * At level `L` every occupied slot lies strictly after `now`'s own slot, inside `now`'s
//!   level-`L+1` block; so the lowest set bit of the lowest non-empty level's bitmap is the
//!   earliest slot of all, found with one `trailing_zeros` a level.
//!
//! # Expiry
//!
//! `poll_expired(t)` pops the ready list; when it is empty it finds the earliest slot. If the
//! slot starts after `t`, time jumps to `t` (O([`LEVELS`]) however large the gap). Otherwise
//! time moves to the slot's start and the slot is emptied: at level 0 its timers are all due
//! and the list becomes the ready list whole; at a higher level they *cascade* — each is
//! re-linked by the rule above, which puts it on a lower level (or the ready list). Re-linking
//! walks the list in order and appends, and the slots it lands in were empty, so insertion
//! order within a deadline survives every cascade. A timer cascades at most once a level.
//!
//! # Costs
//!
//! Insert, remove and reset are O(1): a few index writes in the slab and a bit in a bitmap.
//! Memory a pending timer: its slab entry (deadline, two `u32` links, generation, value);
//! the wheel itself is `LEVELS * SLOTS` list heads (5.6 KiB), allocated once.

use alloc::boxed::Box;
use core::fmt;

use super::slab::{Link, Slab, NIL};
use super::{TimerKey, TimerQueue};

/// Bits of the deadline resolved by one level.
pub(crate) const LEVEL_BITS: u32 = 6;
/// Slots a level: one per value of its [`LEVEL_BITS`] bits.
pub(crate) const SLOTS: usize = 1 << LEVEL_BITS;
/// Levels needed to cover all 64 bits of a tick.
pub(crate) const LEVELS: usize = u64::BITS.div_ceil(LEVEL_BITS) as usize;
/// Mask of a slot number.
const SLOT_MASK: u64 = SLOTS as u64 - 1;

/// The link of a wheel timer: its effective deadline and its neighbours in its list.
#[derive(Clone, Copy)]
struct Node {
    deadline: u64,
    next: u32,
    prev: u32,
}

impl Link for Node {
    #[inline]
    fn vacant(next_free: u32) -> Node {
        Node {
            deadline: 0,
            next: next_free,
            prev: NIL,
        }
    }

    #[inline]
    fn next_free(&self) -> u32 {
        self.next
    }
}

/// A doubly linked list of slab entries, by index.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    #[inline]
    fn push_back<T>(&mut self, slab: &mut Slab<Node, T>, index: u32) {
        let node = slab.link_mut(index);
        node.next = NIL;
        node.prev = self.tail;
        if self.tail == NIL {
            self.head = index;
        } else {
            slab.link_mut(self.tail).next = index;
        }
        self.tail = index;
    }

    #[inline]
    fn unlink<T>(&mut self, slab: &mut Slab<Node, T>, index: u32) {
        let Node { next, prev, .. } = *slab.link(index);
        if prev == NIL {
            self.head = next;
        } else {
            slab.link_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab.link_mut(next).prev = prev;
        }
    }
}

/// One level: a list per slot and a bitmap of the non-empty ones.
#[derive(Clone, Copy)]
struct Level {
    occupied: u64,
    slots: [List; SLOTS],
}

impl Level {
    const EMPTY: Level = Level {
        occupied: 0,
        slots: [List::EMPTY; SLOTS],
    };
}

/// The level a timer due at `deadline` belongs on while the wheel is at `now`: the level
/// whose bits hold the highest bit where the two differ (0 when they are equal).
#[inline]
pub(crate) fn level_for(now: u64, deadline: u64) -> usize {
    let masked = (now ^ deadline) | SLOT_MASK;
    let significant = u64::BITS - 1 - masked.leading_zeros();
    (significant / LEVEL_BITS) as usize
}

/// The slot of `deadline` at `level`.
#[inline]
pub(crate) fn slot_for(deadline: u64, level: usize) -> usize {
    ((deadline >> (level as u32 * LEVEL_BITS)) & SLOT_MASK) as usize
}

/// The first tick of `slot` at `level`, within the level-`level + 1` block holding `now`.
#[inline]
pub(crate) fn slot_start(now: u64, level: usize, slot: usize) -> u64 {
    let shift = level as u32 * LEVEL_BITS;
    let block = now.checked_shr(shift + LEVEL_BITS).unwrap_or(0);
    let base = block.checked_shl(shift + LEVEL_BITS).unwrap_or(0);
    base | ((slot as u64) << shift)
}

/// A hierarchical timing wheel: O(1) insert, remove and reset, exact firing at every tick
/// of the `u64` range. See the [module docs](self) for the design.
///
/// ```
/// use tickwheel::{TimerQueue, Wheel};
///
/// let mut wheel = Wheel::with_start(1_000);
/// let idle = wheel.insert(31_000, "close idle connection");
/// wheel.insert(1_250, "retransmit");
/// wheel.insert(u64::MAX, "never in practice");
///
/// // A packet arrives at tick 1_100: push the idle timeout back.
/// assert!(wheel.reset(idle, 1_100 + 30_000));
///
/// let mut fired = Vec::new();
/// for tick in [1_249, 1_250, 40_000] {
///     fired.extend(wheel.drain_expired(tick).map(|(_, what)| (tick, what)));
/// }
/// assert_eq!(fired, [(1_250, "retransmit"), (40_000, "close idle connection")]);
/// assert_eq!(wheel.len(), 1);
/// ```
pub struct Wheel<T> {
    slab: Slab<Node, T>,
    levels: Box<[Level; LEVELS]>,
    /// Timers due at `now`, in firing order.
    ready: List,
    now: u64,
}

impl<T> Wheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Wheel<T> {
        Wheel::with_start(0)
    }

    /// An empty wheel whose clock starts at `tick`.
    pub fn with_start(tick: u64) -> Wheel<T> {
        Wheel {
            slab: Slab::new(),
            levels: Box::new([Level::EMPTY; LEVELS]),
            ready: List::EMPTY,
            now: tick,
        }
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before it allocates.
    pub fn with_capacity(capacity: usize) -> Wheel<T> {
        Wheel {
            slab: Slab::with_capacity(capacity),
            ..Wheel::new()
        }
    }

    /// How many timers the wheel holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Puts the timer at `index` where its deadline says (see the invariants).
    #[inline]
    fn link(&mut self, index: u32) {
        let deadline = self.slab.link(index).deadline;
        if deadline <= self.now {
            self.ready.push_back(&mut self.slab, index);
            return;
        }
        let level = level_for(self.now, deadline);
        let slot = slot_for(deadline, level);
        let level = &mut self.levels[level];
        level.slots[slot].push_back(&mut self.slab, index);
        level.occupied |= 1 << slot;
    }

    /// Takes the timer at `index` out of its list.
    #[inline]
    fn unlink(&mut self, index: u32) {
        let deadline = self.slab.link(index).deadline;
        if deadline <= self.now {
            self.ready.unlink(&mut self.slab, index);
            return;
        }
        let level = level_for(self.now, deadline);
        let slot = slot_for(deadline, level);
        let level = &mut self.levels[level];
        let list = &mut level.slots[slot];
        list.unlink(&mut self.slab, index);
        if list.head == NIL {
            level.occupied &= !(1 << slot);
        }
    }

    /// The earliest non-empty (level, slot), if any.
    #[inline]
    fn next_occupied(&self) -> Option<(usize, usize)> {
        self.levels
            .iter()
            .position(|level| level.occupied != 0)
            .map(|l| (l, self.levels[l].occupied.trailing_zeros() as usize))
    }

    /// Empties a slot that `now` has just reached: level 0 becomes the ready list, a higher
    /// level cascades its timers to lower levels, in order.
    fn expire_slot(&mut self, level: usize, slot: usize) {
        debug_assert!(self.ready.head == NIL);
        let lvl = &mut self.levels[level];
        let list = core::mem::replace(&mut lvl.slots[slot], List::EMPTY);
        lvl.occupied &= !(1 << slot);
        if level == 0 {
            self.ready = list;
            return;
        }
        let mut index = list.head;
        while index != NIL {
            let next = self.slab.link(index).next;
            self.link(index);
            index = next;
        }
    }

    /// Removes and returns the first ready timer.
    #[inline]
    fn pop_ready(&mut self) -> Option<(TimerKey, T)> {
        let index = self.ready.head;
        if index == NIL {
            return None;
        }
        let next = self.slab.link(index).next;
        self.ready.head = next;
        if next == NIL {
            self.ready.tail = NIL;
        } else {
            self.slab.link_mut(next).prev = NIL;
        }
        let key = self.slab.key(index);
        Some((key, self.slab.remove(index)))
    }
}

impl<T> TimerQueue<T> for Wheel<T> {
    #[inline]
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let node = Node {
            deadline: deadline.max(self.now),
            next: NIL,
            prev: NIL,
        };
        let (index, key) = self.slab.insert(node, value);
        self.link(index);
        key
    }

    #[inline]
    fn remove(&mut self, key: TimerKey) -> Option<T> {
        let index = self.slab.find(key)?;
        self.unlink(index);
        Some(self.slab.remove(index))
    }

    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(index) = self.slab.find(key) else {
            return false;
        };
        self.unlink(index);
        self.slab.link_mut(index).deadline = deadline.max(self.now);
        self.link(index);
        true
    }

    #[inline]
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.slab.find(key).map(|i| self.slab.link(i).deadline)
    }

    #[inline]
    fn len(&self) -> usize {
        self.slab.len()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now
    }

    fn next_expiration(&self) -> Option<u64> {
        if self.ready.head != NIL {
            return Some(self.now);
        }
        self.next_occupied()
            .map(|(level, slot)| slot_start(self.now, level, slot))
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        loop {
            if now < self.now {
                return None;
            }
            if let Some(fired) = self.pop_ready() {
                return Some(fired);
            }
            if now == self.now {
                return None;
            }
            let Some((level, slot)) = self.next_occupied() else {
                self.now = now;
                return None;
            };
            let start = slot_start(self.now, level, slot);
            if start > now {
                self.now = now;
                return None;
            }
            self.now = start;
            self.expire_slot(level, slot);
        }
    }

    fn shrink_to_fit(&mut self) {
        self.slab.shrink_to_fit();
    }
}

impl<T> Default for Wheel<T> {
    fn default() -> Wheel<T> {
        Wheel::new()
    }
}

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.now)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// `64^level`, the first deadline (from `now = 0`) that needs `level`.
    fn boundary(level: usize) -> Option<u64> {
        1u64.checked_shl(level as u32 * LEVEL_BITS)
    }

    #[test]
    fn levels_cover_u64_exactly() {
        assert_eq!(LEVELS, 11);
        assert!(LEVELS as u32 * LEVEL_BITS >= u64::BITS);
        assert!((LEVELS as u32 - 1) * LEVEL_BITS < u64::BITS);
        assert_eq!(level_for(0, u64::MAX), LEVELS - 1);
        assert_eq!(slot_for(u64::MAX, LEVELS - 1), 15);
    }

    #[test]
    fn level_for_at_every_boundary() {
        assert_eq!(level_for(0, 0), 0);
        for level in 1..LEVELS {
            let b = boundary(level).unwrap();
            assert_eq!(level_for(0, b - 1), level - 1, "just below 64^{level}");
            assert_eq!(level_for(0, b), level, "at 64^{level}");
            assert_eq!(level_for(0, b + 1), level, "just above 64^{level}");
            // Relative to a `now` just below the boundary, crossing it still needs `level`.
            assert_eq!(level_for(b - 1, b), level);
            // Within one block the level depends only on the differing bits.
            assert_eq!(level_for(b, b + 1), 0);
            assert_eq!(level_for(b, b + SLOTS as u64), 1);
            if let Some(top) = boundary(level + 1) {
                assert_eq!(level_for(0, top - 1), level);
            }
        }
        for now in [1u64, 63, 64, 4095, 4096, u64::MAX / 2, u64::MAX - 1] {
            assert_eq!(level_for(now, now), 0);
            assert_eq!(level_for(now, u64::MAX), level_for(0, now ^ u64::MAX));
        }
    }

    #[test]
    fn slot_for_and_slot_start_are_inverse() {
        for level in 0..LEVELS {
            let shift = level as u32 * LEVEL_BITS;
            let slots = if level == LEVELS - 1 { 16 } else { SLOTS };
            for slot in 0..slots {
                let start = slot_start(0, level, slot);
                assert_eq!(start, (slot as u64) << shift);
                assert_eq!(slot_for(start, level), slot);
                if let Some(end) = start.checked_add((1u64 << shift) - 1) {
                    assert_eq!(slot_for(end, level), slot, "last tick of the slot");
                }
            }
        }
        // The block of `now` above the level is kept, its bits below are cleared.
        let now = 0xABCD_EF01_2345_6789;
        for level in 0..LEVELS {
            let start = slot_start(now, level, slot_for(now, level));
            assert!(start <= now);
            assert!(level == 0 || level_for(start, now) < level);
            assert_eq!(
                now - start,
                now & ((1u64 << (level as u32 * LEVEL_BITS)) - 1)
            );
        }
    }

    #[test]
    fn fires_exactly_at_each_level_boundary() {
        for level in 0..LEVELS {
            let Some(b) = boundary(level) else { continue };
            for deadline in [b - 1, b, b + 1].into_iter().filter(|&d| d > 0) {
                let mut wheel = Wheel::new();
                wheel.insert(deadline, ());
                assert!(wheel.next_expiration().unwrap() <= deadline);
                assert!(
                    wheel.poll_expired(deadline - 1).is_none(),
                    "early at {deadline}"
                );
                assert_eq!(wheel.now(), deadline - 1);
                assert!(wheel.poll_expired(deadline).is_some(), "missed {deadline}");
                assert!(wheel.is_empty());
            }
        }
    }

    #[test]
    fn cascade_keeps_insertion_order() {
        let mut wheel = Wheel::new();
        // Same deadline, inserted from different `now`s so they start on different levels.
        wheel.insert(5_000, 'a');
        assert!(wheel.poll_expired(4_900).is_none());
        wheel.insert(5_000, 'b');
        assert!(wheel.poll_expired(4_999).is_none());
        wheel.insert(5_000, 'c');
        wheel.insert(4_000, 'p'); // already past: due now, after nothing
        let fired: Vec<_> = wheel.drain_expired(5_000).map(|(_, v)| v).collect();
        assert_eq!(fired, ['p', 'a', 'b', 'c']);
    }

    #[test]
    fn huge_gap_is_a_jump() {
        let mut wheel = Wheel::new();
        wheel.insert(u64::MAX, "max");
        wheel.insert(1 << 62, "far");
        assert!(wheel.poll_expired(1 << 60).is_none());
        assert_eq!(wheel.now(), 1 << 60);
        assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("far"));
        assert_eq!(wheel.now(), 1 << 62);
        assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("max"));
        assert_eq!(wheel.now(), u64::MAX);
        assert!(wheel.poll_expired(u64::MAX).is_none());
    }
}
