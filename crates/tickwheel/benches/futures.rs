//! The futures' hot paths beside tokio's equivalents in the same run:
//!
//! ```text
//! cargo bench -p tickwheel --bench futures
//! ```
//!
//! * `sleep_unpolled`: create a 10 s sleep and drop it without polling.
//! * `sleep_poll_drop`: create a 10 s sleep, poll it once with a no-op waker (that registers
//!   its timer), drop it (that cancels it).
//! * `timeout_ready`: `timeout(10 s, std::future::ready(1))` polled once (completes).
//! * `sleep_repoll`: a registered 10 s sleep polled again with the waker it registered with
//!   (the task woken by something else, or a `Timeout`'s inner future woken by a message).
//! * `service_timeout_ready` / `service_timeout_once_pending`: `timeout(10 s, f)` by the free
//!   function (default service) and by the method of an own `TimerService`, `f` ready at the
//!   first poll, or pending once and ready at the second (one registration, one cancel).
//! * `service_timeout_ready_2threads`: the ready case on two threads at once, time per
//!   timeout per thread: what a 2-worker runtime sees when a shared count is contended.
//! * `clock_read`: `Instant::now()` alone, the floor under all three: both libraries read
//!   the clock when a sleep or timeout is created (the deadline counts from creation), so
//!   neither can be faster than this.
//!
//! tickwheel uses the free functions (the lazily started default service, started before
//! measuring); tokio runs inside `rt.enter()` of a current-thread runtime with its time driver
//! enabled (nothing drives it during the benchmark; no timer is ever due).

use std::future::{ready, Future};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

const DELAY: Duration = Duration::from_secs(10);

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

fn sleep_unpolled(c: &mut Criterion) {
    let mut g = c.benchmark_group("sleep_unpolled");
    tickwheel::TimerService::default_service();
    g.bench_function("tickwheel", |b| {
        b.iter(|| drop(black_box(tickwheel::sleep(black_box(DELAY)))))
    });
    let rt = tokio_runtime();
    let _guard = rt.enter();
    g.bench_function("tokio", |b| {
        b.iter(|| drop(black_box(tokio::time::sleep(black_box(DELAY)))))
    });
    g.finish();
}

fn sleep_poll_drop(c: &mut Criterion) {
    let mut g = c.benchmark_group("sleep_poll_drop");
    let mut cx = Context::from_waker(Waker::noop());
    tickwheel::TimerService::default_service();
    g.bench_function("tickwheel", |b| {
        b.iter(|| {
            let mut sleep = pin!(tickwheel::sleep(black_box(DELAY)));
            let _ = black_box(sleep.as_mut().poll(&mut cx));
        })
    });
    let rt = tokio_runtime();
    let _guard = rt.enter();
    g.bench_function("tokio", |b| {
        b.iter(|| {
            let mut sleep = pin!(tokio::time::sleep(black_box(DELAY)));
            let _ = black_box(sleep.as_mut().poll(&mut cx));
        })
    });
    g.finish();
}

fn timeout_ready(c: &mut Criterion) {
    let mut g = c.benchmark_group("timeout_ready");
    let mut cx = Context::from_waker(Waker::noop());
    tickwheel::TimerService::default_service();
    g.bench_function("tickwheel", |b| {
        b.iter(|| {
            let mut t = pin!(tickwheel::timeout(black_box(DELAY), ready(1u32)));
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    let rt = tokio_runtime();
    let _guard = rt.enter();
    g.bench_function("tokio", |b| {
        b.iter(|| {
            let mut t = pin!(tokio::time::timeout(black_box(DELAY), ready(1u32)));
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    g.finish();
}

fn sleep_repoll(c: &mut Criterion) {
    let mut g = c.benchmark_group("sleep_repoll");
    let mut cx = Context::from_waker(Waker::noop());
    tickwheel::TimerService::default_service();
    g.bench_function("tickwheel", |b| {
        let mut sleep = pin!(tickwheel::sleep(DELAY));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        b.iter(|| black_box(sleep.as_mut().poll(&mut cx)))
    });
    let rt = tokio_runtime();
    let _guard = rt.enter();
    g.bench_function("tokio", |b| {
        let mut sleep = pin!(tokio::time::sleep(DELAY));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        b.iter(|| black_box(sleep.as_mut().poll(&mut cx)))
    });
    g.finish();
}

/// Pending at its first poll, ready at the second.
struct PendingOnce(bool);

impl Future for PendingOnce {
    type Output = u32;

    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> std::task::Poll<u32> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(1)
        } else {
            std::task::Poll::Pending
        }
    }
}

fn service_timeout_ready(c: &mut Criterion) {
    let mut g = c.benchmark_group("service_timeout_ready");
    let mut cx = Context::from_waker(Waker::noop());
    tickwheel::TimerService::default_service();
    g.bench_function("free_fn", |b| {
        b.iter(|| {
            let mut t = pin!(tickwheel::timeout(black_box(DELAY), ready(1u32)));
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    let service = tickwheel::TimerService::new().expect("service");
    g.bench_function("method", |b| {
        b.iter(|| {
            let mut t = pin!(service.timeout(black_box(DELAY), ready(1u32)));
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    g.finish();
}

fn service_timeout_once_pending(c: &mut Criterion) {
    let mut g = c.benchmark_group("service_timeout_once_pending");
    let mut cx = Context::from_waker(Waker::noop());
    tickwheel::TimerService::default_service();
    g.bench_function("free_fn", |b| {
        b.iter(|| {
            let mut t = pin!(tickwheel::timeout(black_box(DELAY), PendingOnce(false)));
            assert!(t.as_mut().poll(&mut cx).is_pending());
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    let service = tickwheel::TimerService::new().expect("service");
    g.bench_function("method", |b| {
        b.iter(|| {
            let mut t = pin!(service.timeout(black_box(DELAY), PendingOnce(false)));
            assert!(t.as_mut().poll(&mut cx).is_pending());
            black_box(t.as_mut().poll(&mut cx))
        })
    });
    g.finish();
}

/// Runs `op` `iters` times on each of two threads at once; the time of the slower thread.
fn on_two_threads(iters: u64, op: &(dyn Fn() + Sync)) -> Duration {
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let run = || {
            start.wait();
            let t0 = Instant::now();
            for _ in 0..iters {
                op();
            }
            t0.elapsed()
        };
        let other = s.spawn(run);
        let mine = run();
        mine.max(other.join().expect("bench thread"))
    })
}

fn service_timeout_ready_2threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("service_timeout_ready_2threads");
    tickwheel::TimerService::default_service();
    g.bench_function("free_fn", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                let mut cx = Context::from_waker(Waker::noop());
                let mut t = pin!(tickwheel::timeout(black_box(DELAY), ready(1u32)));
                let _ = black_box(t.as_mut().poll(&mut cx));
            })
        })
    });
    let service = tickwheel::TimerService::new().expect("service");
    g.bench_function("method", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                let mut cx = Context::from_waker(Waker::noop());
                let mut t = pin!(service.timeout(black_box(DELAY), ready(1u32)));
                let _ = black_box(t.as_mut().poll(&mut cx));
            })
        })
    });
    g.finish();
}

fn clock_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock_read");
    g.bench_function("Instant::now", |b| b.iter(|| black_box(Instant::now())));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = sleep_unpolled, sleep_poll_drop, timeout_ready, sleep_repoll, service_timeout_ready,
        service_timeout_once_pending, service_timeout_ready_2threads, clock_read
}
criterion_main!(benches);
