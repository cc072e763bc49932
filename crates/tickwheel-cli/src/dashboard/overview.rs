//! `GET /?hours=N`: the namespace at a glance (failed and paused included, a banner when a
//! shard is paused), the upcoming-tasks chart ([`chart`]), the shards, the tasks in flight,
//! the live workers, and the pause and resume forms with `--allow-writes`.

use std::fmt::Write as _;
use std::time::Duration;

use tickwheel_redis::{
    Error, Inspector, ListFilter, StateFilter, Stats, TaskInfo, TaskState, Upcoming,
};

use super::chart::chart;
use super::failed::pause_forms;
use super::http::{Request, Response};
use super::page::{document, error, header, id_text, text, unavailable};
use super::task::task_href;
use super::App;
use crate::time::{relative, rfc3339, span};

/// In-flight tasks listed on the overview.
const IN_FLIGHT_SHOWN: usize = 100;

/// Live workers listed on the overview.
const WORKERS_SHOWN: usize = 50;

/// The chart's horizons offered, hours.
const HOURS: [u32; 5] = [1, 3, 6, 12, 24];

/// The longest chart horizon, hours (one bar a minute).
const MAX_HOURS: u32 = 48;

/// `GET /?hours=N`: totals, the upcoming-tasks chart, the shards, the tasks in flight, the
/// workers.
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
    let (stats, upcoming, in_flight) = match read(app, hours) {
        Ok(r) => r,
        Err(e) => return unavailable(&e),
    };
    if let Some(gone) = app.namespace_gone() {
        return gone;
    }
    let mut b = header(app, stats.now_ms);
    paused_banner(&mut b, &stats);
    glance(&mut b, &stats, &upcoming);
    let choices: Vec<String> = HOURS
        .iter()
        .map(|&h| match h == hours {
            true => format!("<b>{h} h</b>"),
            false => format!("<a href=\"/?hours={h}\">{h} h</a>"),
        })
        .collect();
    let _ = write!(
        b,
        "<section><h2>Upcoming tasks per minute</h2><p class=\"choice\">Next: {}</p>{}\
         </section>",
        choices.join(" · "),
        chart(&upcoming, hours)
    );
    shards(&mut b, &stats);
    pause_forms(&mut b, app, &stats);
    in_flight_table(&mut b, stats.now_ms, &in_flight);
    workers(&mut b, &stats);
    Response {
        status: 200,
        body: document(&format!("tickwheel · {}", app.namespace), &b),
    }
}

/// What the overview shows, in bounded reads: the shards' stats, the per-second counts over
/// `hours`, the in-flight tasks with the earliest visibility deadlines.
fn read(app: &App, hours: u32) -> Result<(Stats, Upcoming, InFlight), Error> {
    let mut ins = app.inspector();
    let stats = ins.stats()?;
    let horizon = Duration::from_secs(3600 * u64::from(hours));
    let upcoming = ins.upcoming(Duration::from_secs(60), horizon)?;
    let in_flight = in_flight(&mut ins)?;
    Ok((stats, upcoming, in_flight))
}

/// The in-flight tasks with the earliest visibility deadlines, and how many the same reads
/// found: the heading counts the list it heads, never a total read at another instant.
#[derive(Debug, Default)]
struct InFlight {
    /// At most [`IN_FLIGHT_SHOWN`], by visibility deadline (then shard), across shards.
    tasks: Vec<TaskInfo>,
    /// The in-flight tasks these reads found: all of them, unless `complete` is false.
    found: usize,
    /// Whether every shard was read to its end (else some shard holds more than `found`
    /// counts).
    complete: bool,
}

/// Reads the first [`IN_FLIGHT_SHOWN`] + 1 in-flight tasks of each shard (the Inspector lists
/// them shard by shard, each by visibility deadline) and merges them by deadline: a list
/// over all shards would give shard 0's first, whatever the deadlines.
fn in_flight(ins: &mut Inspector) -> Result<InFlight, Error> {
    let mut out = InFlight {
        complete: true,
        ..InFlight::default()
    };
    for shard in 0..ins.shards() {
        let page = ins.list(&ListFilter {
            shards: Some(vec![shard]),
            state: StateFilter::InFlight,
            limit: Some(IN_FLIGHT_SHOWN + 1),
            ..ListFilter::default()
        })?;
        if page.len() > IN_FLIGHT_SHOWN {
            out.complete = false;
        }
        out.found += page.len();
        out.tasks.extend(page);
    }
    out.tasks.sort_by_key(|t| (visible_at(t), t.shard));
    out.tasks.truncate(IN_FLIGHT_SHOWN);
    Ok(out)
}

/// An in-flight task's visibility deadline (pending tasks last, though none is listed).
fn visible_at(t: &TaskInfo) -> u64 {
    match t.state {
        TaskState::InFlight { visible_at_ms, .. } => visible_at_ms,
        _ => u64::MAX,
    }
}

/// A banner when any shard is paused: nothing is delivered from it until resumed.
fn paused_banner(b: &mut String, stats: &Stats) {
    let paused: Vec<String> = stats
        .shards
        .iter()
        .filter(|s| s.paused)
        .map(|s| s.shard.to_string())
        .collect();
    if paused.is_empty() {
        return;
    }
    let which = if paused.len() == stats.shards.len() {
        "Every shard is paused".to_string()
    } else {
        format!(
            "Paused: shard{} {} of {}",
            if paused.len() == 1 { "" } else { "s" },
            paused.join(", "),
            stats.shards.len()
        )
    };
    let _ = write!(
        b,
        "<p class=\"banner\" id=\"paused-banner\">{which}. Workers claim nothing from a \
         paused shard: its tasks wait until it is resumed (<code>tickwheel tasks resume</code>, \
         or Resume below with --allow-writes).</p>"
    );
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
        (
            "failed",
            "Failed (kept until retried or discarded)",
            format!(
                "<a href=\"/failed\">{}</a>{}",
                stats.failed(),
                match stats.shards.iter().map(|s| s.trimmed).sum::<u64>() {
                    0 => String::new(),
                    n => format!(" ({n} more removed by the retention bound)"),
                }
            ),
        ),
        (
            "paused",
            "Shards paused",
            format!("{} of {}", stats.paused(), stats.shards.len()),
        ),
        (
            "remembered",
            "Ids schedule_once remembers",
            stats.remembered().to_string(),
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

/// The shards: owner, epoch, lease left, counts, next run-at.
fn shards(b: &mut String, stats: &Stats) {
    b.push_str(
        "<section><h2>Shards</h2><table id=\"shards\"><thead><tr><th>Shard</th><th>Owner</th>\
         <th>Epoch</th><th>Lease left</th><th>Pending</th><th>In flight</th>\
         <th>Past deadline</th><th>Failed</th><th>Paused</th><th>Next run-at</th></tr></thead>\
         <tbody>",
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
             <td>{}</td><td>{}</td><td>{}</td><td class=\"failed\">{}</td>\
             <td class=\"paused\">{}</td><td>{next}</td></tr>",
            s.shard,
            s.epoch,
            s.pending,
            s.in_flight,
            s.in_flight_expired,
            s.failed,
            if s.paused {
                "<span class=\"warn\">paused</span>"
            } else {
                "—"
            }
        );
    }
    b.push_str("</tbody></table></section>");
}

/// The in-flight tasks with the earliest visibility deadlines, redelivered ones marked; the
/// heading counts what the same reads found.
fn in_flight_table(b: &mut String, now_ms: u64, in_flight: &InFlight) {
    let shown = in_flight.tasks.len();
    let heading = match (in_flight.complete, in_flight.found) {
        (true, 0) => "No task in flight when the shards were read.".to_string(),
        (true, n) if n == shown => format!(
            "All {n} in-flight task{}, by visibility deadline (earliest first).",
            if n == 1 { "" } else { "s" }
        ),
        (complete, n) => format!(
            "The {shown} with the earliest visibility deadlines, of {}{n} in flight when the \
             shards were read (the count at a glance is from an earlier read).",
            if complete { "" } else { "at least " }
        ),
    };
    let _ = write!(
        b,
        "<section><h2>In flight</h2><p id=\"in-flight-heading\">{heading} Attempt &gt; 1: \
         delivered again (after a retry, a worker lost, or a deadline passed).</p>\
         <table id=\"in-flight-tasks\"><thead><tr><th>Task</th><th>Shard</th>\
         <th>Attempt</th><th>Due</th><th>Visible again</th><th>Version</th><th>Payload</th>\
         </tr></thead><tbody>"
    );
    for t in &in_flight.tasks {
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
            id_text(&t.id),
            t.shard,
            relative(due_ms, now_ms),
            relative(visible_at_ms, now_ms),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn in_flight(shown: usize, found: usize, complete: bool) -> String {
        let tasks = (0..shown)
            .map(|i| TaskInfo {
                id: format!("t{i}"),
                shard: 0,
                state: TaskState::InFlight {
                    due_ms: 0,
                    attempt: 1,
                    version: 1,
                    visible_at_ms: i as u64,
                },
                payload_len: 0,
                recurring: false,
            })
            .collect();
        let mut b = String::new();
        in_flight_table(
            &mut b,
            0,
            &InFlight {
                tasks,
                found,
                complete,
            },
        );
        b
    }

    /// The heading counts the list's own reads: never "62 of 45", "at least" when a shard
    /// held more than was read.
    #[test]
    fn the_in_flight_heading_counts_what_was_read() {
        assert!(in_flight(0, 0, true).contains("No task in flight"));
        assert!(in_flight(1, 1, true).contains("All 1 in-flight task, by visibility deadline"));
        assert!(in_flight(62, 62, true).contains("All 62 in-flight tasks"));
        assert!(in_flight(100, 150, true)
            .contains("The 100 with the earliest visibility deadlines, of 150 in flight"));
        assert!(in_flight(100, 1616, false).contains("of at least 1616 in flight"));
    }
}
