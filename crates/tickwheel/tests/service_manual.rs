//! Deterministic service tests on a `ManualClock`: move the clock, `settle()`, observe.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tickwheel::service::{QueueFlavor, TimerHandle, TimerService};
use tickwheel::time::ManualClock;
use tickwheel_lab::SplitMix64;

mod virtual_time;
use virtual_time::manual_with;

/// A service with the default settings on a fresh `ManualClock`.
fn manual() -> (ManualClock, TimerService) {
    manual_with(TimerService::builder())
}

/// A callback that counts its runs in `runs`.
fn counting(runs: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let runs = runs.clone();
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
    }
}

const TIMERS: usize = 100_000;
const PRODUCERS: usize = 4;
/// Delays are uniform in [0, MAX_DELAY_US] µs; the resolution is 1 ms.
const MAX_DELAY_US: u64 = 2_000_000;

/// What one timer must do, and what it did.
struct Plan {
    delay: Vec<Duration>,
    producer: Vec<u8>,
    fired: Vec<AtomicU32>,
    early: AtomicUsize,
    /// Ids in the order their callbacks ran.
    order: Mutex<Vec<u32>>,
}

fn plan(seed: u64) -> Arc<Plan> {
    let mut rng = SplitMix64::new(seed);
    Arc::new(Plan {
        delay: (0..TIMERS)
            .map(|_| Duration::from_micros(rng.below(MAX_DELAY_US + 1)))
            .collect(),
        producer: (0..TIMERS).map(|i| (i % PRODUCERS) as u8).collect(),
        fired: (0..TIMERS).map(|_| AtomicU32::new(0)).collect(),
        early: AtomicUsize::new(0),
        order: Mutex::new(Vec::with_capacity(TIMERS)),
    })
}

/// Schedules every timer of `plan` from `PRODUCERS` threads; returns the handles by id.
fn schedule_all(
    service: &Arc<TimerService>,
    clock: &ManualClock,
    plan: &Arc<Plan>,
) -> Vec<TimerHandle> {
    let start = clock.now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (service, clock, plan) = (service.clone(), clock.clone(), plan.clone());
            thread::spawn(move || {
                let mut handles = Vec::new();
                for id in (p..TIMERS).step_by(PRODUCERS) {
                    let due = start + plan.delay[id];
                    let (plan2, clock2) = (plan.clone(), clock.clone());
                    let h = service.schedule(plan.delay[id], move || {
                        if clock2.now() < due {
                            plan2.early.fetch_add(1, Ordering::SeqCst);
                        }
                        plan2.fired[id].fetch_add(1, Ordering::SeqCst);
                        plan2.order.lock().unwrap().push(id as u32);
                    });
                    handles.push((id, h));
                }
                handles
            })
        })
        .collect();
    let mut all: Vec<_> = producers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    all.sort_by_key(|(id, _)| *id);
    all.into_iter().map(|(_, h)| h).collect()
}

/// The tick (1 ms) a delay rounds up to when scheduled at the service's origin.
fn tick_of(delay: Duration) -> u64 {
    (delay.as_micros() as u64).div_ceil(1_000)
}

fn run_random_deadlines(workers: usize, flavor: QueueFlavor, seed: u64) {
    let (clock, service) = manual_with(
        TimerService::builder()
            .queue(flavor)
            .worker_threads(workers),
    );
    let service = Arc::new(service);
    let plan = plan(seed);
    let handles = schedule_all(&service, &clock, &plan);
    assert_eq!(service.stats().pending, TIMERS);

    let mut rng = SplitMix64::new(seed ^ 0xdead);
    let mut cancel_result = vec![None; TIMERS];
    let start = clock.now();
    while clock.elapsed() <= Duration::from_micros(MAX_DELAY_US + 1_000) {
        // Cancel a few random timers between moves; some have fired already.
        for _ in 0..100 {
            let id = rng.below(TIMERS as u64) as usize;
            if cancel_result[id].is_none() {
                cancel_result[id] = Some(handles[id].cancel());
            }
        }
        clock.advance(Duration::from_micros(rng.below(20_000)));
        service.settle();
        // Exactly the timers due by now and not cancelled have run, once.
        let now = clock.now() - start;
        for (id, fired) in plan.fired.iter().enumerate() {
            let fired = fired.load(Ordering::SeqCst);
            let due = plan.delay[id] <= now;
            let cancelled = cancel_result[id] == Some(true);
            let expected = u32::from(due && !cancelled);
            // A timer due mid-tick fires at the tick's end: allow "due" by the tick.
            let due_by_tick = tick_of(plan.delay[id]) <= (now.as_micros() as u64) / 1_000;
            if due_by_tick == due {
                assert_eq!(fired, expected, "timer {id} at {now:?}");
            } else {
                assert_eq!(fired, 0, "timer {id} fired before its tick");
            }
        }
    }
    assert_eq!(plan.early.load(Ordering::SeqCst), 0, "a callback ran early");
    // cancel() returned true exactly for the callbacks that never ran.
    for (id, result) in cancel_result.iter().enumerate() {
        let fired = plan.fired[id].load(Ordering::SeqCst);
        match result {
            Some(true) => assert_eq!(fired, 0, "cancelled timer {id} ran"),
            Some(false) | None => assert_eq!(fired, 1, "timer {id} lost or doubled"),
        }
    }
    let order = plan.order.lock().unwrap();
    if workers == 1 {
        check_order(&plan, &order);
    }
    let stats = service.stats();
    let cancelled = cancel_result.iter().filter(|r| **r == Some(true)).count();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.cancelled as usize, cancelled);
    assert_eq!(stats.fired as usize, TIMERS - cancelled);
    assert_eq!(stats.scheduled as usize, TIMERS);
    assert_eq!(stats.lateness.count() as usize, TIMERS - cancelled);
}

/// Ids ran in deadline-tick order; at equal ticks, one producer's in schedule order.
fn check_order(plan: &Plan, order: &[u32]) {
    for pair in order.windows(2) {
        let (a, b) = (pair[0] as usize, pair[1] as usize);
        let (ta, tb) = (tick_of(plan.delay[a]), tick_of(plan.delay[b]));
        assert!(ta <= tb, "timer {a} (tick {ta}) ran before {b} (tick {tb})");
        if ta == tb && plan.producer[a] == plan.producer[b] {
            assert!(a < b, "same tick, same producer: {a} scheduled after {b}");
        }
    }
}

#[test]
fn hundred_thousand_timers_from_four_threads_fire_once_in_order_never_early() {
    run_random_deadlines(1, QueueFlavor::Wheel, 1);
}

#[test]
fn hundred_thousand_timers_with_four_workers_fire_once_never_early() {
    run_random_deadlines(4, QueueFlavor::Wheel, 2);
}

#[test]
fn the_heap_flavor_keeps_the_same_contract() {
    run_random_deadlines(1, QueueFlavor::Heap, 3);
}

#[test]
fn the_hashed_wheel_flavor_keeps_the_same_contract() {
    run_random_deadlines(2, QueueFlavor::HashedWheel, 4);
}

/// 8 slots for delays of up to 1000 ticks: most timers wait out many rotations.
#[test]
fn a_hashed_wheel_with_few_slots_keeps_the_same_contract() {
    run_random_deadlines(2, QueueFlavor::HashedWheelWithSlots(8), 5);
}

#[test]
fn duration_max_and_far_future_never_fire_and_never_overflow() {
    let (clock, service) =
        manual_with(TimerService::builder().resolution(Duration::from_micros(1)));
    let fired = Arc::new(AtomicUsize::new(0));
    let never = service.schedule(Duration::MAX, counting(&fired));
    // 2^64 µs (585 000 years) is past the tick range at 1 µs: "never".
    let beyond = clock
        .now()
        .checked_add(Duration::from_secs(600_000 * 365 * 86_400));
    let beyond = beyond.map(|at| service.schedule_at(at, counting(&fired)));
    // 100 years is in range: it must fire once the clock gets there.
    let century = service.schedule(Duration::from_secs(100 * 365 * 86_400), counting(&fired));
    assert_eq!(never.deadline(), None);
    assert!(century.deadline().is_some());
    for _ in 0..3 {
        clock.advance(Duration::MAX);
        service.settle();
    }
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "only the century timer fires"
    );
    assert!(!century.is_pending());
    assert!(never.is_pending());
    assert!(never.cancel());
    if let Some(beyond) = beyond {
        assert!(beyond.is_pending());
        assert!(beyond.cancel());
    }
    // A past instant fires at once.
    service.schedule_at(clock.now() - Duration::from_secs(1), counting(&fired));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 2);
}

#[test]
fn sub_tick_delay_waits_one_tick() {
    let (clock, service) = manual();
    let fired = Arc::new(AtomicUsize::new(0));
    let h = service.schedule(Duration::from_nanos(1), counting(&fired));
    assert_eq!(
        h.deadline(),
        Some(service.ticks().origin() + Duration::from_millis(1))
    );
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    clock.advance(Duration::from_micros(999));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    clock.advance(Duration::from_micros(1));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn reset_moves_a_pending_timer_and_fails_after_it_fired() {
    let (clock, service) = manual();
    let fired = Arc::new(AtomicUsize::new(0));
    let h = service.schedule(Duration::from_millis(10), counting(&fired));
    assert!(h.reset(Duration::from_millis(20)));
    clock.advance(Duration::from_millis(15));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    assert!(h.reset_at(clock.now() + Duration::from_millis(1)));
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    assert!(
        !h.reset(Duration::from_millis(1)),
        "a fired timer is not re-armed"
    );
    assert!(!h.cancel());
    clock.advance(Duration::from_secs(1));
    service.settle();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn wait_returns_when_fired_or_cancelled() {
    let (clock, service) = manual();
    let service = Arc::new(service);
    let a = Arc::new(service.schedule(Duration::from_millis(5), || {}));
    let b = Arc::new(service.schedule(Duration::from_millis(5), || {}));
    let waiters: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|h| thread::spawn(move || h.wait()))
        .collect();
    // Let the waiters register (not required for correctness: wait on a
    // no-longer-pending timer returns at once).
    thread::yield_now();
    assert!(b.cancel());
    clock.advance(Duration::from_millis(5));
    service.settle();
    for w in waiters {
        w.join().unwrap();
    }
    assert!(!a.is_pending() && !b.is_pending());
}

#[test]
fn try_schedule_respects_the_cap() {
    let (clock, service) = manual_with(TimerService::builder().max_pending(3));
    let hs: Vec<_> = (0..3)
        .map(|i| {
            service
                .try_schedule(Duration::from_millis(i + 1), || {})
                .unwrap()
        })
        .collect();
    let err = service
        .try_schedule(Duration::from_millis(1), || {})
        .unwrap_err();
    assert_eq!(err, tickwheel::service::ScheduleError::Full);
    assert!(hs[2].cancel());
    assert!(service
        .try_schedule(Duration::from_millis(9), || {})
        .is_ok());
    assert!(service
        .try_schedule(Duration::from_millis(9), || {})
        .is_err());
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert!(service
        .try_schedule(Duration::from_millis(9), || {})
        .is_ok());
}

/// A refused `try_schedule` gives the closure back, whole and not run, at the cap and after
/// shutdown, small or large (a large one is boxed only once it is stored).
#[test]
fn try_schedule_gives_the_closure_back() {
    use tickwheel::service::TryScheduleError;
    let (_clock, service) = manual_with(TimerService::builder().max_pending(1));
    let _taken = service
        .try_schedule(Duration::from_millis(5), || {})
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let (r, big) = (ran.clone(), [7u64; 8]);
    let job = move || {
        r.fetch_add(big.iter().sum::<u64>() as usize, Ordering::SeqCst);
    };
    let job = match service.try_schedule(Duration::from_millis(1), job) {
        Err(TryScheduleError::Full(job)) => job,
        other => panic!("expected Full, got {other:?}"),
    };
    job(); // the closure is still the caller's to run
    assert_eq!(ran.load(Ordering::SeqCst), 56);
    service.shutdown();
    let r = ran.clone();
    let small = service
        .try_schedule(Duration::ZERO, move || {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap_err();
    assert!(small.is_shut_down());
    small.into_inner()();
    assert_eq!(ran.load(Ordering::SeqCst), 57);
}

struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_discards_pending_timers_and_joins() {
    let (_clock, service) = manual();
    let dropped = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let (flag, ran) = (DropFlag(dropped.clone()), ran.clone());
            service.schedule(Duration::from_millis(i), move || {
                let _keep = flag;
                ran.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    service.settle(); // the 0 ms timer runs
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    service.shutdown();
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        10,
        "every closure dropped, none leaked"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(handles.iter().all(|h| !h.is_pending() && !h.cancel()));
    handles[5].wait();
    assert_eq!(service.stats().discarded, 9);
    let late = service.schedule(Duration::ZERO, || unreachable!());
    assert!(!late.is_pending());
    let err = service.try_schedule(Duration::ZERO, || {}).unwrap_err();
    assert_eq!(err, tickwheel::service::ScheduleError::ShutDown);
    service.shutdown(); // idempotent
}

/// Each round's callback schedules a due timer, which the timer thread (woken by that
/// schedule) and `settle` race to drain. `settle` must not return while the timer thread holds
/// it between the queue and the workers: run often enough that the race is hit.
#[test]
fn callbacks_can_schedule_and_settle_waits_for_them() {
    for round in 0..1000 {
        let (clock, service) = manual();
        let service = Arc::new(service);
        let hits = Arc::new(AtomicUsize::new(0));
        let (s2, h2) = (Arc::downgrade(&service), hits.clone());
        service.schedule(Duration::from_millis(1), move || {
            let h3 = h2.clone();
            if let Some(s) = s2.upgrade() {
                s.schedule(Duration::ZERO, move || {
                    h3.fetch_add(1, Ordering::SeqCst);
                });
            }
            h2.fetch_add(1, Ordering::SeqCst);
        });
        clock.advance(Duration::from_millis(1));
        service.settle();
        assert_eq!(hits.load(Ordering::SeqCst), 2, "round {round}");
    }
}

#[test]
fn stats_count_and_high_water() {
    let (clock, service) = manual();
    let hs: Vec<_> = (0..100)
        .map(|i| service.schedule(Duration::from_millis(i % 10 + 1), || {}))
        .collect();
    assert_eq!(service.stats().pending, 100);
    for h in &hs[..10] {
        assert!(h.cancel());
    }
    clock.advance(Duration::from_millis(10));
    service.settle();
    let stats = service.stats();
    assert_eq!((stats.pending, stats.high_water), (0, 100));
    assert_eq!(
        (stats.scheduled, stats.cancelled, stats.fired),
        (100, 10, 90)
    );
    // On a manual clock advanced past every deadline at once, lateness is what the clock says.
    assert_eq!(stats.lateness.count(), 90);
    assert!(stats.lateness.max() <= Duration::from_millis(9));
}

#[test]
fn shrink_to_fit_returns_the_memory_of_gone_timers_and_keeps_pending_ones() {
    for flavor in [
        QueueFlavor::Wheel,
        QueueFlavor::Heap,
        QueueFlavor::HashedWheel,
    ] {
        let (clock, service) = manual_with(TimerService::builder().queue(flavor));
        let runs = Arc::new(AtomicUsize::new(0));
        // Scheduled (and queued: `settle` lets the timer thread take the inbox in) first, so
        // it has the lowest entry and the burst is the queue's tail.
        let survivor = service.schedule(Duration::from_secs(60), counting(&runs));
        service.settle();
        let burst: Vec<_> = (0..10_000)
            .map(|_| service.schedule(Duration::from_millis(1), counting(&runs)))
            .collect();
        clock.advance(Duration::from_millis(1));
        service.settle();
        assert_eq!(runs.load(Ordering::SeqCst), 10_000);
        let before = service.stats();
        assert_eq!(before.pending, 1);
        assert!(before.capacity > 10_000, "{flavor:?}: {}", before.capacity);

        service.shrink_to_fit();
        let after = service.stats();
        assert!(after.capacity < 100, "{flavor:?}: {}", after.capacity);
        assert_eq!(after.pending, 1);
        assert!(
            burst.iter().all(|h| !h.cancel()),
            "fired handles stay stale"
        );
        assert!(survivor.is_pending());

        let later = service.schedule(Duration::from_secs(1), counting(&runs));
        clock.advance(Duration::from_secs(60));
        service.settle();
        assert_eq!(runs.load(Ordering::SeqCst), 10_002, "{flavor:?}");
        assert!(!survivor.cancel() && !later.cancel());
    }
}

#[test]
fn after_shrink_to_fit_new_timers_take_low_entries_so_a_later_call_frees_the_tail() {
    let (clock, service) = manual();
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..10_000 {
        service.schedule(Duration::from_millis(1), counting(&runs));
    }
    // The last entry stays in use past the burst, pinning the queue's tail.
    service.schedule(Duration::from_millis(2), counting(&runs));
    // Scheduled timers wait in their shard's inbox until the timer thread queues them: let it,
    // so that they take their queue entries in schedule order.
    service.settle();
    clock.advance(Duration::from_millis(1));
    service.settle();
    service.shrink_to_fit();
    assert!(
        service.stats().capacity > 10_000,
        "the tail is still in use"
    );

    // These reuse the lowest entries, not the last freed (the end of the burst).
    for _ in 0..100 {
        service.schedule(Duration::from_secs(60), counting(&runs));
    }
    service.settle();
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 10_001);
    service.shrink_to_fit();
    let stats = service.stats();
    assert_eq!(stats.pending, 100);
    assert!(stats.capacity < 1_000, "{}", stats.capacity);
}
