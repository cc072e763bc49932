//! The wall and boot clocks: `BootClock` against the kernel's own suspend accounting, a
//! `timerfd` armed on `CLOCK_BOOTTIME`, virtual wall time (`ManualWallClock`), and the
//! service, its handles and `Deadlines` on every clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel::time::{BootClock, Clock, ManualWallClock, MonotonicClock, SystemClock, WallClock};
use tickwheel::TimerService;

#[cfg(target_os = "linux")]
mod linux {
    use std::time::{Duration, Instant};

    use rustix::time::{
        clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
        TimerfdFlags, TimerfdTimerFlags, Timespec,
    };
    use tickwheel::time::{BootClock, Clock, MonotonicClock};

    fn read(id: ClockId) -> Duration {
        let t = clock_gettime(id);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    /// The kernel's suspend time: `CLOCK_BOOTTIME - CLOCK_MONOTONIC`.
    fn kernel_suspended() -> Duration {
        let mono = read(ClockId::Monotonic);
        read(ClockId::Boottime).saturating_sub(mono)
    }

    #[test]
    fn boot_clock_is_ahead_of_monotonic_by_the_kernels_suspend_time() {
        // Tolerance: the reads are not simultaneous (a few µs; generous for a loaded VM).
        let tolerance = Duration::from_millis(2);
        for _ in 0..100 {
            let reported = kernel_suspended();
            let mono = MonotonicClock.now();
            let boot = BootClock.now();
            let after = MonotonicClock.now();
            assert!(boot >= mono, "boot clock behind the monotonic one");
            let ahead = boot - mono;
            let reported_again = kernel_suspended();
            // Zero when the machine never slept; otherwise the slept time.
            assert!(
                ahead + tolerance >= reported
                    && ahead <= reported_again + (after - mono) + tolerance,
                "ahead by {ahead:?}, kernel reports {reported:?}..{reported_again:?}"
            );
            let suspended = BootClock::suspended();
            assert!(suspended + tolerance >= reported && suspended <= reported_again + tolerance);
        }
        println!("suspended since boot: {:?}", BootClock::suspended());
    }

    #[test]
    fn boot_clock_never_goes_back() {
        let mut last = BootClock.now();
        for _ in 0..10_000 {
            let now = BootClock.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn a_timerfd_armed_on_boottime_fires() {
        // The one real wait of these tests: 10 ms, on the OS's own timer.
        let fd = timerfd_create(TimerfdClockId::Boottime, TimerfdFlags::CLOEXEC).unwrap();
        let start = BootClock.now();
        let began = Instant::now();
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            },
        };
        timerfd_settime(&fd, TimerfdTimerFlags::empty(), &spec).unwrap();
        let mut count = [0u8; 8];
        let n = rustix::io::read(&fd, &mut count).unwrap(); // blocks until it fires
        assert_eq!(n, 8);
        assert_eq!(u64::from_ne_bytes(count), 1, "one expiration");
        assert!(
            BootClock.now() - start >= Duration::from_millis(10),
            "never early on boot time"
        );
        assert!(began.elapsed() < Duration::from_secs(5), "it fired");
    }
}

#[test]
fn manual_wall_clock_moves_with_advance_and_steps_without_moving_monotonic() {
    let start = UNIX_EPOCH + Duration::from_secs(1_774_742_340); // 2026-03-29T00:59:00Z
    let clock = ManualWallClock::starting_at(start);
    let mono0 = clock.now();
    let steps = Arc::new(AtomicUsize::new(0));
    let s = steps.clone();
    let listener: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        s.fetch_add(1, Ordering::SeqCst);
    });
    clock.subscribe_steps(Arc::downgrade(&listener));

    clock.advance(Duration::from_secs(60));
    assert_eq!(clock.wall_now(), start + Duration::from_secs(60));
    assert_eq!(clock.now() - mono0, Duration::from_secs(60));
    assert_eq!(steps.load(Ordering::SeqCst), 0, "advancing is not a step");

    clock.step_back(Duration::from_secs(3600));
    assert_eq!(
        clock.wall_now(),
        start + Duration::from_secs(60) - Duration::from_secs(3600)
    );
    assert_eq!(
        clock.now() - mono0,
        Duration::from_secs(60),
        "monotonic unmoved"
    );
    assert_eq!(
        steps.load(Ordering::SeqCst),
        1,
        "listeners run before the step returns"
    );

    clock.step_forward(Duration::from_secs(86_400));
    assert_eq!(
        clock.wall_now(),
        start + Duration::from_secs(60 + 86_400) - Duration::from_secs(3600)
    );
    let clone = clock.clone();
    clone.set_wall(start);
    assert_eq!(clock.wall_now(), start, "clones share one time");
    assert_eq!(steps.load(Ordering::SeqCst), 3);

    drop(listener);
    clock.set_wall(start);
    assert_eq!(
        steps.load(Ordering::SeqCst),
        3,
        "dropped listeners are forgotten"
    );
}

#[cfg(feature = "cron")]
#[test]
fn manual_wall_clock_is_set_to_civil_times_in_any_zone() {
    use tickwheel::cron::jiff::{tz::TimeZone, Zoned};

    let at: Zoned = "2026-10-25T02:30:00+02:00[Europe/Paris]".parse().unwrap(); // first pass
    let clock = ManualWallClock::starting_at_zoned(&at);
    let paris = TimeZone::get("Europe/Paris").unwrap();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        clock.zoned(&paris).to_string(),
        "2026-10-25T02:30:00+01:00[Europe/Paris]"
    );
    let howe = TimeZone::get("Australia/Lord_Howe").unwrap();
    clock.set_zoned(&"2026-10-04T01:59:00[Australia/Lord_Howe]".parse().unwrap());
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        clock.zoned(&howe).to_string(),
        "2026-10-04T02:30:00+11:00[Australia/Lord_Howe]"
    );
    let kolkata = TimeZone::get("Asia/Kolkata").unwrap();
    assert_eq!(
        clock.zoned(&kolkata).to_string(),
        "2026-10-03T21:00:00+05:30[Asia/Kolkata]"
    );
}

#[test]
fn system_clock_reads_both_timelines() {
    let wall = SystemClock.wall_now();
    let real = SystemTime::now();
    assert!(real.duration_since(wall).unwrap_or_default() < Duration::from_secs(5));
    let a = SystemClock.now();
    assert!(
        MonotonicClock.now() >= a,
        "its monotonic reading is Instant::now()"
    );
    // Subscribing starts the step watcher; nothing is reported without a step.
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let listener: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        h.fetch_add(1, Ordering::SeqCst);
    });
    SystemClock.subscribe_steps(Arc::downgrade(&listener));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// One-shot timers, handles and `Deadlines` on a service built on `clock`.
/// `delay` is zero on real clocks (the timers are due at once: no real wait).
fn service_basics_on(clock: impl Clock + Clone, delay: Duration, advance: impl Fn(Duration)) {
    let service = TimerService::builder()
        .clock(clock.clone())
        .worker_threads(1)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let before = clock.now();
    let cancelled = service.schedule(Duration::from_secs(3600), || panic!("cancelled"));
    let fires = service.schedule(delay, move || tx.send(()).unwrap());
    assert!(cancelled.cancel());
    assert!(cancelled.deadline().is_none());
    assert!(
        fires.deadline().is_none_or(|d| d >= before + delay),
        "never early"
    );
    let (deadlines, mut expired) = service.deadlines::<u32>();
    deadlines.start(1, Duration::from_secs(3600));
    deadlines.start(2, delay);
    assert!(deadlines.finish(&1));
    advance(delay);
    fires.wait();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(()));
    assert_eq!(expired.recv_timeout(Duration::from_secs(5)), Ok(2));
    assert!(!fires.is_pending() && !cancelled.is_pending());
}

#[test]
fn handles_and_deadlines_work_on_every_clock() {
    // Virtual wall time: the service drains when the clock is advanced.
    let manual = ManualWallClock::starting_at(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let m = manual.clone();
    service_basics_on(manual.clone(), Duration::from_millis(5), move |d| {
        m.advance(d)
    });
    // Real clocks: zero delays, due at once.
    service_basics_on(SystemClock, Duration::ZERO, |_| {});
    service_basics_on(BootClock, Duration::ZERO, |_| {});
    service_basics_on(MonotonicClock, Duration::ZERO, |_| {});
}
