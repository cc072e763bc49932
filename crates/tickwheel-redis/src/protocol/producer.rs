//! The producer's scripts: SCHEDULE, CANCEL, RESCHEDULE, STATE.

use redis::{Cmd, Script, Value};

use super::ShardKeys;
use super::{flags, now_arg, shard_keys, Call, Fields};
use crate::error::Error;
use crate::failure::FailReason;
use crate::protocol::scripts::scripts;
use crate::task::{RunAt, TaskState};

/// A run-at on the wire: `<ms>` an instant, `-<ms>` a delay from the script's now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    /// At this instant, ms since the Unix epoch.
    At(u64),
    /// This many ms after the script's now.
    After(u64),
}

impl When {
    /// Checks and converts a run-at ([`Error::InvalidRunAt`] when out of range).
    pub(crate) fn new(run_at: RunAt) -> Result<When, Error> {
        let (mode, ms) = run_at.encode()?;
        Ok(if mode == "d" {
            When::After(ms)
        } else {
            When::At(ms)
        })
    }

    fn arg(self) -> String {
        match self {
            When::At(ms) => ms.to_string(),
            When::After(ms) => format!("-{ms}"),
        }
    }

    /// The instant, given the now the script used (`None` when it read no clock).
    fn resolve(self, now: Option<u64>, script: &str) -> Result<u64, Error> {
        match (self, now) {
            (When::At(ms), _) => Ok(ms),
            (When::After(ms), Some(now)) => Ok(now + ms),
            (When::After(_), None) => Err(Error::Protocol(format!("{script}: no now for a delay"))),
        }
    }
}

/// What a schedule stored: returned by [`Producer::schedule`](crate::Producer::schedule) and
/// its bulk and recurring forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scheduled {
    /// The stored task's version (as [`TaskState`] and each delivery report it): a handler
    /// tells deliveries of this task from those of the task it replaced by it.
    pub version: u64,
    /// Its run-at, ms since the Unix epoch (for [`RunAt::After`], the instant Redis computed
    /// from its clock).
    pub run_at_ms: u64,
    /// Whether it replaced a task with the same id (one stored before, or one given earlier
    /// in the same bulk call).
    pub replaced: bool,
}

/// One task of a [`Schedule`] call, checked.
#[derive(Clone, Debug)]
pub(crate) struct ScheduleTask<'a> {
    pub id: &'a str,
    pub when: When,
    pub payload: &'a [u8],
    /// The encoded recurrence, empty for a one-shot task.
    pub recurrence: String,
    /// The encoded retry policy, empty for the namespace's.
    pub policy: String,
}

impl ScheduleTask<'_> {
    /// The stored value's tail `<recurrence length>:<policy length>:<recurrence><policy>
    /// <payload>` (see `parse` in `prelude.lua`): the script only prepends the version,
    /// attempt and due.
    fn tail(&self) -> Vec<u8> {
        let (rec, pol) = (&self.recurrence, &self.policy);
        let mut tail = Vec::with_capacity(rec.len() + pol.len() + self.payload.len() + 16);
        tail.extend_from_slice(format!("{}:{}:{rec}{pol}", rec.len(), pol.len()).as_bytes());
        tail.extend_from_slice(self.payload);
        tail
    }
}

/// SCHEDULE (`schedule.lua`): stores tasks of one shard, replacing those with the same ids.
/// Reply: one [`Scheduled`] per task, in order.
pub(crate) struct Schedule<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The namespace's notification channel.
    pub channel: &'a str,
    pub shard: u32,
    pub tasks: &'a [ScheduleTask<'a>],
}

impl Call for Schedule<'_> {
    type Reply = Vec<Scheduled>;

    fn script(&self) -> &'static Script {
        &scripts().schedule
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.channel).arg(self.shard);
        for t in self.tasks {
            cmd.arg(t.id).arg(t.when.arg()).arg(t.tail());
        }
    }

    /// `{first version, now or -1 (no clock read), {indices of the tasks that replaced}}`:
    /// task `k` (from 1) has version `first + k - 1`.
    fn decode(&self, reply: Value) -> Result<Vec<Scheduled>, Error> {
        let mut f = Fields::new("SCHEDULE", reply)?;
        let first = f.u64()?;
        let now = u64::try_from(f.int()?).ok();
        let mut out = self
            .tasks
            .iter()
            .zip(first..)
            .map(|(t, version)| {
                Ok(Scheduled {
                    version,
                    run_at_ms: t.when.resolve(now, "SCHEDULE")?,
                    replaced: false,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let mut replaced = f.nested()?;
        while !replaced.is_empty() {
            let k = replaced.u64()? as usize;
            out.get_mut(k.wrapping_sub(1))
                .ok_or_else(|| Error::Protocol(format!("SCHEDULE: no task {k}")))?
                .replaced = true;
        }
        Ok(out)
    }
}

/// CANCEL (`cancel.lua`): cancels tasks of one shard. Reply: per id, whether it was
/// cancelled (see [`Producer::cancel`](crate::Producer::cancel)).
pub(crate) struct Cancel<'a> {
    pub keys: &'a ShardKeys,
    pub ids: &'a [&'a str],
}

impl Call for Cancel<'_> {
    type Reply = Vec<bool>;

    fn script(&self) -> &'static Script {
        &scripts().cancel
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.ids);
    }

    fn decode(&self, reply: Value) -> Result<Vec<bool>, Error> {
        flags("CANCEL", reply, self.ids.len())
    }
}

/// RESCHEDULE (`reschedule.lua`): moves pending tasks of one shard, in order. Reply: per
/// move, whether the task was pending and moved.
pub(crate) struct Reschedule<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The namespace's notification channel.
    pub channel: &'a str,
    pub shard: u32,
    pub moves: &'a [(&'a str, When)],
}

impl Call for Reschedule<'_> {
    type Reply = Vec<bool>;

    fn script(&self) -> &'static Script {
        &scripts().reschedule
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.channel).arg(self.shard);
        for (id, when) in self.moves {
            cmd.arg(*id).arg(when.arg());
        }
    }

    fn decode(&self, reply: Value) -> Result<Vec<bool>, Error> {
        flags("RESCHEDULE", reply, self.moves.len())
    }
}

/// STATE (`state.lua`): where a task is.
pub(crate) struct State<'a> {
    pub keys: &'a ShardKeys,
    pub id: &'a str,
}

impl Call for State<'_> {
    type Reply = TaskState;

    fn script(&self) -> &'static Script {
        &scripts().state
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.id);
    }

    /// `{0}` unknown, `{1, run_at, attempts, version}` pending, `{2, due, attempt, version,
    /// visible_at}` in flight, `{3, failed at, attempts, version, reason}` failed.
    fn decode(&self, reply: Value) -> Result<TaskState, Error> {
        let mut f = Fields::new("STATE", reply)?;
        Ok(match f.int()? {
            0 => TaskState::Unknown,
            1 => TaskState::Pending {
                run_at_ms: f.u64()?,
                attempts: f.u64()? as u32,
                version: f.u64()?,
            },
            2 => TaskState::InFlight {
                due_ms: f.u64()?,
                attempt: f.u64()? as u32,
                version: f.u64()?,
                visible_at_ms: f.u64()?,
            },
            3 => TaskState::Failed {
                failed_at_ms: f.u64()?,
                attempts: f.u64()? as u32,
                version: f.u64()?,
                reason: FailReason::parse(&f.string()?)?,
            },
            s => return Err(Error::Protocol(format!("STATE: status {s}"))),
        })
    }
}
