//! What the queue test suites share: the flavors under test and the seeded generator.
//!
//! A [`Flavor`] names one queue configuration and builds it for any value type, so a test
//! written once as `fn case<F: Flavor>()` runs against every queue.
#![allow(dead_code)]

use std::collections::HashMap;

use tickwheel::{HashedWheel, Heap, SlimWheel, TimerKey, TimerQueue, Wheel};

/// One queue configuration under test.
pub trait Flavor {
    /// The queue type for values of type `T`.
    type Q<T>: TimerQueue<T>;

    /// An empty queue at tick 0.
    fn make<T>() -> Self::Q<T>;

    /// An empty queue whose clock starts at `start`.
    fn make_at<T>(start: u64) -> Self::Q<T>;
}

/// Defines a [`Flavor`] from a queue type and its constructors.
macro_rules! flavor {
    ($(#[$doc:meta])* $name:ident, $q:ident, |$start:ident| $at:expr, $new:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl Flavor for $name {
            type Q<T> = $q<T>;

            fn make<T>() -> $q<T> {
                $new
            }

            fn make_at<T>($start: u64) -> $q<T> {
                $at
            }
        }
    };
}

flavor!(
    /// The hierarchical wheel.
    WheelFlavor, Wheel, |start| Wheel::with_start(start), Wheel::new()
);
flavor!(
    /// The indexed 4-ary heap.
    HeapFlavor, Heap, |start| Heap::with_start(start), Heap::new()
);
flavor!(
    /// The hashed wheel with its default 512 slots.
    Hashed512, HashedWheel, |start| HashedWheel::with_start(start), HashedWheel::new()
);
flavor!(
    /// A hashed wheel of 8 slots: most timers are rounds away.
    Hashed8, HashedWheel,
    |start| HashedWheel::with_slots_and_start(8, start),
    HashedWheel::with_slots(8)
);
flavor!(
    /// A hashed wheel of one slot: every timer shares one list.
    Hashed1, HashedWheel,
    |start| HashedWheel::with_slots_and_start(1, start),
    HashedWheel::with_slots(1)
);

flavor!(
    /// The slim wheel behind [`Rekeyed`], so that every case written for a key that survives
    /// a reset runs on it too.
    SlimFlavor, Rekeyed,
    |start| Rekeyed::new(SlimWheel::with_start(start)),
    Rekeyed::new(SlimWheel::new())
);

/// A [`SlimWheel`] as a [`TimerQueue`]: the caller keeps the key `insert` gave, and this
/// adapter keeps the key the wheel's last reset gave for it.
///
/// A key the adapter does not know (never reset, or whose timer is gone) goes to the wheel
/// as it is, so a stale key reaches the wheel itself: the cases of stale keys test the
/// wheel, not the maps. What differs in the slim wheel's contract (the new key a reset
/// returns, the old one stale) has cases of its own in `conformance.rs`.
pub struct Rekeyed<T> {
    pub wheel: SlimWheel<T>,
    /// The key `insert` gave → the wheel's current key, for timers reset at least once.
    current: HashMap<TimerKey, TimerKey>,
    /// The reverse: the wheel's current key → the key `insert` gave.
    first: HashMap<TimerKey, TimerKey>,
}

impl<T> Rekeyed<T> {
    pub fn new(wheel: SlimWheel<T>) -> Rekeyed<T> {
        Rekeyed {
            wheel,
            current: HashMap::new(),
            first: HashMap::new(),
        }
    }

    pub fn allocated_bytes(&self) -> usize {
        self.wheel.allocated_bytes()
    }

    /// The wheel's key for the timer the caller calls `key`.
    fn inner(&self, key: TimerKey) -> TimerKey {
        self.current.get(&key).copied().unwrap_or(key)
    }

    /// The timer the wheel calls `inner` is gone.
    fn forget(&mut self, inner: TimerKey) -> TimerKey {
        let outer = self.first.remove(&inner).unwrap_or(inner);
        self.current.remove(&outer);
        outer
    }
}

impl<T> TimerQueue<T> for Rekeyed<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        self.wheel.insert(deadline, value)
    }

    fn remove(&mut self, key: TimerKey) -> Option<T> {
        let inner = self.inner(key);
        let value = self.wheel.remove(inner)?;
        self.forget(inner);
        Some(value)
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let inner = self.inner(key);
        let Some(new) = self.wheel.reset(inner, deadline) else {
            return false;
        };
        assert_ne!(new, inner, "a reset hands out a new key");
        let outer = self.forget(inner);
        self.current.insert(outer, new);
        self.first.insert(new, outer);
        true
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.wheel.deadline(self.inner(key))
    }

    fn clear(&mut self) {
        self.wheel.clear();
        self.first.clear();
        self.current.clear();
    }

    fn get(&self, key: TimerKey) -> Option<&T> {
        self.wheel.get(self.inner(key))
    }

    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let inner = self.inner(key);
        self.wheel.get_mut(inner)
    }

    fn len(&self) -> usize {
        self.wheel.len()
    }

    fn now(&self) -> u64 {
        self.wheel.now()
    }

    fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_expiration()
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        let (inner, value) = self.wheel.poll_expired(now)?;
        Some((self.forget(inner), value))
    }

    fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
    }

    fn check_invariants(&self) {
        self.wheel.check_invariants();
        assert!(self.current.len() <= self.wheel.len() && self.first.len() == self.current.len());
    }
}

/// The repository's one seeded generator.
#[allow(unused_imports)] // not every suite that includes this module draws random input
pub use tickwheel_lab::SplitMix64;
