//! How much of a schedule is first-touching memory: 10^6 `schedule_at` calls on a fresh
//! service (cold, as in W4), and on a service that first scheduled and cancelled as many
//! (warm: the slab and slot vectors already have their memory), each with and without an
//! `Instant::now()` per timer. "reused" is warm with the cancels in a seeded random order, as
//! timers leave a long-running service (they fire in deadline order): every schedule then
//! reuses an entry somewhere in the slab (DESIGN-NOTES, "Why is the free list a stack of
//! indices?") (DESIGN-NOTES, "Why is W4's schedule rate short of 15 M/s?"). Delays are 0..=1000 s, so nothing fires meanwhile. The
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
    let delays: Vec<u64> = (0..n).map(|_| next(&mut state) % 1001).collect();
    let log: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    // A seeded shuffle of 0..n (Fisher–Yates on the same SplitMix64 stream).
    let mut shuffled: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        shuffled.swap(i, (next(&mut state) % (i as u64 + 1)) as usize);
    }
    let in_order: Vec<usize> = (0..n).collect();
    for clock in [true, false] {
        let cold = schedule_all(
            &TimerService::new().expect("start a service"),
            &log,
            &delays,
            clock,
        );
        let [warm, reused] = [&in_order, &shuffled].map(|cancel_order| {
            let service = TimerService::new().expect("start a service");
            // Grow the service's memory first: as many timers scheduled and cancelled, untimed.
            let handles: Vec<_> = delays
                .iter()
                .map(|&d| service.schedule(Duration::from_secs(10 + d), || {}))
                .collect();
            for &i in cancel_order {
                assert!(handles[i].cancel(), "none is due within 10 s");
            }
            schedule_all(&service, &log, &delays, clock)
        });
        println!(
            "clock read per timer: {clock:5}  cold {cold:6.1} ns  warm {warm:6.1} ns  \
             reused {reused:6.1} ns a schedule"
        );
    }
}

/// SplitMix64: the next value of the stream `state`.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
