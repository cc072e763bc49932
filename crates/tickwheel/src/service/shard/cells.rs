//! Cells: handles for staged timers.
//!
//! A timer with a handle ([`Shard::stage_with_cell`]) is staged with a *cell*: a slot in the
//! shard's [`Cells`] (under the queue lock) that learns the timer's queue key when it is
//! queued. The handle names the cell and the generation it was handed out at
//! ([`Target::Cell`]); the staged entry carries both too.
//!
//! * The producer takes a cell from the inbox's `pool` under the inbox lock it holds anyway.
//!   The pool is refilled from the cells that fires and cancels freed, each time the inbox
//!   is taken (both locks are held then), with new cells for twice what the producers used
//!   since the last take; only a producer that finds it empty takes the queue lock, to
//!   reserve [`CELL_REFILL`] cells at once.
//! * Queuing a staged timer writes its key and generation into its cell's slot, and the queue's
//!   [`Entry`](super::Entry) carries the cell, so that a drain that fires the timer frees the cell
//!   (its next generation goes to the pool) without touching the slot; a cancel frees it too. A
//!   handle whose generation matches its slot's gets the slot's key, which the queue knows to be
//!   stale once the timer is gone; once the cell is reused and queued again the generations no
//!   longer match. Either way every operation on a stale handle is a no-op.
//! * A cancel first looks for its timer among the inbox's
//!   [`CANCEL_SCAN`](super::inbox::CANCEL_SCAN) latest entries, under the inbox lock only
//!   ([`Shard::cancel_staged`]): a timer found there cannot be taken by anyone else meanwhile, so
//!   removing it decides its fate, and its cell goes back to the pool at its next generation. A
//!   timeout cancelled soon after it was scheduled is thus never queued at all.
//! * Any other operation on a handle whose timer may still be staged (in the inbox or in
//!   `taken`) queues every staged timer of the shard first, under the queue lock it holds:
//!   the work the timer thread would have done at its next wake-up, in the same order. The
//!   timer is then an ordinary queued timer (or found gone), and its fate is decided under
//!   the queue lock exactly once, as below (the loom models
//!   `loom_cancel_of_a_staged_timer_vs_fire_decides_exactly_once` and
//!   `loom_stage_and_reset_vs_drain_runs_once`).
//! * Generations follow the queues' rule (`queue/free.rs`): a cell freed at its last
//!   generation is retired ([`CellRef::next`]), so a generation never wraps. The free cells
//!   are not the queues' free-stack, though: the next generation of a free cell travels with
//!   it (in the pool, in `Staged`, in the queue's `Entry`), so that the drain that frees it
//!   never touches the cell itself, and the pool lives in the inbox, under the producers'
//!   lock.
//! * A detached timer ([`Shard::stage`]) has no cell ([`NO_CELL`]) and nobody can cancel,
//!   reset or wait for it.
//!

use super::{Shard, TimerKey};
use crate::queue::free::reusable;

/// The `cell` of a detached timer: it has no handle.
pub(super) const NO_CELL: u32 = u32::MAX;

/// The `cell` of an entry without one.
pub(super) const NO_CELL_REF: CellRef = CellRef {
    index: NO_CELL,
    generation: 0,
};

/// Cells a producer whose pool ran dry reserves at once (under the queue lock). In a steady
/// stream of schedules it does not run dry: each take of the inbox tops the pool up (see
/// [`Shard::take_inbox`]).
pub(super) const CELL_REFILL: usize = 4096;

/// A staged timer's cell, as its handle names it: an index into the shard's cells and the
/// generation the cell had when it was handed out. The cell's generation moves on when the
/// timer leaves the queue, so a stale reference finds nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CellRef {
    pub(super) index: u32,
    pub(super) generation: u32,
}

impl CellRef {
    /// The same cell at its next generation, to hand out again once its timer is gone;
    /// `None` once the generation is the last one: the cell is retired, by the queues'
    /// rule (`queue/free.rs`), so that a generation never wraps and a stale handle never
    /// finds a later timer.
    #[inline]
    pub(super) fn next(self) -> Option<CellRef> {
        reusable(self.generation).then(|| CellRef {
            index: self.index,
            generation: self.generation + 1,
        })
    }
}

/// Where a [`TimerHandle`](crate::service::TimerHandle) finds its timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// No timer: the handle of a timer that was never queued (the service had shut down).
    /// Every operation on it is a no-op.
    Inert,
    /// A timer inserted into the queue directly: its queue key.
    Key(TimerKey),
    /// A timer staged through the inbox: its cell, which learns the queue key once the timer
    /// is queued.
    Cell(CellRef),
}

/// One cell: the key of the last timer queued with it and that timer's generation. Written
/// only when a timer is queued: a handle whose generation matches has its timer's key (stale
/// once the timer fired or was cancelled, which the queue knows); one whose generation does
/// not match has a timer that is still staged, or gone. The next generation of a free cell
/// travels with it, in the pool, in `Staged` and in the queue's `Entry`.
#[derive(Clone, Copy)]
pub(super) struct Cell {
    pub(super) generation: u32,
    pub(super) key: Option<TimerKey>,
}

/// The cells of the timers staged with a handle (see the module docs). Under the queue lock.
#[derive(Default)]
pub(super) struct Cells {
    pub(super) slots: Vec<Cell>,
    /// Cells given back by fires and cancels, at their next generation; moved to the inbox's
    /// pool when the inbox is taken (both locks are held then), or handed out by a refill.
    pub(super) free: Vec<CellRef>,
    /// The inbox's pool length when last seen (under both locks).
    pub(super) pooled: usize,
    /// How many cells the producers took from the pool between the last two takes of the
    /// inbox: the pool is topped up to twice that.
    pub(super) used: usize,
}

impl Cells {
    /// Records that the timer of `cell` was queued under `key`.
    #[inline]
    pub(super) fn queued(&mut self, cell: CellRef, key: TimerKey) {
        if let Some(slot) = self.slots.get_mut(cell.index as usize) {
            *slot = Cell {
                generation: cell.generation,
                key: Some(key),
            };
        }
    }

    /// The timer of `cell` left the queue (it fired or was cancelled): the cell is free, at
    /// its next generation. Its slot is not touched (a cache miss the drain need not pay): the
    /// key it holds is stale now.
    #[inline]
    pub(super) fn left(&mut self, cell: CellRef) {
        if cell.index != NO_CELL {
            self.free.extend(cell.next());
        }
    }

    /// Makes sure the pool will have twice the last interval's use after the next take:
    /// called by the timer thread before it takes the inbox lock, so that the new cells are
    /// made without holding up the producers.
    pub(super) fn top_up(&mut self) {
        let want = 2 * self.used;
        let have = self.pooled.saturating_sub(self.used) + self.free.len();
        if want > have {
            self.grow(want - have);
        }
    }

    /// Hands the `free` cells to the inbox's `pool` (the caller holds both locks), and
    /// learns how many the producers used since the last time.
    pub(super) fn refill(&mut self, pool: &mut Vec<CellRef>) {
        self.used = self.pooled.saturating_sub(pool.len());
        pool.append(&mut self.free);
        self.pooled = pool.len();
    }

    /// Makes up to `n` new cells, free at generation 0. Past `u32` cells it makes none: a
    /// producer then finds the pool empty and falls back to a direct insert.
    pub(super) fn grow(&mut self, n: usize) {
        for _ in 0..n {
            let Some(index) = u32::try_from(self.slots.len())
                .ok()
                .filter(|&i| i != NO_CELL)
            else {
                return;
            };
            self.slots.push(Cell {
                generation: 0,
                key: None,
            });
            self.free.push(CellRef {
                index,
                generation: 0,
            });
        }
    }
}

impl Shard {
    /// Reserves [`CELL_REFILL`] cells into the inbox's pool, under the queue lock (a producer
    /// whose pool ran dry: rare once timers fire, whose cells come back at each take of the
    /// inbox). `false` if the shard is closed or out of cells.
    #[cold]
    pub(super) fn refill_pool(&self) -> bool {
        let mut st = self.lock_producer();
        if st.closed {
            return false;
        }
        let short = CELL_REFILL.saturating_sub(st.cells.free.len());
        st.cells.grow(short);
        if st.cells.free.is_empty() {
            return false;
        }
        // The queue lock is held, so no flush is waiting for the inbox: a plain lock (the
        // producer's would wait for `drain_waiting`, which only a flush holding the queue
        // lock raises).
        let mut inbox = self.inbox.inbox.lock();
        st.cells.refill(&mut inbox.pool);
        true
    }
}
