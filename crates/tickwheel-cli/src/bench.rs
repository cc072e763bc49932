//! `tickwheel bench`: runs the chosen workloads on the chosen entrants, family by family,
//! and writes results.
//!
//! Order of work: the queues family first (for one (workload, N), each entrant in a fresh
//! child process of its own, one after another: the child generates the seeded input, runs
//! it once untimed, then times the repeats, so no timed run starts on memory another entrant
//! freed), then the services family and the futures family (each entrant in its own child
//! process), then the durable family.
//! Nothing is printed as a result, and no file is written, unless every run passed its
//! checks.

use crate::durable::{self, DurableEntrant, DurableSettings};
use crate::entrant::Entrant;
use crate::error::{Error, Result};
use crate::futures::{self, FutureEntrant, FutureSettings};
use crate::machine::Machine;
use crate::plot;
use crate::queues::report::{self as queue_report, QueueSample};
use crate::queues::{self, QueueEntrant};
use crate::report::{self, Report};
use crate::services::{self, ServiceEntrant};
use crate::workload::{Family, Workload};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// What `tickwheel bench` was asked to do.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Input seed.
    pub seed: u64,
    /// Timer counts for the queue workloads, ascending.
    pub ns: Vec<usize>,
    /// Workloads, in order.
    pub workloads: Vec<Workload>,
    /// Entrants, in table order.
    pub entrants: Vec<Entrant>,
    /// Repeats per measurement (`None`: by the work done, see [`default_repeats`]).
    pub repeat: Option<u32>,
    /// Output directory.
    pub out: PathBuf,
    /// W4 task count.
    pub w4_n: usize,
    /// W4 largest delay, ms.
    pub w4_max_delay_ms: u64,
    /// How W4's tickwheel entrants are built (peers keep their own settings).
    pub w4: services::TickwheelSetup,
    /// W6 settings.
    pub durable: DurableSettings,
    /// W8 settings.
    pub futures: FutureSettings,
    /// The command line, for the record.
    pub command_line: String,
}

impl Settings {
    /// The chosen entrants that `pick` keeps, in table order.
    fn entrants_of<T>(&self, pick: impl Fn(Entrant) -> Option<T>) -> Vec<T> {
        self.entrants.iter().copied().filter_map(pick).collect()
    }

    fn queue_entrants(&self) -> Vec<QueueEntrant> {
        self.entrants_of(|e| match e {
            Entrant::Queue(q) => Some(q),
            _ => None,
        })
    }

    fn service_entrants(&self) -> Vec<ServiceEntrant> {
        self.entrants_of(|e| match e {
            Entrant::Service(s) => Some(s),
            _ => None,
        })
    }

    fn durable_entrants(&self) -> Vec<DurableEntrant> {
        self.entrants_of(|e| match e {
            Entrant::Durable(d) => Some(d),
            _ => None,
        })
    }

    fn future_entrants(&self) -> Vec<FutureEntrant> {
        self.entrants_of(|e| match e {
            Entrant::Future(f) => Some(f),
            _ => None,
        })
    }

    fn runs_futures(&self) -> bool {
        self.workloads_of(Family::Futures).next().is_some() && !self.future_entrants().is_empty()
    }

    fn runs_durable(&self) -> bool {
        self.workloads_of(Family::Durable).next().is_some() && !self.durable_entrants().is_empty()
    }

    fn workloads_of(&self, family: Family) -> impl Iterator<Item = Workload> + '_ {
        self.workloads
            .iter()
            .copied()
            .filter(move |w| w.family() == family)
    }

    fn runs_services(&self) -> bool {
        self.workloads_of(Family::Services).next().is_some() && !self.service_entrants().is_empty()
    }
}

/// Repeats when `--repeat` is not given: enough for a stable median at small N, few enough
/// at large N for the default run to finish within a few minutes on 2 cores. Counted in
/// timers for W1–W3 and in operations for W5 (about 10·N) and W7 (about 50·N, warm-up
/// included), so W5 at N = 10^6 runs once.
pub fn default_repeats(workload: Workload, n: usize) -> u32 {
    let work = match workload {
        Workload::Churn => n.saturating_mul(10),
        Workload::SteadyState => n.saturating_mul(50),
        _ => n,
    };
    match work {
        0..=100_000 => 5,
        100_001..=1_000_000 => 3,
        _ => 1,
    }
}

/// Runs the benchmark and writes every output; `Err` with a message on any failure.
pub fn run(settings: Settings) -> Result<()> {
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
        .map_err(|e| Error::io(format!("cannot create {}", settings.out.display()), e))?;
    let mut report = Report {
        machine,
        command_line: settings.command_line.clone(),
        seed: settings.seed,
        queues: Vec::new(),
        services: Vec::new(),
        durable: Vec::new(),
        durable_zadd_per_s: None,
        futures: Vec::new(),
        notes: caveats(&settings),
    };
    let planned = plan_queues(&settings);
    if planned.is_empty()
        && !settings.runs_services()
        && !settings.runs_futures()
        && !settings.runs_durable()
    {
        return Err(Error::NothingToRun);
    }
    run_queues(&settings, &planned, &mut report)?;
    if settings.runs_services() {
        run_services(&settings, &mut report)?;
    }
    if settings.runs_futures() {
        for entrant in settings.future_entrants() {
            eprintln!("W8: {entrant}");
            report
                .futures
                .push(futures::run_isolated(entrant, &settings.futures)?);
        }
    }
    if settings.runs_durable() {
        let (samples, zadd) = durable::run(&settings.durable_entrants(), &settings.durable)?;
        report.durable = samples;
        report.durable_zadd_per_s = zadd;
    }
    finish(&settings, &report)
}

/// How each peer was driven, where that matters for reading its numbers.
fn caveats(s: &Settings) -> Vec<String> {
    let has = |e: QueueEntrant| s.entrants.contains(&Entrant::Queue(e));
    let churn = s.workloads.contains(&Workload::Churn);
    let steady = s.workloads.contains(&Workload::SteadyState);
    let mut notes = Vec::new();
    if has(QueueEntrant::BinaryHeap) {
        notes.push(
            "std-binaryheap cancels and resets lazily (a generation per id) and drops its stale \
             entries with one retain whenever they outnumber the live ones, so it holds at most \
             twice the live timers; W7 measures it at that equilibrium"
                .to_owned(),
        );
    }
    if has(QueueEntrant::PriorityQueue) {
        notes.push(
            "priority-queue: ids hashed with rustc-hash's FxBuildHasher; cancel = remove, \
             reset = change_priority"
                .to_owned(),
        );
    }
    if has(QueueEntrant::Hhwt) {
        notes.push(
            "hhwt has no reset: W3/W5 resets are cancel + insert under the same id".to_owned(),
        );
    }
    if has(QueueEntrant::DelayQueue) {
        notes.push(
            "tokio-delayqueue runs on a paused current-thread runtime; W2/W5 ticks include \
             tokio::time::advance and one poll_expired drain per tick"
                .to_owned(),
        );
    }
    if churn {
        notes.push(
            "W5 peak heap is the queue's heap growth from empty over setup and churn, counted \
             by the CLI's allocator; the timed region covers the 1000 ticks only"
                .to_owned(),
        );
    }
    if steady {
        notes.push(
            "W7 runs 4000 ticks (two timeout ranges) untimed first; its time and peak heap are \
             those of the 1000 timed ticks that follow, above the empty queue"
                .to_owned(),
        );
    }
    let w4 = s.workloads.contains(&Workload::RealTimeTasks);
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::DelayQueueChannel))
    {
        notes.push(
            "delayqueue-channel: schedule sends (deadline, task id) on an unbounded tokio \
             channel; one task on its own current-thread runtime inserts into a DelayQueue and \
             runs expired tasks itself"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::BucketFloor))
    {
        notes.push(
            "bucket-floor is not a timer but the least work W4 can be done with (1 ms buckets \
             in one vector each, no cancel, no order within a millisecond): a floor for this \
             machine, not a peer"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::FloorWorkers))
    {
        notes.push(
            "floor-workers is bucket-floor with a worker hand-off (its thread hands each due \
             bucket to a worker a core through a mutex and a condition variable): not a timer \
             either, the floor of a design whose callbacks run off the timer thread"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::FloorClosures))
    {
        notes.push(
            "floor-closures is bucket-floor storing with each task the record a service of \
             arbitrary callbacks stores (a code pointer and 16 bytes of captured state, 32 bytes \
             with the bucket, where bucket-floor stores 8), called by its thread: not a timer \
             either, the floor of any design that takes callbacks"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::FloorIndexed))
    {
        notes.push(
            "floor-indexed is floor-closures whose thread keeps the producer's staged vectors \
             and files each task's place in them (8 bytes) instead of copying its record out: \
             not a timer either"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .contains(&Entrant::Service(ServiceEntrant::FloorDirect))
    {
        notes.push(
            "floor-direct is floor-closures whose producer files each record in its \
             millisecond's vector itself, under one mutex, so that its thread only runs them: \
             not a timer either, the floor of a design whose producers file their own tasks"
                .to_owned(),
        );
    }
    if w4
        && s.entrants
            .iter()
            .any(|e| matches!(e, Entrant::Service(s) if s.is_tickwheel()))
    {
        notes.push(
            "tickwheel-service schedules with TimerService::schedule_detached_at (no handle); \
             tickwheel-service-handle with schedule_at, keeping every handle until the run ends; \
             tickwheel-service-here is tickwheel-service with worker_threads(0): the timer \
             thread runs the callbacks"
                .to_owned(),
        );
        if !s.w4.wake_interval.is_zero() {
            notes.push(format!(
                "tickwheel W4 entrants: wake_interval {:?}",
                s.w4.wake_interval
            ));
        }
    }
    if w4 {
        notes.push(
            "W4 lateness counts from Instant::now() just before scheduling plus the delay; on a \
             busy machine it includes time a due callback waited for a CPU"
                .to_owned(),
        );
    }
    if s.runs_futures() {
        notes.push(
            "W8: each entrant runs in its own process, in a tokio runtime with 2 workers; \
             tickwheel-futures is tickwheel::timeout/sleep (the default service), \
             tickwheel-service-futures the same methods of a TimerService::new(); async-io's \
             timeout is future::or(future, Timer::after); no-timer runs the loops without a \
             timer, a floor; CPU is the whole process's over the window"
                .to_owned(),
        );
    }
    notes
}

/// One (workload, N) of the queues family, with its entrants and repeat count.
struct Group {
    workload: Workload,
    n: usize,
    entrants: Vec<QueueEntrant>,
    repeats: u32,
}

/// The (workload, N) groups of the queues family to run.
fn plan_queues(s: &Settings) -> Vec<Group> {
    let entrants = s.queue_entrants();
    if entrants.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for w in s.workloads_of(Family::Queues) {
        let able: Vec<QueueEntrant> = entrants
            .iter()
            .copied()
            .filter(|e| e.cannot_run(w).is_none())
            .collect();
        out.extend(s.ns.iter().map(|&n| Group {
            workload: w,
            n,
            entrants: able.clone(),
            repeats: s.repeat.unwrap_or_else(|| default_repeats(w, n)),
        }));
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

fn run_queues(s: &Settings, planned: &[Group], report: &mut Report) -> Result<()> {
    let total: u64 = planned
        .iter()
        .map(|g| u64::from(g.repeats) * g.entrants.len() as u64)
        .sum();
    let bar = progress_bar(
        total,
        "{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}",
    );
    for group in planned {
        let samples = run_group(s.seed, group, &bar).inspect_err(|_| bar.abandon())?;
        report.queues.extend(samples);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Runs one group: each entrant in a fresh process of its own, one after another, which
/// generates the seeded input, runs it once untimed and then times every repeat
/// (`queues` module docs, "Isolation").
fn run_group(seed: u64, g: &Group, bar: &ProgressBar) -> Result<Vec<QueueSample>> {
    let label = format!("{} N={}", g.workload.label(), crate::units::pretty_n(g.n));
    let mut samples = Vec::with_capacity(g.entrants.len());
    for &entrant in &g.entrants {
        bar.set_message(format!("{label} {entrant} ({} runs)", g.repeats));
        samples.push(queues::run_isolated(
            entrant, g.workload, seed, g.n, g.repeats,
        )?);
        bar.inc(u64::from(g.repeats));
    }
    Ok(samples)
}

fn run_services(s: &Settings, report: &mut Report) -> Result<()> {
    for entrant in s.service_entrants() {
        let sample = services::run_isolated(entrant, s.seed, s.w4_n, s.w4_max_delay_ms, s.w4)?;
        report.services.push(sample);
    }
    Ok(())
}

fn finish(s: &Settings, report: &Report) -> Result<()> {
    for w in s.workloads_of(Family::Queues) {
        say_raw!("{}", queue_report::table(&report.queues, w));
        if let Some(line) = queue_report::verification_line(&report.queues, w) {
            say!("{line}");
        }
    }
    say_raw!("{}", services::report::table(&report.services));
    say_raw!("{}", futures::report::table(&report.futures));
    say_raw!(
        "{}",
        durable::report::table(&report.durable, report.durable_zadd_per_s)
    );
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
