//! `GET /failed?error=TEXT`: the failed tasks, oldest failure first, filterable by error
//! text; `POST /retry-failed` and `POST /discard-failed`: "Retry all shown" and "Discard all
//! shown", by the same filter; `POST /pause` and `POST /resume`: the overview's buttons. The
//! writes are refused as the task page's are ([`authorize`]).

use std::fmt::Write as _;

use tickwheel_redis::{BulkReport, Error, FailedFilter, FailedTask, Stats};

use super::http::{field, Request, Response};
use super::page::{document, error, header, id_text, text, unavailable};
use super::task::{authorize, failed_task_href, from_hex_text};
use super::App;
use crate::tasks::escape::hex;
use crate::time::{relative, rfc3339};

/// Failed tasks listed on the page.
pub const FAILED_SHOWN: usize = 100;

/// The most characters of an error text the list shows (the task page shows them whole).
const ERROR_SHOWN: usize = 300;

/// The longest error filter taken, bytes.
const MAX_FILTER: usize = 1024;

/// The filter of the page and of its bulk forms: the error text, and (for the forms) the
/// failed-at bound that keeps "all shown" to what was shown.
fn filter_of(
    error_text: Option<&str>,
    failed_before_ms: Option<u64>,
    limit: Option<usize>,
) -> Result<FailedFilter, Response> {
    let error_contains = match error_text {
        None | Some("") => None,
        Some(e) if e.len() > MAX_FILTER => {
            return Err(error(
                400,
                &format!(
                    "An error filter of {} bytes: at most {MAX_FILTER}.",
                    e.len()
                ),
            ))
        }
        Some(e) => Some(e.to_string()),
    };
    Ok(FailedFilter {
        error_contains,
        failed_before_ms,
        limit,
        ..FailedFilter::default()
    })
}

/// `GET /failed?error=TEXT`.
pub fn failed(app: &App, req: &Request) -> Response {
    let filter = match filter_of(req.query("error"), None, Some(FAILED_SHOWN + 1)) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let read = {
        let mut ins = app.inspector();
        ins.failed(&filter)
            .and_then(|tasks| Ok((tasks, ins.stats()?)))
    };
    let (mut tasks, stats) = match read {
        Ok(r) => r,
        Err(e) => return unavailable(&e),
    };
    if let Some(gone) = app.namespace_gone() {
        return gone;
    }
    let more = tasks.len() > FAILED_SHOWN;
    tasks.truncate(FAILED_SHOWN);
    let mut b = header(app, stats.now_ms);
    let given = filter.error_contains.as_deref().unwrap_or("");
    let _ = write!(
        b,
        "<section><h2>Failed tasks</h2><form method=\"get\" action=\"/failed\" \
         id=\"failed-filter\"><label>Error contains <input name=\"error\" size=\"40\" \
         value=\"{}\"></label> <button>Filter</button> <a href=\"/failed\">All</a></form>",
        text(given)
    );
    let of = stats.failed();
    let heading = match (tasks.len(), more, given.is_empty()) {
        (0, _, true) => "No failed task.".to_string(),
        (0, _, false) => "No failed task has an error containing that text.".to_string(),
        (n, false, true) => format!("All {n} failed tasks, oldest failure first."),
        (n, false, false) => format!(
            "The {n} failed tasks with an error containing <code>{}</code>, oldest failure \
             first.",
            text(given)
        ),
        (n, true, _) => format!(
            "The {n} oldest failures that match, of more ({of} failed tasks in all): retry or \
             discard these to see the next."
        ),
    };
    let _ = write!(b, "<p id=\"failed-heading\">{heading}</p>");
    failed_table(&mut b, &tasks, stats.now_ms);
    bulk_forms(&mut b, app, &tasks, given);
    b.push_str("</section>");
    Response {
        status: 200,
        body: document(&format!("failed · {}", app.namespace), &b),
    }
}

/// The list: id (linked to its page), reason, attempts, failed at, the last error.
fn failed_table(b: &mut String, tasks: &[FailedTask], now_ms: u64) {
    b.push_str(
        "<table id=\"failed-tasks\"><thead><tr><th>Task</th><th>Shard</th><th>Reason</th>\
         <th>Attempts</th><th>Failed at</th><th>Last error</th></tr></thead><tbody>",
    );
    for t in tasks {
        let last = match t.errors.errors.last() {
            Some(e) => {
                let shown: String = e.error.chars().take(ERROR_SHOWN).collect();
                let cut = if shown.len() < e.error.len() {
                    "…"
                } else {
                    ""
                };
                format!("<code>{}</code>{cut}", text(&shown))
            }
            None => "—".into(),
        };
        let _ = write!(
            b,
            "<tr><td class=\"id\"><a href=\"{}\">{}</a></td><td>{}</td>\
             <td class=\"reason\">{}</td><td class=\"attempts\">{}</td>\
             <td class=\"failed-at\" title=\"{}\">{}</td><td class=\"error\">{last}</td></tr>",
            text(&failed_task_href(&t.id)),
            id_text(&t.id),
            t.shard,
            t.reason.as_str(),
            t.attempts,
            rfc3339(t.failed_at_ms),
            relative(t.failed_at_ms, now_ms),
        );
    }
    b.push_str("</tbody></table>");
}

/// "Retry all shown" and "Discard all shown": the page's filter (as hex, `error_hex`, so
/// that it is exactly the page's whatever it holds), and a failed-at bound just past the
/// last task shown, so that a task failing meanwhile (or beyond the list) is not
/// acted on unseen.
fn bulk_forms(b: &mut String, app: &App, tasks: &[FailedTask], given: &str) {
    let Some(last) = tasks.iter().map(|t| t.failed_at_ms).max() else {
        return;
    };
    if app.writes.is_none() {
        b.push_str(
            "<p class=\"note\" id=\"read-only\">Read-only: start the dashboard with \
             <code>--allow-writes</code> and a token to retry or discard failed tasks here.</p>",
        );
        return;
    }
    let hidden = format!(
        "<input type=\"hidden\" name=\"error_hex\" value=\"{}\">\
         <input type=\"hidden\" name=\"failed_before_ms\" value=\"{}\">\
         <label>Token <input type=\"password\" name=\"token\" required \
         autocomplete=\"off\"></label>",
        hex(given.as_bytes()),
        last + 1
    );
    let n = tasks.len();
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/retry-failed\" id=\"retry-shown\">{hidden} \
         <button>Retry all shown ({n})</button></form>\
         <form method=\"post\" action=\"/discard-failed\" id=\"discard-shown\">{hidden} \
         <button>Discard all shown ({n})</button></form>\
         <p class=\"note\">By the same filter, up to the last failure shown. A task whose id \
         a live task has (scheduled again, or a recurring series) is not retried.</p>"
    );
}

/// `POST /retry-failed` and `POST /discard-failed`: every failed task the form's filter
/// selects.
pub fn bulk_write(app: &App, req: &Request) -> Response {
    let form = match authorize(app, req) {
        Ok(form) => form,
        Err(refused) => return refused,
    };
    let before = match field(&form, "failed_before_ms").map(str::parse::<u64>) {
        None => None,
        Some(Ok(ms)) => Some(ms),
        Some(Err(_)) => return error(400, "failed_before_ms is not a number of ms."),
    };
    // The filter as hex, exactly (an attribute value shows control characters escaped).
    let from_hex;
    let error_text = match field(&form, "error_hex") {
        Some(h) => match from_hex_text(h) {
            Some(e) => {
                from_hex = e;
                Some(from_hex.as_str())
            }
            None => return error(400, "error_hex is not the hex of UTF-8 text."),
        },
        None => field(&form, "error"),
    };
    let filter = match filter_of(error_text, before, None) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let retry = req.path == "/retry-failed";
    let Some(mut producer) = app.producer() else {
        return error(403, "This dashboard is read-only.");
    };
    let done: Result<BulkReport, Error> = if retry {
        producer.retry_failed_where(&filter)
    } else {
        producer.discard_failed_where(&filter)
    };
    drop(producer);
    let verb = if retry { "retried" } else { "discarded" };
    match done {
        Ok(r) => Response {
            status: 200,
            body: document(
                verb,
                &format!(
                    "<h1>Failed tasks {verb}</h1><p id=\"result\">Examined {}, {verb} {}, \
                     live task exists {}.</p><p><a href=\"/failed\">The failed tasks</a> · \
                     <a href=\"/\">The overview</a></p>",
                    r.examined, r.acted, r.live_task_exists
                ),
            ),
        },
        Err(e @ Error::InvalidConfig(_)) => error(400, &e.to_string()),
        Err(e) => unavailable(&e),
    }
}

/// The overview's pause and resume forms (with `--allow-writes`): every shard, or one.
pub fn pause_forms(b: &mut String, app: &App, stats: &Stats) {
    if app.writes.is_none() {
        return;
    }
    let options: String = std::iter::once("<option value=\"\">all shards</option>".to_string())
        .chain(
            stats
                .shards
                .iter()
                .map(|s| format!("<option value=\"{0}\">shard {0}</option>", s.shard)),
        )
        .collect();
    let form = |action: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/{action}\" id=\"{action}\"><select name=\"shard\">\
             {options}</select> <label>Token <input type=\"password\" name=\"token\" required \
             autocomplete=\"off\"></label> <button>{label}</button></form>"
        )
    };
    let _ = write!(
        b,
        "<section><h2>Pause and resume</h2>{}{}<p class=\"note\">While a shard is paused, \
         workers claim nothing from it; tasks that fall due meanwhile are delivered on resume, \
         in run-at order.</p></section>",
        form("pause", "Pause"),
        form("resume", "Resume")
    );
}

/// `POST /pause` and `POST /resume`: every shard (`shard` empty or absent) or one.
pub fn pause_write(app: &App, req: &Request) -> Response {
    let form = match authorize(app, req) {
        Ok(form) => form,
        Err(refused) => return refused,
    };
    let shard = match field(&form, "shard") {
        None | Some("") => None,
        Some(s) => match s.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => return error(400, &format!("Shard {s:?} is not a shard number.")),
        },
    };
    let pause = req.path == "/pause";
    let Some(mut producer) = app.producer() else {
        return error(403, "This dashboard is read-only.");
    };
    let done = match (shard, pause) {
        (Some(s), p) => producer.pause_shards(&[s], p),
        (None, true) => producer.pause(),
        (None, false) => producer.resume(),
    };
    drop(producer);
    let verb = if pause { "paused" } else { "resumed" };
    let which = shard.map_or("every shard".to_string(), |s| format!("shard {s}"));
    match done {
        Ok(changed) => Response {
            status: 200,
            body: document(
                verb,
                &format!(
                    "<h1>Shards {verb}</h1><p id=\"result\">Asked for {which}: {changed} \
                     {verb} (the others were already).</p><p><a href=\"/\">The overview</a></p>"
                ),
            ),
        },
        Err(e @ Error::InvalidConfig(_)) => error(400, &e.to_string()),
        Err(e) => unavailable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_error_filters_are_refused() {
        assert!(filter_of(Some(&"x".repeat(MAX_FILTER + 1)), None, None).is_err());
        let f = filter_of(Some(""), Some(5), Some(3)).unwrap();
        assert_eq!(
            (f.error_contains, f.failed_before_ms, f.limit),
            (None, Some(5), Some(3))
        );
    }
}
