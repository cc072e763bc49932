//! The [`SlimWheel`]'s absorption, the `Wheel`'s (`wheel/absorb.rs`) over its items: a level
//! taking in the next slot of the level above, in paced steps ahead of time (the `Wheel`'s
//! module docs, "Pacing"; the arithmetic is `Level`'s, in `wheel/level.rs`).

use super::level::{ring, slot_number};
use super::{SlimWheel, LEVELS, LEVEL_BITS, RING, TOUCH, UNSETTLED};

impl<T> SlimWheel<T> {
    /// Whether `level` may start absorbing its next parent slot (see the `Level`'s `can_absorb`).
    #[inline]
    pub(super) fn can_absorb(&self, level: usize) -> bool {
        self.levels[level].can_absorb(self.now, &self.levels[level + 1])
    }

    /// Starts absorbing the next parent slot at `level`; an empty one is absorbed at once.
    pub(super) fn start_absorbing(&mut self, level: usize) {
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
    pub(super) fn absorb(&mut self, level: usize, quota: usize) {
        let (Some(number), Some(mut cursor)) = (self.source(level), self.levels[level].absorbing)
        else {
            return;
        };
        let items = core::mem::take(&mut self.slots[number].items);
        let end = items.len().min(cursor.saturating_add(quota));
        let mut moved = 0;
        for chunk in items[cursor..end].chunks(TOUCH) {
            self.store.touch(chunk);
            self.store.touch_deadlines(chunk);
            for &item in chunk {
                if self.store.valid(item, number) {
                    let deadline = self.store.deadline(item.index);
                    // Straight to `level`: while it absorbs, the usual rule still names the
                    // slot being emptied. The item keeps its generation: a move down keeps
                    // the key.
                    let below = slot_number(deadline, level);
                    self.push_item(below, item);
                    self.store.set_slot(item.index, below as u32);
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
    pub(super) fn finish_absorbing(&mut self, tick: u64) -> bool {
        let mut any = false;
        for level in 0..LEVELS - 1 {
            let state = &self.levels[level];
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
    pub(super) fn absorb_ahead(&mut self) {
        if self.now >> LEVEL_BITS != self.settled {
            self.absorb_pass();
        }
    }

    /// The pass of [`absorb_ahead`](Self::absorb_ahead) over every level, out of line for the
    /// same reason as [`advance_upper`](Self::advance_upper).
    #[inline(never)]
    pub(super) fn absorb_pass(&mut self) {
        for level in 0..LEVELS - 1 {
            if self.can_absorb(level) {
                self.start_absorbing(level);
            }
            let (Some(number), Some(cursor)) = (self.source(level), self.levels[level].absorbing)
            else {
                continue;
            };
            let remaining = self.slots[number].items.len() - cursor;
            let quota = self.levels[level].quota(self.now, remaining);
            self.absorb(level, quota);
        }
        // A level may start only now that the one above it moved on in this same pass.
        if (0..LEVELS - 1)
            .all(|level| self.levels[level].absorbing.is_none() && !self.can_absorb(level))
        {
            self.settled = self.now >> LEVEL_BITS;
        }
    }
}
