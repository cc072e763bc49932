//! Runs W1 (schedule + cancel), W2 (schedule + fire) and W3 (reset) on one queue and checks
//! the outcome.
//!
//! Invariants:
//! * Only the workload's operations are inside the timed region: inputs, the handle table
//!   and the `fired` log are allocated before the clock starts, the queue is dropped after it
//!   stops.
//! * W1 counts successful cancels (must be `n`). W2 logs `(id, tick)` of every firing into a
//!   preallocated vector (the same cost for every entrant) and, after the clock stops, checks
//!   exactly-once and never-early, then runs [`QUIET_TICKS`] more ticks to catch late
//!   duplicates. W3 is checked, untimed, when asked (the first repeat) by draining the queue:
//!   every timer must fire once, never before its *last* deadline.
//! * Peak heap is measured from the empty queue (after the harness's own vectors exist).

use super::{Outcome, VirtualTimeQueue};
use crate::error::{Error, Result};
use crate::memory::PeakMeter;
use std::time::Instant;
use tickwheel_lab::workloads::QueueInput;

/// Ticks polled after the last expected firing to catch timers that fire twice or late.
pub const QUIET_TICKS: u64 = 100;

/// Ticks past the latest deadline after which a timer that has not fired counts as lost.
pub const LOST_AFTER_TICKS: u64 = 1_000;

fn insert_all<Q: VirtualTimeQueue>(q: &mut Q, deadlines: &[u64], handles: &mut Vec<Q::Handle>) {
    for (id, &deadline) in deadlines.iter().enumerate() {
        handles.push(q.insert(id as u32, deadline));
    }
}

/// W1: inserts every timer, then cancels each in the input's order.
pub fn schedule_cancel<Q: VirtualTimeQueue>(q: &mut Q, input: &QueueInput) -> Result<Outcome> {
    let mut handles = Vec::with_capacity(input.n());
    let meter = PeakMeter::start();
    let start = Instant::now();
    insert_all(q, &input.deadlines, &mut handles);
    let mut cancelled = 0usize;
    for &id in &input.cancel_order {
        cancelled += usize::from(q.cancel(handles[id as usize]));
    }
    let elapsed = start.elapsed();
    if cancelled != input.n() {
        return Err(Error::Check(format!(
            "only {cancelled} of {} cancels found a pending timer",
            input.n()
        )));
    }
    Ok(Outcome {
        elapsed,
        ops: input.n() as u64,
        max_late_ticks: None,
        peak_heap_bytes: meter.peak_growth(),
    })
}

/// W2: inserts every timer, then advances tick by tick until all fired; verified.
pub fn schedule_fire<Q: VirtualTimeQueue>(q: &mut Q, input: &QueueInput) -> Result<Outcome> {
    let n = input.n();
    let mut handles = Vec::with_capacity(n);
    let mut fired = Vec::with_capacity(n + 16);
    let limit = input.max_deadline() + LOST_AFTER_TICKS;
    let meter = PeakMeter::start();
    let start = Instant::now();
    insert_all(q, &input.deadlines, &mut handles);
    let mut tick = 0;
    while fired.len() < n && tick < limit {
        tick += 1;
        q.advance(tick, &mut fired);
    }
    let elapsed = start.elapsed();
    let peak_heap_bytes = meter.peak_growth();
    quiet_ticks(q, tick, &mut fired);
    let max_late_ticks = Some(verify_fired(&fired, &input.deadlines)?);
    Ok(Outcome {
        elapsed,
        ops: n as u64,
        max_late_ticks,
        peak_heap_bytes,
    })
}

/// W3: inserts every timer (untimed), then times the resets; `check` drains and verifies.
pub fn reset<Q: VirtualTimeQueue>(q: &mut Q, input: &QueueInput, check: bool) -> Result<Outcome> {
    let mut handles = Vec::with_capacity(input.n());
    let meter = PeakMeter::start();
    insert_all(q, &input.deadlines, &mut handles);
    let start = Instant::now();
    for &(id, deadline) in &input.resets {
        let slot = &mut handles[id as usize];
        *slot = q.reset(*slot, id, deadline);
    }
    let elapsed = start.elapsed();
    let peak_heap_bytes = meter.peak_growth();
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
    Ok(Outcome {
        elapsed,
        ops: input.n() as u64,
        max_late_ticks,
        peak_heap_bytes,
    })
}

fn quiet_ticks<Q: VirtualTimeQueue>(q: &mut Q, from: u64, fired: &mut Vec<(u32, u64)>) {
    for tick in from + 1..=from + QUIET_TICKS {
        q.advance(tick, fired);
    }
}

/// Checks that every timer `id < deadlines.len()` fired exactly once, never before
/// `deadlines[id]`; returns the largest lateness in ticks.
pub fn verify_fired(fired: &[(u32, u64)], deadlines: &[u64]) -> Result<u64> {
    let mut seen = vec![false; deadlines.len()];
    let mut max_late = 0;
    for &(id, tick) in fired {
        let Some(was_seen) = seen.get_mut(id as usize) else {
            return Err(Error::Check(format!("fired unknown timer id {id}")));
        };
        if *was_seen {
            return Err(Error::Check(format!(
                "timer {id} fired twice (again at tick {tick})"
            )));
        }
        let deadline = deadlines[id as usize];
        if tick < deadline {
            return Err(Error::Check(format!(
                "timer {id} fired early: tick {tick}, deadline {deadline}"
            )));
        }
        *was_seen = true;
        max_late = max_late.max(tick - deadline);
    }
    let lost = seen.iter().filter(|s| !**s).count();
    if lost > 0 {
        return Err(Error::Check(format!(
            "{lost} of {} timers never fired",
            deadlines.len()
        )));
    }
    Ok(max_late)
}

#[cfg(test)]
mod tests {
    use super::super::{on, run, Input, QueueEntrant};
    use super::*;
    use crate::workload::Workload;

    #[test]
    fn verify_catches_early_double_and_lost() {
        let deadlines = [5, 7];
        assert_eq!(verify_fired(&[(0, 5), (1, 9)], &deadlines).unwrap(), 2);
        assert!(verify_fired(&[(0, 4), (1, 7)], &deadlines)
            .unwrap_err()
            .to_string()
            .contains("early"));
        assert!(verify_fired(&[(0, 5), (0, 6)], &deadlines)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(verify_fired(&[(0, 5)], &deadlines)
            .unwrap_err()
            .to_string()
            .contains("never fired"));
        assert!(verify_fired(&[(9, 5)], &deadlines)
            .unwrap_err()
            .to_string()
            .contains("unknown"));
    }

    #[test]
    fn every_queue_passes_every_workload_on_small_input() {
        let workloads = [
            Workload::ScheduleCancel,
            Workload::ScheduleFire,
            Workload::Reset,
            Workload::Churn,
            Workload::SteadyState,
        ];
        for entrant in QueueEntrant::ALL {
            for w in workloads {
                let input = Input::generate(w, 3, 300).unwrap();
                let outcome = run(entrant, w, &input, true).unwrap();
                let name = entrant.name();
                assert!(outcome.ops >= 300, "{name} {w:?}");
                if w != Workload::ScheduleCancel {
                    assert_eq!(outcome.max_late_ticks, Some(0), "{name} {w:?} fired late");
                }
            }
        }
    }

    /// A queue that breaks the contract in a chosen way, to prove the checks bite.
    struct Broken {
        fault: &'static str,
        pending: Vec<(u32, u64)>,
    }

    impl VirtualTimeQueue for Broken {
        type Handle = u32;
        fn insert(&mut self, id: u32, deadline: u64) -> u32 {
            self.pending.push((id, deadline));
            id
        }
        fn cancel(&mut self, id: u32) -> bool {
            self.fault != "cancel" && self.pending.iter().any(|p| p.0 == id)
        }
        fn reset(&mut self, id: u32, _: u32, deadline: u64) -> u32 {
            self.pending.retain(|p| p.0 != id);
            self.insert(id, deadline)
        }
        fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
            let (due, rest): (Vec<_>, Vec<_>) = self
                .pending
                .iter()
                .partition(|p| p.1 <= now || self.fault == "early");
            self.pending = rest;
            for (id, _) in due {
                if !(self.fault == "lose" && id == 0) {
                    fired.push((id, now));
                }
                if self.fault == "double" && id == 0 {
                    self.pending.push((id, now + 5));
                }
            }
        }
    }

    #[test]
    fn a_queue_that_breaks_the_contract_fails_the_run() {
        let broken = |fault| Broken {
            fault,
            pending: Vec::new(),
        };
        let w2 = Input::generate(Workload::ScheduleFire, 5, 50).unwrap();
        for (fault, expect) in [
            ("early", "early"),
            ("double", "twice"),
            ("lose", "never fired"),
        ] {
            let err = on(broken(fault), Workload::ScheduleFire, &w2, true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{fault}: {err}");
        }
        let w3 = Input::generate(Workload::Reset, 5, 50).unwrap();
        assert!(on(broken("early"), Workload::Reset, &w3, true)
            .unwrap_err()
            .to_string()
            .contains("early"));
        let w1 = Input::generate(Workload::ScheduleCancel, 5, 50).unwrap();
        assert!(on(broken("cancel"), Workload::ScheduleCancel, &w1, true)
            .unwrap_err()
            .to_string()
            .contains("cancels"));
        assert!(on(broken("none"), Workload::ScheduleFire, &w2, true).is_ok());
    }
}
