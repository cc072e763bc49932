//! The inputs of workloads W1–W5 and W7, generated from a seed before any timing, identical for
//! every entrant. `docs/ARCHITECTURE.md` ("Workloads") defines what each workload does with
//! its input; this module is the one place that defines the inputs themselves.
//!
//! Invariants:
//! * Everything random comes from [`SplitMix64::stream`]`(seed, k)` for workload `k`, so
//!   `--seed 42` gives the same input on every machine, to every entrant, in every repeat,
//!   and adding a workload never changes another's input.
//! * Timer ids are `0..n` (`u32`); deadlines are virtual ticks (1 tick = 1 ms) counted from
//!   tick 0, where every virtual-time workload starts.
//! * Delays are uniform in the closed ranges below.

use crate::SplitMix64;
use std::ops::RangeInclusive;

/// W1's delay range in ticks: connection timeouts, most never fire.
pub const W1_DELAYS: RangeInclusive<u64> = 1..=60_000;
/// W2's delay range in ticks: every timer fires.
pub const W2_DELAYS: RangeInclusive<u64> = 1..=10_000;
/// W3's delay range in ticks, for the initial timers and every reset.
pub const W3_DELAYS: RangeInclusive<u64> = 1..=30_000;
/// W4's delay range in milliseconds of real time.
pub const W4_DELAYS_MS: RangeInclusive<u64> = 0..=1_000;
/// W5's timeout range in ticks, for the initial timers, every reset and every new timer.
pub const W5_TIMEOUTS: RangeInclusive<u64> = 1..=60_000;
/// How many ticks W5 runs after its timers are in place.
pub const W5_TICKS: u64 = 1_000;
/// The share of W5's operations that are resets, in percent; the rest are cancel + insert.
/// W7 has the same mix.
pub const W5_RESET_PERCENT: u64 = 80;
/// W7's timeout range in ticks: short timeouts, so that a run reaches its equilibrium.
pub const W7_TIMEOUTS: RangeInclusive<u64> = 1..=2_000;
/// How many ticks W7 runs, untimed, before its timed stretch: two whole timeout ranges, so
/// that every timer of the start has fired or been replaced and every structure holds what
/// it holds at equilibrium (garbage it has not reclaimed included).
pub const W7_WARMUP_TICKS: u64 = 2 * *W7_TIMEOUTS.end();
/// How many ticks W7 times after its warm-up.
pub const W7_TICKS: u64 = 1_000;

/// The input of W1 (schedule + cancel), W2 (schedule + fire) or W3 (reset).
#[derive(Debug, Clone)]
pub struct QueueInput {
    /// Deadline tick of timer `i` (inserted at tick 0).
    pub deadlines: Vec<u64>,
    /// W1: the order in which timers are cancelled (a permutation of `0..n`); empty otherwise.
    pub cancel_order: Vec<u32>,
    /// W3: `(timer id, new deadline)` for each reset, in order; empty otherwise.
    pub resets: Vec<(u32, u64)>,
}

impl QueueInput {
    /// The number of timers.
    pub fn n(&self) -> usize {
        self.deadlines.len()
    }

    /// The latest deadline (0 for no timers).
    pub fn max_deadline(&self) -> u64 {
        self.deadlines.iter().copied().max().unwrap_or(0)
    }
}

fn draws(rng: &mut SplitMix64, n: usize, range: RangeInclusive<u64>) -> Vec<u64> {
    (0..n).map(|_| rng.in_range(range.clone())).collect()
}

/// W1: `n` deadlines in [`W1_DELAYS`], then a shuffled cancel order.
pub fn w1(seed: u64, n: usize) -> QueueInput {
    let mut rng = SplitMix64::stream(seed, 1);
    let deadlines = draws(&mut rng, n, W1_DELAYS);
    let cancel_order = rng.permutation(n as u32);
    QueueInput {
        deadlines,
        cancel_order,
        resets: Vec::new(),
    }
}

/// W2: `n` deadlines in [`W2_DELAYS`].
pub fn w2(seed: u64, n: usize) -> QueueInput {
    let mut rng = SplitMix64::stream(seed, 2);
    QueueInput {
        deadlines: draws(&mut rng, n, W2_DELAYS),
        cancel_order: Vec::new(),
        resets: Vec::new(),
    }
}

/// W3: `n` deadlines in [`W3_DELAYS`], then `n` resets of uniformly chosen timers to new
/// deadlines in the same range (virtual time stays at tick 0).
pub fn w3(seed: u64, n: usize) -> QueueInput {
    let mut rng = SplitMix64::stream(seed, 3);
    let deadlines = draws(&mut rng, n, W3_DELAYS);
    let resets = (0..n)
        .map(|_| (rng.index(n) as u32, rng.in_range(W3_DELAYS)))
        .collect();
    QueueInput {
        deadlines,
        cancel_order: Vec::new(),
        resets,
    }
}

/// W4: `n` delays in milliseconds in [`W4_DELAYS_MS`], clipped to `max_delay_ms`.
pub fn w4(seed: u64, n: usize, max_delay_ms: u64) -> Vec<u64> {
    let mut rng = SplitMix64::stream(seed, 4);
    let range = *W4_DELAYS_MS.start()..=(*W4_DELAYS_MS.end()).min(max_delay_ms);
    draws(&mut rng, n, range)
}

/// One churn operation (W5, W7) on a timer slot. Each of the `n` slots always holds exactly one
/// live timer, so "a random live timer" is a random slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChurnOp {
    /// Reset the slot's timer to `now + timeout`.
    Reset {
        /// The slot, in `0..n`.
        slot: u32,
        /// Ticks from now, in the input's timeout range.
        timeout: u64,
    },
    /// Cancel the slot's timer and insert a new one at `now + timeout` in its place.
    Replace {
        /// The slot, in `0..n`.
        slot: u32,
        /// Ticks from now, in the input's timeout range.
        timeout: u64,
    },
}

/// The input of a churn workload: `n` live timers, then [`ChurnInput::warmup`] +
/// [`ChurnInput::ticks`] ticks of firing, refilling and [`ChurnInput::ops_per_tick`] seeded
/// operations, every timeout in [`ChurnInput::timeouts`]. W5 has no warm-up and long
/// timeouts ([`W5_TIMEOUTS`]); W7 has short ones ([`W7_TIMEOUTS`]) and runs
/// [`W7_WARMUP_TICKS`] before the ticks a harness times.
///
/// Operations and refill timeouts are generated on demand, per tick, from the seed (a
/// harness generates a tick's operations before timing it), so the input of 6·10^6 timers
/// needs no gigabytes. Refill timeouts depend only on `(slot, tick)`, never on the order in
/// which a queue fires its due timers, so every correct entrant sees the same timers.
#[derive(Debug, Clone)]
pub struct ChurnInput {
    /// Deadline tick of the timer first in slot `i` (inserted at tick 0).
    pub deadlines: Vec<u64>,
    /// Ticks to run before the timed stretch: the clock goes 1, 2, …, `warmup`.
    pub warmup: u64,
    /// Ticks to time after the warm-up: the clock goes on to `warmup + ticks`.
    pub ticks: u64,
    timeouts: RangeInclusive<u64>,
    ops_seed: u64,
    refill_seed: u64,
}

impl ChurnInput {
    /// The number of live timers (and slots).
    pub fn n(&self) -> usize {
        self.deadlines.len()
    }

    /// The range of every timeout: the initial deadlines, resets, replacements and refills.
    pub fn timeouts(&self) -> RangeInclusive<u64> {
        self.timeouts.clone()
    }

    /// The last tick: `warmup + ticks`.
    pub fn last_tick(&self) -> u64 {
        self.warmup + self.ticks
    }

    /// Operations per tick: ⌈n / 100⌉ (so a small `n` still churns).
    pub fn ops_per_tick(&self) -> usize {
        self.n().div_ceil(100)
    }

    /// Replaces `out`'s contents with tick `tick`'s operations, in order: each picks a slot
    /// uniformly; [`W5_RESET_PERCENT`] % are [`ChurnOp::Reset`], the rest
    /// [`ChurnOp::Replace`]; timeouts are uniform in [`ChurnInput::timeouts`].
    pub fn ops_at(&self, tick: u64, out: &mut Vec<ChurnOp>) {
        out.clear();
        let mut rng = SplitMix64::stream(self.ops_seed, tick);
        let n = self.n();
        for _ in 0..self.ops_per_tick() {
            let slot = rng.index(n) as u32;
            let reset = rng.below(100) < W5_RESET_PERCENT;
            let timeout = rng.in_range(self.timeouts());
            out.push(if reset {
                ChurnOp::Reset { slot, timeout }
            } else {
                ChurnOp::Replace { slot, timeout }
            });
        }
    }

    /// The timeout of the timer that replaces slot `slot`'s timer when it fires at `tick`
    /// (a slot fires at most once per tick, since every timeout is at least 1).
    pub fn refill_timeout(&self, slot: u32, tick: u64) -> u64 {
        let key = (tick << 32) | u64::from(slot);
        SplitMix64::new(self.refill_seed ^ key).in_range(self.timeouts())
    }
}

/// W5: `n` initial deadlines in [`W5_TIMEOUTS`] and the seeds of the churn that follows,
/// over [`W5_TICKS`] ticks.
pub fn w5(seed: u64, n: usize) -> ChurnInput {
    w5_with_ticks(seed, n, W5_TICKS)
}

/// W5 over `ticks` ticks instead of [`W5_TICKS`] (for quick checks; same timers and
/// operations for the ticks both run).
pub fn w5_with_ticks(seed: u64, n: usize, ticks: u64) -> ChurnInput {
    churn(SplitMix64::stream(seed, 5), n, W5_TIMEOUTS, 0, ticks)
}

/// W7 (steady state): `n` initial deadlines in [`W7_TIMEOUTS`], then W5's mix of operations
/// with timeouts in the same range, over [`W7_WARMUP_TICKS`] + [`W7_TICKS`] ticks.
pub fn w7(seed: u64, n: usize) -> ChurnInput {
    w7_with_ticks(seed, n, W7_TICKS)
}

/// W7 timing `ticks` ticks after the same warm-up instead of [`W7_TICKS`].
pub fn w7_with_ticks(seed: u64, n: usize, ticks: u64) -> ChurnInput {
    churn(
        SplitMix64::stream(seed, 7),
        n,
        W7_TIMEOUTS,
        W7_WARMUP_TICKS,
        ticks,
    )
}

fn churn(
    mut rng: SplitMix64,
    n: usize,
    timeouts: RangeInclusive<u64>,
    warmup: u64,
    ticks: u64,
) -> ChurnInput {
    let deadlines = draws(&mut rng, n, timeouts.clone());
    ChurnInput {
        deadlines,
        warmup,
        ticks,
        timeouts,
        ops_seed: rng.next_u64(),
        refill_seed: rng.next_u64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_reproducible_and_in_range() {
        let a = w1(42, 1000);
        let b = w1(42, 1000);
        assert_eq!(a.deadlines, b.deadlines);
        assert_eq!(a.cancel_order, b.cancel_order);
        assert_ne!(a.deadlines, w1(43, 1000).deadlines);
        assert!(a.deadlines.iter().all(|d| W1_DELAYS.contains(d)));
        let mut order = a.cancel_order.clone();
        order.sort_unstable();
        assert_eq!(order, (0..1000).collect::<Vec<u32>>());
        let r = w3(42, 500);
        assert!(r
            .resets
            .iter()
            .all(|&(i, d)| i < 500 && W3_DELAYS.contains(&d)));
        assert!(w2(7, 100).deadlines.iter().all(|d| W2_DELAYS.contains(d)));
        assert!(w4(7, 100, 5).iter().all(|&d| d <= 5));
    }

    #[test]
    fn churn_is_reproducible_in_range_and_mostly_resets() {
        let input = w5(42, 10_000);
        assert_eq!(input.ops_per_tick(), 100);
        assert_eq!(w5(1, 150).ops_per_tick(), 2);
        assert!(input.deadlines.iter().all(|d| W5_TIMEOUTS.contains(d)));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut resets = 0;
        for tick in 1..=input.ticks {
            input.ops_at(tick, &mut a);
            w5(42, 10_000).ops_at(tick, &mut b);
            assert_eq!(a, b);
            assert_eq!(a.len(), 100);
            for op in &a {
                let (ChurnOp::Reset { slot, timeout } | ChurnOp::Replace { slot, timeout }) = *op;
                assert!(slot < 10_000 && W5_TIMEOUTS.contains(&timeout));
                resets += u32::from(matches!(op, ChurnOp::Reset { .. }));
            }
        }
        // 80 % of 100 000 operations, within a generous margin.
        assert!((78_000..82_000).contains(&resets), "{resets} resets");
        assert_eq!(input.refill_timeout(3, 7), input.refill_timeout(3, 7));
        assert_ne!(input.refill_timeout(3, 7), input.refill_timeout(3, 8));
        assert!((0..1000).all(|s| W5_TIMEOUTS.contains(&input.refill_timeout(s, 9))));
    }

    #[test]
    fn steady_state_has_short_timeouts_and_a_warm_up_of_two_ranges() {
        let input = w7(42, 10_000);
        assert_eq!((input.warmup, input.ticks), (4_000, W7_TICKS));
        assert_eq!(input.last_tick(), 5_000);
        assert_eq!(input.ops_per_tick(), 100);
        assert!(input.deadlines.iter().all(|d| W7_TIMEOUTS.contains(d)));
        let mut ops = Vec::new();
        for tick in [1, 4_001, 5_000] {
            input.ops_at(tick, &mut ops);
            for op in &ops {
                let (ChurnOp::Reset { timeout, .. } | ChurnOp::Replace { timeout, .. }) = *op;
                assert!(W7_TIMEOUTS.contains(&timeout));
            }
        }
        assert!((0..1000).all(|s| W7_TIMEOUTS.contains(&input.refill_timeout(s, 9))));
        assert_ne!(input.deadlines, w5(42, 10_000).deadlines);
        assert_eq!(w5(42, 10).warmup, 0);
    }
}
