//! `schedule_detached`: timers without a handle, staged in an inbox and moved into the queues
//! by the timer thread. Deterministic on a `ManualClock`: they keep every promise of
//! `schedule` except the handle (never early, exactly once, deadline order, one thread's
//! order at equal deadlines — also mixed with handle timers —, `settle`, shutdown, the cap,
//! the stats).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::service::{ScheduleError, TimerHandle, TimerService};
use tickwheel::time::ManualClock;
use tickwheel_lab::SplitMix64;

const TIMERS: usize = 50_000;
const PRODUCERS: usize = 4;
/// Delays are uniform in [0, MAX_DELAY_US] µs; the resolution is 1 ms.
const MAX_DELAY_US: u64 = 1_000_000;

mod virtual_time;

/// [`virtual_time::manual_with_workers`], the service shared with producer threads.
fn manual(workers: usize) -> (ManualClock, Arc<TimerService>) {
    let (clock, service) = virtual_time::manual_with_workers(workers);
    (clock, Arc::new(service))
}

/// What one timer must do, and what it did.
struct Plan {
    delay: Vec<Duration>,
    /// Scheduled with a handle (`schedule`) rather than detached.
    with_handle: Vec<bool>,
    fired: Vec<AtomicU32>,
    early: AtomicUsize,
    order: Mutex<Vec<u32>>,
}

/// The tick (1 ms) a delay rounds up to when scheduled at the service's origin.
fn tick_of(delay: Duration) -> u64 {
    (delay.as_micros() as u64).div_ceil(1_000)
}

/// The callback of timer `id`: records its run, and whether it came before `due`.
fn callback(
    plan: &Arc<Plan>,
    clock: &ManualClock,
    id: usize,
    due: Instant,
) -> impl FnOnce() + Send {
    let (plan, clock) = (plan.clone(), clock.clone());
    move || {
        if clock.now() < due {
            plan.early.fetch_add(1, Ordering::SeqCst);
        }
        plan.fired[id].fetch_add(1, Ordering::SeqCst);
        plan.order.lock().unwrap().push(id as u32);
    }
}

/// Half the timers detached, half with a handle, from `PRODUCERS` threads (timer `id` from
/// thread `id % PRODUCERS`, in id order), then the clock moves in random steps; some handle
/// timers are cancelled between steps. With one worker, callbacks run in start order.
#[test]
fn detached_and_handle_timers_fire_once_in_order_never_early() {
    let (clock, service) = manual(1);
    let mut rng = SplitMix64::new(20);
    let plan = Arc::new(Plan {
        delay: (0..TIMERS)
            .map(|_| Duration::from_micros(rng.below(MAX_DELAY_US + 1)))
            .collect(),
        with_handle: (0..TIMERS).map(|_| rng.below(2) == 0).collect(),
        fired: (0..TIMERS).map(|_| AtomicU32::new(0)).collect(),
        early: AtomicUsize::new(0),
        order: Mutex::new(Vec::with_capacity(TIMERS)),
    });
    let start = clock.now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (service, clock, plan) = (service.clone(), clock.clone(), plan.clone());
            thread::spawn(move || {
                let mut handles: Vec<(usize, TimerHandle)> = Vec::new();
                for id in (p..TIMERS).step_by(PRODUCERS) {
                    let delay = plan.delay[id];
                    let f = callback(&plan, &clock, id, start + delay);
                    if plan.with_handle[id] {
                        handles.push((id, service.schedule(delay, f)));
                    } else {
                        service.schedule_detached(delay, f);
                    }
                }
                handles
            })
        })
        .collect();
    let handles: Vec<(usize, TimerHandle)> = producers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    let stats = service.stats();
    assert_eq!(stats.pending, TIMERS, "staged timers are pending");
    assert_eq!(stats.scheduled as usize, TIMERS);

    let mut cancelled = vec![false; TIMERS];
    while clock.elapsed() <= Duration::from_micros(MAX_DELAY_US + 1_000) {
        for _ in 0..50 {
            let (id, handle) = &handles[rng.below(handles.len() as u64) as usize];
            cancelled[*id] |= handle.cancel();
        }
        clock.advance(Duration::from_micros(rng.below(20_000)));
        service.settle();
        let now_tick = (clock.elapsed().as_micros() as u64) / 1_000;
        for (id, fired) in plan.fired.iter().enumerate() {
            let due = tick_of(plan.delay[id]) <= now_tick;
            let expected = u32::from(due && !cancelled[id]);
            assert_eq!(fired.load(Ordering::SeqCst), expected, "timer {id}");
        }
    }
    assert_eq!(plan.early.load(Ordering::SeqCst), 0, "a callback ran early");
    // Deadline order; at equal ticks one producer's timers in schedule (id) order.
    let order = plan.order.lock().unwrap();
    for pair in order.windows(2) {
        let (a, b) = (pair[0] as usize, pair[1] as usize);
        let (ta, tb) = (tick_of(plan.delay[a]), tick_of(plan.delay[b]));
        assert!(ta <= tb, "timer {a} (tick {ta}) ran before {b} (tick {tb})");
        if ta == tb && a % PRODUCERS == b % PRODUCERS {
            assert!(a < b, "same tick, same producer: {a} scheduled after {b}");
        }
    }
    let stats = service.stats();
    let n_cancelled = cancelled.iter().filter(|c| **c).count();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.scheduled as usize, TIMERS);
    assert_eq!(stats.cancelled as usize, n_cancelled);
    assert_eq!(stats.fired as usize, TIMERS - n_cancelled);
}

/// Producers stage timers while the clock moves and the service drains: each runs once,
/// never before its deadline (taken from the clock before it was scheduled).
#[test]
fn timers_staged_while_the_clock_moves_fire_once_never_early() {
    const N: usize = 20_000;
    let (clock, service) = manual(2);
    let plan = Arc::new(Plan {
        delay: Vec::new(),
        with_handle: Vec::new(),
        fired: (0..N).map(|_| AtomicU32::new(0)).collect(),
        early: AtomicUsize::new(0),
        order: Mutex::new(Vec::with_capacity(N)),
    });
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let (service, clock, plan) = (service.clone(), clock.clone(), plan.clone());
            thread::spawn(move || {
                let mut rng = SplitMix64::new(p as u64);
                for id in (p..N).step_by(2) {
                    let delay = Duration::from_micros(rng.below(30_000));
                    let due = clock.now() + delay;
                    service.schedule_detached(delay, callback(&plan, &clock, id, due));
                }
            })
        })
        .collect();
    let mut rng = SplitMix64::new(7);
    while producers.iter().any(|p| !p.is_finished()) {
        clock.advance(Duration::from_micros(rng.below(2_000)));
        service.settle();
    }
    producers.into_iter().for_each(|p| p.join().unwrap());
    clock.advance(Duration::from_millis(31));
    service.settle();
    for (id, fired) in plan.fired.iter().enumerate() {
        assert_eq!(fired.load(Ordering::SeqCst), 1, "timer {id}");
    }
    assert_eq!(plan.early.load(Ordering::SeqCst), 0, "a callback ran early");
    let stats = service.stats();
    assert_eq!(
        (stats.pending, stats.fired, stats.scheduled),
        (0, N as u64, N as u64)
    );
}

/// Counts drops of the closure it is captured by.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_discards_staged_timers_and_later_ones_are_dropped_at_once() {
    let (clock, service) = manual(1);
    let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let timer = |_: u64| {
        let (ran, guard) = (ran.clone(), DropCount(dropped.clone()));
        move || {
            let _guard = guard;
            ran.fetch_add(1, Ordering::SeqCst);
        }
    };
    // Enough for the inbox to wake the timer thread and to make this thread wait for it.
    for i in 0..50_000 {
        service.schedule_detached(Duration::from_secs(10 + i), timer(i));
    }
    service.schedule_detached(Duration::from_millis(1), timer(0));
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(service.stats().pending, 50_000);
    service.shutdown();
    assert_eq!(service.stats().discarded, 50_000);
    assert_eq!(service.stats().pending, 0);
    assert_eq!(dropped.load(Ordering::SeqCst), 50_001);
    service.schedule_detached(Duration::ZERO, timer(0));
    assert_eq!(dropped.load(Ordering::SeqCst), 50_002, "dropped at once");
    clock.advance(Duration::from_secs(1));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// Queued detached timers live in two places: the shard's calendar (due within 2048 ticks of
/// the last drained one) and the queue (later). Both fire at their ticks, count as pending,
/// and are discarded (dropped, never run) at shutdown.
#[test]
fn near_and_far_detached_timers_fire_in_order_and_are_discarded_at_shutdown() {
    let (clock, service) = manual(1);
    let (order, dropped) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(AtomicUsize::new(0)),
    );
    for ms in [10_000u64, 5, 3_000, 1_500, 1_000, 1_500] {
        let (order, guard) = (order.clone(), DropCount(dropped.clone()));
        service.schedule_detached(Duration::from_millis(ms), move || {
            let _guard = guard;
            order.lock().unwrap().push(ms);
        });
    }
    service.settle(); // queues them: nothing is due yet
    assert_eq!(service.stats().pending, 6);
    clock.advance(Duration::from_millis(1_000));
    service.settle();
    assert_eq!(*order.lock().unwrap(), [5, 1_000]);
    clock.advance(Duration::from_millis(500));
    service.settle();
    assert_eq!(*order.lock().unwrap(), [5, 1_000, 1_500, 1_500]);
    // Scheduled now, due at 1500 + 1600 ms: in the calendar's reach this time.
    let o = order.clone();
    service.schedule_detached(Duration::from_millis(1_600), move || {
        o.lock().unwrap().push(3_100)
    });
    service.settle();
    assert_eq!(service.stats().pending, 3);
    service.shutdown();
    let stats = service.stats();
    assert_eq!((stats.discarded, stats.pending, stats.fired), (3, 0, 4));
    assert_eq!(order.lock().unwrap().len(), 4, "a discarded timer ran");
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        6,
        "every closure was dropped"
    );
}

#[test]
fn staged_timers_count_toward_the_cap_without_being_refused() {
    let (clock, service) = virtual_time::manual_with(TimerService::builder().max_pending(2));
    for _ in 0..3 {
        service.schedule_detached(Duration::from_millis(5), || {});
    }
    assert_eq!(service.stats().pending, 3);
    let refused = service.try_schedule(Duration::from_millis(5), || {});
    assert_eq!(refused.unwrap_err(), ScheduleError::Full);
    clock.advance(Duration::from_millis(5));
    service.settle();
    assert_eq!(service.stats().fired, 3);
    assert!(service
        .try_schedule(Duration::from_millis(5), || {})
        .is_ok());
}

#[test]
fn schedule_detached_at_rounds_up_and_past_instants_fire_at_once() {
    let (clock, service) = manual(1);
    let runs = Arc::new(AtomicUsize::new(0));
    let count = || {
        let runs = runs.clone();
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
        }
    };
    let origin = clock.now();
    service.schedule_detached_at(origin + Duration::from_micros(1_500), count());
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "never early");
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    service.schedule_detached_at(origin, count());
    service.schedule_detached(Duration::MAX, count());
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the past fires, Duration::MAX never"
    );
    assert_eq!(service.stats().pending, 1);
}

/// A callback that stages an already-due timer: `settle` waits for that one too.
#[test]
fn settle_waits_for_timers_staged_by_callbacks() {
    let (clock, service) = manual(2);
    let runs = Arc::new(AtomicUsize::new(0));
    let (inner_service, inner_runs) = (service.clone(), runs.clone());
    service.schedule_detached(Duration::from_millis(1), move || {
        let runs = inner_runs.clone();
        inner_service.schedule_detached(Duration::ZERO, move || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        inner_runs.fetch_add(1, Ordering::SeqCst);
    });
    clock.advance(Duration::from_millis(1));
    service.settle();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(service.stats().pending, 0);
}
