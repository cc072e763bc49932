//! [`Shard::check_invariants`]: the shard's bookkeeping and the ground rules that can be
//! checked from a snapshot taken under both locks.

#![cfg(any(all(test, not(loom)), debug_assertions))]

use super::{lock, Ordering, Shard, NEVER, NO_CELL};

impl Shard {
    /// Checks, under the queue lock and then the inbox lock, and panics naming the first rule
    /// broken:
    ///
    /// * the queue's own invariants ([`TimerQueue::check_invariants`](crate::TimerQueue)) and
    ///   the calendar's;
    /// * the published counts: `taken_len` is `taken`'s length, `queued_len` the queue's,
    ///   the calendar's and `taken`'s together, the inbox's `len` its buffer's;
    /// * the lower bounds: `taken_earliest` is at or below every tick in `taken`, the inbox's
    ///   `earliest` at or below every staged tick, and [`earliest`](Shard::earliest) at or
    ///   below both and the calendar's first tick;
    /// * a closed shard has a closed inbox, and both are empty;
    /// * each cell has one owner at a time: the cells free, in the pool and carried by staged
    ///   timers are distinct and exist.
    ///
    /// O(timers): for tests and debug builds (see `ServiceState::check_invariants`).
    pub(crate) fn check_invariants(&self) {
        let mut st = lock(&self.state);
        let st = &mut *st;
        st.queue.check_invariants();
        st.cal.check_invariants();
        let inbox = self.inbox.inbox.lock();
        assert_eq!(
            self.taken_len.load(Ordering::Relaxed),
            st.taken.len(),
            "shard: taken_len"
        );
        assert_eq!(
            self.queued_len.load(Ordering::Relaxed),
            st.queued() + st.taken.len(),
            "shard: queued_len"
        );
        assert_eq!(
            self.inbox.len.load(Ordering::Relaxed),
            inbox.staged.len(),
            "shard: the inbox's len"
        );
        let taken_min = st.taken.iter().map(|s| s.tick).min().unwrap_or(NEVER);
        assert!(
            st.taken_earliest <= taken_min,
            "shard: taken_earliest {} above a taken tick {taken_min}",
            st.taken_earliest
        );
        let staged_min = inbox.staged.iter().map(|s| s.tick).min().unwrap_or(NEVER);
        assert!(
            self.inbox.earliest.load(Ordering::SeqCst) <= staged_min,
            "shard: the inbox's earliest above a staged tick {staged_min}"
        );
        let calendar_min = st.cal.first_tick().unwrap_or(NEVER);
        let published = self.earliest();
        assert!(
            published <= staged_min.min(taken_min).min(calendar_min),
            "shard: earliest {published} above a pending tick"
        );
        assert_eq!(
            st.closed, inbox.closed,
            "shard: the inbox closes with the queue"
        );
        if st.closed {
            assert!(
                st.queued() == 0 && st.taken.is_empty() && inbox.staged.is_empty(),
                "shard: a closed shard holds timers"
            );
        }
        let slots = st.cells.slots.len();
        // One flag a cell, not a `HashSet`: a pool holds thousands of cells, and hashing each
        // made this check most of the cost of a test under Miri (165 s of its 318).
        let mut owned = vec![false; slots];
        let staged_cells = inbox.staged.iter().chain(st.taken.iter()).map(|s| s.cell);
        let cells = st.cells.free.iter().chain(inbox.pool.iter()).copied();
        for cell in cells.chain(staged_cells.filter(|c| c.index != NO_CELL)) {
            assert!(
                (cell.index as usize) < slots,
                "shard: cell {cell:?} does not exist"
            );
            assert!(
                !core::mem::replace(&mut owned[cell.index as usize], true),
                "shard: cell {} has two owners",
                cell.index
            );
        }
    }
}
