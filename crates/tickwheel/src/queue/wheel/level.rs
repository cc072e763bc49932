//! [`Level`]: one level of the [`Wheel`](super::Wheel), its slot arithmetic and the pacing of
//! its absorptions.
//!
//! # Slot arithmetic
//!
//! A slot of level `L` spans `64^L` ticks; its *index* is `tick >> 6L` ([`index`]), its
//! *ring slot* the index modulo [`RING`], its *number* in the wheel's slot table
//! `L * RING + ring slot`. Its *parent slot* is its index at level `L + 1` ([`parent`]).
//!
//! # Pacing
//!
//! Every `poll_expired` that returns `None` (it has caught up with `t`) does a bounded step
//! of absorption on each level: the share of what remains of the slot that the ticks since
//! the level's last step make of the ticks left to finish it (a driver that polled late
//! takes in the steps it missed), plus a floor of [`MIN_STEP`] items ([`Level::quota`]). The
//! ticks left end one slot of the level before the parent slot starts, so the level below can
//! take in its first child ahead of time too ([`Level::pace`]).
//! [`next_expiration`](crate::TimerQueue::next_expiration) asks for a step at least 64 times
//! over that window, and more often for a large slot, about every [`STEP_ITEMS`] items: a
//! level-2 slot of millions of timers at a fine resolution is moved a thousand items at a time
//! over a whole rotation. It answers the earlier of the earliest slot and the tick the next
//! absorption step is due ([`Level::next_step`]; never later than the earliest deadline, as
//! the contract requires). A driver that polls late, or jumps far ahead, gets the remaining
//! work done at once in `poll_expired`: the classic cascade, as a fallback.
//!
//! Moving ahead of time also saves work: a timer inserted less than one parent rotation ahead
//! goes straight to the level that will fire it. In the "6 million delayed tasks" workload
//! (delays up to 1000 ticks) every timer is placed on level 0 or 1 and moves at most once.

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
/// Items an absorption step moves at least, so that small slots go in one step.
pub const MIN_STEP: usize = 256;
/// Steps an absorption is spread over, at least when it has the time (see [`Level::pace`]).
pub(in crate::queue) const STEPS: u64 = SLOTS as u64;
/// About the most items one absorption step moves when the time before the slot is due
/// allows more steps: a step this size takes tens of microseconds.
pub(in crate::queue) const STEP_ITEMS: usize = 1024;

/// Bits below level `level`.
#[inline]
pub(in crate::queue) const fn shift(level: usize) -> u32 {
    level as u32 * LEVEL_BITS
}

/// The slot index of `tick` at `level` (`level < LEVELS`, so the shift is at most 60).
#[inline]
pub(in crate::queue) fn index(tick: u64, level: usize) -> u64 {
    tick >> shift(level)
}

/// The number (in the wheel's slot table) of level `level`'s slot holding `tick`.
///
/// The hot paths (insert, reset, a move down a level) call this and [`parent`] with the level
/// as their own loop counter rather than through [`Level::slot_of`] and [`Level::reaches`]:
/// the compiler then knows the shift, where `Level::level` is a load, and the callers stay
/// small enough to inline (with the field, a `Wheel` executed 9–16 % more instructions on
/// insert, cancel, fire and reset).
#[inline]
pub(in crate::queue) fn slot_number(tick: u64, level: usize) -> usize {
    level * RING + ring(index(tick, level))
}

/// The parent slot of `tick` at `level`: its index at `level + 1` (0 above the top level).
#[inline]
pub(in crate::queue) fn parent(tick: u64, level: usize) -> u64 {
    tick.checked_shr(shift(level + 1)).unwrap_or(0)
}

/// The first tick of slot `index` at `level`, `u64::MAX` if that is past the end of time.
#[inline]
pub(in crate::queue) fn start(index: u64, level: usize) -> u64 {
    u64::try_from(u128::from(index) << shift(level)).unwrap_or(u64::MAX)
}

/// The ring slot of slot index `index`.
#[inline]
pub(in crate::queue) fn ring(index: u64) -> usize {
    (index & RING_MASK) as usize
}

/// The state of one level: which of its ring slots are occupied, and how far it has taken in
/// the level above (see the wheel's "Terms and invariants").
#[derive(Clone, Copy)]
pub(in crate::queue) struct Level {
    /// This level's number, 0 for the level of single ticks.
    pub(in crate::queue) level: usize,
    /// Occupied ring slots, bit `i` for ring slot `i`.
    pub(in crate::queue) occupied: u128,
    /// The last parent slot (an index at the level above) whose timers this level holds.
    pub(in crate::queue) absorbed: u64,
    /// While this level takes in parent slot `absorbed + 1`: how many of that slot's items
    /// it has moved.
    pub(in crate::queue) absorbing: Option<usize>,
    /// The tick of this level's last absorption step (or of its start).
    pub(in crate::queue) stepped: u64,
}

impl Level {
    /// Level `level` of a wheel whose clock reads `tick`: empty, with `tick`'s parent slot
    /// absorbed.
    pub(in crate::queue) fn new(level: usize, tick: u64) -> Level {
        Level {
            level,
            occupied: 0,
            absorbed: parent(tick, level),
            absorbing: None,
            stepped: tick,
        }
    }

    /// The number (in the wheel's slot table) of the slot of this level that holds `tick`.
    #[inline]
    pub(in crate::queue) fn slot_of(&self, tick: u64) -> usize {
        slot_number(tick, self.level)
    }

    /// Whether this level's absorbed range reaches `deadline` (a timer due then belongs on
    /// the lowest level that does).
    #[inline]
    pub(in crate::queue) fn reaches(&self, deadline: u64) -> bool {
        parent(deadline, self.level) <= self.absorbed
    }

    /// Marks ring slot `ring_slot` occupied.
    #[inline]
    pub(in crate::queue) fn occupy(&mut self, ring_slot: usize) {
        self.occupied |= 1 << ring_slot;
    }

    /// Marks ring slot `ring_slot` empty.
    #[inline]
    pub(in crate::queue) fn vacate(&mut self, ring_slot: usize) {
        self.occupied &= !(1 << ring_slot);
    }

    /// The slot number (at the level above) this level is absorbing, if it is.
    #[inline]
    pub(in crate::queue) fn source(&self) -> Option<usize> {
        self.absorbing
            .map(|_| (self.level + 1) * RING + ring(self.absorbed + 1))
    }

    /// The absorption in progress is complete: the parent slot is taken in.
    #[inline]
    pub(in crate::queue) fn absorbed_next(&mut self) {
        self.absorbing = None;
        self.absorbed += 1;
    }

    /// The first occupied slot of this level after `now`'s own (the ready slot included at
    /// level 0): its index.
    #[inline]
    pub(in crate::queue) fn first_slot(&self, now: u64) -> Option<u64> {
        if self.occupied == 0 {
            return None;
        }
        let own = index(now, self.level);
        let offset = self
            .occupied
            .rotate_right(ring(own) as u32)
            .trailing_zeros();
        Some(own + u64::from(offset))
    }

    /// The last tick this level covers (the end of its absorbed range).
    #[inline]
    pub(in crate::queue) fn last_tick(&self) -> u64 {
        let end = (u128::from(self.absorbed) + 1) << shift(self.level + 1);
        u64::try_from(end - 1).unwrap_or(u64::MAX)
    }

    /// The first tick of the parent slot this level absorbs (or would absorb next).
    #[inline]
    pub(in crate::queue) fn next_parent_start(&self) -> u64 {
        start(self.absorbed + 1, self.level + 1)
    }

    /// Whether this level may start absorbing its next parent slot at `now`: the clock has
    /// left the bank it will reuse, and the level `above` holds that slot whole.
    #[inline]
    pub(in crate::queue) fn can_absorb(&self, now: u64, above: &Level) -> bool {
        self.absorbing.is_none()
            && self.absorbed == parent(now, self.level)
            && (self.absorbed + 1) >> LEVEL_BITS <= above.absorbed
    }

    /// Catches up with a clock that jumped to `to` over a stretch with no timer.
    #[inline]
    pub(in crate::queue) fn catch_up(&mut self, to: u64) {
        // An empty level catches up; a non-empty one already reaches `to` (its timers are
        // later than `to`, and lie within its absorbed range).
        self.absorbed = self.absorbed.max(parent(to, self.level));
    }

    /// How this level's absorption in progress is paced at `now`, as `(window, gap)`: the
    /// ticks left to finish it (at least 1), and the ticks between two steps.
    ///
    /// The window ends one slot of this level before the parent slot starts, so that the
    /// level below can start taking in that slot's first child ahead of time too. It is
    /// spread over at least [`STEPS`] steps and, when the window is long enough, over as many
    /// as make steps of about [`STEP_ITEMS`] items: a slot of millions of timers a whole
    /// rotation ahead (an upper level at a fine resolution) is moved a small step at a time
    /// over that rotation, not in 64 steps of tens of thousands of items each.
    pub(in crate::queue) fn pace(&self, now: u64, remaining: usize) -> (u64, u64) {
        let margin = if self.level == 0 {
            0
        } else {
            1 << shift(self.level)
        };
        let ticks_left = self.next_parent_start().saturating_sub(now);
        let window = ticks_left.saturating_sub(margin).max(1);
        let steps = (remaining.div_ceil(STEP_ITEMS) as u64)
            .max(STEPS)
            .min(window);
        (window, (window / steps).max(1))
    }

    /// The items the step at `now` moves of the `remaining` ones, and the step is taken: the
    /// share of the ticks since the last step (several when the driver polled late: it gets
    /// the steps it missed too, so that the slot is still done in time instead of all at once
    /// at its start, the fallback of `finish_absorbing`), plus [`MIN_STEP`].
    pub(in crate::queue) fn quota(&mut self, now: u64, remaining: usize) -> usize {
        let (window, _) = self.pace(now, remaining);
        let elapsed = now.saturating_sub(self.stepped).clamp(1, window);
        self.stepped = now;
        let share = remaining
            .saturating_mul(elapsed as usize)
            .div_ceil(window as usize);
        share + MIN_STEP
    }

    /// The tick the next absorption step of this level is due at, with `remaining` items
    /// left to move.
    #[inline]
    pub(in crate::queue) fn next_step(&self, now: u64, remaining: usize) -> u64 {
        now.saturating_add(self.pace(now, remaining).1)
    }
}
