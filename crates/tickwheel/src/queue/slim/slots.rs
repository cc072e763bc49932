//! A [`SlimWheel`] slot's storage: a vector of [`Item`]s in insertion order, stale ones among
//! them, and the batched accounting and compaction that bound them (see the module docs,
//! "Storage").
//!
//! # Departures
//!
//! A cancel or a reset does not touch the slot its timer leaves: it appends the slot's number
//! to a buffer, and [`SlimWheel::apply_departures`] applies them, when [`DEPART_BATCH`] have
//! gathered and at the start of every poll, as the `Wheel` does (`wheel/slots.rs`). Applying
//! one decrements the slot's live count; a slot left with no live timer is cleared, and one
//! holding more than [`COMPACT_RATIO`] items a live one (plus [`COMPACT_SLACK`]) is compacted.
//! Until a departure is applied the slot's `live` counts it, so a slot is never cleared
//! under a pending departure.
//!
//! A slot whose vector is full is compacted instead of grown when at least a quarter of its
//! items are stale: resets append items at the tail of their new slot, and a vector that
//! only doubled would keep twice the room its live items need after every storm of resets.
//!
//! # Spare vectors
//!
//! A level keeps two rotations of slots, but the timers of a workload whose delays span a
//! fraction of a rotation occupy only that fraction at a time: a vector that kept its
//! capacity when its slot emptied would leave every ring slot the workload ever passed
//! through holding room for a full slot. An emptied slot's vector goes to its level's spare
//! list instead, and the next slot of that level to fill takes it (a slot's first item is
//! the one that finds its vector without capacity). So the room held is about what the
//! occupied slots need, and steady state still allocates nothing.
//!
//! No item is overwritten: an item carries its generation, so compaction tells a stale one by
//! its record alone. It looks every item up (prefetched [`TOUCH`] ahead, branch-free, so the
//! misses overlap) and keeps the current ones in order; no record stores a position, so
//! nothing is rewritten for the items that move.

use super::level::{index, ring};
use super::store::Item;
use super::{grow, SlimWheel, Tiered, RING, TOUCH};
use alloc::vec::Vec;

/// A slot is compacted once it holds more than `COMPACT_RATIO` items a live one, plus
/// [`COMPACT_SLACK`], as in the `Wheel`: stale items then cost at most 16 bytes a pending
/// timer, the items being twice the `Wheel`'s; the vectors' spare capacity is bounded by
/// compacting a full slot at least a quarter stale instead of growing it. At 2 items a live
/// one, compaction looks up more items a reset, and the memory bound gains nothing it needs.
pub(super) const COMPACT_RATIO: usize = 3;
/// Stale items a slot may hold beyond its live ones before it is compacted.
pub(super) const COMPACT_SLACK: usize = 32;
/// Departures noted before they are applied.
pub(super) const DEPART_BATCH: usize = 64;

/// One slot: items in insertion order, some of them stale.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) items: Vec<Item>,
    /// Current items (in the ready slot and a slot being absorbed: current and not yet
    /// taken) plus the departures from this slot not yet applied.
    pub(super) live: usize,
}

impl<T> SlimWheel<T> {
    /// Appends `item` to slot `number`.
    #[inline]
    pub(super) fn push_item(&mut self, number: usize, item: Item) {
        let target = &mut self.slots[number];
        if target.items.len() == target.items.capacity() {
            self.make_room(number);
        }
        let target = &mut self.slots[number];
        target.items.push(item);
        target.live += 1;
        self.levels[number / RING].occupy(number % RING);
    }

    /// Makes room for an item in slot `number`, which is full: compacts it if at least a
    /// quarter of its items are stale for sure (its `live` count includes departures not yet
    /// applied, so it overcounts), and grows it otherwise or if that freed nothing. Out of
    /// line: it runs once a vector fills.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, number: usize) {
        if self.slots[number].items.capacity() == 0 {
            if let Some(spare) = self.spare[number / RING].pop() {
                self.slots[number].items = spare;
                return;
            }
        }
        let target = &self.slots[number];
        if target.items.len() >= COMPACT_SLACK && 4 * target.live <= 3 * target.items.len() {
            self.compact(number);
        }
        let target = &mut self.slots[number];
        if target.items.len() == target.items.capacity() {
            grow(&mut target.items);
        }
    }

    /// Notes that a timer left slot `number` (cancelled, or reset elsewhere); see
    /// "Departures" above.
    #[inline]
    pub(super) fn depart(&mut self, number: u32) {
        if self.departed.len() == self.departed.capacity() {
            self.departed.reserve_exact(DEPART_BATCH);
        }
        self.departed.push(number);
        if self.departed.len() >= DEPART_BATCH {
            self.apply_batch();
        }
    }

    /// Applies the departures noted since the last batch.
    #[inline]
    pub(super) fn apply_departures(&mut self) {
        if !self.departed.is_empty() {
            self.apply_batch();
        }
    }

    /// Out of line: it runs once in [`DEPART_BATCH`] departures, or at a poll.
    #[inline(never)]
    fn apply_batch(&mut self) {
        let departed = core::mem::take(&mut self.departed);
        for &number in &departed {
            let number = number as usize;
            let target = &mut self.slots[number];
            target.live -= 1;
            if target.live == 0 {
                self.clear_slot(number);
            } else if target.items.len() > COMPACT_RATIO * target.live + COMPACT_SLACK {
                // A consumed prefix (ready slot, slot being absorbed) counts as garbage too:
                // compaction drops it.
                self.compact(number);
            }
        }
        self.departed = departed;
        self.departed.clear();
    }

    /// The first slot of `level` from `now`'s own holding a live timer, not only departures
    /// not yet applied: its index (see the `Wheel`'s `first_live_slot`).
    pub(super) fn first_live_slot(&self, level: usize) -> Option<u64> {
        let own = index(self.now, level);
        let mut occupied = self.levels[level].occupied.rotate_right(ring(own) as u32);
        while occupied != 0 {
            let at = own + u64::from(occupied.trailing_zeros());
            let number = level * RING + ring(at);
            let departing = self
                .departed
                .iter()
                .filter(|&&departed| departed as usize == number)
                .count();
            if self.slots[number].live > departing {
                return Some(at);
            }
            occupied &= occupied - 1;
        }
        None
    }

    /// Empties a slot that holds no live timer (keeping its capacity). Emptying the slot a
    /// level is absorbing completes that absorption.
    #[inline]
    pub(super) fn clear_slot(&mut self, number: usize) {
        if let Some(level) = self.absorber(number) {
            self.levels[level].absorbed_next();
        }
        let mut items = core::mem::take(&mut self.slots[number].items);
        if items.capacity() > 0 {
            items.clear();
            self.spare[number / RING].push(items);
        }
        self.slots[number].live = 0;
        self.levels[number / RING].vacate(number % RING);
        if number == self.ready_slot() {
            self.cursor = 0;
        }
    }

    /// Drops a slot's stale items (and a consumed prefix), keeping the order of the rest.
    #[inline(never)]
    pub(super) fn compact(&mut self, number: usize) {
        let start = if number == self.ready_slot() {
            core::mem::take(&mut self.cursor)
        } else if let Some(level) = self.absorber(number) {
            self.levels[level].absorbing.replace(0).unwrap_or(0)
        } else {
            0
        };
        let mut items = core::mem::take(&mut self.slots[number].items);
        let mut kept = 0;
        let mut chunk_start = start;
        self.store
            .touch(&items[start.min(items.len())..items.len().min(start + TOUCH)]);
        while chunk_start < items.len() {
            let chunk_end = items.len().min(chunk_start + TOUCH);
            // The next chunk's records start loading while this one is checked.
            self.store
                .touch(&items[chunk_end..items.len().min(chunk_end + TOUCH)]);
            for read in chunk_start..chunk_end {
                // Branch-free: half the checks may fail at random, and a mispredicted
                // branch would discard the look-ups in flight behind it.
                let item = items[read];
                items[kept] = item;
                kept += usize::from(self.store.valid(item, number));
            }
            chunk_start = chunk_end;
        }
        items.truncate(kept);
        self.slots[number].items = items;
    }
}
