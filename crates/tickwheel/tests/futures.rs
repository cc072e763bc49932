//! The futures on a `ManualClock` (move the clock, `settle()`, then poll), under three
//! executors (futures::executor, tokio without its time driver, smol), and the edge cases:
//! `Duration::MAX`, drop-cancels, reset, shutdown. Real time appears only in one smoke test per
//! executor, which asserts ordering and never-early, never durations.

use std::future::{pending, ready, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use tickwheel::future::{Elapsed, FutureExt, Interval, MissedTickBehavior, Sleep, Timeout};

mod virtual_time;
use virtual_time::{advance, manual, manual_with};

const MS: Duration = Duration::from_millis(1);

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Count {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

fn counter() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (count.clone(), Waker::from(count))
}

fn poll<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn futures_are_send_sync_unpin() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<Sleep>();
    check::<Interval>();
    check::<Timeout<std::future::Ready<u8>>>();
    check::<Elapsed>();
}

#[test]
fn sleep_completes_at_its_tick_never_early() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let mut sleep = service.sleep(10 * MS);
    assert_eq!(sleep.deadline(), Some(clock.now() + 10 * MS));
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, 9 * MS);
    assert_eq!(count.get(), 0, "woken early");
    assert!(!sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, MS);
    assert_eq!(count.get(), 1, "the timer thread wakes the task once");
    assert!(sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_ready());
    assert_eq!(service.stats().fired, 1);
}

/// The timer thread wakes at the deadline's tick, rounded up; a poll completes as soon as the
/// clock reads at or after the deadline instant. Neither is ever early.
#[test]
fn sub_tick_sleep_wakes_at_the_next_tick_and_is_never_early() {
    let (clock, service) = manual();
    clock.advance(Duration::from_micros(500)); // mid-tick 0
    let (count, waker) = counter();
    let mut sleep = service.sleep(Duration::from_micros(100)); // due at 0.6 ms: tick 1
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, Duration::from_micros(99)); // 0.599 ms
    assert!(!sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, Duration::from_micros(1)); // 0.6 ms: the deadline
    assert!(sleep.is_elapsed());
    assert_eq!(count.get(), 0, "the wake-up waits for the tick boundary");
    advance(&clock, &service, Duration::from_micros(400)); // 1 ms: tick 1
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_ready());
}

/// A poll that completes because the clock passed the deadline, before the timer's tick,
/// takes the timer out: the task that got `Ready` is not woken again at the tick.
#[test]
fn a_sleep_done_by_the_clock_is_not_woken_afterwards() {
    let (clock, service) = manual();
    clock.advance(Duration::from_micros(500));
    let (count, waker) = counter();
    let mut sleep = service.sleep(Duration::from_micros(100)); // due at 0.6 ms: tick 1
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, Duration::from_micros(100)); // 0.6 ms: the deadline
    assert!(poll(&mut sleep, &waker).is_ready());
    advance(&clock, &service, Duration::from_micros(400)); // 1 ms: tick 1
    assert_eq!(count.get(), 0, "woken after Ready");
    assert!(poll(&mut sleep, &waker).is_ready(), "done stays done");
    let stats = service.stats();
    assert_eq!((stats.fired, stats.cancelled, stats.pending), (0, 1, 0));
    drop(sleep);
    assert_eq!(service.stats().cancelled, 1);
}

/// `sleep(d)`'s first poll does not read the clock: polled after its deadline it registers a
/// past-due timer, which the timer thread fires at once.
#[test]
fn late_first_poll_is_woken_at_once() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let mut sleep = service.sleep(10 * MS);
    clock.advance(20 * MS);
    assert!(sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_pending());
    service.settle();
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_ready());
}

#[test]
fn past_deadline_is_ready_at_first_poll_without_a_timer() {
    let (clock, service) = manual();
    let (_, waker) = counter();
    let mut sleep = service.sleep_until(clock.now());
    assert!(poll(&mut sleep, &waker).is_ready());
    let mut zero = service.sleep(Duration::ZERO);
    assert!(poll(&mut zero, &waker).is_ready());
    assert_eq!(service.stats().scheduled, 0);
}

#[test]
fn duration_max_never_fires_and_never_overflows() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let mut never = service.sleep(Duration::MAX);
    assert_eq!(never.deadline(), None);
    // An instant far beyond the tick range (2^64 ms is ~584 million years; this is ~10k).
    let far = clock.now() + Duration::from_secs(10_000 * 365 * 86_400);
    let mut far_sleep = service.sleep_until(far);
    assert!(poll(&mut never, &waker).is_pending());
    assert!(poll(&mut far_sleep, &waker).is_pending());
    advance(&clock, &service, Duration::from_secs(100 * 365 * 86_400));
    advance(&clock, &service, Duration::MAX); // saturates, no overflow
    assert_eq!(count.get(), 0);
    assert!(!never.is_elapsed());
    assert!(poll(&mut never, &waker).is_pending());
    let mut t = service.timeout(Duration::MAX, pending::<()>());
    assert!(poll(&mut t, &waker).is_pending());
    assert_eq!(t.deadline(), None);
    drop((never, t));
    assert_eq!(service.stats().cancelled, 2);
}

#[test]
fn drop_cancels_and_unpolled_drop_schedules_nothing() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    drop(service.sleep(5 * MS));
    assert_eq!(service.stats().scheduled, 0, "unpolled: no timer");
    let mut sleep = service.sleep(5 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    assert_eq!(service.stats().pending, 1);
    drop(sleep);
    let stats = service.stats();
    assert_eq!((stats.pending, stats.cancelled), (0, 1));
    advance(&clock, &service, 10 * MS);
    assert_eq!(count.get(), 0);
    assert_eq!(service.stats().fired, 0);
}

#[test]
fn reset_moves_a_pending_sleep_both_ways() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let start = clock.now();
    let mut sleep = service.sleep(10 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    sleep.reset(start + 20 * MS);
    assert_eq!(sleep.deadline(), Some(start + 20 * MS));
    advance(&clock, &service, 10 * MS);
    // Later: deferred. The timer fired at the deadline it was queued for and woke the task,
    // whose poll finds the sleep not yet due and re-arms it at 20 ms.
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_pending());
    // Earlier: moved in place, and it keeps the waker.
    sleep.reset(start + 15 * MS);
    advance(&clock, &service, 4 * MS);
    assert_eq!(count.get(), 1);
    advance(&clock, &service, MS);
    assert_eq!(count.get(), 2);
    assert!(poll(&mut sleep, &waker).is_ready());
    assert_eq!(service.stats().pending, 0);
    advance(&clock, &service, 10 * MS);
    assert_eq!(count.get(), 2, "woken after ready");
}

#[test]
fn reset_after_firing_rearms() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let start = clock.now();
    let mut sleep = service.sleep(10 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, 10 * MS);
    assert!(poll(&mut sleep, &waker).is_ready());
    sleep.reset(start + 30 * MS);
    assert!(!sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_pending(), "pending again");
    advance(&clock, &service, 10 * MS);
    assert_eq!(count.get(), 1, "the first firing only");
    advance(&clock, &service, 10 * MS);
    assert_eq!(count.get(), 2);
    assert!(poll(&mut sleep, &waker).is_ready());
    assert_eq!(service.stats().fired, 2);
}

#[test]
fn reset_keeps_the_waker_of_a_pending_poll() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let start = clock.now();
    let mut sleep = service.sleep(20 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    sleep.reset(start + 10 * MS);
    advance(&clock, &service, 9 * MS);
    assert_eq!(count.get(), 0);
    advance(&clock, &service, MS);
    // Not polled since the reset: the waker of the earlier poll gets the new deadline.
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_ready());
}

#[test]
fn a_later_reset_wakes_the_task_at_the_queued_deadline_and_never_completes_early() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let start = clock.now();
    let mut sleep = service.sleep(10 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    for ms in 11..=30 {
        sleep.reset(start + ms * MS); // an idle timeout pushed back: no lock, nothing moves
    }
    assert_eq!(service.stats().pending, 1);
    advance(&clock, &service, 10 * MS);
    assert_eq!(count.get(), 1, "woken at the deadline it was queued for");
    assert!(!sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_pending(), "done 20 ms early");
    advance(&clock, &service, 19 * MS);
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_pending());
    advance(&clock, &service, MS);
    assert_eq!(count.get(), 2);
    assert!(poll(&mut sleep, &waker).is_ready());
    assert_eq!(service.stats().fired, 2);
}

#[test]
fn timeout_on_a_ready_future_registers_nothing() {
    let (_, service) = manual();
    let (_, waker) = counter();
    let mut t = service.timeout(10 * MS, ready(5));
    assert_eq!(poll(&mut t, &waker), Poll::Ready(Ok(5)));
    assert_eq!(service.stats().scheduled, 0);
}

#[test]
fn timeout_elapses_at_its_deadline_and_cancels_when_done() {
    let (clock, service) = manual();
    let (_, waker) = counter();
    let mut late = service.timeout(10 * MS, pending::<()>());
    assert!(poll(&mut late, &waker).is_pending());
    advance(&clock, &service, 9 * MS);
    assert!(poll(&mut late, &waker).is_pending());
    advance(&clock, &service, MS);
    assert_eq!(poll(&mut late, &waker), Poll::Ready(Err(err())));

    let (tx, rx) = futures::channel::oneshot::channel::<u8>();
    let mut in_time = service.timeout(10 * MS, rx);
    assert!(poll(&mut in_time, &waker).is_pending());
    tx.send(3).unwrap();
    assert!(matches!(poll(&mut in_time, &waker), Poll::Ready(Ok(Ok(3)))));
    drop(in_time);
    assert_eq!(service.stats().cancelled, 1);
}

/// An `Elapsed` from a real timeout (its constructor is private).
fn err() -> Elapsed {
    let (clock, service) = manual();
    let (_, waker) = counter();
    let mut t = service.timeout(MS, pending::<()>());
    assert!(poll(&mut t, &waker).is_pending());
    advance(&clock, &service, MS);
    match poll(&mut t, &waker) {
        Poll::Ready(Err(e)) => e,
        other => panic!("not elapsed: {other:?}"),
    }
}

#[test]
fn elapsed_is_an_io_timed_out_error() {
    let e = err();
    assert_eq!(e.to_string(), "deadline has elapsed");
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert_eq!(boxed.to_string(), "deadline has elapsed");
}

#[test]
fn future_ext_timeout_uses_the_default_service() {
    let out = futures::executor::block_on(async { 9 }.timeout(Duration::from_secs(60)));
    assert_eq!(out, Ok(9));
}

/// Ticks `interval` as long as ticks are ready now; returns their offsets from `start` in ms.
fn ready_ticks(interval: &mut Interval, start: Instant, waker: &Waker) -> Vec<u64> {
    let mut cx = Context::from_waker(waker);
    let mut out = Vec::new();
    while let Poll::Ready(at) = interval.poll_tick(&mut cx) {
        out.push((at - start).as_millis() as u64);
        assert!(out.len() < 100, "runaway interval");
    }
    out
}

/// Ticks at 0 and 10, then falls behind to 45 ms; returns the ticks seen at 45 and at 50..70.
fn fall_behind(behavior: MissedTickBehavior) -> (Vec<u64>, Vec<u64>) {
    let (clock, service) = manual();
    let (_, waker) = counter();
    let start = clock.now();
    let mut interval = service.interval(10 * MS);
    interval.set_missed_tick_behavior(behavior);
    assert_eq!(ready_ticks(&mut interval, start, &waker), [0]);
    advance(&clock, &service, 10 * MS);
    assert_eq!(ready_ticks(&mut interval, start, &waker), [10]);
    advance(&clock, &service, 35 * MS);
    let at_45 = ready_ticks(&mut interval, start, &waker);
    let mut later = Vec::new();
    for _ in 0..4 {
        advance(&clock, &service, 5 * MS);
        later.extend(ready_ticks(&mut interval, start, &waker));
    }
    (at_45, later)
}

#[test]
fn interval_burst_catches_up_on_schedule() {
    let (at_45, later) = fall_behind(MissedTickBehavior::Burst);
    assert_eq!(at_45, [20, 30, 40]);
    assert_eq!(later, [50, 60]);
}

#[test]
fn interval_delay_restarts_from_the_late_tick() {
    let (at_45, later) = fall_behind(MissedTickBehavior::Delay);
    // Tick 20 is yielded at 45: the next is 55, then 65.
    assert_eq!(at_45, [20]);
    assert_eq!(later, [55, 65]);
}

#[test]
fn interval_skip_jumps_to_the_next_multiple() {
    let (at_45, later) = fall_behind(MissedTickBehavior::Skip);
    assert_eq!(at_45, [20]);
    assert_eq!(later, [50, 60]);
}

#[test]
fn interval_edge_periods() {
    let (clock, service) = manual();
    let (_, waker) = counter();
    let start = clock.now();
    let mut zero = service.interval(Duration::ZERO);
    assert_eq!(zero.period(), service.resolution());
    assert_eq!(ready_ticks(&mut zero, start, &waker), [0]);
    let mut later = service.interval_at(start + 5 * MS, 10 * MS);
    assert_eq!(ready_ticks(&mut later, start, &waker), Vec::<u64>::new());
    advance(&clock, &service, 5 * MS);
    assert_eq!(ready_ticks(&mut later, start, &waker), [5]);
    let mut huge = service.interval(Duration::MAX);
    assert_eq!(ready_ticks(&mut huge, start, &waker), [5]);
    advance(&clock, &service, Duration::from_secs(1_000_000));
    assert_eq!(ready_ticks(&mut huge, start, &waker), Vec::<u64>::new());
}

#[test]
fn shutdown_wakes_a_pending_sleep_once_and_nothing_wakes_it_again() {
    let (clock, service) = manual();
    let (count, waker) = counter();
    let mut sleep = service.sleep(10 * MS);
    assert!(poll(&mut sleep, &waker).is_pending());
    service.shutdown();
    assert_eq!(count.get(), 1);
    assert!(poll(&mut sleep, &waker).is_pending());
    // A sleep first polled after shutdown is woken at once (its timer is refused).
    let (after_count, after_waker) = counter();
    let mut after = service.sleep(10 * MS);
    assert!(poll(&mut after, &after_waker).is_pending());
    assert_eq!(after_count.get(), 1);
    clock.advance(5 * MS);
    assert!(
        poll(&mut sleep, &waker).is_pending(),
        "never early, even discarded"
    );
    clock.advance(5 * MS);
    // Nothing wakes a discarded sleep; polled after its deadline it is done (documented).
    assert_eq!((count.get(), after_count.get()), (1, 1));
    assert!(sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_ready());
    drop((sleep, after)); // nothing left to cancel: no panic
}

#[test]
fn a_poll_from_another_task_moves_the_wakeup_to_it() {
    let (clock, service) = manual();
    let (first, first_waker) = counter();
    let (second, second_waker) = counter();
    let mut sleep = service.sleep(10 * MS);
    assert!(poll(&mut sleep, &first_waker).is_pending());
    // Polled again by the same task: the waker in the queue entry is kept.
    assert!(poll(&mut sleep, &first_waker).is_pending());
    // Moved to another task: only that task is woken.
    assert!(poll(&mut sleep, &second_waker).is_pending());
    advance(&clock, &service, 10 * MS);
    assert_eq!((first.get(), second.get()), (0, 1));
    assert!(poll(&mut sleep, &second_waker).is_ready());
    // Woken wakers are consumed, replaced ones dropped: only the test holds them now.
    assert_eq!(Arc::strong_count(&first), 2);
    assert_eq!(Arc::strong_count(&second), 2);
}

/// Many tasks on one executor, each sleeping a seeded delay; the clock moves a tick at a time
/// and every task must complete exactly at its tick.
#[test]
fn many_sleeps_on_a_local_pool_complete_exactly_at_their_tick() {
    let (clock, service) = manual();
    let start = clock.now();
    let mut pool = LocalPool::new();
    let done: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..500 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = seed % 200;
        // A spawned task outlives the borrow of `service`: an owned sleep.
        let sleep = service.sleep(Duration::from_millis(delay)).into_owned();
        let done = done.clone();
        let clock = clock.clone();
        pool.spawner()
            .spawn_local(async move {
                sleep.await;
                let at = (clock.now() - start).as_millis() as u64;
                done.lock().unwrap().push((delay, at));
            })
            .unwrap();
    }
    pool.run_until_stalled();
    for _ in 0..200 {
        advance(&clock, &service, MS);
        pool.run_until_stalled();
    }
    let done = done.lock().unwrap();
    assert_eq!(done.len(), 500);
    assert!(done.iter().all(|&(delay, at)| delay == at), "early or late");
}

/// Idle timeouts on a 2-worker tokio runtime (no tokio time driver), pushed back and pulled
/// in by messages while the test thread moves the virtual clock: resets later than the queued
/// deadline (deferred, no lock), earlier ones (moved), fires at queued deadlines racing the
/// re-arming polls, and tasks migrating between workers. A sleep that completes re-arms
/// itself a few ticks ahead until the task's messages end. Every completion must find the
/// clock at or past the deadline the task last set, and once the messages end and the clock
/// passes every deadline, every task must finish (no wake-up lost).
#[test]
fn idle_timeouts_reset_both_ways_on_a_multi_thread_runtime_never_early_never_lost() {
    const TASKS: usize = 48;
    const ROUNDS: usize = 150;
    let (clock, service) = manual();
    let service = Arc::new(service);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let early: Arc<Mutex<Vec<(usize, Duration)>>> = Arc::default();
    let closed = Arc::new(AtomicUsize::new(0));
    let fires = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        senders.push(tx);
        let (service, clock) = (service.clone(), clock.clone());
        let (early, closed, fires) = (early.clone(), closed.clone(), fires.clone());
        let started = started.clone();
        tasks.push(rt.spawn(async move {
            let mut deadline = clock.now() + 5 * MS;
            let mut sleep = service.sleep_until(deadline).into_owned();
            started.fetch_add(1, Ordering::SeqCst);
            let mut open = true;
            loop {
                tokio::select! {
                    message = rx.recv(), if open => match message {
                        Some(ms) => {
                            deadline = clock.now() + Duration::from_millis(ms);
                            sleep.reset(deadline);
                        }
                        None => {
                            open = false;
                            closed.fetch_add(1, Ordering::SeqCst);
                        }
                    },
                    () = &mut sleep => {
                        let now = clock.now();
                        if now < deadline {
                            early.lock().unwrap().push((task, deadline - now));
                        }
                        fires.fetch_add(1, Ordering::SeqCst);
                        if !open {
                            return;
                        }
                        deadline = now + 3 * MS;
                        sleep.reset(deadline);
                    }
                }
            }
        }));
    }
    // Every task holds its first sleep (due 5 ms after the start) before the clock moves: a
    // task that first ran after the last round would set every deadline from the end, and
    // no sleep could lapse while its messages come in.
    wait_for_count(&started, TASKS, "tasks not started");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..ROUNDS {
        for tx in &senders {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed % 3 != 0 {
                tx.send(1 + (seed >> 8) % 20).unwrap(); // 1..=20 ms from the task's now
            }
        }
        advance(&clock, &service, MS);
    }
    drop(senders);
    wait_for_count(&closed, TASKS, "messages not drained");
    for _ in 0..25 {
        advance(&clock, &service, MS);
    }
    let began = Instant::now();
    for (task, handle) in tasks.iter().enumerate() {
        while !handle.is_finished() {
            let waited = began.elapsed();
            assert!(
                waited < Duration::from_secs(60),
                "task {task} never woken: lost"
            );
            std::thread::yield_now();
        }
    }
    for handle in tasks {
        rt.block_on(handle).unwrap();
    }
    let early = early.lock().unwrap();
    let first: Vec<_> = early.iter().take(5).collect();
    assert!(
        early.is_empty(),
        "{} early, first (task, how early): {first:?}",
        early.len()
    );
    // Each task fires once after its messages end; more means sleeps also lapsed and were
    // re-armed mid-run, racing the resets (the case this test is for).
    let fires = fires.load(Ordering::SeqCst);
    assert!(
        fires > TASKS,
        "no sleep fired before the messages ended ({fires} fires)"
    );
}

/// Yields until `counter` reaches `count`; panics with `what` after 60 s.
fn wait_for_count(counter: &AtomicUsize, count: usize, what: &str) {
    let began = Instant::now();
    while counter.load(Ordering::SeqCst) < count {
        assert!(began.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::yield_now();
    }
}

/// Real clock, tokio *without* its time driver: our timer thread does the waking.
#[test]
fn smoke_tokio_without_tokio_time() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(ordering_and_never_early());
}

#[test]
fn smoke_futures_executor() {
    futures::executor::block_on(ordering_and_never_early());
}

#[test]
fn smoke_smol() {
    smol::block_on(ordering_and_never_early());
}

/// Three sleeps joined all complete, none before its deadline; a timeout elapses around a
/// pending future and passes a ready one through; an interval ticks on schedule. (Completion
/// *order* is not asserted: under load two deadlines can be woken by one drain, and `join`
/// then polls them in argument order. Deadline order is asserted on the manual clock.)
async fn ordering_and_never_early() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let one = |ms: u64| {
        let order = order.clone();
        async move {
            tickwheel::sleep(Duration::from_millis(ms)).await;
            assert!(Instant::now() >= start + Duration::from_millis(ms), "early");
            order.lock().unwrap().push(ms);
        }
    };
    futures::join!(one(6), one(2), one(4));
    let mut order = order.lock().unwrap().clone();
    order.sort_unstable();
    assert_eq!(order, [2, 4, 6]);
    let late = tickwheel::timeout(2 * MS, pending::<()>()).await;
    assert!(late.is_err());
    assert_eq!(tickwheel::timeout(2 * MS, ready(1)).await, Ok(1));
    let mut interval = tickwheel::interval(MS);
    let first = interval.tick().await;
    let second = interval.tick().await;
    assert_eq!(second - first, MS);
    assert!(Instant::now() >= second);
}

/// A waker that records its id in a shared log when woken.
struct Logged {
    id: u32,
    log: Arc<Mutex<Vec<u32>>>,
}

impl Wake for Logged {
    fn wake(self: Arc<Self>) {
        self.log.lock().unwrap().push(self.id);
    }
}

/// Sleeps first polled on different threads (so registered in different shards) that fall due
/// in one drain are woken in deadline order, not grouped by thread: four threads each poll
/// sleeps with interleaved deadlines (thread `j` the ones at `4k + j + 1` ms) once and hand
/// them back; the clock jumps past all of them.
#[test]
fn sleeps_from_different_shards_wake_in_deadline_order() {
    const PER_THREAD: u32 = 50;
    let (clock, service) = manual_with(tickwheel::TimerService::builder().shards(4));
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut sleeps = Vec::new();
    for j in 0..4 {
        let batch: Vec<Sleep<'static>> = (0..PER_THREAD)
            .map(|k| service.sleep((4 * k + j + 1) * MS).into_owned())
            .collect();
        let log = log.clone();
        let polled = std::thread::spawn(move || {
            let mut batch = batch;
            for (k, sleep) in (0..).zip(batch.iter_mut()) {
                let id = 4 * k + j + 1;
                let waker = Waker::from(Arc::new(Logged {
                    id,
                    log: log.clone(),
                }));
                let poll = Pin::new(sleep).poll(&mut Context::from_waker(&waker));
                assert!(poll.is_pending());
            }
            batch
        })
        .join()
        .unwrap();
        sleeps.extend(polled);
    }
    advance(&clock, &service, 4 * PER_THREAD * MS);
    let woken = log.lock().unwrap().clone();
    let expected: Vec<u32> = (1..=4 * PER_THREAD).collect();
    assert_eq!(
        woken, expected,
        "deadlines (ms) in the order their wakers were woken"
    );
    drop(sleeps);
}

/// Not a test: the measurement behind `Builder::busy_wait`'s default and DESIGN-NOTES' answer
/// on the CPU of sleeps in a tokio runtime. 10^4 tasks sleep 0.5-1.5 s in a loop in a 2-worker
/// tokio runtime, on a service with each `busy_wait` of `TW_BUSY_WAIT_US` (microseconds,
/// comma-separated; default `100,50,25,0`) and the `wake_interval` of `TW_WAKE_INTERVAL_US`
/// (default 0), and on tokio's own timer; it prints the process's CPU (cores, over the middle
/// `TW_SECS` seconds, default 8) and how late the wake-ups came after the deadline asked for
/// and, for the service, after the start of the deadline's tick.
///
/// ```text
/// cargo test --release -p tickwheel --test futures -- --ignored --nocapture sleepers_cpu
/// ```
#[test]
#[ignore = "a measurement, not a test: run with --ignored --nocapture"]
fn sleepers_cpu_and_lateness() {
    let secs: u64 = std::env::var("TW_SECS").map_or(8, |s| s.parse().unwrap());
    let caps = std::env::var("TW_BUSY_WAIT_US").unwrap_or_else(|_| "100,50,25,0".into());
    for cap in caps
        .split(',')
        .map(|c| Some(c.trim().parse::<u64>().unwrap()))
        .chain([None])
    {
        sleepers_run(cap, 10_000, secs);
    }
}

/// The process's user + system CPU time, in seconds (Linux; 10 ms granularity).
fn process_cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15; the parse skips field 3, the state letter.
    f.get(10..12).map_or(0.0, |t| (t[0] + t[1]) / 100.0)
}

fn sleepers_run(busy_wait_us: Option<u64>, tasks: u64, secs: u64) {
    let service = Arc::new(
        tickwheel::TimerService::builder()
            .busy_wait(Duration::from_micros(busy_wait_us.unwrap_or(0)))
            .wake_interval(Duration::from_micros(
                std::env::var("TW_WAKE_INTERVAL_US").map_or(0, |s| s.parse().unwrap()),
            ))
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let from = Instant::now() + Duration::from_secs(2);
    let to = from + Duration::from_secs(secs);
    let end = to + Duration::from_secs(2);
    // (after the deadline, after the start of its tick), in µs
    let late: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let cores = rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let (service, late) = (service.clone(), late.clone());
                tokio::spawn(async move {
                    let mut seed = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut mine = Vec::new();
                    loop {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let d = Duration::from_micros(500_000 + seed % 1_000_000);
                        let deadline = Instant::now() + d;
                        if deadline > end {
                            break;
                        }
                        let due = if busy_wait_us.is_some() {
                            service.sleep(d).await;
                            let ticks = service.ticks();
                            ticks.instant_of(ticks.deadline_tick(deadline)).unwrap()
                        } else {
                            tokio::time::sleep(d).await;
                            deadline
                        };
                        let now = Instant::now();
                        if (from..to).contains(&now) {
                            let us = |t| now.saturating_duration_since(t).as_micros() as u64;
                            mine.push((us(deadline), us(due)));
                        }
                    }
                    late.lock().unwrap().extend(mine);
                })
            })
            .collect();
        tokio::time::sleep_until(from.into()).await;
        let cpu = process_cpu_secs();
        tokio::time::sleep_until(to.into()).await;
        let cpu = process_cpu_secs() - cpu;
        for h in handles {
            h.await.unwrap();
        }
        cpu / secs as f64
    });
    let late = std::mem::take(&mut *late.lock().unwrap());
    let quantiles = |mut v: Vec<u64>| {
        v.sort_unstable();
        let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize];
        format!("p50 {} p99 {} max {}", q(0.5), q(0.99), v[v.len() - 1])
    };
    let who = busy_wait_us.map_or("tokio timer".into(), |us| format!("busy_wait {us:>3} µs"));
    let after_tick = match busy_wait_us {
        Some(_) => format!(
            ", after the tick {}",
            quantiles(late.iter().map(|l| l.1).collect())
        ),
        None => String::new(),
    };
    println!(
        "{who}: {cores:.3} cores, {} wake-ups, late µs after the deadline {}{after_tick}",
        late.len(),
        quantiles(late.iter().map(|l| l.0).collect()),
    );
}
