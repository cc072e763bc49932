//! How much of a schedule is first-touching memory: 10^6 `schedule_at` calls on a fresh
//! service (cold, as in W4), and on a service that first scheduled and cancelled as many
//! (warm: the slab and slot vectors already have their memory), each with and without an
//! `Instant::now()` per timer (DESIGN-NOTES, "Why is W4's schedule rate short of 15 M/s?"). Delays are 0..=1000 s, so nothing fires meanwhile. The
//! closure captures an `Arc` and an id, as W4's does.
//!
//! `cargo run --release -p tickwheel --example cold_schedule [-- N]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::TimerService;

/// Schedules one timer per delay and returns ns per schedule.
fn schedule_all(
    service: &TimerService,
    log: &Arc<Vec<AtomicU64>>,
    delays: &[u64],
    clock: bool,
) -> f64 {
    let start = Instant::now();
    for (id, &delay) in delays.iter().enumerate() {
        let now = if clock { Instant::now() } else { start };
        let log = Arc::clone(log);
        let _handle = service.schedule_at(now + Duration::from_secs(delay), move || {
            log[id].store(1, Ordering::Relaxed);
        });
    }
    start.elapsed().as_nanos() as f64 / delays.len() as f64
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // SplitMix64, seeded: the same delays every run.
    let mut state = 42u64;
    let delays: Vec<u64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % 1001
        })
        .collect();
    let log: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    for clock in [true, false] {
        let cold = schedule_all(
            &TimerService::new().expect("start a service"),
            &log,
            &delays,
            clock,
        );
        let service = TimerService::new().expect("start a service");
        // Grow the service's memory first: as many timers scheduled and cancelled, untimed.
        let handles: Vec<_> = delays
            .iter()
            .map(|&d| service.schedule(Duration::from_secs(10 + d), || {}))
            .collect();
        handles
            .iter()
            .for_each(|h| assert!(h.cancel(), "none is due within 10 s"));
        let warm = schedule_all(&service, &log, &delays, clock);
        println!(
            "clock read per timer: {clock:5}  cold {cold:6.1} ns  warm {warm:6.1} ns a schedule"
        );
    }
}
