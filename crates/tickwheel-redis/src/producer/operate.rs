//! An operator's writes: the failed set (retry, discard), run now, pause and resume.

use std::time::Duration;

use super::Producer;
use crate::error::Error;
use crate::inspect::{FailedFilter, MAX_STEP};
use crate::namespace::check_id;
use crate::protocol::{
    self, Act, ActResult, FailedActIds, FailedActScan, FailedCursor, Pause, ScanActed,
};
use crate::task::RunAt;

/// What an action on a named failed task did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acted {
    /// Done: retried (pending now, with a new version and fresh attempts) or discarded.
    Done,
    /// No failed task has this id (never failed, retried or discarded already, or removed by
    /// the retention bound).
    NotFailed,
    /// Not retried: a live task has the id (scheduled again since, or the series of a failed
    /// recurring run). The failed task stays; discard it, or cancel the live one first.
    LiveTaskExists,
}

/// What a bulk action on the failed set did: [`Producer::retry_failed_where`] and
/// [`Producer::discard_failed_where`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkReport {
    /// Failed tasks read.
    pub examined: u64,
    /// Tasks retried or discarded.
    pub acted: u64,
    /// Tasks not retried because a live task has the id (see [`Acted::LiveTaskExists`]).
    pub live_task_exists: u64,
    /// Script calls made (each one round trip, each reading at most [`MAX_STEP`] entries).
    pub calls: u64,
}

impl Producer {
    /// Retries failed tasks by id: each is pending again at once (by the namespace's clock)
    /// with its payload, recurrence and retry policy, a new version and a fresh count of
    /// attempts; its errors stay visible ([`Inspector::show`](crate::Inspector::show)) and
    /// are kept with those of its new attempts. One pipeline, grouped by shard, up to
    /// [`Config::batch`](crate::Config::batch) ids per script call. Returns what each id got,
    /// in order. Safe to call again after an error (a task retried already is
    /// [`Acted::NotFailed`]); an [`Error::Partial`] says which ids were applied.
    pub fn retry_failed<S, I>(&mut self, ids: I) -> Result<Vec<Acted>, Error>
    where
        S: AsRef<str>,
        I: IntoIterator<Item = S>,
    {
        self.act_on(Act::Retry, ids)
    }

    /// Discards failed tasks by id: their records and errors go. Returns what each id got,
    /// in order.
    pub fn discard_failed<S, I>(&mut self, ids: I) -> Result<Vec<Acted>, Error>
    where
        S: AsRef<str>,
        I: IntoIterator<Item = S>,
    {
        self.act_on(Act::Discard, ids)
    }

    fn act_on<S, I>(&mut self, act: Act, ids: I) -> Result<Vec<Acted>, Error>
    where
        S: AsRef<str>,
        I: IntoIterator<Item = S>,
    {
        let ids: Vec<S> = ids.into_iter().collect();
        let mut groups = super::Groups::new(self.ns.shards.len(), self.cfg.batch);
        for id in &ids {
            let id = id.as_ref();
            check_id(id)?;
            groups.push(self.ns.shard_of(id), id);
        }
        let now = protocol::now(&self.cfg);
        let results = self.with_con(|con, ns| {
            groups.invoke(con, |shard, ids| FailedActIds {
                keys: &ns.shards[shard as usize],
                now,
                channel: &ns.channel,
                shard,
                act,
                ids,
            })
        })?;
        Ok(results
            .into_iter()
            .map(|r| match r {
                ActResult::Done => Acted::Done,
                ActResult::NotFailed => Acted::NotFailed,
                ActResult::Exists => Acted::LiveTaskExists,
            })
            .collect())
    }

    /// Retries every failed task `filter` selects (up to its limit), as
    /// [`retry_failed`](Producer::retry_failed) does, shard by shard in failed-at order.
    /// Each call reads at most [`MAX_STEP`] entries (about a millisecond of Redis's time),
    /// one call per round trip, so a bulk retry of millions never holds Redis long. Resumable:
    /// a task acted on leaves the failed set, so after an error the same call goes on where
    /// it stopped. Returns what it did.
    pub fn retry_failed_where(&mut self, filter: &FailedFilter) -> Result<BulkReport, Error> {
        self.act_where(Act::Retry, filter)
    }

    /// Discards every failed task `filter` selects (up to its limit), as
    /// [`retry_failed_where`](Producer::retry_failed_where) goes through them.
    pub fn discard_failed_where(&mut self, filter: &FailedFilter) -> Result<BulkReport, Error> {
        self.act_where(Act::Discard, filter)
    }

    fn act_where(&mut self, act: Act, filter: &FailedFilter) -> Result<BulkReport, Error> {
        let shards = filter.shard_list(self.ns.shards.len())?;
        let mut report = BulkReport::default();
        let Some((from, to)) = filter.range()? else {
            return Ok(report);
        };
        let limit = filter.limit.map_or(u64::MAX, |l| l as u64);
        let now = protocol::now(&self.cfg);
        self.with_con(|con, ns| {
            for shard in shards {
                let mut cursor = Some(FailedCursor {
                    from_ms: from,
                    skip: 0,
                });
                while let Some(c) = cursor {
                    let left = limit - report.acted;
                    if left == 0 {
                        return Ok(());
                    }
                    let call = FailedActScan {
                        keys: &ns.shards[shard as usize],
                        now,
                        channel: &ns.channel,
                        shard,
                        act,
                        from: c,
                        to_ms: to,
                        limit: left.min(MAX_STEP as u64),
                        text: filter.text(),
                    };
                    let r: ScanActed = protocol::invoke(con, &call)?;
                    report.calls += 1;
                    report.examined += r.examined;
                    report.acted += r.acted;
                    report.live_task_exists += r.exists;
                    cursor = r.next;
                }
            }
            Ok(())
        })?;
        Ok(report)
    }

    /// Runs a pending task now: [`reschedule`](Producer::reschedule) to the namespace's now.
    /// `false` for an unknown id or a task in flight.
    pub fn run_now(&mut self, id: &str) -> Result<bool, Error> {
        self.reschedule(id, RunAt::After(Duration::ZERO))
    }

    /// Pauses the whole namespace: workers claim nothing until [`resume`](Producer::resume).
    /// Scheduling, cancelling, rescheduling and inspecting go on; leases are kept and
    /// windows read, and tasks that fall due meanwhile are delivered on resume, in run-at
    /// order per shard. A worker hears of the pause at once (a notification) and puts back
    /// what it claimed ahead ([`Config::claim_ahead`](crate::Config::claim_ahead)) and has
    /// not handed to a handler; a handler call already under way finishes. Returns how many
    /// shards were not paused before.
    pub fn pause(&mut self) -> Result<u32, Error> {
        let all: Vec<u32> = (0..self.shards()).collect();
        self.pause_shards(&all, true)
    }

    /// Resumes the whole namespace (see [`pause`](Producer::pause)). Returns how many shards
    /// were paused.
    pub fn resume(&mut self) -> Result<u32, Error> {
        let all: Vec<u32> = (0..self.shards()).collect();
        self.pause_shards(&all, false)
    }

    /// Pauses (`true`) or resumes (`false`) some shards; returns how many changed.
    /// [`Error::InvalidConfig`] for a shard the namespace does not have.
    pub fn pause_shards(&mut self, shards: &[u32], paused: bool) -> Result<u32, Error> {
        let n = self.shards();
        if let Some(&bad) = shards.iter().find(|&&s| s >= n) {
            return Err(Error::InvalidConfig(format!(
                "shard {bad}: the namespace has {n} (0 ..= {})",
                n - 1
            )));
        }
        self.with_con(|con, ns| {
            let calls: Vec<Pause> = shards
                .iter()
                .map(|&shard| Pause {
                    keys: &ns.shards[shard as usize],
                    channel: &ns.channel,
                    shard,
                    paused,
                })
                .collect();
            let changed = protocol::invoke_all(con, &calls)?;
            Ok(changed.into_iter().filter(|&c| c).count() as u32)
        })
    }
}
