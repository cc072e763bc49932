//! Measures the longest single `poll_expired` of a [`Wheel`] driven tick by tick: the pause
//! a driver (the timer thread of a service) sees at the worst tick.
//!
//! A classic hierarchical wheel cascades a whole level-1 slot when the clock enters it: here ~64
//! 000 timers at once every 64 ticks (milliseconds in one poll). tickwheel's wheel moves each slot
//! down in paced steps during the rotation before it, so no poll carries that burst; the ticks
//! where a classic wheel would cascade are printed to show it.
//!
//! ```text
//! cargo run --release -p tickwheel-lab --example cascade_pause -- [N]
//! ```
//!
//! N timers (default 10^6) with deadlines uniform in 0..=1000 ticks, then one poll a tick.

use std::time::{Duration, Instant};

use tickwheel::{TimerQueue, Wheel};
use tickwheel_lab::SplitMix64;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut rng = SplitMix64::new(7);
    let mut wheel: Wheel<u64> = Wheel::new();
    for i in 0..n {
        wheel.insert(rng.in_range(0..=1000), i);
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
            println!(
                "tick {tick:>4}: {took:>10.2?} (a classic wheel cascades a level-1 slot here)"
            );
        }
    }
    println!("{fired} timers fired; longest poll {worst:.2?} at tick {worst_tick}; all polls {total:.2?}");
}
