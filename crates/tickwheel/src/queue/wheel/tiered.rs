//! The logic both hierarchical wheels (the `Wheel` and the `SlimWheel`) share, one
//! implementation over the state they share ([`Tiers`], `tiers.rs`) and each wheel's records:
//! expiry (a poll and `next_expiration`), the slots' items and departures, absorption (a
//! level taking in the next slot of the level above, in paced steps ahead of time: see the
//! module docs, "Pacing"; the arithmetic is `Level`'s, in `level.rs`) and a poll's moves of
//! the clock past the end of level 0.
//!
//! The wheels differ only in their items and record stores: [`Tiered`]'s required methods
//! are those differences and access to the state both have; its provided methods are the
//! shared logic. Every required method is `#[inline]` (but the cold and out-of-line ones), so
//! each wheel compiles to its own code.

use alloc::vec::Vec;

use super::level::{ring, start};
use super::tiers::{Departed, Tiers, DEPART_BATCH};
use super::{LEVELS, LEVEL_BITS, RING, TOUCH, UNSETTLED};

/// How often a debug build checks the invariants of a wheel holding more than
/// [`CHECK_SMALL`] timers: once in this many polls that caught up.
#[cfg(debug_assertions)]
const CHECK_EVERY: u32 = 1024;

/// Up to this many timers, a debug build checks the invariants at every poll that caught up.
#[cfg(debug_assertions)]
const CHECK_SMALL: usize = 64;

/// A hierarchical wheel, as its shared logic sees it.
pub(in crate::queue) trait Tiered {
    /// What a slot's vector holds: a record index, or an index and a generation.
    type Item: Copy;
    /// What a slot counts of its stale items (see [`Slot::stale`](super::tiers::Slot::stale)).
    type Stale: Default;
    /// What a departure notes: a slot and a position, or the slot alone.
    type Departure: Departed;
    /// A timer's value.
    type Value;
    /// What a fired timer comes out with: its key, or (the `IdWheel`) the caller's id.
    type Name;

    /// The state both wheels share.
    fn tiers(&self) -> &Tiers<Self::Item, Self::Stale, Self::Departure>;
    /// The state both wheels share, to change.
    fn tiers_mut(&mut self) -> &mut Tiers<Self::Item, Self::Stale, Self::Departure>;
    /// The number of pending timers.
    fn timers(&self) -> usize;
    /// Starts loading what firing the timers of `items` reads (hot records and values).
    fn touch_ready(&self, items: &[Self::Item]);
    /// Starts loading the records (hot part and deadline) of items about to move.
    fn touch_moving(&self, items: &[Self::Item]);
    /// Whether `item`, at `pos` of slot `number`, is the current item of a live timer. The
    /// wheels tell it apart differently: the `Wheel`'s record holds its item's position, the
    /// `SlimWheel`'s item holds its record's generation.
    fn current(&self, item: Self::Item, number: usize, pos: usize) -> bool;
    /// The deadline of the live timer `item` is the current item of.
    fn item_deadline(&self, item: Self::Item) -> u64;
    /// Moves the current item `item`, due at `deadline`, to its slot at `level` (a move down
    /// keeps the key).
    fn move_down(&mut self, item: Self::Item, deadline: u64, level: usize);
    /// Removes the live timer `item` is the current item of, as it fires: its name and value.
    fn fire(&mut self, item: Self::Item) -> Option<(Self::Name, Self::Value)>;
    /// Gives full slot `number` room for an item. Cold: it runs once a vector fills. The
    /// `SlimWheel` compacts a slot a quarter stale instead of growing it (`slim/slots.rs`).
    fn make_room(&mut self, number: usize);
    /// Drops slot `number`'s stale items and consumed prefix, keeping the order of the
    /// rest. The wheels tell stale items apart differently (see [`current`](Self::current)),
    /// and the `Wheel` writes its records' new positions.
    fn compact(&mut self, number: usize);
    /// Marks the old items of `departed` before their slots' counts are updated: the `Wheel`
    /// writes tombstones and counts resets' items as stale (`wheel/slots.rs`); the
    /// `SlimWheel`'s items need no mark.
    fn mark_departed(&mut self, departed: &[Self::Departure]);
    /// Checks the wheel's invariants (its `check_invariants`). Called by `debug_check`
    /// alone, so a release build does not use it.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    fn check_all(&self);

    /// Appends `item` to slot `number` and returns its position.
    #[inline]
    fn push_item(&mut self, number: usize, item: Self::Item) -> usize {
        let target = &mut self.tiers_mut().slots[number];
        let pos = target.items.len();
        if pos == target.items.capacity() {
            self.make_room(number);
        }
        let tiers = self.tiers_mut();
        let target = &mut tiers.slots[number];
        target.items.push(item);
        target.live += 1;
        tiers.levels[number / RING].occupy(number % RING);
        pos
    }

    /// Removes and returns the next timer of the ready slot.
    #[inline]
    fn pop_ready(&mut self) -> Option<(Self::Name, Self::Value)> {
        let number = self.tiers().ready_slot();
        loop {
            let tiers = self.tiers();
            let pos = tiers.cursor;
            let &item = tiers.slots[number].items.get(pos)?;
            if pos % TOUCH == 0 {
                let items = &tiers.slots[number].items;
                self.touch_ready(&items[pos..items.len().min(pos + TOUCH)]);
            }
            self.tiers_mut().cursor += 1;
            if !self.current(item, number, pos) {
                continue;
            }
            let tiers = self.tiers_mut();
            let ready = &mut tiers.slots[number];
            ready.live -= 1;
            if ready.live == 0 {
                tiers.clear_slot(number);
            }
            return self.fire(item);
        }
    }

    /// Advances the wheel towards tick `now` and returns the next timer due by then, in
    /// firing order (the wheels' `poll_expired`; see the module docs, "Expiry").
    fn poll(&mut self, now: u64) -> Option<(Self::Name, Self::Value)> {
        if now < self.tiers().now {
            return None;
        }
        self.apply_departures();
        loop {
            if let Some(fired) = self.pop_ready() {
                return Some(fired);
            }
            let tiers = self.tiers_mut();
            if now == tiers.now {
                self.absorb_ahead();
                #[cfg(debug_assertions)]
                self.debug_check();
                return None;
            }
            // Level 0 holds every timer up to `end0`, one slot a tick (past it, a slot
            // being absorbed is only partly there).
            let end0 = tiers.levels[0].last_tick();
            let level0 = tiers.levels[0]
                .occupied
                .rotate_right(tiers.ready_slot() as u32)
                & !1;
            if level0 != 0 {
                let next = tiers.now + u64::from(level0.trailing_zeros());
                if next <= end0 {
                    tiers.now = now.min(next);
                    continue;
                }
            }
            if end0 >= now {
                tiers.now = now;
                continue;
            }
            self.advance_upper(now);
        }
    }

    /// A tick no later than the earliest pending effective deadline; `None` when empty (the
    /// wheels' `next_expiration`). The earliest of: the first occupied slot's start (exact at
    /// level 0), and the tick the next step of absorption is due — when a level is
    /// absorbing, the gap of its pace; otherwise when the level below may start on a level's
    /// first slot.
    fn next_tick(&self) -> Option<u64> {
        if self.timers() == 0 {
            return None;
        }
        let tiers = self.tiers();
        let mut next = tiers.first_live_slot(0).unwrap_or(u64::MAX);
        for level in 1..LEVELS {
            let Some(first) = tiers.first_live_slot(level) else {
                continue;
            };
            let below = level - 1;
            let step = if let (Some(number), Some(cursor)) =
                (tiers.source(below), tiers.levels[below].absorbing)
            {
                let remaining = tiers.slots[number].items.len() - cursor;
                tiers.levels[below].next_step(tiers.now, remaining)
            } else {
                start(first - 1, level).max(tiers.now.saturating_add(1))
            };
            next = next.min(start(first, level)).min(step);
        }
        Some(next)
    }

    /// Compacts every slot holding a timer and gives back what slots and spare lists hold
    /// beyond their items (the wheels' `shrink_to_fit`, with their records).
    fn shrink_slots(&mut self) {
        self.compact_slots();
        for number in 0..LEVELS * RING {
            self.tiers_mut().slots[number].items.shrink_to_fit();
        }
        for spare in self.tiers_mut().spare.iter_mut() {
            *spare = Vec::new();
        }
    }

    /// Applies every departure and compacts every slot holding a timer: afterwards no slot
    /// holds a stale item or a consumed prefix (a slot without a live timer holds no item),
    /// so no item names a record but its current one.
    fn compact_slots(&mut self) {
        self.apply_departures();
        for number in 0..LEVELS * RING {
            if self.tiers().slots[number].live > 0 {
                self.compact(number);
            }
        }
    }

    /// Notes that a timer left its item (`departure`), to apply with the next batch (see
    /// "Departures" in `wheel/slots.rs`).
    #[inline]
    fn depart(&mut self, departure: Self::Departure) {
        let departed = &mut self.tiers_mut().departed;
        if departed.len() == departed.capacity() {
            departed.reserve_exact(DEPART_BATCH);
        }
        departed.push(departure);
        if departed.len() >= DEPART_BATCH {
            self.apply_batch();
        }
    }

    /// Applies the departures noted since the last batch.
    #[inline]
    fn apply_departures(&mut self) {
        if !self.tiers().departed.is_empty() {
            self.apply_batch();
        }
    }

    /// Applies a batch: marks first (no item moves until every mark is written), then each
    /// slot's count, clearing a slot that has no live timer left and compacting one that is
    /// mostly stale. Out of line: it runs once in [`DEPART_BATCH`] departures, or at a poll.
    #[inline(never)]
    fn apply_batch(&mut self) {
        let departed = core::mem::take(&mut self.tiers_mut().departed);
        self.mark_departed(&departed);
        for departure in &departed {
            let number = departure.slot();
            let tiers = self.tiers_mut();
            let target = &mut tiers.slots[number];
            target.live -= 1;
            if target.live == 0 {
                tiers.clear_slot(number);
            } else if tiers.mostly_stale(number) {
                self.compact(number);
            }
        }
        let tiers = self.tiers_mut();
        tiers.departed = departed;
        tiers.departed.clear();
    }

    /// A debug build's sampled [`check_all`](Self::check_all): at every poll that caught up
    /// while the wheel holds up to [`CHECK_SMALL`] timers, else at every [`CHECK_EVERY`]th.
    #[cfg(debug_assertions)]
    fn debug_check(&mut self) {
        let tiers = self.tiers_mut();
        tiers.caught_up = tiers.caught_up.wrapping_add(1);
        if self.timers() <= CHECK_SMALL || self.tiers().caught_up % CHECK_EVERY == 0 {
            self.check_all();
        }
    }

    /// Moves the clock to `to` over a stretch with no timer: every level below the lowest
    /// non-empty one is empty, and no absorption in progress takes in a slot due by `to`.
    /// Inlined into [`advance_upper`](Self::advance_upper), as it was before it was shared.
    #[inline]
    fn jump(&mut self, to: u64) {
        let tiers = self.tiers_mut();
        tiers.now = to;
        tiers.settled = UNSETTLED;
        for level in tiers.levels.iter_mut() {
            level.catch_up(to);
        }
    }

    /// One step of a poll past the end of level 0: finish what is under way for slots due
    /// by `now`, else bring the first upper slot due by `now` down, else jump to `now`.
    ///
    /// Out of line: it runs about once in 64 ticks, and inlined, its per-level set-up
    /// (`parent(now, level)` for every level) was hoisted into every poll, doubling the cost of
    /// a poll that only pops a timer.
    #[inline(never)]
    fn advance_upper(&mut self, now: u64) {
        if self.finish_absorbing(now) {
            return;
        }
        match self.tiers().first_upper() {
            Some((level, first)) if first <= now => {
                // Nothing before `first`: stand just before it and bring its slot down.
                self.jump(first - 1);
                for below in (0..level).rev() {
                    if self.tiers().can_absorb(below) {
                        self.start_absorbing(below);
                        self.absorb(below, usize::MAX);
                    }
                }
            }
            _ => self.jump(now),
        }
    }

    /// Starts absorbing the next parent slot at `level`; an empty one is absorbed at once.
    fn start_absorbing(&mut self, level: usize) {
        let tiers = self.tiers_mut();
        tiers.settled = UNSETTLED;
        let next = tiers.levels[level].absorbed + 1;
        let number = (level + 1) * RING + ring(next);
        if tiers.slots[number].live == 0 {
            tiers.levels[level].absorbed = next;
        } else {
            let now = tiers.now;
            let state = &mut tiers.levels[level];
            state.absorbing = Some(0);
            state.stepped = now;
        }
    }

    /// Moves up to `quota` items of the slot `level` is absorbing down to `level`.
    fn absorb(&mut self, level: usize, quota: usize) {
        let tiers = self.tiers_mut();
        let (Some(number), Some(mut cursor)) = (tiers.source(level), tiers.levels[level].absorbing)
        else {
            return;
        };
        let items = core::mem::take(&mut tiers.slots[number].items);
        let end = items.len().min(cursor.saturating_add(quota));
        let mut moved = 0;
        for chunk in items[cursor..end].chunks(TOUCH) {
            self.touch_moving(chunk);
            for &item in chunk {
                if self.current(item, number, cursor) {
                    let deadline = self.item_deadline(item);
                    // Straight to `level`: while it absorbs, the usual rule still names the
                    // slot being emptied.
                    self.move_down(item, deadline, level);
                    moved += 1;
                }
                cursor += 1;
            }
        }
        let tiers = self.tiers_mut();
        let source = &mut tiers.slots[number];
        source.items = items;
        source.live -= moved;
        let live = source.live;
        tiers.levels[level].absorbing = Some(cursor);
        if live == 0 {
            tiers.clear_slot(number);
        }
    }

    /// Completes every absorption in progress of a slot that starts by `tick`; whether there
    /// was one. (Others go on at their pace: nothing of theirs is due by `tick`.)
    fn finish_absorbing(&mut self, tick: u64) -> bool {
        let mut any = false;
        for level in 0..LEVELS - 1 {
            let state = &self.tiers().levels[level];
            if state.absorbing.is_some() && state.next_parent_start() <= tick {
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
        let tiers = self.tiers();
        if tiers.now >> LEVEL_BITS != tiers.settled {
            self.absorb_pass();
        }
    }

    /// The pass of [`absorb_ahead`](Self::absorb_ahead) over every level, out of line for the
    /// same reason as [`advance_upper`](Self::advance_upper).
    #[inline(never)]
    fn absorb_pass(&mut self) {
        for level in 0..LEVELS - 1 {
            if self.tiers().can_absorb(level) {
                self.start_absorbing(level);
            }
            let tiers = self.tiers_mut();
            let (Some(number), Some(cursor)) = (tiers.source(level), tiers.levels[level].absorbing)
            else {
                continue;
            };
            let remaining = tiers.slots[number].items.len() - cursor;
            let now = tiers.now;
            let quota = tiers.levels[level].quota(now, remaining);
            self.absorb(level, quota);
        }
        // A level may start only now that the one above it moved on in this same pass.
        let tiers = self.tiers_mut();
        if (0..LEVELS - 1)
            .all(|level| tiers.levels[level].absorbing.is_none() && !tiers.can_absorb(level))
        {
            tiers.settled = tiers.now >> LEVEL_BITS;
        }
    }
}
