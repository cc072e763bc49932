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
//!
//! # The inbox: timers staged on their way into the queue
//!
//! A producer does not insert into the queue: it appends `(tick, callback, cell)` to the
//! shard's inbox, a `Vec` under a spin lock of its own that nothing else holds for more than a
//! swap, and needs no queue key for that. The timer thread moves the timers into the queue
//! under the queue's lock: at a drain, those already due first ([`Shard::flush`]), the rest
//! after the due ones were handed on ([`Shard::flush_staged`], in chunks, yielding to a new
//! tick). A producer whose inbox reaches [`FLUSH_AT`] timers wakes the timer thread for that;
//! one that finds [`BACKLOG`] timers not queued yet (the timer thread is behind) queues its
//! shard's staged timers itself ([`Shard::help_flush`]), so the timer thread never faces a
//! backlog that would make it late, and producers scale with their number. So the producer
//! takes no queue lock and never writes a queue entry: its writes go to the inbox's buffer,
//! which the timer thread hands back empty with its capacity (two buffers take turns), so
//! after the first burst they touch memory that is already mapped and usually cached.
//! Timers out of the inbox but not queued yet wait in `taken`, in staging order.
//!
//! # Cells: handles for staged timers
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
//! * Queuing a staged timer writes its key and generation into its cell's slot, and the
//!   queue's [`Entry`] carries the cell, so that a drain that fires the timer frees the cell
//!   (its next generation goes to the pool) without touching the slot; a cancel frees it
//!   too. A handle whose generation matches its slot's gets the slot's key, which the queue
//!   knows to be stale once the timer is gone; once the cell is reused and queued again the
//!   generations no longer match. Either way every operation on a stale handle is a no-op.
//! * A cancel first looks for its timer among the inbox's [`CANCEL_SCAN`] latest entries,
//!   under the inbox lock only ([`Shard::cancel_staged`]): a timer found there cannot be
//!   taken by anyone else meanwhile, so removing it decides its fate, and its cell goes back
//!   to the pool at its next generation. A timeout cancelled soon after it was scheduled is
//!   thus never queued at all.
//! * Any other operation on a handle whose timer may still be staged (in the inbox or in
//!   `taken`) queues every staged timer of the shard first, under the queue lock it holds:
//!   the work the timer thread would have done at its next wake-up, in the same order. The
//!   timer is then an ordinary queued timer (or found gone), and its fate is decided under
//!   the queue lock exactly once, as below (the loom models
//!   `loom_cancel_of_a_staged_timer_vs_fire_decides_exactly_once` and
//!   `loom_stage_and_reset_vs_drain_runs_once`).
//! * A detached timer ([`Shard::stage`]) has no cell ([`NO_CELL`]) and nobody can cancel,
//!   reset or wait for it.
//!
//! # The calendar: detached timers of the near future
//!
//! Since nothing can look a detached timer up, queuing one due less than
//! [`TICKS`](super::calendar::TICKS) ticks after the last drained tick files it in the shard's
//! [`Calendar`] instead of the queue: appended to the vector of its tick, with no record, key
//! or level to move down (see `calendar.rs`). Every timer queued, in the queue or the
//! calendar, takes the shard's next sequence number ([`Entry::seq`]; a reset takes a new one),
//! and a drain merges the two by (tick, sequence number): the firing order is exactly the
//! queue's alone. The queue's next due timer is held (`held`) while calendar timers before it
//! go out; a drain runs until neither has a timer due, so nothing stays held after it.
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
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;
use std::task::Waker;

use super::calendar::Calendar;
use super::callback::Build;
use super::core::Core;
use super::flavor::{AnyQueue, QueueFlavor};
use crate::queue::TimerKey;
use crate::sync::{
    backoff, lock, spin_hint, wait, Arc, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Condvar,
    Mutex, MutexGuard, Ordering, SpinGuard, SpinLock,
};
use crate::time::NEVER;

/// Timers a drain takes out per lock hold.
const DRAIN_CHUNK: usize = 128;

/// Staged timers at which a producer asks the timer thread to take its inbox in: enough to
/// make the wake-up cheap per timer, few enough to stay in the cache.
pub(crate) const FLUSH_AT: usize = 4096;

/// Staged timers at which a producer queues its shard's staged timers itself: the timer
/// thread is falling behind, and it must never face a backlog so long that queuing it
/// delays the timers that fall due meanwhile.
pub(crate) const BACKLOG: usize = 4 * FLUSH_AT;

/// Staged timers the end of a drain queues per lock hold (tens of microseconds), checking
/// between two whether a new tick has begun.
pub(crate) const FLUSH_CHUNK: usize = 1024;

/// Staged timers a lock hold takes in straight from the inbox's buffer when none staged
/// earlier waits in `taken` (see [`Shard::queue_chunk`]), of which at most [`FLUSH_CHUNK`]
/// queue inserts: detached timers of the near future, filed in the calendar, cost a fraction
/// of a queue insert, and going through `taken` would cost each a copy and a second pass.
const DIRECT: usize = 4 * FLUSH_CHUNK;

/// `try_lock` attempts a drain spins through before it blocks (a few microseconds).
#[cfg(not(loom))]
const DRAIN_SPINS: u32 = 1_000;
/// Under loom every spin is a modelled yield: keep the state space small.
#[cfg(loom)]
const DRAIN_SPINS: u32 = 2;

pub(crate) use super::callback::Callback;

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

/// The `cell` of an entry without one.
const NO_CELL_REF: CellRef = CellRef {
    index: NO_CELL,
    generation: 0,
};

/// A timer in a shard's inbox (see [`Shard::stage`]), with its cell if it has a handle: 40
/// bytes. (Its sequence number is taken when it is queued.)
pub(crate) struct Staged {
    tick: u64,
    callback: Callback,
    cell: CellRef,
}

impl Staged {
    /// Appends a staged timer to `staged`, its callback built in place (see [`Build`]).
    #[inline]
    fn push(staged: &mut Vec<Staged>, tick: u64, callback: impl Build, cell: CellRef) {
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

/// The `cell` of a detached timer: it has no handle.
const NO_CELL: u32 = u32::MAX;

/// How many of the inbox's latest timers a cancel looks through for its timer before it
/// queues the inbox instead (see [`Shard::cancel_staged`]).
const CANCEL_SCAN: usize = 64;

/// Cells a producer whose pool ran dry reserves at once (under the queue lock). In a steady
/// stream of schedules it does not run dry: each take of the inbox tops the pool up (see
/// [`Shard::take_inbox`]).
const CELL_REFILL: usize = 4096;

/// The inbox of staged timers (see the module docs).
struct Inbox {
    staged: Vec<Staged>,
    /// Cells reserved for the producers' handles, each with its current generation.
    pool: Vec<CellRef>,
    /// How many timers were cancelled while in the inbox, for `Stats`.
    cancelled: u64,
    /// The most timers pending at once, as seen by a cancel in the inbox (see
    /// [`Shard::note_peak`]).
    high_water: usize,
    /// Set at shutdown, with the queue's: stages are refused from then on.
    closed: bool,
}

/// A staged timer's cell, as its handle names it: an index into the shard's cells and the
/// generation the cell had when it was handed out. The cell's generation moves on when the
/// timer leaves the queue, so a stale reference finds nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CellRef {
    index: u32,
    generation: u32,
}

/// Where a [`TimerHandle`](super::TimerHandle) finds its timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A timer that was never queued (the service had shut down).
    None,
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
struct Slot {
    generation: u32,
    key: Option<TimerKey>,
}

/// The cells of the timers staged with a handle (see the module docs). Under the queue lock.
#[derive(Default)]
struct Cells {
    slots: Vec<Slot>,
    /// Cells given back by fires and cancels, at their next generation; moved to the inbox's
    /// pool when the inbox is taken (both locks are held then), or handed out by a refill.
    free: Vec<CellRef>,
    /// The inbox's pool length when last seen (under both locks).
    pooled: usize,
    /// How many cells the producers took from the pool between the last two takes of the
    /// inbox: the pool is topped up to twice that.
    used: usize,
}

impl Cells {
    /// Records that the timer of `cell` was queued under `key`.
    #[inline]
    fn queued(&mut self, cell: CellRef, key: TimerKey) {
        if let Some(slot) = self.slots.get_mut(cell.index as usize) {
            *slot = Slot {
                generation: cell.generation,
                key: Some(key),
            };
        }
    }

    /// The timer of `cell` left the queue (it fired or was cancelled): the cell is free, at
    /// its next generation. Its slot is not touched (a cache miss the drain need not pay): the
    /// key it holds is stale now.
    #[inline]
    fn left(&mut self, cell: CellRef) {
        if cell.index != NO_CELL {
            self.free.push(CellRef {
                index: cell.index,
                generation: cell.generation.wrapping_add(1),
            });
        }
    }

    /// Makes sure the pool will have twice the last interval's use after the next take:
    /// called by the timer thread before it takes the inbox lock, so that the new cells are
    /// made without holding up the producers.
    fn top_up(&mut self) {
        let want = 2 * self.used;
        let have = self.pooled.saturating_sub(self.used) + self.free.len();
        if want > have {
            self.grow(want - have);
        }
    }

    /// Hands the `free` cells to the inbox's `pool` (the caller holds both locks), and
    /// learns how many the producers used since the last time.
    fn refill(&mut self, pool: &mut Vec<CellRef>) {
        self.used = self.pooled.saturating_sub(pool.len());
        pool.append(&mut self.free);
        self.pooled = pool.len();
    }

    /// Makes up to `n` new cells, free at generation 0. Past `u32` cells it makes none: a
    /// producer then finds the pool empty and falls back to a direct insert.
    fn grow(&mut self, n: usize) {
        for _ in 0..n {
            let Some(index) = u32::try_from(self.slots.len())
                .ok()
                .filter(|&i| i != NO_CELL)
            else {
                return;
            };
            self.slots.push(Slot {
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

/// The inbox and what the timer thread reads of it without its lock, on cache lines of
/// their own: producers write the lock and `len` on every stage.
struct InboxShared {
    inbox: SpinLock<Inbox>,
    /// How many timers are staged (stored under the inbox lock).
    len: AtomicUsize,
    /// Lower bound of the earliest staged tick, [`NEVER`] when nothing is staged. On a line
    /// of its own: the timer thread reads it in every pass of its loop (and in its spin
    /// before a tick), producers read it on every stage but seldom write it. Beside the lock
    /// and `len`, every stage would have to take the line back from the spinning reader.
    earliest: CachePadded<AtomicU64>,
}

/// Where a drain puts what it took out of a shard.
#[derive(Default)]
pub(crate) struct Drained {
    pub(crate) jobs: Vec<Job>,
    /// Callbacks to run on the timer thread itself ([`Callback::is_inline`]: wakers and
    /// notifications).
    pub(crate) inline: Vec<Job>,
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
    #[inline]
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

/// What a shard held when it closed.
pub(crate) enum Closed {
    /// The whole queue of worker callbacks (dropping it drops them) and how many it held,
    /// with the staged timers (worker callbacks too).
    Queue(AnyQueue<Entry>, usize, Vec<Staged>),
    /// Every callback, when some need telling (inline ones: see [`Callback::discard`]).
    Callbacks(Vec<Callback>),
}

impl Closed {
    /// How many timers were discarded.
    pub(crate) fn len(&self) -> usize {
        match self {
            Closed::Queue(_, n, staged) => n + staged.len(),
            Closed::Callbacks(all) => all.len(),
        }
    }

    /// Drops or tells every discarded timer (see [`Callback::discard`]); the caller holds no
    /// lock: a closure's `Drop` may run any code.
    pub(crate) fn discard(self) {
        match self {
            Closed::Queue(queue, _, staged) => {
                drop(queue);
                staged.into_iter().for_each(|s| s.callback.discard());
            }
            Closed::Callbacks(all) => all.into_iter().for_each(Callback::discard),
        }
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
        }
    }

    /// Stages a detached `callback` at `tick` in the inbox (see the module docs); gives it
    /// back if the shard is closed. Returns how many timers the inbox now holds (at
    /// [`FLUSH_AT`] the caller asks the timer thread to take them in; every [`FLUSH_CHUNK`]
    /// it checks for a backlog of [`BACKLOG`], which it then queues itself).
    #[inline]
    pub(crate) fn stage(&self, tick: u64, callback: impl Build) -> Result<usize, Callback> {
        self.stage_inner::<false>(tick, callback)
            .map(|(len, _)| len)
    }

    /// Stages `callback` at `tick` like [`stage`](Self::stage), with a cell for its handle
    /// (see the module docs). Gives the callback back if the shard is closed (or, in theory,
    /// out of cells: the caller then inserts it directly).
    #[inline]
    pub(crate) fn stage_with_cell(
        &self,
        tick: u64,
        callback: impl Build,
    ) -> Result<(usize, CellRef), Callback> {
        self.stage_inner::<true>(tick, callback)
    }

    #[inline]
    fn stage_inner<const CELL: bool>(
        &self,
        tick: u64,
        callback: impl Build,
    ) -> Result<(usize, CellRef), Callback> {
        let shared = &self.inbox;
        let mut inbox = self.lock_producer_inbox();
        let cell = loop {
            if inbox.closed {
                return Err(callback.build());
            }
            if !CELL {
                break NO_CELL_REF;
            }
            if let Some(cell) = inbox.pool.pop() {
                break cell;
            }
            drop(inbox);
            if !self.refill_pool() {
                return Err(callback.build());
            }
            inbox = self.lock_producer_inbox();
        };
        Staged::push(&mut inbox.staged, tick, callback, cell);
        let len = inbox.staged.len();
        shared.len.store(len, Ordering::Relaxed);
        let lowered = tick < shared.earliest.load(Ordering::Relaxed);
        if lowered {
            shared.earliest.store(tick, Ordering::SeqCst);
        }
        drop(inbox);
        if lowered {
            self.core.lowered_earliest(tick);
        }
        Ok((len, cell))
    }

    /// Reserves [`CELL_REFILL`] cells into the inbox's pool, under the queue lock (a producer
    /// whose pool ran dry: rare once timers fire, whose cells come back at each take of the
    /// inbox). `false` if the shard is closed or out of cells.
    #[cold]
    fn refill_pool(&self) -> bool {
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
    fn flush(&self, st: &mut ShardState, now: u64) {
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
            for staged in spare.drain(..) {
                if staged.tick <= now {
                    st.enqueue(staged);
                } else {
                    st.taken_earliest = st.taken_earliest.min(staged.tick);
                    st.taken.push_back(staged);
                }
            }
        }
        st.spare = spare;
        self.note_peak(st);
        self.note_len(st);
    }

    /// Takes the current pending count into the high-water mark: called before timers leave
    /// (and after they arrive), so the mark is exact with one producer. Pending are the queued,
    /// the taken and the staged timers.
    fn note_peak(&self, st: &mut ShardState) {
        let pending = st.queued() + st.taken.len() + self.staged();
        st.high_water = st.high_water.max(pending);
    }

    /// Publishes `taken`'s length and the queued count (for `unqueued` and `cancel_staged`).
    fn note_len(&self, st: &ShardState) {
        self.taken_len.store(st.taken.len(), Ordering::Relaxed);
        self.queued_len
            .store(st.queued() + st.taken.len(), Ordering::Relaxed);
    }

    /// Swaps the inbox's buffer with `spare` (empty) if the inbox holds timers, and tops the
    /// inbox's pool of cells up (with the freed ones, and new ones when the producers used
    /// more than that); returns whether it did. The caller holds the queue lock (`spare` and
    /// `cells` are in its state) and puts every timer now in `spare` into the queue or
    /// `taken`.
    fn take_inbox(&self, spare: &mut Vec<Staged>, cells: &mut Cells) -> bool {
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
    /// of a drain. What stays is still covered by `earliest`.
    pub(crate) fn flush_staged(&self, stop: impl Fn() -> bool) {
        while self.unqueued() > 0 {
            self.queue_chunk(&mut self.lock_drain());
            if stop() {
                break;
            }
        }
    }

    /// A producer's share of the work when the timer thread falls behind ([`BACKLOG`] timers
    /// not queued yet): it queues every staged timer of its shard itself, [`FLUSH_CHUNK`] a lock
    /// hold, letting a waiting drain in between two. Producers then scale as they do with
    /// handles, and the timer thread never faces more than a bounded backlog.
    #[cold]
    pub(crate) fn help_flush(&self) {
        while self.unqueued() > 0 {
            self.queue_chunk(&mut self.lock_producer());
        }
    }

    /// Takes the inbox in behind `taken` and queues up to [`FLUSH_CHUNK`] timers from the
    /// front of `taken`; when `taken` is empty, it first queues up to [`DIRECT`] of the
    /// inbox's timers straight from its buffer. Either way timers are queued in staging
    /// order. The caller holds the queue lock (`st`).
    fn queue_chunk(&self, st: &mut ShardState) {
        let mut spare = std::mem::take(&mut st.spare);
        if self.take_inbox(&mut spare, &mut st.cells) {
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

    /// Queues `callback` at `tick`; gives it back if the shard is closed.
    #[inline]
    pub(crate) fn insert(&self, tick: u64, callback: Callback) -> Result<TimerKey, Callback> {
        let mut st = self.lock_producer();
        if st.closed {
            return Err(callback);
        }
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
        let lowered = tick < self.earliest.load(Ordering::Relaxed);
        if lowered {
            self.earliest.store(tick, Ordering::SeqCst);
        }
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
            Target::None => None,
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

    /// Cancels the timer of `cell` if it is among the inbox's [`CANCEL_SCAN`] latest timers:
    /// a timer cancelled soon after it was scheduled (a timeout whose request completed) is
    /// then never queued at all. In the inbox, under the inbox lock, nothing else can take it,
    /// so finding it there decides its fate. The cell goes straight back to the pool at its
    /// next generation (its slot, never written for this timer, stays as it was). `None` if it
    /// is not there (queued, taken, further back, fired, cancelled): the caller then goes
    /// through the queue.
    fn cancel_staged(&self, cell: CellRef) -> Option<Callback> {
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
        inbox.pool.push(CellRef {
            index: cell.index,
            generation: cell.generation.wrapping_add(1),
        });
        inbox.cancelled += 1;
        drop(inbox);
        self.core.release(1);
        Some(callback)
    }

    /// Makes a pending [`Callback::waker`] entry wake `waker`: `true` if it is still pending.
    /// The waker is cloned only when it would not wake the same task; the one it replaces is
    /// dropped after the lock is released (an executor's waker `Drop` is user code).
    pub(crate) fn update_waker(&self, target: Target, waker: &Waker) -> bool {
        let mut st = self.lock_producer();
        let Some(key) = self.resolve(&mut st, target) else {
            return false;
        };
        let Some(slot) = st
            .queue
            .get_mut(key)
            .and_then(|entry| entry.callback.waker_mut())
        else {
            return false;
        };
        if slot.will_wake(waker) {
            return true;
        }
        let old = std::mem::replace(slot, waker.clone());
        drop(st);
        drop(old);
        true
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
        let lowered = tick < self.earliest.load(Ordering::Relaxed);
        if lowered {
            self.earliest.store(tick, Ordering::SeqCst);
        }
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

    /// Locks the inbox for a stage; like [`lock_producer`](Self::lock_producer), it first lets
    /// a waiting flush in.
    #[inline]
    fn lock_producer_inbox(&self) -> SpinGuard<'_, Inbox> {
        let mut round = 0;
        while self.drain_waiting.load(Ordering::Acquire) {
            backoff(round);
            round = round.saturating_add(1);
        }
        self.inbox.inbox.lock()
    }

    /// Locks the inbox for a flush, as [`lock_drain`](Self::lock_drain) locks the queue. The
    /// caller holds the queue lock, so no other flush raises `drain_waiting` meanwhile.
    fn lock_drain_inbox(&self) -> SpinGuard<'_, Inbox> {
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

    /// Takes every timer due at `now` out of the queue, in firing order; returns how many.
    ///
    /// The lock is taken once per [`DRAIN_CHUNK`] timers, not for the whole drain, so a
    /// producer on this shard waits at most one chunk. `chunk` is called after each one,
    /// outside the lock (it may hand the chunk on).
    pub(crate) fn drain(
        &self,
        now: u64,
        out: &mut Drained,
        mut chunk: impl FnMut(&mut Drained),
    ) -> usize {
        let mut total = 0;
        loop {
            let (n, more) = self.drain_chunk(now, out);
            total += n;
            chunk(out);
            if !more {
                break;
            }
        }
        self.core.release(total);
        total
    }

    /// One lock's worth of [`drain`](Self::drain): `(taken, maybe more due)`.
    fn drain_chunk(&self, now: u64, out: &mut Drained) -> (usize, bool) {
        let mut st = self.lock_drain();
        let st = &mut *st;
        if self.unqueued() > 0 || self.inbox.earliest.load(Ordering::Relaxed) <= now {
            self.flush(st, now);
        } else {
            self.note_peak(st);
        }
        let mut n = 0;
        while n < DRAIN_CHUNK {
            // The queue's next due timer and the calendar's, merged by (tick, sequence).
            if st.held.is_none() && st.idle_at != Some(now) {
                match st.queue.poll_expired(now) {
                    Some((key, entry)) => st.held = Some((st.queue.now(), key, entry)),
                    None => st.idle_at = Some(now),
                }
            }
            let queue_first = st.held.as_ref().map(|(tick, _, entry)| (*tick, entry.seq));
            // `Some(tick)`: the calendar's first timer goes next; `None`: the queue's.
            let calendar = match (queue_first, st.cal.peek(now)) {
                (Some(first), Some(other)) => (other < first).then_some(other.0),
                (Some(_), None) => None,
                (None, Some((tick, _))) => Some(tick),
                (None, None) => {
                    let next = st.queue.next_expiration().map_or(NEVER, |t| t.max(now + 1));
                    // Taken timers are all later than `now` (see `flush`), and so are the
                    // calendar's.
                    let next = next
                        .min(st.taken_earliest)
                        .min(st.cal.first_tick().unwrap_or(NEVER));
                    self.earliest.store(next, Ordering::SeqCst);
                    self.note_len(st);
                    return (n, false);
                }
            };
            let job = if let Some(deadline) = calendar {
                let Some(callback) = st.cal.take() else {
                    break;
                };
                Job { deadline, callback }
            } else {
                let Some((deadline, key, Entry { callback, cell, .. })) = st.held.take() else {
                    break;
                };
                st.cells.left(cell);
                if !st.waiters.is_empty() {
                    complete_waiter(&mut st.waiters, key);
                }
                Job { deadline, callback }
            };
            n += 1;
            if job.callback.is_inline() {
                st.inline -= 1;
                out.inline.push(job);
            } else {
                out.jobs.push(job);
            }
        }
        self.note_len(st);
        (n, true)
    }

    /// Closes the shard (inserts are refused from now on) and takes out every pending timer,
    /// for shutdown. Waiters are released. The caller drops what it gets outside the lock.
    pub(crate) fn close(&self) -> Closed {
        let mut st = lock(&self.state);
        self.note_peak(&mut st);
        st.closed = true;
        let staged = {
            let mut inbox = self.inbox.inbox.lock();
            inbox.closed = true;
            self.inbox.earliest.store(NEVER, Ordering::SeqCst);
            self.inbox.len.store(0, Ordering::Relaxed);
            let mut staged: Vec<Staged> = st.taken.drain(..).collect();
            staged.append(&mut inbox.staged);
            // A drain never leaves a timer held (it runs until nothing is due); the calendar's
            // timers are discarded with the staged ones.
            let held = st.held.take().map(|(tick, _, entry)| Staged {
                tick,
                callback: entry.callback,
                cell: entry.cell,
            });
            let calendar = st
                .cal
                .take_all()
                .into_iter()
                .map(|(tick, _, callback)| Staged {
                    tick,
                    callback,
                    cell: NO_CELL_REF,
                });
            staged.extend(held.into_iter().chain(calendar));
            st.taken_earliest = NEVER;
            self.taken_len.store(0, Ordering::Relaxed);
            self.queued_len.store(0, Ordering::Relaxed);
            staged
        };
        let count = st.queue.len();
        let closed = if st.inline == 0 {
            // Only callbacks: nobody needs telling, drop the queue whole (no cascades).
            let fresh = AnyQueue::new(st.flavor);
            Closed::Queue(std::mem::replace(&mut st.queue, fresh), count, staged)
        } else {
            let mut all = Vec::with_capacity(count);
            while let Some((_, entry)) = st.queue.poll_expired(NEVER) {
                all.push(entry.callback);
            }
            all.extend(staged.into_iter().map(|s| s.callback));
            st.inline = 0;
            Closed::Callbacks(all)
        };
        for (_, slot) in st.waiters.drain(..) {
            slot.complete();
        }
        self.earliest.store(NEVER, Ordering::SeqCst);
        drop(st);
        let count = closed.len();
        self.core.release(count);
        closed
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

/// The races that decide a timer's fate, under loom with `--cfg loom` (see [`crate::sync`]).
#[cfg(test)]
mod tests {
    // The clock is a trait object in std's `Arc` (loom's cannot coerce to `dyn`).
    use std::sync::Arc as StdArc;
    use std::time::Duration;

    use super::*;
    use crate::sync::{model, spawn, AtomicUsize, JoinHandle, Mutex};
    use crate::time::{ManualClock, Ticks};

    fn shard() -> Arc<Shard> {
        let clock = ManualClock::new();
        let ticks = Ticks::new(clock.now(), Duration::from_millis(1));
        let core = Arc::new(Core::new(StdArc::new(clock), ticks, Some(8)));
        Arc::new(Shard::new(core, QueueFlavor::Wheel))
    }

    /// A callback that counts its runs in `ran`.
    fn counter(ran: &Arc<AtomicUsize>) -> Callback {
        let ran = ran.clone();
        Callback::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// Inserts a callback at `tick` that counts its runs in `ran`.
    fn counting(shard: &Shard, tick: u64, ran: &Arc<AtomicUsize>) -> Target {
        shard
            .insert(tick, counter(ran))
            .map(Target::Key)
            .unwrap_or_else(|_| panic!("shard closed"))
    }

    /// Drains at `now` and runs what came out, as the timer thread and a worker would.
    fn fire(shard: &Shard, now: u64) -> usize {
        let mut out = Drained::default();
        let n = shard.drain(now, &mut out, |_| {});
        for job in out.jobs {
            job.callback.call();
        }
        n
    }

    /// Runs `f` on `shard` in a spawned thread: one side of a race. Every side of a race
    /// runs this way, none on the model's main thread (see [`crate::sync`]).
    fn race<T: Send + 'static>(
        shard: &Arc<Shard>,
        f: impl FnOnce(&Shard) -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let shard = shard.clone();
        spawn(move || f(&shard))
    }

    /// A timer made by `make` at tick 1 is cancelled while a drain fires tick 1: `cancel` is
    /// `true` exactly when the callback never ran and never will, and only once.
    fn cancel_vs_fire(make: fn(&Shard, u64, &Arc<AtomicUsize>) -> Target) {
        model(move || {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let target = make(&shard, 1, &ran);
            let firer = race(&shard, |shard| fire(shard, 1));
            let canceller = race(&shard, move |shard| shard.cancel(target).is_some());
            let cancelled = canceller.join().unwrap();
            let drained = firer.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
            assert_eq!(drained, usize::from(!cancelled));
            assert!(shard.cancel(target).is_none(), "a timer is decided once");
            assert!(!shard.is_pending(target));
            assert_eq!(fire(&shard, 100), 0);
        });
    }

    #[test]
    fn loom_cancel_vs_fire_decides_exactly_once() {
        cancel_vs_fire(counting);
    }

    #[test]
    fn loom_reset_vs_fire_runs_once() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let key = counting(&shard, 1, &ran);
            let firer = race(&shard, |shard| fire(shard, 1));
            let resetter = race(&shard, move |shard| shard.reset(key, 5));
            let moved = resetter.join().unwrap();
            firer.join().unwrap();
            // Reset won: nothing ran at tick 1. Fire won: the reset did nothing.
            assert_eq!(ran.load(Ordering::SeqCst), usize::from(!moved));
            assert_eq!(shard.earliest() <= 5, moved);
            fire(&shard, 5);
            assert_eq!(ran.load(Ordering::SeqCst), 1);
        });
    }

    #[test]
    fn loom_wait_is_released_by_fire_or_cancel() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let key = counting(&shard, 1, &ran);
            let waiter = race(&shard, move |shard| {
                if let Some(slot) = shard.register_waiter(key) {
                    slot.block();
                }
                // Released only once the timer left the queue.
                assert!(shard.deadline(key).is_none());
            });
            let canceller = race(&shard, move |shard| shard.cancel(key).is_some());
            let firer = race(&shard, |shard| fire(shard, 1));
            firer.join().unwrap();
            let cancelled = canceller.join().unwrap();
            waiter.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
        });
    }

    /// Counts the wake-ups of the wakers made from it (a std `Arc`, as `Waker`s require).
    struct CountWake(AtomicUsize);

    impl std::task::Wake for CountWake {
        fn wake(self: StdArc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn count_wake() -> StdArc<CountWake> {
        StdArc::new(CountWake(AtomicUsize::new(0)))
    }

    fn wakes(count: &StdArc<CountWake>) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    /// A `Sleep`'s timer: an entry whose callback wakes `count`'s waker.
    fn waker_entry(shard: &Shard, tick: u64, count: &StdArc<CountWake>) -> Target {
        let waker = Waker::from(count.clone());
        shard
            .insert(tick, Callback::waker(waker))
            .map(Target::Key)
            .unwrap_or_else(|_| panic!("shard closed"))
    }

    /// Drains at `now` and runs the inline callbacks, as the timer thread does.
    fn fire_inline(shard: &Shard, now: u64) -> usize {
        let mut out = Drained::default();
        let n = shard.drain(now, &mut out, |_| {});
        out.inline.into_iter().for_each(|job| job.callback.call());
        n
    }

    #[test]
    fn loom_waker_swap_vs_fire_loses_no_wakeup() {
        model(|| {
            let shard = shard();
            let (first, second) = (count_wake(), count_wake());
            let key = waker_entry(&shard, 1, &first);
            let firer = race(&shard, |shard| fire_inline(shard, 1));
            // A `Sleep` polled again from another task brings `second`'s waker.
            let waker = Waker::from(second.clone());
            let swapper = race(&shard, move |shard| shard.update_waker(key, &waker));
            let swapped = swapper.join().unwrap();
            firer.join().unwrap();
            // Swapped first: the new task is woken. Fired first: the old one was, and the
            // poll sees its entry gone (and the clock past the deadline).
            assert_eq!(
                (wakes(&first), wakes(&second)),
                if swapped { (0, 1) } else { (1, 0) }
            );
            // Every waker was woken or dropped: only the test's references remain.
            assert_eq!(StdArc::strong_count(&first), 1);
            assert_eq!(StdArc::strong_count(&second), 1);
        });
    }

    #[test]
    fn loom_drop_vs_wake_wakes_exactly_when_not_cancelled() {
        model(|| {
            let shard = shard();
            let count = count_wake();
            let key = waker_entry(&shard, 1, &count);
            let firer = race(&shard, |shard| fire_inline(shard, 1));
            // The `Sleep` is dropped: it cancels its entry if still queued.
            let dropper = race(&shard, move |shard| shard.cancel(key).is_some());
            let cancelled = dropper.join().unwrap();
            firer.join().unwrap();
            assert_eq!(wakes(&count), usize::from(!cancelled));
            // The waker was dropped once, by whichever side had the entry.
            assert_eq!(StdArc::strong_count(&count), 1);
        });
    }

    #[test]
    fn a_waker_is_woken_not_dropped_when_discarded() {
        let shard = shard();
        let count = count_wake();
        let key = waker_entry(&shard, 5, &count);
        let Closed::Callbacks(all) = shard.close() else {
            panic!("a shard with a waker entry must hand every callback back");
        };
        assert_eq!(all.len(), 1);
        all.into_iter().for_each(Callback::discard);
        assert_eq!(wakes(&count), 1);
        assert!(!shard.update_waker(key, &Waker::from(count.clone())));
    }

    #[test]
    fn close_discards_everything_and_refuses_inserts() {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let key = counting(&shard, 1, &ran);
        counting(&shard, NEVER, &ran);
        assert_eq!(shard.close().len(), 2);
        assert_eq!(shard.close().len(), 0, "closing twice finds nothing");
        assert!(shard.cancel(key).is_none());
        let refused = shard.insert(1, Callback::new(|| {}));
        assert!(refused.is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
    /// Stages a callback at `tick` that pushes `id` to `log` when run.
    fn staged(shard: &Shard, tick: u64, id: u32, log: &Arc<Mutex<Vec<u32>>>) -> usize {
        let log = log.clone();
        let callback = Callback::new(move || lock(&log).push(id));
        shard
            .stage(tick, callback)
            .unwrap_or_else(|_| panic!("shard closed"))
    }

    #[test]
    fn staged_timers_are_queued_due_first_in_order_and_stay_visible() {
        let shard = shard();
        let log = Arc::new(Mutex::new(Vec::new()));
        for (id, tick) in [(0, 5), (1, 1), (2, 5), (3, NEVER)] {
            assert_eq!(staged(&shard, tick, id, &log), id as usize + 1);
        }
        let handle_ran = Arc::new(AtomicUsize::new(0));
        assert_eq!(shard.earliest(), 1);
        assert_eq!(fire(&shard, 1), 1);
        assert_eq!(*lock(&log), [1]);
        // Ticks 5 are out of the inbox, not yet queued: `earliest` still covers them.
        assert!(shard.earliest() <= 5);
        assert_eq!(shard.counts().pending, 3);
        // A handle timer at tick 5 from the same thread comes after the staged ones.
        counting(&shard, 5, &handle_ran);
        assert_eq!(fire(&shard, 5), 3);
        assert_eq!(*lock(&log), [1, 0, 2]);
        assert_eq!(handle_ran.load(Ordering::SeqCst), 1);
        let counts = shard.counts();
        assert_eq!((counts.pending, counts.scheduled), (1, 5));
        assert_eq!(shard.close().len(), 1, "the NEVER timer is discarded");
        assert!(shard.stage(1, Callback::new(|| {})).is_err());
    }

    #[test]
    fn a_full_inbox_asks_for_a_flush() {
        let shard = shard();
        let full: Vec<bool> = (0..FLUSH_AT)
            .map(|_| {
                shard
                    .stage(9, Callback::new(|| {}))
                    .is_ok_and(|n| n == FLUSH_AT)
            })
            .collect();
        assert_eq!(full.iter().position(|f| *f), Some(FLUSH_AT - 1));
        shard.flush_staged(|| false);
        assert_eq!(shard.unqueued(), 0);
        assert_eq!(shard.counts().pending, FLUSH_AT);
        assert_eq!(shard.earliest(), 9);
    }

    #[test]
    fn a_producer_helping_queues_everything_in_order() {
        let shard = shard();
        let log = Arc::new(Mutex::new(Vec::new()));
        let n = FLUSH_CHUNK as u32 + 6;
        for id in 0..n {
            staged(&shard, 2 + u64::from(id % 2), id, &log);
        }
        // Two chunks, the second taking in what was staged after the first.
        shard.help_flush();
        assert_eq!(shard.unqueued(), 0);
        assert_eq!(shard.counts().pending, n as usize);
        assert_eq!(fire(&shard, 3), n as usize);
        let evens = (0..n).filter(|id| id % 2 == 0);
        let expected: Vec<u32> = evens.chain((0..n).filter(|id| id % 2 == 1)).collect();
        assert_eq!(*lock(&log), expected);
    }

    /// A producer stages a timer due at tick 1 while the timer thread drains tick 1: the
    /// timer runs once, either in that drain or, if it missed it, in the next one, which the
    /// published `earliest` asks for.
    #[test]
    fn loom_stage_vs_drain_runs_once_and_is_never_lost() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let producer = {
                let callback = counter(&ran);
                race(&shard, move |shard| {
                    assert!(shard.stage(1, callback).is_ok());
                })
            };
            let firer = race(&shard, |shard| fire(shard, 1));
            producer.join().unwrap();
            let first = firer.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), first);
            if first == 0 {
                assert!(shard.earliest() <= 1, "a staged timer is visible");
                assert_eq!(fire(&shard, 1), 1);
            }
            assert_eq!(ran.load(Ordering::SeqCst), 1);
            assert_eq!(fire(&shard, 100), 0);
        });
    }

    /// Stages a callback at `tick` with a cell (as `schedule` does) that counts its runs in
    /// `ran`; returns its handle's target.
    fn staged_with_cell(shard: &Shard, tick: u64, ran: &Arc<AtomicUsize>) -> Target {
        shard
            .stage_with_cell(tick, counter(ran))
            .map(|(_, cell)| Target::Cell(cell))
            .unwrap_or_else(|_| panic!("shard closed"))
    }

    /// A timer staged with a handle is cancelled while the timer thread drains its tick (and
    /// so takes it out of the inbox): `true` exactly when its callback never runs.
    #[test]
    fn loom_cancel_of_a_staged_timer_vs_fire_decides_exactly_once() {
        cancel_vs_fire(staged_with_cell);
    }

    /// A timer cancelled while still in the inbox is never queued, and leaves no trace the
    /// timer thread would wake for; its handle is stale at once.
    #[test]
    fn a_cancel_in_the_inbox_leaves_nothing_behind() {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let target = staged_with_cell(&shard, 3, &ran);
        assert!(shard.cancel(target).is_some());
        assert_eq!(shard.staged(), 0);
        // Its tick stays a lower bound until a drain finds nothing there (once, not forever).
        assert_eq!(shard.earliest(), 3);
        assert_eq!(fire(&shard, 3), 0);
        assert_eq!(
            shard.earliest(),
            NEVER,
            "the timer thread would spin on tick 3"
        );
        assert!(!shard.is_pending(target));
        assert!(shard.cancel(target).is_none());
        assert!(shard.deadline(target).is_none());
        let counts = shard.counts();
        assert_eq!(
            (counts.pending, counts.scheduled, counts.cancelled),
            (0, 1, 1)
        );
        // The cell is back in the pool: the next timer reuses it, the old handle stays stale.
        let again = staged_with_cell(&shard, 3, &ran);
        assert!(
            matches!((again, target), (Target::Cell(a), Target::Cell(t)) if a.index == t.index)
        );
        shard.flush_staged(|| false);
        assert!(shard.is_pending(again) && !shard.is_pending(target));
        assert_eq!(fire(&shard, 3), 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    /// The high-water mark counts staged timers too, even those cancelled in the inbox
    /// before the timer thread ever saw them.
    #[test]
    fn the_high_water_mark_sees_timers_cancelled_in_the_inbox() {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            staged_with_cell(&shard, 5, &ran);
        }
        shard.flush_staged(|| false);
        let late: Vec<Target> = (0..2).map(|_| staged_with_cell(&shard, 5, &ran)).collect();
        for target in late {
            assert!(shard.cancel(target).is_some());
        }
        let counts = shard.counts();
        assert_eq!((counts.pending, counts.high_water), (3, 5));
    }

    /// A producer stages a timer with a handle (its pool empty, so it reserves cells under
    /// the queue lock first) and resets it while the timer thread drains: the timer runs
    /// once, at tick 1 if the drain had it first and at tick 3 if the reset did.
    #[test]
    fn loom_stage_and_reset_vs_drain_runs_once() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let producer = {
                let ran = ran.clone();
                race(&shard, move |shard| {
                    let target = staged_with_cell(shard, 1, &ran);
                    shard.reset(target, 3)
                })
            };
            let firer = race(&shard, |shard| fire(shard, 1));
            let moved = producer.join().unwrap();
            let first = firer.join().unwrap();
            assert_eq!(first, usize::from(!moved));
            assert_eq!(ran.load(Ordering::SeqCst), first);
            assert_eq!(fire(&shard, 2), 0, "never early");
            assert_eq!(fire(&shard, 3) + first, 1);
            assert_eq!(ran.load(Ordering::SeqCst), 1);
        });
    }

    /// A producer queuing its shard's staged timers itself (`help_flush`) while the timer
    /// thread drains: the timer runs once, and none is left behind unqueued.
    #[test]
    fn loom_help_flush_vs_drain_runs_once() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let producer = {
                let callback = counter(&ran);
                race(&shard, move |shard| {
                    assert!(shard.stage(1, callback).is_ok());
                    shard.help_flush();
                })
            };
            let firer = race(&shard, |shard| fire(shard, 1));
            producer.join().unwrap();
            let first = firer.join().unwrap();
            assert_eq!(shard.unqueued(), 0);
            assert_eq!(fire(&shard, 1) + first, 1);
            assert_eq!(ran.load(Ordering::SeqCst), 1);
        });
    }

    /// A stage racing shutdown's close is either refused (the caller drops it) or discarded
    /// by the close: never both, never neither, never run.
    #[test]
    fn loom_stage_vs_close_is_refused_or_discarded() {
        model(|| {
            let shard = shard();
            let producer = race(&shard, |shard| shard.stage(1, Callback::new(|| {})).is_ok());
            let closer = race(&shard, |shard| shard.close().len());
            let staged = producer.join().unwrap();
            let discarded = closer.join().unwrap();
            assert_eq!(discarded, usize::from(staged));
            assert_eq!(fire(&shard, 100), 0);
        });
    }

    /// The timer thread decides how long to sleep from `earliest()`: while a flush moves a
    /// staged timer from the inbox to the queue, no interleaving may show neither.
    #[test]
    fn loom_a_flush_never_hides_a_staged_timer() {
        model(|| {
            let shard = shard();
            assert!(shard.stage(3, Callback::new(|| {})).is_ok());
            let flusher = race(&shard, |shard| shard.flush_staged(|| false));
            let reader = race(&shard, Shard::earliest);
            assert!(reader.join().unwrap() <= 3);
            flusher.join().unwrap();
            assert_eq!(shard.earliest(), 3);
            assert_eq!((shard.staged(), shard.counts().pending), (0, 1));
        });
    }
}
