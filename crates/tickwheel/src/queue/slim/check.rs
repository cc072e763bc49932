//! [`SlimWheel::check_invariants`] (and the `IdWheel`'s): the `Wheel`'s invariants
//! (`wheel/check.rs`), over items that carry their generation. The checks both wheels make alike are `Tiers`'
//! (`wheel/tiers.rs`); this file walks a [`Lean`]'s items and records.
//!
//! 1. **Placement.** A live timer's effective deadline `d` is at or after `now`; its current
//!    item sits on the lowest level whose absorbed range reaches `d` (items a level has
//!    already taken in of the slot it is absorbing count as within its range), in the ring
//!    slot of `d`.
//! 2. **No aliasing.** The slot indices a level holds span less than
//!    [`RING`](crate::queue::wheel::RING) from `now`'s.
//! 3. **Absorption.** Each level's `absorbed` is `now`'s parent slot or the one after; a level
//!    absorbs only a slot the level above holds whole, and no current item lies before its
//!    cursor (nor before the ready slot's).
//! 4. **Bookkeeping.** A slot's occupancy bit is set exactly when its `live` count is not
//!    zero, an empty slot holds no items, its `live` counts its current items plus the
//!    departures from it not yet applied, and the current items are exactly the live records,
//!    one each.
//! 5. **Bounded garbage.** A slot that is neither the ready slot nor being absorbed holds at
//!    most `COMPACT_RATIO` items a live one, plus `COMPACT_SLACK`.

use alloc::vec;

use super::store::Naming;
use super::{Lean, SlimWheel};

impl<T> SlimWheel<T> {
    /// Checks the wheel's invariants (listed in `check.rs`, those of the `Wheel`'s module
    /// docs) and panics naming the first one broken. O(slots + items + records): for tests,
    /// fuzzing and debugging. Debug builds also run it now and then in
    /// [`poll_expired`](SlimWheel::poll_expired).
    pub fn check_invariants(&self) {
        self.lean.check_invariants();
    }
}

impl<T, N: Naming> Lean<T, N> {
    /// Checks a `Lean`'s invariants (the wheels' `check_invariants`).
    pub(in crate::queue) fn check_invariants(&self) {
        let tiers = &self.tiers;
        tiers.check_levels();
        let pending = tiers.pending_departures();
        let mut seen = vec![false; self.store.records()];
        let mut current_total = 0;
        for (number, slot) in tiers.slots.iter().enumerate() {
            let Some(from) = tiers.check_occupancy(number) else {
                continue;
            };
            let mut current = 0;
            for (pos, &item) in slot.items.iter().enumerate() {
                if !self.store.valid(item, number) {
                    continue;
                }
                assert!(
                    !core::mem::replace(&mut seen[item.index as usize], true),
                    "(4) record {} has two current items",
                    item.index
                );
                tiers.check_placement(number, pos, from, self.store.deadline(item.index));
                current += 1;
            }
            tiers.check_counts(number, current, pending[number]);
            current_total += current;
        }
        assert_eq!(
            current_total,
            self.store.len(),
            "(4) every live record has exactly one current item"
        );
    }
}
