//! How much of a schedule is first-touching memory: 10^6 `schedule_at` calls on a fresh service
//! (cold, as in W4, defined in `docs/ARCHITECTURE.md`), and on a service that first scheduled and
//! cancelled as many (warm: the slab and slot vectors already have their memory), each with and
//! without an `Instant::now()` per timer. "reused" is warm with the cancels in a seeded random
//! order, as timers leave a long-running service (they fire in deadline order): every schedule then
//! reuses an entry somewhere in the slab (`docs/DESIGN-NOTES.md`, "Why is the free list a stack of
//! indices?" and "What does a `schedule` cost?"). Delays are 0..=1000 s, so nothing fires
//! meanwhile. Each timer's task holds an `Arc` and an id, as W4's closure does.
//!
//! Two floors in the same run, with the same tasks: "no timer" moves each task into a vector
//! grown and touched beforehand (the loop's own work and nothing else); "channel" sends it
//! through `std::sync::mpsc` to a thread that drops it (handing a task to another thread, as
//! the `delayqueue-channel` W4 peer does, without any timer structure).
//!
//! `cargo run --release -p tickwheel-lab --example cold_schedule [-- N]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::TimerService;
use tickwheel_lab::SplitMix64;

/// W4's task: marks its id done in a shared log. 16 bytes, stored inline by the service.
struct Task {
    log: Arc<Vec<AtomicU64>>,
    id: usize,
}

impl Task {
    fn run(self) {
        self.log[self.id].store(1, Ordering::Relaxed);
    }
}

/// Hands `sink` one task per delay, due at `now + delay`; returns ns per task.
fn per_task(
    log: &Arc<Vec<AtomicU64>>,
    delays: &[u64],
    clock: bool,
    mut sink: impl FnMut(Instant, Task),
) -> f64 {
    let start = Instant::now();
    for (id, &delay) in delays.iter().enumerate() {
        let now = if clock { Instant::now() } else { start };
        let log = Arc::clone(log);
        sink(now + Duration::from_secs(delay), Task { log, id });
    }
    start.elapsed().as_nanos() as f64 / delays.len() as f64
}

/// Schedules one timer per delay and returns ns per schedule.
fn schedule_all(
    service: &TimerService,
    log: &Arc<Vec<AtomicU64>>,
    delays: &[u64],
    clock: bool,
) -> f64 {
    per_task(log, delays, clock, |deadline, task| {
        let _handle = service.schedule_at(deadline, move || task.run());
    })
}

/// The loop alone: each task goes into a vector whose memory is already touched.
fn no_timer(log: &Arc<Vec<AtomicU64>>, delays: &[u64], clock: bool) -> f64 {
    let mut tasks: Vec<(Instant, Task)> = Vec::with_capacity(delays.len());
    // Touch the memory first, untimed, as a warm service's is.
    let now = Instant::now();
    tasks.extend((0..delays.len()).map(|id| {
        (
            now,
            Task {
                log: Arc::clone(log),
                id,
            },
        )
    }));
    tasks.clear();
    per_task(log, delays, clock, |deadline, task| {
        tasks.push((deadline, task))
    })
}

/// Each task sent on a channel to a thread that drops it (the drop is not timed).
fn channel(log: &Arc<Vec<AtomicU64>>, delays: &[u64], clock: bool) -> f64 {
    let (sender, receiver) = std::sync::mpsc::channel::<(Instant, Task)>();
    let consumer = std::thread::spawn(move || receiver.into_iter().count());
    let ns = per_task(log, delays, clock, |deadline, task| {
        sender
            .send((deadline, task))
            .expect("the consumer runs until the channel closes");
    });
    drop(sender);
    assert_eq!(
        consumer.join().expect("the consumer does not panic"),
        delays.len()
    );
    ns
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // Seeded: the same delays and the same shuffle every run.
    let mut rng = SplitMix64::new(42);
    let delays: Vec<u64> = (0..n).map(|_| rng.in_range(0..=1000)).collect();
    let log: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let mut shuffled: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut shuffled);
    let in_order: Vec<usize> = (0..n).collect();
    for clock in [true, false] {
        let cold = schedule_all(
            &TimerService::new().expect("start a service"),
            &log,
            &delays,
            clock,
        );
        let [warm, reused] = [&in_order, &shuffled].map(|cancel_order| {
            let service = TimerService::new().expect("start a service");
            // Grow the service's memory first: as many timers scheduled and cancelled, untimed.
            let handles: Vec<_> = delays
                .iter()
                .map(|&d| service.schedule(Duration::from_secs(10 + d), || {}))
                .collect();
            for &i in cancel_order {
                assert!(handles[i].cancel(), "none is due within 10 s");
            }
            schedule_all(&service, &log, &delays, clock)
        });
        let floor = no_timer(&log, &delays, clock);
        let channel = channel(&log, &delays, clock);
        println!(
            "clock read per timer: {clock:5}  cold {cold:6.1} ns  warm {warm:6.1} ns  \
             reused {reused:6.1} ns a schedule  |  no timer {floor:5.1} ns  \
             channel {channel:5.1} ns a task"
        );
    }
}
