//! Runs the churn workloads, W5 (churn) and W7 (steady state), on one queue and checks every
//! firing as it happens.
//!
//! Each of the N slots always holds exactly one live timer. Setup (untimed) inserts the N
//! first timers at tick 0. Then for each tick 1..=warm-up + T: the tick's operations are
//! generated (untimed), and the queue advances the clock one tick, replaces every timer that
//! fired with a new one (timeout from [`ChurnInput::refill_timeout`]), and applies the
//! operations: a reset moves the slot's timer to now + timeout, a replace cancels it (the
//! cancel must find it pending) and inserts a new one. Only the last T ticks are timed and
//! counted; the warm-up (none in W5, two timeout ranges in W7) brings every queue to its
//! equilibrium first.
//!
//! Invariants checked, so a number is only reported for a correct queue:
//! * A timer fires exactly at its last deadline: the fired slot's expected deadline must
//!   equal the tick (earlier = early or a cancelled timer firing; a second firing in the
//!   same tick finds the refilled deadline, later than now).
//! * None is lost: before an operation touches a slot, and for every slot after the last
//!   tick, the slot's deadline must lie in the future.
//!
//! Peak heap is the most the queue holds above the empty queue: over the whole run in W5
//! (setup included), over the timed stretch in W7 (at equilibrium). Either way a queue that
//! defers its garbage (the lazy heap) shows it here.

use super::{Outcome, VirtualTimeQueue};
use crate::error::{Error, Result};
use crate::memory::PeakMeter;
use std::time::{Duration, Instant};
use tickwheel_lab::workloads::{ChurnInput, ChurnOp};

/// W5 or W7 (whichever `input` is) on `q`.
pub fn run<Q: VirtualTimeQueue>(q: &mut Q, input: &ChurnInput) -> Result<Outcome> {
    let n = input.n();
    let mut expected = input.deadlines.clone();
    let mut handles = Vec::with_capacity(n);
    let mut ops = Vec::with_capacity(input.ops_per_tick());
    let mut fired = Vec::with_capacity(n.min(1 << 16));
    let meter = PeakMeter::start();
    for (id, &deadline) in input.deadlines.iter().enumerate() {
        handles.push(q.insert(id as u32, deadline));
    }
    let mut elapsed = Duration::ZERO;
    let mut counted = 0u64;
    for now in 1..=input.warmup {
        input.ops_at(now, &mut ops);
        fired.clear();
        q.advance(now, &mut fired);
        refill(q, input, now, &fired, &mut expected, &mut handles)?;
        apply(q, now, &ops, &mut expected, &mut handles)?;
    }
    if input.warmup > 0 {
        meter.restart_peak();
    }
    for now in input.warmup + 1..=input.last_tick() {
        input.ops_at(now, &mut ops);
        fired.clear();
        let start = Instant::now();
        q.advance(now, &mut fired);
        let refilled = refill(q, input, now, &fired, &mut expected, &mut handles);
        let applied = apply(q, now, &ops, &mut expected, &mut handles);
        elapsed += start.elapsed();
        refilled?;
        applied?;
        counted += (fired.len() + ops.len()) as u64;
    }
    let peak_heap_bytes = meter.peak_growth();
    if let Some(slot) = expected.iter().position(|&d| d <= input.last_tick()) {
        return Err(Error::Check(format!(
            "timer in slot {slot} (deadline {}) never fired",
            expected[slot]
        )));
    }
    Ok(Outcome {
        elapsed,
        ops: counted,
        max_late_ticks: Some(0),
        peak_heap_bytes,
    })
}

/// Checks each firing of tick `now` and puts a new timer in its slot.
fn refill<Q: VirtualTimeQueue>(
    q: &mut Q,
    input: &ChurnInput,
    now: u64,
    fired: &[(u32, u64)],
    expected: &mut [u64],
    handles: &mut [Q::Handle],
) -> Result<()> {
    for &(slot, _) in fired {
        let Some(deadline) = expected.get_mut(slot as usize) else {
            return Err(Error::Check(format!("fired unknown timer id {slot}")));
        };
        if *deadline != now {
            let what = if *deadline > now {
                "early, twice, or after its cancel"
            } else {
                "late"
            };
            return Err(Error::Check(format!(
                "timer in slot {slot} fired at tick {now}, its deadline is {}: {what}",
                *deadline
            )));
        }
        *deadline = now + input.refill_timeout(slot, now);
        handles[slot as usize] = q.insert(slot, *deadline);
    }
    Ok(())
}

/// Applies tick `now`'s operations.
fn apply<Q: VirtualTimeQueue>(
    q: &mut Q,
    now: u64,
    ops: &[ChurnOp],
    expected: &mut [u64],
    handles: &mut [Q::Handle],
) -> Result<()> {
    for &op in ops {
        let (ChurnOp::Reset { slot, timeout } | ChurnOp::Replace { slot, timeout }) = op;
        let s = slot as usize;
        if expected[s] <= now {
            return Err(Error::Check(format!(
                "timer in slot {slot} (deadline {}) had not fired by tick {now}",
                expected[s]
            )));
        }
        expected[s] = now + timeout;
        handles[s] = match op {
            ChurnOp::Reset { .. } => q.reset(handles[s], slot, expected[s]),
            ChurnOp::Replace { .. } => {
                if !q.cancel(handles[s]) {
                    return Err(Error::Check(format!(
                        "cancel of pending slot {slot} found nothing"
                    )));
                }
                q.insert(slot, expected[s])
            }
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwheel_lab::workloads::{w5_with_ticks, w7_with_ticks};

    /// A model queue (a plain list) that can break the contract in one chosen way.
    struct Model {
        fault: &'static str,
        pending: Vec<(u32, u64)>,
        fires: usize,
    }

    impl VirtualTimeQueue for Model {
        type Handle = u32;
        fn insert(&mut self, id: u32, deadline: u64) -> u32 {
            self.pending.push((id, deadline));
            id
        }
        fn cancel(&mut self, id: u32) -> bool {
            let before = self.pending.len();
            if self.fault != "keep-cancelled" {
                self.pending.retain(|p| p.0 != id);
            }
            self.fault == "keep-cancelled" || self.pending.len() < before
        }
        fn reset(&mut self, id: u32, _: u32, deadline: u64) -> u32 {
            if self.fault != "ignore-reset" {
                self.pending.retain(|p| p.0 != id);
            }
            self.insert(id, deadline)
        }
        fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
            let early = |p: &(u32, u64)| self.fault == "early" && p.1 == now + 1;
            let (due, rest): (Vec<_>, Vec<_>) =
                self.pending.iter().partition(|p| p.1 <= now || early(p));
            self.pending = rest;
            for (id, _) in due {
                self.fires += 1;
                if !(self.fault == "lose" && self.fires == 3) {
                    fired.push((id, now));
                }
            }
        }
    }

    fn model(fault: &'static str) -> Model {
        Model {
            fault,
            pending: Vec::new(),
            fires: 0,
        }
    }

    #[test]
    fn a_correct_model_passes_and_counts_firings_and_operations() {
        // 1000 slots, 1000 ticks: 10 000 operations and a few dozen firings.
        let input = w5_with_ticks(9, 1000, 1000);
        let outcome = run(&mut model("none"), &input).unwrap();
        assert!(outcome.ops > 10_000 + 10, "{} ops", outcome.ops);
    }

    #[test]
    fn the_warm_up_is_run_and_checked_but_not_counted() {
        // W7 over 10 timed ticks: the 4000 ticks of warm-up fire every slot a few times (so
        // a lost timer fails the run), yet only the timed ticks' operations count.
        let input = w7_with_ticks(9, 1000, 10);
        let outcome = run(&mut model("none"), &input).unwrap();
        assert!(
            (100..=100 + 1000).contains(&outcome.ops),
            "{} ops",
            outcome.ops
        );
        let err = run(&mut model("lose"), &input).unwrap_err().to_string();
        assert!(
            err.contains("never fired") || err.contains("had not fired"),
            "{err}"
        );
    }

    #[test]
    fn every_kind_of_broken_queue_fails() {
        let input = w5_with_ticks(9, 1000, 1000);
        for (fault, expect) in [
            ("early", "early"),
            ("lose", "never fired"),
            ("ignore-reset", "fired at tick"),
            ("keep-cancelled", "fired at tick"),
        ] {
            let err = run(&mut model(fault), &input).unwrap_err().to_string();
            assert!(
                err.contains(expect) || err.contains("had not fired"),
                "{fault}: {err}"
            );
        }
    }
}
