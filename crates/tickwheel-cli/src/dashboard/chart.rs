//! The upcoming tasks per minute as a server-rendered SVG bar chart.

use std::fmt::Write as _;

use tickwheel_redis::Upcoming;

use super::page::hhmm;

/// The chart's size and margins, px.
const W: f64 = 960.0;
const H: f64 = 240.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 28.0;
const TOP: f64 = 12.0;

/// The upcoming tasks per minute as an SVG bar chart, with a title per bar.
pub fn chart(up: &Upcoming, hours: u32) -> String {
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
    axes(&mut s, up, hours, max, (pw, ph));
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

/// Three counts on the y axis, hour labels on the x axis (every hour up to 8 hours, fewer
/// beyond), with grid lines.
fn axes(s: &mut String, up: &Upcoming, hours: u32, max: u64, (pw, ph): (f64, f64)) {
    let n = up.counts.len().max(1);
    let per_ms = up.per.as_millis() as u64;
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
}
