//! Absorption and the clock's stepping, one implementation for both hierarchical wheels (the
//! `Wheel` and the `SlimWheel`): a level taking in the next slot of the level above, in paced
//! steps ahead of time (see the module docs, "Pacing"; the arithmetic is `Level`'s, in
//! `level.rs`), and a poll's moves of the clock past the end of level 0.
//!
//! The wheels differ only in their items and record stores: [`Tiered`]'s required methods
//! are those differences and access to the fields both have; its provided methods are the
//! shared logic. Every required method is `#[inline]`, so each wheel compiles to its own code.

use alloc::vec::Vec;

use super::level::{parent, ring, start, Level};
use super::{LEVELS, LEVEL_BITS, RING, TOUCH, UNSETTLED};

/// A hierarchical wheel, as absorption and the clock's stepping see it.
pub(in crate::queue) trait Tiered {
    /// What a slot's vector holds: a record index, or an index and a generation.
    type Item: Copy;

    /// The levels' state.
    fn levels(&self) -> &[Level; LEVELS];
    /// The levels' state, to change.
    fn levels_mut(&mut self) -> &mut [Level; LEVELS];
    /// The wheel's `now`.
    fn clock(&self) -> u64;
    /// Sets the wheel's `now`.
    fn set_clock(&mut self, now: u64);
    /// `now >> LEVEL_BITS` when a pass of [`absorb_ahead`](Self::absorb_ahead) last found
    /// nothing under way and nothing to start; [`UNSETTLED`] when it must look again.
    fn settled(&self) -> u64;
    /// Sets [`settled`](Self::settled).
    fn set_settled(&mut self, settled: u64);
    /// Slot `number`'s items and its count of live ones.
    fn slot_mut(&mut self, number: usize) -> (&mut Vec<Self::Item>, &mut usize);
    /// Slot `number`'s count of items and of live ones.
    fn slot_sizes(&self, number: usize) -> (usize, usize);
    /// Starts loading the records (hot part and deadline) of items about to move.
    fn touch_moving(&self, items: &[Self::Item]);
    /// Whether `item`, at `pos` of slot `number`, is the current item of a live timer.
    fn current(&self, item: Self::Item, number: usize, pos: usize) -> bool;
    /// The deadline of the live timer `item` is the current item of.
    fn item_deadline(&self, item: Self::Item) -> u64;
    /// Moves the current item `item`, due at `deadline`, to its slot at `level` (a move down
    /// keeps the key).
    fn move_down(&mut self, item: Self::Item, deadline: u64, level: usize);
    /// Empties slot `number`, which holds no live timer (the wheel's `clear_slot`).
    fn empty_slot(&mut self, number: usize);

    /// Asserts the levels' part of invariant (3) of `check.rs` (each wheel's
    /// `check_invariants` runs it first).
    fn check_levels(&self) {
        let now = self.clock();
        for (l, level) in self.levels().iter().enumerate() {
            assert_eq!(level.level, l, "level {l} knows its number");
            let own = parent(now, l);
            assert!(
                level.absorbed == own || level.absorbed == own + 1,
                "(3) level {l} absorbed {} with now's parent slot {own}",
                level.absorbed
            );
            if let Some(cursor) = level.absorbing {
                assert!(l < LEVELS - 1, "(3) the top level never absorbs");
                assert!(
                    (level.absorbed + 1) >> LEVEL_BITS <= self.levels()[l + 1].absorbed,
                    "(3) level {l} absorbs a slot the level above does not hold whole"
                );
                let source = level.source().expect("absorbing has a source");
                assert!(
                    cursor <= self.slot_sizes(source).0,
                    "(3) level {l}'s cursor is past its source's items"
                );
            }
        }
    }

    /// The slot number of the ready slot (level 0, `now`'s slot).
    #[inline]
    fn ready_slot(&self) -> usize {
        ring(self.clock())
    }

    /// The level a timer due at `deadline` (`>= now`) belongs on: the lowest whose absorbed
    /// range reaches it ([`Level::reaches`], with the level as the loop's counter: see
    /// [`slot_number`](super::level::slot_number)).
    #[inline]
    fn level_of(&self, deadline: u64) -> usize {
        let mut level = 0;
        while level < LEVELS - 1 && parent(deadline, level) > self.levels()[level].absorbed {
            level += 1;
        }
        level
    }

    /// The slot number level `level` is absorbing, if it is.
    #[inline]
    fn source(&self, level: usize) -> Option<usize> {
        self.levels()[level].source()
    }

    /// The level absorbing slot `number`, if one is.
    #[inline]
    fn absorber(&self, number: usize) -> Option<usize> {
        let level = (number / RING).checked_sub(1)?;
        (self.source(level) == Some(number)).then_some(level)
    }

    /// The lowest non-empty level above 0 and the first tick of its first occupied slot.
    #[inline]
    fn first_upper(&self) -> Option<(usize, u64)> {
        (1..LEVELS).find_map(|level| {
            let first = self.levels()[level].first_slot(self.clock())?;
            Some((level, start(first, level)))
        })
    }

    /// Moves the clock to `to` over a stretch with no timer: every level below the lowest
    /// non-empty one is empty, and no absorption in progress takes in a slot due by `to`.
    /// Inlined into [`advance_upper`](Self::advance_upper), as it was before it was shared.
    #[inline]
    fn jump(&mut self, to: u64) {
        self.set_clock(to);
        self.set_settled(UNSETTLED);
        for level in self.levels_mut().iter_mut() {
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

    /// Whether `level` may start absorbing its next parent slot (see [`Level::can_absorb`]).
    #[inline]
    fn can_absorb(&self, level: usize) -> bool {
        self.levels()[level].can_absorb(self.clock(), &self.levels()[level + 1])
    }

    /// Starts absorbing the next parent slot at `level`; an empty one is absorbed at once.
    fn start_absorbing(&mut self, level: usize) {
        self.set_settled(UNSETTLED);
        let next = self.levels()[level].absorbed + 1;
        let number = (level + 1) * RING + ring(next);
        let now = self.clock();
        if self.slot_sizes(number).1 == 0 {
            self.levels_mut()[level].absorbed = next;
        } else {
            let state = &mut self.levels_mut()[level];
            state.absorbing = Some(0);
            state.stepped = now;
        }
    }

    /// Moves up to `quota` items of the slot `level` is absorbing down to `level`.
    fn absorb(&mut self, level: usize, quota: usize) {
        let (Some(number), Some(mut cursor)) = (self.source(level), self.levels()[level].absorbing)
        else {
            return;
        };
        let items = core::mem::take(self.slot_mut(number).0);
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
        let (slot_items, live) = self.slot_mut(number);
        *slot_items = items;
        *live -= moved;
        let live = *live;
        self.levels_mut()[level].absorbing = Some(cursor);
        if live == 0 {
            self.empty_slot(number);
        }
    }

    /// Completes every absorption in progress of a slot that starts by `tick`; whether there
    /// was one. (Others go on at their pace: nothing of theirs is due by `tick`.)
    fn finish_absorbing(&mut self, tick: u64) -> bool {
        let mut any = false;
        for level in 0..LEVELS - 1 {
            let state = &self.levels()[level];
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
        if self.clock() >> LEVEL_BITS != self.settled() {
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
            let (Some(number), Some(cursor)) = (self.source(level), self.levels()[level].absorbing)
            else {
                continue;
            };
            let remaining = self.slot_sizes(number).0 - cursor;
            let now = self.clock();
            let quota = self.levels_mut()[level].quota(now, remaining);
            self.absorb(level, quota);
        }
        // A level may start only now that the one above it moved on in this same pass.
        if (0..LEVELS - 1)
            .all(|level| self.levels()[level].absorbing.is_none() && !self.can_absorb(level))
        {
            self.set_settled(self.clock() >> LEVEL_BITS);
        }
    }
}
