//! The futures family: timer futures awaited by tasks of a 2-worker tokio runtime, on the
//! real clock (W8, defined in `docs/ARCHITECTURE.md`, "Workloads"): tickwheel's free
//! functions and `TimerService` methods beside `tokio::time` and async-io's `Timer`, and a
//! floor with no timer.
//!
//! Layout: [`timers`] puts each entrant's API behind one trait; [`legs`] runs W8's three
//! parts on it; [`report`] holds the samples and renders them; this file names the entrants
//! and runs each one in a fresh child process (`tickwheel future-worker`, hidden, through
//! [`crate::child`]), so that its threads (a timer thread, a reactor thread) and its CPU
//! time are its own.

pub mod legs;
pub mod report;
mod timers;

use crate::error::{Error, Result};
use report::{FutureSample, SleepSample};
use std::sync::Arc;
use std::time::Duration;
use timers::AsyncTimers;

/// A timer API measured by W8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FutureEntrant {
    /// tickwheel's free functions (`tickwheel::sleep`, `tickwheel::timeout`), on the default
    /// service.
    TickwheelFree,
    /// The methods of a `TimerService` (`service.sleep`, `service.timeout`).
    TickwheelService,
    /// `tokio::time`.
    TokioTime,
    /// async-io's `Timer`.
    AsyncIo,
    /// The same loops with no timer: a floor, not a peer.
    NoTimer,
}

impl FutureEntrant {
    /// Every entrant, in table order (tickwheel first, then peers, then the floor).
    pub const ALL: [FutureEntrant; 5] = [
        FutureEntrant::TickwheelFree,
        FutureEntrant::TickwheelService,
        FutureEntrant::TokioTime,
        FutureEntrant::AsyncIo,
        FutureEntrant::NoTimer,
    ];

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            FutureEntrant::TickwheelFree => "tickwheel-futures",
            FutureEntrant::TickwheelService => "tickwheel-service-futures",
            FutureEntrant::TokioTime => "tokio-time",
            FutureEntrant::AsyncIo => "async-io",
            FutureEntrant::NoTimer => "no-timer",
        }
    }

    /// Whether this entrant is tickwheel's own.
    pub fn is_tickwheel(self) -> bool {
        matches!(
            self,
            FutureEntrant::TickwheelFree | FutureEntrant::TickwheelService
        )
    }
}

impl std::fmt::Display for FutureEntrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How W8 is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FutureSettings {
    /// Operations a worker task in each run of the timeout and reset loops.
    pub ops: u64,
    /// Runs of those loops (after one untimed run); the median is reported.
    pub repeats: u32,
    /// Sleeping tasks.
    pub tasks: usize,
    /// The longest sleep; sleeps are uniform from a third of it up to it.
    pub max_delay: Duration,
    /// The measured window of the sleeping tasks.
    pub window: Duration,
    /// Seed of the sleeps.
    pub seed: u64,
}

/// Runs W8 on `entrant` in this process (what the child process does).
pub fn run(entrant: FutureEntrant, s: &FutureSettings) -> Result<FutureSample> {
    let failed = |e| Error::Failed {
        entrant: entrant.name(),
        workload: "W8",
        source: Box::new(e),
    };
    match entrant {
        FutureEntrant::TickwheelFree => run_on(entrant, timers::TickwheelFree, s),
        FutureEntrant::TickwheelService => {
            let service = tickwheel::TimerService::new()
                .map_err(|e| Error::io("cannot start the timer service", e))?;
            run_on(entrant, timers::TickwheelService(service), s)
        }
        FutureEntrant::TokioTime => run_on(entrant, timers::TokioTime, s),
        FutureEntrant::AsyncIo => run_on(entrant, timers::AsyncIo, s),
        FutureEntrant::NoTimer => run_on(entrant, timers::NoTimer, s),
    }
    .map_err(failed)
}

/// The median CPU ns per operation of `repeats` runs of `leg`, each of `ops` a task, after
/// one untimed run (which starts whatever the entrant starts lazily: the default service,
/// async-io's reactor thread).
fn median_of<F: std::future::Future<Output = Result<Duration>>>(
    rt: &tokio::runtime::Runtime,
    repeats: u32,
    ops: u64,
    mut leg: impl FnMut() -> F,
) -> Result<f64> {
    rt.block_on(leg())?;
    let mut runs = (0..repeats.max(1))
        .map(|_| legs::cpu_per_op(rt, ops, leg()))
        .collect::<Result<Vec<f64>>>()?;
    runs.sort_by(f64::total_cmp);
    Ok(runs[runs.len() / 2])
}

fn run_on<T: AsyncTimers>(
    entrant: FutureEntrant,
    timers: T,
    s: &FutureSettings,
) -> Result<FutureSample> {
    let rt = legs::runtime()?;
    let timers = Arc::new(timers);
    let t = &timers;
    let (r, ops) = (s.repeats, s.ops);
    let timeout_ready_ns = median_of(&rt, r, ops, || legs::timeouts(t, ops, false))?;
    let timeout_pending_ns = median_of(&rt, r, ops, || legs::timeouts(t, ops, true))?;
    let reset_ns = median_of(&rt, r, ops, || legs::resets(t, ops))?;
    let sleeps = if T::FIRES {
        let run = legs::sleepers(&rt, t, s.tasks, s.max_delay, s.window, s.seed)?;
        Some(SleepSample {
            tasks: s.tasks,
            max_delay_ms: s.max_delay.as_millis() as u64,
            wall: run.wall,
            wakes: run.wakes,
            cpu: run.cpu,
            lateness: crate::services::report::Lateness::of(&run.late_ns),
        })
    } else {
        None
    };
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(FutureSample {
        entrant,
        ops: s.ops,
        repeats: s.repeats,
        timeout_ready_ns,
        timeout_pending_ns,
        reset_ns,
        sleeps,
    })
}

/// Runs W8 on `entrant` in a child process and returns its sample.
pub fn run_isolated(entrant: FutureEntrant, s: &FutureSettings) -> Result<FutureSample> {
    let args = [
        ("--entrant", entrant.name().to_owned()),
        ("--ops", s.ops.to_string()),
        ("--repeat", s.repeats.to_string()),
        ("--tasks", s.tasks.to_string()),
        ("--seed", s.seed.to_string()),
        ("--max-delay-ms", s.max_delay.as_millis().to_string()),
        ("--window-ms", s.window.as_millis().to_string()),
    ];
    let args: Vec<String> = std::iter::once("future-worker".to_owned())
        .chain(args.into_iter().flat_map(|(flag, v)| [flag.to_owned(), v]))
        .collect();
    crate::child::run("W8", entrant.name(), &args, |json| {
        FutureSample::from_json(entrant, json)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> FutureSettings {
        FutureSettings {
            ops: 200,
            repeats: 1,
            tasks: 50,
            max_delay: Duration::from_millis(12),
            window: Duration::from_millis(60),
            seed: 7,
        }
    }

    #[test]
    fn every_entrant_runs_a_tiny_w8_and_checks_it() {
        for entrant in FutureEntrant::ALL {
            let sample = run(entrant, &tiny()).unwrap();
            assert!(sample.timeout_ready_ns > 0.0, "{entrant}");
            assert!(sample.timeout_pending_ns > 0.0, "{entrant}");
            assert!(sample.reset_ns > 0.0, "{entrant}");
            match sample.sleeps {
                Some(s) => assert!(s.wakes > 0 && s.lateness.max >= s.lateness.p50, "{entrant}"),
                None => assert_eq!(entrant, FutureEntrant::NoTimer),
            }
        }
    }

    /// A timer that fires its "never" timeouts at once, and ends sleeps early: each part of
    /// W8 must refuse it.
    #[derive(Debug)]
    struct Broken;

    impl AsyncTimers for Broken {
        // Pending once, so that a task sleeping in a loop still yields and can be aborted.
        type Sleep<'a> = legs::PendingOnce<()>;

        fn sleep(&self, _delay: Duration) -> Self::Sleep<'_> {
            legs::PendingOnce::new(())
        }

        fn reset(_sleep: std::pin::Pin<&mut Self::Sleep<'_>>, _deadline: std::time::Instant) {}

        async fn timeout<'a, F>(&'a self, _delay: Duration, _future: F) -> Option<F::Output>
        where
            F: std::future::Future + Send + 'a,
        {
            None
        }
    }

    #[test]
    fn a_timer_that_fires_early_fails_every_part() {
        let rt = legs::runtime().unwrap();
        let broken = Arc::new(Broken);
        for pending_once in [false, true] {
            let err = rt.block_on(legs::timeouts(&broken, 10, pending_once));
            assert!(err.unwrap_err().to_string().contains("timeout fired"));
        }
        let err = rt.block_on(legs::resets(&broken, 10)).unwrap_err();
        assert!(err.to_string().contains("idle sleep fired"), "{err}");
        let s = tiny();
        let err = legs::sleepers(&rt, &broken, 5, s.max_delay, s.window, 1).unwrap_err();
        assert!(err.to_string().contains("early"), "{err}");
    }
}
