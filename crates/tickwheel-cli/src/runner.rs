//! Runs the virtual-time workloads W1–W3 on one entrant and checks the outcome.
//!
//! Invariants:
//! * Only the workload's operations are inside the timed region: inputs, the handle table
//!   and the `fired` log are allocated before the clock starts, the queue is dropped after it
//!   stops.
//! * W1 counts successful cancels (must be `n`). W2 logs `(id, tick)` of every firing into a
//!   preallocated vector (the same cost for every entrant) and, after the clock stops, checks
//!   exactly-once and never-early, then runs [`QUIET_TICKS`] more ticks to catch late
//!   duplicates. W3 is checked, untimed, on the first repeat by draining the queue: every timer
//!   must fire once, never before its *last* deadline.
//! * A failed check is an error; the caller never turns it into a number.

use crate::entrants::{
    BTreeTimers, Entrant, HierarchicalHashWheel, LazyBinaryHeap, TickwheelQueue, TokioDelayQueue,
    VirtualQueue,
};
use crate::workload::Input;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use tickwheel::{HashedWheel, Heap, Wheel};

/// Ticks polled after the last expected firing to catch timers that fire twice or late.
pub const QUIET_TICKS: u64 = 100;

/// Ticks past the latest deadline after which a timer that has not fired counts as lost.
pub const LOST_AFTER_TICKS: u64 = 1_000;

/// A virtual-time workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Virtual {
    /// Schedule + cancel.
    W1,
    /// Schedule + fire.
    W2,
    /// Reset.
    W3,
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct RunOutcome {
    /// Wall time of the timed region.
    pub elapsed: Duration,
    /// Largest firing delay past the deadline, in ticks (W2, and W3 when checked).
    pub max_late_ticks: Option<u64>,
}

/// Runs `workload` on a fresh instance of `entrant`; `check_w3` enables W3's drain check.
pub fn run(
    entrant: Entrant,
    workload: Virtual,
    input: &Input,
    check_w3: bool,
) -> Result<RunOutcome, String> {
    let attempt = catch_unwind(AssertUnwindSafe(|| {
        dispatch(entrant, workload, input, check_w3)
    }));
    match attempt {
        Ok(result) => result.map_err(|e| format!("{entrant} failed {workload:?}: {e}")),
        Err(panic) => Err(format!(
            "{entrant} panicked in {workload:?}: {}",
            panic_message(&*panic)
        )),
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

fn dispatch(e: Entrant, w: Virtual, input: &Input, check: bool) -> Result<RunOutcome, String> {
    match e {
        Entrant::Wheel => on(TickwheelQueue(Wheel::new()), w, input, check),
        Entrant::HashedWheel => on(TickwheelQueue(HashedWheel::new()), w, input, check),
        Entrant::Heap => on(TickwheelQueue(Heap::new()), w, input, check),
        Entrant::BinaryHeap => on(LazyBinaryHeap::default(), w, input, check),
        Entrant::BTreeMap => on(BTreeTimers::default(), w, input, check),
        Entrant::Hhwt => on(HierarchicalHashWheel::default(), w, input, check),
        Entrant::DelayQueue => {
            let queue = TokioDelayQueue::new().map_err(|e| format!("tokio runtime: {e}"))?;
            on(queue, w, input, check)
        }
        realtime => Err(format!("{realtime} runs only the real-time workload W4")),
    }
}

fn on<Q: VirtualQueue>(
    mut queue: Q,
    w: Virtual,
    input: &Input,
    check: bool,
) -> Result<RunOutcome, String> {
    queue.scoped(|q| match w {
        Virtual::W1 => w1(q, input),
        Virtual::W2 => w2(q, input),
        Virtual::W3 => w3(q, input, check),
    })
}

fn insert_all<Q: VirtualQueue>(q: &mut Q, deadlines: &[u64], handles: &mut Vec<Q::Handle>) {
    for (id, &deadline) in deadlines.iter().enumerate() {
        handles.push(q.insert(id as u32, deadline));
    }
}

fn w1<Q: VirtualQueue>(q: &mut Q, input: &Input) -> Result<RunOutcome, String> {
    let mut handles = Vec::with_capacity(input.n());
    let start = Instant::now();
    insert_all(q, &input.deadlines, &mut handles);
    let mut cancelled = 0usize;
    for &id in &input.cancel_order {
        cancelled += usize::from(q.cancel(handles[id as usize]));
    }
    let elapsed = start.elapsed();
    if cancelled != input.n() {
        return Err(format!(
            "only {cancelled} of {} cancels found a pending timer",
            input.n()
        ));
    }
    Ok(RunOutcome {
        elapsed,
        max_late_ticks: None,
    })
}

fn w2<Q: VirtualQueue>(q: &mut Q, input: &Input) -> Result<RunOutcome, String> {
    let n = input.n();
    let mut handles = Vec::with_capacity(n);
    let mut fired = Vec::with_capacity(n + 16);
    let limit = input.max_deadline() + LOST_AFTER_TICKS;
    let start = Instant::now();
    insert_all(q, &input.deadlines, &mut handles);
    let mut tick = 0;
    while fired.len() < n && tick < limit {
        tick += 1;
        q.advance(tick, &mut fired);
    }
    let elapsed = start.elapsed();
    quiet_ticks(q, tick, &mut fired);
    let max_late_ticks = Some(verify_fired(&fired, &input.deadlines)?);
    Ok(RunOutcome {
        elapsed,
        max_late_ticks,
    })
}

fn w3<Q: VirtualQueue>(q: &mut Q, input: &Input, check: bool) -> Result<RunOutcome, String> {
    let mut handles = Vec::with_capacity(input.n());
    insert_all(q, &input.deadlines, &mut handles);
    let start = Instant::now();
    for &(id, deadline) in &input.resets {
        let slot = &mut handles[id as usize];
        *slot = q.reset(*slot, id, deadline);
    }
    let elapsed = start.elapsed();
    let mut max_late_ticks = None;
    if check {
        let mut last = input.deadlines.clone();
        for &(id, deadline) in &input.resets {
            last[id as usize] = deadline;
        }
        let limit = last.iter().copied().max().unwrap_or(0) + LOST_AFTER_TICKS;
        let mut fired = Vec::with_capacity(input.n() + 16);
        let mut tick = 0;
        while fired.len() < input.n() && tick < limit {
            tick += 1;
            q.advance(tick, &mut fired);
        }
        quiet_ticks(q, tick, &mut fired);
        max_late_ticks = Some(verify_fired(&fired, &last)?);
    }
    Ok(RunOutcome {
        elapsed,
        max_late_ticks,
    })
}

fn quiet_ticks<Q: VirtualQueue>(q: &mut Q, from: u64, fired: &mut Vec<(u32, u64)>) {
    for tick in from + 1..=from + QUIET_TICKS {
        q.advance(tick, fired);
    }
}

/// Checks that every timer `id < deadlines.len()` fired exactly once, never before
/// `deadlines[id]`; returns the largest lateness in ticks.
pub fn verify_fired(fired: &[(u32, u64)], deadlines: &[u64]) -> Result<u64, String> {
    let mut seen = vec![false; deadlines.len()];
    let mut max_late = 0;
    for &(id, tick) in fired {
        let Some(was_seen) = seen.get_mut(id as usize) else {
            return Err(format!("fired unknown timer id {id}"));
        };
        if *was_seen {
            return Err(format!("timer {id} fired twice (again at tick {tick})"));
        }
        let deadline = deadlines[id as usize];
        if tick < deadline {
            return Err(format!(
                "timer {id} fired early: tick {tick}, deadline {deadline}"
            ));
        }
        *was_seen = true;
        max_late = max_late.max(tick - deadline);
    }
    let lost = seen.iter().filter(|s| !**s).count();
    if lost > 0 {
        return Err(format!("{lost} of {} timers never fired", deadlines.len()));
    }
    Ok(max_late)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_catches_early_double_and_lost() {
        let deadlines = [5, 7];
        assert_eq!(verify_fired(&[(0, 5), (1, 9)], &deadlines), Ok(2));
        assert!(verify_fired(&[(0, 4), (1, 7)], &deadlines)
            .unwrap_err()
            .contains("early"));
        assert!(verify_fired(&[(0, 5), (0, 6)], &deadlines)
            .unwrap_err()
            .contains("twice"));
        assert!(verify_fired(&[(0, 5)], &deadlines)
            .unwrap_err()
            .contains("never fired"));
        assert!(verify_fired(&[(9, 5)], &deadlines)
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn every_virtual_peer_passes_every_workload_on_small_input() {
        let peers = [
            Entrant::BinaryHeap,
            Entrant::BTreeMap,
            Entrant::DelayQueue,
            Entrant::Hhwt,
        ];
        for entrant in peers {
            for (w, input) in [
                (Virtual::W1, crate::workload::w1(1, 300)),
                (Virtual::W2, crate::workload::w2(2, 300)),
                (Virtual::W3, crate::workload::w3(3, 300)),
            ] {
                let outcome = run(entrant, w, &input, true).unwrap();
                if w != Virtual::W1 {
                    assert!(outcome.max_late_ticks.is_some(), "{entrant} {w:?}");
                }
            }
        }
    }
}
