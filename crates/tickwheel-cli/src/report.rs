//! Everything one `tickwheel bench` produced, and the files it writes: `results.csv` and
//! `results.json`, one row per (workload, entrant, N) across families.
//!
//! It sits above the families' own report modules (it gathers their rows); they never import
//! from it, and share [`crate::units`] with it instead.
//!
//! Invariant: every number printed or written comes from a sample whose run passed its
//! checks (a failed check aborts the run before any output is written).

use crate::durable::report::DurableSample;
use crate::error::{Error, Result};
use crate::futures::report::FutureSample;
use crate::machine::Machine;
use crate::queues::report::{self as queue_report, QueueSample};
use crate::services::report::ServiceSample;
use serde_json::{json, Value};
use std::path::Path;

/// The columns of `results.csv`; a family leaves the columns it does not measure empty.
/// `ops` is what `ns_per_op` divides by: N for W1–W4, operations plus firings for W5 and W7,
/// the timeouts or messages of both worker tasks for W8 (whose `ns_per_op` is CPU time).
pub const CSV_HEADER: &str = "workload,entrant,tickwheel,n,repeats,median_ns,ops,ns_per_op,\
ratio_to_fastest_peer,max_late_ticks,peak_heap_bytes,schedule_per_s,wall_s,cpu_s,\
peak_rss_bytes,late_p50_ns,late_p99_ns,late_p999_ns,late_max_ns,verified\n";

/// Everything one `tickwheel bench` produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// The command line, as typed.
    pub command_line: String,
    /// The input seed.
    pub seed: u64,
    /// Virtual-time queue results (W1, W2, W3, W5).
    pub queues: Vec<QueueSample>,
    /// Real-time service results (W4).
    pub services: Vec<ServiceSample>,
    /// Durable-task results (W6).
    pub durable: Vec<DurableSample>,
    /// `redis-benchmark -P 64 -t zadd` on W6's own server, per second, when it ran.
    pub durable_zadd_per_s: Option<f64>,
    /// Timer futures in an async runtime (W8).
    pub futures: Vec<FutureSample>,
    /// Caveats worth printing next to the numbers.
    pub notes: Vec<String>,
}

/// Writes `results.csv`: one row per (workload, entrant, N), every family.
pub fn write_csv(report: &Report, path: &Path) -> Result<()> {
    let mut csv = String::from(CSV_HEADER);
    for s in &report.queues {
        csv.push_str(&queue_report::csv_row(&report.queues, s));
    }
    for s in &report.services {
        csv.push_str(&crate::services::report::csv_row(s));
    }
    for s in &report.durable {
        csv.push_str(&crate::durable::report::csv_row(s));
    }
    for s in &report.futures {
        csv.push_str(&crate::futures::report::csv_rows(s));
    }
    std::fs::write(path, csv).map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// Writes `results.json`: machine, command line, seed, notes and every sample.
pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let m = &report.machine;
    let queues: Vec<Value> = report
        .queues
        .iter()
        .map(|s| queue_report::to_json(&report.queues, s))
        .collect();
    let services: Vec<Value> = report.services.iter().map(ServiceSample::to_json).collect();
    let durable: Vec<Value> = report
        .durable
        .iter()
        .map(crate::durable::report::to_json)
        .collect();
    let doc = json!({
        "tool": "tickwheel bench",
        "version": env!("CARGO_PKG_VERSION"),
        "command_line": report.command_line,
        "machine": { "cpu": m.cpu, "cores": m.cores, "os": m.os, "profile": m.profile },
        "seed": report.seed,
        "tick": "1 ms (virtual for the queues)",
        "notes": report.notes,
        "queues": queues,
        "services": services,
        "durable": durable,
        "durable_zadd_per_s": report.durable_zadd_per_s,
        "futures": report.futures.iter().map(FutureSample::to_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::io(format!("cannot encode {}", path.display()), e.into()))?;
    std::fs::write(path, text).map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_every_column() {
        let columns = CSV_HEADER.trim_end().split(',').count();
        let q = QueueSample {
            workload: crate::workload::Workload::Churn,
            entrant: crate::queues::QueueEntrant::Wheel,
            n: 10,
            ops: 12,
            runs_ns: vec![100],
            max_late_ticks: Some(0),
            peak_heap_bytes: 64,
        };
        let row = queue_report::csv_row(std::slice::from_ref(&q), &q);
        assert_eq!(row.trim_end().split(',').count(), columns, "{row}");
        let s = ServiceSample {
            entrant: crate::services::ServiceEntrant::HeapThread,
            n: 3,
            max_delay_ms: 7,
            schedule: std::time::Duration::from_millis(1),
            schedule_cpu: None,
            schedule_others_cpu: None,
            wall: std::time::Duration::from_millis(9),
            cpu: None,
            peak_rss: Some(4096),
            tick: None,
            lateness: Default::default(),
            after_producer_n: 0,
            after_producer: Default::default(),
            cdf: Vec::new(),
            histogram: Vec::new(),
        };
        let row = crate::services::report::csv_row(&s);
        assert_eq!(row.trim_end().split(',').count(), columns, "{row}");
        let d = crate::durable::report::DurableSample {
            entrant: crate::durable::DurableEntrant::TickwheelRedis,
            max_delay_ms: 60_000,
            run: tickwheel_redis::bench::RunReport {
                design: "tickwheel-redis".into(),
                workers: 4,
                tasks: 10,
                schedule_rate: 1000.0,
                delivered: 10,
                duplicates: 0,
                lateness_ms: [0.5, 1.0, 2.0],
                lateness_settled_ms: [0.4, 0.9, 1.5],
                memory_per_task: 200.0,
                payload: 64,
                confirm_replicas: 0,
            },
        };
        let row = crate::durable::report::csv_row(&d);
        assert_eq!(row.trim_end().split(',').count(), columns, "{row}");
        let f = FutureSample {
            entrant: crate::futures::FutureEntrant::TokioTime,
            ops: 10,
            repeats: 1,
            timeout_ready_ns: 1.0,
            timeout_pending_ns: 2.0,
            reset_ns: 3.0,
            sleeps: Some(crate::futures::report::SleepSample {
                tasks: 5,
                max_delay_ms: 30,
                wall: std::time::Duration::from_millis(100),
                wakes: 7,
                cpu: None,
                lateness: Default::default(),
            }),
        };
        let rows = crate::futures::report::csv_rows(&f);
        assert_eq!(rows.lines().count(), 4, "{rows}");
        for row in rows.lines() {
            assert_eq!(row.split(',').count(), columns, "{row}");
        }
    }
}
