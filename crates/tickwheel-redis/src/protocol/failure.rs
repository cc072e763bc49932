//! The failure scripts: FAIL (a failed attempt), FAILED_ACT (an operator's retry or
//! discard), PAUSE, and INSPECT_FAILED (a page of the failed set).

use redis::{Cmd, Script, Value};

use super::{now_arg, shard_keys, Call, Fields};
use super::{ShardKeys, Tenure};
use crate::error::Error;
use crate::failure::{ErrorLog, FailReason};
use crate::protocol::scripts::scripts;

/// What a failed attempt asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryAsk {
    /// The retry policy's backoff.
    Policy,
    /// After this many ms (while attempts remain).
    AfterMs(u64),
    /// Never: to the failed set now.
    Never,
}

/// FAIL (`fail.lua`): records a failed attempt of the current delivery, then retries the
/// task or moves it to the failed set.
pub(crate) struct Fail<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The fencing token.
    pub tenure: Tenure<'a>,
    pub channel: &'a str,
    pub shard: u32,
    pub id: &'a str,
    pub version: u64,
    pub attempt: u32,
    /// Already bounded ([`crate::failure::bounded`]).
    pub error: &'a str,
    pub retry: RetryAsk,
    /// The namespace's policy, encoded ([`crate::RetryPolicy::encode`]).
    pub policy: &'a str,
    /// The jitter draw, 0 ..= 999 999.
    pub draw: u32,
    /// Failed tasks the shard keeps.
    pub keep: u64,
    /// How long it keeps them, ms.
    pub keep_ms: u64,
    /// A recurring task's next run (ms), 0 for none.
    pub next_run_ms: u64,
}

/// The reply to [`Fail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FailReply {
    Fenced,
    /// Not the current delivery any more.
    Stale,
    /// Pending again at this run-at (a wheel time too).
    Retrying {
        run_at_ms: u64,
        failures: u32,
    },
    /// In the failed set; a recurring series re-armed at `next_run_ms` (0: ended).
    Failed {
        reason: FailReason,
        failures: u32,
        next_run_ms: u64,
    },
}

impl Call for Fail<'_> {
    type Reply = FailReply;

    fn script(&self) -> &'static Script {
        &scripts().fail
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.tenure)
            .arg(self.channel)
            .arg(self.shard)
            .arg(self.id)
            .arg(self.version)
            .arg(self.attempt)
            .arg(self.error);
        match self.retry {
            RetryAsk::Policy => cmd.arg("p"),
            RetryAsk::Never => cmd.arg("n"),
            RetryAsk::AfterMs(ms) => cmd.arg(ms),
        };
        cmd.arg(self.policy)
            .arg(self.draw.min(999_999))
            .arg(self.keep)
            .arg(self.keep_ms)
            .arg(self.next_run_ms);
    }

    /// `{-1}` fenced, `{0}` stale, `{1, run_at, failures}`, `{2, reason, failures, next}`.
    fn decode(&self, reply: Value) -> Result<FailReply, Error> {
        let mut f = Fields::new("FAIL", reply)?;
        Ok(match f.int()? {
            -1 => FailReply::Fenced,
            0 => FailReply::Stale,
            1 => FailReply::Retrying {
                run_at_ms: f.u64()?,
                failures: f.u64()? as u32,
            },
            2 => FailReply::Failed {
                reason: FailReason::parse(&f.string()?)?,
                failures: f.u64()? as u32,
                next_run_ms: f.u64()?,
            },
            s => return Err(Error::Protocol(format!("FAIL: status {s}"))),
        })
    }
}

/// An operator's action on failed tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    Retry,
    Discard,
}

/// Which failed tasks, and where a scan resumes: failed at `from_ms` or later, the first
/// `skip` of those at `from_ms` passed over (see `failed_act.lua`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FailedCursor {
    pub from_ms: u64,
    pub skip: u64,
}

impl FailedCursor {
    /// `more (1|0), next from, next skip` as both scans reply them: `None` when the range
    /// is done.
    fn decode(f: &mut Fields) -> Result<Option<FailedCursor>, Error> {
        let more = f.int()? == 1;
        let next = FailedCursor {
            from_ms: f.u64()?,
            skip: f.u64()?,
        };
        Ok(more.then_some(next))
    }
}

/// FAILED_ACT (`failed_act.lua`) on named ids: per id 1 done, 0 not failed, 2 exists.
pub(crate) struct FailedActIds<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    pub channel: &'a str,
    pub shard: u32,
    pub act: Act,
    pub ids: &'a [&'a str],
}

/// What an action did to one named failed task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ActResult {
    Done,
    NotFailed,
    /// Retry refused: a live task has the id.
    Exists,
}

fn act_arg(act: Act) -> &'static str {
    match act {
        Act::Retry => "retry",
        Act::Discard => "discard",
    }
}

impl Call for FailedActIds<'_> {
    type Reply = Vec<ActResult>;

    fn script(&self) -> &'static Script {
        &scripts().failed_act
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.channel)
            .arg(self.shard)
            .arg(act_arg(self.act))
            .arg("ids")
            .arg(self.ids);
    }

    fn decode(&self, reply: Value) -> Result<Vec<ActResult>, Error> {
        let mut f = Fields::new("FAILED_ACT", reply)?;
        (0..self.ids.len())
            .map(|_| {
                Ok(match f.int()? {
                    1 => ActResult::Done,
                    0 => ActResult::NotFailed,
                    2 => ActResult::Exists,
                    s => return Err(Error::Protocol(format!("FAILED_ACT: status {s}"))),
                })
            })
            .collect()
    }
}

/// FAILED_ACT (`failed_act.lua`) on a scan of the failed set.
pub(crate) struct FailedActScan<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    pub channel: &'a str,
    pub shard: u32,
    pub act: Act,
    pub from: FailedCursor,
    /// The last failed-at ms, inclusive.
    pub to_ms: u64,
    pub limit: u64,
    /// Only tasks whose errors contain this (empty: all).
    pub text: &'a str,
}

/// The reply to [`FailedActScan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScanActed {
    /// Where the next call resumes; `None`: the range is done.
    pub next: Option<FailedCursor>,
    pub acted: u64,
    pub exists: u64,
    pub examined: u64,
}

impl Call for FailedActScan<'_> {
    type Reply = ScanActed;

    fn script(&self) -> &'static Script {
        &scripts().failed_act
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.channel)
            .arg(self.shard)
            .arg(act_arg(self.act))
            .arg("scan")
            .arg(self.from.from_ms)
            .arg(self.from.skip)
            .arg(self.to_ms)
            .arg(self.limit.max(1))
            .arg(self.text);
    }

    /// `{more, next from, next skip, acted, exists, examined}`.
    fn decode(&self, reply: Value) -> Result<ScanActed, Error> {
        let mut f = Fields::new("FAILED_ACT", reply)?;
        Ok(ScanActed {
            next: FailedCursor::decode(&mut f)?,
            acted: f.u64()?,
            exists: f.u64()?,
            examined: f.u64()?,
        })
    }
}

/// PAUSE (`pause.lua`): pauses (or resumes) one shard. Reply: whether its state changed.
pub(crate) struct Pause<'a> {
    pub keys: &'a ShardKeys,
    pub channel: &'a str,
    pub shard: u32,
    pub paused: bool,
}

impl Call for Pause<'_> {
    type Reply = bool;

    fn script(&self) -> &'static Script {
        &scripts().pause
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.channel)
            .arg(self.shard)
            .arg(super::flag(self.paused));
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        Ok(super::int_reply("PAUSE", &reply)? == 1)
    }
}

/// INSPECT_FAILED (`inspect_failed.lua`): a page of a shard's failed set.
pub(crate) struct InspectFailed<'a> {
    pub keys: &'a ShardKeys,
    pub from: FailedCursor,
    pub to_ms: u64,
    /// Entries read, at least 1.
    pub limit: u64,
    /// Most payload bytes returned per task.
    pub preview: u64,
    /// Only tasks whose errors contain this (empty: all).
    pub text: &'a str,
}

/// One failed task as a page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailedRow {
    pub id: String,
    pub failed_at_ms: u64,
    pub reason: FailReason,
    pub log: ErrorLog,
    pub version: u64,
    pub attempt: u32,
    pub due_ms: u64,
    pub recurrence: String,
    pub payload_len: u64,
    pub preview: Vec<u8>,
}

/// The reply to [`InspectFailed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailedPage {
    pub rows: Vec<FailedRow>,
    /// `None`: read to the end of the range.
    pub next: Option<FailedCursor>,
}

impl Call for InspectFailed<'_> {
    type Reply = FailedPage;

    fn script(&self) -> &'static Script {
        &scripts().inspect_failed
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.from.from_ms)
            .arg(self.from.skip)
            .arg(self.to_ms)
            .arg(self.limit.max(1))
            .arg(self.preview)
            .arg(self.text);
    }

    /// `{more, next from, next skip, {id, failed at, reason, log, version, attempt, due,
    /// recurrence, payload length, preview}...}`.
    fn decode(&self, reply: Value) -> Result<FailedPage, Error> {
        let mut f = Fields::new("INSPECT_FAILED", reply)?;
        let next = FailedCursor::decode(&mut f)?;
        let mut rows_f = f.nested()?;
        let mut rows = Vec::new();
        while !rows_f.is_empty() {
            let mut r = rows_f.nested()?;
            rows.push(FailedRow {
                id: String::from_utf8_lossy(&r.bytes()?).into_owned(),
                failed_at_ms: r.u64()?,
                reason: FailReason::parse(&r.string()?)?,
                log: ErrorLog::decode(&r.bytes()?)?,
                version: r.u64()?,
                attempt: r.u64()? as u32,
                due_ms: r.u64()?,
                recurrence: r.string()?,
                payload_len: r.u64()?,
                preview: r.bytes()?,
            });
        }
        Ok(FailedPage { rows, next })
    }
}
