//! How late a timed sleep ends on this machine, and what spinning the last stretch buys:
//! the measurement behind `Builder::busy_wait` (see `docs/DESIGN-NOTES.md`).
//!
//! ```text
//! cargo run --release -p tickwheel-lab --example sleep_overshoot -- --sleeps 1000 --spin-us 80
//! ```
//!
//! Like the service's timer thread it first sets its timer slack to 1 ns (Linux). Then it
//! sleeps `--sleeps` times for 1 ms with `park_timeout`, and as many times for 1 ms minus
//! `--spin-us` followed by a spin to the 1 ms mark, and prints how late each kind ended.

use std::time::{Duration, Instant};

fn main() {
    let mut sleeps = 1000;
    let mut spin = Duration::from_micros(80);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value: u64 = match args.next().map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => return eprintln!("usage: sleep_overshoot [--sleeps N] [--spin-us US]"),
        };
        match flag.as_str() {
            "--sleeps" => sleeps = value.max(1) as usize,
            "--spin-us" => spin = Duration::from_micros(value.min(999)),
            _ => return eprintln!("usage: sleep_overshoot [--sleeps N] [--spin-us US]"),
        }
    }
    #[cfg(target_os = "linux")]
    if rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).is_err() {
        eprintln!("could not set the timer slack; sleeps keep the default (50 µs)");
    }
    let period = Duration::from_millis(1);
    let mut plain = Vec::with_capacity(sleeps);
    let mut spun = Vec::with_capacity(sleeps);
    for _ in 0..sleeps {
        let at = Instant::now() + period;
        std::thread::park_timeout(at.saturating_duration_since(Instant::now()));
        plain.push(Instant::now().saturating_duration_since(at));

        let at = Instant::now() + period;
        std::thread::park_timeout(at.saturating_duration_since(Instant::now() + spin));
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        spun.push(Instant::now().saturating_duration_since(at));
    }
    report("park_timeout(1 ms)", &mut plain);
    report(&format!("park, then spin the last {spin:?}"), &mut spun);
}

fn report(what: &str, late: &mut [Duration]) {
    late.sort();
    let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize].as_micros();
    println!(
        "{what}: ended late by p50 {} µs, p90 {} µs, p99 {} µs, max {} µs ({} sleeps)",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        late.len()
    );
}
