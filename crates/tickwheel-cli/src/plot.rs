//! SVG plots: ns per operation against N (log–log), one per queue workload, and W4's
//! lateness CDF. Text is plain SVG `<text>` (plotters without font features), so no system
//! font library is needed to build or run.

use crate::error::Error;
use crate::queues::report::QueueSample;
use crate::queues::QueueEntrant;
use crate::report::Report;
use crate::services::ServiceEntrant;
use crate::workload::Workload;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (960, 600);

/// A fixed, print-friendly color per entrant (tickwheel in warm colors, peers in cool ones),
/// so the same entrant has the same color in every plot.
fn queue_color(entrant: QueueEntrant) -> RGBColor {
    match entrant {
        QueueEntrant::Wheel => RGBColor(214, 39, 40),
        QueueEntrant::SlimWheel => RGBColor(227, 119, 194),
        QueueEntrant::IdWheel => RGBColor(188, 189, 34),
        QueueEntrant::HashedWheel => RGBColor(255, 127, 14),
        QueueEntrant::Heap => RGBColor(148, 103, 189),
        QueueEntrant::BinaryHeap => RGBColor(31, 119, 180),
        QueueEntrant::PriorityQueue => RGBColor(23, 190, 207),
        QueueEntrant::BTreeMap => RGBColor(44, 160, 44),
        QueueEntrant::DelayQueue => RGBColor(140, 86, 75),
        QueueEntrant::Hhwt => RGBColor(90, 90, 90),
    }
}

/// The service entrants' colors, matching their closest queue entrant's.
fn service_color(entrant: ServiceEntrant) -> RGBColor {
    match entrant {
        ServiceEntrant::TimerService => queue_color(QueueEntrant::Wheel),
        ServiceEntrant::TimerServiceHandles => queue_color(QueueEntrant::HashedWheel),
        ServiceEntrant::TimerServiceHere => queue_color(QueueEntrant::Heap),
        ServiceEntrant::TokioSleep => queue_color(QueueEntrant::BinaryHeap),
        ServiceEntrant::DelayQueueChannel => queue_color(QueueEntrant::DelayQueue),
        ServiceEntrant::HeapThread => queue_color(QueueEntrant::BTreeMap),
        ServiceEntrant::BucketFloor => queue_color(QueueEntrant::Hhwt),
        ServiceEntrant::FloorWorkers => queue_color(QueueEntrant::PriorityQueue),
        ServiceEntrant::FloorClosures => queue_color(QueueEntrant::SlimWheel),
        ServiceEntrant::FloorIndexed => queue_color(QueueEntrant::IdWheel),
        // No queue entrant is like it: an olive of its own.
        ServiceEntrant::FloorDirect => RGBColor(128, 128, 0),
    }
}

/// The file name of a queue workload's plot.
pub fn scaling_file(w: Workload) -> String {
    let unit = if w.is_churn() { "op" } else { "timer" };
    format!("{}-ns-per-{unit}.svg", w.label().to_lowercase())
}

/// Writes every plot the report has data for; returns the files written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut written = Vec::new();
    for w in Workload::ALL {
        if report.queues.iter().any(|s| s.workload == w) {
            let path = dir.join(scaling_file(w));
            scaling_plot(report, w, &path).map_err(|e| plot_error(&path, &*e))?;
            written.push(path);
        }
    }
    if !report.services.is_empty() {
        let path = dir.join("w4-lateness-cdf.svg");
        lateness_cdf(report, &path).map_err(|e| plot_error(&path, &*e))?;
        written.push(path);
    }
    Ok(written)
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn plot_error(path: &Path, e: &dyn std::error::Error) -> Error {
    Error::Plot {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn padded_log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN_POSITIVE), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let lo = lo.max(1e-3);
    (lo / 1.6)..(hi.max(lo) * 1.6)
}

fn scaling_plot(report: &Report, w: Workload, path: &Path) -> PlotResult {
    let samples: Vec<_> = report.queues.iter().filter(|s| s.workload == w).collect();
    let x = padded_log_range(samples.iter().map(|s| s.n as f64));
    let y = padded_log_range(samples.iter().map(|s| s.ns_per_op()));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(w.describe(), ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x.log_scale(), y.log_scale())?;
    chart
        .configure_mesh()
        .x_desc("N (timers)")
        .y_desc(if w.is_churn() {
            "ns per operation (median)"
        } else {
            "ns per timer (median)"
        })
        .x_label_formatter(&|v| format!("{v:.0e}"))
        .draw()?;
    for entrant in QueueEntrant::ALL {
        let points = series(&samples, entrant);
        if points.is_empty() {
            continue;
        }
        let c = queue_color(entrant);
        let width = if entrant.is_tickwheel() { 3 } else { 1 };
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(width)))?
            .label(entrant.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width))
            });
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
    }
    // Costs grow with N, so the upper left is where the lines are not.
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

/// `(N, ns per operation)` of one entrant, by N.
fn series(samples: &[&QueueSample], entrant: QueueEntrant) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.entrant == entrant)
        .map(|s| (s.n as f64, s.ns_per_op()))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Lateness below this (ms) is drawn at it, so the log axis can show zero lateness.
const CDF_FLOOR_MS: f64 = 0.01;

fn lateness_cdf(report: &Report, path: &Path) -> PlotResult {
    let x_max = report
        .services
        .iter()
        .filter_map(|s| s.cdf.iter().map(|p| p.0).reduce(f64::max))
        .fold(1.0, f64::max)
        * 1.5;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (n, max_delay) = report
        .services
        .first()
        .map_or((0, 0), |s| (s.n, s.max_delay_ms));
    let caption = format!(
        "W4 lateness CDF: {} tasks, delays 0..={max_delay} ms, real clock",
        crate::units::pretty_n(n)
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((CDF_FLOOR_MS..x_max).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc(format!(
            "lateness, ms past deadline (log; below {CDF_FLOOR_MS} drawn at {CDF_FLOOR_MS})"
        ))
        .y_desc("fraction of tasks at most this late")
        .draw()?;
    for sample in &report.services {
        let c = service_color(sample.entrant);
        chart
            .draw_series(LineSeries::new(
                sample.cdf.iter().map(|&(ms, q)| (ms.max(CDF_FLOOR_MS), q)),
                c.stroke_width(2),
            ))?
            .label(sample.entrant.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    // CDFs rise to the upper left, so the lower right is usually free.
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}
