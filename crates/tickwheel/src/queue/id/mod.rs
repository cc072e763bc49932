//! The id wheel: the [`SlimWheel`](super::SlimWheel) named by the caller's own ids, for a
//! cancel or reset whose record is known before anything is loaded.
//!
//! # When to pick it
//!
//! [`IdWheel`] is the `SlimWheel` (the [`Wheel`](super::Wheel)'s levels and pacing over
//! 8-byte records) with the key taken away: the caller names each timer by a dense `u32` id,
//! an index into its own table or slab (a connection's slot number, an entity's index), and
//! passes that id to every operation. Pick it when the caller has such an id anyway and holds
//! many timers (10^5 and up) that are cancelled or reset at random: a reset or cancel computes
//! the address of its record from the id alone, so the record's cache miss starts at once and
//! overlaps the caller's own (loading the entry that holds the id), where a keyed queue has to
//! wait for the entry to load the key before it can start on the record. That is how the lazy
//! `BinaryHeap` that `tickwheel bench` compares against is driven, and the lab's `queue_floors`
//! (`split/by id`, and the `IdWheel` row) shows that this, more than anything else, is why the
//! keyed wheels trail it at 10^6 timers on random resets (W3).
//!
//! Pick the `SlimWheel` when the ids would be sparse or unbounded (its records follow the
//! timers pending, an `IdWheel`'s the largest id used) or when the caller has no id to give;
//! pick the `Wheel` when a key must stay valid across resets, and for the
//! [`TimerQueue`](super::TimerQueue) trait.
//!
//! # The contract
//!
//! * **Ids.** Ids are `0..id_limit`, set at construction ([`IdWheel::new`]) and raised with
//!   [`raise_id_limit`](IdWheel::raise_id_limit). At most one timer is pending on an id. No
//!   key is handed out or stored anywhere: a timer *is* its id while it is pending.
//! * **Insert replaces.** [`insert`](IdWheel::insert) on an id that already has a pending
//!   timer replaces it, as `HashMap::insert` does: the old value comes back, and the new
//!   timer counts as a new insertion for the firing order. An id at or above the limit is an
//!   error, [`IdOutOfRange`], which hands the value back: never a panic, and never an
//!   allocation sized by the id.
//! * **Idle ids.** [`reset`](IdWheel::reset), [`cancel`](IdWheel::cancel),
//!   [`remove`](IdWheel::remove), [`deadline`](IdWheel::deadline) and
//!   [`get_mut`](IdWheel::get_mut) on an id with no pending timer (never used, fired,
//!   removed, or out of range) return `false`/`None` and change nothing.
//! * The rest is the `Wheel`'s, word for word (`queue` module docs): effective deadline
//!   `max(d, now)`, firing in (effective deadline, insertion order) with a reset counting as a
//!   new insertion, never early, never twice, time only forward, any `u64` deadline,
//!   `next_expiration` a lower bound. [`poll_expired`](IdWheel::poll_expired) hands back the
//!   id with the value, and the id is idle from then on.
//!
//! # Design
//!
//! The records are the `SlimWheel`'s (`slim/store.rs`), at index `id`, and so is all the
//! logic (the levels and their pacing are the `Wheel`'s, `wheel/tiered.rs`; the slots'
//! compaction and the invariants are the `SlimWheel`'s, `slim/slots.rs` and `slim/check.rs`,
//! generic over both). There is no free stack: a record waits at its id.
//!
//! Each record keeps a generation, never exposed, that goes up at every insert and reset on
//! its id; an item in a slot carries the generation it was appended with, so the items a
//! reset, a cancel or a firing left behind are told stale exactly as in the `SlimWheel`. The
//! `SlimWheel` retires a record whose generation is spent; an id cannot be retired, so when a
//! record's generation would pass `u32::MAX` (after 4 294 967 295 inserts and resets on one
//! id), the wheel takes the id's timer out, compacts every slot, consumed prefixes included
//! (after which no slot holds an item of that id), restarts the generation at 0 and takes the
//! timer back in, as the new insertion an insert or a reset is anyway. That costs one pass
//! over every item, once in 2^32 operations on one id.
//!
//! # Costs
//!
//! Insert, cancel, remove and reset are O(1) (amortized, for compaction and growth); a timer
//! moves at most once a level. **Memory is sized by the largest id used**, not by the timers
//! pending: every id below it has a record, pending or idle, of 16 bytes plus
//! `size_of::<T>()` (hot record 8, deadline 8, value; 20 bytes for a `u32` value), and the
//! arrays grow by doubling up to the id limit, so up to twice that until
//! [`shrink_to_fit`](IdWheel::shrink_to_fit). A pending timer adds its item (8 bytes) and at
//! most 16 bytes of stale items awaiting compaction, as in the `SlimWheel`.
//! [`IdWheel::allocated_bytes`] reports the total.

use core::fmt;

use super::slim::store::Store;
use super::slim::{lean_wheel_methods, Lean};
use super::wheel::tiered::Tiered;

mod store;
#[cfg(test)]
mod tests;

use store::ById;

/// A hierarchical timing wheel whose timers are named by the caller's dense `u32` ids. See
/// the [module docs](self) for its contract and for when to pick it over the
/// [`SlimWheel`](super::SlimWheel).
///
/// ```
/// use tickwheel::IdWheel;
///
/// // Connections live in the caller's slab; a connection's index is its timer's id.
/// let mut wheel = IdWheel::with_start(1_024, 1_000);
/// wheel.insert(7, 31_000, "close idle connection 7").unwrap();
/// wheel.insert(3, 1_250, "retransmit on 3").unwrap();
///
/// // A packet arrives on connection 7 at tick 1_100: push its idle timeout back.
/// assert!(wheel.reset(7, 1_100 + 30_000));
/// assert_eq!(wheel.deadline(7), Some(31_100));
///
/// // Inserting on an id that has a timer replaces it and hands the old value back.
/// assert_eq!(wheel.insert(3, 1_200, "retransmit on 3, sooner"), Ok(Some("retransmit on 3")));
///
/// // An id past the limit is an error that hands the value back.
/// let refused = wheel.insert(5_000, 2_000, "nowhere").unwrap_err();
/// assert_eq!((refused.id(), refused.into_value()), (5_000, "nowhere"));
///
/// let mut fired = Vec::new();
/// for tick in [1_199, 1_200, 40_000] {
///     fired.extend(wheel.drain_expired(tick).map(|(id, what)| (tick, id, what)));
/// }
/// assert_eq!(
///     fired,
///     [(1_200, 3, "retransmit on 3, sooner"), (40_000, 7, "close idle connection 7")]
/// );
/// assert!(wheel.is_empty());
/// assert!(!wheel.cancel(7), "a fired id is idle");
/// ```
pub struct IdWheel<T> {
    /// Records at the ids, and the `Wheel`'s levels.
    lean: Lean<T, ById>,
    /// Ids are below this.
    id_limit: u32,
}

/// [`IdWheel::insert`] was given an id at or above the wheel's id limit. It hands the value
/// back ([`into_value`](IdOutOfRange::into_value)); the wheel did not change.
#[derive(Clone, PartialEq, Eq)]
pub struct IdOutOfRange<T> {
    id: u32,
    id_limit: u32,
    value: T,
}

impl<T> IdOutOfRange<T> {
    /// The id that was refused.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The wheel's id limit at the time: ids are `0..id_limit`.
    pub fn id_limit(&self) -> u32 {
        self.id_limit
    }

    /// The value that was not inserted.
    pub fn into_value(self) -> T {
        self.value
    }
}

/// Prints the id and the limit, not the value (which need not be `Debug`).
impl<T> fmt::Debug for IdOutOfRange<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdOutOfRange")
            .field("id", &self.id)
            .field("id_limit", &self.id_limit)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for IdOutOfRange<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timer id {} is out of range: ids are 0..{}",
            self.id, self.id_limit
        )
    }
}

#[cfg(feature = "std")]
impl<T> std::error::Error for IdOutOfRange<T> {}

impl<T> IdWheel<T> {
    /// An empty wheel at tick 0 for ids `0..id_limit`. Allocates no record yet.
    pub fn new(id_limit: u32) -> IdWheel<T> {
        IdWheel::with_start(id_limit, 0)
    }

    /// An empty wheel for ids `0..id_limit` whose clock starts at `tick`.
    pub fn with_start(id_limit: u32, tick: u64) -> IdWheel<T> {
        IdWheel {
            lean: Lean::new(Store::new(), tick),
            id_limit,
        }
    }

    /// Ids are `0..id_limit()`.
    #[inline]
    pub fn id_limit(&self) -> u32 {
        self.id_limit
    }

    /// Raises the id limit to `id_limit`; a limit at or below the current one changes
    /// nothing. Allocates nothing.
    pub fn raise_id_limit(&mut self, id_limit: u32) {
        self.id_limit = self.id_limit.max(id_limit);
    }

    /// Allocates the records of ids `0..ids` (at most up to the id limit) now, so that
    /// inserting on them allocates nothing.
    pub fn reserve_ids(&mut self, ids: u32) {
        let ids = ids.min(self.id_limit);
        if ids as usize > self.lean.store.records() {
            self.lean.store.grow_to(ids - 1, ids);
        }
    }

    /// How many ids (from 0) have a record allocated: inserting on them allocates no record.
    pub fn id_capacity(&self) -> usize {
        self.lean.store.records()
    }

    /// Bytes of memory the wheel holds (its own struct excluded): records, slot vectors at
    /// their capacity and the slot table.
    pub fn allocated_bytes(&self) -> usize {
        self.lean.allocated_bytes()
    }

    /// Adds a timer on `id` that fires at tick `deadline` (or at the next poll if
    /// `deadline <= now()`). If `id` already has a pending timer, it is replaced, as by
    /// `HashMap::insert`: its value is returned, and the new timer counts as a new insertion.
    ///
    /// # Errors
    ///
    /// [`IdOutOfRange`], holding `value`, when `id >= id_limit()`; nothing changes.
    #[inline]
    pub fn insert(
        &mut self,
        id: u32,
        deadline: u64,
        value: T,
    ) -> Result<Option<T>, IdOutOfRange<T>> {
        if id >= self.id_limit {
            return Err(IdOutOfRange {
                id,
                id_limit: self.id_limit,
                value,
            });
        }
        if id as usize >= self.lean.store.records() {
            self.lean.store.grow_to(id, self.id_limit);
        }
        if self.lean.store.spent(id) {
            return Ok(self.insert_spent(id, deadline, value));
        }
        let (deadline, number) = self.lean.place(deadline);
        let Some(slot) = self.lean.store.slot_of(id) else {
            let item = self.lean.store.occupy(id, deadline, value, number as u32);
            self.lean.push_item(number, item);
            return Ok(None);
        };
        let (item, old) = self.lean.store.replace(id, deadline, value, number as u32);
        self.lean.push_item(number, item);
        self.lean.depart(slot);
        Ok(Some(old))
    }

    /// [`insert`](Self::insert) on an id whose record's generation is spent: takes out the
    /// timer pending on it, if any, restarts the generation, and inserts.
    #[cold]
    #[inline(never)]
    fn insert_spent(&mut self, id: u32, deadline: u64, value: T) -> Option<T> {
        let old = self.remove(id);
        self.restart_generation(id, 0);
        let (deadline, number) = self.lean.place(deadline);
        let item = self.lean.store.occupy(id, deadline, value, number as u32);
        self.lean.push_item(number, item);
        old
    }

    /// Sets the generation of the idle record at `id` to `generation`, after compacting every
    /// slot: no item names the record then (compaction keeps the current items alone, and the
    /// record has none), so no stale item of it can match a later generation.
    fn restart_generation(&mut self, id: u32, generation: u32) {
        self.lean.compact_slots();
        self.lean.store.restart(id, generation);
    }

    /// Removes the pending timer on `id` and returns its value; `None` for an idle id.
    #[inline]
    pub fn remove(&mut self, id: u32) -> Option<T> {
        self.lean.store.touch_value_at(id);
        let slot = self.lean.store.slot_of(id)?;
        let value = self.lean.store.take(id);
        self.lean.depart(slot);
        Some(value)
    }

    /// Removes the pending timer on `id` and drops its value; `false` for an idle id. A
    /// value without drop glue is not read, so the cancel touches the id's hot record alone:
    /// cheaper than [`remove`](Self::remove) when nobody wants the value back.
    #[inline]
    pub fn cancel(&mut self, id: u32) -> bool {
        let Some(slot) = self.lean.store.slot_of(id) else {
            return false;
        };
        self.lean.store.discard(id);
        self.lean.depart(slot);
        true
    }

    /// Moves the pending timer on `id` to a new deadline, as if removed and inserted again
    /// (it goes behind timers already due at the same tick); `false` (and nothing changes)
    /// for an idle id.
    #[inline]
    pub fn reset(&mut self, id: u32, deadline: u64) -> bool {
        self.lean.store.touch_deadline_at(id);
        let Some(slot) = self.lean.store.slot_of(id) else {
            return false;
        };
        if self.lean.store.spent(id) {
            self.reset_spent(id, deadline);
            return true;
        }
        let (deadline, number) = self.lean.place(deadline);
        let item = self.lean.store.bump(id, deadline, number as u32);
        self.lean.push_item(number, item);
        self.lean.depart(slot);
        true
    }

    /// [`reset`](Self::reset) of a timer whose record's generation is spent: a removal and
    /// an insert, which is what a reset is.
    #[cold]
    #[inline(never)]
    fn reset_spent(&mut self, id: u32, deadline: u64) {
        if let Some(value) = self.remove(id) {
            self.insert_spent(id, deadline, value);
        }
    }

    /// The effective deadline of the pending timer on `id`; `None` for an idle id.
    #[inline]
    pub fn deadline(&self, id: u32) -> Option<u64> {
        self.lean.store.slot_of(id)?;
        Some(self.lean.store.deadline(id))
    }

    /// Cancels the timer on every id, dropping its value, as [`cancel`](Self::cancel) would
    /// one by one: every id is idle afterwards, and the clock stays where it is.
    pub fn clear(&mut self) {
        self.lean.clear();
    }

    /// The value of the pending timer on `id`; `None` for an idle id.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&T> {
        self.lean.store.value(id)
    }

    /// The value of the pending timer on `id`, to read or change in place; `None` for an
    /// idle id.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.lean.store.value_mut(id)
    }

    /// Whether a timer is pending on `id`.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.lean.store.slot_of(id).is_some()
    }

    lean_wheel_methods! {
        u32,
        "Advances the wheel towards tick `now` and returns the next timer due by then, in \
         firing order, with its id (idle from then on); `None` once nothing more is due (and \
         then [`now()`](Self::now) is `now`, unless `now` was behind it)."
    }

    /// Releases memory held for timers that are gone: compacts every slot and drops the
    /// records of the idle ids above the largest pending one (inserting there later grows the
    /// arrays again).
    pub fn shrink_to_fit(&mut self) {
        // Every slot compacted: no item names an idle record, so dropping idle records (and
        // their generations: a record grown again starts at 0) leaves nothing to match them.
        self.lean.shrink_slots();
        self.lean.store.truncate_vacant();
    }

    /// Checks the wheel's invariants (the `SlimWheel`'s, `slim/check.rs`) and that no record
    /// lies at or past the id limit, and panics naming the first one broken. Linear in the
    /// slots, items and records: for tests, fuzzing and debugging. Debug builds also check the
    /// `SlimWheel`'s now and then in [`poll_expired`](Self::poll_expired).
    pub fn check_invariants(&self) {
        self.lean.check_invariants();
        assert!(
            self.lean.store.records() <= self.id_limit as usize,
            "records past the id limit"
        );
    }

    /// A test hook, not part of the API: sets the generation of the idle id `id` to `left`
    /// short of the last one, so that a test reaches the generation's restart in a few
    /// operations; `false` (and nothing changes) for a pending or out-of-range id. The stale
    /// items of the id stay where they are, as after 2^32 operations, when the generation
    /// goes up (none of them has a generation above the current one); one that would not go
    /// up is set after compacting every slot, as the restart does, so that none can match.
    ///
    /// Built only with the feature `test-hooks` (and in this crate's unit tests).
    #[cfg(any(test, feature = "test-hooks"))]
    #[doc(hidden)]
    pub fn age_generation_for_tests(&mut self, id: u32, left: u32) -> bool {
        if id >= self.id_limit || self.contains(id) {
            return false;
        }
        if id as usize >= self.lean.store.records() {
            self.lean.store.grow_to(id, self.id_limit);
        }
        let aged = super::free::MAX_GENERATION - left;
        if *self.lean.store.generation_mut(id) < aged {
            self.lean.store.restart(id, aged);
        } else {
            self.restart_generation(id, aged);
        }
        true
    }
}

impl<T> fmt::Debug for IdWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.lean.debug("IdWheel", f)
    }
}
