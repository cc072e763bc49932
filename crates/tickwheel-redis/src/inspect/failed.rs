//! The failed set, read: [`Inspector::failed`].

use super::{one_by_one, Inspector, MAX_STEP, PREVIEW_BYTES};
use crate::error::Error;
use crate::failure::{ErrorLog, FailReason};
use crate::protocol::{FailedCursor, InspectFailed};

/// Which failed tasks [`Inspector::failed`] lists and the [`Producer`](crate::Producer)'s
/// bulk actions ([`retry_failed_where`](crate::Producer::retry_failed_where),
/// [`discard_failed_where`](crate::Producer::discard_failed_where)) act on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedFilter {
    /// Only these shards (`None`: all).
    pub shards: Option<Vec<u32>>,
    /// Only tasks that failed at or after this instant, ms since the Unix epoch.
    pub failed_after_ms: Option<u64>,
    /// Only tasks that failed before this instant, ms since the Unix epoch.
    pub failed_before_ms: Option<u64>,
    /// Only tasks one of whose kept errors contains this text (case-sensitive).
    pub error_contains: Option<String>,
    /// At most this many tasks (`None`: all of them).
    pub limit: Option<usize>,
}

impl FailedFilter {
    /// The shards it covers, checked against the namespace's count.
    pub(crate) fn shard_list(&self, shards: usize) -> Result<Vec<u32>, Error> {
        match &self.shards {
            None => Ok((0..shards as u32).collect()),
            Some(v) => {
                if let Some(&bad) = v.iter().find(|&&s| s as usize >= shards) {
                    return Err(Error::InvalidConfig(format!(
                        "shard {bad}: the namespace has {shards} (0 ..= {})",
                        shards - 1
                    )));
                }
                Ok(v.clone())
            }
        }
    }

    /// The failed-at range, inclusive: `(first ms, last ms)`; `None` when it is empty.
    pub(crate) fn range(&self) -> Result<Option<(u64, u64)>, Error> {
        let from = self.failed_after_ms.unwrap_or(0);
        let to = match self.failed_before_ms {
            Some(0) => return Ok(None),
            Some(b) => b - 1,
            None => u64::MAX,
        };
        if let (Some(a), Some(b)) = (self.failed_after_ms, self.failed_before_ms) {
            if a > b {
                return Err(Error::InvalidConfig(format!(
                    "failed_after_ms ({a}) is later than failed_before_ms ({b})"
                )));
            }
        }
        Ok((from <= to).then_some((from, to)))
    }

    pub(crate) fn text(&self) -> &str {
        self.error_contains.as_deref().unwrap_or("")
    }
}

/// A task in the failed set: [`Inspector::failed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedTask {
    /// Its id (user data: escape it before showing it).
    pub id: String,
    /// Its shard.
    pub shard: u32,
    /// When it failed, ms since the Unix epoch.
    pub failed_at_ms: u64,
    /// Why.
    pub reason: FailReason,
    /// Its failed attempts and their errors (user data: escape them before showing them).
    pub errors: ErrorLog,
    /// Its version when it failed.
    pub version: u64,
    /// Deliveries of the attempt that failed.
    pub attempts: u32,
    /// The run-at it was delivered for, ms since the Unix epoch.
    pub due_ms: u64,
    /// Whether it was a run of a recurring task.
    pub recurring: bool,
    /// Its payload's size, bytes.
    pub payload_len: u64,
    /// Its payload's first [`PREVIEW_BYTES`] bytes (user data).
    pub payload_preview: Vec<u8>,
}

impl Inspector {
    /// The failed tasks `filter` selects, oldest failure first (ties by shard, then id),
    /// up to its limit, with their errors. Each shard is read [`MAX_STEP`] entries a call,
    /// a call per round trip; with a limit, each shard is read only until it has given that
    /// many.
    pub fn failed(&mut self, filter: &FailedFilter) -> Result<Vec<FailedTask>, Error> {
        let shards = filter.shard_list(self.ns.shards.len())?;
        let Some((from, to)) = filter.range()? else {
            return Ok(Vec::new());
        };
        let limit = filter.limit.unwrap_or(usize::MAX);
        let text = filter.text();
        let mut out = Vec::new();
        self.with_con(|con, ns, _| {
            out.clear(); // sent again after a broken connection: from the start
            for &s in &shards {
                let mut cursor = Some(FailedCursor {
                    from_ms: from,
                    skip: 0,
                });
                let mut taken = 0;
                while let (Some(c), true) = (cursor, taken < limit) {
                    let call = InspectFailed {
                        keys: &ns.shards[s as usize],
                        from: c,
                        to_ms: to,
                        limit: MAX_STEP as u64,
                        preview: PREVIEW_BYTES as u64,
                        text,
                    };
                    let page = one_by_one(con, std::slice::from_ref(&call))?
                        .pop()
                        .expect("one call, one reply");
                    for r in page.rows.into_iter().take(limit - taken) {
                        taken += 1;
                        out.push(FailedTask {
                            id: r.id,
                            shard: s,
                            failed_at_ms: r.failed_at_ms,
                            reason: r.reason,
                            errors: r.log,
                            version: r.version,
                            attempts: r.attempt,
                            due_ms: r.due_ms,
                            recurring: !r.recurrence.is_empty(),
                            payload_len: r.payload_len,
                            payload_preview: r.preview,
                        });
                    }
                    cursor = page.next;
                }
            }
            Ok(())
        })?;
        out.sort_by(|a, b| (a.failed_at_ms, a.shard, &a.id).cmp(&(b.failed_at_ms, b.shard, &b.id)));
        out.truncate(limit);
        Ok(out)
    }
}
