//! What the service-level test suites share: a service on virtual time, and the
//! move-the-clock-then-settle step that makes them deterministic.

use std::time::Duration;

use tickwheel::{ManualClock, TimerService};

/// A service on a fresh `ManualClock`, with one worker so callbacks run in deadline order.
pub fn manual() -> (ManualClock, TimerService) {
    let clock = ManualClock::new();
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(1)
        .build()
        .unwrap();
    (clock, service)
}

/// Moves the clock by `d` and waits until every due timer has fired.
pub fn advance(clock: &ManualClock, service: &TimerService, d: Duration) {
    clock.advance(d);
    service.settle();
}
