//! A wheel slot's storage: a vector of record indices in insertion order, stale items and
//! tombstones among them, and the compaction that bounds them (see the wheel's module docs,
//! "Storage"). Departures and spare vectors are both wheels' (the shared part in `tiers.rs`
//! and `tiered.rs`); tombstones, `stale` and this compaction are the `Wheel`'s.
//!
//! # Departures
//!
//! A removal or reset does not touch the slot its timer leaves: it appends a [`Departure`] (slot,
//! position) to a buffer, and [`Tiered::apply_departures`] applies a batch of them, when
//! [`DEPART_BATCH`](super::tiers::DEPART_BATCH) have gathered and at the start of every poll. At a
//! million timers that is what makes a cancel cheap: a cancel waits for its hot record's cache
//! miss, and every instruction that depends on that miss (the slot's count, the tombstone's
//! address, the branches to clear or compact the slot) holds the cancels behind it out of the CPU's
//! window, so fewer misses overlap. Batched, the dependent work is a push, and applying them does
//! the slot work for 64 departures in one loop over cache-resident counts.
//!
//! Between two batches no item moves: inserts and resets only append, and compaction, clearing and
//! polls run in or after applying a batch. So a departure's (slot, position) still names its
//! timer's old item when it is applied. Applying a batch first writes the tombstones of its
//! removals and counts its resets' items in the slot's [`stale`](Slot::stale), then updates the
//! live counts: a slot compacted while counting has no stale item past its cursor but tombstones,
//! unless `stale` says otherwise, and [`compact`](Wheel::compact) then keeps every other item
//! without looking its record up. A reset leaves no tombstone: in a reset-heavy load (W3) the store
//! costs more than the look-ups it would save. Until a departure is applied, a slot's `live` counts
//! it as live, so a slot is never cleared under a pending departure, and
//! [`first_live_slot`](super::tiers::Tiers::first_live_slot) passes over a slot that holds only
//! departures for [`next_expiration`](crate::TimerQueue::next_expiration).
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

use super::tiers::Departed;
#[cfg(doc)]
use super::{tiered::Tiered, tiers::Slot};
use super::{Wheel, NIL, TOUCH};

/// What an applied [`Departure`] leaves in place of its timer's old item: record index
/// [`NIL`], which no record has, so every validity check rejects it without a memory access.
pub(super) const TOMBSTONE: u32 = NIL;

/// Where a removed or reset timer's item was: its slot number and position.
#[derive(Clone, Copy)]
pub(in crate::queue) struct Departure {
    pub(super) slot: u32,
    pub(super) pos: u32,
    /// Whether the item is tombstoned when applied (a removal) or only counted as stale (a
    /// reset: see [`Slot::stale`]).
    pub(super) mark: bool,
}

impl Departed for Departure {
    #[inline]
    fn slot(self) -> usize {
        self.slot as usize
    }
}

impl<T> Wheel<T> {
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

    /// The first half of applying a batch of departures ([`Tiered::apply_batch`]): writes the
    /// tombstones of its removals and counts its resets' items in their slots' `stale`.
    pub(super) fn mark_departed(&mut self, departed: &[Departure]) {
        for departure in departed {
            let (number, pos) = (departure.slot as usize, departure.pos as usize);
            #[cfg(debug_assertions)]
            {
                let item = self.tiers.slots[number].items[pos];
                assert!(
                    item != TOMBSTONE && !self.valid(item, number, pos),
                    "a departure names item {pos} of slot {number}, which is not its stale item"
                );
            }
            if !departure.mark {
                self.tiers.slots[number].stale += 1;
            } else if let Some(item) = self.tiers.slots[number].items.get_mut(pos) {
                *item = TOMBSTONE;
            }
        }
    }

    /// Drops a slot's stale items (and a consumed prefix), keeping the order of the rest.
    #[inline(never)]
    pub(super) fn compact(&mut self, number: usize) {
        let start = self.tiers.take_consumed(number);
        let lookup = core::mem::take(&mut self.tiers.slots[number].stale) != 0;
        let mut items = core::mem::take(&mut self.tiers.slots[number].items);
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
        self.tiers.slots[number].items = items;
    }
}
