//! W8's results: one [`FutureSample`] per entrant, the terminal table, its rows in
//! `results.csv` / `results.json`, and the JSON a worker process hands back.

use super::FutureEntrant;
use crate::services::report::Lateness;
use crate::units::pretty_n;
use crate::workload::Workload;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Duration;

/// What W8's sleeping tasks measured.
#[derive(Debug, Clone, Copy)]
pub struct SleepSample {
    /// Sleeping tasks.
    pub tasks: usize,
    /// The longest sleep, ms.
    pub max_delay_ms: u64,
    /// The measured window.
    pub wall: Duration,
    /// Wake-ups in the window.
    pub wakes: usize,
    /// The process's CPU time over the window.
    pub cpu: Option<Duration>,
    /// The lateness of the window's wake-ups, ns.
    pub lateness: Lateness,
}

impl SleepSample {
    /// CPU time over wall time: the cores the sleeping tasks kept busy.
    pub fn cores(&self) -> Option<f64> {
        self.cpu
            .map(|c| c.as_secs_f64() / self.wall.as_secs_f64().max(1e-9))
    }

    fn to_json(self) -> Value {
        json!({
            "tasks": self.tasks,
            "max_delay_ms": self.max_delay_ms,
            "wall_s": self.wall.as_secs_f64(),
            "wakes": self.wakes,
            "cpu_s": self.cpu.map(|c| c.as_secs_f64()),
            "lateness_ns": { "p50": self.lateness.p50, "p99": self.lateness.p99,
                             "p999": self.lateness.p999, "max": self.lateness.max },
        })
    }

    fn from_json(v: &Value) -> Option<SleepSample> {
        let late = &v["lateness_ns"];
        Some(SleepSample {
            tasks: v["tasks"].as_u64()? as usize,
            max_delay_ms: v["max_delay_ms"].as_u64()?,
            wall: Duration::from_secs_f64(v["wall_s"].as_f64()?),
            wakes: v["wakes"].as_u64()? as usize,
            cpu: v["cpu_s"].as_f64().map(Duration::from_secs_f64),
            lateness: Lateness {
                p50: late["p50"].as_u64()?,
                p99: late["p99"].as_u64()?,
                p999: late["p999"].as_u64()?,
                max: late["max"].as_u64()?,
            },
        })
    }
}

/// What one entrant measured in W8.
#[derive(Debug, Clone)]
pub struct FutureSample {
    /// Who ran it.
    pub entrant: FutureEntrant,
    /// Operations a worker task in each repeat of the timeout and reset loops.
    pub ops: u64,
    /// Repeats of those loops; their medians are reported.
    pub repeats: u32,
    /// ns per `timeout` that never fires, around a future ready at once.
    pub timeout_ready_ns: f64,
    /// ns per `timeout` that never fires, around a future pending once.
    pub timeout_pending_ns: f64,
    /// ns per message of an idle timeout reset on each message.
    pub reset_ns: f64,
    /// The sleeping tasks (none for an entrant with no timer).
    pub sleeps: Option<SleepSample>,
}

impl FutureSample {
    /// The sample as JSON (also what a worker process prints).
    pub fn to_json(&self) -> Value {
        json!({
            "workload": "W8",
            "entrant": self.entrant.name(),
            "tickwheel": self.entrant.is_tickwheel(),
            "workers": super::legs::WORKERS,
            "ops_per_worker": self.ops,
            "repeats": self.repeats,
            "timeout_ready_ns": self.timeout_ready_ns,
            "timeout_pending_once_ns": self.timeout_pending_ns,
            "reset_per_message_ns": self.reset_ns,
            "sleepers": self.sleeps.map(SleepSample::to_json),
            "verified": true,
        })
    }

    /// Reads back what [`to_json`](Self::to_json) wrote.
    pub fn from_json(entrant: FutureEntrant, v: &Value) -> Option<FutureSample> {
        Some(FutureSample {
            entrant,
            ops: v["ops_per_worker"].as_u64()?,
            repeats: u32::try_from(v["repeats"].as_u64()?).ok()?,
            timeout_ready_ns: v["timeout_ready_ns"].as_f64()?,
            timeout_pending_ns: v["timeout_pending_once_ns"].as_f64()?,
            reset_ns: v["reset_per_message_ns"].as_f64()?,
            sleeps: match &v["sleepers"] {
                Value::Null => None,
                s => Some(SleepSample::from_json(s)?),
            },
        })
    }
}

/// The terminal table of W8 (empty when it did not run).
pub fn table(samples: &[FutureSample]) -> String {
    let mut out = String::new();
    let Some(first) = samples.first() else {
        return out;
    };
    let _ = writeln!(out, "\n{}", Workload::Futures.describe());
    let _ = writeln!(
        out,
        "CPU ns per operation (the process's, over {} worker tasks looping at once), median \
         of {} runs of {} a task; timeouts never fire; reset = an idle sleep pushed back on \
         each message (pending once); sleepers: CPU over a window, lateness from the \
         deadline asked for",
        super::legs::WORKERS,
        first.repeats,
        pretty_n(first.ops as usize)
    );
    if let Some(s) = samples.iter().find_map(|s| s.sleeps) {
        let _ = writeln!(
            out,
            "sleepers: {} tasks, sleeps {}..={} ms, {:.1} s window",
            pretty_n(s.tasks),
            s.max_delay_ms / 3,
            s.max_delay_ms,
            s.wall.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "{:<26}{:>15}{:>17}{:>11}{:>10}{:>11}{:>10}{:>10}{:>10}",
        "entrant",
        "timeout ready",
        "timeout pending",
        "reset/msg",
        "wakes/s",
        "CPU cores",
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    for s in samples {
        let mark = if s.entrant.is_tickwheel() { "*" } else { " " };
        let _ = write!(
            out,
            "{mark}{:<25}{:>15.1}{:>17.1}{:>11.1}",
            s.entrant.name(),
            s.timeout_ready_ns,
            s.timeout_pending_ns,
            s.reset_ns
        );
        match s.sleeps {
            Some(z) => {
                let cores = z.cores().map_or("?".to_owned(), |c| format!("{c:.3}"));
                let _ = writeln!(
                    out,
                    "{:>10.0}{cores:>11}{:>10.3}{:>10.3}{:>10.3}",
                    z.wakes as f64 / z.wall.as_secs_f64().max(1e-9),
                    ms(z.lateness.p50),
                    ms(z.lateness.p99),
                    ms(z.lateness.max)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:>10}{:>11}{:>10}{:>10}{:>10}",
                    "-", "-", "-", "-", "-"
                );
            }
        }
    }
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The sample's rows of `results.csv` (columns of `crate::report::CSV_HEADER`): one per
/// part, the part named after the entrant as W6 names its worker count.
pub fn csv_rows(s: &FutureSample) -> String {
    let ops = s.ops * super::legs::WORKERS as u64;
    let mut out = String::new();
    for (part, ns) in [
        ("timeout-ready", s.timeout_ready_ns),
        ("timeout-pending-once", s.timeout_pending_ns),
        ("reset-per-message", s.reset_ns),
    ] {
        let _ = writeln!(
            out,
            "W8,{} {part},{},{ops},{},,{ops},{ns:.1},,,,,,,,,,,,true",
            s.entrant.name(),
            s.entrant.is_tickwheel(),
            s.repeats
        );
    }
    if let Some(z) = s.sleeps {
        let cpu = z
            .cpu
            .map_or(String::new(), |c| format!("{:.3}", c.as_secs_f64()));
        let _ = writeln!(
            out,
            "W8,{} sleepers,{},{},1,,{},,,,,,{:.3},{cpu},,{},{},{},{},true",
            s.entrant.name(),
            s.entrant.is_tickwheel(),
            z.tasks,
            z.wakes,
            z.wall.as_secs_f64(),
            z.lateness.p50,
            z.lateness.p99,
            z.lateness.p999,
            z.lateness.max
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FutureSample {
        FutureSample {
            entrant: FutureEntrant::AsyncIo,
            ops: 1000,
            repeats: 3,
            timeout_ready_ns: 12.5,
            timeout_pending_ns: 80.0,
            reset_ns: 95.25,
            sleeps: Some(SleepSample {
                tasks: 100,
                max_delay_ms: 30,
                wall: Duration::from_millis(200),
                wakes: 900,
                cpu: Some(Duration::from_millis(50)),
                lateness: Lateness {
                    p50: 1,
                    p99: 2,
                    p999: 3,
                    max: 4,
                },
            }),
        }
    }

    #[test]
    fn a_sample_survives_the_trip_through_json() {
        let s = sample();
        let back = FutureSample::from_json(s.entrant, &s.to_json()).unwrap();
        assert_eq!((back.ops, back.repeats), (1000, 3));
        assert_eq!(back.reset_ns, 95.25);
        let (a, b) = (s.sleeps.unwrap(), back.sleeps.unwrap());
        assert_eq!(
            (a.tasks, a.wakes, a.cpu, a.wall),
            (b.tasks, b.wakes, b.cpu, b.wall)
        );
        assert_eq!(b.lateness.p999, 3);
        assert_eq!(b.cores(), Some(0.25));
        let none = FutureSample {
            sleeps: None,
            ..sample()
        };
        assert!(FutureSample::from_json(none.entrant, &none.to_json())
            .unwrap()
            .sleeps
            .is_none());
    }

    #[test]
    fn table_shows_a_dash_for_an_entrant_without_sleeps() {
        let none = FutureSample {
            entrant: FutureEntrant::NoTimer,
            sleeps: None,
            ..sample()
        };
        let table = table(&[sample(), none]);
        assert!(table.contains("W8 futures"), "{table}");
        assert!(
            table.contains("sleepers: 100 tasks, sleeps 10..=30 ms"),
            "{table}"
        );
        let row = table.lines().find(|l| l.contains("no-timer")).unwrap();
        assert!(row.trim_end().ends_with('-'), "{row}");
    }
}
