//! A [`Lean`]'s slot storage (the [`SlimWheel`]'s and the
//! [`IdWheel`](crate::queue::IdWheel)'s): a vector of [`Item`]s in insertion order, stale ones
//! among them, and the compaction that bounds them (see the module docs, "Design"); the batched
//! accounting is both wheels' (`wheel/tiered.rs`).
//!
//! # Departures
//!
//! A cancel or a reset does not touch the slot its timer leaves: it appends the slot's number to a
//! buffer, and [`Tiered::apply_departures`] applies them, when [`DEPART_BATCH`] have gathered and
//! at the start of every poll, as the `Wheel` does (`wheel/slots.rs`). Applying one decrements the
//! slot's live count; a slot left with no live timer is cleared, and one holding more than
//! [`COMPACT_RATIO`] items a live one (plus [`COMPACT_SLACK`]) is compacted (`wheel/tiered.rs`,
//! `wheel/tiers.rs`). Until a departure is applied the slot's `live` counts it, so a slot is never
//! cleared under a pending departure.
//!
//! A slot whose vector is full is compacted instead of grown when at least a quarter of its
//! items are stale: resets append items at the tail of their new slot, and a vector that
//! only doubled would keep twice the room its live items need after every storm of resets.
//!
//! Emptied slots keep their vectors for the next slot of their level, as in the `Wheel`
//! (`wheel/slots.rs`, "Spare vectors").
//!
//! No item is overwritten: an item carries its generation, so compaction tells a stale one by
//! its record alone. It looks every item up (prefetched [`TOUCH`] ahead, branch-free, so the
//! misses overlap) and keeps the current ones in order; no record stores a position, so
//! nothing is rewritten for the items that move.

use super::store::Naming;
#[cfg(doc)]
use super::SlimWheel;
use super::{grow, Lean, TOUCH};
#[cfg(doc)]
use super::{store::Item, Tiered};
use crate::queue::wheel::tiers::{Departed, COMPACT_SLACK};
#[cfg(doc)]
use crate::queue::wheel::tiers::{COMPACT_RATIO, DEPART_BATCH};

/// A departure notes the slot alone: the item it left is told stale by its generation.
impl Departed for u32 {
    #[inline]
    fn slot(self) -> usize {
        self as usize
    }
}

impl<T, N: Naming> Lean<T, N> {
    /// Makes room for an item in slot `number`, which is full: a spare vector if it has none
    /// yet; else compacts it if at least a quarter of its items are stale for sure (its
    /// `live` count includes departures not yet applied, so it overcounts), and grows it
    /// otherwise or if that freed nothing. Out of line: it runs once a vector fills.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room(&mut self, number: usize) {
        if self.tiers.take_spare(number) {
            return;
        }
        let target = &self.tiers.slots[number];
        if target.items.len() >= COMPACT_SLACK && 4 * target.live <= 3 * target.items.len() {
            self.compact(number);
        }
        let target = &mut self.tiers.slots[number];
        if target.items.len() == target.items.capacity() {
            grow(&mut target.items);
        }
    }

    /// Drops a slot's stale items (and a consumed prefix), keeping the order of the rest.
    #[inline(never)]
    pub(super) fn compact(&mut self, number: usize) {
        let start = self.tiers.take_consumed(number);
        let mut items = core::mem::take(&mut self.tiers.slots[number].items);
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
        self.tiers.slots[number].items = items;
    }
}
