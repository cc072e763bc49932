//! `GET /task?id=ID`: one task in full, with its error log; `POST /cancel`,
//! `POST /reschedule`, and for a failed task `POST /retry` and `POST /discard`: the writes,
//! refused (403) without `--allow-writes`, from another site, or without the token.

use std::fmt::Write as _;
use std::time::Duration;

use tickwheel::cron::jiff::{SignedDuration, Timestamp};
use tickwheel_redis::{Acted, Error, Recurrence, RunAt, TaskDetail, TaskState, MAX_ID_LEN};

use super::http::{field, Request, Response};
use super::page::{document, error, header, id_text, text, unavailable};
use super::{check_same_origin, token_matches, App};
use crate::tasks::escape::{escape, hex, unescape};
use crate::time::{relative, rfc3339, span};

/// Payload bytes shown on a task's page.
const PREVIEW_SHOWN: usize = 1024;

/// A task id from a query or a form: present, 1 to [`MAX_ID_LEN`] bytes.
fn task_id(id: Option<&str>) -> Result<&str, Response> {
    match id {
        None => Err(error(400, "Give a task id: /task?id=...")),
        Some("") => Err(error(400, "The task id is empty.")),
        Some(id) if id.len() > MAX_ID_LEN => Err(error(
            400,
            &format!(
                "A task id of {} bytes: ids are 1 to {MAX_ID_LEN} bytes.",
                id.len()
            ),
        )),
        Some(id) => Ok(id),
    }
}

/// `GET /task?id=ID`: one task in full (`&escaped=1`: the id as the pages show it, its
/// escapes read; `&failed=1`: the failed task of that id, even when a live task has it too,
/// as the Failed view links it).
pub fn task(app: &App, req: &Request) -> Response {
    let unescaped;
    let given = match (req.query("id"), req.query("escaped")) {
        (Some(id), Some(_)) => match unescape(id) {
            Ok(id) => {
                unescaped = id;
                Some(unescaped.as_str())
            }
            Err(why) => return error(400, &format!("Task id {}: {why}", escape(id))),
        },
        (id, _) => id,
    };
    let id = match task_id(given) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let read = {
        let mut ins = app.inspector();
        // The page's "now" is Redis's clock.
        let found = if req.query("failed").is_some() {
            ins.show_failed(id)
        } else {
            ins.show(id)
        };
        found.and_then(|found| Ok((found, ins.remembered(id)?, ins.now_ms()?)))
    };
    let (found, remembered, now_ms) = match read {
        Ok(r) => r,
        Err(e @ Error::InvalidId { .. }) => return error(400, &e.to_string()),
        Err(e) => return unavailable(&e),
    };
    if found.is_none() {
        // "No such task" would be true but hide the cause.
        if let Some(gone) = app.namespace_gone() {
            return gone;
        }
    }
    let mut b = header(app, now_ms);
    let Some(detail) = found else {
        let once = remembered.map_or(String::new(), |until| {
            format!(
                "<p id=\"remembered\">Remembered by schedule_once: {}</p>",
                remembered_html(until, now_ms)
            )
        });
        let _ = write!(
            b,
            "<section><h2>No such task</h2><p id=\"not-found\">No task <code id=\"task-id\">{}\
             </code> in this namespace: never scheduled, cancelled, or acknowledged.</p>{once}\
             </section>",
            id_text(id)
        );
        return Response {
            status: 404,
            body: document("No such task", &b),
        };
    };
    task_details(&mut b, &detail, remembered, now_ms);
    let failed = matches!(detail.info.state, TaskState::Failed { .. });
    b.push_str(&changes(app, &detail.info.id, failed));
    Response {
        status: 200,
        body: document(&format!("task {}", escape(&detail.info.id)), &b),
    }
}

/// The cancel and reschedule forms (retry and discard for a failed task) with
/// `--allow-writes`, else a note saying how to get them.
fn changes(app: &App, id: &str, failed: bool) -> String {
    if app.writes.is_none() {
        return "<p class=\"note\" id=\"read-only\">Read-only: start the dashboard with \
                <code>--allow-writes</code> and a token to change tasks here.</p>"
            .into();
    }
    let hidden = format!(
        "<input type=\"hidden\" name=\"id_hex\" value=\"{}\">\
         <label>Token <input type=\"password\" name=\"token\" required \
         autocomplete=\"off\"></label>",
        hex(id.as_bytes())
    );
    if failed {
        return format!(
            "<section><h2>Change it</h2>\
             <form method=\"post\" action=\"/retry\" id=\"retry\">{hidden} \
             <button>Retry the task</button></form>\
             <form method=\"post\" action=\"/discard\" id=\"discard\">{hidden} \
             <button>Discard the task</button></form>\
             <p class=\"note\">Retry: pending again at once, with fresh attempts (its errors \
             are kept). Discard: its record and errors go.</p></section>"
        );
    }
    format!(
        "<section><h2>Change it</h2>\
         <form method=\"post\" action=\"/cancel\" id=\"cancel\">{hidden} \
         <button>Cancel the task</button></form>\
         <form method=\"post\" action=\"/reschedule\" id=\"reschedule\">{hidden} \
         <label>Run at <input name=\"at\" required placeholder=\"2026-11-26T09:00:00Z or 10m\">\
         </label> <button>Reschedule</button></form>\
         <p class=\"note\">A task in flight (or claimed in its last second) can be neither \
         cancelled nor rescheduled.</p></section>"
    )
}

/// A task's fields and its payload preview.
fn task_details(b: &mut String, d: &TaskDetail, remembered: Option<u64>, now_ms: u64) {
    let t = &d.info;
    let at = |ms: u64| format!("{} ({})", rfc3339(ms), relative(ms, now_ms));
    let mut rows: Vec<(&str, &str, String)> = vec![("task-id", "Id", id_text(&t.id))];
    match t.state {
        TaskState::Pending {
            run_at_ms,
            attempts,
            version,
        } => {
            rows.push(("state", "State", "pending".into()));
            rows.push(("run-at", "Run at", at(run_at_ms)));
            rows.push(("attempt", "Deliveries so far", attempts.to_string()));
            rows.push(("version", "Version", version.to_string()));
        }
        TaskState::InFlight {
            due_ms,
            attempt,
            version,
            visible_at_ms,
        } => {
            rows.push(("state", "State", "in flight".into()));
            rows.push(("run-at", "Delivered for run-at", at(due_ms)));
            rows.push((
                "attempt",
                "Attempt",
                format!(
                    "{attempt}{}",
                    if attempt > 1 { " (redelivered)" } else { "" }
                ),
            ));
            rows.push(("version", "Version", version.to_string()));
            rows.push(("visible-at", "Delivered again at", at(visible_at_ms)));
        }
        TaskState::Failed {
            failed_at_ms,
            attempts,
            version,
            reason,
        } => {
            rows.push(("state", "State", format!("failed ({})", reason.as_str())));
            rows.push(("failed-at", "Failed at", at(failed_at_ms)));
            rows.push(("attempt", "Attempts", attempts.to_string()));
            rows.push(("version", "Version", version.to_string()));
        }
        TaskState::Unknown => rows.push(("state", "State", "unknown".into())),
    }
    rows.push(("shard", "Shard", t.shard.to_string()));
    let recurrence = match &d.recurrence {
        None => "none (one-shot)".into(),
        Some(Recurrence::Every(p)) => format!("every {}", span(*p)),
        Some(Recurrence::Cron { pattern, zone }) => {
            format!("cron <code>{}</code> in {}", text(pattern), text(zone))
        }
    };
    rows.push(("recurrence", "Recurrence", recurrence));
    if let Some(until) = remembered {
        rows.push((
            "remembered",
            "Remembered by schedule_once",
            remembered_html(until, now_ms),
        ));
    }
    if d.errors.failures > 0 || !d.errors.errors.is_empty() {
        rows.push((
            "failures",
            "Failed attempts",
            format!(
                "{} since {}",
                d.errors.failures,
                at(d.errors.first_failed_ms)
            ),
        ));
        for e in &d.errors.errors {
            rows.push((
                "error",
                "Error",
                format!(
                    "attempt {}, {}: <code>{}</code>",
                    e.attempt,
                    at(e.at_ms),
                    text(&e.error)
                ),
            ));
        }
    }
    rows.push((
        "payload-size",
        "Payload",
        format!("{} bytes", t.payload_len),
    ));
    b.push_str("<section><h2>Task</h2><table class=\"glance\">");
    for (id, label, value) in rows {
        let _ = write!(b, "<tr><th>{label}</th><td id=\"{id}\">{value}</td></tr>");
    }
    b.push_str("</table>");
    payload(b, d);
    b.push_str("</section>");
}

/// The payload's first bytes: as text when they are UTF-8, else as a hex dump.
fn payload(b: &mut String, d: &TaskDetail) {
    let t = &d.info;
    let shown = &d.payload_preview[..d.payload_preview.len().min(PREVIEW_SHOWN)];
    let of = if (shown.len() as u64) < t.payload_len {
        format!("first {} of {} bytes", shown.len(), t.payload_len)
    } else {
        format!("all {} bytes", t.payload_len)
    };
    match std::str::from_utf8(shown) {
        // A cut in the middle of a character still counts as text.
        Ok(s) => preview(b, "UTF-8", &of, &text(s)),
        Err(e) if e.error_len().is_none() && (shown.len() as u64) < t.payload_len => {
            let s = std::str::from_utf8(&shown[..e.valid_up_to()]).unwrap_or("");
            preview(b, "UTF-8", &of, &text(s));
        }
        Err(_) => preview(b, "hex", &of, &hex_dump(shown)),
    }
}

fn preview(b: &mut String, kind: &str, of: &str, body: &str) {
    let _ = write!(
        b,
        "<h3>Payload preview ({kind}, {of})</h3><pre id=\"payload\" data-kind=\"{kind}\">{body}</pre>"
    );
}

/// 16 bytes a line: offset, hex, printable ASCII.
fn hex_dump(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "{:08x}  ", i * 16);
        for b in line {
            let _ = write!(s, "{b:02x} ");
        }
        s.push_str(&"   ".repeat(16 - line.len()));
        let ascii: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(s, " {}", text(&ascii));
    }
    s
}

/// `POST /cancel` and `POST /reschedule`.
pub fn write(app: &App, req: &Request) -> Response {
    let form = match authorize(app, req) {
        Ok(form) => form,
        Err(refused) => return refused,
    };
    let from_hex;
    let given = match field(&form, "id_hex") {
        Some(h) => match from_hex_text(h) {
            Some(id) => {
                from_hex = id;
                Some(from_hex.as_str())
            }
            None => return error(400, "id_hex is not the hex of a UTF-8 task id."),
        },
        None => field(&form, "id"),
    };
    let id = match task_id(given) {
        Ok(id) => id,
        Err(r) => return r,
    };
    if matches!(req.path.as_str(), "/retry" | "/discard") {
        return failed_write(app, req.path == "/retry", id);
    }
    let reschedule = req.path == "/reschedule";
    let run_at = if reschedule {
        match parse_run_at(field(&form, "at").unwrap_or("")) {
            Ok(r) => Some(r),
            Err(why) => return error(400, &why),
        }
    } else {
        None
    };
    let Some(mut producer) = app.producer() else {
        return error(403, "This dashboard is read-only.");
    };
    let done = match run_at {
        Some(at) => producer.reschedule(id, at),
        None => producer.cancel(id),
    };
    drop(producer);
    let (verb, noun) = if reschedule {
        ("rescheduled", "reschedule")
    } else {
        ("cancelled", "cancel")
    };
    match done {
        Ok(true) => Response {
            status: 200,
            body: document(
                verb,
                &format!(
                    "<h1>Task {verb}</h1><p id=\"result\">Task <code>{}</code> {verb}.</p>\
                     <p><a href=\"{}\">The task</a> · <a href=\"/\">The overview</a></p>",
                    id_text(id),
                    text(&task_href(id))
                ),
            ),
        },
        // Not pending, or the whole namespace deleted: say which.
        Ok(false) => app.namespace_gone().unwrap_or_else(|| {
            error(
                409,
                &format!(
                    "Could not {noun} task {id:?}: it is not pending (in flight, claimed for \
                     delivery in its last second, or gone)."
                ),
            )
        }),
        Err(e @ (Error::InvalidId { .. } | Error::InvalidRunAt)) => error(400, &e.to_string()),
        Err(e) => unavailable(&e),
    }
}

/// `POST /retry` and `POST /discard` of an authorized form: one failed task.
fn failed_write(app: &App, retry: bool, id: &str) -> Response {
    let Some(mut producer) = app.producer() else {
        return error(403, "This dashboard is read-only.");
    };
    let done = if retry {
        producer.retry_failed([id])
    } else {
        producer.discard_failed([id])
    };
    drop(producer);
    let (verb, noun) = if retry {
        ("retried", "retry")
    } else {
        ("discarded", "discard")
    };
    match done.map(|r| r.first().copied()) {
        Ok(Some(Acted::Done)) => Response {
            status: 200,
            body: document(
                verb,
                &format!(
                    "<h1>Task {verb}</h1><p id=\"result\">Task <code>{}</code> {verb}.</p>\
                     <p><a href=\"{}\">The task</a> · <a href=\"/failed\">The failed tasks</a> \
                     · <a href=\"/\">The overview</a></p>",
                    id_text(id),
                    text(&task_href(id))
                ),
            ),
        },
        Ok(Some(Acted::LiveTaskExists)) => error(
            409,
            &format!(
                "Could not {noun} task {}: a live task has its id (scheduled again, or the \
                 series of a recurring task). Discard the failed one, or cancel the live one \
                 first.",
                escape(id)
            ),
        ),
        Ok(_) => app.namespace_gone().unwrap_or_else(|| {
            error(
                409,
                &format!(
                    "Could not {noun} task {}: it is not failed (never failed, retried or \
                     discarded already, or removed by the retention bound).",
                    escape(id)
                ),
            )
        }),
        Err(e @ Error::InvalidId { .. }) => error(400, &e.to_string()),
        Err(e) => unavailable(&e),
    }
}

/// The text `hex` stands for (two lowercase or uppercase digits a byte), if UTF-8: the
/// `id_hex` of the write forms, which carry the id exactly whatever it holds (an attribute
/// value cannot: a control character in it would be shown escaped, or mapped by the HTML
/// parser).
pub(super) fn from_hex_text(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The form of a write that may go ahead, or the 403 that refuses it: without
/// `--allow-writes`, from another site, without the token.
pub(super) fn authorize(app: &App, req: &Request) -> Result<Vec<(String, String)>, Response> {
    if app.writes.is_none() {
        return Err(error(
            403,
            "This dashboard is read-only: start it with --allow-writes and a token to change \
             tasks.",
        ));
    }
    if let Err(why) = check_same_origin(req) {
        return Err(error(
            403,
            &format!("{why} Writes are accepted from this dashboard's own forms only."),
        ));
    }
    let form = req.form();
    let token = field(&form, "token").unwrap_or("");
    if !token_matches(app, token.as_bytes()) {
        return Err(error(403, "Missing or wrong token."));
    }
    Ok(form)
}

/// A run-at from a form: RFC 3339 (`2026-11-26T09:00:00Z`) or a delay from now (`10m`,
/// `1h30m`, by the namespace's clock).
fn parse_run_at(s: &str) -> Result<RunAt, String> {
    let s = s.trim();
    if let Ok(t) = s.parse::<Timestamp>() {
        return u64::try_from(t.as_millisecond())
            .map(RunAt::AtMillis)
            .map_err(|_| format!("Run at {s:?}: before 1970."));
    }
    let d: SignedDuration = s.strip_prefix('+').unwrap_or(s).parse().map_err(|_| {
        format!(
            "Run at {s:?}: give an RFC 3339 instant (2026-11-26T09:00:00Z) or a delay from \
             now (90s, 10m, 1h30m)."
        )
    })?;
    Duration::try_from(d)
        .map(RunAt::After)
        .map_err(|_| format!("Run at {s:?}: a delay must not be negative."))
}

/// The link to a task's page, its id URL-encoded (HTML-escape it too, as every attribute).
pub fn task_href(id: &str) -> String {
    format!(
        "/task?id={}",
        form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    )
}

/// The link to a failed task's page: its failed record, whatever live task has the id.
pub fn failed_task_href(id: &str) -> String {
    format!("{}&failed=1", task_href(id))
}

/// Until when `schedule_once` remembers an id, and what that means (no user data).
fn remembered_html(until_ms: u64, now_ms: u64) -> String {
    format!(
        "until {} ({}): a schedule_once of this id stores nothing until then",
        rfc3339(until_ms),
        relative(until_ms, now_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_encoded_payloads_dumped_times_parsed() {
        assert_eq!(task_href("a b&c=<d>"), "/task?id=a+b%26c%3D%3Cd%3E");
        assert!(hex_dump(b"\x00<a>").contains("00 3c 61 3e"));
        assert!(hex_dump(b"\x00<a>").contains(".&lt;a&gt;"));
        assert!(parse_run_at("10m").is_ok() && parse_run_at("2026-11-26T09:00:00Z").is_ok());
        assert!(parse_run_at("tomorrow").is_err() && parse_run_at("-5m").is_err());
        let id = "ctl\t\u{1b}\u{9b}日";
        assert_eq!(from_hex_text(&hex(id.as_bytes())).as_deref(), Some(id));
        assert_eq!(from_hex_text("6162").as_deref(), Some("ab"));
        assert_eq!(from_hex_text("6A6b").as_deref(), Some("jk"));
        for bad in ["6", "zz", "ff", "+1", "é1"] {
            assert_eq!(from_hex_text(bad), None, "{bad}");
        }
    }
}
