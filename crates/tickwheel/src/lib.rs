//! tickwheel: timers for servers, schedulers, games and simulations.
//!
//! The crate is built in layers; data flows one way, **clock → driver → queue → dispatch →
//! user code**:
//!
//! 1. [`queue`]: single-threaded timer queues over integer ticks — the hierarchical
//!    [`Wheel`] (default), the [`HashedWheel`] and the indexed [`Heap`], behind
//!    [`TimerQueue`]. `no_std + alloc`.
//! 2. `time`: clocks and `Instant`↔tick conversion (feature `std`).
//! 3. `service`: the `TimerService` thread (feature `std`) and `sys`: the Linux `timerfd`
//!    source (feature `timerfd`).
//! 4. user API: callbacks, futures and `Deadlines` (feature `std`).
//!
//! The repository's `docs/ARCHITECTURE.md` follows a timer through these layers and states
//! each layer's invariants; `docs/DESIGN-NOTES.md` explains the choices.
//!
//! ```
//! use tickwheel::{TimerQueue, Wheel};
//!
//! let mut wheel = Wheel::new();
//! let key = wheel.insert(1_000, "connection idle");
//! wheel.insert(5, "retransmit");
//! assert!(wheel.reset(key, 2_000));
//! let due: Vec<_> = wheel.drain_expired(1_500).map(|(_, what)| what).collect();
//! assert_eq!(due, ["retransmit"]);
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;

#[cfg(feature = "cron")]
pub mod cron;
#[cfg(feature = "std")]
pub mod deadlines;
#[cfg(feature = "std")]
pub mod future;
#[cfg(feature = "std")]
mod on_service;
pub mod queue;
#[cfg(feature = "std")]
pub mod service;
#[cfg(feature = "std")]
pub(crate) mod sync;
#[cfg(feature = "std")]
pub mod sys;
#[cfg(feature = "std")]
pub mod time;

#[cfg(feature = "std")]
pub use deadlines::{Deadlines, Expired};
#[cfg(feature = "std")]
pub use future::{
    interval, interval_at, sleep, sleep_until, timeout, timeout_at, Elapsed, FutureExt, Interval,
    MissedTickBehavior, Sleep, Timeout,
};
pub use queue::{
    DrainExpired, HashedWheel, Heap, IdOutOfRange, IdWheel, SlimWheel, TimerKey, TimerQueue, Wheel,
};
#[cfg(feature = "std")]
pub use service::{Recurrence, RecurringHandle, TimerHandle, TimerService};
#[cfg(all(target_os = "linux", feature = "timerfd"))]
pub use sys::TimerFd;
#[cfg(feature = "std")]
pub use time::{BootClock, Clock, ManualClock, ManualWallClock, MonotonicClock, SystemClock};

/// The README's code blocks, compiled and run by `cargo test --doc`, so they cannot drift
/// from the code.
#[cfg(all(doctest, target_os = "linux", feature = "timerfd", feature = "cron"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
