//! Read-only inspection of a namespace, for operators: what each shard holds and who owns
//! it, the tasks pending and in flight, one task in full, and what is coming up.
//!
//! Every read is a read-only script (`#!lua flags=no-writes`, files `inspect_*.lua`) whose
//! work is bounded by its arguments (at most [`MAX_STEP`] entries a call, about a
//! millisecond of Redis's time), sent one call per round trip: a scan of millions of tasks is
//! many short calls, between which Redis serves the workers, so reading never holds it long
//! enough to make a running worker late. Nothing is ever created: [`Inspector::connect`]
//! refuses a namespace that does not exist. Changes go through the
//! [`Producer`](crate::Producer) ([`cancel`](crate::Producer::cancel),
//! [`reschedule`](crate::Producer::reschedule)).

use std::time::{Duration, Instant};

mod failed;
mod once;
mod open;
mod scan;
mod stats;

pub use failed::{FailedFilter, FailedTask};
pub use scan::Scan;
pub use stats::{LiveWorker, ShardStats, Stats};

use open::{open_con, open_namespace};

use crate::config::{Config, TimeSource};
use crate::connection::{Con, Endpoint};
use crate::error::Error;
use crate::failure::ErrorLog;
use crate::namespace::{check_id, retryable, Namespace};
use crate::protocol::scripts::BUCKET_MS;
use crate::protocol::{self, InspectBuckets, InspectShard, InspectTask, InspectWorkers, TaskRow};
use crate::recurrence::Recurrence;
use crate::task::TaskState;

/// The most entries one inspection script call reads (list entries, in-flight entries or
/// buckets): about a millisecond of Redis's time at most.
pub const MAX_STEP: usize = 1000;

/// The most payload bytes [`Inspector::show`] returns.
pub const PREVIEW_BYTES: usize = 4096;

/// The most time slots [`Inspector::upcoming`] counts.
pub const MAX_SLOTS: usize = 10_000;

/// Reads a namespace without changing it. One connection; after a connection error the next
/// call reconnects.
///
/// ```no_run
/// use std::time::Duration;
/// use tickwheel_redis::{Config, Inspector, ListFilter, StateFilter};
///
/// # fn main() -> Result<(), tickwheel_redis::Error> {
/// let mut ins = Inspector::connect(&Config::new("redis://127.0.0.1:6379/", "orders"))?;
/// let stats = ins.stats()?;
/// println!("{} pending, {} in flight, {} shards without a live lease",
///          stats.pending(), stats.in_flight(), stats.unowned());
/// let stuck = ins.list(&ListFilter { state: StateFilter::InFlight, limit: Some(20),
///                                    ..ListFilter::default() })?;
/// if let Some(task) = ins.show("cancel-order-42")? {
///     println!("{:?}, {} payload bytes", task.info.state, task.info.payload_len);
/// }
/// let next_hour = ins.upcoming(Duration::from_secs(60), Duration::from_secs(3600))?;
/// println!("{} in flight, {:?} due per minute", stuck.len(), next_hour.counts);
/// # Ok(())
/// # }
/// ```
pub struct Inspector {
    cfg: Config,
    client: Endpoint,
    con: Option<Con>,
    ns: Namespace,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("namespace", &self.cfg.namespace)
            .field("shards", &self.ns.shards.len())
            .finish()
    }
}

/// Which tasks [`Inspector::list`] and [`Inspector::scan`] return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateFilter {
    /// In-flight tasks first, then pending ones.
    #[default]
    All,
    /// Pending tasks only.
    Pending,
    /// In-flight tasks only.
    InFlight,
}

/// A selection of tasks: [`Inspector::list`] and [`Inspector::scan`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only these shards (`None`: all).
    pub shards: Option<Vec<u32>>,
    /// Only tasks due at or after this instant, ms since the Unix epoch.
    pub due_after_ms: Option<u64>,
    /// Only tasks due before this instant, ms since the Unix epoch.
    pub due_before_ms: Option<u64>,
    /// Pending, in flight, or both.
    pub state: StateFilter,
    /// At most this many tasks (`None`: all of them).
    pub limit: Option<usize>,
}

/// A task as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// Its id.
    pub id: String,
    /// Its shard.
    pub shard: u32,
    /// Pending or in flight, with run-at, attempts and version.
    pub state: TaskState,
    /// Its payload's size, bytes.
    pub payload_len: u64,
    /// Whether it recurs.
    pub recurring: bool,
}

impl TaskInfo {
    /// Its run-at (pending), the run-at it was delivered for (in flight) or when it failed
    /// (failed), ms since the Unix epoch.
    pub fn due_ms(&self) -> u64 {
        match self.state {
            TaskState::Pending { run_at_ms, .. } => run_at_ms,
            TaskState::InFlight { due_ms, .. } => due_ms,
            TaskState::Failed { failed_at_ms, .. } => failed_at_ms,
            TaskState::Unknown => 0,
        }
    }

    /// Its version.
    pub fn version(&self) -> u64 {
        match self.state {
            TaskState::Pending { version, .. }
            | TaskState::InFlight { version, .. }
            | TaskState::Failed { version, .. } => version,
            TaskState::Unknown => 0,
        }
    }

    /// Deliveries so far (pending) or the attempt being delivered (in flight).
    pub fn attempt(&self) -> u32 {
        match self.state {
            TaskState::Pending { attempts, .. } => attempts,
            TaskState::InFlight { attempt, .. } => attempt,
            TaskState::Failed { attempts, .. } => attempts,
            TaskState::Unknown => 0,
        }
    }

    fn from_row(row: TaskRow, shard: u32) -> TaskInfo {
        let state = match row.visible_at_ms {
            Some(visible_at_ms) => TaskState::InFlight {
                due_ms: row.due_ms,
                attempt: row.attempt,
                version: row.version,
                visible_at_ms,
            },
            None => TaskState::Pending {
                run_at_ms: row.due_ms,
                attempts: row.attempt,
                version: row.version,
            },
        };
        TaskInfo {
            id: row.id,
            shard,
            state,
            payload_len: row.payload_len,
            recurring: !row.recurrence.is_empty(),
        }
    }
}

/// One task in full: [`Inspector::show`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskDetail {
    /// What a listing shows of it.
    pub info: TaskInfo,
    /// How it recurs (`None`: a one-shot task).
    pub recurrence: Option<Recurrence>,
    /// The first [`PREVIEW_BYTES`] bytes of its payload (all of it when
    /// [`TaskInfo::payload_len`] is no larger). User data: escape it before showing it.
    pub payload_preview: Vec<u8>,
    /// Its failed attempts and their errors (empty when none failed). User data: escape the
    /// errors before showing them.
    pub errors: ErrorLog,
}

/// Pending tasks by time slot: [`Inspector::upcoming`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upcoming {
    /// The Redis clock when read, ms since the Unix epoch.
    pub now_ms: u64,
    /// The start of the first slot: `now_ms` rounded down to the second.
    pub start_ms: u64,
    /// Each slot's width (whole seconds).
    pub per: Duration,
    /// Pending tasks due before `start_ms`: overdue.
    pub overdue: u64,
    /// Pending tasks due in each slot, from `start_ms` on.
    pub counts: Vec<u64>,
}

impl Inspector {
    /// Connects and reads the namespace's meta key, without creating anything; tries again
    /// while Redis cannot be reached or is loading, until [`Config::connect_timeout`].
    ///
    /// Errors: [`Error::NoSuchNamespace`] when the namespace does not exist,
    /// [`Error::IncompatibleNamespace`] when it holds another schema (or its meta key is
    /// something else), [`Error::Redis`] when Redis cannot be reached, and those of
    /// [`Producer::connect`](crate::Producer::connect) for the URL and the configuration.
    pub fn connect(cfg: &Config) -> Result<Inspector, Error> {
        cfg.validate()?;
        let client = Endpoint::of(cfg)?;
        let deadline = Instant::now() + cfg.connect_timeout;
        let mut wait = Duration::from_millis(50);
        loop {
            let attempt = open_con(cfg, &client).and_then(|mut con| {
                let ns = open_namespace(cfg, &mut con)?;
                Ok((con, ns))
            });
            match attempt {
                Ok((con, ns)) => {
                    return Ok(Inspector {
                        cfg: cfg.clone(),
                        client,
                        con: Some(con),
                        ns,
                    })
                }
                Err(Error::Redis(e)) if retryable(&e) && Instant::now() < deadline => {
                    std::thread::sleep(
                        wait.min(deadline.saturating_duration_since(Instant::now())),
                    );
                    wait = (wait * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The namespace's shard count (as stored in Redis).
    pub fn shards(&self) -> u32 {
        self.ns.shards.len() as u32
    }

    /// The shard a task id lives in.
    pub fn shard_of(&self, id: &str) -> u32 {
        self.ns.shard_of(id)
    }

    /// Runs `f` on the connection (opened again if needed). The inspector only reads, so a
    /// call whose connection proves unfit (`connection::unfit`: a node just killed, a
    /// demoted primary) is sent once more on a new one.
    fn with_con<T>(
        &mut self,
        mut f: impl FnMut(&mut Con, &Namespace, Option<u64>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.con.is_some() && self.client.primary_moved(self.cfg.io_timeout) {
            self.con = None;
        }
        let mut again = true;
        loop {
            if self.con.is_none() {
                self.con = Some(open_con(&self.cfg, &self.client)?);
            }
            let con = self.con.as_mut().expect("connected above");
            let r = f(con, &self.ns, protocol::now(&self.cfg));
            match &r {
                Err(Error::Redis(e)) if crate::connection::unfit(e) => self.con = None,
                _ => return r,
            }
            if !std::mem::take(&mut again) {
                return r;
            }
        }
    }

    /// Every shard's owner, lease, pending and in-flight counts and next run-at, and the live
    /// workers: one bounded call per shard.
    pub fn stats(&mut self) -> Result<Stats, Error> {
        self.with_con(|con, ns, now| {
            let calls: Vec<InspectShard> = ns
                .shards
                .iter()
                .map(|keys| InspectShard {
                    keys,
                    now,
                    scan: MAX_STEP as u64,
                })
                .collect();
            let replies = one_by_one(con, &calls)?;
            let workers = protocol::invoke(
                con,
                &InspectWorkers {
                    workers_key: &ns.workers_key,
                    now,
                    limit: MAX_STEP as u64,
                },
            )?;
            let now_ms = workers.now_ms;
            let shards = replies
                .into_iter()
                .enumerate()
                .map(|(s, r)| ShardStats {
                    shard: s as u32,
                    owner: (!r.owner.is_empty()).then_some(r.owner),
                    epoch: r.epoch,
                    lease_left: (r.expires_ms > r.now_ms)
                        .then(|| Duration::from_millis(r.expires_ms - r.now_ms)),
                    pending: r.tasks.saturating_sub(r.in_flight),
                    in_flight: r.in_flight,
                    in_flight_expired: r.in_flight_expired,
                    buckets: r.buckets,
                    next_run_at_ms: r.next_run_at_ms,
                    next_run_at_exact: r.exact,
                    failed: r.failed,
                    paused: r.paused,
                    trimmed: r.trimmed,
                    remembered: r.remembered,
                })
                .collect();
            Ok(Stats {
                now_ms,
                shards,
                live_workers: workers.live,
                workers: workers
                    .workers
                    .into_iter()
                    .map(|(id, expires)| LiveWorker {
                        id,
                        expires_in: Duration::from_millis(expires.saturating_sub(now_ms)),
                    })
                    .collect(),
            })
        })
    }

    /// The tasks `filter` selects, up to its limit: in-flight ones first (shard by shard,
    /// by visibility deadline), then pending ones by run-at second (within a second, in no
    /// particular order). See [`scan`](Inspector::scan) to read them page by page.
    ///
    /// Not a snapshot: each call reads its shard as it is then. A task that stays pending
    /// throughout is listed exactly once (a bucket emptied and filled again between two
    /// calls is read again from its start); one scheduled, moved, claimed or settled during
    /// the scan may be listed in its old state, its new one, or neither.
    pub fn list(&mut self, filter: &ListFilter) -> Result<Vec<TaskInfo>, Error> {
        let mut scan = self.scan(filter.clone())?;
        let mut out = Vec::new();
        while let Some(page) = scan.next_page()? {
            out.extend(page);
        }
        Ok(out)
    }

    /// A scan of the tasks `filter` selects, in the order of [`list`](Inspector::list),
    /// read page by page ([`Scan::next_page`]): each page is one call per
    /// shard, each call reading at most [`MAX_STEP`] entries.
    pub fn scan(&mut self, filter: ListFilter) -> Result<Scan<'_>, Error> {
        Scan::new(self, filter)
    }

    /// One task: its state, run-at, version, attempt, recurrence, payload size, the first
    /// [`PREVIEW_BYTES`] of its payload and the errors of its failed attempts. A live task
    /// (pending or in flight) is shown before a failed one of the same id (a recurring
    /// series goes on after a failed run); [`failed`](Inspector::failed) lists the failed
    /// ones. `None` for an id that is not stored (never scheduled, cancelled, acknowledged
    /// or discarded). [`Error::InvalidId`] for an id no task can
    /// have.
    pub fn show(&mut self, id: &str) -> Result<Option<TaskDetail>, Error> {
        self.detail(id, false)
    }

    /// The failed task with this id, as [`show`](Inspector::show) gives it, even when a live
    /// task has the id too (a recurring series goes on after a failed run; a task scheduled
    /// again after one failed). `None` when no failed task has the id.
    pub fn show_failed(&mut self, id: &str) -> Result<Option<TaskDetail>, Error> {
        self.detail(id, true)
    }

    fn detail(&mut self, id: &str, failed_only: bool) -> Result<Option<TaskDetail>, Error> {
        check_id(id)?;
        let shard = self.ns.shard_of(id);
        let reply = self.with_con(|con, ns, _| {
            protocol::invoke(
                con,
                &InspectTask {
                    keys: &ns.shards[shard as usize],
                    id,
                    preview: PREVIEW_BYTES as u64,
                    failed_only,
                },
            )
        })?;
        let Some(reply) = reply else {
            return Ok(None);
        };
        let recurrence = Recurrence::decode(&reply.row.recurrence)?;
        let mut info = TaskInfo::from_row(reply.row, shard);
        if let Some((failed_at_ms, reason)) = reply.failed {
            info.state = TaskState::Failed {
                failed_at_ms,
                attempts: info.attempt(),
                version: info.version(),
                reason,
            };
        }
        Ok(Some(TaskDetail {
            info,
            recurrence,
            payload_preview: reply.preview,
            errors: reply.log,
        }))
    }

    /// Pending tasks per slot of `per` (rounded up to whole seconds) from now over
    /// `horizon`, and those overdue, from the per-second counts the shards keep: no task is
    /// read, only [`MAX_STEP`] counts a call. [`Error::InvalidConfig`] for more than
    /// [`MAX_SLOTS`] slots, and for `per` or `horizon` above
    /// [`Config::MAX_DURATION`](crate::Config::MAX_DURATION).
    pub fn upcoming(&mut self, per: Duration, horizon: Duration) -> Result<Upcoming, Error> {
        if per.max(horizon) > Config::MAX_DURATION {
            return Err(Error::InvalidConfig(format!(
                "slots of {per:?} over {horizon:?}: each at most 100 years \
                 (Config::MAX_DURATION)"
            )));
        }
        // Both at most 100 years: the seconds and the slot count fit easily.
        let per_s = per.as_millis().div_ceil(u128::from(BUCKET_MS)).max(1) as u64;
        let slots = horizon.as_millis().div_ceil(u128::from(per_s * BUCKET_MS)) as usize;
        if slots > MAX_SLOTS {
            return Err(Error::InvalidConfig(format!(
                "{slots} slots of {per_s} s: at most {MAX_SLOTS}"
            )));
        }
        let now_ms = self.now_ms()?;
        let first = now_ms / BUCKET_MS;
        let last = first + slots as u64 * per_s;
        let mut counts = vec![0u64; slots];
        let mut overdue = 0;
        self.with_con(|con, ns, _| {
            overdue = 0; // sent again after a broken connection: from the start

            counts.iter_mut().for_each(|c| *c = 0);
            // Each shard's buckets from the first, MAX_STEP a call, a call per round trip.
            let mut from: Vec<(usize, Option<u64>)> =
                (0..ns.shards.len()).map(|s| (s, None)).collect();
            while !from.is_empty() {
                let calls: Vec<InspectBuckets> = from
                    .iter()
                    .map(|&(s, b)| InspectBuckets {
                        keys: &ns.shards[s],
                        from: b,
                        to: last.saturating_sub(1),
                        limit: MAX_STEP as u64,
                    })
                    .collect();
                let pages = one_by_one(con, &calls)?;
                let mut next = Vec::new();
                for (&(s, _), page) in from.iter().zip(pages) {
                    for (b, n) in page.counts {
                        if b < first {
                            overdue += n;
                        } else if let Some(c) = counts.get_mut(((b - first) / per_s) as usize) {
                            *c += n;
                        }
                    }
                    if let Some(b) = page.next {
                        next.push((s, Some(b)));
                    }
                }
                from = next;
            }
            Ok(())
        })?;
        Ok(Upcoming {
            now_ms,
            start_ms: first * BUCKET_MS,
            per: Duration::from_secs(per_s),
            overdue,
            counts,
        })
    }

    /// The namespace's clock, ms since the Unix epoch: the Redis server's (`TIME`), or the
    /// manual one of [`TimeSource::Manual`].
    pub fn now_ms(&mut self) -> Result<u64, Error> {
        if let TimeSource::Manual(t) = &self.cfg.time {
            return Ok(t.now_ms());
        }
        self.with_con(|con, _, _| Ok(con.time_us()? / 1000))
    }
}

/// Runs calls one round trip each, not as one pipeline: Redis runs a pipeline's commands
/// back to back, so 16 calls of a millisecond would hold it for 16; one at a time, another
/// client (a worker's claim) waits at most one call.
fn one_by_one<C: protocol::Call>(con: &mut Con, calls: &[C]) -> Result<Vec<C::Reply>, Error> {
    calls.iter().map(|c| protocol::invoke(con, c)).collect()
}
