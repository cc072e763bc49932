//! Bad and extreme input to the public API: every probe either gets the documented behaviour
//! or a clear error — never a panic, a lost or doubled timer, or a silent clamp.

mod virtual_time;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel::cron::jiff::Timestamp;
use tickwheel::cron::{Cron, CronError};
use tickwheel::service::{Builder, Recurrence, TimerService};
use tickwheel::time::ManualWallClock;
use tickwheel::{HashedWheel, Heap, TimerKey, TimerQueue, Wheel};
use virtual_time::{advance, manual, manual_with};

const MS: Duration = Duration::from_millis(1);

/// Runs `f`, turning a panic into `Err(message)`.
fn no_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

fn counting(n: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let n = n.clone();
    move || {
        n.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs `f` on another thread and fails the test if it does not return within a real-time
/// watchdog (a hang detector, not a sleep the test relies on).
fn returns_promptly(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} hung"));
}

// ---------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------

/// A queue built at `start` near the end of the tick range accepts every deadline, gives
/// past ones the effective deadline `start`, and fires each once, in order, never early.
fn started_at_the_end_of_time<Q: TimerQueue<u64>>(make: impl Fn(u64) -> Q) {
    for start in [u64::MAX - 300, u64::MAX - 64, u64::MAX - 1, u64::MAX] {
        let mut q = make(start);
        assert_eq!(q.now(), start);
        let past = q.insert(0, 0);
        assert_eq!(q.deadline(past), Some(start), "past deadline -> now");
        let mut want = vec![(start, 0)];
        for (i, d) in [u64::MAX, u64::MAX - 1, start, u64::MAX - 65, u64::MAX - 200]
            .into_iter()
            .enumerate()
        {
            let k = q.insert(d, i as u64 + 1);
            assert_eq!(q.deadline(k), Some(d.max(start)));
            want.push((d.max(start), i as u64 + 1));
        }
        want.sort_by_key(|&(d, _)| d); // stable: insertion order within a deadline
        q.check_invariants();
        assert!(q.next_expiration().is_some_and(|t| t <= start));
        assert_eq!(q.poll_expired(start - 1).map(|(_, v)| v), None);
        let mut got = Vec::new();
        // Poll every tick from start to the end: each timer comes out at its own tick.
        let mut t = start;
        loop {
            while let Some((_, v)) = q.poll_expired(t) {
                got.push((t, v));
            }
            q.check_invariants();
            if t == u64::MAX {
                break;
            }
            t += 1;
        }
        assert_eq!(got, want, "start {start}");
        assert!(q.is_empty());
        assert_eq!(q.now(), u64::MAX);
        // At the end of time every insert is due at once.
        q.insert(3, 99);
        assert_eq!(q.poll_expired(u64::MAX).map(|(_, v)| v), Some(99));
    }
}

#[test]
fn wheel_started_at_the_end_of_time() {
    started_at_the_end_of_time(Wheel::with_start);
}

#[test]
fn heap_started_at_the_end_of_time() {
    started_at_the_end_of_time(Heap::with_start);
}

#[test]
fn hashed_wheel_started_at_the_end_of_time() {
    started_at_the_end_of_time(HashedWheel::with_start);
    started_at_the_end_of_time(|s| HashedWheel::with_slots_and_start(1, s));
    started_at_the_end_of_time(|s| HashedWheel::with_slots_and_start(usize::MAX, s));
}

/// Keys forged with `TimerKey::from_raw` (out-of-range index, generation 0 or huge) are
/// stale: every operation is a no-op, nothing panics, the live timers are untouched.
fn forged_keys_are_stale<Q: TimerQueue<u32>>(mut q: Q) {
    let live = q.insert(10, 1);
    let raw = live.into_raw();
    let forged = [
        1,
        u64::MAX,
        u32::MAX as u64,
        1 << 32,
        (1 << 32) | 7,
        raw & 0xFFFF_FFFF,                                 // generation 0
        raw + (1 << 32),                                   // a later generation
        raw | 0xFFFF_FFFF,                                 // the largest index
        (u64::from(u32::MAX) << 32) | (raw & 0xFFFF_FFFF), // last generation
    ];
    for raw in forged {
        let Some(key) = TimerKey::from_raw(raw) else {
            continue;
        };
        if key == live {
            continue;
        }
        assert_eq!(q.remove(key), None, "{key:?}");
        assert!(!q.reset(key, 0), "{key:?}");
        assert_eq!(q.deadline(key), None, "{key:?}");
        assert!(q.get_mut(key).is_none(), "{key:?}");
    }
    assert_eq!(TimerKey::from_raw(0), None);
    assert_eq!(q.len(), 1);
    assert_eq!(q.deadline(live), Some(10));
    assert_eq!(q.drain_expired(10).map(|(_, v)| v).collect::<Vec<_>>(), [1]);
}

#[test]
fn forged_keys_are_stale_in_every_queue() {
    forged_keys_are_stale(Wheel::new());
    forged_keys_are_stale(Heap::new());
    forged_keys_are_stale(HashedWheel::new());
}

// ---------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------

#[test]
fn builder_rejects_out_of_range_resolutions_with_a_clear_error() {
    for bad in [
        Duration::ZERO,
        Duration::from_nanos(999),
        Duration::from_nanos(1_000_000_001),
        Duration::from_secs(60),
        Duration::MAX,
    ] {
        let err = TimerService::builder()
            .resolution(bad)
            .worker_threads(0)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        assert!(err.to_string().contains("resolution"), "{bad:?}: {err}");
    }
    // The bounds themselves are accepted and kept exactly.
    for ok in [Duration::from_micros(1), Duration::from_secs(1)] {
        let (_, service) = manual_with(TimerService::builder().resolution(ok).worker_threads(0));
        assert_eq!(service.resolution(), ok);
    }
}

#[test]
fn builder_rejects_zero_shards() {
    let err = TimerService::builder()
        .shards(0)
        .worker_threads(0)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("shards"), "{err}");
}

#[test]
fn builder_with_too_many_shards_is_an_error() {
    for n in [Builder::MAX_SHARDS + 1, usize::MAX] {
        let built = no_panic(|| {
            TimerService::builder()
                .shards(n)
                .worker_threads(0)
                .build()
                .map(drop)
        });
        match built {
            Ok(Err(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
                let want = format!("shards must be at most {}, not {n}", Builder::MAX_SHARDS);
                assert!(e.to_string().contains(&want), "{e}");
            }
            Ok(Ok(())) => panic!("built a service with {n} shards"),
            Err(msg) => panic!("build panicked: {msg}"),
        }
    }
}

#[test]
fn builder_with_too_many_worker_threads_is_an_error() {
    for n in [Builder::MAX_WORKER_THREADS + 1, usize::MAX] {
        let built = no_panic(|| {
            TimerService::builder()
                .clock(tickwheel::ManualClock::new())
                .worker_threads(n)
                .build()
                .map(drop)
        });
        match built {
            Ok(Err(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
                let want = format!(
                    "worker_threads must be at most {}, not {n}",
                    Builder::MAX_WORKER_THREADS
                );
                assert!(e.to_string().contains(&want), "{e}");
            }
            Ok(Ok(())) => panic!("built a service with {n} workers"),
            Err(msg) => panic!("build panicked: {msg}"),
        }
    }
}

#[test]
fn max_pending_zero_refuses_try_schedule_and_admits_the_rest() {
    let (clock, service) = manual_with(TimerService::builder().max_pending(0).worker_threads(1));
    let fired = Arc::new(AtomicUsize::new(0));
    let err = service.try_schedule(MS, counting(&fired)).unwrap_err();
    assert!(err.is_full());
    assert!(err.to_string().contains("cap"), "{err}");
    // `schedule` and detached timers ignore the cap (documented), and fire.
    let h = service.schedule(MS, counting(&fired));
    service.schedule_detached(MS, counting(&fired));
    assert!(h.is_pending());
    // The closure given back still works.
    (err.into_inner())();
    advance(&clock, &service, MS);
    assert_eq!(fired.load(Ordering::SeqCst), 3);
    assert!(service.try_schedule(MS, || {}).unwrap_err().is_full());
}

// ---------------------------------------------------------------------------------------
// Service delays and deadlines
// ---------------------------------------------------------------------------------------

#[test]
fn zero_delay_on_a_tick_boundary_fires_without_moving_the_clock() {
    let (clock, service) = manual();
    let fired = Arc::new(AtomicUsize::new(0));
    let h = service.schedule(Duration::ZERO, counting(&fired));
    service.schedule_detached(Duration::ZERO, counting(&fired));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    assert!(!h.is_pending());
    // Mid-tick a zero delay rounds up to the next boundary: never early, never lost.
    advance(&clock, &service, Duration::from_micros(500));
    let h = service.schedule(Duration::ZERO, counting(&fired));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    assert_eq!(h.deadline(), Some(service.ticks().origin() + MS));
    advance(&clock, &service, Duration::from_micros(500));
    assert_eq!(fired.load(Ordering::SeqCst), 3);
}

#[test]
fn instants_before_the_services_origin_fire_at_once_exactly_once() {
    let (clock, service) = manual();
    let fired = Arc::new(AtomicUsize::new(0));
    let long_ago = clock.now().checked_sub(Duration::from_secs(3600)).unwrap();
    let h = service.schedule_at(long_ago, counting(&fired));
    service.schedule_detached_at(long_ago, counting(&fired));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    assert!(!h.is_pending());
    // A reset to the past fires at once, too.
    let h = service.schedule(Duration::from_secs(10), counting(&fired));
    assert!(h.reset_at(long_ago));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 3);
    advance(&clock, &service, Duration::from_secs(20));
    assert_eq!(fired.load(Ordering::SeqCst), 3, "fired twice");
}

#[test]
fn reset_to_duration_max_parks_a_timer_until_cancelled() {
    let (clock, service) = manual();
    let fired = Arc::new(AtomicUsize::new(0));
    let h = service.schedule(MS, counting(&fired));
    assert!(h.reset(Duration::MAX));
    assert!(h.is_pending());
    assert_eq!(h.deadline(), None, "never fires: no deadline");
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    assert!(h.cancel());
    assert!(!h.cancel());
}

#[test]
fn timers_keep_working_on_a_clock_saturated_at_its_end() {
    // The clock saturates (documented); scheduling on it must neither panic nor fire early.
    let (clock, service) = manual();
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    service.settle();
    let fired = Arc::new(AtomicUsize::new(0));
    let later = service.schedule(Duration::from_secs(1), counting(&fired));
    let never = service.schedule(Duration::MAX, counting(&fired));
    clock.advance(Duration::MAX);
    service.settle();
    assert_eq!(
        fired.load(Ordering::SeqCst),
        0,
        "the clock cannot move: nothing due"
    );
    assert!(later.is_pending() && never.is_pending());
    assert!(later.cancel() && never.cancel());
    // A past instant on the saturated clock still fires at once.
    service.schedule_at(clock.now() - Duration::from_secs(1), counting(&fired));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn everything_after_shutdown_returns_at_once_and_runs_nothing() {
    let (clock, service) = manual();
    let pending = service.schedule(Duration::from_secs(1), || panic!("discarded"));
    service.shutdown();
    let service = Arc::new(service);
    let s = service.clone();
    returns_promptly("settle after shutdown", move || s.settle());
    let s = service.clone();
    returns_promptly("wait after shutdown", move || {
        s.schedule(MS, || {}).wait();
    });
    assert!(!pending.is_pending() && !pending.cancel());
    assert!(!pending.reset(MS));
    assert_eq!(pending.deadline(), None);
    // Closures given after shutdown are dropped, never run (and not leaked).
    let dropped = Arc::new(());
    for _ in 0..3 {
        let d = dropped.clone();
        service.schedule_at(clock.now(), move || drop(d));
    }
    let d = dropped.clone();
    service.schedule_detached(Duration::ZERO, move || drop(d));
    let d = dropped.clone();
    service.schedule_detached_at(clock.now(), move || drop(d));
    assert_eq!(Arc::strong_count(&dropped), 1, "closures leaked");
    let h = service.schedule_recurring(Recurrence::every(MS), || panic!("after shutdown"));
    assert!(!h.is_active() && h.next_run().is_none());
    // A sleep first polled after shutdown is woken at once and completes only by the clock.
    let mut sleep = service.sleep(MS);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
    clock.advance(MS);
    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_ready());
    service.shrink_to_fit();
    let _ = service.stats();
    service.shutdown();
}

// ---------------------------------------------------------------------------------------
// Recurring series
// ---------------------------------------------------------------------------------------

#[test]
fn a_fixed_rate_series_starting_in_the_past_bursts_its_missed_runs_once_each() {
    let (clock, service) = manual();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let start = clock.now() - Duration::from_secs(5);
    let h = service.schedule_recurring(
        Recurrence::every(Duration::from_secs(1)).starting_at(start),
        move || {
            r.fetch_add(1, Ordering::SeqCst);
        },
    );
    service.settle();
    // Runs at start, start+1s, …, start+5s = now: six, back to back (Burst).
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    assert_eq!(h.next_run(), Some(clock.now() + Duration::from_secs(1)));
    advance(&clock, &service, Duration::from_secs(1));
    assert_eq!(runs.load(Ordering::SeqCst), 7);
    // Fixed delay from a past start: one run at once, then a period after it returned.
    let runs2 = Arc::new(AtomicUsize::new(0));
    let r = runs2.clone();
    let h2 = service.schedule_recurring(
        Recurrence::fixed_delay(Duration::from_secs(1)).starting_at(start),
        move || {
            r.fetch_add(1, Ordering::SeqCst);
        },
    );
    service.settle();
    assert_eq!(runs2.load(Ordering::SeqCst), 1);
    assert_eq!(h2.next_run(), Some(clock.now() + Duration::from_secs(1)));
    assert!(h.cancel() && h2.cancel());
}

#[test]
fn a_period_past_the_tick_range_is_reported_consistently() {
    // 2^64 µs is 585 000 years: a 1 000 000-year period is an `Instant` but past the tick range
    // at 1 µs, so the series never runs. Its handle must say so consistently: either it has
    // ended (as for `Duration::MAX`), or it reports when its next run is.
    let (_clock, service) =
        manual_with(TimerService::builder().resolution(Duration::from_micros(1)));
    let period = Duration::from_secs(1_000_000 * 365 * 86_400);
    let h = service.schedule_every(period, || panic!("never"));
    // The documented rule: a run that never comes ends the series, as `Duration::MAX` does.
    assert!(
        !h.is_active(),
        "a series that can never run is still active"
    );
    assert_eq!(h.next_run(), None);
}

// ---------------------------------------------------------------------------------------
// Cron
// ---------------------------------------------------------------------------------------

#[test]
fn weird_patterns_are_errors_never_panics() {
    for pattern in [
        "",
        " ",
        "*",
        "* * * *",
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * 0 *",
        "* * * * 8",
        "5-1 * * * *",
        "*/-1 * * * *",
        "*/99999999999999999999 * * * *",
        "99999999999999999999 * * * *",
        "0 0 L W *",
        "0 0 * * MON#9",
        "0 0 * * MON#0",
        "0 0 32W * *",
        "0 0 * * 9L",
        "@never",
        "@",
        "\u{0} * * * *",
        "０ * * * *",
        "0 0 0 1 1 * 99999",
        "0 0 0 1 1 * 1969",
    ] {
        let result = no_panic(|| Cron::new(pattern, "UTC"));
        match result {
            Err(msg) => panic!("{pattern:?}: Cron::new panicked: {msg}"),
            Ok(Ok(cron)) => panic!("{pattern:?}: accepted as {cron:?}"),
            Ok(Err(e)) => {
                assert!(
                    matches!(
                        e,
                        CronError::InvalidPattern { .. } | CronError::NeverMatches { .. }
                    ),
                    "{pattern:?}: {e:?}"
                );
                assert!(
                    e.to_string().contains(&format!("{pattern:?}")),
                    "{pattern:?}: {e}"
                );
            }
        }
    }
}

#[test]
fn impossible_dates_are_never_matches() {
    for pattern in [
        "0 0 30 2 *",
        "0 0 31 4 *",
        "0 0 31 6 *",
        "0 0 31 9 *",
        "0 0 31 11 *",
        "0 0 0 30 2 *",
        "0 0 0 29 2 * 2100",
    ] {
        match no_panic(|| Cron::new(pattern, "Europe/Paris")) {
            Ok(Err(e @ CronError::NeverMatches { .. })) => {
                assert!(e.to_string().contains(&format!("{pattern:?}")), "{e}")
            }
            other => panic!("{pattern:?}: {other:?}"),
        }
    }
}

#[test]
fn unknown_or_malformed_zones_are_errors() {
    for zone in [
        "",
        " ",
        "Mars/Olympus",
        "../../../../etc/passwd",
        "/etc/localtime",
        "Europe/Paris\0",
        "Europe//Paris",
        "UTC+99",
    ] {
        match no_panic(|| Cron::new("0 9 * * *", zone)) {
            Ok(Err(e @ CronError::UnknownTimeZone { .. })) => {
                assert!(e.to_string().contains(&format!("{zone:?}")), "{e}")
            }
            other => panic!("{zone:?}: {other:?}"),
        }
    }
    for text in ["0 9 * * * @ ", "0 9 * * * @ Mars/Olympus"] {
        assert!(
            matches!(text.parse::<Cron>(), Err(CronError::UnknownTimeZone { .. })),
            "{text:?}"
        );
    }
}

#[test]
fn next_after_at_the_ends_of_time_does_not_panic() {
    let every_second = Cron::utc("* * * * * *").unwrap();
    let daily = Cron::new("0 0 2 * * *", "Europe/Paris").unwrap();
    for cron in [&every_second, &daily] {
        assert_eq!(no_panic(|| cron.next_after(Timestamp::MAX)), Ok(None));
        let first = no_panic(|| cron.next_after(Timestamp::MIN)).unwrap();
        if let Some(first) = first {
            assert!(first > Timestamp::MIN);
        }
        let far = UNIX_EPOCH.checked_add(Duration::from_secs(1 << 40));
        if let Some(far) = far {
            assert_eq!(no_panic(|| cron.next_after_system(far)), Ok(None));
        }
    }
}

#[test]
fn next_after_a_fractional_pre_epoch_instant_is_the_next_whole_second() {
    let every_second = Cron::utc("* * * * * *").unwrap();
    let after: Timestamp = "1969-12-31T23:59:58.5Z".parse().unwrap();
    let want: Timestamp = "1969-12-31T23:59:59Z".parse().unwrap();
    assert_eq!(every_second.next_after(after), Some(want));
    let after = UNIX_EPOCH - Duration::from_millis(1_500);
    assert_eq!(
        every_second.next_after_system(after),
        Some(UNIX_EPOCH - Duration::from_secs(1))
    );
}

// ---------------------------------------------------------------------------------------
// Wall clock
// ---------------------------------------------------------------------------------------

#[test]
fn a_manual_wall_clock_before_the_epoch_reads_and_moves_normally() {
    let before = UNIX_EPOCH - Duration::from_secs(86_400 * 365);
    let clock = ManualWallClock::starting_at(before);
    assert_eq!(clock.wall_now(), before);
    clock.advance(Duration::from_secs(10));
    assert_eq!(clock.wall_now(), before + Duration::from_secs(10));
    clock.set_wall(UNIX_EPOCH - Duration::from_secs(5));
    assert_eq!(clock.wall_now(), UNIX_EPOCH - Duration::from_secs(5));
    assert_eq!(
        clock.timestamp().unwrap().to_string(),
        "1969-12-31T23:59:55Z"
    );
    clock.step_back(Duration::from_secs(5));
    assert_eq!(clock.wall_now(), UNIX_EPOCH - Duration::from_secs(10));
}

#[test]
fn step_back_never_moves_the_wall_clock_forward() {
    let clock = ManualWallClock::starting_at(UNIX_EPOCH - Duration::from_secs(3600));
    let before = clock.wall_now();
    clock.step_back(Duration::MAX);
    let first = clock.wall_now();
    assert!(first < before, "stepped back, read later");
    // As documented: at most to the first instant SystemTime represents, exactly.
    assert_eq!(
        first.checked_sub(Duration::from_nanos(1)),
        None,
        "{first:?}"
    );
    // Setting the wall clock is exact whatever the monotonic clock has moved.
    clock.advance(Duration::from_secs(10));
    let target = first + Duration::from_secs(1);
    clock.set_wall(target);
    assert_eq!(clock.wall_now(), target);
    clock.advance(Duration::from_secs(2));
    assert_eq!(clock.wall_now(), target + Duration::from_secs(2));
}

#[test]
fn advancing_near_the_end_of_system_time_never_reads_earlier() {
    // The last second SystemTime holds on this platform (found by halving).
    let mut end = UNIX_EPOCH;
    let mut step = Duration::from_secs(1 << 62);
    while step >= Duration::from_secs(1) {
        if let Some(t) = end.checked_add(step) {
            end = t;
        } else {
            step /= 2;
        }
    }
    let clock = ManualWallClock::starting_at(end - Duration::from_secs(10));
    let mut last = clock.wall_now();
    for _ in 0..4 {
        clock.advance(Duration::from_secs(5));
        let now = clock.wall_now();
        assert!(now >= last, "wall clock went back from {last:?} to {now:?}");
        last = now;
    }
    // As documented: moved past the end, it reads the last instant SystemTime represents.
    assert_eq!(last.checked_add(Duration::from_nanos(1)), None, "{last:?}");
    clock.step_back(Duration::from_secs(3600));
    assert_eq!(
        last.duration_since(clock.wall_now()).unwrap(),
        Duration::from_secs(3600)
    );
}

#[test]
fn a_calendar_series_on_a_wall_clock_past_the_calendar_range_ends_instead_of_firing() {
    // Year 10000+ is past jiff's range: no fire instant exists; the series ends, the stream
    // ends, nothing fires early or panics.
    let far = UNIX_EPOCH + Duration::from_secs(300 * 365 * 86_400 * 100);
    let clock = ManualWallClock::starting_at(far);
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(1)
        .build()
        .unwrap();
    let h = service.schedule_recurring(Recurrence::cron(Cron::utc("* * * * *").unwrap()), || {
        panic!("fired")
    });
    assert!(!h.is_active());
    let mut stream = service.cron_stream(Cron::utc("* * * * *").unwrap());
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(stream.poll_next(&mut cx), Poll::Ready(None));
    assert_eq!(stream.next_target(), None::<SystemTime>);
    clock.advance(Duration::from_secs(3600));
    service.settle();
}
