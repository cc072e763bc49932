//! The inspection scripts (`lua/inspect_*.lua`): read-only (compiled as such, see
//! [`scripts`](super::scripts)), each call's work bounded by its own arguments, for
//! [`crate::Inspector`].

use redis::{Cmd, Script, Value};

use super::ShardKeys;
use super::{now_arg, shard_keys, Call, Fields};
use crate::error::Error;
use crate::failure::{ErrorLog, FailReason};
use crate::protocol::scripts::scripts;

/// A reply value that may be `-1` for "none".
fn opt(n: i64) -> Option<u64> {
    u64::try_from(n).ok()
}

/// INSPECT_META (`inspect_meta.lua`): a namespace's meta hash, never created.
pub(crate) struct InspectMeta<'a> {
    /// The namespace's meta key.
    pub meta: &'a str,
}

/// The reply to [`InspectMeta`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MetaReply {
    /// No such key: the namespace does not exist.
    Missing,
    /// A key of another type (named as `TYPE` names it).
    NotAHash(String),
    /// The hash's schema and shard count, as stored (empty when missing).
    Hash { schema: String, shards: String },
}

impl Call for InspectMeta<'_> {
    type Reply = MetaReply;

    fn script(&self) -> &'static Script {
        &scripts().inspect_meta
    }

    fn encode(&self, cmd: &mut Cmd) {
        cmd.arg(1).arg(self.meta);
    }

    /// `{type}` or `{'hash', schema, shards}`.
    fn decode(&self, reply: Value) -> Result<MetaReply, Error> {
        let mut f = Fields::new("INSPECT_META", reply)?;
        let t = f.string()?;
        Ok(match t.as_str() {
            "none" => MetaReply::Missing,
            "hash" => MetaReply::Hash {
                schema: f.string()?,
                shards: f.string()?,
            },
            _ => MetaReply::NotAHash(t),
        })
    }
}

/// INSPECT_SHARD (`inspect_shard.lua`): one shard at a glance.
pub(crate) struct InspectShard<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// Most entries of the first bucket read for the next run-at.
    pub scan: u64,
}

/// The reply to [`InspectShard`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShardReply {
    pub now_ms: u64,
    /// The lease's owner, empty when none ever took it (or it was released).
    pub owner: String,
    pub epoch: u64,
    pub expires_ms: u64,
    pub horizon_ms: u64,
    /// Pending and in-flight tasks.
    pub tasks: u64,
    pub in_flight: u64,
    /// In flight past their visibility deadline (due to be delivered again).
    pub in_flight_expired: u64,
    pub buckets: u64,
    pub first_bucket: Option<u64>,
    pub next_run_at_ms: Option<u64>,
    /// Whether [`ShardReply::next_run_at_ms`] is the minimum of the whole first bucket.
    pub exact: bool,
    /// Tasks in the failed set.
    pub failed: u64,
    pub paused: bool,
    /// Failed tasks the retention bound removed, ever.
    pub trimmed: u64,
    /// Ids `schedule_once` remembers now.
    pub remembered: u64,
}

impl Call for InspectShard<'_> {
    type Reply = ShardReply;

    fn script(&self) -> &'static Script {
        &scripts().inspect_shard
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.scan);
    }

    fn decode(&self, reply: Value) -> Result<ShardReply, Error> {
        let mut f = Fields::new("INSPECT_SHARD", reply)?;
        Ok(ShardReply {
            now_ms: f.u64()?,
            owner: f.string()?,
            epoch: f.u64()?,
            expires_ms: f.u64()?,
            horizon_ms: f.u64()?,
            tasks: f.u64()?,
            in_flight: f.u64()?,
            in_flight_expired: f.u64()?,
            buckets: f.u64()?,
            first_bucket: opt(f.int()?),
            next_run_at_ms: opt(f.int()?),
            exact: f.int()? == 1,
            failed: f.u64()?,
            paused: f.int()? == 1,
            trimmed: f.u64()?,
            remembered: f.u64()?,
        })
    }
}

/// Where a page of a shard's pending tasks resumes: a bucket, the generation of its list
/// (empty: from its start) and the entries of that generation already read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PendingCursor {
    /// `None`: from the first bucket.
    pub bucket: Option<u64>,
    pub gen: String,
    pub offset: u64,
}

/// One task as a page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TaskRow {
    pub id: String,
    /// The run-at of a pending task, the due time of one in flight.
    pub due_ms: u64,
    pub version: u64,
    pub attempt: u32,
    pub payload_len: u64,
    /// The stored recurrence, empty for a one-shot task.
    pub recurrence: String,
    /// In flight: its visibility deadline.
    pub visible_at_ms: Option<u64>,
}

impl TaskRow {
    fn decode(f: &mut Fields, in_flight: bool) -> Result<TaskRow, Error> {
        let mut t = f.nested()?;
        Ok(TaskRow {
            id: String::from_utf8_lossy(&t.bytes()?).into_owned(),
            due_ms: t.u64()?,
            version: t.u64()?,
            attempt: t.u64()? as u32,
            payload_len: t.u64()?,
            recurrence: t.string()?,
            visible_at_ms: if in_flight { Some(t.u64()?) } else { None },
        })
    }
}

/// INSPECT_PENDING (`inspect_pending.lua`): a page of a shard's pending tasks.
pub(crate) struct InspectPending<'a> {
    pub keys: &'a ShardKeys,
    pub from: &'a PendingCursor,
    /// The last bucket read (`None`: no end).
    pub to_bucket: Option<u64>,
    /// Run-ats kept, inclusive, ms.
    pub lo_ms: u64,
    pub hi_ms: u64,
    /// List entries read, at least 1.
    pub limit: u64,
}

/// The reply to [`InspectPending`]: the tasks found, and where the next page resumes
/// (`None`: the shard's range is read to its end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingPage {
    pub tasks: Vec<TaskRow>,
    pub next: Option<PendingCursor>,
}

impl Call for InspectPending<'_> {
    type Reply = PendingPage;

    fn script(&self) -> &'static Script {
        &scripts().inspect_pending
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        match self.from.bucket {
            Some(b) => cmd.arg(b),
            None => cmd.arg("-inf"),
        };
        cmd.arg(&self.from.gen).arg(self.from.offset);
        match self.to_bucket {
            Some(b) => cmd.arg(b),
            None => cmd.arg("+inf"),
        };
        cmd.arg(self.lo_ms).arg(self.hi_ms).arg(self.limit.max(1));
    }

    /// `{next bucket or -1, generation, offset, {task...}}`.
    fn decode(&self, reply: Value) -> Result<PendingPage, Error> {
        let mut f = Fields::new("INSPECT_PENDING", reply)?;
        let bucket = opt(f.int()?);
        let gen = f.string()?;
        let offset = f.u64()?;
        let mut rows = f.nested()?;
        let mut tasks = Vec::new();
        while !rows.is_empty() {
            tasks.push(TaskRow::decode(&mut rows, false)?);
        }
        Ok(PendingPage {
            tasks,
            next: bucket.map(|b| PendingCursor {
                bucket: Some(b),
                gen,
                offset,
            }),
        })
    }
}

/// INSPECT_IN_FLIGHT (`inspect_in_flight.lua`): a page of a shard's in-flight tasks.
pub(crate) struct InspectInFlight<'a> {
    pub keys: &'a ShardKeys,
    /// Rank in the in-flight set.
    pub offset: u64,
    /// Entries read, at least 1.
    pub limit: u64,
    /// Due times kept, inclusive, ms.
    pub lo_ms: u64,
    pub hi_ms: u64,
}

/// The reply to [`InspectInFlight`]: the tasks found, and the rank the next page starts at
/// (`None`: read to the end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InFlightPage {
    pub tasks: Vec<TaskRow>,
    pub next: Option<u64>,
}

impl Call for InspectInFlight<'_> {
    type Reply = InFlightPage;

    fn script(&self) -> &'static Script {
        &scripts().inspect_in_flight
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.offset)
            .arg(self.limit.max(1))
            .arg(self.lo_ms)
            .arg(self.hi_ms);
    }

    /// `{next offset or -1, {task...}}`.
    fn decode(&self, reply: Value) -> Result<InFlightPage, Error> {
        let mut f = Fields::new("INSPECT_IN_FLIGHT", reply)?;
        let next = opt(f.int()?);
        let mut rows = f.nested()?;
        let mut tasks = Vec::new();
        while !rows.is_empty() {
            tasks.push(TaskRow::decode(&mut rows, true)?);
        }
        Ok(InFlightPage { tasks, next })
    }
}

/// INSPECT_TASK (`inspect_task.lua`): one task, with the first bytes of its payload.
pub(crate) struct InspectTask<'a> {
    pub keys: &'a ShardKeys,
    pub id: &'a str,
    /// Most payload bytes returned.
    pub preview: u64,
    /// Read the failed set alone, even when a live task has the id.
    pub failed_only: bool,
}

/// The reply to [`InspectTask`]: `None` for an unknown id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TaskReply {
    pub row: TaskRow,
    /// The payload's first bytes.
    pub preview: Vec<u8>,
    /// Its failed attempts (empty when none).
    pub log: ErrorLog,
    /// A failed task: when it failed and why (then `row.visible_at_ms` is `None`).
    pub failed: Option<(u64, FailReason)>,
}

impl Call for InspectTask<'_> {
    type Reply = Option<TaskReply>;

    fn script(&self) -> &'static Script {
        &scripts().inspect_task
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.id)
            .arg(self.preview)
            .arg(super::flag(self.failed_only));
    }

    /// `{0}`, or `{state, version, attempt, due, visible at or failed at or -1,
    /// recurrence, payload length, preview, error log, reason or ''}`.
    fn decode(&self, reply: Value) -> Result<Option<TaskReply>, Error> {
        let mut f = Fields::new("INSPECT_TASK", reply)?;
        let state = f.int()?;
        if state == 0 {
            return Ok(None);
        }
        if !(1..=3).contains(&state) {
            return Err(Error::Protocol(format!("INSPECT_TASK: state {state}")));
        }
        let version = f.u64()?;
        let attempt = f.u64()? as u32;
        let due_ms = f.u64()?;
        let visible = opt(f.int()?);
        let row = TaskRow {
            id: self.id.to_string(),
            due_ms,
            version,
            attempt,
            recurrence: f.string()?,
            payload_len: f.u64()?,
            visible_at_ms: if state == 2 { visible } else { None },
        };
        let preview = f.bytes()?;
        let log = ErrorLog::decode(&f.bytes()?)?;
        let reason = f.string()?;
        let failed = match (state, visible) {
            (3, Some(at)) => Some((at, FailReason::parse(&reason)?)),
            (3, None) => return Err(Error::Protocol("INSPECT_TASK: failed, but when?".into())),
            _ => None,
        };
        Ok(Some(TaskReply {
            row,
            preview,
            log,
            failed,
        }))
    }
}

/// INSPECT_BUCKETS (`inspect_buckets.lua`): pending counts of a shard's buckets.
pub(crate) struct InspectBuckets<'a> {
    pub keys: &'a ShardKeys,
    /// First bucket (`None`: from the first).
    pub from: Option<u64>,
    /// Last bucket, inclusive.
    pub to: u64,
    /// Buckets read, at least 1.
    pub limit: u64,
}

/// The reply to [`InspectBuckets`]: `(bucket, pending)` pairs in bucket order, and the
/// bucket the next call starts at (`None`: the range is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketsPage {
    pub counts: Vec<(u64, u64)>,
    pub next: Option<u64>,
}

impl Call for InspectBuckets<'_> {
    type Reply = BucketsPage;

    fn script(&self) -> &'static Script {
        &scripts().inspect_buckets
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        match self.from {
            Some(b) => cmd.arg(b),
            None => cmd.arg("-inf"),
        };
        cmd.arg(self.to).arg(self.limit.max(1));
    }

    /// `{next bucket or -1, {bucket, pending, ...}}`.
    fn decode(&self, reply: Value) -> Result<BucketsPage, Error> {
        let mut f = Fields::new("INSPECT_BUCKETS", reply)?;
        let next = opt(f.int()?);
        let mut pairs = f.nested()?;
        let mut counts = Vec::new();
        while !pairs.is_empty() {
            counts.push((pairs.u64()?, pairs.u64()?));
        }
        Ok(BucketsPage { counts, next })
    }
}

/// INSPECT_WORKERS (`inspect_workers.lua`): the live workers of a namespace.
pub(crate) struct InspectWorkers<'a> {
    /// The namespace's worker set.
    pub workers_key: &'a str,
    pub now: Option<u64>,
    /// Most workers named.
    pub limit: u64,
}

/// The reply to [`InspectWorkers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WorkersReply {
    pub now_ms: u64,
    /// Live workers, all of them.
    pub live: u64,
    /// `(id, registration expiry ms)` of the first [`InspectWorkers::limit`].
    pub workers: Vec<(String, u64)>,
}

impl Call for InspectWorkers<'_> {
    type Reply = WorkersReply;

    fn script(&self) -> &'static Script {
        &scripts().inspect_workers
    }

    fn encode(&self, cmd: &mut Cmd) {
        cmd.arg(1).arg(self.workers_key);
        now_arg(cmd, self.now);
        cmd.arg(self.limit);
    }

    /// `{now, live, {id, expires, ...}}`.
    fn decode(&self, reply: Value) -> Result<WorkersReply, Error> {
        let mut f = Fields::new("INSPECT_WORKERS", reply)?;
        let now_ms = f.u64()?;
        let live = f.u64()?;
        let mut pairs = f.nested()?;
        let mut workers = Vec::new();
        while !pairs.is_empty() {
            let id = String::from_utf8_lossy(&pairs.bytes()?).into_owned();
            workers.push((id, pairs.u64()?));
        }
        Ok(WorkersReply {
            now_ms,
            live,
            workers,
        })
    }
}
