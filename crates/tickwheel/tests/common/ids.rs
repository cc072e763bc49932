//! The id-named driver: an [`IdWheel`] and the model side by side, one resolved operation
//! ([`IdOp`]) at a time, written once for `tests/model.rs` and the fuzz target `id_wheel`
//! (`fuzz/src/lib.rs` includes this file by path). The model's keys are the ids; an insert
//! on a pending id replaces its timer in both (`Model::insert_or_replace`).

use std::fmt::Debug;

use tickwheel::IdWheel;
use tickwheel_lab::model::Model;

/// The drivers' id limit; they also pick ids up to [`ID_SPAN`], past it.
pub const ID_LIMIT: u32 = 1_000;
/// Ids the drivers pick from: the limit and a few past it.
pub const ID_SPAN: u32 = ID_LIMIT + 24;

/// One operation on an `IdWheel`, its ticks already resolved against the clock.
#[derive(Clone, Copy, Debug)]
pub enum IdOp {
    Insert(u32, u64),
    Remove(u32),
    Cancel(u32),
    Reset(u32, u64),
    /// `deadline`, `get_mut` and `contains` of an id.
    Look(u32),
    /// The test hook: the idle id's generation set `left` short of the last, so that the
    /// next inserts and resets on it restart it.
    Age(u32, u32),
    Poll(u64),
    Drain(u64),
    NextExpiration,
    Shrink,
    /// Every id idle at once, the clock where it is.
    Clear,
}

/// Operations that take `id` through the restart of its generation: two generations left
/// behind in the slots of `at` and `then` (a fresh id's first two), the generation aged to
/// `left` (0 to 2) short of the last, then an insert and resets back and forth between the
/// two slots, one of which passes the last generation and restarts it at the first, in the
/// slot the first generation's stale item may still lie in.
pub fn aging(id: u32, left: u32, at: u64, then: u64) -> [IdOp; 8] {
    [
        IdOp::Insert(id, at),
        IdOp::Reset(id, then),
        IdOp::Cancel(id),
        IdOp::Age(id, left),
        IdOp::Insert(id, then),
        IdOp::Reset(id, at),
        IdOp::Reset(id, then),
        IdOp::Reset(id, at),
    ]
}

/// An `IdWheel` and the model, fed the same operations.
pub struct IdRun {
    pub wheel: IdWheel<u32>,
    pub model: Model<u32, u32>,
}

/// `Ok` if `got == want`, else a message naming `what`.
fn same<T: PartialEq + Debug>(
    got: T,
    want: T,
    what: impl FnOnce() -> String,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{}: got {got:?}, model {want:?}", what()))
    }
}

impl IdRun {
    pub fn new() -> IdRun {
        IdRun {
            wheel: IdWheel::new(ID_LIMIT),
            model: Model::default(),
        }
    }

    pub fn now(&self) -> u64 {
        self.wheel.now()
    }

    /// Applies `op` to both, `value` the value of an insert; an `Err` names the first
    /// difference.
    pub fn apply(&mut self, op: IdOp, value: u32) -> Result<(), String> {
        let (q, model) = (&mut self.wheel, &mut self.model);
        match op {
            IdOp::Insert(id, deadline) => match q.insert(id, deadline, value) {
                Ok(old) => {
                    same(id < ID_LIMIT, true, || format!("insert({id}) accepted"))?;
                    let expected = model.insert_or_replace(id, deadline, value);
                    same(old, expected, || format!("insert({id}, {deadline})"))?;
                }
                Err(refused) => {
                    same(id >= ID_LIMIT, true, || format!("insert({id}) refused"))?;
                    same((refused.id(), refused.into_value()), (id, value), || {
                        "the refused insert".into()
                    })?;
                }
            },
            IdOp::Remove(id) => same(q.remove(id), model.remove(id), || format!("remove({id})"))?,
            IdOp::Cancel(id) => {
                let live = model.remove(id).is_some();
                same(q.cancel(id), live, || format!("cancel({id})"))?;
            }
            IdOp::Reset(id, deadline) => {
                same(q.reset(id, deadline), model.reset(id, deadline), || {
                    format!("reset({id}, {deadline})")
                })?
            }
            IdOp::Look(id) => {
                let timer = model.timers.get(&id);
                same(q.deadline(id), timer.map(|t| t.0), || {
                    format!("deadline({id})")
                })?;
                same(q.get(id).copied(), timer.map(|t| t.2), || {
                    format!("get({id})")
                })?;
                same(q.get_mut(id).copied(), timer.map(|t| t.2), || {
                    format!("get_mut({id})")
                })?;
                same(q.contains(id), timer.is_some(), || {
                    format!("contains({id})")
                })?;
            }
            IdOp::Age(id, left) => {
                let idle = id < ID_LIMIT && !model.timers.contains_key(&id);
                same(q.age_generation_for_tests(id, left), idle, || {
                    format!("age({id})")
                })?;
            }
            IdOp::Poll(t) => same(q.poll_expired(t), model.poll(t), || {
                format!("poll_expired({t})")
            })?,
            IdOp::Drain(t) => {
                let got: Vec<_> = q.drain_expired(t).collect();
                let expected: Vec<_> = std::iter::from_fn(|| model.poll(t)).collect();
                same(got, expected, || format!("drain_expired({t})"))?;
            }
            IdOp::NextExpiration => {
                let (next, earliest) = (q.next_expiration(), model.earliest());
                same(next.is_some(), earliest.is_some(), || {
                    "next_expiration".into()
                })?;
                if let (Some(next), Some(earliest)) = (next, earliest) {
                    same(next <= earliest, true, || {
                        format!("next_expiration {next} > {earliest}")
                    })?;
                }
            }
            IdOp::Shrink => q.shrink_to_fit(),
            IdOp::Clear => {
                let now = q.now();
                q.clear();
                model.clear();
                same(q.next_expiration(), None, || {
                    "next_expiration after clear".into()
                })?;
                same(q.now(), now, || "now after clear".into())?;
            }
        }
        same(self.wheel.len(), self.model.timers.len(), || {
            format!("len after {op:?}")
        })?;
        same(self.wheel.now(), self.model.now, || {
            format!("now after {op:?}")
        })
    }

    /// Whatever is left fires, in model order.
    pub fn finish(mut self) -> Result<(), String> {
        let rest: Vec<_> = self.wheel.drain_expired(u64::MAX).collect();
        let expected: Vec<_> = std::iter::from_fn(|| self.model.poll(u64::MAX)).collect();
        same(rest, expected, || "final drain".into())
    }
}
