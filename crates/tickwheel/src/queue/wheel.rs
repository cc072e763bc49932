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
//! * Every timer in a slot has an effective deadline `d >= now`, and sits at level
//!   `level_for(now, d)` — the level of the highest bit where `d` and `now`
//!   differ — in slot `slot_for(d, level)`.
//! * The level-0 slot of `now` itself holds exactly the timers due at `now` (the *ready*
//!   slot), in firing order after a consumed prefix (`cursor`).
//! * At level `L` every other occupied slot lies strictly after `now`'s own slot, inside
//!   `now`'s level-`L+1` block; so the lowest set bit of the lowest non-empty level's bitmap
//!   is the earliest slot of all, found with one `trailing_zeros` a level.
//!
//! # Storage: vectors of items, tombstones
//!
//! A slot is a vector of items in insertion order, an item being just the timer's
//! [`TimerKey`] (8 bytes); the timer's slab entry records its deadline and which slot and
//! position its *current* item is at. An item is valid only if its key is live and the entry
//! points back at exactly that slot and position, so an item left behind by a removal or a
//! reset is recognised as stale wherever it sits — it is never written to again. The
//! hot operations then touch memory the way the hardware likes:
//!
//! * **remove** touches the entry and nothing else at random (the slot's live count is in
//!   the small, cache-resident slot table); a linked list must also visit both neighbours.
//! * **expire and cascade** read a slot's items front to back; the entries they touch are
//!   known up front, so their cache misses overlap instead of forming a pointer chase.
//!
//! Stale items are bounded: a slot whose stale items outnumber its live ones by more than
//! `COMPACT_SLACK` (32) is compacted in place (stable, so order is kept), amortized O(1) a
//! removal; an emptied slot is cleared at once. A removed timer's slab entry and value are
//! freed immediately. Slot vectors keep their capacity (no allocation in steady state) until
//! [`shrink_to_fit`](TimerQueue::shrink_to_fit).
//!
//! # Expiry
//!
//! `poll_expired(t)` pops the ready slot; when it is empty it finds the earliest slot. If that
//! slot starts after `t`, time jumps to `t` (O([`LEVELS`]) however large the gap). Otherwise
//! time moves to the slot's start: a level-0 slot thereby becomes the ready slot; a
//! higher slot *cascades* — each timer is re-linked by the rule above, onto a lower level or
//! the ready slot. Re-linking walks the items in order and appends, and the slots it lands in
//! were empty, so insertion order within a deadline survives every cascade. A timer cascades
//! at most once a level.
//!
//! # Costs
//!
//! Insert, remove and reset are O(1) (amortized, for compaction). Memory a pending timer:
//! an 8-byte item plus a slab entry of 20 bytes (deadline, slot, position, generation) and
//! the value as `Option<T>`: 28 bytes, plus `T`'s tag where `T` has no niche, plus at most
//! as much again in stale items awaiting compaction. The wheel itself is `LEVELS * SLOTS`
//! slot headers (22 KiB), allocated once.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use super::slab::{Link, Slab, NIL};
use super::{TimerKey, TimerQueue};

/// Bits of the deadline resolved by one level.
pub const LEVEL_BITS: u32 = 6;
/// Slots a level: one per value of its [`LEVEL_BITS`] bits.
pub const SLOTS: usize = 1 << LEVEL_BITS;
/// Levels needed to cover all 64 bits of a tick: `ceil(64 / LEVEL_BITS)`.
pub const LEVELS: usize = u64::BITS.div_ceil(LEVEL_BITS) as usize;
/// Mask of a slot number.
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Stale items a slot may hold beyond its live ones before it is compacted.
const COMPACT_SLACK: usize = 32;

/// A timer's entry link: its effective deadline and where its current item is — slot
/// number (`level * SLOTS + slot`) and position in that slot.
#[derive(Clone, Copy)]
struct Node {
    deadline: u64,
    slot: u32,
    pos: u32,
}

impl Link for Node {
    #[inline]
    fn vacant(next_free: u32) -> Node {
        Node {
            deadline: 0,
            slot: NIL,
            pos: next_free,
        }
    }

    #[inline]
    fn next_free(&self) -> u32 {
        self.pos
    }
}

/// One slot: items in insertion order, some of them stale.
#[derive(Default)]
struct Slot {
    items: Vec<TimerKey>,
    /// Valid items (in the ready slot: valid and not yet consumed).
    live: usize,
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
    /// `LEVELS * SLOTS` slots, level by level.
    slots: Box<[Slot]>,
    /// A bitmap of the occupied slots of each level.
    occupied: [u64; LEVELS],
    /// Items of the ready slot already consumed.
    cursor: usize,
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
            slots: (0..LEVELS * SLOTS).map(|_| Slot::default()).collect(),
            occupied: [0; LEVELS],
            cursor: 0,
            now: tick,
        }
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before its slab allocates.
    pub fn with_capacity(capacity: usize) -> Wheel<T> {
        Wheel {
            slab: Slab::with_capacity(capacity),
            ..Wheel::new()
        }
    }

    /// How many timers the slab holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// The slot number of the ready slot (level 0, `now`'s slot).
    #[inline]
    fn ready_slot(&self) -> usize {
        (self.now & SLOT_MASK) as usize
    }

    /// Appends the timer `key` (at `index`) to the slot its effective deadline says.
    #[inline]
    fn link(&mut self, key: TimerKey, deadline: u64) {
        let level = level_for(self.now, deadline);
        let slot = slot_for(deadline, level);
        let number = level * SLOTS + slot;
        let target = &mut self.slots[number];
        let pos = target.items.len();
        target.items.push(key);
        target.live += 1;
        self.occupied[level] |= 1 << slot;
        *self.slab.link_mut(key.index()) = Node {
            deadline,
            slot: number as u32,
            pos: pos as u32,
        };
    }

    /// Whether the item at `pos` of slot `number` is the current item of a live timer;
    /// its slab index if so.
    #[inline]
    fn valid(&self, key: TimerKey, number: usize, pos: usize) -> Option<u32> {
        let index = self.slab.find(key)?;
        let node = self.slab.link(index);
        (node.slot as usize == number && node.pos as usize == pos).then_some(index)
    }

    /// Detaches the timer at `index` from its slot; its item goes stale where it is.
    #[inline]
    fn unlink(&mut self, index: u32) {
        let number = self.slab.link(index).slot as usize;
        let target = &mut self.slots[number];
        target.live -= 1;
        if target.live == 0 {
            self.clear_slot(number);
        } else if target.items.len() > 2 * target.live + COMPACT_SLACK {
            // Counts the ready slot's consumed prefix as garbage too: compaction drops it.
            self.compact(number);
        }
    }

    /// Empties a slot that holds no live timer (keeping its capacity).
    #[inline]
    fn clear_slot(&mut self, number: usize) {
        self.slots[number].items.clear();
        self.slots[number].live = 0;
        self.occupied[number / SLOTS] &= !(1 << (number % SLOTS));
        if number == self.ready_slot() {
            self.cursor = 0;
        }
    }

    /// Drops a slot's stale items (and, for the ready slot, its consumed prefix), keeping
    /// the order of the rest.
    fn compact(&mut self, number: usize) {
        let start = if number == self.ready_slot() {
            core::mem::take(&mut self.cursor)
        } else {
            0
        };
        let mut items = core::mem::take(&mut self.slots[number].items);
        let mut kept = 0;
        for read in start..items.len() {
            let key = items[read];
            if let Some(index) = self.valid(key, number, read) {
                items[kept] = key;
                self.slab.link_mut(index).pos = kept as u32;
                kept += 1;
            }
        }
        items.truncate(kept);
        self.slots[number].items = items;
    }

    /// The earliest occupied (level, slot), if any.
    #[inline]
    fn next_occupied(&self) -> Option<(usize, usize)> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        Some((level, self.occupied[level].trailing_zeros() as usize))
    }

    /// Moves the timers of a higher-level slot that `now` has just reached down the wheel.
    fn cascade(&mut self, number: usize) {
        let mut items = core::mem::take(&mut self.slots[number].items);
        self.slots[number].live = 0;
        self.occupied[number / SLOTS] &= !(1 << (number % SLOTS));
        for (pos, &key) in items.iter().enumerate() {
            if let Some(index) = self.valid(key, number, pos) {
                let deadline = self.slab.link(index).deadline;
                self.link(key, deadline);
            }
        }
        // Hand the emptied vector back so its capacity is reused.
        items.clear();
        self.slots[number].items = items;
    }

    /// Removes and returns the next timer of the ready slot.
    #[inline]
    fn pop_ready(&mut self) -> Option<(TimerKey, T)> {
        let number = self.ready_slot();
        while let Some(&key) = self.slots[number].items.get(self.cursor) {
            let pos = self.cursor;
            self.cursor += 1;
            let Some(index) = self.valid(key, number, pos) else {
                continue;
            };
            let ready = &mut self.slots[number];
            ready.live -= 1;
            if ready.live == 0 {
                self.clear_slot(number);
            }
            return Some((key, self.slab.remove(index)));
        }
        None
    }
}

impl<T> TimerQueue<T> for Wheel<T> {
    #[inline]
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let (_, key) = self.slab.insert(Node::vacant(NIL), value);
        self.link(key, deadline.max(self.now));
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
        self.link(key, deadline.max(self.now));
        true
    }

    #[inline]
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.slab
            .find(key)
            .map(|index| self.slab.link(index).deadline)
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
            if level > 0 {
                self.cascade(level * SLOTS + slot);
            }
        }
    }

    fn shrink_to_fit(&mut self) {
        self.slab.shrink_to_fit();
        for number in 0..self.slots.len() {
            if self.slots[number].live > 0 {
                self.compact(number);
            }
            self.slots[number].items.shrink_to_fit();
        }
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
