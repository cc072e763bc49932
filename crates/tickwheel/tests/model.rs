//! Model-based property tests: every queue flavor against a `BTreeMap` reference model of the
//! `TimerQueue` contract, operation by operation, with equal outputs demanded after each one
//! and the queue's own invariants checked (`TimerQueue::check_invariants`).
//!
//! The model orders pending timers by `(effective deadline, insertion seq)`; a reset takes a
//! new seq. Deadlines and poll targets are generated *relative to the queue's clock* at the
//! time of the operation, so sequences keep hitting the interesting places: the past, the
//! next few ticks, wheel level boundaries (multiples of 64^k, ±1), powers of two far ahead,
//! `u64::MAX`, and time jumps of up to the whole range. Keys are picked from every key ever
//! issued, so stale keys are exercised as often as live ones.
//!
//! 256 cases a flavor by default; set `PROPTEST_CASES` for more.
//!
//! `long_model_run` drives each queue with a seeded stream of the same operations, checked
//! the same way, for `TICKWHEEL_MODEL_OPS` queue operations a queue (20 000 by default). The
//! soak, 10^8 operations a queue in a release build (under a minute for `Wheel` and `Heap`,
//! most of the run for the 8-slot `HashedWheel`), is `cargo xtask soak`, which runs:
//!
//! ```text
//! TICKWHEEL_MODEL_OPS=100000000 cargo test --release -p tickwheel --test model long_model_run -- --exact --nocapture
//! ```
//!
//! `TICKWHEEL_MODEL_ONLY=SlimWheel` (names as the run prints them, comma-separated) runs only
//! those queues.
//!
//! Every queue runs through [`Subject`]: a [`TimerQueue`] flavor of `tests/common/mod.rs` as
//! [`Keyed`] (`tests/common/subject.rs`, shared with the fuzz targets), or the `SlimWheel` itself,
//! whose reset returns a new key (the old key goes stale in the model too, and is picked later like
//! any other stale key). A new queue, or a new form of one, joins the soak with a subject and a
//! line in `long_model_run`.
//!
//! The `IdWheel`, named by the caller's ids, runs the same operations through its own driver
//! (`tests/common/ids.rs`, [`id_ops`]): a pick is an id (most among a few dozen, so that
//! inserts replace and resets and cancels find timers; some past the id limit), and a
//! `Deadline` op now and then takes its id through the restart of its generation
//! (`ids::aging`, with the test hook that ages an idle id's generation), so that the restart
//! runs under the model too.

mod common;
#[path = "common/ids.rs"]
mod ids;
#[path = "common/subject.rs"]
mod subject;

use std::collections::HashSet;

use common::{Flavor, Hashed1, Hashed512, Hashed8, HeapFlavor, WheelFlavor};
use ids::{aging, IdOp, IdRun, ID_SPAN};
use proptest::prelude::*;
use subject::{drain, Keyed, Subject};
use tickwheel::{SlimWheel, TimerKey};
use tickwheel_lab::SplitMix64;

/// A tick chosen relative to the clock when the operation runs.
#[derive(Clone, Copy, Debug)]
enum Tick {
    /// `now - n` (saturating): in the past.
    Past(u64),
    /// `now + n`, `n < 130`: the next couple of first-level revolutions.
    Near(u64),
    /// The next multiple of `64^k` after now, plus `delta` (-1, 0 or 1): a level boundary.
    Boundary(u32, i8),
    /// `now + 2^k`.
    Far(u32),
    /// `u64::MAX`.
    Max,
}

impl Tick {
    fn at(self, now: u64) -> u64 {
        match self {
            Tick::Past(n) => now.saturating_sub(n),
            Tick::Near(n) => now.saturating_add(n),
            Tick::Boundary(k, delta) => {
                let shift = 6 * k;
                let base = ((now >> shift).saturating_add(1)).checked_shl(shift);
                let base = base
                    .filter(|&b| b >> shift > now >> shift)
                    .unwrap_or(u64::MAX);
                base.saturating_add_signed(i64::from(delta))
            }
            Tick::Far(k) => now.saturating_add(1 << k),
            Tick::Max => u64::MAX,
        }
    }
}

fn deadline() -> impl Strategy<Value = Tick> {
    prop_oneof![
        2 => (1..2_000u64).prop_map(Tick::Past),
        6 => (0..130u64).prop_map(Tick::Near),
        3 => (1..=10u32, -1..=1i8).prop_map(|(k, d)| Tick::Boundary(k, d)),
        2 => (0..64u32).prop_map(Tick::Far),
        1 => Just(Tick::Max),
    ]
}

/// Poll targets. Jumps to the far end of time are rare on purpose: after one, every later
/// deadline is `u64::MAX`, so a sequence that jumps early tests little else.
fn target() -> impl Strategy<Value = Tick> {
    prop_oneof![
        8 => (1..100u64).prop_map(Tick::Past),
        8 => Just(Tick::Near(0)),
        50 => (0..130u64).prop_map(Tick::Near),
        16 => (1..=10u32, -1..=1i8).prop_map(|(k, d)| Tick::Boundary(k, d)),
        12 => (0..40u32).prop_map(Tick::Far),
        3 => (40..64u32).prop_map(Tick::Far),
        1 => Just(Tick::Max),
    ]
}

/// One operation on a queue; `usize` fields pick a key among all keys issued so far.
#[derive(Clone, Debug)]
enum Op {
    Insert(Tick),
    /// `count` inserts at `base + (i * 37) % 64^spread`: slots fuller than one step of the
    /// wheel's paced moving down, so it is caught half done.
    Burst(Tick, u16, u32),
    Remove(usize),
    /// Removes `count` keys picked from `start` on with a fixed stride: a burst of cancels
    /// that leaves slots mostly stale, so they compact (often mid-absorption).
    CancelStorm(usize, u16),
    Reset(usize, Tick),
    Deadline(usize),
    Poll(Tick),
    Drain(Tick),
    NextExpiration,
    Len,
    Shrink,
    /// Every timer removed at once: the keys issued so far stay in play, all stale.
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    // Weights in 200ths: a clear is rare, so that the queues still grow large between two.
    prop_oneof![
        64 => deadline().prop_map(Op::Insert),
        8 => (deadline(), 257..800u16, 0..3u32).prop_map(|(t, n, s)| Op::Burst(t, n, s)),
        16 => any::<usize>().prop_map(Op::Remove),
        8 => (any::<usize>(), 1..600u16).prop_map(|(k, n)| Op::CancelStorm(k, n)),
        24 => (any::<usize>(), deadline()).prop_map(|(k, d)| Op::Reset(k, d)),
        8 => any::<usize>().prop_map(Op::Deadline),
        24 => target().prop_map(Op::Poll),
        16 => target().prop_map(Op::Drain),
        8 => Just(Op::NextExpiration),
        8 => Just(Op::Len),
        7 => Just(Op::Shrink),
        1 => Just(Op::Clear),
    ]
}

/// The keys issued so far: operations pick among them, and a key issued twice fails.
#[derive(Default)]
struct Keys {
    list: Vec<TimerKey>,
    /// Every key ever issued (the long run forgets the oldest with `forget_oldest`).
    seen: HashSet<TimerKey>,
}

impl Keys {
    fn pick(&self, i: usize) -> Option<TimerKey> {
        (!self.list.is_empty()).then(|| self.list[i % self.list.len()])
    }

    /// Records a new key; `false` if it was issued before.
    fn issue(&mut self, key: TimerKey) -> bool {
        self.list.push(key);
        self.seen.insert(key)
    }

    /// Keeps the newest `keep` keys for picking; older ones are neither picked nor checked.
    fn forget_oldest(&mut self, keep: usize) {
        let drop = self.list.len().saturating_sub(keep);
        for key in self.list.drain(..drop) {
            self.seen.remove(&key);
        }
    }
}

/// The reference: the contract written as plainly as possible (`tickwheel_lab::model`).
type Model = tickwheel_lab::model::Model<TimerKey, u32>;

/// A fresh `TimerQueue` of flavor `F`, as a [`Subject`].
fn keyed<F: Flavor>() -> Keyed<F::Q<u32>> {
    Keyed(F::make())
}

/// Runs `ops` on a fresh queue `S` and on the model, comparing after each step.
fn check<S: Subject>(fresh: fn() -> S, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut q = fresh();
    let mut model = Model::default();
    let mut keys = Keys::default();
    for (step, op) in ops.iter().enumerate() {
        let value = step as u32;
        apply(&mut q, &mut model, &mut keys, op, value)?;
        prop_assert_eq!(q.len(), model.timers.len(), "len after {:?}", op);
        prop_assert_eq!(q.now(), model.now, "now after {:?}", op);
        q.check_invariants();
    }
    // Whatever is left fires, in model order.
    let rest = drain(&mut q, u64::MAX);
    let expected: Vec<_> = std::iter::from_fn(|| model.poll(u64::MAX)).collect();
    prop_assert_eq!(rest, expected);
    Ok(())
}

fn apply<S: Subject>(
    q: &mut S,
    model: &mut Model,
    keys: &mut Keys,
    op: &Op,
    value: u32,
) -> Result<(), TestCaseError> {
    let pick = |i: usize| keys.pick(i);
    match *op {
        Op::Insert(tick) => {
            let deadline = tick.at(q.now());
            let key = q.insert(deadline, value);
            prop_assert!(keys.issue(key), "key {:?} issued twice", key);
            model.insert(key, deadline, value);
        }
        Op::Burst(tick, count, spread) => {
            let base = tick.at(q.now());
            for i in 0..u64::from(count) {
                let deadline = base.saturating_add((i * 37) % (1 << (6 * spread)));
                let key = q.insert(deadline, value);
                prop_assert!(keys.issue(key), "key {:?} issued twice", key);
                model.insert(key, deadline, value);
            }
        }
        Op::Remove(i) => {
            if let Some(key) = pick(i) {
                prop_assert_eq!(q.remove(key), model.remove(key));
            }
        }
        Op::CancelStorm(start, count) => {
            for i in 0..usize::from(count) {
                if let Some(key) = pick(start.wrapping_add(i.wrapping_mul(7_919))) {
                    // Every other one a cancel, which hands no value back.
                    if i % 2 == 0 {
                        prop_assert_eq!(q.remove(key), model.remove(key));
                    } else {
                        prop_assert_eq!(q.cancel(key), model.remove(key).is_some());
                    }
                }
            }
        }
        Op::Reset(i, tick) => {
            if let Some(key) = pick(i) {
                let deadline = tick.at(q.now());
                match q.reset(key, deadline) {
                    // A new key: the model removes the old one and inserts the new one, which
                    // is what a reset is (a new insertion at `max(deadline, now)`).
                    Some(new) if new != key => {
                        let value = model.remove(key);
                        prop_assert!(value.is_some(), "reset of stale key {:?} succeeded", key);
                        prop_assert!(keys.issue(new), "key {:?} issued twice", new);
                        model.insert(new, deadline, value.unwrap_or_default());
                    }
                    got => prop_assert_eq!(got.is_some(), model.reset(key, deadline)),
                }
            }
        }
        Op::Deadline(i) => {
            if let Some(key) = pick(i) {
                let expected = model.timers.get(&key).map(|t| t.0);
                prop_assert_eq!(q.deadline(key), expected);
                // The value, read and in place, through the same key.
                let expected = model.timers.get(&key).map(|t| t.2);
                prop_assert_eq!(q.get(key).copied(), expected, "get({:?})", key);
                prop_assert_eq!(q.get_mut(key).map(|v| *v), expected, "get_mut({:?})", key);
            }
        }
        Op::Poll(tick) => {
            let t = tick.at(q.now());
            prop_assert_eq!(q.poll_expired(t), model.poll(t), "poll_expired({})", t);
        }
        Op::Drain(tick) => {
            let t = tick.at(q.now());
            let got = drain(q, t);
            let expected: Vec<_> = std::iter::from_fn(|| model.poll(t)).collect();
            prop_assert_eq!(got, expected, "drain_expired({})", t);
        }
        Op::NextExpiration => check_next_expiration(q, model)?,
        Op::Len => prop_assert_eq!(q.len() == 0, model.timers.is_empty()),
        Op::Shrink => q.shrink_to_fit(),
        Op::Clear => {
            let now = q.now();
            q.clear();
            model.clear();
            prop_assert_eq!(q.len(), 0, "len after clear");
            prop_assert_eq!(q.next_expiration(), None, "next_expiration after clear");
            prop_assert_eq!(q.now(), now, "now after clear");
        }
    }
    Ok(())
}

/// `next_expiration` is `Some` iff non-empty and never after the earliest deadline; wheels
/// may answer earlier, so this checks bounds, not equality.
fn check_next_expiration<S: Subject>(q: &S, model: &Model) -> Result<(), TestCaseError> {
    let earliest = model.order.keys().next().map(|&(eff, _)| eff);
    let next = q.next_expiration();
    prop_assert_eq!(next.is_some(), earliest.is_some());
    if let (Some(next), Some(earliest)) = (next, earliest) {
        prop_assert!(next <= earliest, "next_expiration {} > {}", next, earliest);
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..300)
}

/// Proptest's defaults (256 cases, `PROPTEST_CASES` honoured) with the XorShift generator:
/// ChaCha costs most of a debug-build run and cryptographic randomness buys nothing here.
fn config() -> ProptestConfig {
    ProptestConfig {
        rng_algorithm: prop::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn wheel_matches_model(ops in ops()) {
        check(keyed::<WheelFlavor>, &ops)?;
    }

    #[test]
    fn heap_matches_model(ops in ops()) {
        check(keyed::<HeapFlavor>, &ops)?;
    }

    #[test]
    fn hashed_wheel_matches_model(ops in ops()) {
        check(keyed::<Hashed512>, &ops)?;
    }

    #[test]
    fn hashed_wheel_8_slots_matches_model(ops in ops()) {
        check(keyed::<Hashed8>, &ops)?;
    }

    #[test]
    fn hashed_wheel_1_slot_matches_model(ops in ops()) {
        check(keyed::<Hashed1>, &ops)?;
    }

    #[test]
    fn slim_wheel_matches_model(ops in ops()) {
        check(SlimWheel::new, &ops)?;
    }

    #[test]
    fn id_wheel_matches_model(ops in ops()) {
        let mut run = IdRun::new();
        for (step, op) in ops.iter().enumerate() {
            for id_op in id_ops(op, run.now(), step as u64) {
                run.apply(id_op, step as u32).map_err(TestCaseError::fail)?;
            }
            run.wheel.check_invariants();
        }
        run.finish().map_err(TestCaseError::fail)?;
    }
}

/// The id a pick names: seven in eight among 40 ids, so that inserts replace and resets and
/// cancels find timers; the rest across the whole id range and a little past the limit.
fn id_of(pick: u64) -> u32 {
    if pick % 8 == 0 {
        ((pick >> 3) % u64::from(ID_SPAN)) as u32
    } else {
        ((pick >> 3) % 40) as u32
    }
}

/// `op`, as the `IdWheel`'s operations (the clock at `now`, the `step`th operation): a pick
/// names an id ([`id_of`]); an insert's id is drawn from the step, a burst's from the step and
/// its index; a cancel storm alternates removals and cancels, as for the keyed queues; a
/// `Deadline` op looks at its id and, one in two, takes it through a generation's restart
/// ([`aging`]).
fn id_ops(op: &Op, now: u64, step: u64) -> Vec<IdOp> {
    let drawn = |n: u64| id_of(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16);
    match *op {
        Op::Insert(tick) => vec![IdOp::Insert(drawn(step), tick.at(now))],
        Op::Burst(tick, count, spread) => {
            let base = tick.at(now);
            (0..u64::from(count))
                .map(|i| {
                    let deadline = base.saturating_add((i * 37) % (1 << (6 * spread)));
                    IdOp::Insert(drawn(step << 16 | i), deadline)
                })
                .collect()
        }
        Op::Remove(pick) => vec![IdOp::Remove(id_of(pick as u64))],
        Op::CancelStorm(start, count) => (0..usize::from(count))
            .map(|i| {
                let id = id_of(start.wrapping_add(i.wrapping_mul(7_919)) as u64);
                if i % 2 == 0 {
                    IdOp::Remove(id)
                } else {
                    IdOp::Cancel(id)
                }
            })
            .collect(),
        Op::Reset(pick, tick) => vec![IdOp::Reset(id_of(pick as u64), tick.at(now))],
        Op::Deadline(pick) => {
            let id = id_of(pick as u64);
            let mut ops = vec![IdOp::Look(id)];
            if (pick >> 40) % 2 == 0 {
                let at = now.saturating_add((pick >> 48) as u64 % 130);
                let then = at.saturating_add(64 * ((pick >> 56) as u64 % 4 + 1));
                ops.extend(aging(id, ((pick >> 42) % 3) as u32, at, then));
            }
            ops
        }
        Op::Poll(tick) => vec![IdOp::Poll(tick.at(now))],
        Op::Drain(tick) => vec![IdOp::Drain(tick.at(now))],
        Op::NextExpiration => vec![IdOp::NextExpiration],
        Op::Len => vec![],
        Op::Shrink => vec![IdOp::Shrink],
        Op::Clear => vec![IdOp::Clear],
    }
}

/// [`long_run`] for the `IdWheel`: the same seeded stream through [`id_ops`], a fresh wheel
/// and model at the far end of time and after every million operations.
fn long_id_run(seed: u64, total: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut done = 0u64;
    while done < total {
        let mut run = IdRun::new();
        let mut ran = 0u64;
        while done < total && ran < 1_000_000 && run.now() < u64::MAX / 2 {
            let op = random_op(&mut rng);
            let id_ops = id_ops(&op, run.now(), done);
            for id_op in &id_ops {
                if let Err(e) = run.apply(*id_op, done as u32) {
                    panic!("seed {seed}, operation {done} ({op:?} as {id_op:?}): {e}");
                }
            }
            if run.wheel.len() <= 1024 || done % 64 == 0 {
                run.wheel.check_invariants();
            }
            let weight = id_ops.len().max(1) as u64;
            done += weight;
            ran += weight;
        }
        if let Err(e) = run.finish() {
            panic!("seed {seed}, final drain: {e}");
        }
    }
}

/// The generators reach what they claim to: boundaries, far ticks and `u64::MAX`.
#[test]
fn ticks_land_where_intended() {
    assert_eq!(Tick::Boundary(1, 0).at(0), 64);
    assert_eq!(Tick::Boundary(1, -1).at(64), 127);
    assert_eq!(Tick::Boundary(2, 1).at(5_000), 8_193);
    assert_eq!(Tick::Boundary(10, 0).at(3), 1 << 60);
    assert_eq!(Tick::Boundary(10, 1).at(u64::MAX - 5), u64::MAX);
    assert_eq!(Tick::Boundary(10, -1).at(15 << 60), u64::MAX - 1);
    assert_eq!(Tick::Far(63).at(1 << 63), u64::MAX);
    assert_eq!(Tick::Past(10).at(4), 0);
    assert_eq!(Tick::Near(129).at(u64::MAX), u64::MAX);
}

/// Draws an operation with about the weights of [`op`], from a seeded generator.
fn random_op(rng: &mut SplitMix64) -> Op {
    let deadline = |rng: &mut SplitMix64| match rng.below(14) {
        0 | 1 => Tick::Past(rng.in_range(1..=1_999)),
        2..=7 => Tick::Near(rng.below(130)),
        8..=10 => Tick::Boundary(rng.in_range(1..=10) as u32, rng.below(3) as i8 - 1),
        11 | 12 => Tick::Far(rng.below(64) as u32),
        _ => Tick::Max,
    };
    // Like `target`, but jumps to the far end of time are a thousand times rarer, so that a
    // queue lives for thousands of operations.
    let target = |rng: &mut SplitMix64| match rng.below(10_000) {
        0..=799 => Tick::Past(rng.in_range(1..=99)),
        800..=1_599 => Tick::Near(0),
        1_600..=6_599 => Tick::Near(rng.below(130)),
        6_600..=8_199 => Tick::Boundary(rng.in_range(1..=10) as u32, rng.below(3) as i8 - 1),
        8_200..=9_997 => Tick::Far(rng.below(40) as u32),
        9_998 => Tick::Far(rng.in_range(40..=63) as u32),
        _ => Tick::Max,
    };
    let pick = |rng: &mut SplitMix64| rng.next_u64() as usize;
    match rng.below(27) {
        0..=7 => Op::Insert(deadline(rng)),
        8 => Op::Burst(
            deadline(rng),
            rng.in_range(257..=799) as u16,
            rng.below(3) as u32,
        ),
        9 | 10 => Op::Remove(pick(rng)),
        11 => Op::CancelStorm(pick(rng), rng.in_range(1..=599) as u16),
        12..=14 => Op::Reset(pick(rng), deadline(rng)),
        15 => Op::Deadline(pick(rng)),
        16..=18 => Op::Poll(target(rng)),
        19 | 20 => Op::Drain(target(rng)),
        21 => Op::NextExpiration,
        22 => Op::Len,
        23 => Op::Shrink,
        // Extra polls and inserts keep the queue turning over in a long run.
        24 => Op::Poll(Tick::Near(rng.below(130))),
        _ => Op::Insert(Tick::Near(rng.below(130))),
    }
}

/// Runs `total` seeded queue operations (a burst or a cancel storm counts as the inserts or
/// removals it makes) on queues of flavor `F` against the model. A queue whose
/// clock has run to the far end of time (where every deadline is `u64::MAX`) is drained,
/// checked and replaced by a fresh one, and so is one after every million operations; the key
/// list keeps the last 10^5 keys issued, stale ones included.
fn long_run<S: Subject>(fresh: fn() -> S, seed: u64, total: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut done = 0u64;
    let mut queues = 0u64;
    while done < total {
        queues += 1;
        let mut q = fresh();
        let mut model = Model::default();
        let mut keys = Keys::default();
        let mut run = 0u64;
        while done < total && run < 1_000_000 && q.now() < u64::MAX / 2 {
            let op = random_op(&mut rng);
            if let Err(e) = apply(&mut q, &mut model, &mut keys, &op, done as u32) {
                panic!("seed {seed}, operation {done} ({op:?}): {e}");
            }
            assert_eq!(
                q.len(),
                model.timers.len(),
                "len after operation {done} ({op:?})"
            );
            assert_eq!(q.now(), model.now, "now after operation {done} ({op:?})");
            // Every operation while the queue is small, then every 64th (a check visits
            // every timer).
            if q.len() <= 1024 || done % 64 == 0 {
                q.check_invariants();
            }
            // A burst or a storm counts as the queue operations it makes.
            let weight = match op {
                Op::Burst(_, count, _) | Op::CancelStorm(_, count) => u64::from(count),
                _ => 1,
            };
            if keys.list.len() > 200_000 {
                keys.forget_oldest(100_000);
            }
            done += weight;
            run += weight;
        }
        let rest = drain(&mut q, u64::MAX);
        let expected: Vec<_> = std::iter::from_fn(|| model.poll(u64::MAX)).collect();
        assert_eq!(rest, expected, "final drain, seed {seed}");
    }
    println!("{total} operations on {queues} queues, seed {seed}");
}

/// Operations a queue for `long_model_run`: `TICKWHEEL_MODEL_OPS`, 20 000 if unset.
fn long_run_ops() -> u64 {
    match std::env::var("TICKWHEEL_MODEL_OPS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("TICKWHEEL_MODEL_OPS={text:?} is not a count")),
        Err(_) => 20_000,
    }
}

/// The soak when `TICKWHEEL_MODEL_OPS` is large (`cargo xtask soak` sets it): every queue
/// flavor in turn, each with its own seed, timed.
#[test]
fn long_model_run() {
    let total = long_run_ops();
    timed("Wheel", keyed::<WheelFlavor>, 1, total);
    timed("Heap", keyed::<HeapFlavor>, 2, total);
    timed("HashedWheel (512 slots)", keyed::<Hashed512>, 3, total);
    timed("HashedWheel (8 slots)", keyed::<Hashed8>, 4, total);
    timed("SlimWheel", SlimWheel::new, 5, total);
    timed_run("IdWheel", || long_id_run(6, total));
}

/// [`long_run`] on subject `S`, printing how long it took; skipped when
/// `TICKWHEEL_MODEL_ONLY` (names as printed, comma-separated) leaves it out.
fn timed<S: Subject>(name: &str, fresh: fn() -> S, seed: u64, total: u64) {
    timed_run(name, || long_run(fresh, seed, total));
}

/// Runs `run` for the queue `name`, printing how long it took, unless `TICKWHEEL_MODEL_ONLY`
/// leaves it out.
fn timed_run(name: &str, run: impl FnOnce()) {
    if let Ok(only) = std::env::var("TICKWHEEL_MODEL_ONLY") {
        if !only.split(',').any(|wanted| wanted.trim() == name) {
            println!("  {name}: skipped (TICKWHEEL_MODEL_ONLY)");
            return;
        }
    }
    let start = std::time::Instant::now();
    run();
    println!("  {name}: {:.1} s", start.elapsed().as_secs_f64());
}
