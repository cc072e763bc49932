//! What the service-level test suites share: a service on virtual time, and the
//! move-the-clock-then-settle step that makes them deterministic.

// Each suite that includes this module uses only part of it.
#![allow(dead_code)]

use std::time::Duration;

use tickwheel::{ManualClock, TimerService};

/// A service on a fresh `ManualClock`, with one worker so callbacks run in deadline order.
pub fn manual() -> (ManualClock, TimerService) {
    manual_with_workers(1)
}

/// A service on a fresh `ManualClock` with `workers` workers (0: callbacks run on the thread
/// that drains them, also in deadline order).
pub fn manual_with_workers(workers: usize) -> (ManualClock, TimerService) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(workers)
        .build()
        .unwrap();
    (clock, service)
}

/// Moves the clock by `d` and waits until every due timer has fired.
pub fn advance(clock: &ManualClock, service: &TimerService, d: Duration) {
    clock.advance(d);
    service.settle();
}
