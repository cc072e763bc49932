//! [`Tiers`]: what both hierarchical wheels (the `Wheel` and the `SlimWheel`) hold alike, and
//! the logic that reads and writes nothing else. The levels and the clock, the slot table
//! with its spare vectors, the ready slot's cursor and the departures not yet applied; each
//! wheel adds its records. The logic that also needs the records (expiry, absorption, the
//! slots' bookkeeping) is [`Tiered`](super::tiered::Tiered)'s, in `tiered.rs`.
//!
//! The two wheels' slots differ in their items (a record index, or an index and a
//! generation), in what a slot counts of its stale items (the `Wheel`'s `stale`, nothing in
//! the `SlimWheel`, whose compaction looks every item up anyway) and in what a departure
//! notes (a slot and a position, or the slot alone): those are the type parameters.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::level::{index, parent, ring, start, Level};
use super::{LEVELS, LEVEL_BITS, RING, UNSETTLED};

/// A slot is compacted once it holds more than `COMPACT_RATIO` items a live one, plus
/// [`COMPACT_SLACK`]: stale items then number at most two a live one (plus the slack), 8 bytes
/// a pending timer in the `Wheel` and 16 in the `SlimWheel`, whose items are twice the size.
/// Draining a slot by removals scans about `COMPACT_RATIO / (COMPACT_RATIO - 1)` items and
/// moves `1 / (COMPACT_RATIO - 1)` live ones a removal. At 2 items a live one, the
/// `SlimWheel`'s compaction looks up more items a reset, and the memory bound gains nothing
/// it needs.
pub(in crate::queue) const COMPACT_RATIO: usize = 3;
/// Stale items a slot may hold beyond its live ones before it is compacted.
pub(in crate::queue) const COMPACT_SLACK: usize = 32;
/// Departures a wheel notes before it applies them (`wheel/slots.rs`, "Departures").
pub(in crate::queue) const DEPART_BATCH: usize = 64;

/// One slot: items in insertion order, some of them stale.
pub(in crate::queue) struct Slot<I, S> {
    /// The items, each naming a timer's record.
    pub(in crate::queue) items: Vec<I>,
    /// Valid items (in the ready slot and a slot being absorbed: valid and not yet taken),
    /// plus the departures from this slot not yet applied.
    pub(in crate::queue) live: usize,
    /// What the wheel counts of the stale items it left unmarked since the slot was last
    /// compacted or cleared (the `Wheel`'s resets, see `wheel/slots.rs`; `()` in the
    /// `SlimWheel`). Cleared with the slot.
    pub(in crate::queue) stale: S,
}

impl<I, S: Default> Default for Slot<I, S> {
    fn default() -> Self {
        Slot {
            items: Vec::new(),
            live: 0,
            stale: S::default(),
        }
    }
}

/// What a departure notes of the slot its timer left.
pub(in crate::queue) trait Departed: Copy {
    /// The slot number the timer left.
    fn slot(self) -> usize;
}

/// The state both hierarchical wheels share: levels, clock, slots (items `I`, stale count
/// `S`) and departures not yet applied (`D`).
pub(in crate::queue) struct Tiers<I, S, D> {
    /// `LEVELS * RING` slots, level by level.
    pub(in crate::queue) slots: Box<[Slot<I, S>]>,
    /// Boxed: keeps the wheel (and enums holding it) small; it is cache-resident anyway.
    pub(in crate::queue) levels: Box<[Level; LEVELS]>,
    /// Items of the ready slot already consumed.
    pub(in crate::queue) cursor: usize,
    /// Where the timers removed or reset since the last `apply_departures` were, applied to
    /// the slots in a batch (`wheel/slots.rs`, "Departures").
    pub(in crate::queue) departed: Vec<D>,
    /// Each level's emptied slot vectors, for the next slot of that level to fill
    /// (`wheel/slots.rs`, "Spare vectors").
    pub(in crate::queue) spare: Box<[Vec<Vec<I>>; LEVELS]>,
    /// The wheel's current tick.
    pub(in crate::queue) now: u64,
    /// `now >> LEVEL_BITS` when a pass of `absorb_ahead` last found nothing under way and
    /// nothing to start; [`UNSETTLED`] when it must look again.
    pub(in crate::queue) settled: u64,
    /// Polls that caught up, in debug builds: every `CHECK_EVERY`th runs the wheel's
    /// `check_invariants` (every one while the wheel is small; `tiered.rs`).
    #[cfg(debug_assertions)]
    pub(in crate::queue) caught_up: u32,
}

impl<I, S: Default, D: Departed> Tiers<I, S, D> {
    /// Empty levels and slots, the clock at `tick`.
    pub(in crate::queue) fn new(tick: u64) -> Self {
        Tiers {
            slots: (0..LEVELS * RING).map(|_| Slot::default()).collect(),
            levels: Box::new(core::array::from_fn(|level| Level::new(level, tick))),
            cursor: 0,
            departed: Vec::new(),
            spare: Box::new(core::array::from_fn(|_| Vec::new())),
            now: tick,
            settled: UNSETTLED,
            #[cfg(debug_assertions)]
            caught_up: 0,
        }
    }

    /// Bytes held beyond the wheel's struct: slot vectors at their capacity (spare ones
    /// included), the departures' buffer, the slot table and the levels.
    pub(in crate::queue) fn allocated_bytes(&self) -> usize {
        let spare = self.spare.iter().flatten();
        let items: usize = (self.slots.iter().map(|slot| &slot.items))
            .chain(spare)
            .map(Vec::capacity)
            .sum();
        items * core::mem::size_of::<I>()
            + self.departed.capacity() * core::mem::size_of::<D>()
            + self.spare.iter().map(Vec::capacity).sum::<usize>() * core::mem::size_of::<Vec<I>>()
            + self.slots.len() * core::mem::size_of::<Slot<I, S>>()
            + core::mem::size_of::<[Level; LEVELS]>()
    }

    /// The slot number of the ready slot (level 0, `now`'s slot).
    #[inline]
    pub(in crate::queue) fn ready_slot(&self) -> usize {
        ring(self.now)
    }

    /// The level a timer due at `deadline` (`>= now`) belongs on: the lowest whose absorbed
    /// range reaches it ([`Level::reaches`], with the level as the loop's counter: see
    /// [`slot_number`](super::level::slot_number)).
    #[inline]
    pub(in crate::queue) fn level_of(&self, deadline: u64) -> usize {
        let mut level = 0;
        while level < LEVELS - 1 && parent(deadline, level) > self.levels[level].absorbed {
            level += 1;
        }
        level
    }

    /// The slot number level `level` is absorbing, if it is.
    #[inline]
    pub(in crate::queue) fn source(&self, level: usize) -> Option<usize> {
        self.levels[level].source()
    }

    /// The level absorbing slot `number`, if one is.
    #[inline]
    pub(in crate::queue) fn absorber(&self, number: usize) -> Option<usize> {
        let level = (number / RING).checked_sub(1)?;
        (self.source(level) == Some(number)).then_some(level)
    }

    /// The lowest non-empty level above 0 and the first tick of its first occupied slot.
    #[inline]
    pub(in crate::queue) fn first_upper(&self) -> Option<(usize, u64)> {
        (1..LEVELS).find_map(|level| {
            let first = self.levels[level].first_slot(self.now)?;
            Some((level, start(first, level)))
        })
    }

    /// Whether `level` may start absorbing its next parent slot (see [`Level::can_absorb`]).
    #[inline]
    pub(in crate::queue) fn can_absorb(&self, level: usize) -> bool {
        self.levels[level].can_absorb(self.now, &self.levels[level + 1])
    }

    /// The first slot of `level` from `now`'s own that holds a live timer: its index. Like
    /// [`Level::first_slot`], but a slot whose `live` count is only departures not yet
    /// applied is passed over, so that `next_expiration` stays as exact as it is without them
    /// (a timer armed by it does not wake for a timer already cancelled).
    pub(in crate::queue) fn first_live_slot(&self, level: usize) -> Option<u64> {
        let own = index(self.now, level);
        let mut occupied = self.levels[level].occupied.rotate_right(ring(own) as u32);
        while occupied != 0 {
            let at = own + u64::from(occupied.trailing_zeros());
            let number = level * RING + ring(at);
            let departing = self
                .departed
                .iter()
                .filter(|departure| departure.slot() == number)
                .count();
            if self.slots[number].live > departing {
                return Some(at);
            }
            occupied &= occupied - 1;
        }
        None
    }

    /// Gives slot `number`, which has no vector yet, a spare one of its level if there is
    /// one (see "Spare vectors" in `wheel/slots.rs`); whether it did.
    #[inline]
    pub(in crate::queue) fn take_spare(&mut self, number: usize) -> bool {
        let target = &mut self.slots[number];
        if target.items.capacity() == 0 {
            if let Some(spare) = self.spare[number / RING].pop() {
                target.items = spare;
                return true;
            }
        }
        false
    }

    /// Empties a slot that holds no live timer; its vector goes to its level's spare list.
    /// Emptying the slot a level is absorbing completes that absorption.
    #[inline]
    pub(in crate::queue) fn clear_slot(&mut self, number: usize) {
        if let Some(level) = self.absorber(number) {
            self.levels[level].absorbed_next();
        }
        let mut items = core::mem::take(&mut self.slots[number].items);
        if items.capacity() > 0 {
            items.clear();
            self.spare[number / RING].push(items);
        }
        self.slots[number].live = 0;
        self.slots[number].stale = S::default();
        self.levels[number / RING].vacate(number % RING);
        if number == self.ready_slot() {
            self.cursor = 0;
        }
    }

    /// Where a compaction of slot `number` starts: the items the ready slot's cursor or an
    /// absorption has consumed are dropped with the stale ones, and that cursor restarts at 0.
    #[inline]
    pub(in crate::queue) fn take_consumed(&mut self, number: usize) -> usize {
        if number == self.ready_slot() {
            core::mem::take(&mut self.cursor)
        } else if let Some(level) = self.absorber(number) {
            self.levels[level].absorbing.replace(0).unwrap_or(0)
        } else {
            0
        }
    }

    /// Whether slot `number` holds more items than [`COMPACT_RATIO`] a live one, plus
    /// [`COMPACT_SLACK`]. A consumed prefix (ready slot, slot being absorbed) counts as
    /// garbage too: compaction drops it.
    #[inline]
    pub(in crate::queue) fn mostly_stale(&self, number: usize) -> bool {
        let slot = &self.slots[number];
        slot.items.len() > COMPACT_RATIO * slot.live + COMPACT_SLACK
    }

    /// Asserts the levels' part of invariant (3) of `check.rs` (each wheel's
    /// `check_invariants` runs it first).
    pub(in crate::queue) fn check_levels(&self) {
        let now = self.now;
        for (l, level) in self.levels.iter().enumerate() {
            assert_eq!(level.level, l, "level {l} knows its number");
            let own = parent(now, l);
            assert!(
                level.absorbed == own || level.absorbed == own + 1,
                "(3) level {l} absorbed {} with now's parent slot {own}",
                level.absorbed
            );
            if let Some(cursor) = level.absorbing {
                assert!(l < LEVELS - 1, "(3) the top level never absorbs");
                assert!(
                    (level.absorbed + 1) >> LEVEL_BITS <= self.levels[l + 1].absorbed,
                    "(3) level {l} absorbs a slot the level above does not hold whole"
                );
                let source = level.source().expect("absorbing has a source");
                assert!(
                    cursor <= self.slots[source].items.len(),
                    "(3) level {l}'s cursor is past its source's items"
                );
            }
        }
    }

    /// The departures not yet applied from each slot, by slot number (for invariant (4)).
    pub(in crate::queue) fn pending_departures(&self) -> Vec<usize> {
        let mut pending = alloc::vec![0usize; self.slots.len()];
        for departure in &self.departed {
            assert!(
                departure.slot() < self.slots.len(),
                "(4) a departure names slot {}, which does not exist",
                departure.slot()
            );
            pending[departure.slot()] += 1;
        }
        pending
    }

    /// Asserts invariant (4)'s occupancy of slot `number`, and returns, if it holds any
    /// timer, the position before which its items are consumed (the ready slot's cursor, an
    /// absorbing level's), for (3).
    pub(in crate::queue) fn check_occupancy(&self, number: usize) -> Option<usize> {
        let (l, slot) = (number / RING, &self.slots[number]);
        let occupied = (self.levels[l].occupied >> (number % RING)) & 1 == 1;
        assert_eq!(
            occupied,
            slot.live > 0,
            "(4) occupancy bit of slot {number} (level {l})"
        );
        if slot.live == 0 {
            assert!(slot.items.is_empty(), "(4) empty slot {number} holds items");
            return None;
        }
        Some(if number == self.ready_slot() {
            self.cursor
        } else {
            (self.absorber(number)).map_or(0, |b| self.levels[b].absorbing.unwrap_or(0))
        })
    }

    /// Asserts invariants (1) to (3) for the valid item at `pos` of slot `number`, of a timer
    /// due at `d`, with the slot's items consumed before `from`.
    pub(in crate::queue) fn check_placement(&self, number: usize, pos: usize, from: usize, d: u64) {
        let (now, l) = (self.now, number / RING);
        assert!(
            pos >= from,
            "(3) a valid item before slot {number}'s cursor"
        );
        assert!(d >= now, "(1) a live timer due at {d} behind now {now}");
        // Items a level has already taken in of the slot it is absorbing count as within its
        // range; the unmoved rest stay above (after the cursor, checked above).
        let level = &self.levels[l];
        let taken_in = level.absorbing.is_some() && parent(d, l) == level.absorbed.wrapping_add(1);
        assert!(
            (level.reaches(d) || taken_in) && (l == 0 || !self.levels[l - 1].reaches(d)),
            "(1) a timer due at {d} on level {l}, not the lowest that reaches it"
        );
        assert_eq!(
            level.slot_of(d),
            number,
            "(1) a timer due at {d} in the wrong slot"
        );
        assert!(
            index(d, l) - index(now, l) < RING as u64,
            "(2) level {l} holds slot {} beyond now's {}",
            index(d, l),
            index(now, l)
        );
    }

    /// Asserts invariants (4) and (5) for the counts of non-empty slot `number`, which holds
    /// `valid` valid items and `pending` departures not yet applied.
    pub(in crate::queue) fn check_counts(&self, number: usize, valid: usize, pending: usize) {
        let slot = &self.slots[number];
        assert_eq!(
            valid + pending,
            slot.live,
            "(4) live count of slot {number}"
        );
        if number != self.ready_slot() && self.absorber(number).is_none() {
            assert!(
                !self.mostly_stale(number),
                "(5) slot {number} holds {} items for {} live",
                slot.items.len(),
                slot.live
            );
        }
    }
}
