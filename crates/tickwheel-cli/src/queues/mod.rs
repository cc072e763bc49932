//! The virtual-time queues family: timer queues the harness drives tick by tick on one
//! thread, measured on W1 (schedule + cancel), W2 (schedule + fire), W3 (reset), W5
//! (churn) and W7 (steady state). Workloads are defined in `docs/ARCHITECTURE.md`
//! ("Workloads").
//!
//! Layout: [`adapters`] puts each entrant behind [`VirtualTimeQueue`]; [`runner`] runs W1–W3
//! and [`churn`] runs W5 and W7 on any such queue, with their checks; [`report`] holds the samples
//! and renders their tables.
//!
//! Invariant: a run either passes its checks and yields an [`Outcome`], or yields an error
//! (a panic in an entrant included); a failed check never becomes a number.
//!
//! Isolation: `bench` runs each entrant's repeats of one (workload, N) in a fresh process of
//! its own ([`run_isolated`], the hidden `tickwheel queue-worker`), after one untimed run
//! of the same input: every timed run finds memory only this entrant has used, whatever ran
//! before it. In one process, an entrant that runs after another gets the memory the other
//! freed, already faulted in or not, so at N = 10^6 its figure depends on which entrant ran
//! before it (`docs/benchmarks.md`, "Each entrant in a process of its own").

mod adapters;
mod churn;
pub mod report;
mod runner;

pub use adapters::VirtualTimeQueue;

use crate::error::{Error, Result};
use crate::workload::Workload;
use adapters::{
    BTreeTimers, HierarchicalHashWheel, IdQueue, IndexedPriorityQueue, LazyBinaryHeap, SlimQueue,
    TickwheelQueue, TokioDelayQueue,
};
use report::QueueSample;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use tickwheel::{HashedWheel, Heap, SlimWheel, Wheel};
use tickwheel_lab::workloads::{self, ChurnInput, QueueInput};

/// A timer queue that runs the virtual-time workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueEntrant {
    /// `tickwheel::Wheel`.
    Wheel,
    /// `tickwheel::SlimWheel`: the `Wheel`'s levels over 8-byte records, a reset returning a
    /// new key.
    SlimWheel,
    /// `tickwheel::IdWheel`: the `SlimWheel` named by the caller's dense ids (the workloads'
    /// timer ids), as the lazy `BinaryHeap` is.
    IdWheel,
    /// `tickwheel::HashedWheel`.
    HashedWheel,
    /// `tickwheel::Heap`.
    Heap,
    /// `std::collections::BinaryHeap` with lazy cancellation.
    BinaryHeap,
    /// The `priority-queue` crate's indexed heap (real `remove` and `change_priority`).
    PriorityQueue,
    /// `BTreeMap<(deadline, id), _>`, async-io's design.
    BTreeMap,
    /// tokio-util's `DelayQueue` on paused tokio time.
    DelayQueue,
    /// `hierarchical_hash_wheel_timer`'s cancellable four-level wheel.
    Hhwt,
}

impl QueueEntrant {
    /// All queue entrants, in table order (tickwheel first, then peers).
    pub const ALL: [QueueEntrant; 10] = [
        QueueEntrant::Wheel,
        QueueEntrant::SlimWheel,
        QueueEntrant::IdWheel,
        QueueEntrant::HashedWheel,
        QueueEntrant::Heap,
        QueueEntrant::BinaryHeap,
        QueueEntrant::PriorityQueue,
        QueueEntrant::BTreeMap,
        QueueEntrant::DelayQueue,
        QueueEntrant::Hhwt,
    ];

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            QueueEntrant::Wheel => "tickwheel-wheel",
            QueueEntrant::SlimWheel => "tickwheel-slim",
            QueueEntrant::IdWheel => "tickwheel-id",
            QueueEntrant::HashedWheel => "tickwheel-hashed",
            QueueEntrant::Heap => "tickwheel-heap",
            QueueEntrant::BinaryHeap => "std-binaryheap",
            QueueEntrant::PriorityQueue => "priority-queue",
            QueueEntrant::BTreeMap => "btreemap",
            QueueEntrant::DelayQueue => "tokio-delayqueue",
            QueueEntrant::Hhwt => "hhwt",
        }
    }

    /// Whether this entrant is tickwheel's own (as opposed to a peer).
    pub fn is_tickwheel(self) -> bool {
        matches!(
            self,
            QueueEntrant::Wheel
                | QueueEntrant::SlimWheel
                | QueueEntrant::IdWheel
                | QueueEntrant::HashedWheel
                | QueueEntrant::Heap
        )
    }

    /// Why this entrant cannot run `workload`, if it cannot (the table says so instead of
    /// showing a number). Every queue entrant here can cancel and reset, so only workloads
    /// of another family are refused.
    pub fn cannot_run(self, workload: Workload) -> Option<&'static str> {
        (workload.family() != crate::workload::Family::Queues)
            .then_some("not a virtual-time workload")
    }
}

impl std::fmt::Display for QueueEntrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The seeded input of one virtual-time workload at one N.
#[derive(Debug, Clone)]
pub enum Input {
    /// W1, W2 or W3.
    Batch(QueueInput),
    /// W5 or W7.
    Churn(ChurnInput),
}

impl Input {
    /// Generates `workload`'s input for `n` timers; `None` for a workload of another family.
    pub fn generate(workload: Workload, seed: u64, n: usize) -> Option<Input> {
        Some(match workload {
            Workload::ScheduleCancel => Input::Batch(workloads::w1(seed, n)),
            Workload::ScheduleFire => Input::Batch(workloads::w2(seed, n)),
            Workload::Reset => Input::Batch(workloads::w3(seed, n)),
            Workload::Churn => Input::Churn(workloads::w5(seed, n)),
            Workload::SteadyState => Input::Churn(workloads::w7(seed, n)),
            Workload::RealTimeTasks | Workload::DurableTasks | Workload::Futures => return None,
        })
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Wall time of the timed region.
    pub elapsed: Duration,
    /// Operations in the timed region: N for W1–W3 (one timer through the workload); churn
    /// operations plus firings of the timed ticks for W5 and W7.
    pub ops: u64,
    /// Largest firing delay past the deadline, in ticks (W2, W5, W7, and W3 when checked).
    pub max_late_ticks: Option<u64>,
    /// Peak heap growth from the empty queue, in bytes: over the run, or over W7's timed
    /// stretch.
    pub peak_heap_bytes: u64,
}

/// Runs one entrant's repeats of `workload` at `n` timers in a fresh child process (module
/// docs, "Isolation"): the child generates the seeded input itself, runs it once untimed
/// with the checks that cost an extra drain (the warm-up), then `repeats` timed runs, and
/// prints their [`QueueSample`]. A failed check or a panic fails the child, whose message
/// goes to this process's stderr.
pub fn run_isolated(
    entrant: QueueEntrant,
    workload: Workload,
    seed: u64,
    n: usize,
    repeats: u32,
) -> Result<QueueSample> {
    let args: Vec<String> = [
        "queue-worker",
        "--entrant",
        entrant.name(),
        "--workload",
        &workload.label().to_ascii_lowercase(),
        "--seed",
        &seed.to_string(),
        "--n",
        &n.to_string(),
        "--repeat",
        &repeats.to_string(),
    ]
    .map(str::to_owned)
    .into();
    crate::child::run(workload.label(), entrant.name(), &args, |json| {
        QueueSample::from_json(workload, entrant, n, json)
    })
}

/// The body of `tickwheel queue-worker`: the warm-up and `repeats` timed runs of
/// [`run_isolated`], their sample as JSON on stdout.
pub fn worker(
    entrant: QueueEntrant,
    workload: Workload,
    seed: u64,
    n: usize,
    repeats: u32,
) -> Result<()> {
    let input = Input::generate(workload, seed, n)
        .ok_or_else(|| Error::Internal(format!("{} is not a queue workload", workload.label())))?;
    let mut sample = QueueSample {
        workload,
        entrant,
        n,
        ops: 0,
        runs_ns: Vec::new(),
        max_late_ticks: None,
        peak_heap_bytes: 0,
    };
    for r in 0..=repeats {
        let warm_up = r == 0;
        let outcome = run(entrant, workload, &input, warm_up)?;
        sample.ops = outcome.ops;
        sample.max_late_ticks = sample.max_late_ticks.max(outcome.max_late_ticks);
        sample.peak_heap_bytes = sample.peak_heap_bytes.max(outcome.peak_heap_bytes);
        if !warm_up {
            sample.runs_ns.push(outcome.elapsed.as_nanos() as u64);
        }
    }
    say!("{}", sample.to_json());
    Ok(())
}

/// Runs `workload` on a fresh instance of `entrant`; `check` enables the checks that cost
/// an extra drain (W3's).
pub fn run(
    entrant: QueueEntrant,
    workload: Workload,
    input: &Input,
    check: bool,
) -> Result<Outcome> {
    if let Some(why) = entrant.cannot_run(workload) {
        return Err(Error::Internal(format!(
            "{} cannot run {}: {why}",
            entrant.name(),
            workload.label()
        )));
    }
    let attempt = catch_unwind(AssertUnwindSafe(|| {
        dispatch(entrant, workload, input, check)
    }));
    let label = workload.label();
    let name = entrant.name();
    match attempt {
        Ok(result) => result.map_err(|e| Error::Failed {
            entrant: name,
            workload: label,
            source: Box::new(e),
        }),
        Err(panic) => Err(Error::Panicked {
            entrant: name,
            workload: label,
            message: panic_message(&*panic),
        }),
    }
}

/// The text of a caught panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn dispatch(e: QueueEntrant, w: Workload, input: &Input, check: bool) -> Result<Outcome> {
    match e {
        QueueEntrant::Wheel => on(TickwheelQueue(Wheel::new()), w, input, check),
        QueueEntrant::SlimWheel => on(SlimQueue(SlimWheel::new()), w, input, check),
        QueueEntrant::IdWheel => on(IdQueue::default(), w, input, check),
        QueueEntrant::HashedWheel => on(TickwheelQueue(HashedWheel::new()), w, input, check),
        QueueEntrant::Heap => on(TickwheelQueue(Heap::new()), w, input, check),
        QueueEntrant::BinaryHeap => on(LazyBinaryHeap::default(), w, input, check),
        QueueEntrant::PriorityQueue => on(IndexedPriorityQueue::default(), w, input, check),
        QueueEntrant::BTreeMap => on(BTreeTimers::default(), w, input, check),
        QueueEntrant::Hhwt => on(HierarchicalHashWheel::default(), w, input, check),
        QueueEntrant::DelayQueue => {
            let queue = TokioDelayQueue::new().map_err(|e| Error::io("tokio runtime", e))?;
            on(queue, w, input, check)
        }
    }
}

/// Runs `w` on `queue` (inside the queue's context).
fn on<Q: VirtualTimeQueue>(
    mut queue: Q,
    w: Workload,
    input: &Input,
    check: bool,
) -> Result<Outcome> {
    queue.scoped(|q| match (w, input) {
        (Workload::ScheduleCancel, Input::Batch(i)) => runner::schedule_cancel(q, i),
        (Workload::ScheduleFire, Input::Batch(i)) => runner::schedule_fire(q, i),
        (Workload::Reset, Input::Batch(i)) => runner::reset(q, i, check),
        (Workload::Churn | Workload::SteadyState, Input::Churn(i)) => churn::run(q, i),
        _ => Err(Error::Internal(format!(
            "{} got the input of another workload",
            w.label()
        ))),
    })
}
