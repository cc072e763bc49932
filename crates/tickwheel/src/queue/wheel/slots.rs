//! A wheel slot's storage: a vector of record indices in insertion order, stale items and
//! tombstones among them, and the compaction that bounds them (see the wheel's module docs,
//! "Storage").
//!
//! # Departures
//!
//! A removal or reset does not touch the slot its timer leaves: it appends a [`Departure`]
//! (slot, position) to a buffer, and [`Wheel::apply_departures`] applies a batch of them, when
//! [`DEPART_BATCH`] have gathered and at the start of every poll. At a million timers that
//! is what makes a cancel cheap: a cancel waits for its hot record's cache miss, and every
//! instruction that depends on that miss (the slot's count, the tombstone's address, the
//! branches to clear or compact the slot) holds the cancels behind it out of the CPU's
//! window, so fewer misses overlap. Batched, the dependent work is a push, and applying them does
//! the slot work for 64 departures in one loop over cache-resident counts.
//!
//! Between two batches no item moves: inserts and resets only append, and compaction,
//! clearing and polls run in or after applying a batch. So a departure's (slot, position)
//! still names its timer's old item when it is applied. Applying a batch first writes the
//! tombstones of its removals and counts its resets' items in the slot's
//! [`stale`](Slot::stale), then updates the live counts: a slot compacted while counting has
//! no stale item past its cursor but tombstones, unless `stale` says otherwise, and
//! [`compact`](Wheel::compact) then keeps every other item without looking its record up. A
//! reset leaves no tombstone: in a reset-heavy load (W3) the store costs more than the
//! look-ups it would save. Until a departure is applied, a slot's `live` counts it as live, so
//! a slot is never cleared under a pending departure, and
//! [`first_live_slot`](Wheel::first_live_slot) passes over a slot that holds only departures
//! for [`next_expiration`](crate::TimerQueue::next_expiration).
//!
//! # Spare vectors
//!
//! A level keeps two rotations of slots, but timers whose delays span a fraction of a
//! rotation occupy only that fraction at a time, and as the clock turns they pass through
//! every ring slot: a vector that kept its capacity when its slot emptied would leave each
//! of them holding room for a full slot. An emptied slot's vector goes to its level's spare
//! list instead, and the next slot of that level to receive its first item takes it. The
//! room held is then about what the occupied slots need, and steady state still allocates
//! nothing.

use alloc::vec::Vec;

use super::absorb::Tiered;
use super::level::{index, ring};
use super::{grow, Place, Wheel, NIL, RING, TOUCH};

/// A slot is compacted once it holds more than `COMPACT_RATIO` items a live one (plus
/// [`COMPACT_SLACK`]): stale items then cost at most 8 bytes a pending timer (16 with the
/// vector's spare capacity), and draining a slot by removals scans about
/// `COMPACT_RATIO / (COMPACT_RATIO - 1)` items and moves `1 / (COMPACT_RATIO - 1)` live ones
/// a removal.
pub(super) const COMPACT_RATIO: usize = 3;
/// Stale items a slot may hold beyond its live ones before it is compacted.
pub(super) const COMPACT_SLACK: usize = 32;
/// What an applied [`Departure`] leaves in place of its timer's old item: record index
/// [`NIL`], which no record has, so every validity check rejects it without a memory access.
pub(super) const TOMBSTONE: u32 = NIL;

/// Departures a wheel notes before it applies them (see "Departures" above).
pub(super) const DEPART_BATCH: usize = 64;

/// Where a removed or reset timer's item was: its slot number and position.
#[derive(Clone, Copy)]
pub(super) struct Departure {
    pub(super) slot: u32,
    pub(super) pos: u32,
    /// Whether the item is tombstoned when applied (a removal) or only counted as stale (a
    /// reset: see [`Slot::stale`]).
    pub(super) mark: bool,
}

/// One slot: items in insertion order, some of them stale.
#[derive(Default)]
pub(super) struct Slot {
    /// The record index of each item's timer; [`TOMBSTONE`] for a removed one.
    pub(super) items: Vec<u32>,
    /// Valid items (in the ready slot and a slot being absorbed: valid and not yet taken).
    pub(super) live: usize,
    /// Stale items left unmarked (by resets) since the slot was last compacted or cleared:
    /// while it is not zero, compaction looks each item's record up.
    pub(super) stale: usize,
}

impl<T> Wheel<T> {
    /// Appends an item for record `record` to slot `number` and returns its position; the
    /// caller records the place.
    #[inline]
    pub(super) fn push_item(&mut self, number: usize, record: u32) -> usize {
        let target = &mut self.slots[number];
        let pos = target.items.len();
        if pos == target.items.capacity() {
            self.make_room(number);
        }
        let target = &mut self.slots[number];
        target.items.push(record);
        target.live += 1;
        self.levels[number / RING].occupy(number % RING);
        pos
    }

    /// Gives full slot `number` room for an item: a spare vector of its level if the slot
    /// has none yet (see "Spare vectors" above), else twice the room.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, number: usize) {
        let target = &mut self.slots[number];
        if target.items.capacity() == 0 {
            if let Some(spare) = self.spare[number / RING].pop() {
                target.items = spare;
                return;
            }
        }
        grow(&mut target.items);
    }

    /// Whether the item `index` at `pos` of slot `number` is the current item of a live
    /// timer. A vacant record's slot is [`VACANT`](crate::queue::records::VACANT), no slot number,
    /// and a record holds one place, which holds its own index: so the place alone tells, and
    /// a reused record never takes its former timers' items as its own.
    #[inline]
    pub(super) fn valid(&self, index: u32, number: usize, pos: usize) -> bool {
        self.records
            .place(index)
            .is_some_and(|place| place.slot as usize == number && place.pos as usize == pos)
    }

    /// Notes that a timer left the place its record held (read by the caller's key look-up,
    /// so the record is not visited twice): a removal, or a reset that appended a new item
    /// elsewhere. Its item is stale from now on, because the record no longer points at it;
    /// counting the departure and overwriting the item with a [`TOMBSTONE`] wait for the
    /// next [`apply_departures`](Wheel::apply_departures) (see "Departures" above).
    #[inline]
    pub(super) fn depart(&mut self, place: Place, mark: bool) {
        if self.departed.len() == self.departed.capacity() {
            self.departed.reserve_exact(DEPART_BATCH);
        }
        self.departed.push(Departure {
            slot: place.slot,
            pos: place.pos,
            mark,
        });
        if self.departed.len() >= DEPART_BATCH {
            self.apply_batch();
        }
    }

    /// Applies the departures noted since the last batch: tombstones first (no item moves
    /// until every one is written), then each slot's count, clearing a slot that has no live
    /// timer left and compacting one that is mostly stale.
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
        for departure in &departed {
            let (number, pos) = (departure.slot as usize, departure.pos as usize);
            #[cfg(debug_assertions)]
            {
                let item = self.slots[number].items[pos];
                assert!(
                    item != TOMBSTONE && !self.valid(item, number, pos),
                    "a departure names item {pos} of slot {number}, which is not its stale item"
                );
            }
            if !departure.mark {
                self.slots[number].stale += 1;
            } else if let Some(item) = self.slots[number].items.get_mut(pos) {
                *item = TOMBSTONE;
            }
        }
        for departure in &departed {
            let number = departure.slot as usize;
            let target = &mut self.slots[number];
            target.live -= 1;
            if target.live == 0 {
                self.clear_slot(number);
            } else if target.items.len() > COMPACT_RATIO * target.live + COMPACT_SLACK {
                // Counts a consumed prefix (ready slot, slot being absorbed) as garbage too:
                // compaction drops it.
                self.compact(number);
            }
        }
        self.departed = departed;
        self.departed.clear();
    }

    /// The first slot of `level` from `now`'s own that holds a live timer: its index. Like
    /// [`Level::first_slot`](super::level::Level::first_slot), but a slot whose `live` count
    /// is only departures not yet applied is passed over, so that
    /// [`next_expiration`](crate::TimerQueue::next_expiration) stays as exact as it is
    /// without them (a timer armed by it does not wake for a timer already cancelled).
    pub(super) fn first_live_slot(&self, level: usize) -> Option<u64> {
        let own = index(self.now, level);
        let mut occupied = self.levels[level].occupied.rotate_right(ring(own) as u32);
        while occupied != 0 {
            let at = own + u64::from(occupied.trailing_zeros());
            let number = level * RING + ring(at);
            let departing = self
                .departed
                .iter()
                .filter(|departure| departure.slot as usize == number)
                .count();
            if self.slots[number].live > departing {
                return Some(at);
            }
            occupied &= occupied - 1;
        }
        None
    }

    /// Empties a slot that holds no live timer; its vector goes to its level's spare list.
    /// Emptying the slot a level is absorbing completes that absorption.
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
        self.slots[number].stale = 0;
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
        let lookup = core::mem::take(&mut self.slots[number].stale) != 0;
        let mut items = core::mem::take(&mut self.slots[number].items);
        let mut kept = 0;
        let mut chunk_start = start;
        while chunk_start < items.len() {
            let chunk_end = items.len().min(chunk_start + TOUCH);
            // Prefetch the records this chunk looks up together.
            self.records.touch(&items[chunk_start..chunk_end]);
            for read in chunk_start..chunk_end {
                let index = items[read];
                if index == TOMBSTONE {
                    continue;
                }
                if !lookup {
                    // Every stale item past the cursor is a tombstone.
                    debug_assert!(self.valid(index, number, read), "a stale item survived");
                } else if !self.valid(index, number, read) {
                    continue;
                }
                if kept != read {
                    items[kept] = index;
                    self.records.set_pos(index, kept as u32);
                }
                kept += 1;
            }
            chunk_start = chunk_end;
        }
        items.truncate(kept);
        self.slots[number].items = items;
    }
}
