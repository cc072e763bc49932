//! What the fuzz targets share: an operation language for a [`TimerQueue`], a `BTreeMap`
//! model of the contract, and [`run`], which applies operations to both and panics at the
//! first difference or at the first broken invariant of the queue
//! (`TimerQueue::check_invariants`, after every operation).
//!
//! Ticks are chosen relative to the queue's clock (the past, the next ticks, wheel level
//! boundaries, powers of two ahead, `u64::MAX`), so that arbitrary bytes keep reaching the
//! interesting places; keys are picked among every key issued, stale ones included.
//!
//! [`run_slim`] drives the `SlimWheel`, whose reset returns a new key: the model then drops
//! the old key and takes the new one, and the old one is picked later as a stale key.
//!
//! [`run_id`] drives the `IdWheel`, named by the caller's ids, with operations of its own
//! ([`IdFuzzOp`]: ids instead of picks, and the restart of a spent generation) through the
//! id-named driver the model tests use (`tests/common/ids.rs`).

use std::collections::HashSet;

use arbitrary::Arbitrary;
use tickwheel::{SlimWheel, TimerKey, TimerQueue};

/// The queue side of the drivers, shared with `crates/tickwheel/tests/model.rs`.
#[path = "../../crates/tickwheel/tests/common/subject.rs"]
mod subject;
/// The `IdWheel`'s driver, shared with `crates/tickwheel/tests/model.rs`.
#[path = "../../crates/tickwheel/tests/common/ids.rs"]
mod ids;
use ids::{aging, IdOp, IdRun, ID_SPAN};
use subject::{drain, Keyed, Subject};

/// A tick relative to the queue's clock when the operation runs.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Tick {
    /// `now - n` (saturating).
    Past(u16),
    /// `now + n`.
    Near(u8),
    /// The next multiple of `64^(k % 11)` after now, plus `delta % 3 - 1`.
    Boundary(u8, u8),
    /// `now + 2^(k % 64)`.
    Far(u8),
    /// `now + n`.
    Ahead(u32),
    /// `u64::MAX`.
    Max,
}

impl Tick {
    /// The tick this names when the clock is at `now`.
    pub fn at(self, now: u64) -> u64 {
        match self {
            Tick::Past(n) => now.saturating_sub(u64::from(n)),
            Tick::Near(n) => now.saturating_add(u64::from(n)),
            Tick::Boundary(k, delta) => {
                let shift = 6 * u32::from(k % 11);
                let base = (now >> shift)
                    .saturating_add(1)
                    .checked_shl(shift)
                    .filter(|&b| b >> shift > now >> shift)
                    .unwrap_or(u64::MAX);
                base.saturating_add_signed(i64::from(delta % 3) - 1)
            }
            Tick::Far(k) => now.saturating_add(1 << (k % 64)),
            Tick::Ahead(n) => now.saturating_add(u64::from(n)),
            Tick::Max => u64::MAX,
        }
    }
}

/// One operation; `u16` fields pick a key among the keys issued so far.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    Insert(Tick),
    /// `count` inserts at `tick + (i * 37) % 64^(spread % 3)`.
    Burst(Tick, u8, u8),
    Remove(u16),
    /// `count` removals picked with a stride from `start`.
    CancelStorm(u16, u8),
    Reset(u16, Tick),
    Deadline(u16),
    GetMut(u16),
    Poll(Tick),
    Drain(Tick),
    NextExpiration,
    Shrink,
    /// Every timer removed, when the byte is 0 (one such op in 256, so that the queue still
    /// grows between two).
    Clear(u8),
}

/// The reference: the contract written as plainly as possible (`tickwheel_lab::model`).
type Model = tickwheel_lab::model::Model<TimerKey, u32>;

/// Applies `ops` to `q` (fresh) and to the model, panicking at the first difference; at the
/// end everything left must fire in model order.
pub fn run<Q: TimerQueue<u32>>(q: Q, ops: &[Op]) {
    drive(Keyed(q), ops);
}

/// [`run`] for the `SlimWheel`, whose reset re-keys the timer.
pub fn run_slim(q: SlimWheel<u32>, ops: &[Op]) {
    drive(q, ops);
}

fn drive<Q: Subject>(mut q: Q, ops: &[Op]) {
    let mut model = Model::default();
    let mut keys: Vec<TimerKey> = Vec::new();
    let mut issued: HashSet<TimerKey> = HashSet::new();
    let pick =
        |keys: &[TimerKey], i: u16| (!keys.is_empty()).then(|| keys[usize::from(i) % keys.len()]);
    for (step, op) in ops.iter().enumerate() {
        let value = step as u32;
        match *op {
            Op::Insert(tick) => {
                let deadline = tick.at(q.now());
                let key = q.insert(deadline, value);
                assert!(issued.insert(key), "key {key:?} issued twice");
                model.insert(key, deadline, value);
                keys.push(key);
            }
            Op::Burst(tick, count, spread) => {
                let base = tick.at(q.now());
                for i in 0..u64::from(count) * 4 {
                    let deadline = base.saturating_add((i * 37) % (1 << (6 * (spread % 3))));
                    let key = q.insert(deadline, value);
                    assert!(issued.insert(key), "key {key:?} issued twice");
                    model.insert(key, deadline, value);
                    keys.push(key);
                }
            }
            Op::Remove(i) => {
                if let Some(key) = pick(&keys, i) {
                    assert_eq!(q.remove(key), model.remove(key), "remove({key:?})");
                }
            }
            Op::CancelStorm(start, count) => {
                for n in 0..u16::from(count) * 2 {
                    if let Some(key) = pick(&keys, start.wrapping_add(n.wrapping_mul(97))) {
                        // Every other one a cancel, which hands no value back.
                        if n % 2 == 0 {
                            assert_eq!(q.remove(key), model.remove(key), "remove({key:?})");
                        } else {
                            let live = model.remove(key).is_some();
                            assert_eq!(q.cancel(key), live, "cancel({key:?})");
                        }
                    }
                }
            }
            Op::Reset(i, tick) => {
                if let Some(key) = pick(&keys, i) {
                    let deadline = tick.at(q.now());
                    match q.reset(key, deadline) {
                        // A new key: a reset is a removal and a new insertion.
                        Some(new) if new != key => {
                            let value = model.remove(key).expect("a stale key was reset");
                            assert!(issued.insert(new), "key {new:?} issued twice");
                            model.insert(new, deadline, value);
                            keys.push(new);
                        }
                        got => assert_eq!(
                            got.is_some(),
                            model.reset(key, deadline),
                            "reset({key:?}, {deadline})"
                        ),
                    }
                }
            }
            Op::Deadline(i) => {
                if let Some(key) = pick(&keys, i) {
                    let expected = model.timers.get(&key).map(|t| t.0);
                    assert_eq!(q.deadline(key), expected, "deadline({key:?})");
                }
            }
            Op::GetMut(i) => {
                if let Some(key) = pick(&keys, i) {
                    let expected = model.timers.get(&key).map(|t| t.2);
                    assert_eq!(q.get(key).copied(), expected, "get({key:?})");
                    assert_eq!(q.get_mut(key).map(|v| *v), expected, "get_mut({key:?})");
                }
            }
            Op::Poll(tick) => {
                let t = tick.at(q.now());
                assert_eq!(q.poll_expired(t), model.poll(t), "poll_expired({t})");
            }
            Op::Drain(tick) => {
                let t = tick.at(q.now());
                let got = drain(&mut q, t);
                let expected: Vec<_> = std::iter::from_fn(|| model.poll(t)).collect();
                assert_eq!(got, expected, "drain_expired({t})");
            }
            Op::NextExpiration => {
                let earliest = model.order.keys().next().map(|&(eff, _)| eff);
                let next = q.next_expiration();
                assert_eq!(next.is_some(), earliest.is_some(), "next_expiration");
                if let (Some(next), Some(earliest)) = (next, earliest) {
                    assert!(next <= earliest, "next_expiration {next} > {earliest}");
                }
            }
            Op::Shrink => q.shrink_to_fit(),
            Op::Clear(0) => {
                q.clear();
                model.clear();
                assert_eq!(q.next_expiration(), None, "next_expiration after clear");
            }
            Op::Clear(_) => {}
        }
        assert_eq!(q.len(), model.timers.len(), "len after {op:?}");
        assert_eq!(q.now(), model.now, "now after {op:?}");
        q.check_invariants();
    }
    let rest = drain(&mut q, u64::MAX);
    let expected: Vec<_> = std::iter::from_fn(|| model.poll(u64::MAX)).collect();
    assert_eq!(rest, expected, "final drain");
}

/// One operation on an `IdWheel`; `u16` ids are taken modulo [`ID_SPAN`] (past the id limit
/// for the last few), most of them among the first 64 when the top bit is clear, so that
/// inserts replace and resets find timers.
#[derive(Arbitrary, Clone, Debug)]
pub enum IdFuzzOp {
    Insert(u16, Tick),
    /// `count` inserts on ids from `id` on, at `tick + (i * 37) % 64^(spread % 3)`.
    Burst(u16, Tick, u8, u8),
    Remove(u16),
    Cancel(u16),
    Reset(u16, Tick),
    /// `deadline`, `get_mut` and `contains`.
    Look(u16),
    /// The id through a restart of its generation (`ids::aging`), `left % 3` short of the
    /// last, between `tick` and a later slot.
    Age(u16, u8, Tick),
    Poll(Tick),
    Drain(Tick),
    NextExpiration,
    Shrink,
    /// Every id idle at once, when the byte is 0 (one such op in 256).
    Clear(u8),
}

/// The id `n` names: modulo 64 while its top bit is clear, else modulo [`ID_SPAN`].
fn id_of(n: u16) -> u32 {
    if n & 0x8000 == 0 {
        u32::from(n % 64)
    } else {
        u32::from(n & 0x7fff) % ID_SPAN
    }
}

/// Applies `ops` to a fresh `IdWheel` and to the model, panicking at the first difference or
/// broken invariant; at the end everything left must fire in model order.
pub fn run_id(ops: &[IdFuzzOp]) {
    let mut run = IdRun::new();
    for (step, op) in ops.iter().enumerate() {
        let now = run.now();
        let id_ops: Vec<IdOp> = match *op {
            IdFuzzOp::Insert(id, tick) => vec![IdOp::Insert(id_of(id), tick.at(now))],
            IdFuzzOp::Burst(id, tick, count, spread) => {
                let base = tick.at(now);
                (0..u16::from(count))
                    .map(|i| {
                        let shift = 6 * (u64::from(spread) % 3);
                        let deadline = base.saturating_add((u64::from(i) * 37) % (1 << shift));
                        IdOp::Insert(id_of(id.wrapping_add(i)), deadline)
                    })
                    .collect()
            }
            IdFuzzOp::Remove(id) => vec![IdOp::Remove(id_of(id))],
            IdFuzzOp::Cancel(id) => vec![IdOp::Cancel(id_of(id))],
            IdFuzzOp::Reset(id, tick) => vec![IdOp::Reset(id_of(id), tick.at(now))],
            IdFuzzOp::Look(id) => vec![IdOp::Look(id_of(id))],
            IdFuzzOp::Age(id, left, tick) => {
                let at = tick.at(now);
                aging(id_of(id), u32::from(left % 3), at, at.saturating_add(64)).to_vec()
            }
            IdFuzzOp::Poll(tick) => vec![IdOp::Poll(tick.at(now))],
            IdFuzzOp::Drain(tick) => vec![IdOp::Drain(tick.at(now))],
            IdFuzzOp::NextExpiration => vec![IdOp::NextExpiration],
            IdFuzzOp::Shrink => vec![IdOp::Shrink],
            IdFuzzOp::Clear(0) => vec![IdOp::Clear],
            IdFuzzOp::Clear(_) => vec![],
        };
        for id_op in id_ops {
            if let Err(e) = run.apply(id_op, step as u32) {
                panic!("{op:?} as {id_op:?}: {e}");
            }
        }
        run.wheel.check_invariants();
    }
    if let Err(e) = run.finish() {
        panic!("{e}");
    }
}
