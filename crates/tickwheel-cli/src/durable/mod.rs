//! Family 3: durable delayed tasks on Redis (W6), backed by `tickwheel-redis`.
//!
//! W6 schedules N tasks with delays uniform in 0..=max (60 s by default) while 1..=4 workers
//! deliver them, on a Redis given by `--redis URL` or on a private `redis-server` the run
//! starts (append-only file, `appendfsync always`). Entrants: tickwheel-redis (each worker's
//! next window in a wheel) and the common design, one sorted set polled every second.

pub mod report;

use crate::error::{Error, Result};
use report::DurableSample;
use tickwheel_redis::bench::{self, BenchConfig};

/// A durable-task design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DurableEntrant {
    /// tickwheel-redis: shards with fenced leases, each worker's window in a wheel.
    TickwheelRedis,
    /// A sorted set scored by run-at, polled every second (Sidekiq / rq-scheduler style).
    PolledZset,
}

impl DurableEntrant {
    /// Every durable entrant, in table order.
    pub const ALL: [DurableEntrant; 2] =
        [DurableEntrant::TickwheelRedis, DurableEntrant::PolledZset];

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            DurableEntrant::TickwheelRedis => "tickwheel-redis",
            DurableEntrant::PolledZset => "polled-zset",
        }
    }

    /// Whether this is tickwheel's own entrant.
    pub fn is_tickwheel(self) -> bool {
        self == DurableEntrant::TickwheelRedis
    }
}

impl std::fmt::Display for DurableEntrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What W6 was asked to do.
#[derive(Debug, Clone)]
pub struct DurableSettings {
    /// A Redis URL; `None`: start a private `redis-server`.
    pub redis_url: Option<String>,
    /// Tasks per run.
    pub n: usize,
    /// Largest delay, ms.
    pub max_delay_ms: u64,
    /// Worker counts, one run per count and entrant.
    pub workers: Vec<usize>,
    /// Replicas that must confirm each write (`Config::confirm_replicas`): one
    /// tickwheel-redis run per value; above 0, W6's own redis-server gets that many replicas.
    pub confirm: Vec<u32>,
}

/// Runs W6 for `entrants`: one sample per (entrant, worker count), plus the
/// `redis-benchmark -P 64 -t zadd` rate of the same server when the run started its own.
/// A missing `redis-server` is an error saying how to install it.
pub fn run(
    entrants: &[DurableEntrant],
    s: &DurableSettings,
) -> Result<(Vec<DurableSample>, Option<f64>)> {
    let cfg = BenchConfig {
        url: s.redis_url.clone(),
        tasks: s.n as u64,
        max_delay: std::time::Duration::from_millis(s.max_delay_ms),
        workers: s.workers.clone(),
        durable: entrants.contains(&DurableEntrant::TickwheelRedis),
        baseline: entrants.contains(&DurableEntrant::PolledZset),
        confirm: s.confirm.clone(),
        ..BenchConfig::default()
    };
    let own_server = s.redis_url.is_none();
    let (runs, zadd) = bench::run_with_reference(&cfg, own_server, |m| eprintln!("W6: {m}"))
        .map_err(Error::Durable)?;
    let samples = runs
        .into_iter()
        .map(|r| DurableSample {
            entrant: if r.design.starts_with("tickwheel-redis") {
                DurableEntrant::TickwheelRedis
            } else {
                DurableEntrant::PolledZset
            },
            max_delay_ms: s.max_delay_ms,
            run: r,
        })
        .collect();
    Ok((samples, zadd))
}
