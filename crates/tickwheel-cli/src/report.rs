//! Results: the terminal table, `results.csv` and `results.json`.
//!
//! Invariants: every number printed or written comes from a [`VirtualSample`] or a
//! [`W4Sample`] whose run passed its checks (a failed check aborts the run before any
//! output is written). "Ratio" is always the entrant's median ns per timer divided by the
//! fastest *peer's* at the same workload and N (below 1 = faster than every peer).

use crate::entrants::Entrant;
use crate::machine::Machine;
use crate::w4::W4Sample;
use crate::Workload;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// The repeats of one (workload, entrant, N) on virtual time.
#[derive(Debug, Clone)]
pub struct VirtualSample {
    /// W1, W2 or W3.
    pub workload: Workload,
    /// Who ran it.
    pub entrant: Entrant,
    /// Timer count.
    pub n: usize,
    /// Wall time of each repeat's timed region, in ns.
    pub runs_ns: Vec<u64>,
    /// Largest lateness seen in ticks (W2 always; W3 when its drain check ran).
    pub max_late_ticks: Option<u64>,
}

impl VirtualSample {
    /// The median of the repeats (the lower middle for an even count), in ns.
    pub fn median_ns(&self) -> u64 {
        let mut runs = self.runs_ns.clone();
        runs.sort_unstable();
        runs.get(runs.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0)
    }

    /// The median per timer, in ns.
    pub fn ns_per_timer(&self) -> f64 {
        self.median_ns() as f64 / self.n as f64
    }
}

/// Everything one `tickwheel bench` produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// The command line, as typed.
    pub command_line: String,
    /// The input seed.
    pub seed: u64,
    /// W1–W3 results.
    pub samples: Vec<VirtualSample>,
    /// W4 results.
    pub w4: Vec<W4Sample>,
    /// Caveats worth printing next to the numbers.
    pub notes: Vec<String>,
}

impl Report {
    /// The fastest peer's ns per timer at (`workload`, `n`), if any peer ran it.
    pub fn best_peer(&self, workload: Workload, n: usize) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.workload == workload && s.n == n && !s.entrant.is_tickwheel())
            .map(VirtualSample::ns_per_timer)
            .min_by(f64::total_cmp)
    }

    /// `sample`'s ratio to the fastest peer.
    pub fn ratio(&self, sample: &VirtualSample) -> Option<f64> {
        self.best_peer(sample.workload, sample.n)
            .filter(|best| *best > 0.0)
            .map(|best| sample.ns_per_timer() / best)
    }
}

/// A timer count the way people read it: `10^4`, `6·10^6`, `2500`.
pub fn pretty_n(n: usize) -> String {
    let digits = n.to_string();
    let trimmed = digits.trim_end_matches('0');
    let zeros = digits.len() - trimmed.len();
    match (trimmed, zeros) {
        (_, 0..=2) => digits,
        ("1", z) => format!("10^{z}"),
        (t, z) if t.len() == 1 => format!("{t}·10^{z}"),
        _ => digits,
    }
}

/// A short description of each workload for table headings.
pub fn describe(w: Workload) -> &'static str {
    match w {
        Workload::W1 => "W1 schedule+cancel (delays 1..=60000 ticks, cancel all, random order)",
        Workload::W2 => "W2 schedule+fire (delays 1..=10000 ticks, tick by tick; verified)",
        Workload::W3 => "W3 reset (N timers, then N resets to 1..=30000 ticks; time = resets)",
        Workload::W4 => "W4 real-time service (N tasks, uniform delays on the real clock)",
    }
}

/// The terminal table of W1–W3: ns per timer (median) and ratio to the fastest peer.
pub fn virtual_table(report: &Report, workload: Workload) -> String {
    let mut ns: Vec<usize> = report
        .samples
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
    let _ = writeln!(
        out,
        "\n{}\nns per timer, median; (×) = ratio to the fastest peer",
        describe(workload)
    );
    let _ = write!(out, "{:<20}", "entrant");
    for &n in &ns {
        let _ = write!(out, "{:>20}", format!("N={}", pretty_n(n)));
    }
    out.push('\n');
    for entrant in Entrant::ALL {
        let row: Vec<&VirtualSample> = ns
            .iter()
            .filter_map(|&n| {
                report
                    .samples
                    .iter()
                    .find(|s| s.workload == workload && s.entrant == entrant && s.n == n)
            })
            .collect();
        if row.is_empty() {
            continue;
        }
        let mark = if entrant.is_tickwheel() { "*" } else { " " };
        let _ = write!(out, "{mark}{:<19}", entrant.name());
        for s in row {
            let ratio = report
                .ratio(s)
                .map_or(String::new(), |r| format!(" ({r:.2}×)"));
            let _ = write!(out, "{:>20}", format!("{:.1}{ratio}", s.ns_per_timer()));
        }
        out.push('\n');
    }
    out
}

/// The W2/W3 verification summary line.
pub fn verification_line(report: &Report, workload: Workload) -> Option<String> {
    let checked: Vec<&VirtualSample> = report
        .samples
        .iter()
        .filter(|s| s.workload == workload && s.max_late_ticks.is_some())
        .collect();
    if checked.is_empty() {
        return None;
    }
    let mut late: Vec<String> = Entrant::ALL
        .iter()
        .filter_map(|&e| {
            let worst = checked
                .iter()
                .filter(|s| s.entrant == e)
                .filter_map(|s| s.max_late_ticks)
                .max()?;
            (worst > 0).then(|| format!("{e} {worst}"))
        })
        .collect();
    if late.is_empty() {
        late.push("none".to_owned());
    }
    Some(format!(
        "verified ({} runs checked): every timer fired exactly once, never early. \
         Late firings (max ticks): {}",
        checked.len(),
        late.join(", ")
    ))
}

/// The terminal table of W4.
pub fn w4_table(report: &Report) -> String {
    let mut out = String::new();
    if report.w4.is_empty() {
        return out;
    }
    let max_delay = report.w4.iter().map(|s| s.max_delay_ms).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\n{}; delays 0..={max_delay} ms; lateness = ran − (schedule time + delay)",
        describe(Workload::W4)
    );
    let _ = writeln!(
        out,
        "{:<20}{:>10}{:>14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "entrant",
        "N",
        "schedule/s",
        "wall s",
        "CPU s",
        "RSS MiB",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms"
    );
    for s in &report.w4 {
        let mark = if s.entrant.is_tickwheel() { "*" } else { " " };
        let _ = writeln!(
            out,
            "{mark}{:<19}{:>10}{:>14.0}{:>10.2}{:>10}{:>10}{:>10.3}{:>10.3}{:>10.3}{:>10.3}",
            s.entrant.name(),
            pretty_n(s.n),
            s.schedule_rate(),
            s.wall.as_secs_f64(),
            s.cpu
                .map_or("?".to_owned(), |c| format!("{:.2}", c.as_secs_f64())),
            s.peak_rss
                .map_or("?".to_owned(), |b| format!("{:.0}", b as f64 / 1048576.0)),
            ms(s.lateness.p50),
            ms(s.lateness.p99),
            ms(s.lateness.p999),
            ms(s.lateness.max),
        );
    }
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Writes `results.csv`: one row per (workload, entrant, N), W4 rows included.
pub fn write_csv(report: &Report, path: &Path) -> Result<(), String> {
    let mut csv = String::from(
        "workload,entrant,tickwheel,n,repeats,median_ns,ns_per_timer,ratio_to_fastest_peer,\
         max_late_ticks,schedule_per_s,wall_s,cpu_s,peak_rss_bytes,late_p50_ns,late_p99_ns,\
         late_p999_ns,late_max_ns,verified\n",
    );
    for s in &report.samples {
        let _ = writeln!(
            csv,
            "{:?},{},{},{},{},{},{:.3},{},{},,,,,,,,,true",
            s.workload,
            s.entrant,
            s.entrant.is_tickwheel(),
            s.n,
            s.runs_ns.len(),
            s.median_ns(),
            s.ns_per_timer(),
            report.ratio(s).map_or(String::new(), |r| format!("{r:.4}")),
            s.max_late_ticks.map_or(String::new(), |t| t.to_string()),
        );
    }
    for s in &report.w4 {
        let _ = writeln!(
            csv,
            "W4,{},{},{},1,{},{:.3},,,{:.0},{:.4},{},{},{},{},{},{},true",
            s.entrant,
            s.entrant.is_tickwheel(),
            s.n,
            s.wall.as_nanos(),
            s.wall.as_nanos() as f64 / s.n as f64,
            s.schedule_rate(),
            s.wall.as_secs_f64(),
            s.cpu
                .map_or(String::new(), |c| format!("{:.3}", c.as_secs_f64())),
            s.peak_rss.map_or(String::new(), |b| b.to_string()),
            s.lateness.p50,
            s.lateness.p99,
            s.lateness.p999,
            s.lateness.max,
        );
    }
    std::fs::write(path, csv).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes `results.json`: machine, command line, seed, notes and every sample.
pub fn write_json(report: &Report, path: &Path) -> Result<(), String> {
    let m = &report.machine;
    let samples: Vec<Value> = report
        .samples
        .iter()
        .map(|s| {
            json!({
                "workload": format!("{:?}", s.workload),
                "entrant": s.entrant.name(),
                "tickwheel": s.entrant.is_tickwheel(),
                "n": s.n,
                "runs_ns": s.runs_ns,
                "median_ns": s.median_ns(),
                "ns_per_timer": s.ns_per_timer(),
                "ratio_to_fastest_peer": report.ratio(s),
                "verified": true,
                "max_late_ticks": s.max_late_ticks,
            })
        })
        .collect();
    let w4: Vec<Value> = report.w4.iter().map(W4Sample::to_json).collect();
    let doc = json!({
        "tool": "tickwheel bench",
        "version": env!("CARGO_PKG_VERSION"),
        "command_line": report.command_line,
        "machine": { "cpu": m.cpu, "cores": m.cores, "os": m.os, "profile": m.profile },
        "seed": report.seed,
        "tick": "1 ms (virtual for W1-W3)",
        "notes": report.notes,
        "results": samples,
        "w4": w4,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_as_powers() {
        assert_eq!(pretty_n(10_000), "10^4");
        assert_eq!(pretty_n(6_000_000), "6·10^6");
        assert_eq!(pretty_n(2_500), "2500");
        assert_eq!(pretty_n(100), "100");
        assert_eq!(pretty_n(1000), "10^3");
    }

    #[test]
    fn median_is_the_middle_run() {
        let s = VirtualSample {
            workload: Workload::W1,
            entrant: Entrant::BTreeMap,
            n: 10,
            runs_ns: vec![300, 100, 200],
            max_late_ticks: None,
        };
        assert_eq!(s.median_ns(), 200);
        assert!((s.ns_per_timer() - 20.0).abs() < 1e-9);
    }
}
