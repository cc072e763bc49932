//! `tickwheel bench`: runs the chosen workloads on the chosen entrants and writes results.
//!
//! Order of work: inputs for one (workload, N) are generated once, then every repeat runs
//! every entrant in turn (interleaved, so machine drift hits all entrants alike). Nothing is
//! printed as a result, and no file is written, unless every run passed its checks.

use crate::entrants::Entrant;
use crate::machine::Machine;
use crate::report::{self, Report, VirtualSample};
use crate::runner::{self, Virtual};
use crate::{plot, w4, workload, Workload};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// What `tickwheel bench` was asked to do.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Input seed.
    pub seed: u64,
    /// Timer counts for W1–W3, ascending.
    pub ns: Vec<usize>,
    /// Workloads, in order.
    pub workloads: Vec<Workload>,
    /// Entrants, in table order.
    pub entrants: Vec<Entrant>,
    /// Repeats per measurement (`None`: by N, see [`default_repeats`]).
    pub repeat: Option<u32>,
    /// Output directory.
    pub out: PathBuf,
    /// W4 task count.
    pub w4_n: usize,
    /// W4 largest delay, ms.
    pub w4_max_delay_ms: u64,
    /// The command line, for the record.
    pub command_line: String,
}

/// Repeats when `--repeat` is not given: enough for a stable median at small N, few enough
/// at large N for the default run to finish within 3 minutes on 2 cores.
pub fn default_repeats(n: usize) -> u32 {
    match n {
        0..=100_000 => 5,
        100_001..=1_000_000 => 3,
        _ => 1,
    }
}

/// Runs the benchmark and writes every output; `Err` with a message on any failure.
pub fn run(settings: Settings) -> Result<(), String> {
    let machine = Machine::detect();
    say!("tickwheel bench {}", env!("CARGO_PKG_VERSION"));
    say!("command: {}", settings.command_line);
    say!(
        "machine: {} ({} cores), {}, {} build",
        machine.cpu,
        machine.cores,
        machine.os,
        machine.profile
    );
    if machine.profile == "debug" {
        say!("warning: debug build; numbers are meaningless (use --release)");
    }
    std::fs::create_dir_all(&settings.out)
        .map_err(|e| format!("cannot create {}: {e}", settings.out.display()))?;
    let mut report = Report {
        machine,
        command_line: settings.command_line.clone(),
        seed: settings.seed,
        samples: Vec::new(),
        w4: Vec::new(),
        notes: caveats(&settings),
    };
    let planned = plan(&settings);
    if planned.is_empty() && !wants_w4(&settings) {
        return Err("nothing to run: no chosen entrant runs any chosen workload".to_owned());
    }
    run_virtual(&settings, &planned, &mut report)?;
    if wants_w4(&settings) {
        run_w4(&settings, &mut report)?;
    }
    finish(&settings, &report)
}

/// How each peer was driven, where that matters for reading its numbers.
fn caveats(s: &Settings) -> Vec<String> {
    let has = |e: Entrant| s.entrants.contains(&e);
    let mut notes = Vec::new();
    if has(Entrant::BinaryHeap) {
        notes.push(
            "std-binaryheap cancels and resets lazily (a generation per id): W1/W3 leave stale \
             entries in the heap, whose cost is paid in memory and at expiry, not in the timed \
             region"
                .to_owned(),
        );
    }
    if has(Entrant::Hhwt) {
        notes.push("hhwt has no reset: W3 resets are cancel + insert under the same id".to_owned());
    }
    if has(Entrant::DelayQueue) {
        notes.push(
            "tokio-delayqueue runs on a paused current-thread runtime; W2 ticks include \
             tokio::time::advance and one poll_expired drain per tick"
                .to_owned(),
        );
    }
    if s.workloads.contains(&Workload::W4) && has(Entrant::DelayQueueChannel) {
        notes.push(
            "delayqueue-channel: schedule sends (deadline, boxed task) on an unbounded tokio \
             channel; one task on its own current-thread runtime inserts into a DelayQueue and \
             runs expired tasks itself"
                .to_owned(),
        );
    }
    if s.workloads.contains(&Workload::W4) {
        notes.push(
            "W4 lateness counts from Instant::now() just before scheduling plus the delay; on a \
             busy machine it includes time a due callback waited for a CPU"
                .to_owned(),
        );
    }
    notes
}

fn wants_w4(s: &Settings) -> bool {
    s.workloads.contains(&Workload::W4) && s.entrants.iter().any(|e| e.is_realtime())
}

/// The (workload, N, virtual entrants) triples to run.
fn plan(s: &Settings) -> Vec<(Virtual, Workload, usize, Vec<Entrant>)> {
    let entrants: Vec<Entrant> = s
        .entrants
        .iter()
        .copied()
        .filter(|e| e.is_virtual())
        .collect();
    if entrants.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for &w in &s.workloads {
        let v = match w {
            Workload::W1 => Virtual::W1,
            Workload::W2 => Virtual::W2,
            Workload::W3 => Virtual::W3,
            Workload::W4 => continue,
        };
        out.extend(s.ns.iter().map(|&n| (v, w, n, entrants.clone())));
    }
    out
}

fn progress_bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

type Plan = [(Virtual, Workload, usize, Vec<Entrant>)];

fn run_virtual(s: &Settings, planned: &Plan, report: &mut Report) -> Result<(), String> {
    let repeats = |n| s.repeat.unwrap_or_else(|| default_repeats(n));
    let total: u64 = planned
        .iter()
        .map(|(_, _, n, e)| u64::from(repeats(*n)) * e.len() as u64)
        .sum();
    let bar = progress_bar(
        total,
        "{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}",
    );
    for (v, w, n, entrants) in planned {
        let group = Group {
            virt: *v,
            workload: *w,
            n: *n,
            repeats: repeats(*n),
        };
        let samples = run_group(s.seed, &group, entrants, &bar).inspect_err(|_| bar.abandon())?;
        report.samples.extend(samples);
    }
    bar.finish_and_clear();
    Ok(())
}

/// One (workload, N) with its repeat count.
struct Group {
    virt: Virtual,
    workload: Workload,
    n: usize,
    repeats: u32,
}

/// Generates one group's input, then runs every repeat on every entrant, interleaved.
fn run_group(
    seed: u64,
    g: &Group,
    entrants: &[Entrant],
    bar: &ProgressBar,
) -> Result<Vec<VirtualSample>, String> {
    let label = format!("{:?} N={}", g.workload, report::pretty_n(g.n));
    bar.set_message(format!("{label}: generating input"));
    let input = match g.virt {
        Virtual::W1 => workload::w1(seed, g.n),
        Virtual::W2 => workload::w2(seed, g.n),
        Virtual::W3 => workload::w3(seed, g.n),
    };
    let mut samples: Vec<VirtualSample> = entrants
        .iter()
        .map(|&entrant| VirtualSample {
            workload: g.workload,
            entrant,
            n: g.n,
            runs_ns: Vec::new(),
            max_late_ticks: None,
        })
        .collect();
    for r in 0..g.repeats {
        for sample in &mut samples {
            bar.set_message(format!(
                "{label} {} (run {}/{})",
                sample.entrant,
                r + 1,
                g.repeats
            ));
            let outcome = runner::run(sample.entrant, g.virt, &input, r == 0)?;
            sample.runs_ns.push(outcome.elapsed.as_nanos() as u64);
            sample.max_late_ticks = sample.max_late_ticks.max(outcome.max_late_ticks);
            bar.inc(1);
        }
    }
    Ok(samples)
}

fn run_w4(s: &Settings, report: &mut Report) -> Result<(), String> {
    for &entrant in s.entrants.iter().filter(|e| e.is_realtime()) {
        let sample = w4::run_isolated(entrant, s.seed, s.w4_n, s.w4_max_delay_ms)?;
        report.w4.push(sample);
    }
    Ok(())
}

fn finish(s: &Settings, report: &Report) -> Result<(), String> {
    for &w in &s.workloads {
        say_raw!("{}", report::virtual_table(report, w));
        if let Some(line) = report::verification_line(report, w) {
            say!("{line}");
        }
    }
    say_raw!("{}", report::w4_table(report));
    say!(
        "\n* = tickwheel. Seed {}; every entrant got identical input.",
        s.seed
    );
    for note in &report.notes {
        say!("note: {note}");
    }
    let csv = s.out.join("results.csv");
    let json = s.out.join("results.json");
    report::write_csv(report, &csv)?;
    report::write_json(report, &json)?;
    let plots = plot::write_all(report, &s.out)?;
    say!("\nwrote {}, {}", csv.display(), json.display());
    for p in plots {
        say!("wrote {}", p.display());
    }
    Ok(())
}
