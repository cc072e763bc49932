//! The `Lean` wheels' side of the logic they share with the `Wheel` (`wheel/tiered.rs`): items
//! carry their generation, valid while their record's is the same and its slot names theirs,
//! and a move down keeps the item, so the key (or the id's generation).

use super::level::slot_number;
use super::store::{Item, Naming};
use super::{Lean, Tiered, Tiers};

impl<T, N: Naming> Tiered for Lean<T, N> {
    type Item = Item;
    type Stale = ();
    type Departure = u32;
    type Value = T;
    type Name = N::Name;

    #[inline]
    fn tiers(&self) -> &Tiers<Item, (), u32> {
        &self.tiers
    }

    #[inline]
    fn tiers_mut(&mut self) -> &mut Tiers<Item, (), u32> {
        &mut self.tiers
    }

    #[inline]
    fn timers(&self) -> usize {
        self.store.len()
    }

    #[inline]
    fn touch_ready(&self, items: &[Item]) {
        self.store.touch(items);
        self.store.touch_values(items);
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
    fn fire(&mut self, item: Item) -> Option<(N::Name, T)> {
        Some((N::name(item), self.store.take(item.index)))
    }

    #[inline]
    fn make_room(&mut self, number: usize) {
        Lean::make_room(self, number);
    }

    #[inline]
    fn compact(&mut self, number: usize) {
        Lean::compact(self, number);
    }

    /// Nothing to mark: an item carries its generation, so it is told stale by its record.
    #[inline]
    fn mark_departed(&mut self, _departed: &[u32]) {}

    fn check_all(&self) {
        self.check_invariants();
    }
}
