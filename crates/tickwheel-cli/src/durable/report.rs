//! W6 results: the table, CSV rows and JSON.

use super::DurableEntrant;
use serde_json::{json, Value};
use tickwheel_redis::bench::RunReport;

/// One (entrant, worker count) run of W6.
#[derive(Debug, Clone)]
pub struct DurableSample {
    /// The design.
    pub entrant: DurableEntrant,
    /// Largest delay, ms.
    pub max_delay_ms: u64,
    /// The figures.
    pub run: RunReport,
}

/// The W6 table (empty when nothing ran), with the reference ZADD rate when known.
pub fn table(samples: &[DurableSample], zadd: Option<f64>) -> String {
    if samples.is_empty() {
        return String::new();
    }
    let runs: Vec<RunReport> = samples.iter().map(|s| s.run.clone()).collect();
    let mut out = format!(
        "\nW6 durable tasks on Redis (delays 0..={} ms, AOF appendfsync always)\n",
        samples[0].max_delay_ms
    );
    out += &tickwheel_redis::bench::table(&runs);
    if let Some(r) = zadd {
        out += &format!("redis-benchmark -P 64 -t zadd, same server: {r:.0}/s\n");
    }
    out
}

/// A `results.csv` row (columns of `report::CSV_HEADER`); the entrant column names the worker
/// count, since W6 runs each entrant at several.
pub fn csv_row(s: &DurableSample) -> String {
    let r = &s.run;
    let ns = |ms: f64| format!("{:.0}", ms * 1e6);
    let verified = r.delivered == r.tasks;
    format!(
        "W6,{}{} x{},{},{},1,,{},,,,,{:.0},,,,{},{},,{},{}\n",
        s.entrant.name(),
        match r.confirm_replicas {
            0 => String::new(),
            n => format!(" wait{n}"),
        },
        r.workers,
        s.entrant.is_tickwheel(),
        r.tasks,
        r.tasks,
        r.schedule_rate,
        ns(r.lateness_ms[0]),
        ns(r.lateness_ms[1]),
        ns(r.lateness_ms[2]),
        verified
    )
}

/// A `results.json` entry.
pub fn to_json(s: &DurableSample) -> Value {
    let r = &s.run;
    json!({
        "workload": "W6",
        "entrant": s.entrant.name(),
        "tickwheel": s.entrant.is_tickwheel(),
        "workers": r.workers,
        "confirm_replicas": r.confirm_replicas,
        "n": r.tasks,
        "max_delay_ms": s.max_delay_ms,
        "schedule_per_s": r.schedule_rate,
        "delivered": r.delivered,
        "duplicates": r.duplicates,
        "late_p50_ms": r.lateness_ms[0],
        "late_p99_ms": r.lateness_ms[1],
        "late_max_ms": r.lateness_ms[2],
        "settled_late_p50_ms": r.lateness_settled_ms[0],
        "settled_late_p99_ms": r.lateness_settled_ms[1],
        "settled_late_max_ms": r.lateness_settled_ms[2],
        "redis_bytes_per_task": r.memory_per_task,
        "payload_bytes": r.payload,
    })
}
