//! What a `Wheel<u32>` holds in memory a pending timer, by `Wheel::allocated_bytes`, on the
//! W1 and W3 inputs of `tickwheel bench` (the workloads are defined in `docs/ARCHITECTURE.md`):
//!
//! * fresh: N timers inserted (W1);
//! * reset: N timers inserted, then W3's N resets of random timers to new deadlines (stale
//!   items awaiting compaction);
//! * cancelled: after cancelling 90 % of the fresh timers in random order (bytes a *live* timer),
//!   then after `shrink_to_fit`.
//!
//! `cargo run --release -p tickwheel-lab --example wheel_bytes [-- N[,N…]]` (default
//! `10000,100000,1000000`).

use tickwheel::{TimerQueue, Wheel};
use tickwheel_lab::workloads;

fn per(bytes: usize, timers: usize) -> f64 {
    bytes as f64 / timers as f64
}

fn main() {
    let ns: Vec<usize> = std::env::args()
        .nth(1)
        .map(|list| {
            list.split(',')
                .map(|n| n.parse().expect("N is a count of timers"))
                .collect()
        })
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    println!("Wheel<u32>, bytes a pending timer (allocated_bytes / pending)");
    println!(
        "{:>9} {:>8} {:>8} {:>10} {:>10}",
        "N", "fresh", "reset", "cancelled", "shrunk"
    );
    for n in ns {
        let input = workloads::w1(1, n);
        let mut wheel: Wheel<u32> = Wheel::new();
        let keys: Vec<_> = (0u32..)
            .zip(&input.deadlines)
            .map(|(id, &deadline)| wheel.insert(deadline, id))
            .collect();
        let fresh = per(wheel.allocated_bytes(), wheel.len());

        let w3 = workloads::w3(1, n);
        let mut resets = Wheel::new();
        let reset_keys: Vec<_> = (0u32..)
            .zip(&w3.deadlines)
            .map(|(id, &deadline)| resets.insert(deadline, id))
            .collect();
        for &(id, deadline) in &w3.resets {
            assert!(resets.reset(reset_keys[id as usize], deadline));
        }
        let reset = per(resets.allocated_bytes(), resets.len());

        let cancel = n - n / 10;
        for &id in &input.cancel_order[..cancel] {
            assert!(wheel.remove(keys[id as usize]).is_some());
        }
        let cancelled = per(wheel.allocated_bytes(), wheel.len());
        wheel.shrink_to_fit();
        let shrunk = per(wheel.allocated_bytes(), wheel.len());
        println!("{n:>9} {fresh:>8.1} {reset:>8.1} {cancelled:>10.1} {shrunk:>10.1}");
    }
}
