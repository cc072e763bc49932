//! The [`SlimWheel`]'s side of the absorption and stepping it shares with the `Wheel`
//! (`wheel/absorb.rs`): items carry their generation, valid while their record's is the same
//! and its slot names theirs, and a move down keeps the item, so the key.

use alloc::vec::Vec;

use super::level::{slot_number, Level};
use super::store::Item;
use super::{SlimWheel, Tiered, LEVELS};

impl<T> Tiered for SlimWheel<T> {
    type Item = Item;

    #[inline]
    fn levels(&self) -> &[Level; LEVELS] {
        &self.levels
    }

    #[inline]
    fn levels_mut(&mut self) -> &mut [Level; LEVELS] {
        &mut self.levels
    }

    #[inline]
    fn clock(&self) -> u64 {
        self.now
    }

    #[inline]
    fn set_clock(&mut self, now: u64) {
        self.now = now;
    }

    #[inline]
    fn settled(&self) -> u64 {
        self.settled
    }

    #[inline]
    fn set_settled(&mut self, settled: u64) {
        self.settled = settled;
    }

    #[inline]
    fn slot_mut(&mut self, number: usize) -> (&mut Vec<Item>, &mut usize) {
        let slot = &mut self.slots[number];
        (&mut slot.items, &mut slot.live)
    }

    #[inline]
    fn slot_sizes(&self, number: usize) -> (usize, usize) {
        let slot = &self.slots[number];
        (slot.items.len(), slot.live)
    }

    #[inline]
    fn touch_moving(&self, items: &[Item]) {
        self.store.touch(items);
        self.store.touch_deadlines(items);
    }

    #[inline]
    fn current(&self, item: Item, number: usize, _pos: usize) -> bool {
        self.store.valid(item, number)
    }

    #[inline]
    fn item_deadline(&self, item: Item) -> u64 {
        self.store.deadline(item.index)
    }

    /// Keeps the item's generation: a move down keeps the key.
    #[inline]
    fn move_down(&mut self, item: Item, deadline: u64, level: usize) {
        let below = slot_number(deadline, level);
        self.push_item(below, item);
        self.store.set_slot(item.index, below as u32);
    }

    #[inline]
    fn empty_slot(&mut self, number: usize) {
        self.clear_slot(number);
    }
}
