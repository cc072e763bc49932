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
//! Every `poll_expired` that returns `None` (it has caught up with `t`) does a bounded step
//! of absorption on each level: the share of what remains of the slot that the ticks since
//! the level's last step make of the ticks left to finish it (a driver that polled late
//! takes in the steps it missed), plus a floor of [`MIN_STEP`] items. The ticks left end
//! one slot of the level before the parent slot starts, so the level below can take in its
//! first child ahead of time too. [`next_expiration`](TimerQueue::next_expiration) asks for
//! a step at least 64 times over that window, and more often for a large slot, about every
//! `STEP_ITEMS` items: a level-2 slot of millions of timers at a fine resolution is moved
//! a thousand items at a time over a whole rotation. It answers the earlier of the earliest
//! slot and the tick the next absorption step is due (never later than the earliest
//! deadline, as the contract requires). A driver that polls
//! late, or jumps far ahead, gets the remaining work done at once in `poll_expired`: the
//! classic cascade, as a fallback.
//!
//! Moving ahead of time also saves work: a timer inserted less than one parent rotation ahead
//! goes straight to the level that will fire it. In the "6 million delayed tasks" workload
//! (delays up to 1000 ticks) every timer is placed on level 0 or 1 and moves at most once.
//!
//! # Storage: vectors of items, split records, tombstones
//!
//! A slot is a vector of items in insertion order, an item being just the timer's record
//! index (4 bytes). A timer's record is split hot and cold (`queue/records.rs`): the hot
//! record holds its key's generation, which slot and position its *current* item is at, and
//! its value; the deadline sits in a cold array of its own. An item is valid only if the
//! record it names points back at exactly that slot and position (a free record points
//! nowhere), so an item left behind by a reset or by a move down a level is recognised as
//! stale wherever it sits, without being written to, and a record reused by a later timer
//! never takes its former timers' items as its own. A removal overwrites its item with a
//! *tombstone* (an index no record has), a store that nothing waits for. The hot operations
//! then touch memory the way the hardware likes:
//!
//! * **remove** loads the timer's hot record and nothing else at random (the value it returns
//!   is in it; the slot's live count is in the small, cache-resident slot table) and stores
//!   the tombstone; a linked list must also load both neighbours.
//! * **reset** loads the hot record, stores the new deadline and appends a new item to the
//!   tail of its new slot.
//! * **expire, absorb and compact** read a slot's items front to back; the records they look
//!   up are known up front, so they prefetch them (and, to move a timer down, its deadline)
//!   16 items ahead and the cache misses overlap instead of forming a pointer chase;
//!   tombstones need no look-up at all.
//!
//! Stale items are bounded: a slot holding more than `COMPACT_RATIO` (3) items a live one,
//! plus `COMPACT_SLACK` (32), is compacted in place (stable, so order is kept), amortized O(1)
//! a removal or reset; an emptied slot is cleared at once. So stale items cost at most 8
//! bytes a pending timer (plus 128 bytes a slot; twice that with the vectors' spare
//! capacity): resets never make the wheel hold more than about twice what its pending timers
//! need. A removed timer's value is moved out and its record freed for reuse immediately.
//! Slot vectors keep their capacity (no allocation in steady state) until
//! [`shrink_to_fit`](TimerQueue::shrink_to_fit), which compacts every slot and returns what
//! is unused (the records' limits are under "Costs").
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
//! # What a cancel costs at a million timers
//!
//! At 10^6 timers the records no longer fit in cache, and a cancel waits for its hot
//! record's miss. The split makes the array it misses in 16 MB for a `Wheel<u32>` (four
//! records a cache line) where one array of whole entries (deadline, place, generation,
//! value) was 32 MB, and the items 4 bytes instead of 8; that speeds up inserts and expiry
//! (fewer, smaller arrays to fill and walk) more than the cancel itself, which still waits
//! on a record in main memory. The value sits in the hot record rather than in an array of
//! its own because `remove` returns it and expiry hands it out, so it is read with the
//! record anyway. A large value makes the hot record large: a timer whose payload is big is
//! cheaper to cancel with the payload boxed, or kept in the caller's own array and named by
//! an index.
//!
//! A cancel still costs about twice what the lazy `BinaryHeap` peer's does at 10^6: that
//! cancel writes a 4-byte generation and keeps no structure current, while a queue with
//! bounded memory must also count what left each slot and compact the slots that cancels
//! thinned out, a second random look-up per stale item. The wheels of
//! `cargo run --release -p tickwheel-lab --example queue_floors`, which do less than this
//! contract, show how far a layout alone can go (the workloads are defined in
//! `docs/ARCHITECTURE.md`); `docs/DESIGN-NOTES.md` has the figures.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use super::records::{Place, Records};
use super::slab::{grow, NIL};
use super::{TimerKey, TimerQueue};

/// Bits of the deadline resolved by one level.
pub const LEVEL_BITS: u32 = 6;
/// Slots in one rotation of a level: one per value of its [`LEVEL_BITS`] bits.
pub const SLOTS: usize = 1 << LEVEL_BITS;
/// Slots a level keeps: two rotations, the current one and the next.
pub const RING: usize = 2 * SLOTS;
/// Levels needed to cover all 64 bits of a tick: `ceil(64 / LEVEL_BITS)`.
pub const LEVELS: usize = u64::BITS.div_ceil(LEVEL_BITS) as usize;
/// Mask of a ring slot number.
const RING_MASK: u64 = RING as u64 - 1;
/// A slot is compacted once it holds more than `COMPACT_RATIO` items a live one (plus
/// [`COMPACT_SLACK`]): stale items then cost at most 8 bytes a pending timer (16 with the
/// vector's spare capacity), and draining a slot by removals scans about
/// `COMPACT_RATIO / (COMPACT_RATIO - 1)` items and looks up `1 / (COMPACT_RATIO - 1)` live
/// ones a removal.
const COMPACT_RATIO: usize = 3;
/// Stale items a slot may hold beyond its live ones before it is compacted.
const COMPACT_SLACK: usize = 32;
/// Items an absorption step moves at least, so that small slots go in one step.
pub const MIN_STEP: usize = 256;
/// Items whose records a slot walk starts loading together ahead of use, so that their cache
/// misses overlap (expiry and absorption validate every item they pass).
const TOUCH: usize = 16;
/// Steps an absorption is spread over, at least when it has the time (see [`Wheel::pace`]).
const STEPS: u64 = SLOTS as u64;
/// About the most items one absorption step moves when the time before the slot is due
/// allows more steps: a step this size takes tens of microseconds.
const STEP_ITEMS: usize = 1024;

/// One slot: items in insertion order, some of them stale.
#[derive(Default)]
struct Slot {
    /// The record index of each item's timer; [`TOMBSTONE`] for a removed one.
    items: Vec<u32>,
    /// Valid items (in the ready slot and a slot being absorbed: valid and not yet taken).
    live: usize,
}

/// The state of one level.
#[derive(Clone, Copy)]
struct Level {
    /// Occupied ring slots, bit `i` for ring slot `i`.
    occupied: u128,
    /// The last parent slot (an index at the level above) whose timers this level holds.
    absorbed: u64,
    /// While this level takes in parent slot `absorbed + 1`: how many of that slot's items
    /// it has moved.
    absorbing: Option<usize>,
    /// The tick of this level's last absorption step (or of its start).
    stepped: u64,
}

/// Bits below level `level`.
#[inline]
const fn shift(level: usize) -> u32 {
    level as u32 * LEVEL_BITS
}

/// The slot index of `tick` at `level` (`level < LEVELS`, so the shift is at most 60).
#[inline]
pub(crate) fn index(tick: u64, level: usize) -> u64 {
    tick >> shift(level)
}

/// The parent slot of `tick` at `level`: its index at `level + 1` (0 above the top level).
#[inline]
pub(crate) fn parent(tick: u64, level: usize) -> u64 {
    tick.checked_shr(shift(level + 1)).unwrap_or(0)
}

/// The first tick of slot `index` at `level`, `u64::MAX` if that is past the end of time.
#[inline]
pub(crate) fn start(index: u64, level: usize) -> u64 {
    u64::try_from(u128::from(index) << shift(level)).unwrap_or(u64::MAX)
}

/// The ring slot of slot index `index`.
#[inline]
fn ring(index: u64) -> usize {
    (index & RING_MASK) as usize
}

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
    /// `LEVELS * RING` slots, level by level.
    slots: Box<[Slot]>,
    /// Boxed: keeps the wheel (and enums holding it) small; it is cache-resident anyway.
    levels: Box<[Level; LEVELS]>,
    /// Items of the ready slot already consumed.
    cursor: usize,
    now: u64,
    /// `now >> LEVEL_BITS` when a pass of [`absorb_ahead`](Self::absorb_ahead) last found
    /// nothing under way and nothing to start; [`UNSETTLED`] when it must look again.
    settled: u64,
}

/// What [`Wheel::unlink`] leaves in place of a removed timer's item: record index [`NIL`],
/// which no record has, so every validity check rejects it without a memory access.
const TOMBSTONE: u32 = NIL;

/// [`Wheel::settled`] when no pass has settled: `now >> LEVEL_BITS` never reaches it.
const UNSETTLED: u64 = u64::MAX;

impl<T> Wheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Wheel<T> {
        Wheel::with_start(0)
    }

    /// An empty wheel whose clock starts at `tick`.
    pub fn with_start(tick: u64) -> Wheel<T> {
        Wheel {
            records: Records::new(),
            slots: (0..LEVELS * RING).map(|_| Slot::default()).collect(),
            levels: Box::new(core::array::from_fn(|level| Level {
                occupied: 0,
                absorbed: parent(tick, level),
                absorbing: None,
                stepped: tick,
            })),
            cursor: 0,
            now: tick,
            settled: UNSETTLED,
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
        let items: usize = self.slots.iter().map(|slot| slot.items.capacity()).sum();
        self.records.allocated_bytes()
            + items * core::mem::size_of::<u32>()
            + self.slots.len() * core::mem::size_of::<Slot>()
            + core::mem::size_of::<[Level; LEVELS]>()
    }

    /// The slot number of the ready slot (level 0, `now`'s slot).
    #[inline]
    fn ready_slot(&self) -> usize {
        ring(self.now)
    }

    /// The level a timer due at `deadline` (`>= now`) belongs on: the lowest whose absorbed
    /// range reaches it.
    #[inline]
    fn level_of(&self, deadline: u64) -> usize {
        let mut level = 0;
        while level < LEVELS - 1 && parent(deadline, level) > self.levels[level].absorbed {
            level += 1;
        }
        level
    }

    /// Appends the timer at record `record`, due at `deadline`, to its slot at `level`.
    /// Out of line: it is the larger half of a reset and of a move down a level, and inlined
    /// it made callers' loops around `reset` measurably slower.
    #[inline(never)]
    fn link_at(&mut self, record: u32, deadline: u64, level: usize) {
        let number = level * RING + ring(index(deadline, level));
        let pos = self.push_item(number, record);
        self.records.set_place(record, number as u32, pos as u32);
    }

    /// Appends an item for record `record` to slot `number` and returns its position; the
    /// caller records the place.
    #[inline]
    fn push_item(&mut self, number: usize, record: u32) -> usize {
        let target = &mut self.slots[number];
        let pos = target.items.len();
        if pos == target.items.capacity() {
            grow(&mut target.items);
        }
        target.items.push(record);
        target.live += 1;
        self.levels[number / RING].occupied |= 1 << (number % RING);
        pos
    }

    /// Whether the item `index` at `pos` of slot `number` is the current item of a live
    /// timer. A vacant record's slot is [`VACANT`](super::records::VACANT), no slot number,
    /// and a record holds one place, which holds its own index: so the place alone tells, and
    /// a reused record never takes its former timers' items as its own.
    #[inline]
    fn valid(&self, index: u32, number: usize, pos: usize) -> bool {
        self.records
            .place(index)
            .is_some_and(|place| place.slot as usize == number && place.pos as usize == pos)
    }

    /// Detaches a timer from its slot, given the `place` its record held (read by the
    /// caller's key look-up, so the record is not visited twice); its item goes stale where
    /// it is. A removal (`mark`) also overwrites the item with a [`TOMBSTONE`], so that
    /// compaction will skip it without looking up its record.
    #[inline]
    fn unlink(&mut self, place: Place, mark: bool) {
        let (slot, pos) = (place.slot, place.pos);
        let target = &mut self.slots[slot as usize];
        if mark {
            // A store, not a load: nothing waits for it.
            if let Some(item) = target.items.get_mut(pos as usize) {
                *item = TOMBSTONE;
            }
        }
        target.live -= 1;
        if target.live == 0 {
            self.clear_slot(slot as usize);
        } else if target.items.len() > COMPACT_RATIO * target.live + COMPACT_SLACK {
            // Counts a consumed prefix (ready slot, slot being absorbed) as garbage too:
            // compaction drops it.
            self.compact(slot as usize);
        }
    }

    /// The slot number level `level` is absorbing, if it is.
    #[inline]
    fn source(&self, level: usize) -> Option<usize> {
        let state = &self.levels[level];
        state
            .absorbing
            .map(|_| (level + 1) * RING + ring(state.absorbed + 1))
    }

    /// The level absorbing slot `number`, if one is.
    #[inline]
    fn absorber(&self, number: usize) -> Option<usize> {
        let level = (number / RING).checked_sub(1)?;
        (self.source(level) == Some(number)).then_some(level)
    }

    /// Empties a slot that holds no live timer (keeping its capacity). Emptying the slot a
    /// level is absorbing completes that absorption.
    #[inline]
    fn clear_slot(&mut self, number: usize) {
        if let Some(level) = self.absorber(number) {
            let state = &mut self.levels[level];
            state.absorbing = None;
            state.absorbed += 1;
        }
        self.slots[number].items.clear();
        self.slots[number].live = 0;
        self.levels[number / RING].occupied &= !(1 << (number % RING));
        if number == self.ready_slot() {
            self.cursor = 0;
        }
    }

    /// Drops a slot's stale items (and a consumed prefix), keeping the order of the rest.
    #[inline(never)]
    fn compact(&mut self, number: usize) {
        let start = if number == self.ready_slot() {
            core::mem::take(&mut self.cursor)
        } else if let Some(level) = self.absorber(number) {
            self.levels[level].absorbing.replace(0).unwrap_or(0)
        } else {
            0
        };
        let mut items = core::mem::take(&mut self.slots[number].items);
        let mut kept = 0;
        let mut chunk_start = start;
        while chunk_start < items.len() {
            let chunk_end = items.len().min(chunk_start + TOUCH);
            // Prefetch the records this chunk looks up together.
            self.records.touch(&items[chunk_start..chunk_end]);
            for read in chunk_start..chunk_end {
                let index = items[read];
                if index == TOMBSTONE {
                    // Removed: no record to look up.
                    continue;
                }
                if self.valid(index, number, read) {
                    if kept != read {
                        items[kept] = index;
                        self.records.set_pos(index, kept as u32);
                    }
                    kept += 1;
                }
            }
            chunk_start = chunk_end;
        }
        items.truncate(kept);
        self.slots[number].items = items;
    }

    /// The first occupied slot of `level` after `now`'s own (the ready slot included at level
    /// 0): its index.
    #[inline]
    fn first_slot(&self, level: usize) -> Option<u64> {
        let bits = self.levels[level].occupied;
        if bits == 0 {
            return None;
        }
        let own = index(self.now, level);
        let offset = bits.rotate_right(ring(own) as u32).trailing_zeros();
        Some(own + u64::from(offset))
    }

    /// The lowest non-empty level above 0 and the first tick of its first occupied slot.
    #[inline]
    fn first_upper(&self) -> Option<(usize, u64)> {
        (1..LEVELS).find_map(|level| Some((level, start(self.first_slot(level)?, level))))
    }

    /// The last tick level 0 covers.
    #[inline]
    fn end0(&self) -> u64 {
        let end = (u128::from(self.levels[0].absorbed) + 1) << LEVEL_BITS;
        u64::try_from(end - 1).unwrap_or(u64::MAX)
    }

    /// The first tick of the parent slot `level` absorbs (or would absorb next).
    #[inline]
    fn next_parent_start(&self, level: usize) -> u64 {
        start(self.levels[level].absorbed + 1, level + 1)
    }

    /// Ticks from `now` until [`next_parent_start`](Self::next_parent_start).
    #[inline]
    fn ticks_left(&self, level: usize) -> u64 {
        self.next_parent_start(level).saturating_sub(self.now)
    }

    /// How `level`'s absorption in progress is paced, as `(window, gap)`: the ticks left to
    /// finish it (at least 1), and the ticks between two steps.
    ///
    /// The window ends one slot of `level` before the parent slot starts, so that the level
    /// below can start taking in that slot's first child ahead of time too. It is spread
    /// over at least [`STEPS`] steps and, when the window is long enough, over as many as
    /// make steps of about [`STEP_ITEMS`] items: a slot of millions of timers a whole
    /// rotation ahead (an upper level at a fine resolution) is moved a small step at a time
    /// over that rotation, not in 64 steps of tens of thousands of items each.
    fn pace(&self, level: usize, remaining: usize) -> (u64, u64) {
        let margin = if level == 0 { 0 } else { 1 << shift(level) };
        let window = self.ticks_left(level).saturating_sub(margin).max(1);
        let steps = (remaining.div_ceil(STEP_ITEMS) as u64)
            .max(STEPS)
            .min(window);
        (window, (window / steps).max(1))
    }

    /// Whether `level` may start absorbing its next parent slot: the clock has left the bank
    /// it will reuse, and the level above holds that slot whole.
    #[inline]
    fn can_absorb(&self, level: usize) -> bool {
        let state = &self.levels[level];
        state.absorbing.is_none()
            && state.absorbed == parent(self.now, level)
            && (state.absorbed + 1) >> LEVEL_BITS <= self.levels[level + 1].absorbed
    }

    /// Starts absorbing the next parent slot at `level`; an empty one is absorbed at once.
    fn start_absorbing(&mut self, level: usize) {
        self.settled = UNSETTLED;
        let next = self.levels[level].absorbed + 1;
        let number = (level + 1) * RING + ring(next);
        if self.slots[number].live == 0 {
            self.levels[level].absorbed = next;
        } else {
            self.levels[level].absorbing = Some(0);
            self.levels[level].stepped = self.now;
        }
    }

    /// Moves up to `quota` items of the slot `level` is absorbing down to `level`.
    fn absorb(&mut self, level: usize, quota: usize) {
        let (Some(number), Some(mut cursor)) = (self.source(level), self.levels[level].absorbing)
        else {
            return;
        };
        let items = core::mem::take(&mut self.slots[number].items);
        let end = items.len().min(cursor.saturating_add(quota));
        let mut moved = 0;
        for chunk in items[cursor..end].chunks(TOUCH) {
            self.records.touch(chunk);
            self.records.touch_deadlines(chunk);
            for &index in chunk {
                if self.valid(index, number, cursor) {
                    let deadline = self.records.deadline(index);
                    // Straight to `level`: while it absorbs, the usual rule still names the
                    // slot being emptied.
                    self.link_at(index, deadline, level);
                    moved += 1;
                }
                cursor += 1;
            }
        }
        self.slots[number].items = items;
        self.slots[number].live -= moved;
        self.levels[level].absorbing = Some(cursor);
        if self.slots[number].live == 0 {
            self.clear_slot(number);
        }
    }

    /// Completes every absorption in progress of a slot that starts by `tick`; whether there
    /// was one. (Others go on at their pace: nothing of theirs is due by `tick`.)
    fn finish_absorbing(&mut self, tick: u64) -> bool {
        let mut any = false;
        for level in 0..LEVELS - 1 {
            if self.levels[level].absorbing.is_some() && self.next_parent_start(level) <= tick {
                self.absorb(level, usize::MAX);
                any = true;
            }
        }
        any
    }

    /// Paced work done when a poll has caught up: start what may start, and move a step of
    /// every absorption in progress.
    ///
    /// Most polls have nothing to do here, and a pass over every level costs a few hundred
    /// instructions, more than popping a timer. Once a pass leaves no absorption under way and
    /// none that may start, none can start before `now` enters the next 64-tick block: a
    /// level starts when `now` enters a new parent slot (a block boundary at every level) or
    /// when the level above advances `absorbed`, which only an absorption, [`jump`](Self::jump)
    /// or [`start_absorbing`](Self::start_absorbing) does — and those two mark it unsettled.
    #[inline]
    fn absorb_ahead(&mut self) {
        if self.now >> LEVEL_BITS != self.settled {
            self.absorb_pass();
        }
    }

    /// The pass of [`absorb_ahead`](Self::absorb_ahead) over every level, out of line for the
    /// same reason as [`advance_upper`](Self::advance_upper).
    #[inline(never)]
    fn absorb_pass(&mut self) {
        for level in 0..LEVELS - 1 {
            if self.can_absorb(level) {
                self.start_absorbing(level);
            }
            let (Some(number), Some(cursor)) = (self.source(level), self.levels[level].absorbing)
            else {
                continue;
            };
            let remaining = self.slots[number].items.len() - cursor;
            let (window, _) = self.pace(level, remaining);
            // The share of the ticks since the last step (several when the driver polled
            // late: it gets the steps it missed too, so that the slot is still done in time
            // instead of all at once at its start, the fallback in `finish_absorbing`).
            let elapsed = self
                .now
                .saturating_sub(self.levels[level].stepped)
                .clamp(1, window);
            self.levels[level].stepped = self.now;
            let share = remaining
                .saturating_mul(elapsed as usize)
                .div_ceil(window as usize);
            self.absorb(level, share + MIN_STEP);
        }
        // A level may start only now that the one above it moved on in this same pass.
        if (0..LEVELS - 1)
            .all(|level| self.levels[level].absorbing.is_none() && !self.can_absorb(level))
        {
            self.settled = self.now >> LEVEL_BITS;
        }
    }

    /// Moves the clock to `to` over a stretch with no timer: every level below the lowest
    /// non-empty one is empty, and no absorption in progress takes in a slot due by `to`.
    fn jump(&mut self, to: u64) {
        self.now = to;
        self.settled = UNSETTLED;
        for (level, state) in self.levels.iter_mut().enumerate() {
            // Empty levels catch up; a non-empty level already reaches `to` (its timers are
            // later than `to`, and lie within its absorbed range).
            state.absorbed = state.absorbed.max(parent(to, level));
        }
    }

    /// One step of [`poll_expired`](TimerQueue::poll_expired) past the end of level 0: finish
    /// what is under way for slots due by `now`, else bring the first upper slot due by `now`
    /// down, else jump to `now`.
    ///
    /// Out of line: it runs about once in 64 ticks, and inlined, its per-level set-up
    /// (`parent(now, level)` for every level) was hoisted into every poll, doubling the cost of
    /// a poll that only pops a timer.
    #[inline(never)]
    fn advance_upper(&mut self, now: u64) {
        if self.finish_absorbing(now) {
            return;
        }
        match self.first_upper() {
            Some((level, first)) if first <= now => {
                // Nothing before `first`: stand just before it and bring its slot down.
                self.jump(first - 1);
                for below in (0..level).rev() {
                    if self.can_absorb(below) {
                        self.start_absorbing(below);
                        self.absorb(below, usize::MAX);
                    }
                }
            }
            _ => self.jump(now),
        }
    }

    /// Starts loading the hot records (values included) of the ready slot's next [`TOUCH`]
    /// items from `pos` on, so their cache misses overlap (see [`Records::touch`]).
    #[inline]
    fn touch_ahead(&self, number: usize, pos: usize) {
        let items = &self.slots[number].items;
        let ahead = &items[pos..items.len().min(pos + TOUCH)];
        self.records.touch(ahead);
    }

    /// Removes and returns the next timer of the ready slot.
    #[inline]
    fn pop_ready(&mut self) -> Option<(TimerKey, T)> {
        let number = self.ready_slot();
        while let Some(&index) = self.slots[number].items.get(self.cursor) {
            let pos = self.cursor;
            if pos % TOUCH == 0 {
                self.touch_ahead(number, pos);
            }
            self.cursor += 1;
            if !self.valid(index, number, pos) {
                continue;
            }
            let ready = &mut self.slots[number];
            ready.live -= 1;
            if ready.live == 0 {
                self.clear_slot(number);
            }
            let key = self.records.key(index);
            return self.records.remove(index).map(|value| (key, value));
        }
        None
    }
}

impl<T> TimerQueue<T> for Wheel<T> {
    #[inline]
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.now);
        let level = self.level_of(deadline);
        let number = level * RING + ring(index(deadline, level));
        let pos = self.slots[number].items.len();
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
        self.unlink(place, true);
        Some(value)
    }

    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some((index, place)) = self.records.find_place(key) else {
            return false;
        };
        self.unlink(place, false);
        let deadline = deadline.max(self.now);
        self.records.set_deadline(index, deadline);
        self.link_at(index, deadline, self.level_of(deadline));
        true
    }

    #[inline]
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.records
            .find(key)
            .map(|index| self.records.deadline(index))
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
        self.now
    }

    /// The earliest of: the first occupied slot's start (exact at level 0), and the tick the
    /// next step of absorption is due — when a level is absorbing, the gap of
    /// `pace`; otherwise when the level below may start on a level's first
    /// slot.
    fn next_expiration(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let mut next = self.first_slot(0).unwrap_or(u64::MAX);
        for level in 1..LEVELS {
            let Some(first) = self.first_slot(level) else {
                continue;
            };
            let below = level - 1;
            let step = if let (Some(number), Some(cursor)) =
                (self.source(below), self.levels[below].absorbing)
            {
                let remaining = self.slots[number].items.len() - cursor;
                self.now.saturating_add(self.pace(below, remaining).1)
            } else {
                start(first - 1, level).max(self.now.saturating_add(1))
            };
            next = next.min(start(first, level)).min(step);
        }
        Some(next)
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if now < self.now {
            return None;
        }
        loop {
            if let Some(fired) = self.pop_ready() {
                return Some(fired);
            }
            if now == self.now {
                self.absorb_ahead();
                return None;
            }
            // Level 0 holds every timer up to `end0`, one slot a tick (past it, a slot
            // being absorbed is only partly there).
            let end0 = self.end0();
            let level0 = self.levels[0].occupied.rotate_right(ring(self.now) as u32) & !1;
            if level0 != 0 {
                let next = self.now + u64::from(level0.trailing_zeros());
                if next <= end0 {
                    self.now = now.min(next);
                    continue;
                }
            }
            if end0 >= now {
                self.now = now;
                continue;
            }
            self.advance_upper(now);
        }
    }

    fn shrink_to_fit(&mut self) {
        self.records.shrink_to_fit();
        for number in 0..self.slots.len() {
            if self.slots[number].live > 0 {
                self.compact(number);
            }
            self.slots[number].items.shrink_to_fit();
        }
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
            .field("now", &self.now)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// `64^level`, the first deadline (from `now = 0`) that needs `level` on a fresh wheel.
    fn boundary(level: usize) -> Option<u64> {
        1u64.checked_shl(shift(level))
    }

    /// The level a timer's current item is on.
    fn level_of_key<T>(wheel: &Wheel<T>, key: TimerKey) -> usize {
        let index = wheel.records.find(key).expect("live key");
        wheel.records.place(index).expect("live record").slot as usize / RING
    }

    #[test]
    fn levels_cover_u64_exactly() {
        assert_eq!(LEVELS, 11);
        assert!(LEVELS as u32 * LEVEL_BITS >= u64::BITS);
        assert!((LEVELS as u32 - 1) * LEVEL_BITS < u64::BITS);
        assert_eq!(index(u64::MAX, LEVELS - 1), 15);
        assert_eq!(parent(u64::MAX, LEVELS - 1), 0);
        assert_eq!(parent(u64::MAX, LEVELS - 2), 15);
    }

    #[test]
    fn start_and_index_are_inverse_at_every_level() {
        for level in 0..LEVELS {
            let slots = if level == LEVELS - 1 { 16 } else { RING as u64 };
            for slot in 0..slots {
                let first = start(slot, level);
                assert_eq!(first, slot << shift(level));
                assert_eq!(index(first, level), slot);
                if let Some(last) = first.checked_add((1u64 << shift(level)) - 1) {
                    assert_eq!(index(last, level), slot, "last tick of the slot");
                    assert_eq!(parent(last, level), slot >> LEVEL_BITS);
                }
            }
        }
        // Past the end of time `start` saturates instead of wrapping.
        assert_eq!(start(16, LEVELS - 1), u64::MAX);
        assert_eq!(start(1 << 58, 1), u64::MAX);
    }

    #[test]
    fn placement_at_every_level_boundary() {
        // A fresh wheel holds one rotation a level: the classic rule.
        let mut wheel = Wheel::new();
        for level in 1..LEVELS {
            let b = boundary(level).unwrap();
            let below = wheel.insert(b - 1, ());
            let at = wheel.insert(b, ());
            assert_eq!(
                level_of_key(&wheel, below),
                level - 1,
                "just below 64^{level}"
            );
            assert_eq!(level_of_key(&wheel, at), level, "at 64^{level}");
        }
        let max = wheel.insert(u64::MAX, ());
        assert_eq!(level_of_key(&wheel, max), LEVELS - 1);

        // Once it has polled, each level has absorbed the next (empty) rotation: two.
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(0).is_none());
        for level in 1..LEVELS {
            let Some(b) = boundary(level).and_then(|b| b.checked_mul(2)) else {
                continue;
            };
            let below = wheel.insert(b - 1, ());
            let at = wheel.insert(b, ());
            assert_eq!(
                level_of_key(&wheel, below),
                level - 1,
                "just below 2·64^{level}"
            );
            assert_eq!(level_of_key(&wheel, at), level, "at 2·64^{level}");
        }
    }

    #[test]
    fn fires_exactly_at_each_level_boundary() {
        for level in 0..LEVELS {
            let Some(b) = boundary(level) else { continue };
            for deadline in [b - 1, b, b + 1, 2 * b - 1, 2 * b, 2 * b + 1]
                .into_iter()
                .filter(|&d| d > 0)
            {
                let mut wheel = Wheel::new();
                wheel.insert(deadline, ());
                assert!(wheel.next_expiration().unwrap() <= deadline);
                assert!(
                    wheel.poll_expired(deadline - 1).is_none(),
                    "early at {deadline}"
                );
                assert_eq!(wheel.now(), deadline - 1);
                assert!(wheel.poll_expired(deadline).is_some(), "missed {deadline}");
                assert!(wheel.is_empty());
            }
        }
    }

    #[test]
    fn moving_down_keeps_insertion_order() {
        let mut wheel = Wheel::new();
        // Same deadline, inserted from different `now`s so they start on different levels.
        wheel.insert(5_000, 'a');
        assert!(wheel.poll_expired(4_900).is_none());
        wheel.insert(5_000, 'b');
        assert!(wheel.poll_expired(4_999).is_none());
        wheel.insert(5_000, 'c');
        wheel.insert(4_000, 'p'); // already past: due now, after nothing
        let fired: Vec<_> = wheel.drain_expired(5_000).map(|(_, v)| v).collect();
        assert_eq!(fired, ['p', 'a', 'b', 'c']);
    }

    /// A level-1 slot of 64 000 timers (a 64-tick stretch of a million timers a second at
    /// 1 ms) is moved down over the polls of the rotation before it, in small steps, and
    /// every timer still fires at its tick in insertion order — including timers inserted
    /// into the slot while it was half moved.
    #[test]
    /// A driver that polls only every tenth tick still gets the slot moved before it is due:
    /// each step takes in the steps it missed too, instead of leaving the rest to one move
    /// of the whole remainder when the slot comes due (a stall of milliseconds at 10^5 items).
    fn a_late_driver_still_gets_the_slot_moved_ahead_of_time() {
        const N: u64 = 64_000;
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(0).is_none());
        let mut expected: Vec<(u64, u64)> = (0..N).map(|id| (128 + id * 7 % 64, id)).collect();
        for &(deadline, id) in &expected {
            wheel.insert(deadline, id);
        }
        let mut fired = Vec::new();
        for tick in (10..=200).step_by(10) {
            fired.extend(wheel.drain_expired(tick).map(|(_, id)| id));
            if tick == 120 {
                assert!(
                    wheel.levels[0].absorbing.is_none(),
                    "the slot due at 128 is moved by the last poll before it"
                );
                assert_eq!(wheel.levels[0].absorbed, 2);
            }
        }
        expected.sort_by_key(|&(deadline, _)| deadline); // stable: insertion order kept
        let ids: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
        assert_eq!(fired, ids);
        assert!(wheel.is_empty());
    }

    /// An upper-level slot is paced over the rotation before it is due, in steps of about
    /// `STEP_ITEMS`, also for a driver that polls only when `next_expiration` asks: a level-2
    /// slot of 100 000 timers (4096 ticks, as at a fine resolution) is not moved in 64
    /// steps of a 64th each, nor all at once at the first step.
    #[test]
    fn an_upper_slot_is_paced_over_its_rotation_in_small_steps() {
        const N: u64 = 100_000;
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(0).is_none());
        // Ticks 8192.. are level 2's slot 2, past level 1's two rotations.
        let expected: Vec<u64> = (0..N).map(|id| 8192 + id * 4093 % 4096).collect();
        for (id, &deadline) in expected.iter().enumerate() {
            let key = wheel.insert(deadline, id as u64);
            assert_eq!(level_of_key(&wheel, key), 2);
        }
        let (mut largest_step, mut polls_absorbing) = (0, 0);
        let mut fired = Vec::new();
        while let Some(at) = wheel.next_expiration() {
            let before = wheel.levels[1].absorbing;
            let len = wheel
                .source(1)
                .map_or(0, |number| wheel.slots[number].items.len());
            fired.extend(wheel.drain_expired(at).map(|(_, id)| (at, id)));
            // The items this poll moved: up to the new cursor, or to the end of the slot.
            let step = match (before, wheel.levels[1].absorbing) {
                (before, Some(after)) => after - before.unwrap_or(0),
                (Some(before), None) => len - before,
                (None, None) => 0,
            };
            largest_step = largest_step.max(step);
            polls_absorbing += usize::from(step > 0);
        }
        assert!(
            largest_step <= 2 * STEP_ITEMS + MIN_STEP,
            "a step moved {largest_step}"
        );
        assert!(polls_absorbing >= 64, "{polls_absorbing} steps");
        let mut order: Vec<(u64, u64)> = expected
            .iter()
            .enumerate()
            .map(|(id, &d)| (d, id as u64))
            .collect();
        order.sort();
        assert_eq!(
            fired, order,
            "every timer fires once, at its deadline, in order"
        );
    }

    #[test]
    fn a_full_slot_moves_down_in_steps_ahead_of_time() {
        const N: u64 = 64_000;
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(0).is_none()); // level 0 now reaches tick 127
        let mut expected: Vec<(u64, u64)> = Vec::new(); // (deadline, id)
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for id in 0..N {
            let deadline = 128 + next() % 64; // level 1, the slot after level 0's reach
            let key = wheel.insert(deadline, id);
            assert_eq!(level_of_key(&wheel, key), 1);
            expected.push((deadline, id));
        }
        let mut fired = Vec::new();
        let mut largest_step = 0;
        let mut extra = N;
        for tick in 1..=191 {
            let before = wheel.levels[0].absorbing.unwrap_or(0);
            fired.extend(wheel.drain_expired(tick).map(|(_, id)| (tick, id)));
            if let Some(after) = wheel.levels[0].absorbing {
                largest_step = largest_step.max(after - before);
                // Timers for the slot arrive while it is half moved: they go behind.
                let deadline = 128 + next() % 64;
                wheel.insert(deadline, extra);
                expected.push((deadline, extra));
                extra += 1;
            }
            if tick == 127 {
                assert!(
                    wheel.levels[0].absorbing.is_none(),
                    "moved before it is due"
                );
                assert_eq!(wheel.levels[0].absorbed, 2);
            }
        }
        assert!(extra > N, "the slot was moved in more than one step");
        let bound = (N as usize).div_ceil(STEPS as usize) * 2 + MIN_STEP;
        assert!(
            largest_step <= bound,
            "a step moved {largest_step} > {bound}"
        );
        expected.sort_by_key(|&(deadline, _)| deadline); // stable: insertion order kept
        assert_eq!(fired, expected);
        assert!(wheel.is_empty());
    }

    #[test]
    fn next_expiration_asks_for_the_steps() {
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(0).is_none());
        for id in 0..10_000u32 {
            wheel.insert(130 + u64::from(id % 50), id);
        }
        // Level 0 may take the slot in once the clock is in ticks 64..128.
        assert_eq!(wheel.next_expiration(), Some(64));
        assert!(wheel.poll_expired(64).is_none());
        assert!(wheel.levels[0].absorbing.is_some(), "one step, not all");
        // The next step is due within a 64th of the time left, not at tick 128.
        assert_eq!(wheel.next_expiration(), Some(65));
        while wheel.levels[0].absorbing.is_some() {
            let tick = wheel.next_expiration().unwrap();
            assert!(tick < 128);
            assert!(wheel.poll_expired(tick).is_none());
        }
        assert_eq!(wheel.next_expiration(), Some(130));
    }

    /// Owned values through every path that moves or frees a record — insert, reset, remove,
    /// a move down a level, compaction, firing, `shrink_to_fit` and dropping the wheel with
    /// timers pending — small enough for Miri, which checks that each value is dropped once.
    #[test]
    fn owned_values_survive_every_path() {
        use alloc::string::{String, ToString};
        let mut wheel: Wheel<String> = Wheel::new();
        let keys: Vec<_> = (0..120u64)
            .map(|i| wheel.insert(i % 3 + 100, i.to_string()))
            .collect();
        // Resets leave stale items behind; removals leave tombstones; both get compacted.
        for (i, &key) in keys.iter().enumerate() {
            match i % 4 {
                0 => assert_eq!(wheel.remove(key), Some(i.to_string())),
                1 => assert!(wheel.reset(key, 70)),
                _ => {}
            }
        }
        for _ in 0..10 {
            for &key in keys.iter().skip(1).step_by(4) {
                assert!(wheel.reset(key, 70));
            }
        }
        let items: usize = wheel.slots.iter().map(|slot| slot.items.len()).sum();
        assert!(
            items < 120 + 10 * 30,
            "stale items were compacted away: {items}"
        );
        assert_eq!(wheel.remove(keys[0]), None);
        wheel.get_mut(keys[2]).unwrap().push('!');
        let fired: Vec<_> = wheel.drain_expired(70).map(|(_, v)| v).collect();
        assert_eq!(fired.len(), 30);
        assert_eq!(fired[0], "1");
        assert_eq!(wheel.deadline(keys[2]), Some(102));
        wheel.shrink_to_fit();
        assert_eq!(wheel.get_mut(keys[2]).map(|v| v.as_str()), Some("2!"));
        assert_eq!(wheel.len(), 60);
        // The rest are dropped with the wheel.
    }

    #[test]
    fn huge_gap_is_a_jump() {
        let mut wheel = Wheel::new();
        wheel.insert(u64::MAX, "max");
        wheel.insert(1 << 62, "far");
        assert!(wheel.poll_expired(1 << 60).is_none());
        assert_eq!(wheel.now(), 1 << 60);
        assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("far"));
        assert_eq!(wheel.now(), 1 << 62);
        assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("max"));
        assert_eq!(wheel.now(), u64::MAX);
        assert!(wheel.poll_expired(u64::MAX).is_none());
    }
}
