//! Multi-threaded schedule + cancel throughput of the `TimerService`, beside tokio's timer in
//! the same run (the connection-timeout pattern, W1: schedule, then cancel before it fires).
//!
//! ```text
//! cargo bench -p tickwheel --bench service
//! ```
//!
//! * `tickwheel`: each producer thread calls `service.schedule(delay, closure)` then
//!   `handle.cancel()`; delays uniform in [1, 60000] ms, so nothing fires.
//! * `floor`: no timer. Each producer reads the clock once per operation (as every
//!   `schedule` must) and shares nothing: how far the harness itself lets 2 and 4 producers
//!   scale on this machine.
//! * `tokio`: the fair analogue — each producer is a task on a multi-thread runtime with as
//!   many workers as producers; it creates a `tokio::time::sleep(delay)`, polls it once (that
//!   registers it in tokio's sharded timer wheel) and drops it (that deregisters it).
//!   tokio-util's `DelayQueue` is single-owner (`&mut self`), so it is not a multi-producer
//!   analogue.
//!
//! `schedule_only` is W4's hot path alone (one producer, 16-byte closures, nothing firing),
//! with `schedule`, `schedule_at`, `schedule_detached_at`, a tokio channel hand-off and the
//! floor of any staging design (`floor_vec`: an append to a `Vec`, nothing else).
//! `schedule_detached` is the handle-less path from 1 and 2 producers. `detached_burst` is
//! W4 on virtual time, filing included: 10^6 detached timers scheduled within 1000 ticks of a
//! `ManualClock`, then the clock moved past them and `settle()` runs them all; beside it
//! `floor_buckets`, the same burst as a plain program with no service would write it (each
//! closure record appended to a vector, the vector filed into a vector per tick, each tick's
//! records called).
//!
//! Throughput is elements (schedule + cancel pairs) per second over all producers, timed
//! from the first producer's start to the last one's end (each producer reads the clock
//! itself, so a descheduled coordinator cannot shorten the span).

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Bencher, BenchmarkId, Criterion, Throughput};
use tickwheel::service::TimerService;
use tickwheel::time::ManualClock;
use tickwheel_lab::SplitMix64;

/// Schedule+cancel pairs one sample measures, split over the producers: enough that starting
/// the producers (a thread each, woken by a barrier) is a small part of the span. With a fifth
/// of it, even the `floor` producers, which share nothing, scaled well short of 2× from two.
const OPS: u64 = 1_000_000;

fn delays(seed: u64, n: usize) -> Vec<Duration> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| Duration::from_millis(rng.in_range(1..=60_000)))
        .collect()
}

/// Runs `per_timer` for `ops` timers split over `producers` threads, each with its own
/// delays; wall time from the first producer's start to the last one's end.
fn producers(
    service: &Arc<TimerService>,
    producers: u64,
    ops: u64,
    per_timer: fn(&TimerService, usize, Duration),
) -> Duration {
    let per = (ops / producers) as usize;
    let barrier = Arc::new(Barrier::new(producers as usize + 1));
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let (service, barrier) = (service.clone(), barrier.clone());
            let delays = delays(p + 1, per);
            thread::spawn(move || {
                barrier.wait();
                let start = Instant::now();
                for (id, &d) in delays.iter().enumerate() {
                    per_timer(&service, id, d);
                }
                (start, Instant::now())
            })
        })
        .collect();
    barrier.wait();
    span(threads.into_iter().map(|t| t.join().unwrap()))
}

/// Schedules and at once cancels timers (the handle path).
fn tickwheel_schedule_cancel(service: &Arc<TimerService>, p: u64, ops: u64) -> Duration {
    producers(service, p, ops, |service, _, d| {
        let handle = service.schedule(d, || {});
        black_box(handle.cancel());
    })
}

/// From the first producer's start to the last one's end.
fn span(runs: impl Iterator<Item = (Instant, Instant)>) -> Duration {
    let (starts, ends): (Vec<_>, Vec<_>) = runs.unzip();
    let first = starts.into_iter().min().unwrap();
    ends.into_iter().max().unwrap() - first
}

/// The same for tokio. The loop runs `unconstrained`: under tokio's cooperative budget a
/// `Sleep` polled after the budget ran out returns `Pending` *without* registering, which
/// would skip the very work measured here.
fn tokio_schedule_cancel(rt: &tokio::runtime::Runtime, producers: u64, ops: u64) -> Duration {
    let per = (ops / producers) as usize;
    rt.block_on(async move {
        let barrier = Arc::new(tokio::sync::Barrier::new(producers as usize + 1));
        let tasks: Vec<_> = (0..producers)
            .map(|p| {
                let barrier = barrier.clone();
                let delays = delays(p + 1, per);
                tokio::spawn(tokio::task::unconstrained(async move {
                    barrier.wait().await;
                    let start = Instant::now();
                    for &d in &delays {
                        let mut sleep = pin!(tokio::time::sleep(d));
                        std::future::poll_fn(|cx| {
                            black_box(sleep.as_mut().poll(cx).is_ready());
                            Poll::Ready(())
                        })
                        .await;
                    }
                    (start, Instant::now())
                }))
            })
            .collect();
        barrier.wait().await;
        let mut runs = Vec::new();
        for t in tasks {
            runs.push(t.await.unwrap());
        }
        span(runs.into_iter())
    })
}

fn schedule_cancel(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_cancel");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(OPS));
    for producers in [1u64, 2, 4] {
        let service = Arc::new(TimerService::new().unwrap());
        group.bench_with_input(
            BenchmarkId::new("tickwheel", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| tickwheel_schedule_cancel(&service, p, OPS))
                        .sum()
                })
            },
        );
        // The harness's own ceiling: the same producers doing the one thing every schedule
        // must (read the clock), with nothing shared.
        group.bench_with_input(BenchmarkId::new("floor", producers), &producers, |b, &p| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        self::producers(&service, p, OPS, |_, id, d| {
                            black_box((Instant::now() + d, id));
                        })
                    })
                    .sum()
            })
        });
        drop(service);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(producers as usize)
            .enable_time()
            .build()
            .unwrap();
        group.bench_with_input(BenchmarkId::new("tokio", producers), &producers, |b, &p| {
            b.iter_custom(|iters| (0..iters).map(|_| tokio_schedule_cancel(&rt, p, OPS)).sum())
        });
    }
    group.finish();
}

/// W4's hot path alone: one thread schedules closures capturing 16 bytes (an `Instant`, like
/// the demo's) with delays in [0, 1000] ms, none of which fires during the measurement. The
/// service (and its pending timers) is torn down outside the measured time.
fn schedule_only(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let mut group = c.benchmark_group("schedule_only");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    let delays: Vec<Duration> = delays(7, N as usize)
        .into_iter()
        .map(|d| Duration::from_millis(d.as_millis() as u64 % 1_001) + Duration::from_secs(3600))
        .collect();
    for (name, resolution) in [("1ms", 1_000), ("10us", 10)] {
        group.bench_function(BenchmarkId::new("tickwheel", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let service = TimerService::builder()
                        .resolution(Duration::from_micros(resolution))
                        .build()
                        .unwrap();
                    let start = Instant::now();
                    for &d in &delays {
                        let at = start + d;
                        service.schedule(d, move || {
                            black_box(at);
                        });
                    }
                    total += start.elapsed();
                    drop(service);
                }
                total
            })
        });
    }
    // W4's producer loop as `tickwheel bench` runs it: the harness reads the clock for each
    // task and schedules at that instant plus the delay, with `schedule_at` (a handle) and
    // with `schedule_detached_at` (no handle, the timer staged in an inbox).
    fn w4_producer(b: &mut Bencher, delays: &[Duration], detached: bool) {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let service = TimerService::new().unwrap();
                let start = Instant::now();
                for (id, &d) in delays.iter().enumerate() {
                    let at = Instant::now() + d;
                    let f = move || {
                        black_box(id);
                    };
                    if detached {
                        service.schedule_detached_at(at, f);
                    } else {
                        let _handle = service.schedule_at(at, f);
                    }
                }
                total += start.elapsed();
                drop(service);
            }
            total
        })
    }
    group.bench_function("tickwheel_at/1ms", |b| w4_producer(b, &delays, false));
    group.bench_function("detached_at/1ms", |b| w4_producer(b, &delays, true));
    // The floor of any staging design: the same loop appending 32 bytes (the deadline and
    // two words of closure state) to a reused Vec on the producer's own thread, with no
    // service, lock, tick conversion or handle at all.
    group.bench_function("floor_vec", |b| {
        let mut staged: Vec<(Instant, usize, usize)> = Vec::new();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for (id, &d) in delays.iter().enumerate() {
                    staged.push((Instant::now() + d, id, 0));
                }
                total += start.elapsed();
                black_box(&staged);
                staged.clear();
            }
            total
        })
    });
    // The same loop handing (deadline, id) to a consumer thread through tokio's unbounded
    // channel, the transport of W4's fastest peer (which also returns no handle).
    group.bench_function("tokio_channel", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, u32)>();
                let consumer = thread::spawn(move || {
                    let mut n = 0u64;
                    while let Some(item) = rx.blocking_recv() {
                        black_box(item);
                        n += 1;
                    }
                    n
                });
                let start = Instant::now();
                for (id, &d) in delays.iter().enumerate() {
                    let _ = tx.send((Instant::now() + d, id as u32));
                }
                total += start.elapsed();
                drop(tx);
                assert_eq!(consumer.join().unwrap(), N);
            }
            total
        })
    });
    group.finish();
}

/// `schedule_detached` from 1 and 2 producer threads (each on its own shard), delays in
/// [1, 60000] ms so that nothing fires: how the handle-less path scales with producers. The
/// service (and its pending timers) is torn down outside the measured time.
fn detached_producers(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_detached");
    group.sample_size(10);
    group.throughput(Throughput::Elements(OPS));
    for producers in [1u64, 2] {
        group.bench_with_input(
            BenchmarkId::from_parameter(producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let service = Arc::new(TimerService::new().unwrap());
                        total += detached(&service, p, OPS);
                        drop(service);
                    }
                    total
                })
            },
        );
    }
    group.finish();
}

/// Schedules timers without a handle (the inbox path).
fn detached(service: &Arc<TimerService>, p: u64, ops: u64) -> Duration {
    producers(service, p, ops, |service, id, d| {
        service.schedule_detached(d, move || {
            black_box(id);
        });
    })
}

/// W4's burst on virtual time: one thread schedules `N` detached timers with delays in
/// [1, 1000] ms on a `ManualClock` (queuing them itself every 1024, as it does in W4), then
/// moves the clock past them and `settle()`s, which runs every callback on the calling thread
/// (no workers). So the span covers staging, filing and firing, not waiting.
/// `floor_buckets` is the same work with nothing but vectors: a 24-byte closure record per
/// timer (a code pointer and two words of state, as the service stores one), staged with its
/// tick, filed into a vector a tick, called tick by tick.
fn detached_burst(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let mut group = c.benchmark_group("detached_burst");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    let delays: Vec<Duration> = delays(11, N as usize)
        .into_iter()
        .map(|d| Duration::from_millis(1 + d.as_millis() as u64 % 1_000))
        .collect();
    group.bench_function("tickwheel", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let clock = ManualClock::new();
                let service = TimerService::builder()
                    .clock(clock.clone())
                    .worker_threads(0)
                    .build()
                    .unwrap();
                let start = Instant::now();
                for (id, &d) in delays.iter().enumerate() {
                    service.schedule_detached(d, move || {
                        black_box(id);
                    });
                }
                clock.advance(Duration::from_millis(1_001));
                service.settle();
                total += start.elapsed();
                drop(service);
            }
            total
        })
    });
    struct Task {
        call: fn(usize, usize),
        state: [usize; 2],
    }
    fn run(id: usize, _: usize) {
        black_box(id);
    }
    group.bench_function("floor_buckets", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let mut staged: Vec<(u64, Task)> = Vec::new();
                for (id, &d) in delays.iter().enumerate() {
                    let call = black_box(run as fn(usize, usize));
                    staged.push((
                        d.as_millis() as u64,
                        Task {
                            call,
                            state: [id, 0],
                        },
                    ));
                }
                let mut ticks: Vec<Vec<Task>> = (0..=1_000).map(|_| Vec::new()).collect();
                for (tick, task) in staged {
                    ticks[tick as usize].push(task);
                }
                for tick in ticks {
                    for task in tick {
                        (task.call)(task.state[0], task.state[1]);
                    }
                }
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    schedule_cancel,
    schedule_only,
    detached_producers,
    detached_burst
);
criterion_main!(benches);
