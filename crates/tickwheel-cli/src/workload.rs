//! Workload inputs: seeded, generated before any timing, identical for every entrant.
//!
//! Invariants:
//! * Everything random comes from one [`SplitMix64`] stream per workload, seeded from the
//!   run's seed and the workload's number, so `--seed 42` gives the same input on every
//!   machine, to every entrant, in every repeat.
//! * Timer ids are `0..n` (`u32`); deadlines are virtual ticks (1 tick = 1 ms) counted from
//!   tick 0, where every virtual-time workload starts.
//! * Delays are uniform in the closed ranges of DESIGN.md ("What fast means here").

/// W1's delay range in ticks: connection timeouts, most never fire.
pub const W1_DELAYS: (u64, u64) = (1, 60_000);
/// W2's delay range in ticks: every timer fires.
pub const W2_DELAYS: (u64, u64) = (1, 10_000);
/// W3's delay range in ticks, for the initial timers and every reset.
pub const W3_DELAYS: (u64, u64) = (1, 30_000);
/// W4's delay range in milliseconds of real time.
pub const W4_DELAYS_MS: (u64, u64) = (0, 1_000);

/// The SplitMix64 generator (Steele, Lea & Flood 2014; the seeder of xoshiro).
///
/// Chosen because it is tiny, fast, has no bad seeds and is trivially reproducible in any
/// language, so others can regenerate our inputs.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (Lemire's multiply-shift; bias below 2^-40 for our ranges).
    pub fn in_range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        let span = u128::from(hi - lo) + 1;
        lo + ((u128::from(self.next_u64()) * span) >> 64) as u64
    }

    /// Uniform in `0..n` for `n >= 1`.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The input of W1 (schedule + cancel), W2 (schedule + fire) or W3 (reset).
#[derive(Debug, Clone)]
pub struct Input {
    /// Deadline tick of timer `i` (inserted at tick 0).
    pub deadlines: Vec<u64>,
    /// W1: the order in which timers are cancelled (a permutation of `0..n`).
    pub cancel_order: Vec<u32>,
    /// W3: `(timer id, new deadline)` for each reset, in order.
    pub resets: Vec<(u32, u64)>,
}

impl Input {
    /// The number of timers.
    pub fn n(&self) -> usize {
        self.deadlines.len()
    }

    /// The latest deadline (0 for no timers).
    pub fn max_deadline(&self) -> u64 {
        self.deadlines.iter().copied().max().unwrap_or(0)
    }
}

/// Derives the stream seed of one workload from the run seed, so workloads don't share
/// random numbers and adding a workload never changes another's input.
fn stream_seed(seed: u64, workload: u64) -> u64 {
    SplitMix64::new(seed ^ workload.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64()
}

fn deadlines(rng: &mut SplitMix64, n: usize, range: (u64, u64)) -> Vec<u64> {
    (0..n).map(|_| rng.in_range(range)).collect()
}

/// W1: `n` deadlines in [`W1_DELAYS`], then a Fisher–Yates shuffled cancel order.
pub fn w1(seed: u64, n: usize) -> Input {
    let mut rng = SplitMix64::new(stream_seed(seed, 1));
    let deadlines = deadlines(&mut rng, n, W1_DELAYS);
    let mut cancel_order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        cancel_order.swap(i, rng.below(i + 1));
    }
    Input {
        deadlines,
        cancel_order,
        resets: Vec::new(),
    }
}

/// W2: `n` deadlines in [`W2_DELAYS`].
pub fn w2(seed: u64, n: usize) -> Input {
    let mut rng = SplitMix64::new(stream_seed(seed, 2));
    Input {
        deadlines: deadlines(&mut rng, n, W2_DELAYS),
        cancel_order: Vec::new(),
        resets: Vec::new(),
    }
}

/// W3: `n` deadlines in [`W3_DELAYS`], then `n` resets of uniformly chosen timers to new
/// deadlines in the same range (virtual time stays at tick 0).
pub fn w3(seed: u64, n: usize) -> Input {
    let mut rng = SplitMix64::new(stream_seed(seed, 3));
    let deadlines = deadlines(&mut rng, n, W3_DELAYS);
    let resets = (0..n)
        .map(|_| (rng.below(n) as u32, rng.in_range(W3_DELAYS)))
        .collect();
    Input {
        deadlines,
        cancel_order: Vec::new(),
        resets,
    }
}

/// W4: `n` delays in milliseconds in [`W4_DELAYS_MS`], clipped to `max_delay_ms`.
pub fn w4(seed: u64, n: usize, max_delay_ms: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(stream_seed(seed, 4));
    let range = (W4_DELAYS_MS.0, W4_DELAYS_MS.1.min(max_delay_ms));
    (0..n).map(|_| rng.in_range(range)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_vector() {
        // First outputs for seed 0 of the reference implementation (Vigna's splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn inputs_are_reproducible_and_in_range() {
        let a = w1(42, 1000);
        let b = w1(42, 1000);
        assert_eq!(a.deadlines, b.deadlines);
        assert_eq!(a.cancel_order, b.cancel_order);
        assert_ne!(a.deadlines, w1(43, 1000).deadlines);
        assert!(a.deadlines.iter().all(|d| (1..=60_000).contains(d)));
        let mut order = a.cancel_order.clone();
        order.sort_unstable();
        assert_eq!(order, (0..1000).collect::<Vec<u32>>());
        let r = w3(42, 500);
        assert!(r
            .resets
            .iter()
            .all(|&(i, d)| i < 500 && (1..=30_000).contains(&d)));
        assert!(w2(7, 100)
            .deadlines
            .iter()
            .all(|d| (1..=10_000).contains(d)));
        assert!(w4(7, 100, 5).iter().all(|&d| d <= 5));
    }

    #[test]
    fn in_range_hits_both_ends() {
        let mut rng = SplitMix64::new(1);
        let draws: Vec<u64> = (0..1000).map(|_| rng.in_range((3, 5))).collect();
        assert!(draws.contains(&3) && draws.contains(&5));
        assert!(draws.iter().all(|d| (3..=5).contains(d)));
    }
}
