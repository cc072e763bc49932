//! Measures the longest single `poll_expired` of a [`Wheel`] driven tick by tick: the pause
//! a driver sees when a whole higher-level slot cascades at once (the known cause of the
//! service's W4 p99 lateness on the wheel; see the README's performance notes).
//!
//! ```text
//! cargo run --release -p tickwheel --example cascade_pause -- [N]
//! ```
//!
//! N timers (default 10^6) with deadlines uniform in 0..=1000 ticks, then one poll a tick.

use std::time::{Duration, Instant};

use tickwheel::{TimerQueue, Wheel};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut seed = 7u64;
    let mut wheel: Wheel<u64> = Wheel::new();
    for i in 0..n {
        wheel.insert(splitmix(&mut seed) % 1001, i);
    }
    let (mut worst, mut worst_tick, mut total) = (Duration::ZERO, 0, Duration::ZERO);
    let mut fired = 0u64;
    for tick in 1..=1001 {
        let start = Instant::now();
        while wheel.poll_expired(tick).is_some() {
            fired += 1;
        }
        let took = start.elapsed();
        total += took;
        if took > worst {
            (worst, worst_tick) = (took, tick);
        }
        if tick % 64 == 0 && tick <= 256 {
            println!("tick {tick:>4}: {took:>10.2?} (a level-1 slot cascades here)");
        }
    }
    println!("{fired} timers fired; longest poll {worst:.2?} at tick {worst_tick}; all polls {total:.2?}");
}

/// SplitMix64.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
