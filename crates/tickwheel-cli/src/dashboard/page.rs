//! What every page shares: the layout, error pages, escaping ([`text`]: HTML, and control or
//! bidirectional characters shown as `\u{..}`) and `HH:MM` for the chart (the other times for
//! people are `crate::time`'s). The pages themselves: [`overview`](super::overview) (`/`),
//! [`task`](super::task) (`/task?id=`, and the writes), [`failed`](super::failed) (`/failed`, the
//! bulk writes, pause and resume).

use std::fmt::Write as _;
use tickwheel_redis::Error;

use super::http::Response;
use super::App;
use crate::tasks::escape::escape;
use crate::time::rfc3339;

/// An error page.
pub fn error(status: u16, message: &str) -> Response {
    let title = match status {
        400 => "400 Bad Request",
        403 => "403 Forbidden",
        404 => "404 Not Found",
        405 => "405 Method Not Allowed",
        408 => "408 Request Timeout",
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
pub fn unavailable(e: &Error) -> Response {
    error(
        503,
        &format!("Redis could not be read: {e}. Reload to try again."),
    )
}

/// The namespace does not exist any more: a 503 that says so, rather than a page of zeros.
pub fn namespace_gone(app: &App) -> Response {
    let title = "Namespace not found";
    Response {
        status: 503,
        body: document(
            title,
            &format!(
                "<h1>{title}</h1><p id=\"namespace-gone\" class=\"warn\">Namespace \
                 <code>{ns}</code> does not exist on {redis} any more. It did when this \
                 dashboard started, so it was deleted since: its keys removed, the database \
                 flushed, or Redis restarted without its data. Its tasks are gone, and producers \
                 and workers using it fail. Nothing here is shown as zero because of it: reload \
                 once the namespace is back.</p><p><a href=\"/\">Reload</a></p>",
                ns = text(&app.namespace),
                redis = text(&app.redis),
            ),
        ),
    }
}

/// The title bar and the search form.
pub fn header(app: &App, now_ms: u64) -> String {
    format!(
        "<header><h1><a href=\"/\">tickwheel</a> · namespace <code id=\"namespace\">{ns}</code></h1>\
         <p>{redis} · read at {now} (Redis clock) · {mode} · <a href=\"/\">Overview</a> · \
         <a href=\"/failed\" id=\"failed-link\">Failed tasks</a></p>\
         <form method=\"get\" action=\"/task\" id=\"search\"><label>Task id \
         <input name=\"id\" size=\"40\" required></label> <label title=\"Read \\t, \\n, \
         \\\\ and \\u{{..}} as the pages show them\"><input type=\"checkbox\" name=\"escaped\" \
         value=\"1\"> as shown (escapes)</label> <button>Show</button></form></header>",
        ns = text(&app.namespace),
        redis = text(&app.redis),
        now = rfc3339(now_ms),
        mode = if app.writes.is_some() {
            "<span class=\"warn\">writes enabled (token required)</span>"
        } else {
            "read-only"
        },
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

/// A task id as shown: escaped as `tickwheel tasks` prints it (`\t`, `\n`, `\\`,
/// `\u{1b}`), so that what a page shows can be typed back (the search's "as shown" box, or
/// `tickwheel tasks --escaped`) and two ids never look alike; then HTML-escaped.
pub fn id_text(id: &str) -> String {
    text(&escape(id))
}

/// A whole page.
pub fn document(title: &str, body: &str) -> String {
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
.banner{background:#fee;border:1px solid #c66;padding:.5em;font-weight:bold}\
svg text{font-size:11px;fill:#555}svg .plot{fill:#fafafa;stroke:#ccc}svg .grid{stroke:#ddd}\
svg .bar{fill:#3a6ea5}form{margin:.4em 0}header p{margin:.2em 0;color:#555}";

/// `HH:MM` in UTC.
pub fn hhmm(ms: u64) -> String {
    let min = ms / 60_000;
    format!("{:02}:{:02}", min / 60 % 24, min % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_is_escaped_and_times_are_readable() {
        assert_eq!(
            text("<script>alert('x')&\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
        assert_eq!(text("a\u{202e}b\u{1b}"), "a\\u{202e}b\\u{1b}");
        assert_eq!(hhmm(3_600_000 * 25 + 60_000 * 7), "01:07");
    }
}
