//! Time (layer 2): clocks and the conversion between [`Instant`]s and integer ticks.
//!
//! Every clock read of the `std` layers goes through a [`Clock`], so a [`ManualClock`] (virtual
//! time) drives the whole service deterministically in tests, simulations and games.
//!
//! # Ticks and rounding
//!
//! The queues count in ticks. [`Ticks`] maps an instant to a tick relative to an origin (the
//! instant a service started) and a resolution (1 µs to 1 s):
//!
//! * a **deadline** rounds **up**: `deadline_tick(t) = ceil((t - origin) / resolution)`, so the
//!   tick's start is never before `t` and a timer never fires early. A delay shorter than a
//!   tick therefore waits until the *next* tick boundary, never zero ticks (unless the delay is
//!   zero and the clock sits exactly on a boundary);
//! * the **current** tick rounds **down**: `now_tick(t) = floor((t - origin) / resolution)`,
//!   so a tick is only "reached" once its whole start instant has passed.
//!
//! A timer at tick `d` fires once `now_tick >= d`, that is once the clock reads at least
//! `origin + d * resolution >= deadline`.
//!
//! # "Never"
//!
//! [`NEVER`] (`u64::MAX`) is the tick of `Duration::MAX`, of instants past the tick range and
//! of deadlines whose `Instant` arithmetic would overflow. The current tick saturates at
//! [`MAX_NOW_TICK`] = `NEVER - 1`, so a "never" timer stays pending (and cancellable) forever
//! and nothing overflows, whatever the clock reads.

mod boot;
mod clock;
mod missed;
mod ticks;
mod wall;

pub use boot::BootClock;
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use missed::MissedTickBehavior;
pub use ticks::{Ticks, MAX_NOW_TICK, MAX_RESOLUTION, MIN_RESOLUTION, NEVER};
pub use wall::{ManualWallClock, SystemClock, WallClock, STEP_POLL, STEP_THRESHOLD};

#[cfg(doc)]
use std::time::Instant;
