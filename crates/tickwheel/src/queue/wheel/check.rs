//! [`Wheel::check_invariants`]: the module docs' invariants, asserted.
//!
//! Checked, in the order they are stated ("Terms and invariants", "Storage"):
//!
//! 1. **Placement.** A live timer's effective deadline `d` is at or after `now`, and its item
//!    sits on the lowest level whose absorbed range reaches `d`, in the ring slot of `d`;
//!    the items a level has already moved down of the slot it is absorbing count as within
//!    its range.
//! 2. **No aliasing.** The slot indices a level holds span less than [`RING`] from `now`'s.
//! 3. **Absorption.** Each level's `absorbed` is `now`'s parent slot or the one after; a level
//!    absorbs only a slot the level above holds whole, and nothing valid lies before its
//!    cursor (nor before the ready slot's).
//! 4. **Bookkeeping.** A slot's occupancy bit is set exactly when its `live` count is not
//!    zero, an empty slot holds no items, its `live` counts its valid items plus the
//!    departures from it not yet applied (each naming a distinct stale item, not a
//!    tombstone yet), and the valid items are exactly the live records (each record's place
//!    names one item holding its index). Past its cursor, a slot whose `stale` count is zero
//!    holds no stale item but tombstones and the items of departures not yet applied:
//!    compaction then keeps every other item without looking its record up.
//! 5. **Bounded garbage.** A slot that is neither the ready slot nor being absorbed holds at
//!    most `COMPACT_RATIO` items a live one, plus `COMPACT_SLACK`.

use super::absorb::Tiered;
use super::level::{index, parent};
use super::{Wheel, COMPACT_RATIO, COMPACT_SLACK, RING, TOMBSTONE};

/// How often a debug build checks the invariants of a wheel holding more than
/// [`CHECK_SMALL`] timers: once in this many polls that caught up.
#[cfg(debug_assertions)]
const CHECK_EVERY: u32 = 1024;

/// Up to this many timers, a debug build checks the invariants at every poll that caught up.
#[cfg(debug_assertions)]
const CHECK_SMALL: usize = 64;

impl<T> Wheel<T> {
    /// A debug build's sampled [`check_invariants`](Wheel::check_invariants): at every poll
    /// that caught up while the wheel is small, else at every [`CHECK_EVERY`]th.
    #[cfg(debug_assertions)]
    pub(super) fn debug_check(&mut self) {
        self.caught_up = self.caught_up.wrapping_add(1);
        if self.records.len() <= CHECK_SMALL || self.caught_up % CHECK_EVERY == 0 {
            self.check_invariants();
        }
    }

    /// Checks the wheel's invariants (see the module docs, "Terms and invariants"), and panics
    /// naming the first one broken. It visits every slot and item: O(slots + items), for
    /// tests, fuzzing and debugging. Debug builds also run it now and then on their own, in
    /// [`poll_expired`](crate::TimerQueue::poll_expired).
    pub fn check_invariants(&self) {
        let now = self.now;
        self.check_levels();
        let mut pending = alloc::vec![0usize; self.slots.len()];
        for (i, departure) in self.departed.iter().enumerate() {
            let (number, pos) = (departure.slot as usize, departure.pos as usize);
            let item = self.slots.get(number).and_then(|slot| slot.items.get(pos));
            assert!(
                item.is_some_and(|&item| item != TOMBSTONE && !self.valid(item, number, pos)),
                "(4) departure {i} names item {pos} of slot {number}, not a stale item"
            );
            assert!(
                self.departed[..i]
                    .iter()
                    .all(|d| (d.slot, d.pos) != (departure.slot, departure.pos)),
                "(4) two departures name item {pos} of slot {number}"
            );
            pending[number] += 1;
        }
        let mut valid_total = 0;
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
            let mut valid = 0;
            for (pos, &record) in slot.items.iter().enumerate() {
                if record == TOMBSTONE {
                    continue;
                }
                if !self.valid(record, number, pos) {
                    // Compaction keeps every item that is not a tombstone, unlooked-up, in a
                    // slot whose `stale` count is zero.
                    assert!(
                        pos < from
                            || slot.stale > 0
                            || self
                                .departed
                                .iter()
                                .any(|d| (d.slot as usize, d.pos as usize) == (number, pos)),
                        "(4) stale item {pos} of slot {number} is neither a tombstone nor departing"
                    );
                    continue;
                }
                assert!(pos >= from, "(3) a live item before slot {number}'s cursor");
                let d = self.records.deadline(record);
                assert!(d >= now, "(1) a live timer due at {d} behind now {now}");
                // Items a level has already taken in of the slot it is absorbing count as
                // within its range; the unmoved rest stay above (after the cursor, checked
                // above).
                let level = &self.levels[l];
                let taken_in =
                    level.absorbing.is_some() && parent(d, l) == level.absorbed.wrapping_add(1);
                assert!(
                    (level.reaches(d) || taken_in) && (l == 0 || !self.levels[l - 1].reaches(d)),
                    "(1) a timer due at {d} on level {l}, not the lowest that reaches it"
                );
                assert_eq!(
                    self.levels[l].slot_of(d),
                    number,
                    "(1) a timer due at {d} in the wrong slot"
                );
                assert!(
                    index(d, l) - index(now, l) < RING as u64,
                    "(2) level {l} holds slot {} beyond now's {}",
                    index(d, l),
                    index(now, l)
                );
                valid += 1;
            }
            assert_eq!(
                valid + pending[number],
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
            valid_total += valid;
        }
        assert_eq!(
            valid_total,
            self.records.len(),
            "(4) every live record has exactly one valid item"
        );
    }
}
