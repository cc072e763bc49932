//! The queues family's results: one [`QueueSample`] per (workload, entrant, N), the terminal
//! tables, and their rows in `results.csv` / `results.json`.
//!
//! Invariant: "ratio" is always the entrant's median ns per operation divided by the
//! fastest *peer's* at the same workload and N (below 1 = faster than every peer).

use super::QueueEntrant;
use crate::units::pretty_n;
use crate::workload::Workload;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The repeats of one (workload, entrant, N) on virtual time.
#[derive(Debug, Clone)]
pub struct QueueSample {
    /// W1, W2, W3, W5 or W7.
    pub workload: Workload,
    /// Who ran it.
    pub entrant: QueueEntrant,
    /// Timer count.
    pub n: usize,
    /// Operations per run (see [`super::Outcome::ops`]).
    pub ops: u64,
    /// Wall time of each repeat's timed region, in ns.
    pub runs_ns: Vec<u64>,
    /// Largest lateness seen in ticks (W2, W5 and W7 always; W3 when its drain check ran).
    pub max_late_ticks: Option<u64>,
    /// Largest peak heap growth over the repeats, in bytes.
    pub peak_heap_bytes: u64,
}

impl QueueSample {
    /// The median of the repeats (the lower middle for an even count), in ns.
    pub fn median_ns(&self) -> u64 {
        let mut runs = self.runs_ns.clone();
        runs.sort_unstable();
        runs.get(runs.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0)
    }

    /// The median per operation, in ns.
    pub fn ns_per_op(&self) -> f64 {
        self.median_ns() as f64 / self.ops.max(1) as f64
    }

    /// Peak heap bytes per timer.
    pub fn heap_bytes_per_timer(&self) -> f64 {
        self.peak_heap_bytes as f64 / self.n.max(1) as f64
    }

    /// The measured part of the sample, as the JSON line `tickwheel queue-worker` prints.
    pub fn to_json(&self) -> Value {
        json!({
            "ops": self.ops,
            "runs_ns": self.runs_ns,
            "max_late_ticks": self.max_late_ticks,
            "peak_heap_bytes": self.peak_heap_bytes,
        })
    }

    /// Reads back [`to_json`](Self::to_json)'s output for the sample of `entrant` at
    /// (`workload`, `n`); `None` if it is not one (no timed run included).
    pub fn from_json(
        workload: Workload,
        entrant: QueueEntrant,
        n: usize,
        json: &Value,
    ) -> Option<QueueSample> {
        let late = &json["max_late_ticks"];
        let runs_ns = json["runs_ns"]
            .as_array()?
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()?;
        Some(QueueSample {
            workload,
            entrant,
            n,
            ops: json["ops"].as_u64()?,
            max_late_ticks: if late.is_null() {
                None
            } else {
                Some(late.as_u64()?)
            },
            peak_heap_bytes: json["peak_heap_bytes"].as_u64()?,
            runs_ns: (!runs_ns.is_empty()).then_some(runs_ns)?,
        })
    }
}

/// The fastest peer's ns per operation at (`workload`, `n`), if any peer ran it.
pub fn best_peer(samples: &[QueueSample], workload: Workload, n: usize) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.workload == workload && s.n == n && !s.entrant.is_tickwheel())
        .map(QueueSample::ns_per_op)
        .min_by(f64::total_cmp)
}

/// `sample`'s ratio to the fastest peer.
pub fn ratio(samples: &[QueueSample], sample: &QueueSample) -> Option<f64> {
    best_peer(samples, sample.workload, sample.n)
        .filter(|best| *best > 0.0)
        .map(|best| sample.ns_per_op() / best)
}

/// The unit one operation stands for in `workload`'s table.
fn unit(workload: Workload) -> &'static str {
    if workload.is_churn() {
        "ns per operation (reset, cancel+insert, or firing+refill)"
    } else {
        "ns per timer"
    }
}

/// The terminal table of one workload: ns per operation (median) and ratio to the fastest
/// peer; W5 and W7 add peak heap bytes per live timer.
pub fn table(samples: &[QueueSample], workload: Workload) -> String {
    let mut ns: Vec<usize> = samples
        .iter()
        .filter(|s| s.workload == workload)
        .map(|s| s.n)
        .collect();
    ns.sort_unstable();
    ns.dedup();
    let mut out = String::new();
    if ns.is_empty() {
        return out;
    }
    let memory = workload.is_churn();
    let _ = writeln!(
        out,
        "\n{}\n{}, median; (×) = ratio to the fastest peer{}",
        workload.describe(),
        unit(workload),
        if memory {
            "; B = peak heap bytes per live timer"
        } else {
            ""
        }
    );
    let width = if memory { 26 } else { 20 };
    let _ = write!(out, "{:<20}", "entrant");
    for &n in &ns {
        let _ = write!(out, "{:>width$}", format!("N={}", pretty_n(n)));
    }
    out.push('\n');
    for entrant in QueueEntrant::ALL {
        out.push_str(&row(samples, workload, entrant, &ns, width));
    }
    out
}

/// One entrant's row of [`table`]; empty if it did not run `workload`.
fn row(
    samples: &[QueueSample],
    workload: Workload,
    entrant: QueueEntrant,
    ns: &[usize],
    width: usize,
) -> String {
    let mark = if entrant.is_tickwheel() { "*" } else { " " };
    if let Some(why) = entrant.cannot_run(workload) {
        return format!("{mark}{:<19}  n/a: {why}\n", entrant.name());
    }
    let cells: Vec<&QueueSample> = ns
        .iter()
        .filter_map(|&n| {
            samples
                .iter()
                .find(|s| s.workload == workload && s.entrant == entrant && s.n == n)
        })
        .collect();
    if cells.is_empty() {
        return String::new();
    }
    let mut out = format!("{mark}{:<19}", entrant.name());
    for s in cells {
        let ratio = ratio(samples, s).map_or(String::new(), |r| format!(" ({r:.2}×)"));
        let memory = if workload.is_churn() {
            format!(" {:.0}B", s.heap_bytes_per_timer())
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "{:>width$}",
            format!("{:.1}{ratio}{memory}", s.ns_per_op())
        );
    }
    out.push('\n');
    out
}

/// The verification summary line of a workload whose runs were checked.
pub fn verification_line(samples: &[QueueSample], workload: Workload) -> Option<String> {
    let checked: Vec<&QueueSample> = samples
        .iter()
        .filter(|s| s.workload == workload && s.max_late_ticks.is_some())
        .collect();
    if checked.is_empty() {
        return None;
    }
    let mut late: Vec<String> = QueueEntrant::ALL
        .iter()
        .filter_map(|&e| {
            let worst = checked
                .iter()
                .filter(|s| s.entrant == e)
                .filter_map(|s| s.max_late_ticks)
                .max()?;
            (worst > 0).then(|| format!("{} {worst}", e.name()))
        })
        .collect();
    if late.is_empty() {
        late.push("none".to_owned());
    }
    Some(format!(
        "verified ({} samples checked): every timer fired exactly once, never early. \
         Late firings (max ticks): {}",
        checked.len(),
        late.join(", ")
    ))
}

/// The sample's row of `results.csv`, in the columns `crate::report::CSV_HEADER` names.
pub fn csv_row(samples: &[QueueSample], s: &QueueSample) -> String {
    format!(
        "{},{},{},{},{},{},{},{:.3},{},{},{},,,,,,,,,true\n",
        s.workload.label(),
        s.entrant.name(),
        s.entrant.is_tickwheel(),
        s.n,
        s.runs_ns.len(),
        s.median_ns(),
        s.ops,
        s.ns_per_op(),
        ratio(samples, s).map_or(String::new(), |r| format!("{r:.4}")),
        s.max_late_ticks.map_or(String::new(), |t| t.to_string()),
        s.peak_heap_bytes,
    )
}

/// The sample as JSON.
pub fn to_json(samples: &[QueueSample], s: &QueueSample) -> Value {
    json!({
        "workload": s.workload.label(),
        "entrant": s.entrant.name(),
        "tickwheel": s.entrant.is_tickwheel(),
        "n": s.n,
        "ops": s.ops,
        "runs_ns": s.runs_ns,
        "median_ns": s.median_ns(),
        "ns_per_op": s.ns_per_op(),
        "ratio_to_fastest_peer": ratio(samples, s),
        "peak_heap_bytes": s.peak_heap_bytes,
        "verified": true,
        "max_late_ticks": s.max_late_ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_middle_run() {
        let s = QueueSample {
            workload: Workload::ScheduleCancel,
            entrant: QueueEntrant::BTreeMap,
            n: 10,
            ops: 10,
            runs_ns: vec![300, 100, 200],
            max_late_ticks: None,
            peak_heap_bytes: 640,
        };
        assert_eq!(s.median_ns(), 200);
        assert!((s.ns_per_op() - 20.0).abs() < 1e-9);
        assert!((s.heap_bytes_per_timer() - 64.0).abs() < 1e-9);
    }
}
