//! `tickwheel tasks`: see and steer the durable tasks of a `tickwheel-redis` namespace.
//!
//! `stats`, `ls`, `show`, `failed` and `upcoming` read through [`tickwheel_redis::Inspector`]
//! (read-only scripts, each call bounded, so reading never makes a running worker late); the writes
//! (`cancel`, `reschedule`, `run-now`, `retry-failed`, `discard-failed`, `pause`, `resume`) go
//! through the [`tickwheel_redis::Producer`], and only with `--allow-writes` (besides whatever
//! credentials the Redis URL carries). None of them creates a namespace: one that does not exist is
//! an error. Every command prints a table for people, or JSON with `--json`; ids and payloads are
//! escaped ([`escape`]), and `--escaped` reads id arguments with the same escapes, so any id a
//! table shows can be typed back. Exit status: 0 done, 1 failed (Redis unreachable, no such
//! namespace or task, a named task that could not be cancelled, rescheduled, run, retried or
//! discarded), 2 bad arguments. Errors are an `error: …` line on standard error, or with `--json` a
//! JSON object there ([`render::error_json`]), usage errors included ([`usage_error`]).

pub(crate) mod escape;
mod render;

use std::process::ExitCode;
use std::time::Duration;

use crate::time;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use tickwheel_redis::{
    Acted, Config, Error, FailedFilter, Inspector, ListFilter, Producer, RunAt, StateFilter,
    MAX_ID_LEN, MAX_STEP,
};

/// `tickwheel tasks`'s arguments.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// The Redis URL (`redis://[user:password@]host[:port][/db]`,
    /// `redis+sentinel://host[:port][,host[:port]...]/<primary name>[/db]`, or
    /// `redis+cluster://host:port[,host:port...]`; over TLS `rediss://`,
    /// `rediss+sentinel://` and `rediss+cluster://`).
    #[arg(long, value_name = "URL")]
    redis: String,
    /// The namespace (as given to the producers and workers).
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// How long to keep trying while Redis cannot be reached (e.g. 2s, 1m; at most 1h).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_connect_timeout)]
    connect_timeout: Duration,
    #[command(flatten)]
    tls: crate::redis_url::TlsArgs,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Let the writes (`cancel`, `reschedule`, `run-now`, `retry-failed`, `discard-failed`,
    /// `pause`, `resume`) write (without it they refuse, exit status 2, nothing sent).
    #[arg(long, global = true)]
    allow_writes: bool,
    /// Read ID arguments with the escapes the tables print (`\n`, `\t`, `\\`, `\u{1b}`),
    /// to type back an id holding a tab, a newline or another control character.
    #[arg(long, global = true)]
    escaped: bool,
    #[command(subcommand)]
    command: TasksCommand,
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// Per shard: owner, epoch, lease time left, pending, in flight, failed, paused, next
    /// run-at; totals and live workers.
    Stats,
    /// Pending and in-flight tasks: in flight first, then pending by run-at second.
    Ls(LsArgs),
    /// One task: state, run-at, version, attempt, recurrence, payload size and preview, and
    /// the errors of its failed attempts.
    Show {
        /// The task's id (with --escaped, as the tables print it).
        id: String,
    },
    /// Failed tasks (oldest failure first): reason, attempts, failed-at, the last error.
    Failed(FailedArgs),
    /// Retry failed tasks: by id, or every one a filter selects (--all for all of them).
    RetryFailed(FailedActionArgs),
    /// Discard failed tasks: by id, or every one a filter selects (--all for all of them).
    DiscardFailed(FailedActionArgs),
    /// Run a pending task now (exit status 1 when it was not pending).
    RunNow {
        /// The task's id (with --escaped, as the tables print it).
        id: String,
    },
    /// Pause the namespace (or some shards): workers claim nothing from them until resumed.
    Pause(ShardsArgs),
    /// Resume the namespace (or some shards).
    Resume(ShardsArgs),
    /// Cancel pending tasks (exit status 1 when any was not pending).
    Cancel {
        /// The tasks' ids (with --escaped, as the tables print them).
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Move a pending task to a new run-at (exit status 1 when it was not pending).
    Reschedule(RescheduleArgs),
    /// Pending tasks per time slot from now on (from the per-second counts: cheap).
    Upcoming {
        /// The width of a slot (whole seconds, at least 1s).
        #[arg(long, default_value = "1m", value_parser = parse_slot)]
        per: Duration,
        /// How far ahead.
        #[arg(long, default_value = "3h", value_parser = time::parse_duration)]
        horizon: Duration,
    },
}

#[derive(Debug, Args)]
struct LsArgs {
    /// Only this shard (repeatable).
    #[arg(long = "shard", value_name = "N")]
    shards: Vec<u32>,
    /// Pending, in flight, or all.
    #[arg(long, value_enum, default_value_t = StateArg::All)]
    state: StateArg,
    /// Only tasks due at or after this instant (RFC 3339, or a duration from now: 10m, -1h).
    #[arg(long, value_name = "WHEN", value_parser = time::parse_instant, allow_hyphen_values = true)]
    due_after: Option<u64>,
    /// Only tasks due before this instant (RFC 3339, or a duration from now).
    #[arg(long, value_name = "WHEN", value_parser = time::parse_instant, allow_hyphen_values = true)]
    due_before: Option<u64>,
    /// At most this many tasks.
    #[arg(long, default_value_t = 50, conflicts_with = "all",
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Every task selected, however many (a progress bar on a terminal).
    #[arg(long)]
    all: bool,
}

/// Which failed tasks: the filter of `failed`, `retry-failed` and `discard-failed`.
#[derive(Debug, Args)]
struct FailedFilterArgs {
    /// Only tasks one of whose kept errors contains this text (case-sensitive).
    #[arg(long = "error", value_name = "TEXT")]
    error: Option<String>,
    /// Only tasks that failed at or after this instant (RFC 3339, or a duration from now:
    /// -1h).
    #[arg(long, value_name = "WHEN", value_parser = time::parse_instant, allow_hyphen_values = true)]
    failed_after: Option<u64>,
    /// Only tasks that failed before this instant (RFC 3339, or a duration from now).
    #[arg(long, value_name = "WHEN", value_parser = time::parse_instant, allow_hyphen_values = true)]
    failed_before: Option<u64>,
    /// Only this shard (repeatable).
    #[arg(long = "shard", value_name = "N")]
    shards: Vec<u32>,
}

impl FailedFilterArgs {
    fn is_empty(&self) -> bool {
        self.error.is_none()
            && self.failed_after.is_none()
            && self.failed_before.is_none()
            && self.shards.is_empty()
    }

    fn filter(&self, limit: Option<usize>) -> FailedFilter {
        FailedFilter {
            shards: (!self.shards.is_empty()).then(|| self.shards.clone()),
            failed_after_ms: self.failed_after,
            failed_before_ms: self.failed_before,
            error_contains: self.error.clone(),
            limit,
        }
    }
}

#[derive(Debug, Args)]
struct FailedArgs {
    #[command(flatten)]
    filter: FailedFilterArgs,
    /// At most this many tasks.
    #[arg(long, default_value_t = 50, conflicts_with = "all",
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Every failed task selected, however many.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
struct FailedActionArgs {
    /// The failed tasks' ids (with --escaped, as the tables print them); or none, and a
    /// filter.
    ids: Vec<String>,
    #[command(flatten)]
    filter: FailedFilterArgs,
    /// At most this many tasks (with a filter).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Every failed task (the filter's, or all of them without one): required to act on
    /// the whole failed set.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
struct ShardsArgs {
    /// Only this shard (repeatable; without it, every shard).
    #[arg(long = "shard", value_name = "N")]
    shards: Vec<u32>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("when").required(true).args(["at", "in_"])))]
struct RescheduleArgs {
    /// The task's id (with --escaped, as the tables print it).
    id: String,
    /// The new run-at, RFC 3339 (`2026-11-26T09:00:00Z`); this or --in.
    #[arg(long, value_name = "RFC3339", value_parser = time::parse_rfc3339)]
    at: Option<u64>,
    /// The new run-at as a delay from now (by the Redis clock): 90s, 5m, 1h30m; this or --at.
    #[arg(long = "in", id = "in_", value_name = "DURATION", value_parser = time::parse_duration)]
    in_: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StateArg {
    All,
    Pending,
    InFlight,
}

/// Checks an id argument, first reading its escapes with `--escaped`.
fn parse_id(text: &str, escaped: bool) -> Result<String, String> {
    let id = if escaped {
        escape::unescape(text).map_err(|why| format!("id \"{}\": {why}", escape::escape(text)))?
    } else {
        text.to_string()
    };
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "a task id is 1 to {MAX_ID_LEN} bytes, this one is {}",
            id.len()
        ));
    }
    Ok(id)
}

/// `--connect-timeout` (here and on `tickwheel dashboard`): a duration of at most an hour.
pub(crate) fn parse_connect_timeout(text: &str) -> Result<Duration, String> {
    let d = time::parse_duration(text)?;
    if d > Duration::from_secs(3600) {
        return Err(format!("`{text}`: at most 1h"));
    }
    Ok(d)
}

/// What the command line asks that clap cannot check alone: ids (their escapes read with
/// `--escaped`, their length), and an `ls` window that can hold something.
fn check(args: &mut TasksArgs) -> Result<(), String> {
    let escaped = args.escaped;
    match &mut args.command {
        TasksCommand::Show { id }
        | TasksCommand::RunNow { id }
        | TasksCommand::Reschedule(RescheduleArgs { id, .. }) => {
            *id = parse_id(id, escaped)?;
        }
        TasksCommand::Cancel { ids } => {
            for id in ids.iter_mut() {
                *id = parse_id(id, escaped)?;
            }
        }
        TasksCommand::RetryFailed(a) | TasksCommand::DiscardFailed(a) => {
            for id in a.ids.iter_mut() {
                *id = parse_id(id, escaped)?;
            }
            check_window(&a.filter)?;
            let named = !a.ids.is_empty();
            if named && (!a.filter.is_empty() || a.all || a.limit.is_some()) {
                return Err(
                    "give ids, or a filter (--error, --failed-after, --failed-before, \
                            --shard, --limit), not both"
                        .into(),
                );
            }
            if !named && a.filter.is_empty() && !a.all {
                return Err(
                    "no task selected: give ids, a filter (--error, --failed-after, \
                            --failed-before, --shard), or --all for every failed task"
                        .into(),
                );
            }
        }
        TasksCommand::Failed(f) => check_window(&f.filter)?,
        &mut TasksCommand::Ls(LsArgs {
            due_after: Some(after),
            due_before: Some(before),
            ..
        }) if after >= before => {
            return Err(format!(
                "--due-after {} is not before --due-before {}: no task is due in that window \
                 (--due-after is inclusive, --due-before exclusive)",
                time::rfc3339(after),
                time::rfc3339(before)
            ));
        }
        _ => {}
    }
    Ok(())
}

/// A `--failed-after` / `--failed-before` window that can hold something.
fn check_window(f: &FailedFilterArgs) -> Result<(), String> {
    match (f.failed_after, f.failed_before) {
        (Some(after), Some(before)) if after >= before => Err(format!(
            "--failed-after {} is not before --failed-before {}: no task failed in that \
             window (--failed-after is inclusive, --failed-before exclusive)",
            time::rfc3339(after),
            time::rfc3339(before)
        )),
        _ => Ok(()),
    }
}

/// The name of a command that writes, `None` for one that only reads.
fn write_name(c: &TasksCommand) -> Option<&'static str> {
    match c {
        TasksCommand::Cancel { .. } => Some("cancel"),
        TasksCommand::Reschedule(_) => Some("reschedule"),
        TasksCommand::RetryFailed(_) => Some("retry-failed"),
        TasksCommand::DiscardFailed(_) => Some("discard-failed"),
        TasksCommand::RunNow { .. } => Some("run-now"),
        TasksCommand::Pause(_) => Some("pause"),
        TasksCommand::Resume(_) => Some("resume"),
        TasksCommand::Stats
        | TasksCommand::Ls(_)
        | TasksCommand::Show { .. }
        | TasksCommand::Failed(_)
        | TasksCommand::Upcoming { .. } => None,
    }
}

/// A command line clap refused: with `tickwheel tasks … --json`, the error as [`fail`]
/// prints it (clap's message without its usage lines, its exit status); anything else
/// (help, version, another command, no `--json`) as clap prints it.
pub fn usage_error(e: clap::Error) -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let json = e.use_stderr()
        && args.first().is_some_and(|a| a == "tasks")
        && args
            .iter()
            .take_while(|a| *a != "--")
            .any(|a| a == "--json");
    if !json {
        e.exit();
    }
    let rendered = e.render().to_string();
    let message = rendered
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let status = u8::try_from(e.exit_code()).unwrap_or(2);
    fail(true, status, &escape::escape(&message))
}

/// Prints `message` as `error: …`, or as a JSON object with `--json`, on standard error;
/// returns `status`.
fn fail(json: bool, status: u8, message: &str) -> ExitCode {
    if json {
        eprintln!("{}", render::error_json(message, status));
    } else {
        eprintln!("error: {message}");
    }
    ExitCode::from(status)
}

/// A slot width for `upcoming`: whole seconds, at least one (the shards count per second).
fn parse_slot(text: &str) -> Result<Duration, String> {
    let d = time::parse_duration(text)?;
    if d.is_zero() || d.subsec_nanos() != 0 {
        return Err(format!(
            "`{text}`: a slot is a whole number of seconds, at least 1s"
        ));
    }
    Ok(d)
}

/// Runs `tickwheel tasks`; prints the error ([`fail`]) and returns status 1 when it fails,
/// 2 for bad arguments.
pub fn run(mut args: TasksArgs) -> ExitCode {
    let json = args.json;
    if let Err(message) = check(&mut args) {
        return fail(json, 2, &message);
    }
    if let (Some(name), false) = (write_name(&args.command), args.allow_writes) {
        return fail(
            json,
            2,
            &format!("`{name}` changes tasks: add --allow-writes to let it (nothing was sent)"),
        );
    }
    match execute(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(json, 1, &message),
    }
}

fn execute(args: &TasksArgs) -> Result<(), String> {
    let cfg = crate::redis_url::config(
        &args.redis,
        &args.namespace,
        args.connect_timeout,
        &args.tls,
    )?;
    let failed = |e: Error| describe(&e, args);
    let mut ins = Inspector::connect(&cfg).map_err(failed)?;
    let json = args.json;
    match &args.command {
        TasksCommand::Stats => {
            let stats = ins.stats().map_err(failed)?;
            render::stats(&args.namespace, &stats, json);
        }
        TasksCommand::Ls(ls) => list(&mut ins, ls, json).map_err(failed)?,
        TasksCommand::Show { id } => {
            let found = ins.show(id).map_err(failed)?;
            let remembered = ins.remembered(id).map_err(failed)?;
            let now = ins.now_ms().map_err(failed)?;
            match found {
                Some(task) => render::show(&task, remembered, now, json),
                None => {
                    let once = remembered.map_or(String::new(), |until| {
                        format!("; remembered {}", render::remembered_text(until, now))
                    });
                    return Err(format!(
                        "no task \"{}\" in namespace {:?} (never scheduled, cancelled, or \
                         acknowledged){once}",
                        escape::escape(id),
                        args.namespace
                    ));
                }
            }
        }
        TasksCommand::Cancel { ids } => cancel(&cfg, ids, json).map_err(failed)??,
        TasksCommand::Reschedule(r) => reschedule(&cfg, &mut ins, r, json).map_err(failed)??,
        TasksCommand::Upcoming { per, horizon } => {
            let up = ins.upcoming(*per, *horizon).map_err(failed)?;
            render::upcoming(&up, json);
        }
        TasksCommand::Failed(f) => {
            let limit = (!f.all).then_some(f.limit as usize);
            let tasks = ins.failed(&f.filter.filter(limit)).map_err(failed)?;
            let now = ins.now_ms().map_err(failed)?;
            render::failed(&tasks, now, json);
        }
        TasksCommand::RetryFailed(a) => {
            act_on_failed(&cfg, a, Act::Retry, json).map_err(failed)??
        }
        TasksCommand::DiscardFailed(a) => {
            act_on_failed(&cfg, a, Act::Discard, json).map_err(failed)??
        }
        TasksCommand::RunNow { id } => run_now(&cfg, &mut ins, id, json).map_err(failed)??,
        TasksCommand::Pause(s) => pause(&cfg, &mut ins, &s.shards, true, json).map_err(failed)?,
        TasksCommand::Resume(s) => pause(&cfg, &mut ins, &s.shards, false, json).map_err(failed)?,
    }
    Ok(())
}

/// What `retry-failed` or `discard-failed` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Retry,
    Discard,
}

impl Act {
    /// `retried`, `discarded`.
    pub fn done(self) -> &'static str {
        match self {
            Act::Retry => "retried",
            Act::Discard => "discarded",
        }
    }

    /// `retry`, `discard`.
    pub fn verb(self) -> &'static str {
        match self {
            Act::Retry => "retry",
            Act::Discard => "discard",
        }
    }
}

/// `retry-failed` and `discard-failed`: by id (`Ok(Err(message))` when an id was not
/// acted on), or by filter.
fn act_on_failed(
    cfg: &Config,
    a: &FailedActionArgs,
    act: Act,
    json: bool,
) -> Result<Result<(), String>, Error> {
    let mut producer = Producer::connect(cfg)?;
    if a.ids.is_empty() {
        let filter = a.filter.filter(a.limit.map(|l| l as usize));
        let report = match act {
            Act::Retry => producer.retry_failed_where(&filter)?,
            Act::Discard => producer.discard_failed_where(&filter)?,
        };
        render::bulk(act, &report, json);
        return Ok(Ok(()));
    }
    let results = match act {
        Act::Retry => producer.retry_failed(&a.ids)?,
        Act::Discard => producer.discard_failed(&a.ids)?,
    };
    render::acted(act, &a.ids, &results, json);
    let missed = results.iter().filter(|&&r| r != Acted::Done).count();
    Ok(if missed > 0 {
        Err(format!(
            "{missed} of {} not {}: not failed (unknown, never failed, or retried or discarded \
             already), or a live task has the id",
            a.ids.len(),
            act.done()
        ))
    } else {
        Ok(())
    })
}

/// `run-now`: `Ok(Err(message))` when the task was not pending.
fn run_now(
    cfg: &Config,
    ins: &mut Inspector,
    id: &str,
    json: bool,
) -> Result<Result<(), String>, Error> {
    let mut producer = Producer::connect(cfg)?;
    let moved = producer.run_now(id)?;
    let after = ins.show(id)?;
    render::ran_now(id, moved, after.as_ref(), json);
    Ok(if moved {
        Ok(())
    } else {
        Err(format!(
            "\"{}\" not run now: not pending (unknown, already done, failed, or in flight)",
            escape::escape(id)
        ))
    })
}

/// `pause` and `resume`: every shard, or those given; then each shard's state.
fn pause(
    cfg: &Config,
    ins: &mut Inspector,
    shards: &[u32],
    paused: bool,
    json: bool,
) -> Result<(), Error> {
    let mut producer = Producer::connect(cfg)?;
    let changed = if shards.is_empty() {
        if paused {
            producer.pause()?
        } else {
            producer.resume()?
        }
    } else {
        producer.pause_shards(shards, paused)?
    };
    let stats = ins.stats()?;
    render::paused(paused, shards, changed, &stats, json);
    Ok(())
}

/// `cancel`: `Ok(Err(message))` when a task was not pending.
fn cancel(cfg: &Config, ids: &[String], json: bool) -> Result<Result<(), String>, Error> {
    let mut producer = Producer::connect(cfg)?;
    let done = producer.cancel_many(ids)?;
    render::cancelled(ids, &done, json);
    let missed = done.iter().filter(|&&d| !d).count();
    Ok(if missed > 0 {
        Err(format!(
            "{missed} of {} not cancelled: not pending (unknown, already done, or in flight: \
             being delivered now)",
            ids.len()
        ))
    } else {
        Ok(())
    })
}

/// `reschedule`: `Ok(Err(message))` when the task was not pending.
fn reschedule(
    cfg: &Config,
    ins: &mut Inspector,
    r: &RescheduleArgs,
    json: bool,
) -> Result<Result<(), String>, Error> {
    let run_at = match (r.at, r.in_) {
        (Some(ms), _) => RunAt::AtMillis(ms),
        (None, Some(d)) => RunAt::After(d),
        (None, None) => return Ok(Err("give --at or --in".into())),
    };
    let mut producer = Producer::connect(cfg)?;
    let moved = producer.reschedule(&r.id, run_at)?;
    let after = ins.show(&r.id)?;
    render::rescheduled(&r.id, moved, after.as_ref(), json);
    Ok(if moved {
        Ok(())
    } else {
        Err(format!(
            "\"{}\" not rescheduled: not pending (unknown, already done, or in flight)",
            escape::escape(&r.id)
        ))
    })
}

/// `ls`: page by page, printed as it comes; a progress bar (on a terminal) for long scans.
fn list(ins: &mut Inspector, ls: &LsArgs, json: bool) -> Result<(), Error> {
    let limit = (!ls.all).then_some(ls.limit as usize);
    let filter = ListFilter {
        shards: (!ls.shards.is_empty()).then(|| ls.shards.clone()),
        due_after_ms: ls.due_after,
        due_before_ms: ls.due_before,
        state: match ls.state {
            StateArg::All => StateFilter::All,
            StateArg::Pending => StateFilter::Pending,
            StateArg::InFlight => StateFilter::InFlight,
        },
        limit,
    };
    let long = limit.is_none_or(|l| l > MAX_STEP);
    let stats = ins.stats()?;
    let progress = long.then(|| {
        let total = stats.pending() + stats.in_flight();
        render::progress(limit.map_or(total, |l| total.min(l as u64)))
    });
    let mut scan = ins.scan(filter)?;
    let mut out = render::Listing::start(json);
    while let Some(page) = scan.next_page()? {
        if let Some(p) = &progress {
            p.inc(page.len() as u64);
        }
        out.rows(&page);
    }
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    out.finish();
    Ok(())
}

/// An error as the operator should read it: what failed, where, and what to check.
fn describe(e: &Error, args: &TasksArgs) -> String {
    let url = crate::redis_url::shown(&args.redis);
    // One line, whatever the error's text holds (a server that is not Redis answers with
    // several).
    let text = |e: &dyn std::fmt::Display| escape::escape(&e.to_string());
    match e {
        Error::Redis(r) if r.is_timeout() => {
            format!("cannot reach Redis at {url}: timed out (no answer within --connect-timeout)")
        }
        Error::Redis(r) if matches!(r.kind(), redis::ErrorKind::Parse) => {
            format!("the server at {url} does not answer as Redis does (is the port right?)")
        }
        Error::Redis(r) if r.is_io_error() || r.is_connection_refusal() => {
            format!("cannot reach Redis at {url}: {}", text(r))
        }
        Error::InvalidUrl { reason, .. } => format!("invalid Redis URL {url}: {}", text(reason)),
        Error::Redis(r) => format!("Redis at {url}: {}", text(r)),
        e => format!("{} (at {url})", text(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_instants_are_checked() {
        assert!(parse_id("", false).is_err());
        assert!(parse_id(&"x".repeat(MAX_ID_LEN + 1), false).is_err());
        assert_eq!(parse_id("a\\tb", false).as_deref(), Ok("a\\tb"));
        assert_eq!(parse_id("a\\tb", true).as_deref(), Ok("a\tb"));
        // The length is the id's, not its escaped spelling's.
        assert!(parse_id(&"\\n".repeat(MAX_ID_LEN), true).is_ok());
        assert!(parse_id("\\q", true).is_err());
        assert!(time::parse_rfc3339("tomorrow").is_err());
    }
}
