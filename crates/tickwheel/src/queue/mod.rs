//! Single-threaded timer queues over integer ticks (layer 1).
//!
//! Three flavors implement one contract, [`TimerQueue`]:
//!
//! | flavor | design | insert / remove / reset | expire |
//! |---|---|---|---|
//! | [`Wheel`] (default) | hierarchical wheel, 64 slots a level, 11 levels (Varghese & Lauck scheme 7, Linux tv1..tv5, Kafka overflow wheels) | O(1) | O(1) amortized a timer (moved down at most once a level, in paced steps ahead of time) |
//! | [`HashedWheel`] | one level of slots with round counts (scheme 6, Netty, libco fixed) | O(1) | O(slot length) a visited slot |
//! | [`Heap`] | indexed 4-ary min-heap in libev's cache-line layout (asio `timer_queue`, libev) | O(log n) | O(log n) |
//!
//! A fourth form, [`SlimWheel`], is the `Wheel` with 8-byte records and one guarantee less:
//! its `reset` returns a **new key** (the old one is stale), so it is not a `TimerQueue`;
//! everything else below holds for it word for word. A fifth, [`IdWheel`], is the `SlimWheel`
//! with no key at all: the caller names each timer by its own dense `u32` id (one timer an
//! id; an insert on a pending id replaces it), and everything below but the keys holds for it
//! word for word.
//!
//! # Which to pick
//!
//! * [`Wheel`]: the default. A key stays valid across resets, so it can be shared or stored
//!   where it cannot be rewritten; behind the [`TimerQueue`] trait.
//! * [`SlimWheel`]: many timers (10^5 and up) cancelled or reset at random, by a caller that
//!   stores the key a reset returns (a connection keeps its idle timer's key in its own
//!   struct). A cancel or reset touches an 8-byte record where the `Wheel`'s is 12 bytes
//!   plus the value, and [`SlimWheel::cancel`] reads no value that has no drop glue: at a
//!   million timers that is the difference between missing in the last-level cache or not.
//!   Small values (a `u32` index, a plain struct) fit it best; a large value is cheaper
//!   boxed or kept in the caller's array, as in any queue.
//! * [`IdWheel`]: the same many timers, by a caller that already names them by a dense `u32`
//!   id (an index into its own table or slab, at most one timer an id). A cancel or reset
//!   finds its record from the id alone, so its cache miss overlaps the caller's own instead
//!   of waiting for a key to load: at 10^6 timers, `tickwheel bench` has it level with or
//!   ahead of the lazy `BinaryHeap` on random resets (W3) and churn (W5), where the keyed
//!   wheels trail it. Its memory follows the largest id used (20 bytes an id for a `u32`
//!   value, pending or idle), not the timers pending: pick the `SlimWheel` for sparse or
//!   unbounded ids.
//! * [`Heap`]: exact [`next_expiration`](TimerQueue::next_expiration), O(log n).
//! * [`HashedWheel`]: deadlines within a known horizon, one level of slots.
//!
//! `cargo run --release -p tickwheel-cli -- bench --workloads w1,w3,w5` measures the
//! choice on cancel, reset and churn beside the lazy `BinaryHeap`.
//!
//! No queue reads a clock, starts a thread or allocates per timer in steady state: timers live
//! in a slab with a free list and are linked by `u32` index. The queues build under
//! `no_std + alloc`.
//!
//! # The contract
//!
//! Every flavor behaves identically, operation by operation; the test suite checks each one
//! against a `BTreeMap` model and demands equal output.
//!
//! * **Effective deadline.** A timer inserted (or [reset](TimerQueue::reset)) at deadline `d`
//!   while the queue's clock is at [`now()`](TimerQueue::now) gets the *effective deadline*
//!   `max(d, now())`: a deadline in the past fires at the next poll, it is not rejected.
//!   [`deadline`](TimerQueue::deadline) reports the effective deadline.
//! * **Firing order.** Expired timers come out ordered by (effective deadline, insertion
//!   order); a reset counts as a new insertion.
//! * **Never early, never twice, never lost.** A timer comes out of
//!   [`poll_expired(t)`](TimerQueue::poll_expired) only if its effective deadline is `<= t`,
//!   exactly once, unless it was removed first.
//! * **Time only moves forward.** `poll_expired(t)` with `t < now()` returns `None` and changes
//!   nothing. While it returns timers, `now()` is the effective deadline of the timer it just
//!   returned; once it returns `None`, `now() == max(t, old now())`. Inserting from inside a
//!   drain is allowed and keeps the order above.
//! * **Any `u64` deadline** is accepted, `u64::MAX` included ("never in practice"; it is stored
//!   and fires only when polled at `u64::MAX`). No input panics.
//! * **Generational keys.** A [`TimerKey`] whose timer fired or was removed is stale forever:
//!   [`remove`](TimerQueue::remove), [`reset`](TimerQueue::reset) and
//!   [`deadline`](TimerQueue::deadline) return `None`/`false`/`None` for it and touch nothing,
//!   even after its storage is reused.
//! * **`next_expiration()`** is `Some` exactly when the queue is not empty, and is never later
//!   than the earliest effective deadline (the wheels may answer earlier: the start of the
//!   slot that holds it; polling there is cheap and then gives a later answer).

//!
//! # How the contract is checked
//!
//! `tests/conformance.rs` pins each rule down case by case for every flavor, memory bounds
//! after cancels and resets included; `tests/model.rs` runs random operation sequences
//! against a `BTreeMap` model (proptest) and, for long runs, a seeded stream:
//!
//! ```text
//! TICKWHEEL_MODEL_OPS=100000000 cargo test --release -p tickwheel --test model long_model_run -- --nocapture
//! ```
//!
//! checks 10^8 operations a queue (the `SlimWheel` included, through its own model driver
//! whose reset re-keys the model, and the `IdWheel`, through an id-named driver). `fuzz/`
//! (outside the workspace, nightly) drives each queue with arbitrary operations against the
//! same model: `cargo +nightly fuzz run wheel` (or `slim_wheel`, `id_wheel`, `hashed_wheel`,
//! `heap`).

pub(crate) mod free;
pub mod hashed;
pub mod heap;
pub mod id;
pub(crate) mod records;
pub(crate) mod slab;
pub mod slim;
pub mod wheel;

use core::fmt;
use core::marker::PhantomData;
use core::num::NonZeroU64;

pub use hashed::HashedWheel;
pub use heap::Heap;
pub use id::{IdOutOfRange, IdWheel};
pub use slim::SlimWheel;
pub use wheel::Wheel;

/// The handle of one timer in a [`TimerQueue`]: 8 bytes, `Copy`, generational.
///
/// A key names one insertion. Once its timer has fired or been removed the key is stale for
/// good: no later timer reuses it, even when the storage behind it is reused.
///
/// A key belongs to the queue that issued it. It carries no mark of that queue (8 bytes are
/// an index and a generation, as a `slab` key is), so a key handed to another queue is not
/// detected: it may name a timer of that queue. Keep each key with its queue.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey(NonZeroU64);

impl TimerKey {
    /// Builds a key from a slab index and a generation (`generation >= 1`).
    #[inline]
    pub(crate) fn new(index: u32, generation: u32) -> TimerKey {
        debug_assert!(generation != 0);
        let raw = (u64::from(generation) << 32) | u64::from(index);
        // `generation >= 1`, so the upper half is never zero; fall back to the
        // never-valid key rather than panic should a caller break that.
        TimerKey(NonZeroU64::new(raw).unwrap_or(NonZeroU64::MAX))
    }

    /// The slab index this key points at.
    #[inline]
    pub(crate) fn index(self) -> u32 {
        self.0.get() as u32
    }

    /// The generation this key was issued with.
    #[inline]
    pub(crate) fn generation(self) -> u32 {
        (self.0.get() >> 32) as u32
    }

    /// The key as a `u64`, for storing it where a key type cannot go (an atomic, an FFI
    /// field). [`from_raw`](TimerKey::from_raw) turns it back.
    ///
    /// ```
    /// use tickwheel::{TimerKey, TimerQueue, Wheel};
    ///
    /// let mut wheel = Wheel::new();
    /// let key = wheel.insert(10, "a");
    /// assert_eq!(TimerKey::from_raw(key.into_raw()), Some(key));
    /// ```
    #[inline]
    pub fn into_raw(self) -> u64 {
        self.0.get()
    }

    /// Rebuilds a key from [`into_raw`](TimerKey::into_raw); `None` for 0, which no key uses.
    #[inline]
    pub fn from_raw(raw: u64) -> Option<TimerKey> {
        NonZeroU64::new(raw).map(TimerKey)
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerKey({}v{})", self.index(), self.generation())
    }
}

/// A single-threaded queue of timers over integer ticks.
///
/// See the [module documentation](self) for the contract every implementation keeps. The
/// queue has no clock of its own: its time is the last tick passed to
/// [`poll_expired`](TimerQueue::poll_expired) (or the start tick it was built with).
///
/// ```
/// use tickwheel::{TimerQueue, Wheel};
///
/// let mut wheel = Wheel::new();
/// let a = wheel.insert(30, "a");
/// wheel.insert(10, "b");
/// wheel.insert(10, "c");
/// assert_eq!(wheel.remove(a), Some("a"));
///
/// let fired: Vec<_> = wheel.drain_expired(100).map(|(_, v)| v).collect();
/// assert_eq!(fired, ["b", "c"]);
/// assert_eq!(wheel.now(), 100);
/// ```
pub trait TimerQueue<T> {
    /// Adds a timer that fires at tick `deadline` (or at the next poll if `deadline <= now()`)
    /// and returns its key.
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey;

    /// Removes a pending timer and returns its value; `None` for a stale key.
    fn remove(&mut self, key: TimerKey) -> Option<T>;

    /// Moves a pending timer to a new deadline, as if removed and inserted again (it goes
    /// behind timers already due at the same tick). `false` for a stale key.
    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool;

    /// The effective deadline of a pending timer; `None` for a stale key.
    fn deadline(&self, key: TimerKey) -> Option<u64>;

    /// Removes every pending timer and drops its value. The clock stays where it is, and
    /// every key issued so far is stale from then on (no key is issued twice). O(timers +
    /// records): each timer leaves as [`remove`](Self::remove) would take it out.
    fn clear(&mut self);

    /// The value of a pending timer; `None` for a stale key.
    fn get(&self, key: TimerKey) -> Option<&T>;

    /// The value of a pending timer, to read or change in place; `None` for a stale key.
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T>;

    /// The number of pending timers.
    fn len(&self) -> usize;

    /// Whether no timer is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue's current tick.
    fn now(&self) -> u64;

    /// A tick no later than the earliest pending effective deadline; `None` when empty.
    fn next_expiration(&self) -> Option<u64>;

    /// Advances the queue towards tick `now` and returns the next timer due by then, in firing
    /// order; `None` once nothing more is due (and then [`now()`](TimerQueue::now) is `now`,
    /// unless `now` was behind it).
    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)>;

    /// Releases memory held for timers that are gone. Existing keys stay valid.
    fn shrink_to_fit(&mut self);

    /// Checks the queue's internal invariants and panics naming the first one broken. It may
    /// visit every timer: for tests, fuzzing and debugging, not for hot paths. The default
    /// checks nothing; the [`Wheel`] checks the five invariants its module docs state
    /// ([`Wheel::check_invariants`]).
    fn check_invariants(&self) {}

    /// Ticks from `now` until [`next_expiration`](TimerQueue::next_expiration): `Some(0)` if a
    /// timer is already due, `None` when the queue is empty. For loops that pass a timeout to
    /// `poll`/`epoll_wait` (the libco style).
    fn timeout_until_next(&self, now: u64) -> Option<u64> {
        self.next_expiration().map(|at| at.saturating_sub(now))
    }

    /// An iterator that calls [`poll_expired(now)`](TimerQueue::poll_expired) until it returns
    /// `None`. Dropping it early leaves the remaining timers queued.
    fn drain_expired(&mut self, now: u64) -> DrainExpired<'_, Self, T>
    where
        Self: Sized,
    {
        DrainExpired {
            queue: self,
            now,
            _value: PhantomData,
        }
    }
}

/// The iterator of [`TimerQueue::drain_expired`].
#[must_use = "iterators are lazy: nothing expires until the iterator is advanced"]
pub struct DrainExpired<'a, Q: ?Sized, T> {
    queue: &'a mut Q,
    now: u64,
    _value: PhantomData<fn() -> T>,
}

impl<Q: TimerQueue<T> + ?Sized, T> Iterator for DrainExpired<'_, Q, T> {
    type Item = (TimerKey, T);

    #[inline]
    fn next(&mut self) -> Option<(TimerKey, T)> {
        self.queue.poll_expired(self.now)
    }
}

impl<Q: ?Sized, T> fmt::Debug for DrainExpired<'_, Q, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainExpired")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}
