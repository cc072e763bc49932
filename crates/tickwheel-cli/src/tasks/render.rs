//! What `tickwheel tasks` prints: aligned tables for people, JSON for scripts. Every id and
//! payload goes through [`escape`](super::escape) in tables, and all JSON through
//! [`json_text`], which escapes the same characters.

use std::fmt::Write as _;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tickwheel_redis::{
    Acted, BulkReport, ErrorLog, FailedTask, Recurrence, Stats, TaskDetail, TaskInfo, TaskState,
    Upcoming,
};

use super::escape::{escape, escape_bytes, hex, is_plain, needs_escape};
use super::Act;
use crate::time::{relative, rfc3339, span};

/// Payload bytes a table shows.
const SHOWN_BYTES: usize = 512;

/// A table: a header and rows of cells, printed with each column padded to its widest cell
/// (the last column unpadded).
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn print(&self) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c + 1 == r.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = widths[c] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            say!("{}", line.trim_end());
        }
    }
}

/// `v` as JSON text (indented if `pretty`), for every JSON output of `tasks`: serde_json's,
/// but with the characters that [`needs_escape`] and JSON does not escape itself (DEL, C1
/// controls such as U+009B CSI, bidirectional and other invisible formatting characters)
/// written as `\uXXXX`, so that `--json` on a terminal is as safe as the tables. The value
/// read back is the same.
fn json_text(v: &Value, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(v)
    } else {
        serde_json::to_string(v)
    }
    .unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        // serde_json writes C0 controls escaped, and all it writes outside strings (the
        // pretty printer's newlines included) is ASCII below DEL: a character from DEL up
        // is in a string, where `\uXXXX` stands for it.
        if c >= '\u{7f}' && needs_escape(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// An error as `--json` prints it, on one line of standard error:
/// `{"error":{"message":"...","exit_status":N}}` (the message as the table form's `error:`
/// line has it).
pub fn error_json(message: &str, exit_status: u8) -> String {
    json_text(
        &json!({ "error": { "message": message, "exit_status": exit_status } }),
        false,
    )
}

fn print_json(v: &Value) {
    say!("{}", json_text(v, true));
}

fn opt_time(ms: Option<u64>) -> Value {
    ms.map_or(Value::Null, |ms| json!({ "ms": ms, "utc": rfc3339(ms) }))
}

/// `stats --json`.
fn stats_json(namespace: &str, s: &Stats) {
    let now = s.now_ms;
    let shards: Vec<Value> = s
        .shards
        .iter()
        .map(|sh| {
            json!({
                "shard": sh.shard,
                "owner": sh.owner,
                "epoch": sh.epoch,
                "lease_left_ms": sh.lease_left.map(|d| d.as_millis() as u64),
                "pending": sh.pending,
                "in_flight": sh.in_flight,
                "in_flight_expired": sh.in_flight_expired,
                "buckets": sh.buckets,
                "next_run_at": opt_time(sh.next_run_at_ms),
                "next_run_at_exact": sh.next_run_at_exact,
                "failed": sh.failed,
                "paused": sh.paused,
                "trimmed": sh.trimmed,
                "remembered": sh.remembered,
            })
        })
        .collect();
    let workers: Vec<Value> = s
        .workers
        .iter()
        .map(|w| json!({ "id": w.id, "expires_in_ms": w.expires_in.as_millis() as u64 }))
        .collect();
    print_json(&json!({
        "namespace": namespace,
        "now": opt_time(Some(now)),
        "totals": {
            "shards": s.shards.len(),
            "unowned_shards": s.unowned(),
            "pending": s.pending(),
            "in_flight": s.in_flight(),
            "in_flight_expired": s.in_flight_expired(),
            "next_run_at": opt_time(s.next_run_at_ms()),
            "live_workers": s.live_workers,
            "failed": s.failed(),
            "paused_shards": s.paused(),
            "remembered": s.remembered(),
        },
        "shards": shards,
        "workers": workers,
    }));
}

/// `stats`'s table of shards.
fn shard_table(s: &Stats) {
    let now = s.now_ms;
    let mut t = Table::new(&[
        "SHARD",
        "PENDING",
        "IN FLIGHT",
        "FAILED",
        "PAUSED",
        "EPOCH",
        "LEASE LEFT",
        "NEXT RUN-AT",
        "",
        "OWNER",
    ]);
    for sh in &s.shards {
        let (next, when) = match sh.next_run_at_ms {
            Some(ms) => (
                rfc3339(ms),
                format!(
                    "{}{}",
                    relative(ms, now),
                    if sh.next_run_at_exact {
                        ""
                    } else {
                        " (this second)"
                    }
                ),
            ),
            None => ("-".into(), String::new()),
        };
        t.row(vec![
            sh.shard.to_string(),
            sh.pending.to_string(),
            if sh.in_flight_expired > 0 {
                format!("{} ({} expired)", sh.in_flight, sh.in_flight_expired)
            } else {
                sh.in_flight.to_string()
            },
            sh.failed.to_string(),
            if sh.paused { "paused" } else { "-" }.into(),
            sh.epoch.to_string(),
            sh.lease_left.map_or("lapsed".into(), span),
            next,
            when,
            sh.owner.as_deref().map_or("-".into(), escape),
        ]);
    }
    t.print();
}

/// `stats`.
pub fn stats(namespace: &str, s: &Stats, json: bool) {
    let now = s.now_ms;
    if json {
        stats_json(namespace, s);
        return;
    }
    let next = s.next_run_at_ms().map_or("none".to_string(), |ms| {
        format!("{} ({})", rfc3339(ms), relative(ms, now))
    });
    say!(
        "namespace {}: {} shards ({} without a live lease), live workers {}",
        escape(namespace),
        s.shards.len(),
        s.unowned(),
        s.live_workers
    );
    say!(
        "pending {}, in flight {} ({} past their visibility deadline), next run-at {next}",
        s.pending(),
        s.in_flight(),
        s.in_flight_expired()
    );
    say!(
        "failed {}, paused shards {} of {}, ids schedule_once remembers {}",
        s.failed(),
        s.paused(),
        s.shards.len(),
        s.remembered()
    );
    if s.paused() > 0 {
        say!(
            "PAUSED: workers claim nothing from the paused shards until `tickwheel tasks \
             resume`"
        );
    }
    say!("");
    shard_table(s);
    if !s.workers.is_empty() {
        say!("");
        let mut t = Table::new(&["WORKER", "REGISTERED FOR"]);
        for w in &s.workers {
            t.row(vec![escape(&w.id), span(w.expires_in)]);
        }
        t.print();
    }
}

fn state_name(t: &TaskInfo) -> &'static str {
    match t.state {
        TaskState::Pending { .. } => "pending",
        TaskState::InFlight { .. } => "in-flight",
        TaskState::Failed { .. } => "failed",
        TaskState::Unknown => "unknown",
    }
}

fn visible_at(t: &TaskInfo) -> Option<u64> {
    match t.state {
        TaskState::InFlight { visible_at_ms, .. } => Some(visible_at_ms),
        _ => None,
    }
}

fn task_json(t: &TaskInfo) -> Value {
    let mut v = json!({
        "id": t.id,
        "shard": t.shard,
        "state": state_name(t),
        "due": opt_time(Some(t.due_ms())),
        "version": t.version(),
        "attempt": t.attempt(),
        "visible_at": opt_time(visible_at(t)),
        "payload_len": t.payload_len,
        "recurring": t.recurring,
    });
    if let TaskState::Failed { reason, .. } = t.state {
        v["reason"] = Value::String(reason.as_str().into());
    }
    v
}

/// An error log as JSON: `{"failures", "first_failed", "errors": [{"attempt", "at",
/// "error"}]}`.
fn errors_json(log: &ErrorLog) -> Value {
    let errors: Vec<Value> = log
        .errors
        .iter()
        .map(|e| json!({ "attempt": e.attempt, "at": opt_time(Some(e.at_ms)), "error": e.error }))
        .collect();
    json!({
        "failures": log.failures,
        "first_failed": opt_time((log.first_failed_ms > 0).then_some(log.first_failed_ms)),
        "errors": errors,
    })
}

/// The error texts a table shows at most, in characters (escaped).
const ERROR_SHOWN: usize = 100;

/// An error text for a table: escaped, on one line, cut to [`ERROR_SHOWN`] characters.
fn short_error(text: &str) -> String {
    let e = escape(text);
    if e.chars().count() <= ERROR_SHOWN {
        return e;
    }
    let cut: String = e.chars().take(ERROR_SHOWN - 1).collect();
    format!("{cut}…")
}

/// `failed`: a table (failed-at, shard, reason, attempts, id, last error) or JSON.
pub fn failed(tasks: &[FailedTask], now_ms: u64, json: bool) {
    if json {
        let v: Vec<Value> = tasks
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "shard": t.shard,
                    "failed_at": opt_time(Some(t.failed_at_ms)),
                    "reason": t.reason.as_str(),
                    "attempts": t.attempts,
                    "version": t.version,
                    "due": opt_time(Some(t.due_ms)),
                    "recurring": t.recurring,
                    "payload_len": t.payload_len,
                    "last_error": t.errors.errors.last().map(|e| e.error.clone()),
                    "errors": errors_json(&t.errors),
                })
            })
            .collect();
        print_json(&Value::Array(v));
        return;
    }
    let mut t = Table::new(&[
        "FAILED AT (UTC)",
        "",
        "SHARD",
        "REASON",
        "ATTEMPTS",
        "ID",
        "LAST ERROR",
    ]);
    for f in tasks {
        t.row(vec![
            rfc3339(f.failed_at_ms),
            relative(f.failed_at_ms, now_ms),
            f.shard.to_string(),
            f.reason.as_str().into(),
            f.attempts.to_string(),
            escape(&f.id),
            f.errors
                .errors
                .last()
                .map_or("-".into(), |e| short_error(&e.error)),
        ]);
    }
    t.print();
    say!("({} failed tasks)", tasks.len());
}

/// `retry-failed` / `discard-failed` by id.
pub fn acted(act: Act, ids: &[String], results: &[Acted], json: bool) {
    let name = |r: &Acted| match r {
        Acted::Done => act.done(),
        Acted::NotFailed => "not failed",
        Acted::LiveTaskExists => "live task exists",
    };
    let count = |want: Acted| results.iter().filter(|&&r| r == want).count();
    if json {
        let v: Vec<Value> = ids
            .iter()
            .zip(results)
            .map(|(id, r)| json!({ "id": id, "result": name(r).replace(' ', "_") }))
            .collect();
        print_json(&json!({
            "action": act.verb(),
            "examined": ids.len(),
            "acted": count(Acted::Done),
            "not_failed": count(Acted::NotFailed),
            "live_task_exists": count(Acted::LiveTaskExists),
            "tasks": v,
        }));
        return;
    }
    let mut t = Table::new(&["RESULT", "ID"]);
    for (id, r) in ids.iter().zip(results) {
        t.row(vec![name(r).into(), escape(id)]);
    }
    t.print();
    say!(
        "{} {} of {} (not failed {}, live task exists {})",
        act.done(),
        count(Acted::Done),
        ids.len(),
        count(Acted::NotFailed),
        count(Acted::LiveTaskExists)
    );
}

/// `retry-failed` / `discard-failed` by filter.
pub fn bulk(act: Act, r: &BulkReport, json: bool) {
    if json {
        print_json(&json!({
            "action": act.verb(),
            "examined": r.examined,
            "acted": r.acted,
            "live_task_exists": r.live_task_exists,
            "calls": r.calls,
        }));
        return;
    }
    let hint = if r.live_task_exists > 0 {
        " (not retried: a live task has the id; discard the failed one, or cancel the live \
         one first)"
    } else {
        ""
    };
    say!(
        "examined {}, {} {}, live task exists {}{hint}",
        r.examined,
        act.done(),
        r.acted,
        r.live_task_exists
    );
}

/// `run-now`.
pub fn ran_now(id: &str, moved: bool, after: Option<&TaskDetail>, json: bool) {
    let run_at = after.map(|t| t.info.due_ms());
    if json {
        print_json(&json!({
            "id": id,
            "run_now": moved,
            "run_at": opt_time(run_at),
            "version": after.map(|t| t.info.version()),
        }));
        return;
    }
    if moved {
        let at = run_at.map_or("?".into(), rfc3339);
        say!("run now: {} (run-at {at})", escape(id));
    } else {
        say!("not run now: {}", escape(id));
    }
}

/// `pause` and `resume`: how many shards changed, and each shard's state after.
pub fn paused(paused: bool, asked: &[u32], changed: u32, s: &Stats, json: bool) {
    let verb = if paused { "paused" } else { "resumed" };
    if json {
        let shards: Vec<Value> = s
            .shards
            .iter()
            .map(|sh| json!({ "shard": sh.shard, "paused": sh.paused }))
            .collect();
        print_json(&json!({
            "action": if paused { "pause" } else { "resume" },
            "asked": if asked.is_empty() { Value::String("all".into()) } else { json!(asked) },
            "changed": changed,
            "paused_shards": s.paused(),
            "shards": shards,
        }));
        return;
    }
    let n = if asked.is_empty() {
        s.shards.len()
    } else {
        asked.len()
    };
    say!(
        "{verb} {changed} of {n} shard{} asked ({} already {verb}); paused now: {} of {}",
        if n == 1 { "" } else { "s" },
        n as u32 - changed.min(n as u32),
        s.paused(),
        s.shards.len()
    );
}

/// `ls`, printed page by page: fixed-width columns and the id last, so that rows align
/// without reading them all first.
pub struct Listing {
    json: bool,
    count: u64,
}

impl Listing {
    pub fn start(json: bool) -> Listing {
        if json {
            say_raw!("[");
        } else {
            say!(
                "{:<9}  {:>5}  {:<24}  {:>10}  {:>7}  {:>8}  ID",
                "STATE",
                "SHARD",
                "DUE (UTC)",
                "VERSION",
                "ATTEMPT",
                "PAYLOAD"
            );
        }
        Listing { json, count: 0 }
    }

    pub fn rows(&mut self, page: &[TaskInfo]) {
        for t in page {
            if self.json {
                let sep = if self.count == 0 { "\n  " } else { ",\n  " };
                say_raw!("{sep}{}", json_text(&task_json(t), false));
            } else {
                let rec = if t.recurring { " (recurring)" } else { "" };
                say!(
                    "{:<9}  {:>5}  {:<24}  {:>10}  {:>7}  {:>8}  {}{rec}",
                    state_name(t),
                    t.shard,
                    rfc3339(t.due_ms()),
                    t.version(),
                    t.attempt(),
                    t.payload_len,
                    escape(&t.id)
                );
            }
            self.count += 1;
        }
    }

    pub fn finish(self) {
        if self.json {
            say!("{}]", if self.count == 0 { "" } else { "\n" });
        } else {
            say!("({} tasks)", self.count);
        }
    }
}

/// A progress bar on standard error (hidden when it is not a terminal).
pub fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} tasks read, {elapsed} ({eta} left)")
    {
        bar.set_style(style);
    }
    bar
}

/// `show --json`.
fn show_json(t: &TaskDetail, rec: Option<String>, remembered: Option<u64>) {
    let i = &t.info;
    let mut v = task_json(i);
    v["remembered_until"] = opt_time(remembered);
    v["recurrence"] = rec.map_or(Value::Null, Value::String);
    v["payload_preview_hex"] = Value::String(hex(&t.payload_preview));
    v["payload_preview_utf8"] = std::str::from_utf8(&t.payload_preview)
        .map_or(Value::Null, |s| Value::String(s.to_string()));
    v["payload_preview_complete"] = Value::Bool(t.payload_preview.len() as u64 == i.payload_len);
    v["errors"] = errors_json(&t.errors);
    print_json(&v);
}

/// `show`.
/// `show`: `remembered` is until when `schedule_once` remembers the id.
pub fn show(t: &TaskDetail, remembered: Option<u64>, now_ms: u64, json: bool) {
    let i = &t.info;
    let rec = t.recurrence.as_ref().map(|r| match r {
        Recurrence::Every(d) => format!("every {}", span(*d)),
        Recurrence::Cron { pattern, zone } => {
            format!("cron {} in {}", escape(pattern), escape(zone))
        }
    });
    if json {
        show_json(t, rec, remembered);
        return;
    }
    let due = i.due_ms();
    let mut rows = vec![
        ("id", escape(&i.id)),
        ("shard", i.shard.to_string()),
        (
            "state",
            match i.state {
                TaskState::Failed { reason, .. } => format!("failed ({})", reason.as_str()),
                _ => state_name(i).to_string(),
            },
        ),
        (
            if matches!(i.state, TaskState::Failed { .. }) {
                "failed at"
            } else {
                "due"
            },
            format!("{} ({})", rfc3339(due), relative(due, now_ms)),
        ),
        ("version", i.version().to_string()),
        ("attempt", i.attempt().to_string()),
    ];
    if let Some(v) = visible_at(i) {
        rows.push((
            "visible at",
            format!(
                "{} ({}): delivered again then unless acknowledged",
                rfc3339(v),
                relative(v, now_ms)
            ),
        ));
    }
    rows.push((
        "recurrence",
        rec.unwrap_or_else(|| "none (one-shot)".into()),
    ));
    rows.push(("payload", format!("{} bytes", i.payload_len)));
    if let Some(until) = remembered {
        rows.push(("remembered", remembered_text(until, now_ms)));
    }
    for (k, v) in rows {
        say!("{k:<11} {v}");
    }
    preview(t);
    error_log(&t.errors, now_ms);
}

/// Until when `schedule_once` remembers an id, and what that means.
pub fn remembered_text(until_ms: u64, now_ms: u64) -> String {
    format!(
        "by schedule_once until {} ({}): a schedule_once of this id stores nothing until then",
        rfc3339(until_ms),
        relative(until_ms, now_ms)
    )
}

/// `show`'s error log: the failed attempts counted, since when, and each kept error.
fn error_log(log: &ErrorLog, now_ms: u64) {
    if log.failures == 0 && log.errors.is_empty() {
        return;
    }
    let since = if log.first_failed_ms > 0 {
        format!(
            " since {} ({})",
            rfc3339(log.first_failed_ms),
            relative(log.first_failed_ms, now_ms)
        )
    } else {
        String::new()
    };
    say!("{:<11} {}{since}", "failures", log.failures);
    for e in &log.errors {
        say!(
            "{:<11} attempt {}, {}: {}",
            "error",
            e.attempt,
            rfc3339(e.at_ms),
            escape(&e.error)
        );
    }
}

/// `show`'s payload: the first bytes, escaped, and in hex unless plain text.
fn preview(t: &TaskDetail) {
    let i = &t.info;
    let shown = &t.payload_preview[..t.payload_preview.len().min(SHOWN_BYTES)];
    let more = i.payload_len.saturating_sub(shown.len() as u64);
    let tail = if more > 0 {
        format!(" … {more} more bytes")
    } else {
        String::new()
    };
    if !shown.is_empty() {
        let kind = if is_plain(shown) { "text" } else { "escaped" };
        say!(
            "{:<11} \"{}\"{tail} ({kind})",
            "preview",
            escape_bytes(shown)
        );
        if !is_plain(shown) {
            say!("{:<11} {}{tail}", "hex", hex(shown));
        }
    }
}

/// `cancel`.
pub fn cancelled(ids: &[String], done: &[bool], json: bool) {
    if json {
        let v: Vec<Value> = ids
            .iter()
            .zip(done)
            .map(|(id, d)| json!({ "id": id, "cancelled": d }))
            .collect();
        print_json(&Value::Array(v));
        return;
    }
    let mut t = Table::new(&["RESULT", "ID"]);
    for (id, d) in ids.iter().zip(done) {
        let r = if *d { "cancelled" } else { "not pending" };
        t.row(vec![r.into(), escape(id)]);
    }
    t.print();
}

/// `reschedule`.
pub fn rescheduled(id: &str, moved: bool, after: Option<&TaskDetail>, json: bool) {
    let run_at = after.map(|t| t.info.due_ms());
    if json {
        print_json(&json!({
            "id": id,
            "rescheduled": moved,
            "run_at": opt_time(run_at),
            "version": after.map(|t| t.info.version()),
        }));
        return;
    }
    if moved {
        let at = run_at.map_or("?".into(), rfc3339);
        say!("rescheduled {} to {at}", escape(id));
    } else {
        say!("not rescheduled: {}", escape(id));
    }
}

/// `upcoming`.
pub fn upcoming(u: &Upcoming, json: bool) {
    let per = u.per.as_millis() as u64;
    if json {
        let slots: Vec<Value> = u
            .counts
            .iter()
            .enumerate()
            .map(|(k, c)| json!({ "start": opt_time(Some(u.start_ms + k as u64 * per)), "pending": c }))
            .collect();
        print_json(&json!({
            "now": opt_time(Some(u.now_ms)),
            "per_ms": per,
            "overdue": u.overdue,
            "total": u.overdue + u.counts.iter().sum::<u64>(),
            "slots": slots,
        }));
        return;
    }
    let max = u.counts.iter().copied().max().unwrap_or(0).max(1);
    say!(
        "pending per {} from {} ({} overdue before it)",
        span(u.per),
        rfc3339(u.start_ms),
        u.overdue
    );
    let mut t = Table::new(&["FROM (UTC)", "PENDING", ""]);
    for (k, &c) in u.counts.iter().enumerate() {
        let bar = "#".repeat(((c * 40).div_ceil(max)) as usize);
        t.row(vec![
            rfc3339(u.start_ms + k as u64 * per),
            c.to_string(),
            bar,
        ]);
    }
    t.print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_del_c1_and_bidi_controls_and_keeps_the_value() {
        let id =
            "a\u{1b}[31m\u{7f}\u{9b}2J\u{202e}\u{2066}\u{200f}\u{61c}\u{feff}é日本\u{1f600}\\\"";
        let v = json!({ "id": id, "n": [1, 2] });
        for pretty in [false, true] {
            let text = json_text(&v, pretty);
            assert!(
                !text.chars().any(|c| needs_escape(c) && c != '\n'),
                "{text:?}"
            );
            assert!(text.contains(r"\u007f\u009b2J\u202e\u2066\u200f\u061c\ufeffé日本😀"));
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        }
        assert_eq!(
            json_text(&v, true),
            serde_json::to_string_pretty(&v).unwrap().replace(
                "\u{7f}\u{9b}2J\u{202e}\u{2066}\u{200f}\u{61c}\u{feff}",
                r"\u007f\u009b2J\u202e\u2066\u200f\u061c\ufeff"
            )
        );
    }
}
