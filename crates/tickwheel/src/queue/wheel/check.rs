//! [`Wheel::check_invariants`]: the module docs' invariants, asserted. The checks both wheels
//! make alike (the levels, a slot's occupancy and counts, a timer's placement) are `Tiers`'
//! (`tiers.rs`); this file walks the `Wheel`'s items and records.
//!
//! Checked, in the order they are stated ("Terms and invariants", "Storage"):
//!
//! 1. **Placement.** A live timer's effective deadline `d` is at or after `now`, and its item
//!    sits on the lowest level whose absorbed range reaches `d`, in the ring slot of `d`;
//!    the items a level has already moved down of the slot it is absorbing count as within
//!    its range.
//! 2. **No aliasing.** The slot indices a level holds span less than
//!    [`RING`](crate::queue::wheel::RING) from `now`'s.
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

use super::{Wheel, TOMBSTONE};

impl<T> Wheel<T> {
    /// Checks the wheel's invariants (see the module docs, "Terms and invariants"), and panics
    /// naming the first one broken. It visits every slot and item: O(slots + items), for
    /// tests, fuzzing and debugging. Debug builds also run it now and then on their own, in
    /// [`poll_expired`](crate::TimerQueue::poll_expired).
    pub fn check_invariants(&self) {
        let tiers = &self.tiers;
        tiers.check_levels();
        for (i, departure) in tiers.departed.iter().enumerate() {
            let (number, pos) = (departure.slot as usize, departure.pos as usize);
            let item = tiers.slots.get(number).and_then(|slot| slot.items.get(pos));
            assert!(
                item.is_some_and(|&item| item != TOMBSTONE && !self.valid(item, number, pos)),
                "(4) departure {i} names item {pos} of slot {number}, not a stale item"
            );
            assert!(
                tiers.departed[..i]
                    .iter()
                    .all(|d| (d.slot, d.pos) != (departure.slot, departure.pos)),
                "(4) two departures name item {pos} of slot {number}"
            );
        }
        let pending = tiers.pending_departures();
        let mut valid_total = 0;
        for (number, slot) in tiers.slots.iter().enumerate() {
            let Some(from) = tiers.check_occupancy(number) else {
                continue;
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
                            || tiers
                                .departed
                                .iter()
                                .any(|d| (d.slot as usize, d.pos as usize) == (number, pos)),
                        "(4) stale item {pos} of slot {number} is neither a tombstone nor departing"
                    );
                    continue;
                }
                tiers.check_placement(number, pos, from, self.records.deadline(record));
                valid += 1;
            }
            tiers.check_counts(number, valid, pending[number]);
            valid_total += valid;
        }
        assert_eq!(
            valid_total,
            self.records.len(),
            "(4) every live record has exactly one valid item"
        );
    }
}
