//! Panicking callbacks are caught and counted; every other callback still fires on time.
//! (Its own test binary: it replaces the process-wide panic hook to keep the output quiet.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tickwheel::service::TimerService;
use tickwheel::time::ManualClock;

const TIMERS: usize = 100_000;
const PANICKING: usize = 1_000;
const MAX_DELAY_MS: u64 = 1_000;

#[test]
fn a_thousand_panics_among_a_hundred_thousand_callbacks() {
    std::panic::set_hook(Box::new(|_| {}));
    let clock = ManualClock::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(4)
        .on_panic(move |payload| {
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
            h.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let start = clock.now();
    let on_time = Arc::new(AtomicUsize::new(0));
    let late_or_early = Arc::new(AtomicUsize::new(0));
    for i in 0..TIMERS {
        // Whole-ms delays 1..=1000: each fires exactly at its tick when the clock steps by 1 ms.
        let delay = Duration::from_millis(1 + (i as u64 * 7919) % MAX_DELAY_MS);
        let (clock2, ok, bad) = (clock.clone(), on_time.clone(), late_or_early.clone());
        service.schedule(delay, move || {
            if i % (TIMERS / PANICKING) == 0 {
                panic!("boom");
            }
            if clock2.now() == start + delay {
                ok.fetch_add(1, Ordering::SeqCst);
            } else {
                bad.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    for _ in 0..MAX_DELAY_MS {
        clock.advance(Duration::from_millis(1));
        service.settle();
    }
    let _ = std::panic::take_hook();
    assert_eq!(late_or_early.load(Ordering::SeqCst), 0);
    assert_eq!(on_time.load(Ordering::SeqCst), TIMERS - PANICKING);
    assert_eq!(handled.load(Ordering::SeqCst), PANICKING);
    let stats = service.stats();
    assert_eq!(stats.panicked, PANICKING as u64);
    assert_eq!(stats.fired, TIMERS as u64);
    assert_eq!(stats.pending, 0);
    // Stepped one tick at a time, every callback started at its tick: zero lateness.
    assert_eq!(stats.lateness.count(), TIMERS as u64);
    assert_eq!(stats.lateness.max(), Duration::ZERO);
    // The workers survived: the service still runs callbacks.
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    service.schedule(Duration::from_millis(1), move || {
        a.fetch_add(1, Ordering::SeqCst);
    });
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(after.load(Ordering::SeqCst), 1);
}
