//! [`Stats`]: counters of a service, and the lateness histogram.
//!
//! Counters live where they are written, so that no hot path shares a cache line with
//! another thread: schedule/cancel counts per shard (under the shard's lock), fired/panicked
//! counts and lateness per worker (relaxed atomics, one writer each). [`Stats`] sums them.
//!
//! Lateness is the time from the start of a callback's deadline tick to the moment a worker
//! starts it, read from the service's clock. Buckets are powers of two of microseconds.

use std::fmt;
use std::time::Duration;

use crate::sync::Counter;

/// Histogram buckets: `< 1 µs`, then `[2^(i-1), 2^i) µs` for `i` in `1..BUCKETS`; the last
/// bucket also holds everything longer.
pub const BUCKETS: usize = 40;

/// A lock-free lateness recorder (one writer, any readers).
pub(crate) struct Histogram {
    buckets: [Counter; BUCKETS],
    max_ns: Counter,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| Counter::new()),
            max_ns: Counter::new(),
        }
    }
}

fn bucket_of(late_ns: u64) -> usize {
    let us = late_ns / 1_000;
    if us == 0 {
        return 0;
    }
    ((u64::BITS - us.leading_zeros()) as usize).min(BUCKETS - 1)
}

impl Histogram {
    #[inline]
    pub(crate) fn record(&self, late_ns: u64) {
        self.buckets[bucket_of(late_ns)].add(1);
        self.max_ns.raise_to(late_ns);
    }

    pub(crate) fn add_to(&self, into: &mut LatenessHistogram) {
        for (sum, b) in into.buckets.iter_mut().zip(&self.buckets) {
            *sum += b.get();
        }
        let max = Duration::from_nanos(self.max_ns.get());
        into.max = into.max.max(max);
    }
}

/// A snapshot of how late callbacks started: counts in power-of-two microsecond buckets.
///
/// ```
/// use tickwheel::service::LatenessHistogram;
///
/// let empty = LatenessHistogram::default();
/// assert_eq!(empty.count(), 0);
/// assert_eq!(empty.quantile(0.99), None);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LatenessHistogram {
    buckets: [u64; BUCKETS],
    max: Duration,
}

impl Default for LatenessHistogram {
    fn default() -> Self {
        LatenessHistogram {
            buckets: [0; BUCKETS],
            max: Duration::ZERO,
        }
    }
}

impl LatenessHistogram {
    /// How many callbacks were measured.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The largest lateness seen.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// An upper bound of the `q` quantile (`0.0..=1.0`): the upper edge of the bucket that
    /// holds it, capped at [`max`](Self::max). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Self::upper_edge(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// The count of each bucket with its upper edge: `< 1 µs`, `< 2 µs`, `< 4 µs`, ….
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, &n)| (Self::upper_edge(i), n))
    }

    fn upper_edge(bucket: usize) -> Duration {
        Duration::from_micros(1u64 << bucket)
    }
}

impl fmt::Debug for LatenessHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatenessHistogram")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.max)
            .finish()
    }
}

/// Counters of a [`TimerService`](super::TimerService), summed over its shards and workers.
///
/// Each counter is exact once the service is quiet (e.g. after `settle`); while timers are
/// being scheduled and fired concurrently they are a consistent-enough snapshot, not an
/// atomic one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timers waiting for their deadline.
    pub pending: usize,
    /// The sum over shards of each shard's largest pending count: the exact high-water mark
    /// when one thread schedules (one shard), an upper bound of it otherwise.
    pub high_water: usize,
    /// Timers the queues hold memory for: the pending ones and the entries of timers that are gone,
    /// kept for reuse until [`TimerService::shrink_to_fit`](crate::TimerService::shrink_to_fit).
    pub capacity: usize,
    /// Timers ever scheduled (resets not counted).
    pub scheduled: u64,
    /// Timers that expired: callbacks started on a worker, plus internal wake-ups.
    pub fired: u64,
    /// Timers removed by a successful `cancel`.
    pub cancelled: u64,
    /// Callbacks that panicked (counted in `fired` too).
    pub panicked: u64,
    /// Timers discarded by `shutdown` without running.
    pub discarded: u64,
    /// How late callbacks started. A thread running callbacks reads the clock for this once
    /// per about 10 µs of them (by its estimate of what one costs), not before each: a
    /// callback's lateness can be short of the real one by that much, never over it.
    pub lateness: LatenessHistogram,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        assert_eq!(bucket_of(999), 0);
        assert_eq!(bucket_of(1_000), 1);
        assert_eq!(bucket_of(3_999), 2);
        assert_eq!(bucket_of(4_000), 3);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let h = Histogram::default();
        for us in 0..100 {
            h.record(us * 1_000);
        }
        let mut snap = LatenessHistogram::default();
        h.add_to(&mut snap);
        assert_eq!(snap.count(), 100);
        assert_eq!(snap.max(), Duration::from_micros(99));
        // The median (50 µs) is in [32, 64) µs.
        assert_eq!(snap.quantile(0.5), Some(Duration::from_micros(64)));
        assert_eq!(snap.quantile(1.0), Some(Duration::from_micros(99)));
        assert_eq!(snap.quantile(0.0), Some(Duration::from_micros(1)));
    }
}
