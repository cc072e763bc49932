//! Recurring callbacks on virtual time (`ManualClock`, `ManualWallClock` + `settle()`), no
//! real sleeps: fixed rate vs fixed delay with slow callbacks (a callback that advances the
//! clock), the missed-run policies, overlap, cancel racing runs, and calendar series whose
//! wall clock is stepped back an hour and forward a day.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

use tickwheel::service::Recurrence;
use tickwheel::MissedTickBehavior;

mod virtual_time;
use virtual_time::{manual, manual_with_workers};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Start times (ms since `base`) of a series whose first run takes `slow_ms` of virtual time,
/// observed while the clock is stepped 100 ms at a time up to `until_ms`.
fn start_times(schedule: Recurrence, slow_ms: u64, until_ms: u64) -> Vec<u64> {
    let (clock, service) = manual();
    let base = clock.now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let (s, c) = (starts.clone(), clock.clone());
    let handle = service.schedule_recurring(schedule, move || {
        let mut starts = s.lock().unwrap();
        starts.push((c.now() - base).as_millis() as u64);
        let first = starts.len() == 1;
        drop(starts);
        if first {
            c.advance(ms(slow_ms)); // a slow run: virtual time passes while it works
        }
    });
    while clock.now() - base < ms(until_ms) {
        clock.advance(ms(100));
        service.settle();
    }
    assert!(handle.cancel());
    let v = starts.lock().unwrap().clone();
    v
}

#[test]
fn fixed_rate_keeps_its_grid_and_fixed_delay_counts_from_the_end() {
    // The first run takes 400 ms of a 1 s period: fixed rate keeps 1 s, 2 s, 3 s…; fixed
    // delay starts one period after it returned (2.4 s), then after each instant run.
    assert_eq!(
        start_times(Recurrence::every(ms(1000)), 400, 4000),
        [1000, 2000, 3000, 4000]
    );
    assert_eq!(
        start_times(Recurrence::fixed_delay(ms(1000)), 400, 4000),
        [1000, 2400, 3400]
    );
}

#[test]
fn a_run_slower_than_the_period_follows_the_missed_tick_behavior() {
    // The first run takes 2.5 s of a 1 s period: it ends at 3.5 s.
    let rate = |b| Recurrence::every(ms(1000)).missed_tick_behavior(b);
    // Burst: the missed runs (due at 2 s and 3 s) start back to back, then the grid again.
    assert_eq!(
        start_times(rate(MissedTickBehavior::Burst), 2500, 5000),
        [1000, 3500, 3500, 4000, 5000]
    );
    // Skip: the next run of the original grid still ahead.
    assert_eq!(
        start_times(rate(MissedTickBehavior::Skip), 2500, 5000),
        [1000, 4000, 5000]
    );
    // Delay: one period after the late run.
    assert_eq!(
        start_times(rate(MissedTickBehavior::Delay), 2500, 5000),
        [1000, 4500]
    );
    assert_eq!(
        start_times(Recurrence::fixed_delay(ms(1000)), 2500, 5500),
        [1000, 4500, 5500]
    );
}

#[test]
fn runs_never_overlap_unless_asked() {
    for allow in [false, true] {
        let (clock, service) = manual_with_workers(2);
        let active = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let calls = Arc::new(AtomicUsize::new(0));
        let (a, m, c, k) = (active.clone(), most.clone(), clock.clone(), calls.clone());
        let handle =
            service.schedule_recurring(Recurrence::every(ms(10)).allow_overlap(allow), move || {
                let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                if k.fetch_add(1, Ordering::SeqCst) == 0 {
                    // The first run lasts past the next start; with overlap allowed the next
                    // run starts on the other worker meanwhile and says so.
                    c.advance(ms(15));
                    if allow {
                        rx.lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(10))
                            .expect("no overlapping run started");
                    }
                } else if allow {
                    let _ = tx.send(());
                }
                a.fetch_sub(1, Ordering::SeqCst);
            });
        clock.advance(ms(10));
        service.settle();
        clock.advance(ms(10));
        service.settle();
        assert!(handle.cancel());
        service.settle();
        let most = most.load(Ordering::SeqCst);
        if allow {
            assert_eq!(most, 2, "overlap allowed: two runs at once");
        } else {
            assert_eq!(most, 1, "no overlap by default");
        }
        assert!(calls.load(Ordering::SeqCst) >= 2);
    }
}

#[test]
fn handle_reports_the_next_run_and_cancel_is_exact() {
    let (clock, service) = manual();
    let start = clock.now();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let handle = service.schedule_every(ms(250), move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(handle.next_run(), Some(start + ms(250)));
    assert_eq!(handle.next_run_wall(), None, "not a calendar");
    clock.advance(ms(250));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(handle.runs(), 1);
    assert_eq!(handle.next_run(), Some(start + ms(500)));
    // Cancel before the next run: it never starts.
    assert!(handle.cancel());
    assert!(!handle.cancel(), "only one cancel wins");
    assert!(!handle.is_active());
    assert_eq!(handle.next_run(), None);
    clock.advance(ms(1000));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(service.stats().pending, 0, "the series' timer is gone");

    // starting_at: the first run at a given instant; a past one runs at once.
    let r = runs.clone();
    let at = clock.now() - ms(1);
    let h = service.schedule_recurring(Recurrence::every(ms(100)).starting_at(at), move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(h.cancel());
}

#[test]
fn a_panicking_run_does_not_end_the_series_and_shutdown_does() {
    let (clock, service) = manual();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let handle = service.schedule_every(ms(10), move || {
        if r.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("first run fails");
        }
    });
    for _ in 0..3 {
        clock.advance(ms(10));
        service.settle();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(service.stats().panicked, 1, "the worker counted the panic");
    service.shutdown();
    assert!(!handle.is_active(), "shutdown discarded the pending run");
    assert!(!handle.cancel(), "nothing left to cancel");
}

#[test]
fn series_that_cannot_run_end_at_once() {
    let (clock, service) = manual();
    let never = service.schedule_every(Duration::MAX, || panic!("never runs"));
    assert!(!never.is_active(), "no representable first run");
    assert_eq!(never.next_run(), None);
    let h = service.schedule_every(Duration::ZERO, || {});
    assert_eq!(
        h.next_run(),
        Some(clock.now() + service.resolution()),
        "zero: one tick"
    );
    service.shutdown();
    assert!(!h.is_active());
    let late = service.schedule_every(ms(1), || panic!("after shutdown"));
    assert!(
        !late.is_active() && !late.cancel(),
        "scheduled after shutdown: ended"
    );
}

#[test]
fn cancel_racing_runs_is_exact() {
    for round in 0..100 {
        let (clock, service) = manual_with_workers(2);
        let service = Arc::new(service);
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let handle = Arc::new(service.schedule_every(ms(1), move || {
            s.fetch_add(1, Ordering::SeqCst);
        }));
        let barrier = Arc::new(Barrier::new(3));
        let driver = {
            let (clock, service, barrier) = (clock.clone(), service.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..(round % 7) + 1 {
                    clock.advance(ms(1));
                    service.settle();
                }
            })
        };
        let other = {
            let (handle, barrier) = (handle.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                handle.cancel()
            })
        };
        barrier.wait();
        let mine = handle.cancel();
        let at_cancel = started.load(Ordering::SeqCst);
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "exactly one cancel returns true");
        driver.join().unwrap();
        service.settle();
        // At most the run in progress when the winning cancel returned (no overlap) starts
        // after it; then nothing, however far the clock moves.
        let after = started.load(Ordering::SeqCst);
        assert!(
            after <= at_cancel + 1,
            "round {round}: {at_cancel} then {after}"
        );
        clock.advance(ms(100));
        service.settle();
        assert_eq!(started.load(Ordering::SeqCst), after, "round {round}");
        assert!(!handle.is_running() && !handle.is_active());
    }
}

#[cfg(feature = "cron")]
mod calendar {
    use super::*;
    use tickwheel::cron::jiff::{Timestamp, Zoned};
    use tickwheel::cron::Cron;
    use tickwheel::time::ManualWallClock;
    use tickwheel::TimerService;

    use super::virtual_time::{manual_wall, wall, wall_text as text};

    struct Rig {
        clock: ManualWallClock,
        service: TimerService,
        runs: Arc<Mutex<Vec<String>>>,
    }

    fn rig(start: &str) -> Rig {
        let (clock, service) = manual_wall(start);
        Rig {
            clock,
            service,
            runs: Arc::new(Mutex::new(Vec::new())),
        }
    }

    impl Rig {
        fn start(&self, cron: Cron, missed: MissedTickBehavior) -> tickwheel::RecurringHandle {
            let (runs, clock) = (self.runs.clone(), self.clock.clone());
            let schedule = Recurrence::cron(cron)
                .wall_clock(self.clock.clone())
                .missed_tick_behavior(missed);
            self.service.schedule_recurring(schedule, move || {
                runs.lock().unwrap().push(text(clock.wall_now()));
            })
        }

        fn advance(&self, by: Duration) {
            self.clock.advance(by);
            self.service.settle();
        }

        fn runs(&self) -> Vec<String> {
            std::mem::take(&mut *self.runs.lock().unwrap())
        }
    }

    #[test]
    fn wall_clock_stepped_back_an_hour_runs_nothing_early_and_repeats_nothing() {
        let rig = rig("2026-05-10T10:30:00Z");
        let hourly = rig.start(Cron::utc("0 * * * *").unwrap(), MissedTickBehavior::Skip);
        assert_eq!(hourly.next_run_wall(), Some(wall("2026-05-10T11:00:00Z")));
        rig.advance(Duration::from_secs(1800));
        assert_eq!(rig.runs(), ["2026-05-10T11:00:00Z"]);
        let mono = rig.clock.now();
        assert_eq!(hourly.next_run(), Some(mono + Duration::from_secs(3600)));
        rig.clock.step_back(Duration::from_secs(3600)); // wall 10:00
        assert_eq!(
            hourly.next_run(),
            Some(mono + Duration::from_secs(7200)),
            "the deadline moved with the wall clock"
        );
        rig.advance(Duration::from_secs(3600)); // wall 11:00 again: already ran, not repeated
        rig.advance(Duration::from_secs(3599)); // wall 11:59:59
        assert_eq!(
            rig.runs(),
            Vec::<String>::new(),
            "nothing early, nothing twice"
        );
        rig.advance(Duration::from_secs(1)); // wall 12:00
        assert_eq!(rig.runs(), ["2026-05-10T12:00:00Z"]);
        assert!(hourly.cancel());
    }

    #[test]
    fn wall_clock_stepped_forward_a_day_runs_what_is_due() {
        for (missed, expected_runs) in [
            (MissedTickBehavior::Skip, 1),
            (MissedTickBehavior::Burst, 24),
        ] {
            let rig = rig("2026-05-10T10:30:00Z");
            let hourly = rig.start(Cron::utc("0 * * * *").unwrap(), missed);
            rig.advance(Duration::from_secs(1800));
            assert_eq!(rig.runs(), ["2026-05-10T11:00:00Z"]);
            rig.clock.step_forward(Duration::from_secs(86_400)); // wall 2026-05-11T11:00
            rig.service.settle();
            let runs = rig.runs();
            assert_eq!(runs.len(), expected_runs, "{missed:?}: {runs:?}");
            assert!(
                runs.iter().all(|r| r == "2026-05-11T11:00:00Z"),
                "run at the new time"
            );
            assert_eq!(hourly.next_run_wall(), Some(wall("2026-05-11T12:00:00Z")));
            rig.advance(Duration::from_secs(3600));
            assert_eq!(rig.runs(), ["2026-05-11T12:00:00Z"]);
            assert!(hourly.cancel());
        }
    }

    #[test]
    fn a_daily_series_crosses_the_paris_gap_by_the_policy() {
        let rig = rig("2026-03-28T12:00:00Z");
        let daily = rig.start(
            Cron::new("30 2 * * *", "Europe/Paris").unwrap(),
            MissedTickBehavior::Skip,
        );
        for _ in 0..80 {
            rig.advance(Duration::from_secs(1800));
        }
        // 02:30 does not exist on the 29th: it ran at 03:00 CEST (01:00 UTC).
        assert_eq!(rig.runs(), ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]);
        let next: Zoned = Timestamp::try_from(daily.next_run_wall().unwrap())
            .unwrap()
            .in_tz("Europe/Paris")
            .unwrap();
        assert_eq!(next.to_string(), "2026-03-31T02:30:00+02:00[Europe/Paris]");
        assert!(daily.cancel());
    }

    #[test]
    fn periodic_series_ignore_wall_clock_steps() {
        let rig = rig("2026-05-10T10:30:00Z");
        let (runs, clock) = (rig.runs.clone(), rig.clock.clone());
        let every = rig
            .service
            .schedule_every(Duration::from_secs(60), move || {
                runs.lock().unwrap().push(text(clock.wall_now()));
            });
        let due = every.next_run();
        rig.clock.step_forward(Duration::from_secs(86_400));
        rig.clock.step_back(Duration::from_secs(2 * 86_400));
        rig.service.settle();
        assert_eq!(
            every.next_run(),
            due,
            "a period counts on the monotonic clock"
        );
        assert_eq!(rig.runs(), Vec::<String>::new());
        rig.advance(Duration::from_secs(60));
        assert_eq!(rig.runs(), ["2026-05-09T10:31:00Z"]);
        assert!(every.cancel());
    }

    /// Without `.wall_clock(…)`, a calendar on a service built on a `ManualWallClock` reads
    /// that clock (it used to read the system's and never fire in virtual time).
    #[test]
    fn a_calendar_reads_the_services_wall_clock_by_default() {
        let rig = rig("2026-05-10T10:59:00Z");
        let (runs, clock) = (rig.runs.clone(), rig.clock.clone());
        let hourly = rig.service.schedule_recurring(
            Recurrence::cron(Cron::utc("0 * * * *").unwrap()),
            move || runs.lock().unwrap().push(text(clock.wall_now())),
        );
        assert_eq!(hourly.next_run_wall(), Some(wall("2026-05-10T11:00:00Z")));
        rig.advance(Duration::from_secs(60));
        assert_eq!(rig.runs(), ["2026-05-10T11:00:00Z"]);
    }

    /// `starting_at` on a calendar: the first run is the first fire instant at or after it
    /// (it used to be ignored).
    #[test]
    fn starting_at_holds_a_calendar_back_until_then() {
        let rig = rig("2026-05-10T10:30:00Z");
        let (runs, clock) = (rig.runs.clone(), rig.clock.clone());
        let start = rig.service.now() + Duration::from_secs(5400); // 12:00 exactly
        let hourly = rig.service.schedule_recurring(
            Recurrence::cron(Cron::utc("0 * * * *").unwrap()).starting_at(start),
            move || runs.lock().unwrap().push(text(clock.wall_now())),
        );
        assert_eq!(hourly.next_run_wall(), Some(wall("2026-05-10T12:00:00Z")));
        rig.advance(Duration::from_secs(3600)); // 11:30: 11:00 was before the start
        assert!(rig.runs().is_empty());
        rig.advance(Duration::from_secs(1800)); // 12:00
        assert_eq!(rig.runs(), ["2026-05-10T12:00:00Z"]);
        let past = rig.service.schedule_recurring(
            Recurrence::cron(Cron::utc("30 * * * *").unwrap()).starting_at(start),
            || {},
        );
        assert_eq!(past.next_run_wall(), Some(wall("2026-05-10T12:30:00Z")));
    }

    #[test]
    fn a_calendar_with_no_further_run_ends() {
        let rig = rig("2026-12-31T23:59:00Z");
        let once = rig.start(
            Cron::utc("0 0 0 1 1 * 2027").unwrap(),
            MissedTickBehavior::Skip,
        );
        rig.advance(Duration::from_secs(60));
        assert_eq!(rig.runs(), ["2027-01-01T00:00:00Z"]);
        assert!(!once.is_active());
        assert!(!once.cancel());
        let never = rig.start(
            Cron::utc("0 0 0 1 1 * 2020").unwrap(),
            MissedTickBehavior::Skip,
        );
        assert!(!never.is_active());
        assert_eq!(never.next_run(), None);
    }
}
