//! The inbox: timers staged on their way into the queue.
//!
//! A producer does not insert into the queue: it appends `(tick, callback, cell)` to the shard's
//! inbox, a `Vec` under a spin lock of its own that nothing else holds for more than a swap, and
//! needs no queue key for that. The timer thread moves the timers into the queue under the queue's
//! lock: at a drain, those already due first ([`Shard::flush`]), the rest after the due ones were
//! handed on ([`Shard::flush_staged`], in chunks, yielding to a new tick; the inbox is taken once a
//! drain, not chased while a producer keeps staging). The producer that stages the [`HELP_AT`]th
//! timer since the inbox was last taken queues them itself ([`Shard::help_flush`]). So the timer
//! thread takes in what arrives between two of its drains, and a burst is filed by the threads
//! that make it: the timer thread stays light enough to wake on time (a timer thread busy filing
//! a burst loses its wake-ups to the producers; see DESIGN-NOTES, "What does a `schedule`
//! cost?"), and producers scale with their number. Below that rate the producer takes no queue
//! lock and never writes a queue entry: its writes go to the inbox's buffer, which the timer
//! thread hands back empty with its capacity (two buffers take turns), so after the first burst
//! they touch memory that is already mapped and usually cached.
//! Timers out of the inbox but not queued yet wait in `taken`, in staging order.
//!
//!
//! # The published earliest tick and order
//!
//! * `inbox_earliest` is a lower bound of the earliest staged tick ([`NEVER`] when nothing
//!   was staged since the last take; a cancel in the inbox leaves it, and a drain that finds
//!   it due takes the inbox even when it is empty, which resets it), stored only under the
//!   inbox lock. [`Shard::earliest`] is the minimum of it
//!   and `earliest`, so the timer thread's sleep and wake-up protocol (see `core.rs`) covers
//!   staged timers as it covers queued ones: a stage that lowers `inbox_earliest` stores it
//!   and then checks the timer thread's sleep target, as an insert does. `taken` is covered
//!   by `earliest`: taking the inbox lowers it, and a drain's new `earliest` stays at or
//!   below `taken_earliest`.
//! * A flush first lowers `earliest` to `inbox_earliest` and only then resets
//!   `inbox_earliest`, and `earliest()` reads them in the opposite order, so it never misses
//!   a staged timer (the loom model `loom_a_flush_never_hides_a_staged_timer`).
//! * Every direct insert (wakers, notifications, recurring runs) and every reset flushes the
//!   inbox first, so one thread's timers keep their schedule order at equal deadlines
//!   whichever way they were scheduled, and a reset timer fires after every timer scheduled
//!   at its new tick before the reset.
//! * `close` takes the inbox as well: staged timers are discarded like queued ones, and a
//!   stage after it is refused.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ptr;

use super::{
    backoff, lower_earliest, spin_hint, AtomicU64, AtomicUsize, Build, CachePadded, Callback,
    CellRef, Cells, MutexGuard, Ordering, Shard, ShardState, SpinGuard, SpinLock, DRAIN_SPINS,
    NEVER, NO_CELL_REF,
};

/// Staged timers at which the producer that stages the last of them queues them itself
/// ([`Shard::help_flush`]): the timer thread takes in what arrives between two of its drains,
/// and a producer staging faster than that files its own (see the module docs).
pub(crate) const HELP_AT: usize = FLUSH_CHUNK;

/// Staged timers the end of a drain queues per lock hold (tens of microseconds), checking
/// between two whether a new tick has begun.
pub(crate) const FLUSH_CHUNK: usize = 1024;

/// Staged timers a lock hold takes in straight from the inbox's buffer when none staged
/// earlier waits in `taken` (see [`Shard::queue_chunk`]), of which at most [`FLUSH_CHUNK`]
/// queue inserts: detached timers of the near future, filed in the calendar, cost a fraction
/// of a queue insert, and going through `taken` would cost each a copy and a second pass.
pub(super) const DIRECT: usize = 4 * FLUSH_CHUNK;

/// How many of the inbox's latest timers a cancel looks through for its timer before it
/// queues the inbox instead (see [`Shard::cancel_staged`]).
pub(super) const CANCEL_SCAN: usize = 64;

/// A timer in a shard's inbox (see [`Shard::stage`]), with its cell if it has a handle: 40
/// bytes. (Its sequence number is taken when it is queued.)
pub(crate) struct Staged {
    pub(super) tick: u64,
    pub(super) callback: Callback,
    pub(super) cell: CellRef,
}

impl Staged {
    /// Appends a staged timer to `staged`, its callback built in place (see [`Build`]).
    #[inline]
    pub(super) fn push(staged: &mut Vec<Staged>, tick: u64, callback: impl Build, cell: CellRef) {
        staged.reserve(1);
        let at = staged.spare_capacity_mut()[0].as_mut_ptr();
        // SAFETY: `at` is the first slot of the vector's spare capacity (`reserve` made one),
        // valid for writes, aligned and referenced by nothing else; the field pointers are
        // made without a reference to the uninitialised `Staged`. `set_len` counts the slot
        // only once its three fields are written (`build_in` writes the whole callback; it
        // does not unwind: it only stores, or boxes, which aborts on failure).
        unsafe {
            ptr::addr_of_mut!((*at).tick).write(tick);
            ptr::addr_of_mut!((*at).cell).write(cell);
            callback
                .build_in(&mut *ptr::addr_of_mut!((*at).callback).cast::<MaybeUninit<Callback>>());
            staged.set_len(staged.len() + 1);
        }
    }
}

/// The inbox of staged timers (see the module docs).
pub(super) struct Inbox {
    pub(super) staged: Vec<Staged>,
    /// Cells reserved for the producers' handles, each with its current generation.
    pub(super) pool: Vec<CellRef>,
    /// How many timers were cancelled while in the inbox, for `Stats`.
    pub(super) cancelled: u64,
    /// The most timers pending at once, as seen by a cancel in the inbox (see
    /// [`Shard::note_peak`]).
    pub(super) high_water: usize,
    /// Set at shutdown, with the queue's: stages are refused from then on.
    pub(super) closed: bool,
}

/// The inbox and what the timer thread reads of it without its lock, on cache lines of
/// their own: producers write the lock and `len` on every stage.
pub(super) struct InboxShared {
    pub(super) inbox: SpinLock<Inbox>,
    /// How many timers are staged (stored under the inbox lock).
    pub(super) len: AtomicUsize,
    /// Lower bound of the earliest staged tick, [`NEVER`] when nothing is staged. On a line
    /// of its own: the timer thread reads it in every pass of its loop (and in its spin
    /// before a tick), producers read it on every stage but seldom write it. Beside the lock
    /// and `len`, every stage would have to take the line back from the spinning reader.
    pub(super) earliest: CachePadded<AtomicU64>,
}

impl Shard {
    /// Stages a detached `callback` at `tick` in the inbox (see the module docs); gives it
    /// back if the shard is closed. Returns how many timers the inbox now holds (at every
    /// [`HELP_AT`]th the caller queues them itself).
    #[inline]
    pub(crate) fn stage<B: Build>(&self, tick: u64, callback: B) -> Result<usize, B> {
        self.stage_inner::<false, B>(tick, callback)
            .map(|(len, _)| len)
    }

    /// Stages `callback` at `tick` like [`stage`](Self::stage), with a cell for its handle
    /// (see the module docs). Gives the callback back if the shard is closed (or, in theory,
    /// out of cells: the caller then inserts it directly).
    #[inline]
    pub(crate) fn stage_with_cell<B: Build>(
        &self,
        tick: u64,
        callback: B,
    ) -> Result<(usize, CellRef), B> {
        self.stage_inner::<true, B>(tick, callback)
    }

    #[inline]
    pub(super) fn stage_inner<const CELL: bool, B: Build>(
        &self,
        tick: u64,
        callback: B,
    ) -> Result<(usize, CellRef), B> {
        let shared = &self.inbox;
        let mut inbox = self.lock_producer_inbox();
        let cell = loop {
            if inbox.closed {
                return Err(callback);
            }
            if !CELL {
                break NO_CELL_REF;
            }
            if let Some(cell) = inbox.pool.pop() {
                break cell;
            }
            drop(inbox);
            if !self.refill_pool() {
                return Err(callback);
            }
            inbox = self.lock_producer_inbox();
        };
        Staged::push(&mut inbox.staged, tick, callback, cell);
        let len = inbox.staged.len();
        shared.len.store(len, Ordering::Relaxed);
        let lowered = lower_earliest(&shared.earliest, tick);
        drop(inbox);
        if lowered {
            self.core.lowered_earliest(tick);
        }
        Ok((len, cell))
    }

    /// How many timers are staged (a snapshot).
    #[inline]
    pub(crate) fn staged(&self) -> usize {
        self.inbox.len.load(Ordering::Relaxed)
    }

    /// Queues the staged timers due at `now` (every one with `now = NEVER`), oldest first;
    /// the others stay in `taken`, in order. The caller holds the queue lock (`st`).
    ///
    /// A drain calls this first, so it hands its due timers on before the rest of a large
    /// inbox is queued ([`flush_staged`](Self::flush_staged), after the drain). Order is
    /// kept: `taken` is only ever queued from its front, or scanned front to back, and the
    /// inbox is appended behind it.
    pub(super) fn flush(&self, st: &mut ShardState, now: u64) {
        // `taken` is scanned only when it holds a due timer, which `taken_earliest` (exact
        // after a scan) tells: a drain scans it once, not once a chunk.
        if st.taken_earliest <= now {
            let mut later = NEVER;
            for _ in 0..st.taken.len() {
                let Some(staged) = st.taken.pop_front() else {
                    break;
                };
                if staged.tick <= now {
                    st.enqueue(staged);
                } else {
                    later = later.min(staged.tick);
                    st.taken.push_back(staged);
                }
            }
            st.taken_earliest = later;
        }
        let mut spare = std::mem::take(&mut st.spare);
        if self.take_inbox(&mut spare, &mut st.cells) {
            if now == NEVER || !st.taken.is_empty() {
                for staged in spare.drain(..) {
                    if staged.tick <= now {
                        st.enqueue(staged);
                    } else {
                        st.taken_earliest = st.taken_earliest.min(staged.tick);
                        st.taken.push_back(staged);
                    }
                }
            } else {
                // Nothing waits in `taken`: the due timers are taken out of the inbox's
                // buffer where they lie (the rest moves down over them, in order) and
                // queued, and the buffer becomes `taken` whole, its old one the spare.
                // Copying the rest into `taken` would write every timer a second time
                // before it is queued, after the drain.
                let mut later = NEVER;
                spare.retain_mut(|s| {
                    if s.tick > now {
                        later = later.min(s.tick);
                        return true;
                    }
                    // Moved out, an empty callback left behind for `retain` to drop.
                    let callback = std::mem::replace(&mut s.callback, Callback::new(|| {}));
                    st.enqueue(Staged {
                        tick: s.tick,
                        callback,
                        cell: s.cell,
                    });
                    false
                });
                st.taken_earliest = later;
                let rest = VecDeque::from(std::mem::take(&mut spare));
                spare = Vec::from(std::mem::replace(&mut st.taken, rest));
            }
        }
        st.spare = spare;
        self.note_peak(st);
        self.note_len(st);
    }

    /// Takes the current pending count into the high-water mark: called before timers leave
    /// (and after they arrive), so the mark is exact with one producer. Pending are the queued,
    /// the taken and the staged timers.
    pub(super) fn note_peak(&self, st: &mut ShardState) {
        let pending = st.queued() + st.taken.len() + self.staged();
        st.high_water = st.high_water.max(pending);
    }

    /// Publishes `taken`'s length and the queued count (for `unqueued` and `cancel_staged`).
    pub(super) fn note_len(&self, st: &ShardState) {
        self.taken_len.store(st.taken.len(), Ordering::Relaxed);
        self.queued_len
            .store(st.queued() + st.taken.len(), Ordering::Relaxed);
    }

    /// Swaps the inbox's buffer with `spare` (empty) if the inbox holds timers, and tops the
    /// inbox's pool of cells up (with the freed ones, and new ones when the producers used
    /// more than that); returns whether it did. The caller holds the queue lock (`spare` and
    /// `cells` are in its state) and puts every timer now in `spare` into the queue or
    /// `taken`.
    pub(super) fn take_inbox(&self, spare: &mut Vec<Staged>, cells: &mut Cells) -> bool {
        if self.staged() == 0 {
            if self.inbox.earliest.load(Ordering::Relaxed) != NEVER {
                // Emptied by cancels (see `cancel_staged`): its earliest tick is stale.
                let inbox = self.inbox.inbox.lock();
                if inbox.staged.is_empty() {
                    self.inbox.earliest.store(NEVER, Ordering::SeqCst);
                }
            }
            return false;
        }
        cells.top_up();
        let shared = &self.inbox;
        let mut inbox = self.lock_drain_inbox();
        // Lower `earliest` before resetting the inbox's: `earliest()` never misses one.
        let staged_earliest = shared.earliest.load(Ordering::Relaxed);
        if staged_earliest < self.earliest.load(Ordering::Relaxed) {
            self.earliest.store(staged_earliest, Ordering::SeqCst);
        }
        std::mem::swap(&mut inbox.staged, spare);
        cells.refill(&mut inbox.pool);
        shared.earliest.store(NEVER, Ordering::SeqCst);
        shared.len.store(0, Ordering::Relaxed);
        true
    }

    /// Timers staged or taken but not queued yet (a snapshot).
    #[inline]
    pub(crate) fn unqueued(&self) -> usize {
        self.staged() + self.taken_len.load(Ordering::Relaxed)
    }

    /// Queues every staged timer, oldest first, [`FLUSH_CHUNK`] a lock hold, unless `stop`
    /// says to stop between two chunks (a tick has begun whose timers come first): the end
    /// of a drain. The inbox is taken once, at the first chunk: what a producer stages
    /// meanwhile waits for the next drain (or for the producer, at [`HELP_AT`]). Taking it
    /// again after every chunk would chase a busy producer, handing it back a buffer the timer
    /// thread has just read every few hundred timers, so that most of its stages write to a
    /// cache line the other core holds. What stays is still covered by `earliest`.
    pub(crate) fn flush_staged(&self, stop: impl Fn() -> bool) {
        self.queue_staged(|| self.lock_drain(), stop);
    }

    /// Queues every staged timer, [`FLUSH_CHUNK`] a hold of the lock `lock` takes, taking the
    /// inbox at the first chunk only, unless `stop` says to stop between two chunks.
    fn queue_staged<'a>(
        &'a self,
        lock: impl Fn() -> MutexGuard<'a, ShardState>,
        stop: impl Fn() -> bool,
    ) {
        let mut take = true;
        while take && self.staged() > 0 || self.taken_len.load(Ordering::Relaxed) > 0 {
            self.queue_chunk(&mut lock(), take);
            take = false;
            if stop() {
                break;
            }
        }
    }

    /// A producer's share of the work ([`HELP_AT`] timers staged): it queues its shard's
    /// staged timers itself, [`FLUSH_CHUNK`] a lock hold, letting a waiting drain in between
    /// two. Like the end of a drain it takes the inbox once: another producer staging
    /// meanwhile queues its own.
    #[cold]
    pub(crate) fn help_flush(&self) {
        self.queue_staged(|| self.lock_producer(), || false);
    }

    /// Takes the inbox in behind `taken` (if `take`) and queues up to [`FLUSH_CHUNK`] timers
    /// from the front of `taken`; when `taken` is empty, it first queues up to [`DIRECT`] of
    /// the inbox's timers straight from its buffer. Either way timers are queued in staging
    /// order. The caller holds the queue lock (`st`).
    pub(super) fn queue_chunk(&self, st: &mut ShardState, take: bool) {
        let mut spare = std::mem::take(&mut st.spare);
        if take && self.take_inbox(&mut spare, &mut st.cells) {
            let mut rest = spare.drain(..);
            if st.taken.is_empty() {
                // Nothing staged earlier waits: the inbox's timers are taken in straight
                // from its buffer, up to `DIRECT` of them and `FLUSH_CHUNK` queue inserts.
                let mut inserts = 0;
                for staged in rest.by_ref().take(DIRECT) {
                    if !st.enqueue(staged) {
                        inserts += 1;
                        if inserts == FLUSH_CHUNK {
                            break;
                        }
                    }
                }
            }
            for staged in rest {
                st.taken_earliest = st.taken_earliest.min(staged.tick);
                st.taken.push_back(staged);
            }
        }
        st.spare = spare;
        let n = st.taken.len().min(FLUSH_CHUNK);
        for _ in 0..n {
            let Some(staged) = st.taken.pop_front() else {
                break;
            };
            st.enqueue(staged);
        }
        self.note_peak(st);
        if st.taken.is_empty() {
            st.taken_earliest = NEVER;
        }
        self.note_len(st);
    }

    /// Cancels the timer of `cell` if it is among the inbox's [`CANCEL_SCAN`] latest timers:
    /// a timer cancelled soon after it was scheduled (a timeout whose request completed) is
    /// then never queued at all. In the inbox, under the inbox lock, nothing else can take it,
    /// so finding it there decides its fate. The cell goes straight back to the pool at its
    /// next generation (its slot, never written for this timer, stays as it was). `None` if it
    /// is not there (queued, taken, further back, fired, cancelled): the caller then goes
    /// through the queue.
    pub(super) fn cancel_staged(&self, cell: CellRef) -> Option<Callback> {
        let mut inbox = self.lock_producer_inbox();
        let from = inbox.staged.len().saturating_sub(CANCEL_SCAN);
        let at = from + inbox.staged[from..].iter().rposition(|s| s.cell == cell)?;
        let pending = inbox.staged.len() + self.queued_len.load(Ordering::Relaxed);
        inbox.high_water = inbox.high_water.max(pending);
        let Staged { callback, .. } = if at + 1 == inbox.staged.len() {
            inbox.staged.pop()?
        } else {
            inbox.staged.remove(at)
        };
        // The inbox's earliest tick stays: a lower bound still, which the next take resets
        // (even of an empty inbox, see `take_inbox`). Not resetting it here keeps a
        // schedule-then-cancel loop from storing it twice a timer.
        self.inbox.len.store(inbox.staged.len(), Ordering::Relaxed);
        inbox.pool.extend(cell.next());
        inbox.cancelled += 1;
        drop(inbox);
        self.core.release(1);
        Some(callback)
    }

    /// Locks the inbox for a stage; like [`lock_producer`](Self::lock_producer), it first lets
    /// a waiting flush in.
    #[inline]
    pub(super) fn lock_producer_inbox(&self) -> SpinGuard<'_, Inbox> {
        let mut round = 0;
        while self.drain_waiting.load(Ordering::Acquire) {
            backoff(round);
            round = round.saturating_add(1);
        }
        self.inbox.inbox.lock()
    }

    /// Locks the inbox for a flush, as [`lock_drain`](Self::lock_drain) locks the queue. The
    /// caller holds the queue lock, so no other flush raises `drain_waiting` meanwhile.
    pub(super) fn lock_drain_inbox(&self) -> SpinGuard<'_, Inbox> {
        for _ in 0..DRAIN_SPINS {
            if let Some(guard) = self.inbox.inbox.try_lock() {
                return guard;
            }
            spin_hint();
        }
        self.drain_waiting.store(true, Ordering::SeqCst);
        let guard = self.inbox.inbox.lock();
        self.drain_waiting.store(false, Ordering::Release);
        guard
    }
}
