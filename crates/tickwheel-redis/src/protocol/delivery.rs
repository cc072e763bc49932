//! The worker's delivery scripts: LOAD (a window step), DELIVER (claims), ACK, RETRY.
//!
//! Times handed to the worker's wheel are *wheel times*: the wheel is polled `ahead` ms
//! ahead of the clock (the claim-ahead), so a task that may be claimed from instant `t` on is
//! armed at `t + ahead` when `t` is a visibility deadline, and at its run-at when pending
//! (DELIVER claims a pending task `ahead` before its run-at).

use redis::{Cmd, Script, Value};

use super::{flag, now_arg, shard_keys, Call, Fields};
use super::{ShardKeys, Tenure};
use crate::error::Error;
use crate::protocol::scripts::scripts;

/// Where a window read resumes: the first bucket not read to its end, the generation of its
/// list that was read (empty when none of its entries was), and how many entries of that
/// generation were read (see `open_list` in `prelude.lua`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resume {
    pub bucket: u64,
    pub generation: String,
    pub offset: u64,
}

/// LOAD (`load.lua`): reads a step of a shard's window, up to the bucket holding `to_ms`, at
/// most `limit` list entries, and sets the shard's horizon (from then on, schedules at or
/// before it are published).
pub(crate) struct Load<'a> {
    pub keys: &'a ShardKeys,
    /// The fencing token.
    pub tenure: Tenure<'a>,
    /// `None` to read from the first bucket, else where the last step stopped.
    pub from: Option<&'a Resume>,
    pub to_ms: u64,
    pub limit: usize,
    /// Whether to read the in-flight set too (on the first read of a tenure).
    pub in_flight: bool,
    /// The claim-ahead, ms: in-flight tasks are armed this much after their deadline.
    pub ahead_ms: u64,
}

/// A task to arm in the wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Armed {
    pub id: String,
    /// The wheel time (see the module doc): a pending task's run-at, an in-flight task's
    /// visibility deadline plus the claim-ahead.
    pub at_ms: u64,
    pub version: u64,
}

/// A window step as read by [`Load`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// The shard's new horizon, ms: the end of the last bucket read to its end.
    pub horizon_ms: u64,
    /// Where the next step resumes.
    pub next: Resume,
    /// Whether the step stopped at its limit (more remains up to `to_ms`).
    pub more: bool,
    pub pending: Vec<Armed>,
    /// Empty unless [`Load::in_flight`].
    pub in_flight: Vec<Armed>,
}

/// The reply to [`Load`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LoadReply {
    /// The shard is no longer held under the tenure: it is lost.
    Fenced,
    Loaded(Window),
}

impl Call for Load<'_> {
    type Reply = LoadReply;

    fn script(&self) -> &'static Script {
        &scripts().load
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.tenure);
        match self.from {
            None => cmd.arg("-inf").arg("").arg(0),
            Some(r) => cmd.arg(r.bucket).arg(&r.generation).arg(r.offset),
        };
        cmd.arg(self.to_ms)
            .arg(self.limit)
            .arg(flag(self.in_flight));
    }

    /// `{-1}` fenced, else `{horizon, next bucket, next generation, next offset, more,
    /// {id, run_at, version, ...}, {id, visible_at, version, ...}}`.
    fn decode(&self, reply: Value) -> Result<LoadReply, Error> {
        let mut f = Fields::new("LOAD", reply)?;
        let horizon = f.int()?;
        if horizon < 0 {
            return Ok(LoadReply::Fenced);
        }
        let next = Resume {
            bucket: f.u64()?,
            generation: f.string()?,
            offset: f.u64()?,
        };
        let more = f.int()? == 1;
        let pending = armed(f.nested()?, 0)?;
        let in_flight = armed(f.nested()?, self.ahead_ms)?;
        Ok(LoadReply::Loaded(Window {
            horizon_ms: horizon as u64,
            next,
            more,
            pending,
            in_flight,
        }))
    }
}

/// Triples `id, ms, version`, armed at `ms + shift`.
fn armed(mut f: Fields, shift: u64) -> Result<Vec<Armed>, Error> {
    let mut out = Vec::new();
    while !f.is_empty() {
        out.push(Armed {
            id: f.string()?,
            at_ms: f.u64()? + shift,
            version: f.u64()?,
        });
    }
    Ok(out)
}

/// DELIVER (`deliver.lua`): claims tasks of one shard that are due within `ahead_ms` (or in
/// flight past their visibility deadline; with `force`, in flight whatever their deadline:
/// claims sent again after a lost reply, under the same epoch).
pub(crate) struct Deliver<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The fencing token.
    pub tenure: Tenure<'a>,
    pub visibility_ms: u64,
    /// The claim-ahead, ms.
    pub ahead_ms: u64,
    /// Whether Redis is a Cluster (the reply then names the node, see `node_id`).
    pub cluster: bool,
    pub force: bool,
    pub ids: &'a [String],
}

/// A task claimed: the worker holds it, and delivers it at its run-at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub id: String,
    pub version: u64,
    pub attempt: u32,
    pub due_ms: u64,
    pub payload: Vec<u8>,
    /// The encoded recurrence, empty for a one-shot task.
    pub recurrence: String,
    /// When it may be claimed again if not acknowledged (server time, ms).
    pub visible_at_ms: u64,
    /// The wheel time to arm it at, to claim it again if still unacknowledged then.
    pub rearm_at_ms: u64,
    /// Whether it was in flight when claimed (its visibility deadline had passed, or the
    /// claim was forced): then it was claimed before, and may have been delivered.
    pub was_in_flight: bool,
}

/// What DELIVER did with one id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    Claimed(Claimed),
    /// Not claimable yet: arm it again at `at_ms`, a wheel time.
    NotYet {
        id: String,
        at_ms: u64,
        version: u64,
    },
    /// No such task any more (cancelled, acknowledged).
    Gone {
        id: String,
    },
}

/// The reply to [`Deliver`]: a reading of the clock of the node that judged the claims, and
/// the claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeliverReply {
    pub now_ms: u64,
    pub now_us: i64,
    /// The Cluster node id, empty on one server.
    pub node: String,
    /// Whether the shard is paused: nothing was claimed, and `claims` is `None`.
    pub paused: bool,
    /// `None` when fenced (the shard is lost) or paused, else one entry per id, in order.
    pub claims: Option<Vec<Claim>>,
}

impl Call for Deliver<'_> {
    type Reply = DeliverReply;

    fn script(&self) -> &'static Script {
        &scripts().deliver
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.tenure)
            .arg(self.visibility_ms)
            .arg(self.ahead_ms)
            .arg(flag(self.cluster))
            .arg(flag(self.force))
            .arg(self.ids);
    }

    /// `{-1 (fenced) | -2 (paused) | 1, now, now_us, node, entry...}`, entries `{1, id, version,
    /// attempt, due, payload, recurrence, deadline}`, `{2, id, ms, version}`, `{0, id}`.
    fn decode(&self, reply: Value) -> Result<DeliverReply, Error> {
        let mut f = Fields::new("DELIVER", reply)?;
        let status = f.int()?;
        let mut out = DeliverReply {
            now_ms: f.u64()?,
            now_us: f.int()?,
            node: f.string()?,
            paused: status == -2,
            claims: None,
        };
        if status < 0 {
            return Ok(out);
        }
        let mut claims = Vec::with_capacity(self.ids.len());
        while !f.is_empty() {
            claims.push(self.claim(f.nested()?)?);
        }
        out.claims = Some(claims);
        Ok(out)
    }
}

impl Deliver<'_> {
    fn claim(&self, mut e: Fields) -> Result<Claim, Error> {
        Ok(match e.int()? {
            1 => {
                let (id, version, attempt) = (e.string()?, e.u64()?, e.u64()? as u32);
                let (due_ms, payload, recurrence) = (e.u64()?, e.bytes()?, e.string()?);
                let (visible_at_ms, was_in_flight) = (e.u64()?, e.int()? == 1);
                Claim::Claimed(Claimed {
                    id,
                    version,
                    attempt,
                    due_ms,
                    payload,
                    recurrence,
                    visible_at_ms,
                    rearm_at_ms: visible_at_ms + self.ahead_ms,
                    was_in_flight,
                })
            }
            2 => Claim::NotYet {
                id: e.string()?,
                at_ms: e.u64()?,
                version: e.u64()?,
            },
            0 => Claim::Gone { id: e.string()? },
            s => return Err(Error::Protocol(format!("DELIVER: entry status {s}"))),
        })
    }
}

/// One delivery to acknowledge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AckItem<'a> {
    pub id: &'a str,
    pub version: u64,
    pub attempt: u32,
    /// A recurring task's next run, ms; `None` removes the task (one-shot, or a series that
    /// ended).
    pub next_run_ms: Option<u64>,
}

/// ACK (`ack.lua`): acknowledges deliveries of one shard that are still the current ones
/// (same epoch, version and attempt), re-arming recurring tasks at their next run.
pub(crate) struct Ack<'a> {
    pub keys: &'a ShardKeys,
    /// The fencing token.
    pub tenure: Tenure<'a>,
    /// The namespace's notification channel.
    pub channel: &'a str,
    pub shard: u32,
    pub acks: &'a [AckItem<'a>],
}

impl Call for Ack<'_> {
    /// `None` when fenced, else per delivery whether it was acknowledged (`false`: stale).
    type Reply = Option<Vec<bool>>;

    fn script(&self) -> &'static Script {
        &scripts().ack
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.tenure).arg(self.channel).arg(self.shard);
        for a in self.acks {
            cmd.arg(a.id)
                .arg(a.version)
                .arg(a.attempt)
                .arg(a.next_run_ms.unwrap_or(0));
        }
    }

    /// `{-1}` fenced, else `{1, acked (1|0)...}`.
    fn decode(&self, reply: Value) -> Result<Option<Vec<bool>>, Error> {
        let mut f = Fields::new("ACK", reply)?;
        if f.int()? < 0 {
            return Ok(None);
        }
        let acked = (0..self.acks.len())
            .map(|_| Ok(f.int()? == 1))
            .collect::<Result<Vec<bool>, Error>>()?;
        Ok(Some(acked))
    }
}

/// RETRY (`retry.lua`): puts an in-flight delivery back among the pending tasks, after
/// `after_ms` keeping its attempt count, or (`after_ms` `None`) as it was before a claim that
/// was never delivered: at its due time, the attempt count one less.
pub(crate) struct Retry<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The fencing token.
    pub tenure: Tenure<'a>,
    pub id: &'a str,
    pub version: u64,
    pub attempt: u32,
    /// The delay, ms; `None` undoes the claim.
    pub after_ms: Option<u64>,
}

/// The reply to [`Retry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryReply {
    Fenced,
    /// Not the current delivery any more.
    Stale,
    /// Pending again, at this run-at (a wheel time as well: a pending task's run-at).
    Requeued {
        run_at_ms: u64,
    },
}

impl Call for Retry<'_> {
    type Reply = RetryReply;

    fn script(&self) -> &'static Script {
        &scripts().retry
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.tenure)
            .arg(self.id)
            .arg(self.version)
            .arg(self.attempt)
            .arg(self.after_ms.unwrap_or(0))
            .arg(flag(self.after_ms.is_none()));
    }

    /// `{-1}` fenced, `{0}` stale, `{1, run_at}`.
    fn decode(&self, reply: Value) -> Result<RetryReply, Error> {
        let mut f = Fields::new("RETRY", reply)?;
        Ok(match f.int()? {
            -1 => RetryReply::Fenced,
            0 => RetryReply::Stale,
            1 => RetryReply::Requeued {
                run_at_ms: f.u64()?,
            },
            s => return Err(Error::Protocol(format!("RETRY: status {s}"))),
        })
    }
}
