//! The pages: the namespace at a glance (`/`), one task (`/task?id=`), the writes
//! (`POST /cancel`, `POST /reschedule`), and error pages. Everything that comes from Redis or
//! the request is escaped by [`text`] (HTML, and control or bidirectional characters shown as
//! `\u{..}`); ids in links are URL-encoded by [`task_href`].

use std::fmt::Write as _;
use std::time::Duration;

use tickwheel::schedule::jiff::{SignedDuration, Timestamp};
use tickwheel_redis::{
    Error, ListFilter, Recurrence, RunAt, StateFilter, Stats, TaskDetail, TaskInfo, TaskState,
    Upcoming, MAX_ID_LEN,
};

use super::http::{field, Request, Response};
use super::{check_same_origin, token_matches, App};

/// In-flight tasks listed on the overview.
const IN_FLIGHT_SHOWN: usize = 100;

/// Live workers listed on the overview.
const WORKERS_SHOWN: usize = 50;

/// Payload bytes shown on a task's page.
const PREVIEW_SHOWN: usize = 1024;

/// The chart's horizons, hours.
const HOURS: [u32; 5] = [1, 3, 6, 12, 24];

/// The longest chart horizon, hours (one bar a minute).
const MAX_HOURS: u32 = 48;

/// An error page.
pub fn error(status: u16, message: &str) -> Response {
    let title = match status {
        400 => "400 Bad Request",
        403 => "403 Forbidden",
        404 => "404 Not Found",
        405 => "405 Method Not Allowed",
        409 => "409 Conflict",
        503 => "503 Service Unavailable",
        _ => "Error",
    };
    Response {
        status,
        body: document(
            title,
            &format!(
                "<h1>{title}</h1><p id=\"message\">{}</p><p><a href=\"/\">Back to the \
                 overview</a></p>",
                text(message)
            ),
        ),
    }
}

/// Redis could not be read while serving a page.
fn unavailable(e: &Error) -> Response {
    error(
        503,
        &format!("Redis could not be read: {e}. Reload to try again."),
    )
}

/// `GET /?hours=N`: totals, the upcoming-tasks chart, the shards, the workers, the tasks
/// in flight.
pub fn overview(app: &App, req: &Request) -> Response {
    let hours = match req.query("hours") {
        None => 3,
        Some(h) => match h.parse::<u32>() {
            Ok(h) if (1..=MAX_HOURS).contains(&h) => h,
            _ => {
                return error(
                    400,
                    &format!("hours={h}: give a whole number of hours from 1 to {MAX_HOURS}."),
                )
            }
        },
    };
    let (stats, upcoming, in_flight) = {
        let mut ins = app.inspector();
        let stats = match ins.stats() {
            Ok(s) => s,
            Err(e) => return unavailable(&e),
        };
        let upcoming = match ins.upcoming(
            Duration::from_secs(60),
            Duration::from_secs(3600 * u64::from(hours)),
        ) {
            Ok(u) => u,
            Err(e) => return unavailable(&e),
        };
        let in_flight = match ins.list(&ListFilter {
            state: StateFilter::InFlight,
            limit: Some(IN_FLIGHT_SHOWN),
            ..ListFilter::default()
        }) {
            Ok(l) => l,
            Err(e) => return unavailable(&e),
        };
        (stats, upcoming, in_flight)
    };
    let mut b = header(app, stats.now_ms);
    glance(&mut b, &stats, &upcoming);
    let _ = write!(
        b,
        "<section><h2>Upcoming tasks per minute</h2><p class=\"choice\">Next: {}</p>{}</section>",
        HOURS
            .iter()
            .map(|&h| if h == hours {
                format!("<b>{h} h</b>")
            } else {
                format!("<a href=\"/?hours={h}\">{h} h</a>")
            })
            .collect::<Vec<_>>()
            .join(" · "),
        chart(&upcoming, hours)
    );
    shards(&mut b, &stats);
    in_flight_table(&mut b, &stats, &in_flight);
    workers(&mut b, &stats);
    Response {
        status: 200,
        body: document(&format!("tickwheel · {}", app.namespace), &b),
    }
}

/// The title bar and the search form.
fn header(app: &App, now_ms: u64) -> String {
    format!(
        "<header><h1><a href=\"/\">tickwheel</a> · namespace <code id=\"namespace\">{ns}</code></h1>\
         <p>{redis} · read at {now} (Redis clock) · {mode}</p>\
         <form method=\"get\" action=\"/task\" id=\"search\"><label>Task id \
         <input name=\"id\" size=\"40\" required></label> <button>Show</button></form></header>",
        ns = text(&app.namespace),
        redis = text(&app.redis),
        now = rfc3339(now_ms),
        mode = if app.writes.is_some() {
            "<span class=\"warn\">cancel and reschedule enabled (token required)</span>"
        } else {
            "read-only"
        },
    )
}

/// The totals, and what the page cannot know.
fn glance(b: &mut String, stats: &Stats, up: &Upcoming) {
    let next = match stats.next_run_at_ms() {
        Some(ms) => format!("{} ({})", rfc3339(ms), relative(ms, stats.now_ms)),
        None => "none".into(),
    };
    let rows = [
        ("pending", "Pending", stats.pending().to_string()),
        ("in-flight", "In flight", stats.in_flight().to_string()),
        (
            "in-flight-expired",
            "In flight past their visibility deadline (to be delivered again)",
            stats.in_flight_expired().to_string(),
        ),
        (
            "overdue",
            "Pending and overdue (run-at before this second)",
            up.overdue.to_string(),
        ),
        ("next-run-at", "Earliest pending run-at", next),
        (
            "live-workers",
            "Live workers",
            stats.live_workers.to_string(),
        ),
        (
            "shards-unowned",
            "Shards without a live lease",
            format!("{} of {}", stats.unowned(), stats.shards.len()),
        ),
    ];
    b.push_str("<section><h2>At a glance</h2><table class=\"glance\">");
    for (id, label, value) in rows {
        let _ = write!(b, "<tr><th>{label}</th><td id=\"{id}\">{value}</td></tr>");
    }
    b.push_str(
        "</table><p class=\"note\" id=\"not-available\">Not shown: delivery and redelivery \
         rates and lateness percentiles. Each worker counts them in its own memory (served for \
         Prometheus by <code>tickwheel-redis-worker --metrics</code>); Redis keeps no history \
         of deliveries, and this page reads only Redis. The overdue count above is the \
         lateness Redis can show: tasks whose run-at has passed and that no worker has \
         claimed.</p></section>",
    );
}

/// The upcoming tasks per minute as an SVG bar chart, with a title per bar.
fn chart(up: &Upcoming, hours: u32) -> String {
    const W: f64 = 960.0;
    const H: f64 = 240.0;
    const LEFT: f64 = 56.0;
    const BOTTOM: f64 = 28.0;
    const TOP: f64 = 12.0;
    let n = up.counts.len().max(1);
    let max = up.counts.iter().copied().max().unwrap_or(0).max(1);
    let total: u64 = up.counts.iter().sum();
    let (pw, ph) = (W - LEFT - 8.0, H - BOTTOM - TOP);
    let bw = pw / n as f64;
    let per_ms = up.per.as_millis() as u64;
    let mut s = format!(
        "<svg id=\"upcoming\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" \
         width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"Upcoming tasks per minute\">\
         <rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" class=\"plot\"/>"
    );
    for (frac, label) in [(0.0, 0), (0.5, max / 2), (1.0, max)] {
        let y = TOP + ph * (1.0 - frac);
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"grid\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0
        );
    }
    // An hour label every `step` hours, on whole hours.
    let step_ms = 3_600_000 * u64::from(hours.div_ceil(8).max(1));
    let end_ms = up.start_ms + per_ms * n as u64;
    let mut t = up.start_ms.div_ceil(step_ms) * step_ms;
    while t < end_ms {
        let x = LEFT + pw * (t - up.start_ms) as f64 / (end_ms - up.start_ms) as f64;
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" class=\"grid\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + ph + 4.0,
            H - 8.0,
            hhmm(t)
        );
        t += step_ms;
    }
    for (i, &c) in up.counts.iter().enumerate().filter(|(_, &c)| c > 0) {
        let h = (ph * c as f64 / max as f64).max(1.0);
        let _ = write!(
            s,
            "<rect class=\"bar\" data-minute=\"{i}\" data-count=\"{c}\" x=\"{:.2}\" y=\"{:.2}\" \
             width=\"{:.2}\" height=\"{h:.2}\"><title>{} UTC: {c} tasks</title></rect>",
            LEFT + bw * i as f64,
            TOP + ph - h,
            (bw - 0.5).max(0.5),
            hhmm(up.start_ms + per_ms * i as u64)
        );
    }
    s.push_str("</svg>");
    let _ = write!(
        s,
        "<p id=\"upcoming-total\">{total} tasks due in the next {hours} h (bars per minute, \
         times in UTC); {} overdue.</p>",
        up.overdue
    );
    s
}

/// The shards: owner, epoch, lease left, counts, next run-at.
fn shards(b: &mut String, stats: &Stats) {
    b.push_str(
        "<section><h2>Shards</h2><table id=\"shards\"><thead><tr><th>Shard</th><th>Owner</th>\
         <th>Epoch</th><th>Lease left</th><th>Pending</th><th>In flight</th>\
         <th>Past deadline</th><th>Next run-at</th></tr></thead><tbody>",
    );
    for s in &stats.shards {
        let owner = s.owner.as_deref().map_or("—".into(), text);
        let lease = match s.lease_left {
            Some(d) => span(d),
            None => "<span class=\"warn\">lapsed</span>".into(),
        };
        let next = match s.next_run_at_ms {
            Some(ms) => format!(
                "{}{}",
                if s.next_run_at_exact { "" } else { "≈ " },
                relative(ms, stats.now_ms)
            ),
            None => "—".into(),
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"owner\">{owner}</td><td>{}</td><td>{lease}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{next}</td></tr>",
            s.shard, s.epoch, s.pending, s.in_flight, s.in_flight_expired
        );
    }
    b.push_str("</tbody></table></section>");
}

/// The first in-flight tasks, redelivered ones marked.
fn in_flight_table(b: &mut String, stats: &Stats, tasks: &[TaskInfo]) {
    let _ = write!(
        b,
        "<section><h2>In flight</h2><p>{} of {} in-flight tasks, by visibility deadline; \
         attempt &gt; 1: delivered again (after a retry, a worker lost, or a deadline \
         passed).</p><table id=\"in-flight-tasks\"><thead><tr><th>Task</th><th>Shard</th>\
         <th>Attempt</th><th>Due</th><th>Visible again</th><th>Version</th><th>Payload</th>\
         </tr></thead><tbody>",
        tasks.len(),
        stats.in_flight()
    );
    for t in tasks {
        let TaskState::InFlight {
            due_ms,
            attempt,
            version,
            visible_at_ms,
        } = t.state
        else {
            continue;
        };
        let redelivered = if attempt > 1 {
            " <span class=\"warn redelivered\">redelivered</span>"
        } else {
            ""
        };
        let _ = write!(
            b,
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td>{attempt}{redelivered}</td>\
             <td>{}</td><td>{}</td><td>{version}</td><td>{} B</td></tr>",
            text(&task_href(&t.id)),
            text(&t.id),
            t.shard,
            relative(due_ms, stats.now_ms),
            relative(visible_at_ms, stats.now_ms),
            t.payload_len
        );
    }
    b.push_str("</tbody></table></section>");
}

/// The live workers.
fn workers(b: &mut String, stats: &Stats) {
    let _ = write!(
        b,
        "<section><h2>Live workers</h2><p>{} live (registration renewed by heartbeat).</p><ul>",
        stats.live_workers
    );
    for w in stats.workers.iter().take(WORKERS_SHOWN) {
        let _ = write!(
            b,
            "<li><code>{}</code>: registration expires in {}</li>",
            text(&w.id),
            span(w.expires_in)
        );
    }
    b.push_str("</ul></section>");
}

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

/// `GET /task?id=ID`: one task in full.
pub fn task(app: &App, req: &Request) -> Response {
    let id = match task_id(req.query("id")) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let (found, now_ms) = {
        let mut ins = app.inspector();
        let found = match ins.show(id) {
            Ok(f) => f,
            Err(e @ Error::InvalidId { .. }) => return error(400, &e.to_string()),
            Err(e) => return unavailable(&e),
        };
        // The page's "now": Redis's clock, one cheap bounded read.
        let now_ms = match ins.upcoming(Duration::from_secs(1), Duration::ZERO) {
            Ok(u) => u.now_ms,
            Err(e) => return unavailable(&e),
        };
        (found, now_ms)
    };
    let mut b = header(app, now_ms);
    let Some(detail) = found else {
        let _ = write!(
            b,
            "<section><h2>No such task</h2><p id=\"not-found\">No task <code id=\"task-id\">{}\
             </code> in this namespace: never scheduled, cancelled, or acknowledged.</p>\
             </section>",
            text(id)
        );
        return Response {
            status: 404,
            body: document("No such task", &b),
        };
    };
    task_details(&mut b, &detail, now_ms);
    if app.writes.is_some() {
        let hidden = format!(
            "<input type=\"hidden\" name=\"id\" value=\"{}\">\
             <label>Token <input type=\"password\" name=\"token\" required \
             autocomplete=\"off\"></label>",
            text(&detail.info.id)
        );
        let _ = write!(
            b,
            "<section><h2>Change it</h2>\
             <form method=\"post\" action=\"/cancel\" id=\"cancel\">{hidden} \
             <button>Cancel the task</button></form>\
             <form method=\"post\" action=\"/reschedule\" id=\"reschedule\">{hidden} \
             <label>Run at <input name=\"at\" required placeholder=\"2026-11-26T09:00:00Z or 10m\">\
             </label> <button>Reschedule</button></form>\
             <p class=\"note\">A task in flight (or claimed in its last second) can be neither \
             cancelled nor rescheduled.</p></section>"
        );
    } else {
        b.push_str(
            "<p class=\"note\" id=\"read-only\">Read-only: start the dashboard with \
             <code>--allow-writes</code> and a token to cancel or reschedule tasks here.</p>",
        );
    }
    Response {
        status: 200,
        body: document(&format!("task {}", detail.info.id), &b),
    }
}

/// A task's fields and its payload preview.
fn task_details(b: &mut String, d: &TaskDetail, now_ms: u64) {
    let t = &d.info;
    let at = |ms: u64| format!("{} ({})", rfc3339(ms), relative(ms, now_ms));
    let mut rows: Vec<(&str, &str, String)> = vec![("task-id", "Id", text(&t.id))];
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
    b.push_str("</section>");
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
    if app.writes.is_none() {
        return error(
            403,
            "This dashboard is read-only: start it with --allow-writes and a token to cancel \
             or reschedule tasks.",
        );
    }
    if let Err(why) = check_same_origin(req) {
        return error(
            403,
            &format!("{why} Writes are accepted from this dashboard's own forms only."),
        );
    }
    let form = req.form();
    let token = field(&form, "token").unwrap_or("");
    if !token_matches(app, token.as_bytes()) {
        return error(403, "Missing or wrong token.");
    }
    let id = match task_id(field(&form, "id")) {
        Ok(id) => id,
        Err(r) => return r,
    };
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
                    text(id),
                    text(&task_href(id))
                ),
            ),
        },
        Ok(false) => error(
            409,
            &format!(
                "Could not {noun} task {id:?}: it is not pending (in flight, claimed for \
                 delivery in its last second, or gone)."
            ),
        ),
        Err(e @ (Error::InvalidId { .. } | Error::InvalidRunAt)) => error(400, &e.to_string()),
        Err(e) => unavailable(&e),
    }
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
fn task_href(id: &str) -> String {
    format!(
        "/task?id={}",
        form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    )
}

/// User data as HTML text or attribute value: `& < > " '` escaped, and control, invisible and
/// bidirectional formatting characters shown as `\u{..}` (they could hide or reorder text).
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push('\n'),
            c if c.is_control()
                || matches!(c as u32, 0x00ad | 0x061c | 0x180e | 0x200b..=0x200f
                    | 0x2028..=0x202e | 0x2060..=0x2069 | 0xfeff | 0xfff9..=0xfffb) =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A whole page.
fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>{body}</body></html>",
        text(title)
    )
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1000px}\
h1{font-size:1.3em;margin:0 0 .2em}h1 a{color:inherit;text-decoration:none}h2{font-size:1.1em;\
margin:1.2em 0 .4em}h3{font-size:1em}table{border-collapse:collapse}th,td{padding:2px 10px 2px 0;\
text-align:left;vertical-align:top}thead th{border-bottom:1px solid #999}tbody tr:nth-child(even)\
{background:#f4f4f4}table.glance th{font-weight:normal;color:#555}code,pre{font-family:ui-monospace,\
monospace;overflow-wrap:anywhere}pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap}\
.note{color:#555;font-size:.92em}.warn{color:#a40}.redelivered{font-weight:bold}\
svg text{font-size:11px;fill:#555}svg .plot{fill:#fafafa;stroke:#ccc}svg .grid{stroke:#ddd}\
svg .bar{fill:#3a6ea5}form{margin:.4em 0}header p{margin:.2em 0;color:#555}";

/// ms since the Unix epoch as RFC 3339 in UTC (`2026-11-26T01:02:03.004Z`).
fn rfc3339(ms: u64) -> String {
    match i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("{ms} ms"),
    }
}

/// `HH:MM` in UTC.
fn hhmm(ms: u64) -> String {
    let min = ms / 60_000;
    format!("{:02}:{:02}", min / 60 % 24, min % 60)
}

/// `at - now` for people: `in 1h 2m`, `3.2s ago`, `now`.
fn relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms >= now_ms {
        match at_ms - now_ms {
            0 => "now".into(),
            d => format!("in {}", span(Duration::from_millis(d))),
        }
    } else {
        format!("{} ago", span(Duration::from_millis(now_ms - at_ms)))
    }
}

/// A duration for people, two units at most: `850ms`, `4.6s`, `3m 20s`, `2h 5m`, `3d 4h`.
fn span(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_is_escaped_and_links_are_encoded() {
        assert_eq!(
            text("<script>alert('x')&\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
        assert_eq!(text("a\u{202e}b\u{1b}"), "a\\u{202e}b\\u{1b}");
        assert_eq!(task_href("a b&c=<d>"), "/task?id=a+b%26c%3D%3Cd%3E");
        assert!(hex_dump(b"\x00<a>").contains("00 3c 61 3e"));
        assert!(hex_dump(b"\x00<a>").contains(".&lt;a&gt;"));
        assert!(parse_run_at("10m").is_ok() && parse_run_at("2026-11-26T09:00:00Z").is_ok());
        assert!(parse_run_at("tomorrow").is_err() && parse_run_at("-5m").is_err());
        assert_eq!(hhmm(3_600_000 * 25 + 60_000 * 7), "01:07");
    }
}
