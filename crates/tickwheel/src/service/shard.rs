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

use std::fmt;
// Trait objects use std's `Arc` (loom's cannot coerce to `dyn`); they are not modelled.
use std::sync::Arc as StdArc;

use super::core::Core;
use super::flavor::{AnyQueue, QueueFlavor};
use crate::queue::TimerKey;
use crate::sync::{
    backoff, lock, spin_hint, wait, Arc, AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard,
    Ordering,
};
use crate::time::NEVER;

/// Timers a drain takes out per lock hold.
const DRAIN_CHUNK: usize = 128;

/// `try_lock` attempts a drain spins through before it blocks (a few microseconds).
#[cfg(not(loom))]
const DRAIN_SPINS: u32 = 1_000;
/// Under loom every spin is a modelled yield: keep the state space small.
#[cfg(loom)]
const DRAIN_SPINS: u32 = 2;

pub(crate) use super::callback::Callback;

/// How an entry scheduled with [`Payload::Notify`] left the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Its deadline passed; called on the timer thread.
    Fired,
    /// The service shut down with the entry still pending.
    Discarded,
}

/// The cheap, non-blocking action of an entry that expires *on the timer thread* (the hook of
/// the futures layer: wake a `Waker`). It must not block or panic: it runs on the thread that
/// keeps every other timer on time.
pub(crate) trait Expire: Send + Sync + 'static {
    /// Called exactly once per scheduling that was neither cancelled nor reset away.
    fn expire(&self, how: Expiry);
}

/// What a queue entry holds.
pub(crate) enum Payload {
    /// A user callback, handed to the workers.
    Callback(Callback),
    /// A notification run on the timer thread.
    Notify(StdArc<dyn Expire>),
}

/// A due callback on its way to a worker, with the tick it was due at.
pub(crate) struct Job {
    pub(crate) callback: Callback,
    pub(crate) deadline: u64,
}

/// Where a drain puts what it took out of a shard.
#[derive(Default)]
pub(crate) struct Drained {
    pub(crate) jobs: Vec<Job>,
    pub(crate) notifies: Vec<StdArc<dyn Expire>>,
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
    queue: AnyQueue<Payload>,
    waiters: Vec<(TimerKey, Arc<WaitSlot>)>,
    /// Set at shutdown: inserts are refused from then on.
    closed: bool,
    /// Pending `Payload::Notify` entries; when there are none, shutdown drops the queue
    /// whole instead of polling every timer out of it.
    notifies: usize,
    flavor: QueueFlavor,
    scheduled: u64,
    cancelled: u64,
    high_water: usize,
}

/// What a shard held when it closed.
pub(crate) enum Closed {
    /// The whole queue of callbacks (dropping it drops them) and how many it held.
    Queue(AnyQueue<Payload>, usize),
    /// Every payload, when some need telling (`Notify`).
    Payloads(Vec<Payload>),
}

impl Closed {
    /// How many timers were discarded.
    pub(crate) fn len(&self) -> usize {
        match self {
            Closed::Queue(_, n) => *n,
            Closed::Payloads(all) => all.len(),
        }
    }
}

/// Per-shard counters for `Stats`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShardCounts {
    pub(crate) pending: usize,
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
}

impl Shard {
    pub(crate) fn new(core: Arc<Core>, flavor: QueueFlavor) -> Shard {
        Shard {
            state: Mutex::new(ShardState {
                queue: AnyQueue::new(flavor),
                waiters: Vec::new(),
                closed: false,
                notifies: 0,
                flavor,
                scheduled: 0,
                cancelled: 0,
                high_water: 0,
            }),
            earliest: AtomicU64::new(NEVER),
            drain_waiting: AtomicBool::new(false),
            core,
        }
    }

    /// Queues `payload` at `tick`; gives it back if the shard is closed.
    #[inline]
    pub(crate) fn insert(&self, tick: u64, payload: Payload) -> Result<TimerKey, Payload> {
        let mut st = self.lock_producer();
        if st.closed {
            return Err(payload);
        }
        st.notifies += usize::from(matches!(payload, Payload::Notify(_)));
        let key = st.queue.insert(tick, payload);
        st.scheduled += 1;
        st.high_water = st.high_water.max(st.queue.len());
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

    /// Removes a pending timer. `Some` exactly when it had not been taken out to run.
    pub(crate) fn cancel(&self, key: TimerKey) -> Option<Payload> {
        let mut st = self.lock_producer();
        let payload = st.queue.remove(key)?;
        st.cancelled += 1;
        st.notifies -= usize::from(matches!(payload, Payload::Notify(_)));
        if !st.waiters.is_empty() {
            complete_waiter(&mut st.waiters, key);
        }
        drop(st);
        self.core.release(1);
        Some(payload)
    }

    /// Moves a pending timer to `tick`; `false` if it already fired or was cancelled.
    pub(crate) fn reset(&self, key: TimerKey, tick: u64) -> bool {
        let mut st = self.lock_producer();
        if !st.queue.reset(key, tick) {
            return false;
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
    /// the timer thread for as long as it keeps scheduling (measured: 100+ ms of lateness).
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

    /// The effective deadline tick of a pending timer.
    pub(crate) fn deadline(&self, key: TimerKey) -> Option<u64> {
        lock(&self.state).queue.deadline(key)
    }

    /// Registers a waiter for a pending timer; `None` if it is no longer pending.
    pub(crate) fn register_waiter(&self, key: TimerKey) -> Option<Arc<WaitSlot>> {
        let mut st = lock(&self.state);
        st.queue.deadline(key)?;
        let slot = Arc::new(WaitSlot::new());
        st.waiters.push((key, slot.clone()));
        Some(slot)
    }

    /// The published lower bound of the earliest pending deadline.
    #[inline]
    pub(crate) fn earliest(&self) -> u64 {
        self.earliest.load(Ordering::SeqCst)
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
        let mut n = 0;
        while n < DRAIN_CHUNK {
            let Some((key, payload)) = st.queue.poll_expired(now) else {
                let next = st.queue.next_expiration().map_or(NEVER, |t| t.max(now + 1));
                self.earliest.store(next, Ordering::SeqCst);
                return (n, false);
            };
            n += 1;
            if !st.waiters.is_empty() {
                complete_waiter(&mut st.waiters, key);
            }
            match payload {
                Payload::Callback(callback) => out.jobs.push(Job {
                    callback,
                    deadline: st.queue.now(),
                }),
                Payload::Notify(target) => {
                    st.notifies -= 1;
                    out.notifies.push(target);
                }
            }
        }
        (n, true)
    }

    /// Closes the shard (inserts are refused from now on) and takes out every pending timer,
    /// for shutdown. Waiters are released. The caller drops what it gets outside the lock.
    pub(crate) fn close(&self) -> Closed {
        let mut st = lock(&self.state);
        st.closed = true;
        let count = st.queue.len();
        let closed = if st.notifies == 0 {
            // Only callbacks: nobody needs telling, drop the queue whole (no cascades).
            let fresh = AnyQueue::new(st.flavor);
            Closed::Queue(std::mem::replace(&mut st.queue, fresh), count)
        } else {
            let mut all = Vec::with_capacity(count);
            while let Some((_, payload)) = st.queue.poll_expired(NEVER) {
                all.push(payload);
            }
            st.notifies = 0;
            Closed::Payloads(all)
        };
        for (_, slot) in st.waiters.drain(..) {
            slot.complete();
        }
        self.earliest.store(NEVER, Ordering::SeqCst);
        drop(st);
        self.core.release(count);
        closed
    }

    pub(crate) fn counts(&self) -> ShardCounts {
        let st = lock(&self.state);
        ShardCounts {
            pending: st.queue.len(),
            high_water: st.high_water,
            scheduled: st.scheduled,
            cancelled: st.cancelled,
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
    use std::time::Duration;

    use super::*;
    use crate::sync::{model, spawn, AtomicUsize};
    use crate::time::{ManualClock, Ticks};

    fn shard() -> Arc<Shard> {
        let clock = ManualClock::new();
        let ticks = Ticks::new(clock.now(), Duration::from_millis(1));
        let core = Arc::new(Core::new(StdArc::new(clock), ticks, Some(8)));
        Arc::new(Shard::new(core, QueueFlavor::Wheel))
    }

    /// Inserts a callback at `tick` that counts its runs in `ran`.
    fn counting(shard: &Shard, tick: u64, ran: &Arc<AtomicUsize>) -> TimerKey {
        let ran = ran.clone();
        let callback = Callback::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        });
        shard
            .insert(tick, Payload::Callback(callback))
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

    #[test]
    fn loom_cancel_vs_fire_decides_exactly_once() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let key = counting(&shard, 1, &ran);
            let firer = {
                let shard = shard.clone();
                spawn(move || fire(&shard, 1))
            };
            let cancelled = shard.cancel(key).is_some();
            let drained = firer.join().unwrap();
            // true exactly when the callback never ran and never will.
            assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
            assert_eq!(drained, usize::from(!cancelled));
            assert!(shard.cancel(key).is_none(), "a key is decided once");
            assert_eq!(fire(&shard, 100), 0);
        });
    }

    #[test]
    fn loom_reset_vs_fire_runs_once() {
        model(|| {
            let shard = shard();
            let ran = Arc::new(AtomicUsize::new(0));
            let key = counting(&shard, 1, &ran);
            let firer = {
                let shard = shard.clone();
                spawn(move || fire(&shard, 1))
            };
            let moved = shard.reset(key, 5);
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
            let waiter = {
                let shard = shard.clone();
                spawn(move || {
                    if let Some(slot) = shard.register_waiter(key) {
                        slot.block();
                    }
                    // Released only once the timer left the queue.
                    assert!(shard.deadline(key).is_none());
                })
            };
            let canceller = {
                let shard = shard.clone();
                spawn(move || shard.cancel(key).is_some())
            };
            fire(&shard, 1);
            let cancelled = canceller.join().unwrap();
            waiter.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
        });
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
        let refused = shard.insert(1, Payload::Callback(Callback::new(|| {})));
        assert!(refused.is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}
