//! The services family's results: one [`ServiceSample`] per entrant, the W4 terminal table,
//! and its rows in `results.csv` / `results.json`.

use super::{quantile, ServiceEntrant};
use crate::units::pretty_n;
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

impl Lateness {
    /// The percentiles of sorted lateness values (all zero for none).
    pub fn of(sorted: &[u64]) -> Lateness {
        Lateness {
            p50: quantile(sorted, 0.5),
            p99: quantile(sorted, 0.99),
            p999: quantile(sorted, 0.999),
            max: sorted.last().copied().unwrap_or(0),
        }
    }

    fn to_json(self) -> Value {
        json!({ "p50": self.p50, "p99": self.p99, "p999": self.p999, "max": self.max })
    }
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
    /// The other threads' CPU time over the same stretch (each thread's schedstat): the
    /// timer's own threads, working while the producer schedules. On a machine with fewer
    /// cores than busy threads, the producer's rate follows the sum of the two.
    pub schedule_others_cpu: Option<Duration>,
    /// From the first schedule to the last firing.
    pub wall: Duration,
    /// Process CPU time over the run.
    pub cpu: Option<Duration>,
    /// Peak RSS growth over the run, bytes.
    pub peak_rss: Option<u64>,
    /// The resolution a tickwheel entrant ran at; `None` for a peer, which has its own.
    pub tick: Option<Duration>,
    /// Lateness percentiles.
    pub lateness: Lateness,
    /// How many tasks were due after the producer had finished scheduling.
    pub after_producer_n: usize,
    /// Lateness percentiles of those tasks alone (all zero when there are none).
    pub after_producer: Lateness,
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
            "schedule_others_cpu_s": self.schedule_others_cpu.map(|c| c.as_secs_f64()),
            "wall_s": self.wall.as_secs_f64(),
            "cpu_s": self.cpu.map(|c| c.as_secs_f64()),
            "peak_rss_growth_bytes": self.peak_rss,
            "tickwheel_resolution_ns": self.tick.map(|t| t.as_nanos() as u64),
            "lateness_ns": self.lateness.to_json(),
            "after_producer_tasks": self.after_producer_n,
            "after_producer_lateness_ns": self.after_producer.to_json(),
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
         sched ns = the scheduling thread's CPU a task; others ns = the other threads' CPU a \
         task meanwhile; aft = lateness of the tasks due after \
         the producer finished",
        Workload::RealTimeTasks.describe()
    );
    let mut ticks: Vec<Duration> = samples.iter().filter_map(|s| s.tick).collect();
    ticks.sort_unstable();
    ticks.dedup();
    if !ticks.is_empty() {
        let ticks: Vec<String> = ticks.iter().map(|t| format!("{t:?}")).collect();
        let _ = writeln!(
            out,
            "resolution: tickwheel entrants {}; peers their own (tokio-sleep and \
             delayqueue-channel: tokio's 1 ms timer; binaryheap-thread: condvar timeouts, \
             no tick; bucket-floor, floor-workers, floor-closures, floor-indexed and \
             floor-direct: 1 ms buckets)",
            ticks.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{:<26}{:>8}{:>12}{:>10}{:>11}{:>8}{:>8}{:>9}{:>9}{:>9}{:>10}{:>9}{:>11}{:>11}",
        "entrant",
        "N",
        "schedule/s",
        "sched ns",
        "others ns",
        "wall s",
        "CPU s",
        "RSS MiB",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "aft p50 ms",
        "aft p99 ms"
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
    let per_task = |c: Option<Duration>| {
        c.map_or("?".to_owned(), |c| {
            format!("{:.0}", c.as_nanos() as f64 / s.n.max(1) as f64)
        })
    };
    let (sched, others) = (per_task(s.schedule_cpu), per_task(s.schedule_others_cpu));
    let rss = s
        .peak_rss
        .map_or("?".to_owned(), |b| format!("{:.0}", b as f64 / 1048576.0));
    format!(
        "{mark}{:<25}{:>8}{:>12.0}{:>10}{:>11}{:>8.2}{:>8}{:>9}{:>9.3}{:>9.3}{:>10.3}{:>9.3}{:>11.3}{:>11.3}\n",
        s.entrant.name(),
        pretty_n(s.n),
        s.schedule_rate(),
        sched,
        others,
        s.wall.as_secs_f64(),
        cpu,
        rss,
        ms(s.lateness.p50),
        ms(s.lateness.p99),
        ms(s.lateness.p999),
        ms(s.lateness.max),
        ms(s.after_producer.p50),
        ms(s.after_producer.p99),
    )
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The sample's row of `results.csv`, in the columns `crate::report::CSV_HEADER` names.
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
