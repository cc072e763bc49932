//! The slim wheel: the [`Wheel`](super::Wheel)'s levels and pacing over 8-byte records, for
//! a reset that hands out a new key.
//!
//! # When to pick it
//!
//! [`SlimWheel`] keeps everything that makes the `Wheel` the default (exact firing order,
//! any `u64` deadline, no stall when a slot moves down, bounded memory, generational keys)
//! but one guarantee: **[`reset`](SlimWheel::reset) returns a new key**, and the key it was
//! given is stale from then on, exactly as if the timer had been removed and inserted again.
//! It is not a [`TimerQueue`](super::TimerQueue), whose reset keeps the key.
//!
//! In return, an operation by key touches an 8-byte hot record where the `Wheel`'s is 12 bytes plus
//! the value (16 for a `u32`), and [`cancel`](SlimWheel::cancel) reads no value when the value has
//! no drop glue (a `u32`, an index, a plain struct). With a million timers pending, every cancel
//! and reset waits for its record's cache miss, and the smaller array (8 MB instead of 16) misses
//! less often in the last-level cache, which `tickwheel bench` and the lab's `queue_floors` measure
//! at that size. Pick `SlimWheel` when the caller stores the key it gets back from a reset anyway
//! (a connection keeps its idle timer's key in its own struct) and holds many timers; pick the
//! `Wheel` when a key must stay valid across resets (it is shared, or held where it cannot be
//! rewritten), and for the [`TimerQueue`](super::TimerQueue) trait.
//!
//! The rest of the contract is the `Wheel`'s, word for word (`queue` module docs): effective
//! deadline `max(d, now)`, firing in (effective deadline, insertion order) with a reset
//! counting as a new insertion, never early, never twice, time only forward, any `u64`
//! deadline, stale keys touching nothing, `next_expiration` a lower bound.
//!
//! # Design
//!
//! The levels, their two rotations, absorption and its pacing are the `Wheel`'s (its module
//! docs, "Terms and invariants", "Pacing", "Expiry", and `wheel/level.rs`), in one
//! implementation for both (`wheel/tiers.rs`, `wheel/tiered.rs`). What differs is storage
//! (`store.rs`):
//!
//! * A timer is an **8-byte hot record** (its key's generation and its current slot), with
//!   the deadline and the value in arrays of their own.
//! * An **item** is 8 bytes: the record's index and the generation it was appended with.
//!   It is current exactly when the record holds that generation and names its slot. A reset
//!   bumps the generation (hence the new key), so the item it left is stale without a
//!   position in the record to compare; a move down a level keeps the generation, and the
//!   record's slot tells the copies apart.
//! * A cancel or a reset notes the slot its timer left (4 bytes) and moves on; the slots'
//!   live counts, clearing and compaction are applied 64 at a time (`slots.rs`), as in the
//!   `Wheel`. Compaction looks up every item, prefetched, and rewrites no record.
//!
//! # Costs
//!
//! Insert, cancel, remove and reset are O(1) (amortized, for compaction); a timer moves at most
//! once a level. Memory a pending timer: hot record 8 bytes, deadline 8, value `size_of::<T>()`,
//! item 8 — 28 bytes for a `u32` value — plus at most 16 bytes of stale items awaiting compaction
//! (a slot is compacted past three items a live one, plus 32, and a full slot at least a quarter
//! stale rather than grown) and the vectors' spare capacity. A freed record stays for reuse, with 4
//! bytes on the free stack; [`shrink_to_fit`](SlimWheel::shrink_to_fit) drops the free records at
//! the end of the arrays and compacts every slot. [`SlimWheel::allocated_bytes`] reports the total.

use core::fmt;

use super::free::{grow, FreeStack};
use super::wheel::level::{self, slot_number};
use super::wheel::tiered::Tiered;
use super::wheel::tiers::Tiers;
use super::wheel::TOUCH;
use super::TimerKey;

mod check;
mod slots;
pub(in crate::queue) mod store;
#[cfg(test)]
mod tests;
mod tiered;

use store::{Item, Naming, Store};

/// The methods the [`SlimWheel`] and the [`IdWheel`](super::IdWheel) have alike, over their
/// `lean` field: `len`, `is_empty`, `now`, `next_expiration`, `timeout_until_next`,
/// `poll_expired` (a timer comes out named by `$name`, with the doc `$poll`) and
/// `drain_expired`.
macro_rules! lean_wheel_methods {
    ($name:ty, $poll:literal) => {
        /// The number of pending timers.
        #[inline]
        pub fn len(&self) -> usize {
            self.lean.store.len()
        }

        /// Whether no timer is pending.
        #[inline]
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// The wheel's current tick.
        #[inline]
        pub fn now(&self) -> u64 {
            self.lean.tiers.now
        }

        /// A tick no later than the earliest pending effective deadline; `None` when empty.
        /// As the `Wheel`'s: the first occupied slot's start, or earlier when a step of
        /// absorption is due.
        pub fn next_expiration(&self) -> Option<u64> {
            self.lean.next_tick()
        }

        /// Ticks from `now` until [`next_expiration`](Self::next_expiration): `Some(0)` if a
        /// timer is already due, `None` when the wheel is empty.
        pub fn timeout_until_next(&self, now: u64) -> Option<u64> {
            self.lean.next_tick().map(|at| at.saturating_sub(now))
        }

        #[doc = $poll]
        pub fn poll_expired(&mut self, now: u64) -> Option<($name, T)> {
            self.lean.poll(now)
        }

        /// An iterator that calls [`poll_expired(now)`](Self::poll_expired) until it returns
        /// `None`. Dropping it early leaves the remaining timers queued.
        pub fn drain_expired(&mut self, now: u64) -> impl Iterator<Item = ($name, T)> + '_ {
            core::iter::from_fn(move || self.poll_expired(now))
        }
    };
}
pub(in crate::queue) use lean_wheel_methods;

/// What the [`SlimWheel`] and the [`IdWheel`](super::IdWheel) are made of: records
/// (`store.rs`, `N` the part they do differently) and the `Wheel`'s levels, clock, slots
/// (items carry their generation; a slot counts no stale items) and departures (the slot
/// alone). The logic they share with the `Wheel` is [`Tiered`]'s (`tiered.rs`); the slots'
/// compaction (`slots.rs`) and the invariants (`check.rs`) are this type's.
pub(in crate::queue) struct Lean<T, N> {
    pub(in crate::queue) store: Store<T, N>,
    pub(in crate::queue) tiers: Tiers<Item, (), u32>,
}

impl<T, N: Naming> Lean<T, N> {
    /// Takes every pending timer out as a cancel does (its value dropped, its record freed,
    /// its slot told), record by record; the clock stays where it is. The walk ends at the
    /// records' end at the latest, and earlier once the last timer is out.
    pub(in crate::queue) fn clear(&mut self) {
        for index in 0..self.store.records() as u32 {
            if self.store.len() == 0 {
                break;
            }
            if let Some(slot) = self.store.slot_of(index) {
                self.store.discard(index);
                self.depart(slot);
            }
        }
        debug_assert_eq!(self.store.len(), 0, "clear left a timer");
    }

    /// `store`, and empty levels with the clock at `tick`.
    pub(in crate::queue) fn new(store: Store<T, N>, tick: u64) -> Self {
        Lean {
            store,
            tiers: Tiers::new(tick),
        }
    }

    /// Bytes held: records, slot vectors at their capacity and the slot table.
    pub(in crate::queue) fn allocated_bytes(&self) -> usize {
        self.store.allocated_bytes() + self.tiers.allocated_bytes()
    }

    /// The effective deadline of a timer due at `deadline`, and its slot number.
    #[inline]
    pub(in crate::queue) fn place(&self, deadline: u64) -> (u64, usize) {
        let deadline = deadline.max(self.tiers.now);
        (
            deadline,
            slot_number(deadline, self.tiers.level_of(deadline)),
        )
    }

    /// Items in all slots, stale ones included, for tests of the bound on garbage.
    #[cfg(test)]
    pub(in crate::queue) fn items(&self) -> usize {
        self.tiers.slots.iter().map(|slot| slot.items.len()).sum()
    }

    /// The wheel's `Debug`: its clock and timers.
    pub(in crate::queue) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("now", &self.tiers.now)
            .field("len", &self.store.len())
            .finish_non_exhaustive()
    }
}

/// A hierarchical timing wheel with 8-byte records whose [`reset`](SlimWheel::reset) returns
/// a new key. See the [module docs](self) for when to pick it over the [`Wheel`](super::Wheel).
///
/// ```
/// use tickwheel::SlimWheel;
///
/// let mut wheel = SlimWheel::with_start(1_000);
/// let mut idle = wheel.insert(31_000, "close idle connection");
/// wheel.insert(1_250, "retransmit");
///
/// // A packet arrives at tick 1_100: push the idle timeout back, and keep the new key.
/// let old = idle;
/// idle = wheel.reset(idle, 1_100 + 30_000).expect("pending");
/// assert_eq!(wheel.deadline(old), None, "the old key is stale");
/// assert_eq!(wheel.deadline(idle), Some(31_100));
///
/// let mut fired = Vec::new();
/// for tick in [1_249, 1_250, 40_000] {
///     fired.extend(wheel.drain_expired(tick).map(|(_, what)| (tick, what)));
/// }
/// assert_eq!(fired, [(1_250, "retransmit"), (40_000, "close idle connection")]);
/// assert!(wheel.is_empty());
/// ```
pub struct SlimWheel<T> {
    /// Records with a free stack, and the `Wheel`'s levels.
    lean: Lean<T, FreeStack>,
}

impl<T> SlimWheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> SlimWheel<T> {
        SlimWheel::with_start(0)
    }

    /// An empty wheel whose clock starts at `tick`.
    pub fn with_start(tick: u64) -> SlimWheel<T> {
        SlimWheel {
            lean: Lean::new(Store::new(), tick),
        }
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before its records allocate.
    pub fn with_capacity(capacity: usize) -> SlimWheel<T> {
        SlimWheel {
            lean: Lean::new(Store::with_capacity(capacity), 0),
        }
    }

    /// How many timers the records hold room for without allocating.
    pub fn capacity(&self) -> usize {
        self.lean.store.capacity()
    }

    /// Bytes of memory the wheel holds (its own struct excluded): records, slot vectors at
    /// their capacity and the slot table.
    pub fn allocated_bytes(&self) -> usize {
        self.lean.allocated_bytes()
    }

    /// Adds a timer that fires at tick `deadline` (or at the next poll if `deadline <= now()`)
    /// and returns its key.
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let (deadline, number) = self.lean.place(deadline);
        let item = self.lean.store.insert(deadline, value, number as u32);
        self.lean.push_item(number, item);
        item.key()
    }

    /// Removes a pending timer and returns its value; `None` for a stale key.
    #[inline]
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        self.lean.store.touch_value_at(key.index());
        let (index, slot) = self.lean.store.find(key)?;
        let value = self.lean.store.take(index);
        self.lean.depart(slot);
        Some(value)
    }

    /// Removes a pending timer and drops its value; `false` for a stale key. A value without
    /// drop glue is not read, so the cancel touches the timer's hot record alone: cheaper
    /// than [`remove`](Self::remove) when nobody wants the value back.
    #[inline]
    pub fn cancel(&mut self, key: TimerKey) -> bool {
        let Some((index, slot)) = self.lean.store.find(key) else {
            return false;
        };
        self.lean.store.discard(index);
        self.lean.depart(slot);
        true
    }

    /// Moves a pending timer to a new deadline, as if removed and inserted again (it goes
    /// behind timers already due at the same tick), and returns its **new key**; `key` is
    /// stale from then on. `None` (and nothing changes) for a stale key.
    #[inline]
    #[must_use = "the timer has a new key: the one passed in is stale"]
    pub fn reset(&mut self, key: TimerKey, deadline: u64) -> Option<TimerKey> {
        self.lean.store.touch_deadline_at(key.index());
        let (index, slot) = self.lean.store.find(key)?;
        let (deadline, number) = self.lean.place(deadline);
        let item = self.lean.store.rekey(index, deadline, number as u32);
        self.lean.push_item(number, item);
        self.lean.depart(slot);
        Some(item.key())
    }

    /// The effective deadline of a pending timer; `None` for a stale key.
    #[inline]
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        let (index, _) = self.lean.store.find(key)?;
        Some(self.lean.store.deadline(index))
    }

    /// Removes every pending timer and drops its value, as [`cancel`](Self::cancel) would
    /// one by one. The clock stays where it is, and every key issued so far is stale from
    /// then on.
    pub fn clear(&mut self) {
        self.lean.clear();
    }

    /// The value of a pending timer; `None` for a stale key.
    #[inline]
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.lean.store.get(key)
    }

    /// The value of a pending timer, to read or change in place; `None` for a stale key.
    #[inline]
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.lean.store.get_mut(key)
    }

    lean_wheel_methods! {
        TimerKey,
        "Advances the wheel towards tick `now` and returns the next timer due by then, in \
         firing order, with the key it had; `None` once nothing more is due (and then \
         [`now()`](Self::now) is `now`, unless `now` was behind it)."
    }

    /// Releases memory held for timers that are gone: compacts every slot and drops the free
    /// records at the end of the arrays. Keys of pending timers stay valid.
    pub fn shrink_to_fit(&mut self) {
        self.lean.shrink_slots();
        self.lean.store.shrink_to_fit();
    }
}

impl<T> Default for SlimWheel<T> {
    fn default() -> SlimWheel<T> {
        SlimWheel::new()
    }
}

impl<T> fmt::Debug for SlimWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.lean.debug("SlimWheel", f)
    }
}
