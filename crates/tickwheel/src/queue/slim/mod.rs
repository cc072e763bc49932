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

use super::free::grow;
use super::wheel::level::{self, slot_number};
use super::wheel::tiered::Tiered;
use super::wheel::tiers::Tiers;
use super::wheel::TOUCH;
use super::TimerKey;

mod check;
mod slots;
mod store;
#[cfg(test)]
mod tests;
mod tiered;

use store::{Item, Store};

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
    store: Store<T>,
    /// Levels, clock, slots (items carry their generation; a slot counts no stale items)
    /// and departures (the slot alone): the state the `Wheel` has too.
    tiers: Tiers<Item, (), u32>,
}

impl<T> SlimWheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> SlimWheel<T> {
        SlimWheel::with_start(0)
    }

    /// An empty wheel whose clock starts at `tick`.
    pub fn with_start(tick: u64) -> SlimWheel<T> {
        SlimWheel {
            store: Store::new(),
            tiers: Tiers::new(tick),
        }
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before its records allocate.
    pub fn with_capacity(capacity: usize) -> SlimWheel<T> {
        SlimWheel {
            store: Store::with_capacity(capacity),
            ..SlimWheel::new()
        }
    }

    /// How many timers the records hold room for without allocating.
    pub fn capacity(&self) -> usize {
        self.store.capacity()
    }

    /// Bytes of memory the wheel holds (its own struct excluded): records, slot vectors at
    /// their capacity and the slot table.
    pub fn allocated_bytes(&self) -> usize {
        self.store.allocated_bytes() + self.tiers.allocated_bytes()
    }

    /// Adds a timer that fires at tick `deadline` (or at the next poll if `deadline <= now()`)
    /// and returns its key.
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.tiers.now);
        let number = slot_number(deadline, self.tiers.level_of(deadline));
        let item = self.store.insert(deadline, value, number as u32);
        self.push_item(number, item);
        item.key()
    }

    /// Removes a pending timer and returns its value; `None` for a stale key.
    #[inline]
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        self.store.touch_value(key);
        let (index, slot) = self.store.find(key)?;
        let value = self.store.take(index);
        self.depart(slot);
        Some(value)
    }

    /// Removes a pending timer and drops its value; `false` for a stale key. A value without
    /// drop glue is not read, so the cancel touches the timer's hot record alone: cheaper
    /// than [`remove`](Self::remove) when nobody wants the value back.
    #[inline]
    pub fn cancel(&mut self, key: TimerKey) -> bool {
        let Some((index, slot)) = self.store.find(key) else {
            return false;
        };
        self.store.discard(index);
        self.depart(slot);
        true
    }

    /// Moves a pending timer to a new deadline, as if removed and inserted again (it goes
    /// behind timers already due at the same tick), and returns its **new key**; `key` is
    /// stale from then on. `None` (and nothing changes) for a stale key.
    #[inline]
    #[must_use = "the timer has a new key: the one passed in is stale"]
    pub fn reset(&mut self, key: TimerKey, deadline: u64) -> Option<TimerKey> {
        self.store.touch_deadline(key);
        let (index, slot) = self.store.find(key)?;
        let deadline = deadline.max(self.tiers.now);
        let number = slot_number(deadline, self.tiers.level_of(deadline));
        let item = self.store.rekey(index, deadline, number as u32);
        self.push_item(number, item);
        self.depart(slot);
        Some(item.key())
    }

    /// The effective deadline of a pending timer; `None` for a stale key.
    #[inline]
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        let (index, _) = self.store.find(key)?;
        Some(self.store.deadline(index))
    }

    /// The value of a pending timer, to read or change in place; `None` for a stale key.
    #[inline]
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.store.get_mut(key)
    }

    /// The number of pending timers.
    #[inline]
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no timer is pending.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The wheel's current tick.
    #[inline]
    pub fn now(&self) -> u64 {
        self.tiers.now
    }

    /// A tick no later than the earliest pending effective deadline; `None` when empty. As
    /// the `Wheel`'s: the first occupied slot's start, or earlier when a step of absorption
    /// is due.
    pub fn next_expiration(&self) -> Option<u64> {
        self.next_tick()
    }

    /// Ticks from `now` until [`next_expiration`](Self::next_expiration): `Some(0)` if a
    /// timer is already due, `None` when the wheel is empty.
    pub fn timeout_until_next(&self, now: u64) -> Option<u64> {
        self.next_expiration().map(|at| at.saturating_sub(now))
    }

    /// Advances the wheel towards tick `now` and returns the next timer due by then, in
    /// firing order, with the key it had; `None` once nothing more is due (and then
    /// [`now()`](Self::now) is `now`, unless `now` was behind it).
    pub fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        self.poll(now)
    }

    /// An iterator that calls [`poll_expired(now)`](Self::poll_expired) until it returns
    /// `None`. Dropping it early leaves the remaining timers queued.
    pub fn drain_expired(&mut self, now: u64) -> impl Iterator<Item = (TimerKey, T)> + '_ {
        core::iter::from_fn(move || self.poll_expired(now))
    }

    /// Releases memory held for timers that are gone: compacts every slot and drops the free
    /// records at the end of the arrays. Keys of pending timers stay valid.
    pub fn shrink_to_fit(&mut self) {
        self.shrink_slots();
        self.store.shrink_to_fit();
    }
}

impl<T> Default for SlimWheel<T> {
    fn default() -> SlimWheel<T> {
        SlimWheel::new()
    }
}

impl<T> fmt::Debug for SlimWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlimWheel")
            .field("now", &self.tiers.now)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
