//! Wheel-only lateness at the worker's pattern (absolute ms ticks, sleep until
//! next_expiration, drain), to separate the wheel's part of a worker's lateness from Redis's.
//!
//! `cargo run --release -p tickwheel-lab --example wheel_probe [-- TASKS PER_MS]`

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickwheel::{TimerQueue, Wheel};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn main() {
    let start = now_us() / 1000;
    let mut w = Wheel::with_start(start);
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let per_ms: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    for i in 0..n {
        let due = start + 500 + i / per_ms;
        w.insert(due, due);
    }
    let mut late = Vec::new();
    let mut wakes = 0;
    while !w.is_empty() {
        let next = w.next_expiration().unwrap();
        let t = now_us();
        if next * 1000 > t {
            std::thread::sleep(Duration::from_micros(next * 1000 - t));
        }
        wakes += 1;
        let now = now_us() / 1000;
        while let Some((_, due)) = w.poll_expired(now) {
            late.push(now_us() as i64 - due as i64 * 1000);
        }
    }
    late.sort_unstable();
    let q = |f: f64| late[((late.len() - 1) as f64 * f) as usize];
    println!(
        "wakes {wakes}; late us p50 {} p90 {} p99 {} max {}",
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0)
    );
}
