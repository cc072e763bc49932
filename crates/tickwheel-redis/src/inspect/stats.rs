//! A namespace at a glance: what [`Inspector::stats`](super::Inspector::stats) returns.

use std::time::Duration;

/// A namespace at a glance: [`Inspector::stats`](super::Inspector::stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// The Redis clock when read, ms since the Unix epoch.
    pub now_ms: u64,
    /// Every shard, in shard order.
    pub shards: Vec<ShardStats>,
    /// Workers whose registration is live (they heartbeat within their lease).
    pub live_workers: u64,
    /// The first [`MAX_STEP`](super::MAX_STEP) of them, soonest registration expiry first.
    pub workers: Vec<LiveWorker>,
}

impl Stats {
    /// Pending tasks, all shards.
    pub fn pending(&self) -> u64 {
        self.shards.iter().map(|s| s.pending).sum()
    }

    /// In-flight tasks, all shards.
    pub fn in_flight(&self) -> u64 {
        self.shards.iter().map(|s| s.in_flight).sum()
    }

    /// In-flight tasks past their visibility deadline (to be delivered again), all shards.
    pub fn in_flight_expired(&self) -> u64 {
        self.shards.iter().map(|s| s.in_flight_expired).sum()
    }

    /// The earliest next run-at of any shard.
    pub fn next_run_at_ms(&self) -> Option<u64> {
        self.shards.iter().filter_map(|s| s.next_run_at_ms).min()
    }

    /// Tasks in the failed set, all shards.
    pub fn failed(&self) -> u64 {
        self.shards.iter().map(|s| s.failed).sum()
    }

    /// Ids `schedule_once` remembers now, all shards ([`ShardStats::remembered`]).
    pub fn remembered(&self) -> u64 {
        self.shards.iter().map(|s| s.remembered).sum()
    }

    /// Paused shards.
    pub fn paused(&self) -> usize {
        self.shards.iter().filter(|s| s.paused).count()
    }

    /// Shards with no live lease (nobody delivers their tasks right now).
    pub fn unowned(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| s.lease_left.is_none())
            .count()
    }
}

/// One shard: [`Stats::shards`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardStats {
    /// The shard's number.
    pub shard: u32,
    /// The worker that last took the lease (`None`: never taken, or released).
    pub owner: Option<String>,
    /// The lease's epoch (with the owner, its fencing token; 0 before anyone took it).
    pub epoch: u64,
    /// How long the owner's lease still runs; `None` when it has lapsed (or there is none).
    pub lease_left: Option<Duration>,
    /// Pending tasks.
    pub pending: u64,
    /// Tasks delivered and not yet acknowledged.
    pub in_flight: u64,
    /// In-flight tasks past their visibility deadline: to be delivered again.
    pub in_flight_expired: u64,
    /// Time buckets (seconds) that hold pending tasks.
    pub buckets: u64,
    /// The earliest run-at of a pending task (in the past: overdue), ms since the Unix epoch.
    pub next_run_at_ms: Option<u64>,
    /// Tasks in the failed set.
    pub failed: u64,
    /// Whether the shard is paused ([`Producer::pause`](crate::Producer::pause)): nothing is
    /// claimed from it.
    pub paused: bool,
    /// Failed tasks the retention bound removed, ever
    /// ([`Config::failed_retention`](crate::Config::failed_retention)).
    pub trimmed: u64,
    /// Ids [`Producer::schedule_once`](crate::Producer::schedule_once) remembers now: a
    /// `schedule_once` of one of them stores nothing and answers
    /// [`Remembered`](crate::ScheduledOnce::Remembered) until its window ends
    /// ([`Config::idempotency_window`](crate::Config::idempotency_window)).
    pub remembered: u64,
    /// Whether [`ShardStats::next_run_at_ms`] is exact: `false` when its second holds more than
    /// [`MAX_STEP`](super::MAX_STEP) tasks, and it is only the earliest of the first
    /// [`MAX_STEP`](super::MAX_STEP) of them (the true one lies in the same second).
    pub next_run_at_exact: bool,
}

/// A worker registered as live: [`Stats::workers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveWorker {
    /// Its id (as [`Worker::id`](crate::Worker::id)).
    pub id: String,
    /// How long its registration lasts without another heartbeat.
    pub expires_in: Duration,
}
