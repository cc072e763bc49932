//! The fault test's analysis (tests/crash.rs): reads the workers' delivery logs and judges
//! them against what the test did (each task's run-at, cancels and reschedules with their
//! answers) and the faults it caused (worker SIGKILL, SIGSTOP past the lease, Redis restart).
//!
//! Terms, all in ms of the machine's clock (the workers and Redis share it):
//! - A task's *run-at in force* is its scheduled run-at, or the new one after a reschedule
//!   that answered `true` (from the moment the reschedule was sent).
//! - The end of a fault: the SIGKILL itself (the replacement starts at once), the SIGCONT, or
//!   the moment Redis answers a read again after its restart (its append-only file loaded).
//! - A fault's *window*: from its start less the claim-ahead less half a second (a task the
//!   worker it hit may have claimed ahead) to its end plus the lease plus a second (a task
//!   in a shard waiting for a new owner).
//! - A fault *touches* a shard: a Redis restart every shard; a kill or a stop the shards whose
//!   lease the worker it hit held at the signal (as Redis names their owner: read just after
//!   the signal, or, while Redis is down, just before it was killed).
//! - A fault *holds* a task when it touches the task's shard, the task was not yet delivered
//!   at the fault's start, and the task's run-at in force lies in the fault's window or an
//!   earlier fault holds the task already (a chain: a task one fault kept from delivery,
//!   still waiting when the next struck its shard).
//! - A task's *reference* is its run-at in force; the moment it was stored if later (the
//!   test's producer fell behind); the end of the latest-ending fault holding it if later
//!   still. Its *lateness* is its first delivery less its reference.
//! - Faults the test caused as one plan (one cycle of the run) form a *stack* when there are
//!   several: they come closer together than a lease, so one may hold what another holds.
//! - A task's *context*: the stack one of whose faults' windows holds its run-at in force (a
//!   *stacked* task), else the single fault whose window does, else a *fault-free stretch*.
//! - A task's *deadline*: the latest of its run-at in force (or the moment it was stored, if
//!   later) plus an allowance, and of the end of each fault holding it plus that fault's
//!   allowance. The allowance is the lease plus a second (issue #28); for a stacked task the
//!   lease plus two seconds (issue #35: "within lease + 2 s of its run-at or of the end of
//!   the fault that held it"), but after a Redis restart the workers' grace plus two
//!   seconds: owners renew within a reconnection wait, and a shard still unrenewed after the
//!   grace is taken once its own lease has run out, so a restart that follows a kill may not
//!   cost a lease of its own. A task delivered after its deadline is *stranded*; meeting the
//!   deadline implies a lateness within the allowance after the latest fault's end. A single
//!   fault's tasks have their own targets: within lease + 1 s after a kill, within 1 s after
//!   a Redis restart; fault-free stretches a p99 of a few ms.
//!
//! *Poison* tasks (the worker binary's `--poison`: ids `poison-fail-*`, `poison-panic-*`,
//! `poison-fatal-*`) fail on purpose; [`analyze_poison`] judges them: each must end in the
//! failed set with the errors of its attempts, called at most its maximum attempts plus
//! deliveries whose verdict a fault swallowed, never before its run-at or its retry's.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;

/// A delivery counts as in flight at a worker kill or stop when that worker logged it at most
/// this long before the signal (or, for a stop, before it was continued).
pub const IN_FLIGHT_MS: u64 = 1000;
/// The stretch around a Redis outage whose deliveries count as delivered during it: from this
/// long before the kill (acknowledgements still on their way) ...
pub const OUTAGE_BEFORE_MS: u64 = 100;
/// ... to this long after Redis answers again (the workers reconnect).
pub const OUTAGE_AFTER_MS: u64 = 1000;

/// One line of a worker's delivery log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub id: String,
    pub due: u64,
    pub attempt: u32,
    pub at: u64,
    pub version: u64,
    pub shard: u32,
    pub epoch: u64,
    pub pid: u32,
}

/// The inverse of the worker binary's id escape (`\\`, `\s`, `\t`, `\n`, `\r`).
pub fn unescape_id(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('\\') => '\\',
            Some('s') => ' ',
            Some('t') => '\t',
            Some('n') => '\n',
            Some('r') => '\r',
            other => return Err(format!("bad escape {other:?} in {s:?}")),
        });
    }
    Ok(out)
}

/// Parses `id due_ms attempt delivered_at_ms version shard epoch pid`.
pub fn parse_line(line: &str) -> Result<Line, String> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 8 {
        return Err(format!("{} fields in log line {line:?}", f.len()));
    }
    let n = |i: usize| {
        f[i].parse::<u64>()
            .map_err(|e| format!("field {i} of log line {line:?}: {e}"))
    };
    Ok(Line {
        id: unescape_id(f[0])?,
        due: n(1)?,
        attempt: n(2)? as u32,
        at: n(3)?,
        version: n(4)?,
        shard: n(5)? as u32,
        epoch: n(6)?,
        pid: n(7)? as u32,
    })
}

/// Every line of the logs. A missing log reads as empty (a worker killed before its first
/// delivery); a last line without its line feed is an error (a torn record).
pub fn read_logs(paths: &[PathBuf]) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(format!("{}: torn last line", path.display()));
        }
        for line in text.lines() {
            lines.push(parse_line(line)?);
        }
    }
    Ok(lines)
}

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A worker process SIGKILLed (and a new one started at once).
    Kill,
    /// A worker process SIGSTOPped past its lease, then SIGCONTed.
    Stop,
    /// Redis SIGKILLed and started again on its append-only file.
    Restart,
}

/// One fault as the test caused it.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub kind: Kind,
    /// The signal (or Redis's kill).
    pub start: u64,
    /// See the module's terms.
    pub end: u64,
    /// The worker hit (0 for a Redis restart).
    pub pid: u32,
    /// The shards it touches, a bit each (see the module's terms).
    pub shards: u64,
    /// The plan (cycle of the run) it belongs to: several faults of one plan are a stack.
    pub plan: u32,
}

impl Fault {
    /// Every shard's bit (a Redis restart touches them all).
    pub const EVERY_SHARD: u64 = u64::MAX;

    /// Whether the fault touches `shard`.
    pub fn touches(&self, shard: u32) -> bool {
        self.shards & (1u64 << shard.min(63)) != 0
    }

    /// Whether run-at `t` lies in the fault's window.
    fn window_holds(&self, t: u64, l: Limits) -> bool {
        self.start.saturating_sub(l.claim_ahead_ms + 500) <= t && t <= self.end + l.lease_ms + 1000
    }
}

/// A producer call: when it was sent and what it answered (`None`: it failed, so whether
/// it took effect is unknown).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub at: u64,
    pub answer: Option<bool>,
}

/// What the test did to one task.
#[derive(Clone, Debug, Default)]
pub struct TaskPlan {
    pub id: String,
    pub run_at: u64,
    /// When the schedule call that stored it returned (0: never stored).
    pub stored_at: u64,
    pub cancel: Option<Call>,
    /// The call and the new run-at.
    pub reschedule: Option<(Call, u64)>,
    /// A poison task: how its handler fails (its id carries the prefix).
    pub poison: Option<Poison>,
}

/// How a poison task's handler fails (see the worker binary's `--poison`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Poison {
    /// `poison-fail-*`: `Outcome::fail("poison fail attempt N")`.
    Fail,
    /// `poison-panic-*`: panics with `poison panic attempt N`.
    Panic,
    /// `poison-fatal-*`: `Outcome::non_retryable("poison fatal")`.
    Fatal,
}

impl Poison {
    pub const ALL: [Poison; 3] = [Poison::Fail, Poison::Panic, Poison::Fatal];

    /// The id prefix the worker binary knows it by.
    pub fn prefix(self) -> &'static str {
        match self {
            Poison::Fail => "poison-fail-",
            Poison::Panic => "poison-panic-",
            Poison::Fatal => "poison-fatal-",
        }
    }

    /// The error recorded for its failed attempt `attempt`.
    pub fn error(self, attempt: u32) -> String {
        match self {
            Poison::Fail => format!("poison fail attempt {attempt}"),
            Poison::Panic => format!("panicked: poison panic attempt {attempt}"),
            Poison::Fatal => "poison fatal".into(),
        }
    }

    /// Handler calls (failed attempts) before it is in the failed set.
    pub fn max_calls(self, max_attempts: u32) -> u32 {
        match self {
            Poison::Fatal => 1,
            _ => max_attempts,
        }
    }

    pub fn reason(self) -> tickwheel_redis::FailReason {
        match self {
            Poison::Fatal => tickwheel_redis::FailReason::NonRetryable,
            _ => tickwheel_redis::FailReason::Exhausted,
        }
    }
}

impl TaskPlan {
    /// The earliest run-at a delivery at `t` may honour.
    fn allowed_from(&self, t: u64) -> u64 {
        match self.reschedule {
            Some((c, new)) if t >= c.at => match c.answer {
                Some(true) => new,
                Some(false) => self.run_at,
                None => new.min(self.run_at),
            },
            _ => self.run_at,
        }
    }

    /// The run-at in force at the end (the later one when a reschedule's answer is unknown).
    fn final_run_at(&self) -> u64 {
        match self.reschedule {
            Some((c, new)) if c.answer != Some(false) => match c.answer {
                Some(_) => new,
                None => new.max(self.run_at),
            },
            _ => self.run_at,
        }
    }

    fn cancelled(&self) -> Option<bool> {
        self.cancel.map_or(Some(false), |c| c.answer)
    }
}

/// The test's timing parameters.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub lease_ms: u64,
    pub claim_ahead_ms: u64,
    /// The workers' grace after Redis answers again (three maintenance intervals, at most a
    /// lease).
    pub grace_ms: u64,
    /// The p99 lateness allowed in fault-free stretches; `None` reports it unchecked (a
    /// debug build: unoptimized workers say nothing of the library's timing).
    pub calm_p99_ms: Option<u64>,
}

impl Limits {
    /// A task's allowance after its run-at (`after` `None`) or after the end of a fault of
    /// kind `after` holding it (see the module's terms): the lease plus a second, or in a
    /// stack the lease plus two seconds, but after a Redis restart in a stack the grace plus
    /// two seconds.
    pub fn allowance(&self, after: Option<Kind>, stacked: bool) -> u64 {
        match (after, stacked) {
            (Some(Kind::Restart), true) => self.grace_ms + 2000,
            (_, true) => self.lease_ms + 2000,
            (_, false) => self.lease_ms + 1000,
        }
    }
}

/// Why a delivery was repeated: what the delivery before it was caught in (see [`cause`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// In flight at its worker's SIGKILL.
    Kill,
    /// In flight at its worker's SIGSTOP.
    Stop,
    /// Delivered during a Redis outage (and delivered again after it), by a worker no kill
    /// or stop caught with it in flight. Target 0: a worker holds its acknowledgements
    /// until Redis answers again, and keeps its shards.
    Outage,
    /// None of these.
    Other,
}

/// The figures of one run.
#[derive(Debug, Default)]
pub struct Report {
    pub tasks: usize,
    pub deliveries: usize,
    pub lost: usize,
    pub early: usize,
    pub after_cancel: usize,
    pub stranded: usize,
    /// Deliveries of ids the test never scheduled.
    pub strangers: usize,
    /// Deliveries under a shard epoch older than one a delivery of that shard was logged
    /// under before (a fenced worker delivering after its successor began): by a worker
    /// stopped (or just continued), and others. Reported, not a target: a worker paused
    /// between its lease check and its handler delivers under its old epoch whatever the
    /// library does.
    pub superseded: [usize; 2],
    pub duplicates: BTreeMap<Cause, usize>,
    /// Per Redis restart: how long Redis was out (kill to answering again), the tasks
    /// delivered during the outage, and how many of them again after it.
    pub outages: Vec<(u64, usize, usize)>,
    /// The worst lateness of the tasks due around each kind of single fault (in its
    /// window, no stack's).
    pub worst: BTreeMap<Kind, u64>,
    /// Stacked tasks: the worst lateness per stack (by its plan), and per kind of the
    /// latest-ending fault holding them (`None`: no fault held them).
    pub stacks: BTreeMap<u32, u64>,
    pub stacked_by_kind: BTreeMap<Option<Kind>, u64>,
    /// The worst lateness of all, and the latest delivery past its deadline (0 if none).
    pub worst_all: u64,
    pub worst_over: u64,
    /// Lateness of the tasks due in fault-free stretches, sorted.
    pub calm: Vec<u64>,
    /// Cancels and reschedules answered true, false, and failed.
    pub cancels: [usize; 3],
    pub reschedules: [usize; 3],
    /// Tasks stored only after their run-at (the test's producer fell behind).
    pub stored_late: usize,
    pub faults: Vec<Fault>,
    /// A few offending tasks, for the failure message.
    pub examples: Vec<String>,
}

/// Judges the deliveries.
pub fn analyze(plans: &[TaskPlan], lines: Vec<Line>, faults: &[Fault], l: Limits) -> Report {
    let mut r = Report {
        tasks: plans.len(),
        deliveries: lines.len(),
        faults: faults.to_vec(),
        outages: restarts(faults).map(|f| (f.end - f.start, 0, 0)).collect(),
        superseded: superseded(&lines, faults),
        ..Report::default()
    };
    let mut by_id = group(lines);
    for p in plans {
        let ds = by_id.remove(&p.id).unwrap_or_default();
        count_calls(p, &mut r);
        check_task(p, &ds, faults, l, &mut r);
        // A poison task's repeats are its retries: `analyze_poison` judges them.
        if p.poison.is_none() {
            count_duplicates(p, &ds, faults, &mut r);
            count_outage(&ds, faults, &mut r);
        }
    }
    r.strangers = by_id.values().map(Vec::len).sum();
    r.calm.sort_unstable();
    r
}

/// See [`Report::superseded`].
fn superseded(lines: &[Line], faults: &[Fault]) -> [usize; 2] {
    let mut by_shard: HashMap<u32, Vec<&Line>> = HashMap::new();
    for l in lines {
        by_shard.entry(l.shard).or_default().push(l);
    }
    let stopped = |d: &Line| {
        faults.iter().any(|f| {
            f.kind == Kind::Stop
                && f.pid == d.pid
                && f.start <= d.at
                && d.at <= f.end + IN_FLIGHT_MS
        })
    };
    let mut out = [0, 0];
    for ds in by_shard.values_mut() {
        ds.sort_by_key(|d| d.at);
        // The newest epoch logged strictly before the current millisecond.
        let (mut before, mut here, mut ms) = (0, 0, None);
        for d in ds.iter() {
            if ms != Some(d.at) {
                (before, here, ms) = (before.max(here), 0, Some(d.at));
            }
            here = here.max(d.epoch);
            if d.epoch < before {
                out[usize::from(!stopped(d))] += 1;
            }
        }
    }
    out
}

/// Deliveries by id, each id's in the order they were logged.
fn group(lines: Vec<Line>) -> HashMap<String, Vec<Line>> {
    let mut by_id: HashMap<String, Vec<Line>> = HashMap::new();
    for line in lines {
        by_id.entry(line.id.clone()).or_default().push(line);
    }
    for ds in by_id.values_mut() {
        ds.sort_by_key(|d| d.at);
    }
    by_id
}

fn count_calls(p: &TaskPlan, r: &mut Report) {
    let slot = |a: Option<bool>| match a {
        Some(true) => 0,
        Some(false) => 1,
        None => 2,
    };
    if let Some(c) = p.cancel {
        r.cancels[slot(c.answer)] += 1;
    }
    if let Some((c, _)) = p.reschedule {
        r.reschedules[slot(c.answer)] += 1;
    }
}

/// Records an offending task: at most 4 of a kind, 12 in all.
fn example(r: &mut Report, what: &str, p: &TaskPlan, ds: &[Line]) {
    let kind = what.split(' ').next().unwrap_or_default();
    let same = r.examples.iter().filter(|e| e.starts_with(kind)).count();
    if r.examples.len() < 12 && same < 4 {
        let at: Vec<(u64, u32)> = ds.iter().map(|d| (d.at, d.pid)).collect();
        r.examples.push(format!(
            "{what}: {:?} run-at {} stored {} cancel {:?} reschedule {:?} delivered (at, pid) {at:?}",
            p.id, p.run_at, p.stored_at, p.cancel, p.reschedule
        ));
    }
}

/// Lost, early, after a cancel, and the first delivery's lateness.
fn check_task(p: &TaskPlan, ds: &[Line], faults: &[Fault], l: Limits, r: &mut Report) {
    let early = ds.iter().filter(|d| d.at < p.allowed_from(d.at)).count();
    if early > 0 {
        r.early += early;
        example(r, "early", p, ds);
    }
    if let Some(Call {
        at,
        answer: Some(true),
    }) = p.cancel
    {
        let after = ds.iter().filter(|d| d.at >= at).count();
        if after > 0 {
            r.after_cancel += after;
            example(r, "delivered after a successful cancel", p, ds);
        }
        return;
    }
    let Some(first) = ds.first() else {
        if p.cancelled() == Some(false) {
            r.lost += 1;
            example(r, "lost", p, ds);
        }
        return;
    };
    lateness(p, first, faults, l, r, ds);
}

/// The faults holding a task with run-at in force `run_at` in shard `shard` (`None`: never
/// delivered) first delivered at `first`, in the order they started (see the module's terms).
pub fn holders(
    faults: &[Fault],
    run_at: u64,
    shard: Option<u32>,
    first: Option<u64>,
    l: Limits,
) -> Vec<&Fault> {
    let mut by_start: Vec<&Fault> = faults.iter().collect();
    by_start.sort_by_key(|f| f.start);
    let mut held: Vec<&Fault> = Vec::new();
    for f in by_start {
        let touches = shard.map_or(f.kind == Kind::Restart, |s| f.touches(s));
        let pending = first.is_none_or(|d| d >= f.start);
        if touches && pending && (f.window_holds(run_at, l) || !held.is_empty()) {
            held.push(f);
        }
    }
    held
}

/// The task's context: the stack (its plan) or single fault whose window holds `run_at`
/// (a stack first), or `None` for a fault-free stretch.
fn context(faults: &[Fault], run_at: u64, l: Limits) -> Option<(&Fault, bool)> {
    let stacked = |f: &Fault| faults.iter().filter(|g| g.plan == f.plan).count() > 1;
    let mut around = faults.iter().filter(|f| f.window_holds(run_at, l));
    let mut single = None;
    for f in around.by_ref() {
        if stacked(f) {
            return Some((f, true));
        }
        single = single.or(Some(f));
    }
    single.map(|f| (f, false))
}

fn lateness(p: &TaskPlan, first: &Line, faults: &[Fault], l: Limits, r: &mut Report, ds: &[Line]) {
    let run_at = p.final_run_at();
    let held = holders(faults, run_at, Some(first.shard), Some(first.at), l);
    let by = held.iter().max_by_key(|f| f.end);
    let reference = run_at.max(p.stored_at).max(by.map_or(0, |f| f.end));
    let late = first.at.saturating_sub(reference);
    let ctx = context(faults, run_at, l);
    let stacked = ctx.is_some_and(|c| c.1);
    let deadline = (held.iter())
        .map(|f| f.end + l.allowance(Some(f.kind), stacked))
        .fold(
            run_at.max(p.stored_at) + l.allowance(None, stacked),
            u64::max,
        );
    if first.at > deadline {
        r.stranded += 1;
        example(r, &format!("stranded ({late} ms)"), p, ds);
    }
    r.worst_all = r.worst_all.max(late);
    r.worst_over = r.worst_over.max(first.at.saturating_sub(deadline));
    if p.stored_at > run_at {
        r.stored_late += 1;
    }
    match ctx {
        Some((f, true)) => {
            let w = r.stacks.entry(f.plan).or_default();
            *w = (*w).max(late);
            let w = r.stacked_by_kind.entry(by.map(|f| f.kind)).or_default();
            *w = (*w).max(late);
        }
        Some((f, false)) => {
            let w = r.worst.entry(f.kind).or_default();
            *w = (*w).max(late);
        }
        None if p.stored_at <= run_at => r.calm.push(late),
        None => {}
    }
}

/// The cause of a repeat of delivery `prev`: a kill or a stop of the worker that made it
/// while it was *in flight* (unacknowledged: logged at most [`IN_FLIGHT_MS`] before the
/// signal, or during a Redis outage not yet over then, whose acknowledgements the worker
/// held; for a stop, also logged while the worker was stopped or just after), else a Redis
/// outage it was delivered in, else none of these.
pub fn cause(prev: &Line, faults: &[Fault]) -> Cause {
    // Until when the acknowledgement of `prev` may have been held by an outage.
    let held_until = (faults.iter())
        .filter(|f| in_outage(f, prev.at))
        .map(|f| f.end + OUTAGE_AFTER_MS)
        .max();
    let in_flight_at = |t: u64| {
        prev.at <= t && (prev.at + IN_FLIGHT_MS >= t || held_until.is_some_and(|u| u >= t))
    };
    for f in faults.iter().filter(|f| f.pid == prev.pid) {
        match f.kind {
            Kind::Kill if in_flight_at(f.start) => return Cause::Kill,
            Kind::Stop
                if in_flight_at(f.start)
                    || (f.start <= prev.at && prev.at <= f.end + IN_FLIGHT_MS) =>
            {
                return Cause::Stop
            }
            _ => {}
        }
    }
    if held_until.is_some() {
        Cause::Outage
    } else {
        Cause::Other
    }
}

fn in_outage(f: &Fault, at: u64) -> bool {
    f.kind == Kind::Restart && at + OUTAGE_BEFORE_MS >= f.start && at <= f.end + OUTAGE_AFTER_MS
}

fn count_duplicates(p: &TaskPlan, ds: &[Line], faults: &[Fault], r: &mut Report) {
    for pair in ds.windows(2) {
        let c = cause(&pair[0], faults);
        *r.duplicates.entry(c).or_default() += 1;
        match c {
            Cause::Other => example(r, "unexplained duplicate", p, ds),
            Cause::Outage => example(r, "outage duplicate", p, ds),
            _ => {}
        }
    }
}

fn restarts(faults: &[Fault]) -> impl Iterator<Item = &Fault> {
    faults.iter().filter(|f| f.kind == Kind::Restart)
}

/// Per Redis restart: was the task delivered during the outage, and again after it?
fn count_outage(ds: &[Line], faults: &[Fault], r: &mut Report) {
    for (k, f) in restarts(faults).enumerate() {
        if let Some(i) = ds.iter().position(|d| in_outage(f, d.at)) {
            r.outages[k].1 += 1;
            if ds.len() > i + 1 {
                r.outages[k].2 += 1;
            }
        }
    }
}

/// The `p`-quantile of sorted values (0 when empty).
pub fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as f64 * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Report {
    /// Tasks delivered during a Redis outage, and how many of them again after it.
    pub fn outage_totals(&self) -> (usize, usize) {
        let delivered = self.outages.iter().map(|o| o.1).sum();
        (delivered, self.outages.iter().map(|o| o.2).sum())
    }

    fn duplicates_of(&self, c: Cause) -> usize {
        self.duplicates.get(&c).copied().unwrap_or(0)
    }

    /// The targets this run misses, one sentence each.
    pub fn failures(&self, l: Limits) -> Vec<String> {
        let mut out = Vec::new();
        let mut zero = |n: usize, what: &str| {
            if n > 0 {
                out.push(format!("{n} {what} (target 0)"));
            }
        };
        zero(self.lost, "tasks lost");
        zero(self.early, "deliveries early");
        zero(self.after_cancel, "deliveries after a successful cancel");
        zero(self.stranded, "tasks stranded");
        zero(self.strangers, "deliveries of ids never scheduled");
        zero(
            self.duplicates_of(Cause::Other),
            "duplicates not in flight at a kill, a stop or an outage",
        );
        zero(
            self.duplicates_of(Cause::Outage),
            "duplicates of deliveries during a Redis outage not in flight at a kill or a stop",
        );
        self.lateness_failures(l, &mut out);
        out
    }

    fn lateness_failures(&self, l: Limits, out: &mut Vec<String>) {
        let targets = [
            (Kind::Kill, l.lease_ms + 1000, "after a worker kill"),
            (Kind::Restart, 1000, "after Redis answers again"),
        ];
        for (kind, max, what) in targets {
            let worst = self.worst.get(&kind).copied().unwrap_or(0);
            if worst > max {
                out.push(format!(
                    "worst delivery {worst} ms {what} (target {max} ms)"
                ));
            }
        }
        let p99 = quantile(&self.calm, 0.99);
        match l.calm_p99_ms {
            Some(max) if p99 > max => out.push(format!(
                "p99 lateness in fault-free stretches {p99} ms (target {max} ms)"
            )),
            _ => {}
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = |k: Kind| self.faults.iter().filter(|f| f.kind == k).count();
        writeln!(
            f,
            "faults: {} kill, {} stop, {} Redis restart; {} tasks, {} deliveries",
            kinds(Kind::Kill),
            kinds(Kind::Stop),
            kinds(Kind::Restart),
            self.tasks,
            self.deliveries
        )?;
        let [ct, cf, ce] = self.cancels;
        let [rt, rf, re] = self.reschedules;
        writeln!(
            f,
            "cancels true/false/failed {ct}/{cf}/{ce}, reschedules {rt}/{rf}/{re}, \
             stored after their run-at {}",
            self.stored_late
        )?;
        let mut outages: Vec<String> = (self.outages.iter())
            .map(|(ms, delivered, again)| format!("{ms} ms: {again}/{delivered}"))
            .collect();
        if outages.is_empty() {
            outages.push("none".into());
        }
        writeln!(
            f,
            "Redis outages (kill to answering again: tasks delivered during it again/all): {}",
            outages.join(", ")
        )?;
        writeln!(
            f,
            "lost {}, early {}, after a successful cancel {}, stranded {}, never scheduled {}",
            self.lost, self.early, self.after_cancel, self.stranded, self.strangers
        )?;
        writeln!(
            f,
            "deliveries under a superseded epoch: by a stopped worker {}, others {}",
            self.superseded[0], self.superseded[1]
        )?;
        writeln!(
            f,
            "duplicates: in flight at a kill {}, at a stop {}, Redis outage {} ({} of {} tasks \
             delivered during an outage delivered again), other {}",
            self.duplicates_of(Cause::Kill),
            self.duplicates_of(Cause::Stop),
            self.duplicates_of(Cause::Outage),
            self.outage_totals().1,
            self.outage_totals().0,
            self.duplicates_of(Cause::Other)
        )?;
        self.fmt_lateness(f)
    }
}

impl Report {
    fn fmt_lateness(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let worst = |k: Kind| self.worst.get(&k).copied().unwrap_or(0);
        writeln!(
            f,
            "single faults, worst lateness ms (from the run-at or the fault's end): kill {}, \
             stop {}, Redis restart {}",
            worst(Kind::Kill),
            worst(Kind::Stop),
            worst(Kind::Restart)
        )?;
        for (plan, late) in &self.stacks {
            writeln!(
                f,
                "stack {plan} ({}): worst lateness {late} ms",
                stack_label(&self.faults, *plan)
            )?;
        }
        if !self.stacks.is_empty() {
            let by = |k: Option<Kind>| self.stacked_by_kind.get(&k).copied().unwrap_or(0);
            writeln!(
                f,
                "stacked tasks, worst lateness ms by the latest-ending fault holding them: \
                 kill {}, stop {}, Redis restart {}, none {}",
                by(Some(Kind::Kill)),
                by(Some(Kind::Stop)),
                by(Some(Kind::Restart)),
                by(None)
            )?;
        }
        writeln!(
            f,
            "worst lateness of all {} ms; latest delivery past its deadline by {} ms",
            self.worst_all, self.worst_over
        )?;
        write!(
            f,
            "fault-free stretches: {} tasks, lateness ms p50 {} p99 {} max {}",
            self.calm.len(),
            quantile(&self.calm, 0.5),
            quantile(&self.calm, 0.99),
            quantile(&self.calm, 1.0)
        )
    }
}

/// What a stack was, e.g. `kill, restart +2.0 s (down 2.6 s)`.
pub fn stack_label(faults: &[Fault], plan: u32) -> String {
    let mut fs: Vec<&Fault> = faults.iter().filter(|f| f.plan == plan).collect();
    fs.sort_by_key(|f| f.start);
    let t0 = fs.first().map_or(0, |f| f.start);
    let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    fs.iter()
        .map(|f| {
            let kind = match f.kind {
                Kind::Kill => "kill",
                Kind::Stop => "stop",
                Kind::Restart => "restart",
            };
            let at = if f.start == t0 {
                String::new()
            } else {
                format!(" +{}", secs(f.start - t0))
            };
            let lasting = if f.kind == Kind::Kill {
                String::new()
            } else {
                format!(" (for {})", secs(f.end - f.start))
            };
            format!("{kind}{at}{lasting}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn the_delivery_log_keeps_any_id_whole() {
    let line = "a\\sb\\\\c\\td\\ne\\rf 5 1 6 7 2 3 99";
    let l = parse_line(line).unwrap();
    assert_eq!(l.id, "a b\\c\td\ne\rf");
    assert_eq!((l.due, l.attempt, l.at, l.pid), (5, 1, 6, 99));
    assert!(parse_line("a b 5 1 6 7 2 3 99").is_err());
    assert!(unescape_id("a\\x").is_err());
}

/// The judge of stacked faults can fail: lateness from the latest-ending fault that held a
/// task (a chain of faults included), the stacked target, and duplicates by cause.
#[test]
fn the_judge_measures_from_the_fault_that_held_a_task() {
    let l = Limits {
        lease_ms: 5000,
        claim_ahead_ms: 1000,
        grace_ms: 1500,
        calm_p99_ms: None,
    };
    let fault = |kind, start, end, pid, shards, plan| Fault {
        kind,
        start,
        end,
        pid,
        shards,
        plan,
    };
    // Plan 1: worker 7 (shard 0) killed, Redis down 12-14 s. Plan 2: Redis down 30-33 s,
    // worker 9 (shard 3) killed 32.5 s.
    let faults = [
        fault(Kind::Kill, 10_000, 10_000, 7, 1, 1),
        fault(Kind::Restart, 12_000, 14_000, 0, Fault::EVERY_SHARD, 1),
        fault(Kind::Restart, 30_000, 33_000, 0, Fault::EVERY_SHARD, 2),
        fault(Kind::Kill, 32_500, 32_500, 9, 1 << 3, 2),
    ];
    let plan = |id: &str, run_at| TaskPlan {
        id: id.into(),
        run_at,
        stored_at: run_at - 3000,
        ..TaskPlan::default()
    };
    let line = |id: &str, shard, at, pid| Line {
        id: id.into(),
        due: 0,
        attempt: 1,
        at,
        version: 1,
        shard,
        epoch: 1,
        pid,
    };
    let plans = [
        // The victim's: held by the kill and the restart, 1.8 s after the restart's end.
        plan("held", 10_500),
        // A chain: due before the restart's window, still waiting for the kill's shard when
        // Redis went down: 3.3 s after the restart's end (7.3 s after the kill).
        plan("chain", 8_600),
        // 7.5 s after the restart's end: stranded.
        plan("stranded", 10_500),
        // 5.3 s after the restart's end, 9.3 s after the kill: within lease + 2 s of the
        // restart's end, but the restart that followed the kill cost a lease of its own
        // (workers waiting a lease after an outage, not the grace): stranded.
        plan("lease after the restart", 10_600),
        // Another worker's, delivered before the restart: held by nothing, 0.9 s late.
        plan("bystander", 11_000),
        // In flight at the kill (0.5 s before it), delivered again.
        plan("in-flight", 9_500),
        // Delivered during the outage and again after it, its worker never hit.
        plan("outage", 12_500),
        // Delivered during the second outage by worker 9, killed 2 s later before Redis was
        // back (its acknowledgement held): in flight at the kill.
        plan("held-ack", 30_500),
    ];
    let lines = vec![
        line("held", 0, 15_800, 8),
        line("chain", 0, 17_300, 8),
        line("stranded", 0, 21_500, 8),
        line("lease after the restart", 0, 19_300, 8),
        line("bystander", 2, 11_900, 8),
        line("in-flight", 0, 9_500, 7),
        line("in-flight", 0, 15_500, 8),
        line("outage", 2, 12_500, 8),
        line("outage", 2, 16_000, 8),
        line("held-ack", 3, 30_500, 9),
        line("held-ack", 3, 38_000, 10),
    ];
    let r = analyze(&plans, lines, &faults, l);
    assert_eq!((r.lost, r.early, r.stranded), (0, 0, 2), "{r}");
    // The deadline of the last two: the restart's end plus the grace and 2 s (17.5 s).
    assert_eq!((r.worst_all, r.worst_over), (7500, 4000), "{r}");
    assert_eq!(r.stacks.get(&1), Some(&7500), "{r}");
    assert_eq!(r.stacked_by_kind.get(&None), Some(&900), "{r}");
    assert_eq!(
        (
            r.duplicates_of(Cause::Kill),
            r.duplicates_of(Cause::Outage),
            r.duplicates_of(Cause::Other)
        ),
        (2, 1, 0),
        "{r}"
    );
    let failures = r.failures(l).join("\n");
    assert!(failures.contains("2 tasks stranded"), "{failures}");
    assert!(failures.contains("during a Redis outage"), "{failures}");
    let lines = vec![line("chain", 0, 17_300, 8)];
    // The same faults as single faults, one a plan: the tasks are judged by issue #28's
    // allowance (lease + 1 s after the latest end): the chain, 3.3 s after the restart's
    // end, passes; the stranded one, 7.5 s, strands.
    let apart: Vec<Fault> = (faults.iter().enumerate())
        .map(|(i, f)| Fault {
            plan: i as u32,
            ..*f
        })
        .collect();
    let r = analyze(&plans[1..2], lines, &apart, l);
    assert_eq!(r.stranded, 0, "{r}");
    let r = analyze(
        &plans[2..3],
        vec![line("stranded", 0, 21_500, 8)],
        &apart,
        l,
    );
    assert_eq!(r.stranded, 1, "{r}");
    assert_eq!(stack_label(&faults, 1), "kill, restart +2.0 s (for 2.0 s)");
}

/// The poison tasks' retry policy, as the workers were given it.
#[derive(Clone, Copy, Debug)]
pub struct PoisonLimits {
    pub max_attempts: u32,
    pub retry_ms: u64,
}

/// The poison tasks' figures.
#[derive(Debug, Default)]
pub struct PoisonReport {
    /// Poison tasks scheduled, by kind.
    pub tasks: BTreeMap<Poison, usize>,
    /// In the failed set (before the operator's retry), with the right reason.
    pub failed: usize,
    /// Neither in the failed set nor ever acknowledged.
    pub lost: usize,
    /// In the failed set with a wrong reason, failure count or error text, or an error
    /// whose attempt was never logged.
    pub bad_errors: usize,
    /// Deliveries before their logged run-at, or before the retry delay after the failure
    /// recorded before them.
    pub early: usize,
    /// Handler calls before the operator's retry.
    pub calls: usize,
    /// Calls beyond the maximum, each a delivery whose failure was never recorded, by what
    /// it was caught in.
    pub beyond_max: BTreeMap<Cause, usize>,
    /// Retried by the operator and delivered again under the new version.
    pub rerun: usize,
    pub examples: Vec<String>,
}

impl PoisonReport {
    pub fn beyond(&self, c: Cause) -> usize {
        self.beyond_max.get(&c).copied().unwrap_or(0)
    }

    /// The targets this run misses.
    pub fn failures(&self) -> Vec<String> {
        let total: usize = self.tasks.values().sum();
        let mut out = Vec::new();
        for (n, what) in [
            (self.lost, "poison tasks neither failed nor acknowledged"),
            (
                self.bad_errors,
                "poison tasks with a wrong reason or errors",
            ),
            (self.early, "poison deliveries early"),
            (
                self.beyond(Cause::Other),
                "poison calls beyond the maximum not in flight at a kill, a stop or an outage",
            ),
        ] {
            if n > 0 {
                out.push(format!("{n} {what} (target 0)"));
            }
        }
        if self.failed != total {
            out.push(format!("{} of {total} poison tasks failed", self.failed));
        }
        if self.rerun != total {
            out.push(format!(
                "{} of {total} poison tasks ran again after the operator's retry",
                self.rerun
            ));
        }
        out
    }

    fn example(
        &mut self,
        what: &str,
        id: &str,
        ds: &[&Line],
        f: Option<&tickwheel_redis::FailedTask>,
    ) {
        if self.examples.len() < 8 {
            let at: Vec<(u64, u64, u32, u32)> =
                ds.iter().map(|d| (d.at, d.due, d.attempt, d.pid)).collect();
            let errs = f.map(|f| {
                (
                    f.reason,
                    f.errors.failures,
                    f.errors
                        .errors
                        .iter()
                        .map(|e| (e.attempt, e.at_ms, e.error.clone()))
                        .collect::<Vec<_>>(),
                )
            });
            self.examples.push(format!(
                "{what}: {id:?} delivered (at, due, attempt, pid) {at:?} failed {errs:?}"
            ));
        }
    }
}

impl fmt::Display for PoisonReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |k| self.tasks.get(&k).copied().unwrap_or(0);
        writeln!(
            f,
            "poison tasks: {} fail, {} panic, {} fatal; {} handler calls before the retry",
            n(Poison::Fail),
            n(Poison::Panic),
            n(Poison::Fatal),
            self.calls
        )?;
        writeln!(
            f,
            "poison: failed {}, lost {}, early {}, wrong reason/errors {}",
            self.failed, self.lost, self.early, self.bad_errors
        )?;
        write!(
            f,
            "poison calls beyond the maximum: in flight at a kill {}, at a stop {}, Redis outage \
             {}, other {}; retried by the operator and ran again {}",
            self.beyond(Cause::Kill),
            self.beyond(Cause::Stop),
            self.beyond(Cause::Outage),
            self.beyond(Cause::Other),
            self.rerun
        )
    }
}

/// Judges the poison tasks: `failed` is the failed set as read before the operator's retry
/// (sent at `retried_at`), `lines` every delivery logged until the retried tasks ran again.
pub fn analyze_poison(
    plans: &[TaskPlan],
    lines: &[Line],
    failed: &[tickwheel_redis::FailedTask],
    faults: &[Fault],
    retried_at: u64,
    pl: PoisonLimits,
) -> PoisonReport {
    let mut r = PoisonReport::default();
    let failed: HashMap<&str, &tickwheel_redis::FailedTask> =
        failed.iter().map(|f| (f.id.as_str(), f)).collect();
    let mut by_id: HashMap<&str, Vec<&Line>> = HashMap::new();
    for l in lines {
        by_id.entry(l.id.as_str()).or_default().push(l);
    }
    for p in plans {
        let Some(kind) = p.poison else { continue };
        *r.tasks.entry(kind).or_default() += 1;
        let mut ds = by_id.remove(p.id.as_str()).unwrap_or_default();
        ds.sort_by_key(|d| d.at);
        let before: Vec<&Line> = ds.iter().copied().filter(|d| d.at < retried_at).collect();
        r.calls += before.len();
        let Some(f) = failed.get(p.id.as_str()).copied() else {
            r.lost += 1;
            r.example("lost", &p.id, &ds, None);
            continue;
        };
        let max = kind.max_calls(pl.max_attempts);
        let kept = (max as usize).min(tickwheel_redis::ERRORS_KEPT);
        let texts_ok = f.errors.errors.len() == kept
            && f.errors
                .errors
                .iter()
                .all(|e| e.error == kind.error(e.attempt));
        if f.reason != kind.reason() || f.errors.failures != max || !texts_ok {
            r.bad_errors += 1;
            r.example("wrong reason or errors", &p.id, &ds, Some(f));
        } else {
            r.failed += 1;
        }
        // Each recorded failure matches one logged call; the other calls are beyond the
        // maximum, their verdict lost with the worker or the connection that carried it.
        let mut recorded: BTreeSet<u32> = f.errors.errors.iter().map(|e| e.attempt).collect();
        for d in &before {
            if !recorded.remove(&d.attempt) {
                *r.beyond_max.entry(cause(d, faults)).or_default() += 1;
                if cause(d, faults) == Cause::Other {
                    r.example("unexplained call beyond the maximum", &p.id, &ds, Some(f));
                }
            }
        }
        if !recorded.is_empty() {
            r.bad_errors += 1;
            r.example(
                "a failure recorded for a call never logged",
                &p.id,
                &ds,
                Some(f),
            );
        }
        // Never before its run-at, nor before the retry delay after the last failure
        // recorded before it.
        let early = ds.iter().filter(|d| {
            let after = f.errors.errors.iter().rev().find(|e| e.at_ms < d.at);
            d.at < d.due
                || after.is_some_and(|e| d.at < e.at_ms + pl.retry_ms && d.version == f.version)
        });
        let early = early.count();
        if early > 0 {
            r.early += early;
            r.example("early", &p.id, &ds, Some(f));
        }
        if ds
            .iter()
            .any(|d| d.at >= retried_at && d.version > f.version)
        {
            r.rerun += 1;
        } else {
            r.example("not run again after the retry", &p.id, &ds, Some(f));
        }
    }
    r
}

/// The poison analysis can fail: a clean history passes, and each broken rule is counted.
#[test]
fn the_poison_analysis_counts_each_broken_rule() {
    use tickwheel_redis::{AttemptError, ErrorLog, FailReason, FailedTask};
    let pl = PoisonLimits {
        max_attempts: 3,
        retry_ms: 500,
    };
    let id = "poison-fail-1";
    let plans = [TaskPlan {
        id: id.into(),
        run_at: 1000,
        stored_at: 1,
        poison: Some(Poison::Fail),
        ..TaskPlan::default()
    }];
    let line = |attempt, at, due, version| Line {
        id: id.into(),
        due,
        attempt,
        at,
        version,
        shard: 0,
        epoch: 1,
        pid: 7,
    };
    let error = |attempt, at_ms| AttemptError {
        attempt,
        at_ms,
        error: Poison::Fail.error(attempt),
    };
    let failed = FailedTask {
        id: id.into(),
        shard: 0,
        failed_at_ms: 2110,
        reason: FailReason::Exhausted,
        errors: ErrorLog {
            failures: 3,
            first_failed_ms: 1005,
            errors: vec![error(1, 1005), error(2, 1510), error(3, 2110)],
        },
        version: 1,
        attempts: 3,
        due_ms: 2010,
        recurring: false,
        payload_len: 0,
        payload_preview: Vec::new(),
    };
    let clean = vec![
        line(1, 1000, 1000, 1),
        line(2, 1505, 1505, 1),
        line(3, 2010, 2010, 1),
        line(1, 5001, 5000, 2),
    ];
    let judge = |lines: &[Line], failed: &[FailedTask], faults: &[Fault]| {
        analyze_poison(&plans, lines, failed, faults, 5000, pl)
    };
    let ok = judge(&clean, std::slice::from_ref(&failed), &[]);
    assert!(ok.failures().is_empty(), "{ok}\n{:?}", ok.examples);
    assert_eq!((ok.failed, ok.calls, ok.rerun), (1, 3, 1));

    // A fourth call, unrecorded: beyond the maximum, unexplained; explained by a kill 0.5 s
    // after it by the same worker.
    let mut extra = clean.clone();
    extra.push(line(4, 2700, 2610, 1));
    let r = judge(&extra, std::slice::from_ref(&failed), &[]);
    assert_eq!(r.beyond(Cause::Other), 1, "{r}");
    assert!(!r.failures().is_empty());
    let kill = Fault {
        kind: Kind::Kill,
        start: 3200,
        end: 3200,
        pid: 7,
        shards: 1,
        plan: 0,
    };
    let r = judge(&extra, std::slice::from_ref(&failed), &[kill]);
    assert_eq!(
        (r.beyond(Cause::Kill), r.beyond(Cause::Other)),
        (1, 0),
        "{r}"
    );
    assert!(r.failures().is_empty(), "{r}");

    // A retry before its delay after the recorded failure, and one before its run-at.
    let mut early = clean.clone();
    early[1] = line(2, 1400, 1400, 1);
    early[2] = line(3, 2009, 2010, 1);
    assert_eq!(judge(&early, std::slice::from_ref(&failed), &[]).early, 2);

    // Not in the failed set: lost. A wrong error text or reason.
    assert_eq!(judge(&clean, &[], &[]).lost, 1);
    let mut wrong = failed.clone();
    wrong.errors.errors[1].error = "something else".into();
    assert_eq!(judge(&clean, &[wrong], &[]).bad_errors, 1);
    let mut wrong = failed.clone();
    wrong.reason = FailReason::NonRetryable;
    assert_eq!(judge(&clean, &[wrong], &[]).bad_errors, 1);

    // Not run again after the operator's retry.
    let r = judge(&clean[..3], std::slice::from_ref(&failed), &[]);
    assert_eq!(r.rerun, 0);
    assert!(!r.failures().is_empty());
}
