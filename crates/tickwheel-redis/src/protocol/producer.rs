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

/// What a create-only schedule did: returned by
/// [`Producer::schedule_once`](crate::Producer::schedule_once) and its bulk form. Only
/// [`Stored`](ScheduledOnce::Stored) stored anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduledOnce {
    /// The id was free: the task is stored now, as
    /// [`schedule`](crate::Producer::schedule) stores it (`replaced` is `false`).
    Stored(Scheduled),
    /// A task has the id, pending, in flight or in the failed set (never
    /// [`TaskState::Unknown`]): nothing stored. Its state, as
    /// [`Producer::state`](crate::Producer::state) would read it after the call (an id
    /// given earlier in the same bulk call: the task stored for it).
    Exists(TaskState),
    /// No task has the id, but a create-only schedule named it within the idempotency
    /// window ([`Config::idempotency_window`](crate::Config::idempotency_window)): nothing
    /// stored. The task scheduled then may have run (or been cancelled, or discarded from the
    /// failed set).
    Remembered,
}

impl ScheduledOnce {
    /// What was stored, when this call stored the task.
    pub fn stored(&self) -> Option<&Scheduled> {
        match self {
            ScheduledOnce::Stored(s) => Some(s),
            _ => None,
        }
    }
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
        self.encode_with(cmd, "");
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

impl Schedule<'_> {
    /// Keys, now, channel, shard, `window` (empty: replace; else create-only), the tasks.
    fn encode_with(&self, cmd: &mut Cmd, window: &str) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.channel).arg(self.shard).arg(window);
        for t in self.tasks {
            cmd.arg(t.id).arg(t.when.arg()).arg(t.tail());
        }
    }
}

/// SCHEDULE in create-only mode (`schedule.lua`): stores the tasks of one shard whose ids
/// are free (no task, not remembered), and remembers every id of the call for `window_ms`.
/// Reply: one [`ScheduledOnce`] per task, in order.
pub(crate) struct ScheduleOnce<'a> {
    pub schedule: Schedule<'a>,
    /// The idempotency window, ms (0: remember nothing).
    pub window_ms: u64,
}

impl Call for ScheduleOnce<'_> {
    type Reply = Vec<ScheduledOnce>;

    fn script(&self) -> &'static Script {
        &scripts().schedule
    }

    fn encode(&self, cmd: &mut Cmd) {
        self.schedule.encode_with(cmd, &self.window_ms.to_string());
    }

    /// `{first version, now, {}, {answer per task}}`: `{0}` stored (the stored tasks take
    /// versions from `first` in order), a [`State`] reply for a taken id, `{4}` remembered.
    fn decode(&self, reply: Value) -> Result<Vec<ScheduledOnce>, Error> {
        let mut f = Fields::new("SCHEDULE", reply)?;
        let first = f.u64()?;
        let now = Some(f.u64()?);
        if !f.nested()?.is_empty() {
            return Err(Error::Protocol(
                "SCHEDULE: a create-only schedule replaced a task".into(),
            ));
        }
        let mut answers = f.nested()?;
        let mut version = first;
        let mut out = Vec::with_capacity(self.schedule.tasks.len());
        for t in self.schedule.tasks {
            let mut a = answers.nested()?;
            let status = a.int()?;
            out.push(match status {
                0 => {
                    version += 1;
                    ScheduledOnce::Stored(Scheduled {
                        version: version - 1,
                        run_at_ms: t.when.resolve(now, "SCHEDULE")?,
                        replaced: false,
                    })
                }
                1..=3 => ScheduledOnce::Exists(task_state(status, &mut a)?),
                4 => ScheduledOnce::Remembered,
                s => return Err(Error::Protocol(format!("SCHEDULE: answer {s}"))),
            });
        }
        if !answers.is_empty() {
            return Err(Error::Protocol("SCHEDULE: too many answers".into()));
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
        let status = f.int()?;
        task_state(status, &mut f)
    }
}

/// A task's state after its status (`state_of` in `prelude.lua`): the fields that follow.
fn task_state(status: i64, f: &mut Fields) -> Result<TaskState, Error> {
    Ok(match status {
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
        s => return Err(Error::Protocol(format!("{}: status {s}", f.script))),
    })
}
