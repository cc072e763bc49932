//! [`Shard`]: one mutex-guarded queue of the service, with its published earliest deadline.
//!
//! # Ground rules
//!
//! * `state` (the queue, the waiter table, the closed flag, counters) is only touched under
//!   the shard's mutex. **No user code runs under it**: callbacks run on workers, and payloads
//!   removed by `cancel` or discarded at shutdown are dropped after the lock is released (a
//!   closure's `Drop` may itself cancel timers).
//! * `earliest` is only stored under the mutex and is a *lower bound* of the earliest pending
//!   effective deadline ([`NEVER`] when empty): inserts lower it, a drain at `now` sets it to
//!   `max(next_expiration, now + 1)`, a cancel leaves it (the timer thread then wakes once
//!   for nothing and recomputes it). The timer thread reads it without the lock.
//! * A timer's fate is decided under the mutex, exactly once: either `cancel` removes it (and
//!   returns `true`: the callback has not started and never will) or a drain takes it out to
//!   run. `reset` only moves a timer that is still in the queue. This is what the loom tests
//!   at the bottom check.
//! * `wait()` registers a [`WaitSlot`] in `waiters`, keyed by `TimerKey`; drains and cancels
//!   look the table up only when it is non-empty, so timers nobody waits for pay nothing.
//!   (The loom tests are in `tests.rs`.)
//!
//! # A timer's stages in a shard
//!
//! One table for the names the code uses; a timer goes down it, and leaves it early only
//! when cancelled (from the inbox, from the queue) or discarded at shutdown (from anywhere).
//!
//! | stage | where | as | lock | file |
//! |---|---|---|---|---|
//! | **staged** | the inbox's buffer (`Inbox::staged`) | [`Staged`]: tick, callback, cell | inbox | `inbox.rs` |
//! | **taken** | `ShardState::taken`: out of the inbox, not queued yet | [`Staged`] | queue | `inbox.rs` |
//! | **queued** | the queue | [`Entry`]: callback, cell, sequence number | queue | `mod.rs` |
//! | **filed** | the calendar (detached timers due within 2048 ticks) | (sequence number, callback) | queue | `calendar.rs` |
//! | **held** | `ShardState::held`: out of the queue, waiting while calendar timers before it go out | [`Entry`] | queue | `drain.rs` |
//! | **drained** | a [`Drained`] buffer, outside the lock: on its way to where it runs | [`Job`]: deadline, callback | none | `drain.rs` |
//!
//! Beside a timer with a handle, its **cell** ([`CellRef`] names a [`Cell`](cells::Cell) of the
//! shard's [`Cells`], `cells.rs`) learns its queue key when it is queued; a handle names its timer
//! by a [`Target`]: `Inert` (none), `Key` (queued directly) or `Cell` (staged with a cell).
//!
//! The rest is one file a concern: `inbox.rs` (timers staged on their way into the queue),
//! `cells.rs` (handles for staged timers), `calendar.rs` (detached timers of the near
//! future), `drain.rs` (taking due timers out, merging the queue with the calendar, and
//! taking everything out at shutdown), `check.rs` (the invariants asserted).

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;

use super::callback::Build;
use super::core::Core;
use super::flavor::{AnyQueue, QueueFlavor};
use crate::queue::TimerKey;
use crate::sync::{
    backoff, lock, spin_hint, wait, Arc, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Condvar,
    Mutex, MutexGuard, Ordering, SpinGuard, SpinLock,
};
use crate::time::NEVER;
use calendar::Calendar;

mod calendar;
mod cells;
mod check;
mod drain;
mod inbox;
#[cfg(test)]
mod tests;

pub(crate) use cells::Target;
use cells::{CellRef, Cells, NO_CELL, NO_CELL_REF};
pub(crate) use drain::{Closed, Drained};
pub(crate) use inbox::HELP_AT;
use inbox::{Inbox, InboxShared, Staged};

/// Lowers a shard's published earliest tick (inbox or queue) to `tick` if it is later, and
/// says whether it did: the caller then drops its lock and calls
/// [`Core::lowered_earliest`], which wakes the timer thread if it sleeps past `tick`. Called
/// only under the lock that guards the published value (see the ground rules).
#[inline]
fn lower_earliest(earliest: &AtomicU64, tick: u64) -> bool {
    let lowered = tick < earliest.load(Ordering::Relaxed);
    if lowered {
        earliest.store(tick, Ordering::SeqCst);
    }
    lowered
}

/// `try_lock` attempts a drain spins through before it blocks (a few microseconds).
#[cfg(not(loom))]
const DRAIN_SPINS: u32 = 1_000;
/// Under loom every spin is a modelled yield: keep the state space small.
#[cfg(loom)]
const DRAIN_SPINS: u32 = 2;

pub(crate) use super::callback::{Callback, WakerId};

/// A due callback on its way to where it runs (a worker, or the timer thread itself), with
/// the tick it was due at.
pub(crate) struct Job {
    pub(crate) callback: Callback,
    pub(crate) deadline: u64,
}

/// What the queue holds for a timer: its callback and, if it has a handle through a cell,
/// the cell (index [`NO_CELL`] otherwise), so that the timer's leaving the queue frees the
/// cell without looking it up.
pub(crate) struct Entry {
    callback: Callback,
    cell: CellRef,
    /// The shard's sequence number when it was queued or last reset: a drain merges the
    /// queue with the calendar by (tick, sequence number).
    seq: u64,
}

/// Blocks `wait()` callers until their timer left the queue.
pub(crate) struct WaitSlot {
    done: Mutex<bool>,
    cond: Condvar,
}

impl WaitSlot {
    pub(crate) fn new() -> WaitSlot {
        WaitSlot {
            done: Mutex::new(false),
            cond: Condvar::new(),
        }
    }

    pub(crate) fn complete(&self) {
        *lock(&self.done) = true;
        self.cond.notify_all();
    }

    pub(crate) fn block(&self) {
        let mut done = lock(&self.done);
        while !*done {
            done = wait(&self.cond, done);
        }
    }
}

struct ShardState {
    queue: AnyQueue<Entry>,
    /// The cells of timers staged with a handle.
    cells: Cells,
    /// The inbox's other buffer: empty, with the capacity of an earlier batch.
    spare: Vec<Staged>,
    /// Timers out of the inbox but not in the queue yet: not due at the drain that took
    /// them, queued at its end (see [`Shard::flush`]). In staging order.
    taken: VecDeque<Staged>,
    /// A lower bound of the ticks in `taken`, [`NEVER`] when it is empty.
    taken_earliest: u64,
    waiters: Vec<(TimerKey, Arc<WaitSlot>)>,
    /// Set at shutdown: inserts are refused from then on.
    closed: bool,
    /// Pending inline entries (wakers, notifications); when there are none, shutdown drops
    /// the queue whole instead of polling every timer out of it.
    inline: usize,
    flavor: QueueFlavor,
    scheduled: u64,
    cancelled: u64,
    high_water: usize,
    /// Detached timers of the near future, beside the queue (see `calendar.rs`).
    cal: Calendar,
    /// The next sequence number (see [`Entry::seq`]).
    seq: u64,
    /// A timer a drain took out of the queue but has not handed on yet, with its tick: a
    /// calendar timer due before it goes first.
    held: Option<(u64, TimerKey, Entry)>,
    /// The `now` of the last poll of the queue that found nothing due: the queue is not
    /// polled again at that `now` (each such poll also moves timers down a level).
    idle_at: Option<u64>,
}

impl ShardState {
    /// Queues a staged timer: a detached one in the calendar when it is near, anything else
    /// in the queue (telling its cell the key if it has one). Returns whether it went to the
    /// calendar.
    ///
    /// Always inlined, with [`Calendar::file`]: as calls, the callback went through the stack
    /// twice on its way from the staged record to the calendar, and the loops that queue
    /// staged timers ran at half the speed of a plain append to a vector a tick.
    #[inline(always)]
    fn enqueue(&mut self, staged: Staged) -> bool {
        let seq = self.next_seq();
        self.scheduled += 1;
        let Staged {
            tick,
            callback,
            cell,
        } = staged;
        let callback = if cell.index == NO_CELL && !callback.is_inline() {
            match self.cal.file(tick, seq, callback, self.queue.now()) {
                Ok(()) => return true,
                Err(callback) => callback,
            }
        } else {
            callback
        };
        self.idle_at = None;
        let key = self.queue.insert(
            tick,
            Entry {
                callback,
                cell,
                seq,
            },
        );
        if cell.index != NO_CELL {
            self.cells.queued(cell, key);
        }
        false
    }

    #[inline]
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Pending timers in the queue and the calendar.
    #[inline]
    fn queued(&self) -> usize {
        self.queue.len() + self.cal.len()
    }
}

/// Per-shard counters for `Stats`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShardCounts {
    pub(crate) pending: usize,
    pub(crate) capacity: usize,
    pub(crate) high_water: usize,
    pub(crate) scheduled: u64,
    pub(crate) cancelled: u64,
}

/// Aligned to 128 bytes so that two shards (written by two producer threads) never share a
/// cache line.
#[repr(align(128))]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// Lower bound of the earliest pending deadline tick, [`NEVER`] when empty.
    earliest: AtomicU64,
    /// A drain is waiting for the lock: producers hold back until it has it.
    drain_waiting: AtomicBool,
    pub(crate) core: Arc<Core>,
    /// Detached timers not yet in the queue.
    inbox: CachePadded<InboxShared>,
    /// `taken`'s length (stored under the queue lock).
    taken_len: AtomicUsize,
    /// The queue's and `taken`'s length together (stored under the queue lock), for the
    /// high-water mark a cancel in the inbox takes.
    queued_len: AtomicUsize,
    /// How many times a producer took the queue lock ([`lock_producer`](Self::lock_producer)):
    /// tests assert which paths take none.
    #[cfg(test)]
    pub(crate) producer_locks: crate::sync::Counter,
}

impl Shard {
    pub(crate) fn new(core: Arc<Core>, flavor: QueueFlavor) -> Shard {
        Shard {
            state: Mutex::new(ShardState {
                queue: AnyQueue::new(flavor),
                cells: Cells::default(),
                spare: Vec::new(),
                taken: VecDeque::new(),
                taken_earliest: NEVER,
                waiters: Vec::new(),
                closed: false,
                inline: 0,
                flavor,
                scheduled: 0,
                cancelled: 0,
                high_water: 0,
                cal: Calendar::default(),
                seq: 0,
                held: None,
                idle_at: None,
            }),
            earliest: AtomicU64::new(NEVER),
            drain_waiting: AtomicBool::new(false),
            core,
            inbox: CachePadded(InboxShared {
                inbox: SpinLock::new(Inbox {
                    staged: Vec::new(),
                    pool: Vec::new(),
                    cancelled: 0,
                    high_water: 0,
                    closed: false,
                }),
                earliest: CachePadded(AtomicU64::new(NEVER)),
                len: AtomicUsize::new(0),
            }),
            taken_len: AtomicUsize::new(0),
            queued_len: AtomicUsize::new(0),
            #[cfg(test)]
            producer_locks: crate::sync::Counter::new(),
        }
    }

    /// Queues `callback` at `tick`; gives it back if the shard is closed.
    #[inline]
    pub(crate) fn insert<B: Build>(&self, tick: u64, callback: B) -> Result<TimerKey, B> {
        let mut st = self.lock_producer();
        if st.closed {
            return Err(callback);
        }
        let callback = callback.build();
        if self.unqueued() > 0 {
            // Staged timers of this thread go in first: one thread's timers keep their order.
            self.flush(&mut st, NEVER);
        }
        st.inline += usize::from(callback.is_inline());
        let seq = st.next_seq();
        st.idle_at = None;
        let key = st.queue.insert(
            tick,
            Entry {
                callback,
                cell: NO_CELL_REF,
                seq,
            },
        );
        st.scheduled += 1;
        self.note_peak(&mut st);
        self.note_len(&st);
        let lowered = lower_earliest(&self.earliest, tick);
        drop(st);
        if lowered {
            self.core.lowered_earliest(tick);
        }
        Ok(key)
    }

    /// The queue key of `target`'s timer, if it may still be pending; the caller holds the
    /// queue lock (`st`). A timer staged with a handle and not yet queued is queued first,
    /// with every timer staged before and after it (the work the timer thread would do at its
    /// next wake-up), so that it can be cancelled, moved or looked at like any other.
    fn resolve(&self, st: &mut ShardState, target: Target) -> Option<TimerKey> {
        match target {
            Target::Inert => None,
            Target::Key(key) => Some(key),
            Target::Cell(cell) => {
                // The key of the timer queued with this cell at this generation: stale if it
                // has left the queue since (the queue knows).
                let queued = |st: &ShardState| {
                    let slot = st.cells.slots.get(cell.index as usize)?;
                    slot.key.filter(|_| slot.generation == cell.generation)
                };
                if let Some(key) = queued(st) {
                    return Some(key);
                }
                if !st.closed {
                    // Staged (or gone): queue what is staged, then look again.
                    self.flush(st, NEVER);
                }
                queued(st)
            }
        }
    }

    /// Removes a pending timer. `Some` exactly when it had not been taken out to run.
    pub(crate) fn cancel(&self, target: Target) -> Option<Callback> {
        if let Target::Cell(cell) = target {
            if let Some(callback) = self.cancel_staged(cell) {
                return Some(callback);
            }
        }
        let mut st = self.lock_producer();
        let key = self.resolve(&mut st, target)?;
        self.note_peak(&mut st);
        // Kept as the `Option` the queue returned, not unwrapped and rewrapped: see
        // `Slab::remove`.
        let removed = st.queue.remove(key);
        let entry = removed.as_ref()?;
        let (inline, cell) = (entry.callback.is_inline(), entry.cell);
        self.note_len(&st);
        st.cancelled += 1;
        st.inline -= usize::from(inline);
        st.cells.left(cell);
        if !st.waiters.is_empty() {
            complete_waiter(&mut st.waiters, key);
        }
        drop(st);
        self.core.release(1);
        removed.map(|entry| entry.callback)
    }

    /// Makes a pending [`Callback::waker`] entry wake `waker`: the [`WakerId`] of the waker the
    /// entry now holds, `None` if it is no longer pending. The waker is cloned only when it
    /// would not wake the same task; the one it replaces is dropped after the lock is released
    /// (an executor's waker `Drop` is user code).
    pub(crate) fn update_waker(&self, target: Target, waker: &Waker) -> Option<WakerId> {
        let mut st = self.lock_producer();
        let key = self.resolve(&mut st, target)?;
        let slot = st
            .queue
            .get_mut(key)
            .and_then(|entry| entry.callback.waker_mut())?;
        if slot.will_wake(waker) {
            return Some(WakerId::of(slot));
        }
        let old = std::mem::replace(slot, waker.clone());
        let id = WakerId::of(slot);
        drop(st);
        drop(old);
        Some(id)
    }

    /// Moves a pending timer to `tick`; `false` if it already fired or was cancelled.
    pub(crate) fn reset(&self, target: Target, tick: u64) -> bool {
        let mut st = self.lock_producer();
        let Some(key) = self.resolve(&mut st, target) else {
            return false;
        };
        if self.unqueued() > 0 {
            // Timers staged before the reset go in first: they fire before it at its new
            // tick, as they would have had they been queued already.
            self.flush(&mut st, NEVER);
        }
        if !st.queue.reset(key, tick) {
            return false;
        }
        // Behind every timer already at its new tick, the calendar's too.
        let seq = st.next_seq();
        st.idle_at = None;
        if let Some(entry) = st.queue.get_mut(key) {
            entry.seq = seq;
        }
        let lowered = lower_earliest(&self.earliest, tick);
        drop(st);
        if lowered {
            self.core.lowered_earliest(tick);
        }
        true
    }

    /// Locks for a producer operation (insert, cancel, reset): first lets a waiting drain in.
    ///
    /// `std`'s mutex is not fair: a thread scheduling in a tight loop re-takes the lock
    /// nanoseconds after releasing it, long before a woken drain gets the CPU, and could starve
    /// the timer thread for as long as it keeps scheduling (timers then fire late by as long).
    /// A drain that finds the lock taken raises `drain_waiting`; producers hold back while it
    /// is up, so a drain waits for at most the one producer operation in progress.
    #[inline]
    fn lock_producer(&self) -> MutexGuard<'_, ShardState> {
        #[cfg(test)]
        self.producer_locks.add(1);
        let mut round = 0;
        while self.drain_waiting.load(Ordering::Acquire) {
            backoff(round);
            round = round.saturating_add(1);
        }
        lock(&self.state)
    }

    /// Locks for a drain (see `lock_producer`). It first spins on `try_lock`: a producer in a
    /// loop releases the lock for tens of nanoseconds between operations, which a spinning
    /// drain catches without making the producer wait; a drain that sleeps in `lock()` would
    /// need a wake-up and a CPU first. Only if that fails does it raise `drain_waiting`.
    fn lock_drain(&self) -> MutexGuard<'_, ShardState> {
        for _ in 0..DRAIN_SPINS {
            if let Ok(guard) = self.state.try_lock() {
                return guard;
            }
            spin_hint();
        }
        self.drain_waiting.store(true, Ordering::SeqCst);
        let guard = lock(&self.state);
        self.drain_waiting.store(false, Ordering::Release);
        guard
    }

    /// The effective deadline tick of a pending timer.
    pub(crate) fn deadline(&self, target: Target) -> Option<u64> {
        let mut st = lock(&self.state);
        let key = self.resolve(&mut st, target)?;
        st.queue.deadline(key)
    }

    /// Whether a timer is still pending (a staged one is queued first, see `resolve`).
    pub(crate) fn is_pending(&self, target: Target) -> bool {
        let mut st = lock(&self.state);
        self.resolve(&mut st, target)
            .is_some_and(|key| st.queue.deadline(key).is_some())
    }

    /// Registers a waiter for a pending timer; `None` if it is no longer pending.
    pub(crate) fn register_waiter(&self, target: Target) -> Option<Arc<WaitSlot>> {
        let mut st = lock(&self.state);
        let key = self.resolve(&mut st, target)?;
        st.queue.deadline(key)?;
        let slot = Arc::new(WaitSlot::new());
        st.waiters.push((key, slot.clone()));
        Some(slot)
    }

    /// The published lower bound of the earliest pending deadline, staged timers included.
    #[inline]
    pub(crate) fn earliest(&self) -> u64 {
        // The inbox's first: a flush lowers `earliest` before it resets the inbox's, so a
        // reset seen here means the lowered `earliest` is seen next (both `SeqCst`).
        let staged = self.inbox.earliest.load(Ordering::SeqCst);
        staged.min(self.earliest.load(Ordering::SeqCst))
    }

    /// Gives back the memory of timers that are gone, as far as the queue can (see
    /// [`TimerService::shrink_to_fit`](crate::TimerService::shrink_to_fit)).
    pub(crate) fn shrink_to_fit(&self) {
        let mut st = lock(&self.state);
        st.queue.shrink_to_fit();
        st.cal.shrink_to_fit();
        st.waiters.shrink_to_fit();
        st.spare = Vec::new();
        st.taken.shrink_to_fit();
    }

    pub(crate) fn counts(&self) -> ShardCounts {
        let st = lock(&self.state);
        // Staged timers are pending and scheduled already; they are counted as they enter
        // the queue.
        // Those cancelled in the inbox were scheduled and cancelled without being queued.
        let (inbox, cancelled_staged, inbox_high_water) = {
            let inbox = self.inbox.inbox.lock();
            (inbox.staged.len(), inbox.cancelled, inbox.high_water)
        };
        let staged = st.taken.len() + inbox;
        ShardCounts {
            pending: st.queued() + staged,
            capacity: st.queue.capacity(),
            high_water: (st.high_water.max(inbox_high_water)).max(st.queued() + staged),
            scheduled: st.scheduled + staged as u64 + cancelled_staged,
            cancelled: st.cancelled + cancelled_staged,
        }
    }
}

/// Releases every waiter of `key` (a timer leaves the queue once, so this runs once a key).
fn complete_waiter(waiters: &mut Vec<(TimerKey, Arc<WaitSlot>)>, key: TimerKey) {
    waiters.retain(|(k, slot)| {
        if *k == key {
            slot.complete();
            false
        } else {
            true
        }
    });
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("earliest", &self.earliest.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
