//! A wheel slot's storage: a vector of record indices in insertion order, stale items and
//! tombstones among them, and the compaction that bounds them (see the wheel's module docs,
//! "Storage").

use alloc::vec::Vec;

use super::{grow, Place, Wheel, NIL, RING, TOUCH};

/// A slot is compacted once it holds more than `COMPACT_RATIO` items a live one (plus
/// [`COMPACT_SLACK`]): stale items then cost at most 8 bytes a pending timer (16 with the
/// vector's spare capacity), and draining a slot by removals scans about
/// `COMPACT_RATIO / (COMPACT_RATIO - 1)` items and looks up `1 / (COMPACT_RATIO - 1)` live
/// ones a removal.
pub(super) const COMPACT_RATIO: usize = 3;
/// Stale items a slot may hold beyond its live ones before it is compacted.
pub(super) const COMPACT_SLACK: usize = 32;
/// What [`Wheel::unlink`] leaves in place of a removed timer's item: record index [`NIL`],
/// which no record has, so every validity check rejects it without a memory access.
pub(super) const TOMBSTONE: u32 = NIL;

/// One slot: items in insertion order, some of them stale.
#[derive(Default)]
pub(super) struct Slot {
    /// The record index of each item's timer; [`TOMBSTONE`] for a removed one.
    pub(super) items: Vec<u32>,
    /// Valid items (in the ready slot and a slot being absorbed: valid and not yet taken).
    pub(super) live: usize,
}

impl<T> Wheel<T> {
    /// Appends an item for record `record` to slot `number` and returns its position; the
    /// caller records the place.
    #[inline]
    pub(super) fn push_item(&mut self, number: usize, record: u32) -> usize {
        let target = &mut self.slots[number];
        let pos = target.items.len();
        if pos == target.items.capacity() {
            grow(&mut target.items);
        }
        target.items.push(record);
        target.live += 1;
        self.levels[number / RING].occupy(number % RING);
        pos
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

    /// Detaches a timer from its slot, given the `place` its record held (read by the
    /// caller's key look-up, so the record is not visited twice); its item goes stale where
    /// it is. A removal (`mark`) also overwrites the item with a [`TOMBSTONE`], so that
    /// compaction will skip it without looking up its record.
    #[inline]
    pub(super) fn unlink(&mut self, place: Place, mark: bool) {
        let (slot, pos) = (place.slot, place.pos);
        let target = &mut self.slots[slot as usize];
        if mark {
            // A store, not a load: nothing waits for it.
            if let Some(item) = target.items.get_mut(pos as usize) {
                *item = TOMBSTONE;
            }
        }
        target.live -= 1;
        if target.live == 0 {
            self.clear_slot(slot as usize);
        } else if target.items.len() > COMPACT_RATIO * target.live + COMPACT_SLACK {
            // Counts a consumed prefix (ready slot, slot being absorbed) as garbage too:
            // compaction drops it.
            self.compact(slot as usize);
        }
    }

    /// Empties a slot that holds no live timer (keeping its capacity). Emptying the slot a
    /// level is absorbing completes that absorption.
    #[inline]
    pub(super) fn clear_slot(&mut self, number: usize) {
        if let Some(level) = self.absorber(number) {
            self.levels[level].absorbed_next();
        }
        self.slots[number].items.clear();
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
        while chunk_start < items.len() {
            let chunk_end = items.len().min(chunk_start + TOUCH);
            // Prefetch the records this chunk looks up together.
            self.records.touch(&items[chunk_start..chunk_end]);
            for read in chunk_start..chunk_end {
                let index = items[read];
                if index == TOMBSTONE {
                    // Removed: no record to look up.
                    continue;
                }
                if self.valid(index, number, read) {
                    if kept != read {
                        items[kept] = index;
                        self.records.set_pos(index, kept as u32);
                    }
                    kept += 1;
                }
            }
            chunk_start = chunk_end;
        }
        items.truncate(kept);
        self.slots[number].items = items;
    }
}
