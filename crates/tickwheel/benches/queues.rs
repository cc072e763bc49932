//! Queue micro-benchmarks: workloads W1–W3 (docs/ARCHITECTURE.md, "Workloads") on every
//! queue flavor and two baselines, with identical seeded input, in one run.
//!
//! * **W1 schedule+cancel**: insert N timers with delays uniform in [1, 60000], then remove
//!   them all in a seeded random order. Timed: the inserts and the removes.
//! * **W1 steady state**: the same on a queue that already held N timers, cancelled in another
//!   random order and polled past: every insert reuses memory freed in random order, as in a
//!   long-running program. Timed: the inserts and the removes.
//! * **W2 schedule+fire**: insert N timers with delays uniform in [1, 10000], then poll tick by
//!   tick until all have fired (counted, and checked against N). Timed: inserts and polls.
//! * **W3 reset**: N live timers with delays uniform in [1, 30000], then N resets of random
//!   timers to random delays in [1, 30000]. Timed: the resets only (the inserts are setup).
//!
//! The flavors are the three `TimerQueue`s, the `SlimWheel` (a cancel without the value, a
//! reset that returns a new key, stored back by W3) and the `IdWheel` (named by the
//! workloads' own timer numbers, as the lazy heap is).
//!
//! Baselines: `std::collections::BinaryHeap` with lazy cancellation (a cancelled timer stays in
//! the heap and is skipped when popped, found by a per-timer liveness flag), and
//! `BTreeMap<(deadline, seq), value>` (cancel and reset are map removals).
//!
//! Throughput is reported per timer (elements = N), so criterion's time divided by N is the
//! cost of one timer through the workload. Inputs come from `tickwheel_lab::workloads` with
//! seed 1, outside the timed region: the same inputs as `tickwheel bench --seed 1`.
//! `cargo bench --bench queues` runs everything (a few minutes); a filter such as
//! `cargo bench --bench queues -- 'W2.*/100000$'` picks one workload and N.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use tickwheel::{HashedWheel, Heap, IdWheel, SlimWheel, TimerKey, TimerQueue, Wheel};
use tickwheel_lab::workloads::{self, QueueInput};
use tickwheel_lab::SplitMix64;

/// The timer counts every workload runs at.
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

/// What a workload needs from a queue. `reset` may hand out a new key (the baselines do).
trait BenchQueue {
    type Key: Copy;
    fn make() -> Self;
    fn insert(&mut self, deadline: u64, value: u32) -> Self::Key;
    fn cancel(&mut self, key: Self::Key) -> bool;
    fn reset(&mut self, key: Self::Key, deadline: u64) -> Self::Key;
    fn poll(&mut self, now: u64) -> Option<u32>;
}

/// A tickwheel queue, through the `TimerQueue` trait.
struct Tw<Q>(Q);

macro_rules! tickwheel_queue {
    ($q:ty, $make:expr) => {
        impl BenchQueue for Tw<$q> {
            type Key = TimerKey;
            fn make() -> Self {
                Tw($make)
            }
            #[inline]
            fn insert(&mut self, deadline: u64, value: u32) -> TimerKey {
                self.0.insert(deadline, value)
            }
            #[inline]
            fn cancel(&mut self, key: TimerKey) -> bool {
                self.0.remove(key).is_some()
            }
            #[inline]
            fn reset(&mut self, key: TimerKey, deadline: u64) -> TimerKey {
                self.0.reset(key, deadline);
                key
            }
            #[inline]
            fn poll(&mut self, now: u64) -> Option<u32> {
                self.0.poll_expired(now).map(|(_, v)| v)
            }
        }
    };
}

tickwheel_queue!(Wheel<u32>, Wheel::new());
tickwheel_queue!(HashedWheel<u32>, HashedWheel::new());
tickwheel_queue!(Heap<u32>, Heap::new());

/// The `SlimWheel`, which is not a `TimerQueue`: a cancel that reads no value back, and a
/// reset that hands out the timer's new key (stored back by W3, as its users do).
impl BenchQueue for Tw<SlimWheel<u32>> {
    type Key = TimerKey;
    fn make() -> Self {
        Tw(SlimWheel::new())
    }
    #[inline]
    fn insert(&mut self, deadline: u64, value: u32) -> TimerKey {
        self.0.insert(deadline, value)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.cancel(key)
    }
    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> TimerKey {
        self.0.reset(key, deadline).unwrap_or(key)
    }
    #[inline]
    fn poll(&mut self, now: u64) -> Option<u32> {
        self.0.poll_expired(now).map(|(_, v)| v)
    }
}

/// The `IdWheel`, named by the workloads' own timer numbers (the `value` of each insert, dense
/// from 0, as the lazy heap below numbers its timers): the key is that id, a cancel reads no
/// value back, and a reset keeps the id.
impl BenchQueue for Tw<IdWheel<u32>> {
    type Key = u32;
    fn make() -> Self {
        Tw(IdWheel::new(u32::MAX))
    }
    #[inline]
    fn insert(&mut self, deadline: u64, value: u32) -> u32 {
        // Every workload inserts an id while it is idle, so nothing is replaced.
        let replaced = self.0.insert(value, deadline, value);
        debug_assert!(
            matches!(replaced, Ok(None)),
            "id {value} pending or past the limit"
        );
        value
    }
    #[inline]
    fn cancel(&mut self, id: u32) -> bool {
        self.0.cancel(id)
    }
    #[inline]
    fn reset(&mut self, id: u32, deadline: u64) -> u32 {
        self.0.reset(id, deadline);
        id
    }
    #[inline]
    fn poll(&mut self, now: u64) -> Option<u32> {
        self.0.poll_expired(now).map(|(_, v)| v)
    }
}

/// `BinaryHeap` with lazy cancellation: timer `id` is live while `live[id]`.
#[derive(Default)]
struct LazyBinaryHeap {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    live: Vec<bool>,
    values: Vec<u32>,
}

impl BenchQueue for LazyBinaryHeap {
    type Key = u32;
    fn make() -> Self {
        LazyBinaryHeap::default()
    }
    #[inline]
    fn insert(&mut self, deadline: u64, value: u32) -> u32 {
        // The id doubles as the insertion order, so ties pop in insertion order.
        let id = self.live.len() as u32;
        self.live.push(true);
        self.values.push(value);
        self.heap.push(Reverse((deadline, id)));
        id
    }
    #[inline]
    fn cancel(&mut self, id: u32) -> bool {
        std::mem::replace(&mut self.live[id as usize], false)
    }
    #[inline]
    fn reset(&mut self, id: u32, deadline: u64) -> u32 {
        self.cancel(id);
        let value = self.values[id as usize];
        self.insert(deadline, value)
    }
    #[inline]
    fn poll(&mut self, now: u64) -> Option<u32> {
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if self.live[id as usize] {
                if deadline > now {
                    return None;
                }
                self.live[id as usize] = false;
                self.heap.pop();
                return Some(self.values[id as usize]);
            }
            self.heap.pop();
        }
        None
    }
}

/// `BTreeMap<(deadline, seq), value>`; the key is the map key.
#[derive(Default)]
struct BTreeQueue {
    map: BTreeMap<(u64, u64), u32>,
    seq: u64,
}

impl BenchQueue for BTreeQueue {
    type Key = (u64, u64);
    fn make() -> Self {
        BTreeQueue::default()
    }
    #[inline]
    fn insert(&mut self, deadline: u64, value: u32) -> (u64, u64) {
        self.seq += 1;
        self.map.insert((deadline, self.seq), value);
        (deadline, self.seq)
    }
    #[inline]
    fn cancel(&mut self, key: (u64, u64)) -> bool {
        self.map.remove(&key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: (u64, u64), deadline: u64) -> (u64, u64) {
        match self.map.remove(&key) {
            Some(value) => self.insert(deadline, value),
            None => key,
        }
    }
    #[inline]
    fn poll(&mut self, now: u64) -> Option<u32> {
        let entry = self.map.first_entry()?;
        (entry.key().0 <= now).then(|| entry.remove())
    }
}

/// The seed of every input: `tickwheel bench --seed 1` runs the same inputs.
const SEED: u64 = 1;

/// W1: insert all, cancel all in `order`.
fn w1<Q: BenchQueue>(delays: &[u64], order: &[u32]) -> Q {
    let mut q = Q::make();
    w1_on(&mut q, delays, order, 0);
    q
}

/// W1's operations on `q`, deadlines `base + delay`.
fn w1_on<Q: BenchQueue>(q: &mut Q, delays: &[u64], order: &[u32], base: u64) {
    let keys: Vec<Q::Key> = delays
        .iter()
        .enumerate()
        .map(|(i, &d)| q.insert(base + d, i as u32))
        .collect();
    for &i in order {
        black_box(q.cancel(keys[i as usize]));
    }
}

/// W1 steady-state setup: a queue that already held N timers, cancelled in `churn` order,
/// and then polled past them all (so the lazy heap drops its stale entries too). Every insert
/// of the timed W1 then reuses memory freed in random order, as in a long-running program.
fn w1_warm_setup<Q: BenchQueue>(delays: &[u64], churn: &[u32]) -> Q {
    let mut q = Q::make();
    w1_on(&mut q, delays, churn, 0);
    while q.poll(W1_WARM_BASE).is_some() {}
    q
}

/// Where the steady-state W1's deadlines start: past every deadline of its setup.
const W1_WARM_BASE: u64 = 60_001;

/// W2: insert all, poll every tick up to the latest delay; returns the queue and the count.
fn w2<Q: BenchQueue>(delays: &[u64], horizon: u64) -> (Q, usize) {
    let mut q = Q::make();
    for (i, &d) in delays.iter().enumerate() {
        q.insert(d, i as u32);
    }
    let mut fired = 0;
    for tick in 1..=horizon {
        while let Some(v) = q.poll(tick) {
            black_box(v);
            fired += 1;
        }
    }
    (q, fired)
}

/// W3 setup: N live timers.
fn w3_setup<Q: BenchQueue>(delays: &[u64]) -> (Q, Vec<Q::Key>) {
    let mut q = Q::make();
    let keys = delays
        .iter()
        .enumerate()
        .map(|(i, &d)| q.insert(d, i as u32))
        .collect();
    (q, keys)
}

/// W3 timed part: reset `keys[pick]` to `deadline` for each pair.
fn w3<Q: BenchQueue>(q: &mut Q, keys: &mut [Q::Key], resets: &[(u32, u64)]) {
    for &(pick, deadline) in resets {
        let pick = pick as usize;
        keys[pick] = q.reset(keys[pick], deadline);
    }
}

/// Runs `$body` for every queue type, binding the type to `$q` and naming it `$name`.
macro_rules! for_each_queue {
    (|$name:ident, $q:ident| $body:block) => {{
        {
            type $q = Tw<Wheel<u32>>;
            let $name = "wheel";
            $body
        }
        {
            type $q = Tw<SlimWheel<u32>>;
            let $name = "slim_wheel";
            $body
        }
        {
            type $q = Tw<IdWheel<u32>>;
            let $name = "id_wheel";
            $body
        }
        {
            type $q = Tw<HashedWheel<u32>>;
            let $name = "hashed_wheel";
            $body
        }
        {
            type $q = Tw<Heap<u32>>;
            let $name = "heap";
            $body
        }
        {
            type $q = LazyBinaryHeap;
            let $name = "std_binary_heap_lazy";
            $body
        }
        {
            type $q = BTreeQueue;
            let $name = "std_btreemap";
            $body
        }
    }};
}

fn bench_w1(c: &mut Criterion) {
    let mut group = c.benchmark_group("W1_schedule_cancel");
    for n in SIZES {
        let QueueInput {
            deadlines: delays,
            cancel_order: order,
            ..
        } = workloads::w1(SEED, n);
        group.throughput(Throughput::Elements(n as u64));
        for_each_queue!(|name, Q| {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_batched(
                    || (),
                    |()| w1::<Q>(&delays, &order),
                    BatchSize::PerIteration,
                )
            });
        });
    }
    group.finish();
}

fn bench_w1_warm(c: &mut Criterion) {
    let mut group = c.benchmark_group("W1_steady_state");
    for n in SIZES {
        let QueueInput {
            deadlines: delays,
            cancel_order: order,
            ..
        } = workloads::w1(SEED, n);
        // The setup's cancel order: a stream no workload uses.
        let churn = SplitMix64::stream(SEED, 11).permutation(n as u32);
        group.throughput(Throughput::Elements(n as u64));
        for_each_queue!(|name, Q| {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_batched(
                    || w1_warm_setup::<Q>(&delays, &churn),
                    |mut q| {
                        w1_on(&mut q, &delays, &order, W1_WARM_BASE);
                        q
                    },
                    BatchSize::PerIteration,
                )
            });
        });
    }
    group.finish();
}

fn bench_w2(c: &mut Criterion) {
    let mut group = c.benchmark_group("W2_schedule_fire");
    for n in SIZES {
        let delays = workloads::w2(SEED, n).deadlines;
        let horizon = *workloads::W2_DELAYS.end();
        group.throughput(Throughput::Elements(n as u64));
        for_each_queue!(|name, Q| {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_batched(
                    || (),
                    |()| {
                        let (q, fired) = w2::<Q>(&delays, horizon);
                        assert_eq!(fired, n, "{name}: every timer fires exactly once");
                        q
                    },
                    BatchSize::PerIteration,
                )
            });
        });
    }
    group.finish();
}

fn bench_w3(c: &mut Criterion) {
    let mut group = c.benchmark_group("W3_reset");
    for n in SIZES {
        let QueueInput {
            deadlines: delays,
            resets,
            ..
        } = workloads::w3(SEED, n);
        group.throughput(Throughput::Elements(n as u64));
        for_each_queue!(|name, Q| {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_batched(
                    || w3_setup::<Q>(&delays),
                    |(mut q, mut keys)| {
                        w3(&mut q, &mut keys, &resets);
                        (q, keys)
                    },
                    BatchSize::PerIteration,
                )
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = queues;
    config = config();
    targets = bench_w1, bench_w1_warm, bench_w2, bench_w3
}
criterion_main!(queues);
