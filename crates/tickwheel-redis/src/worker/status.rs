//! What a running worker shows: counters, shards and leases, readable from any thread, and
//! events as they happen (a shard taken or lost, a renewal that failed, Redis back).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::window::ShardWindow;
use super::Worker;
use crate::failure::FailedCounts;

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Deliveries handed to the handler.
    pub delivered: u64,
    /// Acknowledgements Redis accepted.
    pub acked: u64,
    /// Acknowledgements of deliveries that were no longer current (the task was replaced).
    pub stale_acks: u64,
    /// Retries accepted (of [`Outcome::RetryAfter`](crate::Outcome::RetryAfter) and of failed
    /// attempts with attempts left).
    pub retried: u64,
    /// Failed attempts Redis recorded ([`Outcome::Failed`](crate::Outcome::Failed),
    /// [`Outcome::NonRetryable`](crate::Outcome::NonRetryable), handler panics).
    pub failed_attempts: u64,
    /// Tasks this worker moved to the failed set, by reason.
    pub failed: FailedCounts,
    /// Claims, acknowledgements, retries or loads refused because the shard's epoch moved on.
    pub fenced: u64,
    /// Shards this worker took.
    pub acquired: u64,
    /// Shards this worker lost (fenced or lease not renewed) or gave up to rebalance.
    pub dropped: u64,
    /// Redis errors the run loop recovered from (with backoff and a reconnect).
    pub redis_errors: u64,
    /// Acknowledgements not sent because the run's stored recurrence cannot be evaluated here
    /// (a time zone this machine does not know, say): the run is left in flight and delivered
    /// again after the visibility timeout, never dropped.
    pub bad_recurrences: u64,
    /// Claimed tasks not handed to the handler because the worker could no longer be sure of
    /// its lease on their shard when they fell due (it stalled or lost the shard), or gave the
    /// shard up (rebalancing, shutdown): each is put back as it was before the claim (the
    /// attempt undone) while the lease's epoch still holds, else it stays in flight and is
    /// delivered again after the visibility timeout.
    pub lapsed: u64,
    /// Tasks claimed from Redis (each is delivered, or lapses).
    pub claimed: u64,
    /// Deliveries of an attempt after the first: the task was claimed before and not
    /// acknowledged (a crash or stall, a lost lease, a visibility timeout, a retry).
    pub redelivered: u64,
    /// [`redelivered`](Self::redelivered) by cause.
    pub redelivered_by: RedeliveryCounts,
    /// How late first deliveries (attempt 1) were handed to the handler: past their run-at,
    /// or past the arrival of their notice when it came after the run-at (a task stored or
    /// rescheduled into the past is not counted late by how far in the past it was put).
    pub lateness: Lateness,
    /// How late redeliveries were handed to the handler: past their run-at, or past the
    /// claim that redelivered them when that came later (a task redelivered after its
    /// visibility timeout is not counted late by the timeouts it went through).
    pub redelivery_lateness: Lateness,
}

/// Why a task is delivered again (its attempt is not the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Redelivery {
    /// It was in flight past its visibility deadline: its handler did not acknowledge it in
    /// time, or its worker died, stalled or lost the shard with it in hand.
    VisibilityTimeout,
    /// This worker's claim of it got no reply (Redis may have applied it), and the worker
    /// claimed it again: the earlier claim was never handed to a handler.
    LostClaimReply,
    /// It was pending again after a claim: a handler asked for a retry, or a new owner of
    /// the shard put back what the previous one had in flight.
    Requeued,
}

impl Redelivery {
    /// The metric label of the cause.
    pub fn as_str(self) -> &'static str {
        match self {
            Redelivery::VisibilityTimeout => "visibility_timeout",
            Redelivery::LostClaimReply => "lost_claim_reply",
            Redelivery::Requeued => "requeued",
        }
    }
}

/// Redeliveries counted by cause ([`Redelivery`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedeliveryCounts {
    /// [`Redelivery::VisibilityTimeout`].
    pub visibility_timeout: u64,
    /// [`Redelivery::LostClaimReply`].
    pub lost_claim_reply: u64,
    /// [`Redelivery::Requeued`].
    pub requeued: u64,
}

impl RedeliveryCounts {
    /// Counts one redelivery.
    pub fn record(&mut self, cause: Redelivery) {
        match cause {
            Redelivery::VisibilityTimeout => self.visibility_timeout += 1,
            Redelivery::LostClaimReply => self.lost_claim_reply += 1,
            Redelivery::Requeued => self.requeued += 1,
        }
    }

    /// Each cause with its count.
    pub fn by_cause(&self) -> [(Redelivery, u64); 3] {
        [
            (Redelivery::VisibilityTimeout, self.visibility_timeout),
            (Redelivery::LostClaimReply, self.lost_claim_reply),
            (Redelivery::Requeued, self.requeued),
        ]
    }
}

/// A histogram of delivery lateness: how long after its due time (by the clock of the
/// Redis node that claimed it) each delivery reached the handler (see
/// [`WorkerStats::lateness`] for what "due" means).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Deliveries per bucket: `counts[i]` at most [`Lateness::BOUNDS_MS`]`[i]` ms late
    /// (and more than the bound before it); the last, later than every bound.
    pub counts: [u64; Lateness::BOUNDS_MS.len() + 1],
    /// The sum of all lateness, ms.
    pub sum_ms: u64,
}

impl Lateness {
    /// The buckets' upper bounds, ms: up to an hour, so that 11 s and an hour late (a Redis
    /// outage, a stalled worker) fall in different buckets.
    pub const BOUNDS_MS: [u64; 19] = [
        0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
        300_000, 900_000, 3_600_000,
    ];

    /// Records one delivery `ms` late.
    pub fn record(&mut self, ms: u64) {
        let i = Lateness::BOUNDS_MS.partition_point(|&b| b < ms);
        self.counts[i] += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }

    /// Deliveries recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// An upper bound of the `q` quantile (0.0..=1.0), ms: the bound of the bucket that holds
    /// it (`None` with no deliveries, or when it lies past the last bound).
    pub fn quantile_ms(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Lateness::BOUNDS_MS.get(i).copied();
            }
        }
        None
    }
}

/// One shard a worker holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// The epoch of this worker's lease (with its id, the fencing token).
    pub epoch: u64,
    /// How long the lease surely holds by the worker's own reckoning (zero: it delivers no
    /// more from this shard until a renewal succeeds).
    pub lease_left: Duration,
    /// The end of the window loaded into the wheel, ms since the Unix epoch (`None`: being
    /// read).
    pub loaded_until_ms: Option<u64>,
    /// Whether the shard is paused ([`Producer::pause`](crate::Producer::pause)): the worker
    /// keeps the lease and claims nothing.
    pub paused: bool,
}

/// A worker's state at one moment, as [`WorkerStatus::snapshot`] returns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// The worker's id (its lease owner name).
    pub id: String,
    /// Its counters.
    pub stats: WorkerStats,
    /// The shards it holds, in shard order, leases in doubt included (see
    /// [`shards_held`](Self::shards_held)).
    pub shards: Vec<ShardStatus>,
    /// Tasks in its wheel (its loaded windows and in-flight deliveries).
    pub in_wheel: usize,
    /// Outcomes (acknowledgements, retries, lapsed claims) not yet answered by Redis.
    pub held_outcomes: usize,
    /// Whether the last step reached Redis.
    pub connected: bool,
}

impl WorkerSnapshot {
    /// The shards whose lease the worker can still be sure of by its own conservative
    /// reckoning (`lease_left` above zero): the ones it may deliver from. While Redis is
    /// away every lease runs out and this falls to 0, though [`shards`](Self::shards) still
    /// names them (the worker renews them, under the same epochs, once Redis answers).
    pub fn shards_held(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| !s.lease_left.is_zero())
            .count()
    }
}

/// Why a worker no longer holds a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardLoss {
    /// Given up: to rebalance, or on shutdown.
    Released,
    /// Its renewal was refused: the lease had expired and another worker took the shard.
    NotRenewed,
    /// A claim, acknowledgement, retry or window read was refused: the shard's epoch moved
    /// on (another worker took it while this one stalled).
    Fenced,
}

/// Something that happened to a worker, as [`WorkerStatus::events`] receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// The worker took a shard, under this epoch.
    ShardAcquired {
        /// The shard.
        shard: u32,
        /// The new epoch.
        epoch: u64,
    },
    /// The worker no longer holds a shard.
    ShardLost {
        /// The shard.
        shard: u32,
        /// The epoch it held.
        epoch: u64,
        /// Why.
        cause: ShardLoss,
    },
    /// Maintenance could not reach Redis: the leases were not renewed this time (the worker
    /// stops delivering from a shard once its lease may have lapsed).
    RenewalFailed {
        /// The error, as text.
        error: String,
    },
    /// A step failed on a Redis error; the worker reconnects with backoff.
    Disconnected {
        /// The error, as text.
        error: String,
    },
    /// The first step that reached Redis again after [`WorkerEvent::Disconnected`].
    Reconnected,
}

/// A handle on a worker's state, readable from any thread while the worker runs
/// ([`Worker::status`]). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct WorkerStatus {
    shared: Arc<StatusShared>,
}

#[derive(Debug, Default)]
struct StatusShared {
    snapshot: Mutex<WorkerSnapshot>,
    subscribers: Mutex<Vec<Sender<WorkerEvent>>>,
}

impl WorkerStatus {
    /// The worker's state after its last step.
    pub fn snapshot(&self) -> WorkerSnapshot {
        self.shared
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A new receiver of the worker's events from now on (each receiver gets every event;
    /// a dropped receiver is forgotten).
    pub fn events(&self) -> Receiver<WorkerEvent> {
        let (tx, rx) = mpsc::channel();
        self.shared
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }

    fn emit(&self, event: WorkerEvent) {
        let mut subs = self
            .shared
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        subs.retain(|tx| tx.send(event.clone()).is_ok());
    }

    fn set(&self, snapshot: WorkerSnapshot) {
        *self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = snapshot;
    }
}

impl Worker {
    /// A handle on this worker's state and events, readable from any thread, while
    /// [`run`](Worker::run) runs too.
    pub fn status(&self) -> WorkerStatus {
        self.status.clone()
    }

    pub(crate) fn emit(&self, event: WorkerEvent) {
        self.status.emit(event);
    }

    /// Publishes the worker's state to its status handles (once a step).
    pub(crate) fn publish_status(&self, connected: bool) {
        let now_us = self.clock.lease_us();
        let shards = self
            .shards
            .iter()
            .map(|(shard, o)| ShardStatus {
                shard,
                epoch: o.epoch,
                lease_left: Duration::from_micros(o.valid_until_us.saturating_sub(now_us)),
                loaded_until_ms: match &o.window {
                    ShardWindow::Loaded { horizon, .. } => Some(*horizon),
                    ShardWindow::Unloaded => None,
                },
                paused: o.paused,
            })
            .collect();
        self.status.set(WorkerSnapshot {
            id: self.id.clone(),
            stats: self.stats,
            shards,
            in_wheel: self.schedule.len(),
            held_outcomes: self.outbox.held(),
            connected,
        });
    }
}
