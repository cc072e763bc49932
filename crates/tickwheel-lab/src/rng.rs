//! The SplitMix64 generator.
//!
//! Invariant: a generator's output depends only on its seed (no global state, no clock), so
//! every input built from it is reproducible on any machine and in any language.

use std::ops::RangeInclusive;

/// The SplitMix64 generator (Steele, Lea & Flood 2014; the seeder of xoshiro).
///
/// Chosen because it is tiny, fast, has no bad seeds and is trivially reproducible in any
/// language, so others can regenerate the inputs. Not for cryptography.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// A generator for stream `stream` of run seed `seed`: different streams of one seed
    /// share no numbers, so adding a stream never changes another's output.
    pub fn stream(seed: u64, stream: u64) -> SplitMix64 {
        SplitMix64::new(
            SplitMix64::new(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64(),
        )
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift, bias below `n / 2^64`); 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `0..len`, for picking an index; 0 when `len` is 0.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// Uniform in `range`, both ends included; the whole `u64` range is allowed. An empty
    /// range (`start > end`) yields its start.
    pub fn in_range(&mut self, range: RangeInclusive<u64>) -> u64 {
        let (lo, hi) = range.into_inner();
        if hi < lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.index(i + 1));
        }
    }

    /// A uniformly random permutation of `0..n`.
    pub fn permutation(&mut self, n: u32) -> Vec<u32> {
        let mut order: Vec<u32> = (0..n).collect();
        self.shuffle(&mut order);
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vector() {
        // First outputs for seed 0 of the reference implementation (Vigna's splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn in_range_hits_both_ends_and_stays_inside() {
        let mut rng = SplitMix64::new(1);
        let draws: Vec<u64> = (0..1000).map(|_| rng.in_range(3..=5)).collect();
        assert!(draws.contains(&3) && draws.contains(&5));
        assert!(draws.iter().all(|d| (3..=5).contains(d)));
        assert_eq!(rng.in_range(7..=7), 7);
        #[allow(clippy::reversed_empty_ranges)]
        let empty = rng.in_range(9..=2);
        assert_eq!(empty, 9);
        let _ = rng.in_range(0..=u64::MAX);
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4)
            .map(|_| SplitMix64::stream(42, 1).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            SplitMix64::stream(42, 1).next_u64(),
            SplitMix64::stream(42, 2).next_u64()
        );
        assert_ne!(
            SplitMix64::stream(42, 1).next_u64(),
            SplitMix64::stream(43, 1).next_u64()
        );
    }

    #[test]
    fn permutation_holds_every_number_once() {
        let mut order = SplitMix64::new(5).permutation(1000);
        assert_ne!(order, (0..1000).collect::<Vec<u32>>());
        order.sort_unstable();
        assert_eq!(order, (0..1000).collect::<Vec<u32>>());
    }
}
