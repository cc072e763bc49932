//! What the queue test suites share: the flavors under test and the seeded generator.
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

/// The repository's one seeded generator.
#[allow(unused_imports)] // not every suite that includes this module draws random input
pub use tickwheel_lab::SplitMix64;
