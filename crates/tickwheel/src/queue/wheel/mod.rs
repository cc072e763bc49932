//! The hierarchical timing wheel: tickwheel's default queue.
//!
//! Varghese & Lauck's scheme 7 ("Hashed and Hierarchical Timing Wheels", 1987), as in the Linux
//! kernel's tv1..tv5 and tokio's driver: level `L` resolves bits `6L..6L+6` of the deadline,
//! and [`LEVELS`] levels cover the whole `u64` tick range. No deadline is clamped (libco clamps
//! to one minute), rejected (tokio-util's `DelayQueue` panics past ~2 years) or parked on an
//! overflow list.
//!
//! One thing differs from those wheels: **no timer is ever cascaded all at once when its
//! deadline comes near.** A classic wheel moves a whole higher-level slot down at the moment
//! the clock enters it. With a million timers due within a second that is 64 000 timers at
//! once at level 1, and far more at level 2, while the timers due at that very tick wait
//! (milliseconds of stall in a timer service). Here each level keeps **two rotations** of
//! slots ([`RING`] = 128): the current one and the next. A level takes the next parent slot
//! in (*absorbs* it) while the clock is still in the current one, a few items per poll, paced
//! to be done before the clock gets there.
//!
//! # Terms and invariants
//!
//! A slot of level `L` spans `64^L` ticks; its *index* is `tick >> 6L`. A *parent slot* of
//! level `L` is a slot of level `L + 1`, one full rotation of level `L`. Each level records
//! `absorbed`, the last parent slot whose timers it has taken in; it is `now`'s parent slot or
//! the one after.
//!
//! * A timer with effective deadline `d >= now` sits at the **lowest level whose absorbed
//!   range reaches it** (`d >> 6(L+1) <= absorbed[L]`), in ring slot `(d >> 6L) % 128`. The
//!   indices a level can hold span at most 128, so ring slots never alias.
//! * So the levels split the future in increasing, disjoint ranges: level 0 holds ticks
//!   `now..=end0` one slot a tick (the slot of `now` is the *ready* slot, consumed up to
//!   `cursor`), level 1 the next range in 64-tick slots, and so on. The lowest non-empty level
//!   holds the earliest timer; within a level it is the first occupied slot after `now`'s
//!   (one rotate and one `trailing_zeros` of the level's 128-bit occupancy map).
//! * While level `L` absorbs parent slot `q = absorbed[L] + 1`, the items of level `L + 1`'s
//!   slot `q` from `cursor` on are not moved yet. New timers for `q` land in that same slot
//!   (the rule above still sends them there), behind the unmoved ones, and move after them:
//!   insertion order within a deadline survives. A level absorbs only when the level above
//!   holds the slot whole, and only once the clock has left the bank the slot will reuse.
//!
//! # Pacing
//!
//! Every `poll_expired` that returns `None` (it has caught up) does a bounded step of
//! absorption on each level: the share of what remains of the slot that the ticks since the
//! level's last step make of the ticks left to finish it, plus a floor of [`MIN_STEP`]
//! items, so that a slot is moved down in steps spread over the time before it is due.
//! [`next_expiration`](TimerQueue::next_expiration) asks for those steps (never later than
//! the earliest deadline, as the contract requires). A driver that polls late, or jumps far
//! ahead, gets the remaining work done at once in `poll_expired`: the classic cascade, as a
//! fallback. The arithmetic of a level's slots and this pacing belong to the `Level` type
//! (`wheel/level.rs`), whose docs give the details.
//!
//! # Storage: vectors of items, split records, tombstones
//!
//! A slot is a vector of items in insertion order, an item being just the timer's record
//! index (4 bytes). A timer's record is split hot and cold (`queue/records.rs`): the hot
//! record holds its key's generation, which slot and position its *current* item is at, and
//! its value; the deadline sits in a cold array of its own. An item is valid only if the
//! record it names points back at exactly that slot and position (a free record points
//! nowhere), so an item left behind by a reset or by a move down a level is recognised as
//! stale wherever it sits, and a record reused by a later timer never takes its former
//! timers' items as its own. A removal or a reset notes where the timer's item was (a
//! *departure*, 12 bytes in a small buffer); every 64 departures, and before a poll, the wheel
//! *applies* them: it overwrites a removed timer's item with a *tombstone* (an index no record
//! has) and updates the slots' live counts (`slots.rs`, "Departures"). The hot operations
//! then touch memory the way the hardware likes:
//!
//! * **remove** loads the timer's hot record and nothing else at random (the value it returns
//!   is in it) and appends a departure; a linked list must also load both neighbours. Few
//!   instructions wait on the record's cache miss, so the misses of consecutive removals
//!   overlap.
//! * **reset** loads the hot record, stores the new deadline, appends a new item to the
//!   tail of its new slot and a departure.
//! * **expire and absorb** read a slot's items front to back; the records they look up are
//!   known up front, so they prefetch them (and, to move a timer down, its deadline) 16 items
//!   ahead and the cache misses overlap instead of forming a pointer chase; tombstones need
//!   no look-up at all. **Compaction** looks nothing up in a slot that resets have left no
//!   stale item in since it was last compacted (every stale item past its cursor is then a
//!   tombstone): it keeps the other items and stores their new positions. Otherwise it looks
//!   up the items that are not tombstones, prefetched 16 ahead, as expiry does.
//!
//! Stale items are bounded: a slot holding more than `COMPACT_RATIO` (3) items a live one, plus
//! `COMPACT_SLACK` (32), is compacted in place (stable, so order is kept), amortized O(1) a removal
//! or reset; an emptied slot is cleared when its last departure is applied. So stale items cost at
//! most 8 bytes a pending timer (plus 128 bytes a slot, and 64 departures not yet applied; twice
//! that with the vectors' spare capacity): resets never make the wheel hold more than about twice
//! what its pending timers need. A removed timer's value is moved out and its record freed for
//! reuse immediately. An emptied slot's vector is kept for the next slot of its level to fill (no
//! allocation in steady state, `slots.rs`, "Spare vectors") until
//! [`shrink_to_fit`](TimerQueue::shrink_to_fit), which compacts every slot and returns what is
//! unused (the records' limits are under "Costs").
//!
//! # Expiry
//!
//! `poll_expired(t)` pops the ready slot, then moves `now` to the next occupied level-0 slot
//! up to `t`. Past the end of level 0 it finishes any absorption in progress, and if that
//! brought nothing down it looks at the lowest non-empty level: if its first slot starts after
//! `t`, time jumps to `t` (O([`LEVELS`]) however large the gap); otherwise time moves to just
//! before that slot and the levels below absorb it down to level 0.
//!
//! # Costs
//!
//! Insert, remove and reset are O(1) (amortized, for compaction); insert walks up the levels
//! while the deadline is beyond their range (three for a deadline a minute away at 1 ms). A
//! timer is moved at most once a level.
//!
//! Memory a pending timer: a 4-byte item, a hot record of 12 bytes (generation, slot,
//! position) plus the value, rounded up to the value's alignment, and an 8-byte deadline: a
//! `Wheel<u32>` timer holds 28 bytes (24 beyond its value), plus at most 8 bytes of stale
//! items awaiting compaction. [`Wheel::allocated_bytes`] reports the total. A freed timer's
//! record stays for reuse, with 4 bytes on the free stack.
//! [`shrink_to_fit`](TimerQueue::shrink_to_fit) compacts the slots and drops the free records
//! at the end of the arrays, but not the ones between live records: a key is its record's
//! index, so a live record never moves, and after cancels in random order the arrays keep
//! their high-water size. The wheel itself is `LEVELS * RING` slot headers (44 KiB),
//! allocated once.
//!
//! What a cancel costs at a million timers, and why the records are split as they are, is
//! in `records.rs`.
//!
//! # The slim form
//!
//! [`SlimWheel`](super::SlimWheel) (`queue/slim/`) runs these same levels, pacing and expiry (this
//! module's `level.rs`, `tiers.rs` and `tiered.rs` are shared) over 8-byte records: the record
//! holds no position and no value, an item carries its timer's generation instead, and so a reset
//! gives the timer a new key. Pick it for many timers cancelled or reset at random when the caller
//! keeps the key a reset returns; keep this `Wheel` when a key must survive a reset (the `queue`
//! module docs, "Which to pick").

use core::fmt;

use super::free::{grow, NIL};
use super::records::{Records, VACANT};
use super::{TimerKey, TimerQueue};

mod check;
pub(in crate::queue) mod level;
mod slots;
#[cfg(test)]
mod tests;
pub(in crate::queue) mod tiered;
pub(in crate::queue) mod tiers;

use level::slot_number;
pub use level::{LEVELS, LEVEL_BITS, MIN_STEP, RING, SLOTS};
use slots::{Departure, TOMBSTONE};
use tiered::Tiered;
use tiers::Tiers;

/// Items whose records a slot walk starts loading together ahead of use, so that their cache
/// misses overlap (expiry and absorption validate every item they pass).
pub(in crate::queue) const TOUCH: usize = 16;

/// A hierarchical timing wheel: O(1) insert, remove and reset, exact firing at every tick
/// of the `u64` range, no cascade stalls. See the [module docs](self) for the design.
///
/// ```
/// use tickwheel::{TimerQueue, Wheel};
///
/// let mut wheel = Wheel::with_start(1_000);
/// let idle = wheel.insert(31_000, "close idle connection");
/// wheel.insert(1_250, "retransmit");
/// wheel.insert(u64::MAX, "never in practice");
///
/// // A packet arrives at tick 1_100: push the idle timeout back.
/// assert!(wheel.reset(idle, 1_100 + 30_000));
///
/// let mut fired = Vec::new();
/// for tick in [1_249, 1_250, 40_000] {
///     fired.extend(wheel.drain_expired(tick).map(|(_, what)| (tick, what)));
/// }
/// assert_eq!(fired, [(1_250, "retransmit"), (40_000, "close idle connection")]);
/// assert_eq!(wheel.len(), 1);
/// ```
pub struct Wheel<T> {
    records: Records<T>,
    /// Levels, clock, slots (items are record indices; a slot counts its resets' stale
    /// items) and departures (slot, position, mark): the state the `SlimWheel` has too.
    tiers: Tiers<u32, usize, Departure>,
}

/// [`Tiers::settled`] when no pass has settled: `now >> LEVEL_BITS` never reaches it.
pub(in crate::queue) const UNSETTLED: u64 = u64::MAX;

impl<T> Wheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Wheel<T> {
        Wheel::with_start(0)
    }

    /// An empty wheel whose clock starts at `tick`.
    pub fn with_start(tick: u64) -> Wheel<T> {
        Wheel {
            records: Records::new(),
            tiers: Tiers::new(tick),
        }
    }

    /// An empty wheel at tick 0 with room for `capacity` timers before its records allocate.
    pub fn with_capacity(capacity: usize) -> Wheel<T> {
        Wheel {
            records: Records::with_capacity(capacity),
            ..Wheel::new()
        }
    }

    /// How many timers the records hold room for without allocating.
    pub fn capacity(&self) -> usize {
        self.records.capacity()
    }

    /// Bytes of memory the wheel holds (its own struct excluded): records, slot vectors at their
    /// capacity and the slot table. [`shrink_to_fit`](TimerQueue::shrink_to_fit) gives back
    /// what pending timers do not need.
    pub fn allocated_bytes(&self) -> usize {
        self.records.allocated_bytes() + self.tiers.allocated_bytes()
    }

    /// Appends the timer at record `record`, due at `deadline`, to its slot at `level`.
    /// Out of line: it is the larger half of a reset and of a move down a level, and inlined
    /// it made callers' loops around `reset` measurably slower.
    #[inline(never)]
    fn link_at(&mut self, record: u32, deadline: u64, level: usize) {
        let number = slot_number(deadline, level);
        let pos = self.push_item(number, record);
        self.records.set_place(record, number as u32, pos as u32);
    }
}

/// The `Wheel`'s side of the logic both wheels share (`tiered.rs`): items are record indices,
/// valid where their record's place names them; applied removals leave tombstones.
impl<T> Tiered for Wheel<T> {
    type Item = u32;
    type Stale = usize;
    type Departure = Departure;
    type Value = T;
    type Name = TimerKey;

    #[inline]
    fn tiers(&self) -> &Tiers<u32, usize, Departure> {
        &self.tiers
    }

    #[inline]
    fn tiers_mut(&mut self) -> &mut Tiers<u32, usize, Departure> {
        &mut self.tiers
    }

    #[inline]
    fn timers(&self) -> usize {
        self.records.len()
    }

    /// The hot records hold the values.
    #[inline]
    fn touch_ready(&self, items: &[u32]) {
        self.records.touch(items);
    }

    #[inline]
    fn touch_moving(&self, items: &[u32]) {
        self.records.touch(items);
        self.records.touch_deadlines(items);
    }

    #[inline]
    fn current(&self, item: u32, number: usize, pos: usize) -> bool {
        self.valid(item, number, pos)
    }

    #[inline]
    fn item_deadline(&self, item: u32) -> u64 {
        self.records.deadline(item)
    }

    #[inline]
    fn move_down(&mut self, item: u32, deadline: u64, level: usize) {
        self.link_at(item, deadline, level);
    }

    #[inline]
    fn fire(&mut self, item: u32) -> Option<(TimerKey, T)> {
        let key = self.records.key(item);
        self.records.remove(item).map(|value| (key, value))
    }

    #[cold]
    #[inline(never)]
    fn make_room(&mut self, number: usize) {
        if !self.tiers.take_spare(number) {
            grow(&mut self.tiers.slots[number].items);
        }
    }

    #[inline]
    fn compact(&mut self, number: usize) {
        Wheel::compact(self, number);
    }

    #[inline]
    fn mark_departed(&mut self, departed: &[Departure]) {
        Wheel::mark_departed(self, departed);
    }

    fn check_all(&self) {
        self.check_invariants();
    }
}

impl<T> TimerQueue<T> for Wheel<T> {
    #[inline]
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.tiers.now);
        let number = slot_number(deadline, self.tiers.level_of(deadline));
        let pos = self.tiers.slots[number].items.len();
        // The record is placed as it is stored: no second visit to write its place.
        let (index, key) = self
            .records
            .insert(deadline, value, number as u32, pos as u32);
        self.push_item(number, index);
        key
    }

    #[inline]
    fn remove(&mut self, key: TimerKey) -> Option<T> {
        // One look-up: the place read here is the one the unlink needs. The record is freed
        // first, while it is at hand (its item is a tombstone before any compaction runs).
        let (index, place) = self.records.find_place(key)?;
        let value = self.records.take(index);
        self.depart(Departure {
            slot: place.slot,
            pos: place.pos,
            mark: true,
        });
        Some(value)
    }

    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some((index, place)) = self.records.find_place(key) else {
            return false;
        };
        let deadline = deadline.max(self.tiers.now);
        self.records.set_deadline(index, deadline);
        self.link_at(index, deadline, self.tiers.level_of(deadline));
        // After the new item is placed: the old one is stale when its departure is applied.
        self.depart(Departure {
            slot: place.slot,
            pos: place.pos,
            mark: false,
        });
        true
    }

    #[inline]
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.records
            .find(key)
            .map(|index| self.records.deadline(index))
    }

    fn clear(&mut self) {
        let mut index = 0;
        // Every live record lies below the end of the records: the walk stops there at the
        // latest, and earlier once the last timer is out.
        while let Some(place) = self.records.place(index) {
            if self.records.len() == 0 {
                break;
            }
            if place.slot != VACANT {
                self.remove(self.records.key(index));
            }
            index += 1;
        }
        debug_assert_eq!(self.records.len(), 0, "clear left a timer");
    }

    #[inline]
    fn get(&self, key: TimerKey) -> Option<&T> {
        self.records.get(key)
    }

    #[inline]
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.records.get_mut(key)
    }

    #[inline]
    fn len(&self) -> usize {
        self.records.len()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.tiers.now
    }

    /// The earliest of: the first occupied slot's start (exact at level 0), and the tick the
    /// next step of absorption is due — when a level is absorbing, the gap of
    /// `pace`; otherwise when the level below may start on a level's first
    /// slot.
    fn next_expiration(&self) -> Option<u64> {
        self.next_tick()
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        self.poll(now)
    }

    fn check_invariants(&self) {
        Wheel::check_invariants(self);
    }

    fn shrink_to_fit(&mut self) {
        self.apply_departures();
        self.records.shrink_to_fit();
        self.shrink_slots();
    }
}

impl<T> Default for Wheel<T> {
    fn default() -> Wheel<T> {
        Wheel::new()
    }
}

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.tiers.now)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
