//! [`SlimWheel::check_invariants`]: the `Wheel`'s invariants (`wheel/check.rs`), over items
//! that carry their generation.
//!
//! 1. **Placement.** A live timer's effective deadline `d` is at or after `now`; its current
//!    item sits on the lowest level whose absorbed range reaches `d` (items a level has
//!    already taken in of the slot it is absorbing count as within its range), in the ring
//!    slot of `d`.
//! 2. **No aliasing.** The slot indices a level holds span less than [`RING`] from `now`'s.
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

use super::level::{index, parent};
use super::slots::{COMPACT_RATIO, COMPACT_SLACK};
use super::{SlimWheel, Tiered, RING};

/// How often a debug build checks the invariants of a wheel holding more than
/// [`CHECK_SMALL`] timers: once in this many polls that caught up.
#[cfg(debug_assertions)]
const CHECK_EVERY: u32 = 1024;

/// Up to this many timers, a debug build checks the invariants at every poll that caught up.
#[cfg(debug_assertions)]
const CHECK_SMALL: usize = 64;

impl<T> SlimWheel<T> {
    /// A debug build's sampled [`check_invariants`](SlimWheel::check_invariants).
    #[cfg(debug_assertions)]
    pub(super) fn debug_check(&mut self) {
        self.caught_up = self.caught_up.wrapping_add(1);
        if self.len() <= CHECK_SMALL || self.caught_up % CHECK_EVERY == 0 {
            self.check_invariants();
        }
    }

    /// Checks the wheel's invariants (listed in `check.rs`, those of the `Wheel`'s module
    /// docs) and panics naming the first one broken. O(slots + items + records): for tests,
    /// fuzzing and debugging. Debug builds also run it now and then in
    /// [`poll_expired`](SlimWheel::poll_expired).
    pub fn check_invariants(&self) {
        let now = self.now;
        self.check_levels();
        let mut pending = vec![0usize; self.slots.len()];
        for &number in &self.departed {
            assert!(
                (number as usize) < self.slots.len(),
                "(4) a departure names slot {number}, which does not exist"
            );
            pending[number as usize] += 1;
        }
        let mut seen = vec![false; self.store.records()];
        let mut current_total = 0;
        for (number, slot) in self.slots.iter().enumerate() {
            let l = number / RING;
            let occupied = (self.levels[l].occupied >> (number % RING)) & 1 == 1;
            assert_eq!(
                occupied,
                slot.live > 0,
                "(4) occupancy bit of slot {number} (level {l})"
            );
            if slot.live == 0 {
                assert!(slot.items.is_empty(), "(4) empty slot {number} holds items");
                continue;
            }
            let ready = number == self.ready_slot();
            let absorbing = self.absorber(number).and_then(|b| self.levels[b].absorbing);
            let from = if ready {
                self.cursor
            } else {
                absorbing.unwrap_or(0)
            };
            let mut current = 0;
            for (pos, &item) in slot.items.iter().enumerate() {
                if !self.store.valid(item, number) {
                    continue;
                }
                assert!(
                    pos >= from,
                    "(3) a current item before slot {number}'s cursor"
                );
                assert!(
                    !core::mem::replace(&mut seen[item.index as usize], true),
                    "(4) record {} has two current items",
                    item.index
                );
                let d = self.store.deadline(item.index);
                assert!(d >= now, "(1) a live timer due at {d} behind now {now}");
                let level = &self.levels[l];
                let taken_in =
                    level.absorbing.is_some() && parent(d, l) == level.absorbed.wrapping_add(1);
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
                current += 1;
            }
            assert_eq!(
                current + pending[number],
                slot.live,
                "(4) live count of slot {number}"
            );
            if !ready && absorbing.is_none() {
                assert!(
                    slot.items.len() <= COMPACT_RATIO * slot.live + COMPACT_SLACK,
                    "(5) slot {number} holds {} items for {} live",
                    slot.items.len(),
                    slot.live
                );
            }
            current_total += current;
        }
        assert_eq!(
            current_total,
            self.len(),
            "(4) every live record has exactly one current item"
        );
    }
}
