//! [`Deadlines`]: per-id timeouts with exact `finish`, and an [`Expired`] receiver of the ids
//! whose timeout passed — "start a timer when work begins, stop it when the work finishes in
//! time, otherwise send a timeout message to the system".
//!
//! ```
//! use std::time::Duration;
//! use tickwheel::{ManualClock, TimerService};
//!
//! let clock = ManualClock::new();
//! let service = TimerService::builder().clock(clock.clone()).build().unwrap();
//! let (deadlines, mut expired) = service.deadlines::<u32>();
//! deadlines.start(1, Duration::from_millis(100));
//! deadlines.start(2, Duration::from_millis(100));
//! assert!(deadlines.finish(&1)); // request 1 answered in time: no message, ever
//! clock.advance(Duration::from_millis(100));
//! service.settle();
//! assert_eq!(expired.try_recv(), Ok(2)); // request 2 timed out
//! assert!(expired.try_recv().is_err());
//! ```
//!
//! # Decisions
//!
//! * `start` of an id that is already live **replaces** its timeout (no message for the old
//!   one) and returns `false`; `true` when the id was not live.
//! * `restart` moves a live id's timeout and returns `true`; for an id that is not live
//!   (finished, expired, never started) it does nothing and returns `false` — an expired id is
//!   not resurrected after its message was sent.
//! * `finish` returns `true` exactly when no message was or will be sent for the id's current
//!   `start`. A message is sent exactly when `finish` did not win.
//! * Ids are `K: Eq + Hash + Clone + Send + 'static`: one clone is kept in the table, one
//!   travels with the timer and becomes the message.
//! * [`Expired`] is a single receiver with blocking [`recv`](Expired::recv),
//!   [`try_recv`](Expired::try_recv), [`recv_timeout`](Expired::recv_timeout) (std's `mpsc`
//!   error types), and async [`next`](Expired::next) / [`poll_recv`](Expired::poll_recv).
//!   Messages are unbounded; once the receiver is dropped, expired ids are dropped instead.
//! * Dropping the [`Deadlines`] cancels every live timeout; the receiver then drains what was
//!   already sent and reports disconnection.
//! * If the service shuts down, live timeouts are discarded: they never send, and `finish`
//!   still returns `true` for them (no message was or will be sent).
//!
//! # Ground rules (exactness)
//!
//! One mutex guards the table (`id → (generation, timer handle)`), the message queue and the
//! receiver's waker. Every `start` gets a fresh generation, carried by its timer. The expiry
//! (on the timer thread) removes the id from the table **only if** it is still there with the
//! same generation, and queues the message under the same lock; `finish` removes the id under
//! that lock. So exactly one of them wins, and an old timer can never remove a newer `start`.
//! Timers are scheduled while the lock is held, so an already-due expiry cannot run before its
//! id is in the table. Lock order: this mutex, then a service shard (the timer thread takes
//! this mutex holding no shard lock). No user code runs under the lock except `K`'s `Hash`,
//! `Eq` and `Clone`.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::hash::Hash;
use std::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};
// Trait objects use std's `Arc`/`Weak` (loom's cannot coerce to `dyn`).
use std::sync::{Arc as StdArc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::service::{Expire, Expiry, ServiceRef, TimerHandle, TimerService};
use crate::sync::{lock, wait, Condvar, Mutex};

/// A live id's entry: the generation of its current `start` and its timer.
struct Live {
    generation: u64,
    handle: TimerHandle,
}

struct State<K> {
    live: HashMap<K, Live>,
    next_generation: u64,
    expired: VecDeque<K>,
    waker: Option<Waker>,
    /// The `Deadlines` was dropped: no more messages will come.
    closed: bool,
    /// The `Expired` receiver was dropped: do not queue messages.
    unreceived: bool,
}

struct Inner<K> {
    state: Mutex<State<K>>,
    /// Signals blocked `recv` callers.
    cond: Condvar,
}

/// The timer of one `start`: on expiry, sends `id` if `generation` is still live.
struct Timer<K> {
    inner: Weak<Inner<K>>,
    /// Taken by the expiry (a `Mutex` so the target is `Sync` for any `K: Send`).
    id: Mutex<Option<K>>,
    generation: u64,
}

impl<K: Eq + Hash + Send + 'static> Expire for Timer<K> {
    fn expire(&self, how: Expiry) {
        // Discarded at shutdown: never sends, the id stays live (see "Decisions").
        if how == Expiry::Discarded {
            return;
        }
        let Some(inner) = self.inner.upgrade() else {
            return; // The `Deadlines` is gone.
        };
        let Some(id) = lock(&self.id).take() else {
            return;
        };
        let mut st = lock(&inner.state);
        match st.live.get(&id) {
            Some(live) if live.generation == self.generation => {}
            _ => return, // Finished, or replaced by a newer start: no message.
        }
        let live = st.live.remove(&id);
        if !st.unreceived {
            st.expired.push_back(id);
        }
        let waker = st.waker.take();
        drop(st);
        inner.cond.notify_one();
        drop(live);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Per-id timeouts: `start`, `finish` (exact), `restart`; expired ids go to an [`Expired`]
/// receiver. `Send + Sync`: share it (e.g. in an `Arc`) among the threads that start and
/// finish work. See the [module documentation](self) for the decisions and the guarantees.
pub struct Deadlines<K> {
    inner: StdArc<Inner<K>>,
    service: ServiceRef,
}

/// The receiver of the ids whose timeout expired, in expiry order. Created with its
/// [`Deadlines`].
pub struct Expired<K> {
    inner: StdArc<Inner<K>>,
}

impl<K> Deadlines<K>
where
    K: Eq + Hash + Clone + Send + 'static,
{
    /// A table on the default service, and its receiver.
    pub fn new() -> (Deadlines<K>, Expired<K>) {
        Deadlines::on(TimerService::default_service().static_ref())
    }

    /// A table on `service`, and its receiver.
    pub(crate) fn on(service: ServiceRef) -> (Deadlines<K>, Expired<K>) {
        let inner = StdArc::new(Inner {
            state: Mutex::new(State {
                live: HashMap::new(),
                next_generation: 0,
                expired: VecDeque::new(),
                waker: None,
                closed: false,
                unreceived: false,
            }),
            cond: Condvar::new(),
        });
        let expired = Expired {
            inner: inner.clone(),
        };
        (Deadlines { inner, service }, expired)
    }

    /// Starts a timeout of `timeout` for `id` (rounded up to the service's tick: never early;
    /// `Duration::MAX`: never). If `id` was already live its previous timeout is replaced
    /// and sends nothing; returns `true` when `id` was not live.
    pub fn start(&self, id: K, timeout: Duration) -> bool {
        let tick = self.service.ticks().delay_tick(self.service.now(), timeout);
        let mut st = lock(&self.inner.state);
        let live = self.arm(&mut st, id.clone(), tick);
        let old = st.live.insert(id, live);
        drop(st);
        match old {
            Some(old) => {
                old.handle.cancel();
                false
            }
            None => true,
        }
    }

    /// The work of `id` completed: removes its timeout. Returns `true` exactly when no
    /// message was or will be sent for its current `start`; `false` if it already expired (or
    /// was never started, or already finished).
    pub fn finish<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let removed = lock(&self.inner.state).live.remove(id);
        match removed {
            Some(live) => {
                live.handle.cancel(); // Outside the lock; a lost race is fine: not live.
                true
            }
            None => false,
        }
    }

    /// Moves the timeout of a live `id` to `timeout` from now; `true` when it was live (no
    /// message will be sent for the old deadline). `false`, and nothing changes, if `id` is
    /// not live.
    pub fn restart(&self, id: &K, timeout: Duration) -> bool {
        let tick = self.service.ticks().delay_tick(self.service.now(), timeout);
        let mut st = lock(&self.inner.state);
        let Some(live) = st.live.get(id) else {
            return false;
        };
        if live.handle.reset_tick(tick) {
            return true; // Still queued: moved in place, same generation.
        }
        // Its timer left the queue and its expiry waits for this lock: a new generation
        // makes that expiry a no-op.
        let fresh = self.arm(&mut st, id.clone(), tick);
        st.live.insert(id.clone(), fresh);
        true
    }

    /// Whether `id` has a live timeout (started, not finished, not expired).
    pub fn is_live<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        lock(&self.inner.state).live.contains_key(id)
    }

    /// How many ids have a live timeout.
    pub fn len(&self) -> usize {
        lock(&self.inner.state).live.len()
    }

    /// Whether no id has a live timeout.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Schedules the timer of a new generation for `id` at `tick`, under the table lock.
    fn arm(&self, st: &mut State<K>, id: K, tick: u64) -> Live {
        st.next_generation += 1;
        let generation = st.next_generation;
        let timer = StdArc::new(Timer {
            inner: StdArc::downgrade(&self.inner),
            id: Mutex::new(Some(id)),
            generation,
        });
        Live {
            generation,
            handle: self.service.schedule_notify(tick, timer),
        }
    }
}

impl<K> Drop for Deadlines<K> {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.state);
        st.closed = true;
        let live = std::mem::take(&mut st.live);
        let waker = st.waker.take();
        drop(st);
        self.inner.cond.notify_all();
        for (_, entry) in live {
            entry.handle.cancel();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<K> Expired<K> {
    /// The next expired id, without blocking.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when none is queued; [`TryRecvError::Disconnected`] when none
    /// is queued and the [`Deadlines`] was dropped.
    pub fn try_recv(&mut self) -> Result<K, TryRecvError> {
        let mut st = lock(&self.inner.state);
        match st.expired.pop_front() {
            Some(id) => Ok(id),
            None if st.closed => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// The next expired id, blocking the thread until one expires.
    ///
    /// # Errors
    ///
    /// [`RecvError`] when none is queued and the [`Deadlines`] was dropped.
    pub fn recv(&mut self) -> Result<K, RecvError> {
        let mut st = lock(&self.inner.state);
        loop {
            if let Some(id) = st.expired.pop_front() {
                return Ok(id);
            }
            if st.closed {
                return Err(RecvError);
            }
            st = wait(&self.inner.cond, st);
        }
    }

    /// Like [`recv`](Self::recv), giving up after `timeout` of **real** time (a thread
    /// wait, not the service's clock).
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] when nothing expired in time,
    /// [`RecvTimeoutError::Disconnected`] when the [`Deadlines`] was dropped.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<K, RecvTimeoutError> {
        let give_up = Instant::now().checked_add(timeout);
        let mut st = lock(&self.inner.state);
        loop {
            if let Some(id) = st.expired.pop_front() {
                return Ok(id);
            }
            if st.closed {
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = match give_up {
                None => Duration::MAX, // Practically forever; checked below.
                Some(at) => at.saturating_duration_since(Instant::now()),
            };
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            st = wait_timeout(&self.inner.cond, st, left);
        }
    }

    /// Polls for the next expired id: `Ready(None)` once the [`Deadlines`] was dropped and
    /// everything was received (a `Stream`'s `poll_next`).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<K>> {
        let mut st = lock(&self.inner.state);
        if let Some(id) = st.expired.pop_front() {
            return Poll::Ready(Some(id));
        }
        if st.closed {
            return Poll::Ready(None);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The next expired id, asynchronously; `None` once the [`Deadlines`] was dropped and
    /// everything was received.
    pub async fn next(&mut self) -> Option<K> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }
}

/// `Condvar::wait_timeout`, recovering a poisoned guard (see [`crate::sync`]).
#[cfg(not(loom))]
fn wait_timeout<'a, T>(
    cond: &Condvar,
    guard: crate::sync::MutexGuard<'a, T>,
    timeout: Duration,
) -> crate::sync::MutexGuard<'a, T> {
    match cond.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(poisoned) => poisoned.into_inner().0,
    }
}

/// Under loom there is no timed wait: wait for a signal (models never rely on timeouts).
#[cfg(loom)]
fn wait_timeout<'a, T>(
    cond: &Condvar,
    guard: crate::sync::MutexGuard<'a, T>,
    _timeout: Duration,
) -> crate::sync::MutexGuard<'a, T> {
    wait(cond, guard)
}

impl<K> Drop for Expired<K> {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.state);
        st.unreceived = true;
        let dropped = std::mem::take(&mut st.expired);
        drop(st);
        drop(dropped); // `K`'s drops outside the lock.
    }
}

impl<K> fmt::Debug for Deadlines<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadlines").finish_non_exhaustive()
    }
}

impl<K> fmt::Debug for Expired<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expired").finish_non_exhaustive()
    }
}
