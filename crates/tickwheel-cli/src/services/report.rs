//! The services family's results: one [`ServiceSample`] per entrant, the W4 terminal table,
//! and its rows in `results.csv` / `results.json`.

use super::ServiceEntrant;
use crate::report::pretty_n;
use crate::workload::Workload;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Duration;

/// Lateness percentiles in ns.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lateness {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Worst.
    pub max: u64,
}

/// What one W4 run measured.
#[derive(Debug, Clone)]
pub struct ServiceSample {
    /// Who ran it.
    pub entrant: ServiceEntrant,
    /// Task count.
    pub n: usize,
    /// Largest delay in ms.
    pub max_delay_ms: u64,
    /// Time to schedule all tasks.
    pub schedule: Duration,
    /// The scheduling thread's own CPU time while it scheduled (Linux, from
    /// `/proc/thread-self/schedstat`): unlike `schedule`, it leaves out time the thread
    /// waited for a core, so it is the cost of scheduling on a busy machine too.
    pub schedule_cpu: Option<Duration>,
    /// From the first schedule to the last firing.
    pub wall: Duration,
    /// Process CPU time over the run.
    pub cpu: Option<Duration>,
    /// Peak RSS growth over the run, bytes.
    pub peak_rss: Option<u64>,
    /// Lateness percentiles.
    pub lateness: Lateness,
    /// Lateness CDF: `(lateness in ms, fraction of tasks at most that late)`.
    pub cdf: Vec<(f64, f64)>,
    /// Lateness histogram: `(bucket upper bound in ms, tasks)`; the last bound is infinite.
    pub histogram: Vec<(f64, usize)>,
}

impl ServiceSample {
    /// Tasks scheduled per second.
    pub fn schedule_rate(&self) -> f64 {
        self.n as f64 / self.schedule.as_secs_f64().max(1e-9)
    }

    /// The sample as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "workload": "W4",
            "entrant": self.entrant.name(),
            "tickwheel": self.entrant.is_tickwheel(),
            "n": self.n,
            "max_delay_ms": self.max_delay_ms,
            "schedule_s": self.schedule.as_secs_f64(),
            "schedule_per_s": self.schedule_rate(),
            "schedule_thread_cpu_s": self.schedule_cpu.map(|c| c.as_secs_f64()),
            "wall_s": self.wall.as_secs_f64(),
            "cpu_s": self.cpu.map(|c| c.as_secs_f64()),
            "peak_rss_growth_bytes": self.peak_rss,
            "lateness_ns": { "p50": self.lateness.p50, "p99": self.lateness.p99,
                             "p999": self.lateness.p999, "max": self.lateness.max },
            "lateness_cdf_ms": self.cdf,
            "lateness_histogram_ms": self.histogram.iter().map(|(b, c)| json!({
                "le_ms": if b.is_finite() { json!(b) } else { json!("inf") }, "tasks": c,
            })).collect::<Vec<_>>(),
            "verified": true,
        })
    }
}

/// The terminal table of W4.
pub fn table(samples: &[ServiceSample]) -> String {
    let mut out = String::new();
    if samples.is_empty() {
        return out;
    }
    let max_delay = samples.iter().map(|s| s.max_delay_ms).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\n{}; delays 0..={max_delay} ms; lateness = ran − (schedule time + delay); \
         sched ns = the scheduling thread's CPU a task",
        Workload::RealTimeTasks.describe()
    );
    let _ = writeln!(
        out,
        "{:<20}{:>10}{:>14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "entrant",
        "N",
        "schedule/s",
        "sched ns",
        "wall s",
        "CPU s",
        "RSS MiB",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms"
    );
    for s in samples {
        out.push_str(&row(s));
    }
    out
}

fn row(s: &ServiceSample) -> String {
    let mark = if s.entrant.is_tickwheel() { "*" } else { " " };
    let cpu = s
        .cpu
        .map_or("?".to_owned(), |c| format!("{:.2}", c.as_secs_f64()));
    let sched = s.schedule_cpu.map_or("?".to_owned(), |c| {
        format!("{:.0}", c.as_nanos() as f64 / s.n.max(1) as f64)
    });
    let rss = s
        .peak_rss
        .map_or("?".to_owned(), |b| format!("{:.0}", b as f64 / 1048576.0));
    format!(
        "{mark}{:<19}{:>10}{:>14.0}{:>10}{:>10.2}{:>10}{:>10}{:>10.3}{:>10.3}{:>10.3}{:>10.3}\n",
        s.entrant.name(),
        pretty_n(s.n),
        s.schedule_rate(),
        sched,
        s.wall.as_secs_f64(),
        cpu,
        rss,
        ms(s.lateness.p50),
        ms(s.lateness.p99),
        ms(s.lateness.p999),
        ms(s.lateness.max),
    )
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The sample's row of `results.csv` (columns of [`crate::report::CSV_HEADER`]).
pub fn csv_row(s: &ServiceSample) -> String {
    format!(
        "W4,{},{},{},1,{},{},{:.3},,,,{:.0},{:.4},{},{},{},{},{},{},true\n",
        s.entrant.name(),
        s.entrant.is_tickwheel(),
        s.n,
        s.wall.as_nanos(),
        s.n,
        s.wall.as_nanos() as f64 / s.n.max(1) as f64,
        s.schedule_rate(),
        s.wall.as_secs_f64(),
        s.cpu
            .map_or(String::new(), |c| format!("{:.3}", c.as_secs_f64())),
        s.peak_rss.map_or(String::new(), |b| b.to_string()),
        s.lateness.p50,
        s.lateness.p99,
        s.lateness.p999,
        s.lateness.max,
    )
}
