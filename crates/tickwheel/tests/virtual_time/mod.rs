//! What the service-level test suites share: a service on virtual time (a `ManualClock`, or a
//! `ManualWallClock` for calendars), and the move-the-clock-then-settle step that makes them
//! deterministic.

// Each suite that includes this module uses only part of it.
#![allow(dead_code)]

use std::time::Duration;

use tickwheel::service::Builder;
use tickwheel::{ManualClock, TimerService};

/// A service on a fresh `ManualClock`, with one worker so callbacks run in deadline order.
pub fn manual() -> (ManualClock, TimerService) {
    manual_with_workers(1)
}

/// A service on a fresh `ManualClock` with `workers` workers (0: callbacks run on the thread
/// that drains them, also in deadline order).
pub fn manual_with_workers(workers: usize) -> (ManualClock, TimerService) {
    manual_with(TimerService::builder().worker_threads(workers))
}

/// The service `builder` makes, on a fresh `ManualClock`, and that clock.
pub fn manual_with(builder: Builder) -> (ManualClock, TimerService) {
    let clock = ManualClock::new();
    let service = builder.clock(clock.clone()).build().unwrap();
    (clock, service)
}

/// Moves the clock by `d` and waits until every due timer has fired.
pub fn advance(clock: &ManualClock, service: &TimerService, d: Duration) {
    clock.advance(d);
    service.settle();
}

/// The wall-clock instant that RFC 3339 text such as `"2026-03-08T06:59:00Z"` names.
#[cfg(feature = "cron")]
pub fn wall(s: &str) -> std::time::SystemTime {
    std::time::SystemTime::from(s.parse::<tickwheel::cron::jiff::Timestamp>().unwrap())
}

/// A wall-clock instant as RFC 3339 text in UTC, the form [`wall`] reads.
#[cfg(feature = "cron")]
pub fn wall_text(t: std::time::SystemTime) -> String {
    tickwheel::cron::jiff::Timestamp::try_from(t)
        .unwrap()
        .to_string()
}

/// A service with one worker on a `ManualWallClock` that starts at [`wall`]`(start)`.
#[cfg(feature = "cron")]
pub fn manual_wall(start: &str) -> (tickwheel::time::ManualWallClock, TimerService) {
    let clock = tickwheel::time::ManualWallClock::starting_at(wall(start));
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(1)
        .build()
        .unwrap();
    (clock, service)
}
