//! What the queue test suites share: the flavors under test and a seeded generator.
//!
//! A [`Flavor`] names one queue configuration and builds it for any value type, so a test
//! written once as `fn case<F: Flavor>()` runs against every queue.
#![allow(dead_code)]

use tickwheel::{HashedWheel, Heap, TimerQueue, Wheel};

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

/// SplitMix64 (Steele, Lea & Flood): a tiny seeded generator for deterministic inputs.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value uniform in `lo..=hi` (a negligible modulo bias is fine for tests).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next_u64() % span,
            None => self.next_u64(),
        }
    }
}
