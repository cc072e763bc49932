//! The workloads `tickwheel bench` runs, and the family of entrants each one measures.
//!
//! Workloads W1–W8 are defined in `docs/ARCHITECTURE.md` ("Workloads"); their seeded inputs
//! come from `tickwheel_lab::workloads`, the one definition shared with the library's
//! benches.

use clap::ValueEnum;

/// A workload, named on the command line `w1` … `w8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Workload {
    /// W1: schedule N timers (delays 1..=60000 ticks), cancel all in random order.
    #[value(name = "w1")]
    ScheduleCancel,
    /// W2: schedule N timers (delays 1..=10000 ticks), fire all tick by tick; verified.
    #[value(name = "w2")]
    ScheduleFire,
    /// W3: N live timers (1..=30000 ticks), then N resets to random new delays.
    #[value(name = "w3")]
    Reset,
    /// W4: real clock, N tasks with delays 0..=1000 ms; schedule rate, CPU, memory, lateness.
    #[value(name = "w4")]
    RealTimeTasks,
    /// W5: N live timers (1..=60000 ticks) under 1000 ticks of firing, resets and cancels.
    #[value(name = "w5")]
    Churn,
    /// W6: durable tasks on Redis, delays 0..=60 s, 1..=4 workers; needs redis-server.
    #[value(name = "w6")]
    DurableTasks,
    /// W7: W5's churn with timeouts 1..=2000 ticks, timed after a warm-up of 4000 ticks, at
    /// equilibrium.
    #[value(name = "w7")]
    SteadyState,
    /// W8: timer futures in a 2-worker tokio runtime: timeouts that never fire, an idle
    /// timeout reset per message, sleeping tasks (CPU, lateness).
    #[value(name = "w8")]
    Futures,
}

/// What kind of timer a workload measures; each family has its own entrants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Timer queues driven on virtual ticks by the harness (W1, W2, W3, W5, W7).
    Queues,
    /// Timer services with their own threads, on the real clock (W4).
    Services,
    /// Durable delayed tasks stored in Redis, delivered by worker threads (W6).
    Durable,
    /// Timer futures awaited by tasks of an async runtime, on the real clock (W8).
    Futures,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 8] = [
        Workload::ScheduleCancel,
        Workload::ScheduleFire,
        Workload::Reset,
        Workload::Churn,
        Workload::SteadyState,
        Workload::RealTimeTasks,
        Workload::Futures,
        Workload::DurableTasks,
    ];

    /// The short label used in tables, files and docs: `W1` … `W8`.
    pub fn label(self) -> &'static str {
        match self {
            Workload::ScheduleCancel => "W1",
            Workload::ScheduleFire => "W2",
            Workload::Reset => "W3",
            Workload::RealTimeTasks => "W4",
            Workload::Churn => "W5",
            Workload::DurableTasks => "W6",
            Workload::SteadyState => "W7",
            Workload::Futures => "W8",
        }
    }

    /// Whether this is a churn workload (W5, W7): counted in operations, not timers, with
    /// peak heap per live timer reported.
    pub fn is_churn(self) -> bool {
        matches!(self, Workload::Churn | Workload::SteadyState)
    }

    /// The family of entrants this workload measures.
    pub fn family(self) -> Family {
        match self {
            Workload::RealTimeTasks => Family::Services,
            Workload::DurableTasks => Family::Durable,
            Workload::Futures => Family::Futures,
            _ => Family::Queues,
        }
    }

    /// A one-line description for table headings and plot captions.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::ScheduleCancel => {
                "W1 schedule+cancel (delays 1..=60000 ticks, cancel all, random order)"
            }
            Workload::ScheduleFire => {
                "W2 schedule+fire (delays 1..=10000 ticks, tick by tick; verified)"
            }
            Workload::Reset => {
                "W3 reset (N timers, then N resets to 1..=30000 ticks; time = resets)"
            }
            Workload::RealTimeTasks => {
                "W4 real-time service (N tasks, uniform delays on the real clock)"
            }
            Workload::Churn => {
                "W5 churn (N live timers, 1..=60000 ticks; 1000 ticks of firing + N/100 \
                 resets/cancels a tick; verified)"
            }
            Workload::SteadyState => {
                "W7 steady state (N live timers, 1..=2000 ticks; W5's operations; 1000 ticks \
                 timed after 4000 of warm-up; verified)"
            }
            Workload::DurableTasks => {
                "W6 durable tasks on Redis (N tasks, delays 0..=60 s, 1..=4 workers; schedule \
                 rate, lateness, Redis memory per task)"
            }
            Workload::Futures => {
                "W8 futures in a 2-worker tokio runtime (timeouts that never fire, an idle \
                 timeout reset per message, sleeping tasks)"
            }
        }
    }
}
