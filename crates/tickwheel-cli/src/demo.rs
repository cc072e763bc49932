//! `tickwheel demo`: millions of delayed tasks on a real clock, a live progress bar, then
//! the lateness histogram, CPU time and memory. Uses the services family's W4 machinery
//! and checks (every task runs once, never early).

use crate::error::Result;
use crate::machine::Machine;
use crate::services::{self, report::ServiceSample, ServiceEntrant, TickwheelSetup};
use crate::units::pretty_n;
use indicatif::{ProgressBar, ProgressStyle};
use tickwheel_lab::workloads;

/// What `tickwheel demo` was asked to do.
#[derive(Debug, Clone)]
pub struct DemoSettings {
    /// Number of tasks.
    pub n: usize,
    /// Largest delay, ms.
    pub max_delay_ms: u64,
    /// Delay seed.
    pub seed: u64,
    /// The real-time timer to use.
    pub entrant: ServiceEntrant,
    /// How a tickwheel entrant is built (others keep their own settings).
    pub setup: TickwheelSetup,
}

/// Runs the demo.
pub fn run(s: &DemoSettings) -> Result<()> {
    let machine = Machine::detect();
    say!(
        "{} delayed tasks (delays 0..={} ms) on {} — {} ({} cores), {} build",
        pretty_n(s.n),
        s.max_delay_ms,
        s.entrant,
        machine.cpu,
        machine.cores,
        machine.profile
    );
    if s.entrant.is_tickwheel() {
        let wake = if s.setup.wake_interval.is_zero() {
            String::new()
        } else {
            format!(", wake_interval {:?}", s.setup.wake_interval)
        };
        say!("resolution {:?}{wake}", s.setup.tick);
    }
    let delays = workloads::w4(s.seed, s.n, s.max_delay_ms);
    let bar = ProgressBar::new(s.n as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {pos}/{len} tasks ran ({per_sec})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let sample =
        services::run(s.entrant, &delays, s.setup, Some(&bar)).inspect_err(|_| bar.abandon())?;
    bar.finish();
    print_summary(&sample);
    Ok(())
}

/// The hidden `service-worker` subcommand: one W4 run, progress on stderr, the sample as
/// JSON on stdout (see `services::run_isolated`).
pub fn worker(s: &DemoSettings) -> Result<()> {
    let delays = workloads::w4(s.seed, s.n, s.max_delay_ms);
    let bar = ProgressBar::new(s.n as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} fired  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("W4 {}", s.entrant));
    let sample =
        services::run(s.entrant, &delays, s.setup, Some(&bar)).inspect_err(|_| bar.abandon())?;
    bar.finish_and_clear();
    say!("{}", sample.to_json());
    Ok(())
}

fn print_summary(s: &ServiceSample) {
    say!("every task ran exactly once, none early");
    say!(
        "scheduled in {:.2} s ({:.0} tasks/s); last task ran {:.2} s after the first was scheduled",
        s.schedule.as_secs_f64(),
        s.schedule_rate(),
        s.wall.as_secs_f64()
    );
    if let Some(cpu) = s.cpu {
        say!("CPU time (whole process): {:.2} s", cpu.as_secs_f64());
    }
    if let Some(rss) = s.peak_rss {
        say!(
            "peak memory growth: {:.1} MiB ({:.0} bytes a task)",
            rss as f64 / 1048576.0,
            rss as f64 / s.n as f64
        );
    }
    let l = s.lateness;
    say!(
        "lateness: p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
        l.p50 as f64 / 1e6,
        l.p99 as f64 / 1e6,
        l.p999 as f64 / 1e6,
        l.max as f64 / 1e6
    );
    print_histogram(&s.histogram);
}

/// The lateness histogram as text bars, 50 characters for the fullest bucket.
fn print_histogram(histogram: &[(f64, usize)]) {
    say!("lateness histogram:");
    let widest = histogram.iter().map(|(_, c)| *c).max().unwrap_or(1).max(1);
    let mut lower = 0.0;
    for &(upper, count) in histogram {
        let label = if upper.is_finite() {
            format!("{lower:>6} – {upper:<6} ms")
        } else {
            format!("{lower:>6} ms and more ")
        };
        let bar = "#".repeat((count * 50).div_ceil(widest));
        say!("  {label} {count:>10}  {bar}");
        lower = upper;
    }
}
