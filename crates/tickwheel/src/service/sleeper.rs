//! [`Sleeper`]: how the timer thread sleeps until a tick's start without oversleeping it.
//!
//! A timed sleep ends late: the kernel's timer fires, then the thread has to be scheduled
//! again — tens of microseconds on a virtual machine even with 1 ns of timer slack, and that
//! is lateness added to every timer of the tick. So the timer thread measures how late its
//! sleeps end (an exponentially weighted average), sleeps until that long *twice over*
//! before the tick (at most the builder's [`busy_wait`](super::Builder::busy_wait) limit),
//! and spins the rest: the tick's timers then start within the spin's precision instead of
//! the kernel's wake-up latency.
//!
//! Spinning costs CPU only just before a tick with work due: an idle service still parks
//! without a timeout, and a sleep shorter than four margins or 500 µs is not split at all: at
//! a fine resolution with a timer every few ticks, spins before each would take the CPU the
//! producer and the workers need, and make the tail of the lateness worse, not better.
//!
//! # Pacing at fine resolutions
//!
//! Every timed wake-up has a price of its own: on a virtual machine the timer interrupt that ends a
//! sleep costs the woken thread some 12-20 µs of CPU, whether it slept 10 µs or 1 ms (a thread
//! woken by another one, as a worker is, costs a few µs). At a resolution of a few microseconds
//! with timers due at every tick, a wake-up at every tick's start spends most of a core on wake-ups
//! alone. A service can have the timer thread wake about once per
//! [`wake_interval`](super::Builder::wake_interval) at most (by default it wakes at every tick with
//! timers due: [`DEFAULT_WAKE_INTERVAL`] is zero): when the next due tick starts sooner than that
//! after its last wake-up, it sleeps until the interval is over and then runs every tick that has
//! started meanwhile with one drain and one hand-off. It aims at the interval's end early by its
//! average lateness, so that the wake-up comes about one interval after the last, not one interval
//! and a lateness. The end of an interval is no deadline: it is never spun to.
//!
//! Timers are never early by this — a tick still runs only once it has started — and at most
//! about one interval later than with a wake-up per tick. At resolutions at or above the
//! interval nothing changes: due ticks are further apart than the interval anyway (only a
//! timer scheduled already due may wait for the end of the current interval). It trades
//! lateness for CPU, and the trade is only worth it where timed wake-ups are dear: on a
//! 2-core virtual machine, with a timer per microsecond at 10 µs resolution, an interval of
//! 50 µs takes about a quarter off the service's CPU and off the timer thread's timed
//! wake-ups, and adds some 25-30 µs to the median lateness; one of 25 µs saves some 5% for
//! 4-5 µs. The worker hand-off keeps its own latency (a worker whose core went idle wakes
//! 10-20 µs after it is notified), so the default does not pace: a fine resolution is
//! chosen for precision.

use std::time::{Duration, Instant};

/// The default [`wake_interval`](super::Builder::wake_interval).
pub(crate) const DEFAULT_WAKE_INTERVAL: Duration = Duration::ZERO;

/// How the timer thread sleeps: the builder's [`busy_wait`](super::Builder::busy_wait) and
/// [`wake_interval`](super::Builder::wake_interval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SleepPolicy {
    /// The longest spin before a tick; zero never spins.
    pub(crate) busy_wait: Duration,
    /// The shortest time between two timed wake-ups (see the module docs).
    pub(crate) wake_interval: Duration,
}

impl Default for SleepPolicy {
    fn default() -> SleepPolicy {
        SleepPolicy {
            busy_wait: DEFAULT_BUSY_WAIT,
            wake_interval: DEFAULT_WAKE_INTERVAL,
        }
    }
}

/// The default [`busy_wait`](super::Builder::busy_wait): about the median overshoot of a
/// timed sleep on a loaded 2-core VM, so the timer thread wakes that much early and spins only
/// when a sleep ends sooner than usual (the builder's docs have the measurement; it was
/// 100 µs, which bought no lower median lateness for some 25 % more process CPU than 50 µs).
const DEFAULT_BUSY_WAIT: Duration = Duration::from_micros(50);

/// The margin is this many times the average lateness of a sleep.
const MARGIN_FACTOR: u32 = 2;
/// A sleep is split into sleep + spin only when it is at least this many margins long...
const MIN_SLEEP_MARGINS: u32 = 4;
/// ...and at least this long: with a timer every few ticks at a fine resolution, spins
/// before each would take the CPU the producer and the workers need.
const MIN_SPLIT_SLEEP: Duration = Duration::from_micros(500);
/// The weight of a new lateness sample in the average: 1/8.
const AVERAGE_SHIFT: u32 = 3;

/// The timer thread's sleep policy and what it has learnt of this machine's timed sleeps.
#[derive(Debug)]
pub(crate) struct Sleeper {
    /// The longest spin allowed (the builder's `busy_wait`); zero disables spinning.
    limit: Duration,
    /// The average lateness of a timed sleep, in nanoseconds.
    late_ns: u64,
}

/// How a sleep towards an instant should go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Sleep the whole way.
    Sleep(Duration),
    /// Sleep this long, then spin until the target.
    SleepThenSpin(Duration),
}

impl Sleeper {
    pub(crate) fn new(limit: Duration) -> Sleeper {
        Sleeper { limit, late_ns: 0 }
    }

    /// The average lateness of a timed sleep.
    pub(crate) fn average(&self) -> Duration {
        Duration::from_nanos(self.late_ns)
    }

    /// Until when a thread that woke at `woke` sleeps at least under a pacing `interval` (see
    /// the module docs): the interval's end, aimed early by the average lateness so that the
    /// next wake-up comes about one interval after `woke`, not one interval and a lateness.
    pub(crate) fn paced_until(&self, woke: Instant, interval: Duration) -> Instant {
        // The builder caps the interval at a second; saturate anyway rather than panic.
        woke.checked_add(interval.saturating_sub(self.average()))
            .unwrap_or(woke)
    }

    /// How early to wake before a target: twice the average lateness, at most the limit.
    pub(crate) fn margin(&self) -> Duration {
        Duration::from_nanos(self.late_ns.saturating_mul(u64::from(MARGIN_FACTOR))).min(self.limit)
    }

    /// The plan for a sleep of `left`.
    pub(crate) fn plan(&self, left: Duration) -> Plan {
        let margin = self.margin();
        if margin.is_zero() || left < (margin * MIN_SLEEP_MARGINS).max(MIN_SPLIT_SLEEP) {
            Plan::Sleep(left)
        } else {
            Plan::SleepThenSpin(left - margin)
        }
    }

    /// Records that a timed sleep meant to end at `target` ended at `woke`. Sleeps cut short
    /// (an unpark) say nothing about lateness and are ignored.
    pub(crate) fn observe(&mut self, target: Instant, woke: Instant) {
        let Some(late) = woke.checked_duration_since(target) else {
            return;
        };
        let sample = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        // Saturating: one absurd sample (a suspended VM) must not overflow; it decays away.
        self.late_ns = self
            .late_ns
            .saturating_sub(self.late_ns >> AVERAGE_SHIFT)
            .saturating_add(sample >> AVERAGE_SHIFT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_pacing_interval_past_the_instant_range_saturates() {
        let now = Instant::now();
        assert_eq!(Sleeper::new(MS).paced_until(now, Duration::MAX), now);
        assert_eq!(Sleeper::new(MS).paced_until(now, 50 * US), now + 50 * US);
    }

    fn learnt(limit: Duration, late: Duration, samples: usize) -> Sleeper {
        let mut sleeper = Sleeper::new(limit);
        let target = Instant::now();
        for _ in 0..samples {
            sleeper.observe(target, target + late);
        }
        sleeper
    }

    #[test]
    fn sleeps_whole_until_it_has_seen_a_late_wakeup() {
        let sleeper = Sleeper::new(100 * US);
        assert_eq!(sleeper.margin(), Duration::ZERO);
        assert_eq!(sleeper.plan(MS), Plan::Sleep(MS));
    }

    #[test]
    fn margin_is_twice_the_average_lateness() {
        // The average converges to the sample: 30 µs late every time.
        let sleeper = learnt(100 * US, 30 * US, 200);
        let margin = sleeper.margin();
        assert!((59 * US..=61 * US).contains(&margin), "{margin:?}");
        assert_eq!(sleeper.plan(MS), Plan::SleepThenSpin(MS - margin));
    }

    #[test]
    fn margin_never_exceeds_the_limit() {
        let sleeper = learnt(100 * US, 5 * MS, 200);
        assert_eq!(sleeper.margin(), 100 * US);
        let disabled = learnt(Duration::ZERO, 5 * MS, 200);
        assert_eq!(disabled.margin(), Duration::ZERO);
        assert_eq!(disabled.plan(MS), Plan::Sleep(MS));
    }

    #[test]
    fn short_sleeps_are_not_split() {
        // A large margin: four margins is the bound.
        let sleeper = learnt(200 * US, 200 * US, 400);
        let margin = sleeper.margin();
        assert_eq!(margin, 200 * US);
        let short = margin * MIN_SLEEP_MARGINS - US;
        assert_eq!(sleeper.plan(short), Plan::Sleep(short));
        let long = margin * MIN_SLEEP_MARGINS;
        assert_eq!(sleeper.plan(long), Plan::SleepThenSpin(long - margin));
        // A small margin: the absolute floor is the bound.
        let sleeper = learnt(100 * US, 5 * US, 400);
        let margin = sleeper.margin();
        let short = MIN_SPLIT_SLEEP - US;
        assert_eq!(sleeper.plan(short), Plan::Sleep(short));
        assert_eq!(
            sleeper.plan(MIN_SPLIT_SLEEP),
            Plan::SleepThenSpin(MIN_SPLIT_SLEEP - margin)
        );
    }

    #[test]
    fn pacing_aims_early_by_the_average_lateness() {
        let woke = Instant::now();
        // Nothing learnt: the whole interval.
        let fresh = Sleeper::new(100 * US);
        assert_eq!(fresh.paced_until(woke, 50 * US), woke + 50 * US);
        assert_eq!(fresh.average(), Duration::ZERO);
        // 20 µs late on average: aim 20 µs early (the spin limit plays no part).
        let sleeper = learnt(Duration::ZERO, 20 * US, 400);
        let average = sleeper.average();
        assert!((19 * US..=21 * US).contains(&average), "{average:?}");
        assert_eq!(sleeper.paced_until(woke, 50 * US), woke + 50 * US - average);
        // An interval shorter than a sleep's lateness paces nothing.
        assert_eq!(sleeper.paced_until(woke, 10 * US), woke);
        assert_eq!(sleeper.paced_until(woke, Duration::ZERO), woke);
    }

    #[test]
    fn early_wakeups_teach_nothing_and_late_ones_decay() {
        let mut sleeper = learnt(100 * US, 30 * US, 200);
        let before = sleeper.margin();
        let target = Instant::now() + MS;
        sleeper.observe(target, target - 10 * US); // unparked before the target
        assert_eq!(sleeper.margin(), before);
        // A huge stall (a suspended machine) neither overflows nor sticks.
        sleeper.observe(target, target + Duration::from_secs(3600));
        assert_eq!(sleeper.margin(), 100 * US);
        for _ in 0..400 {
            sleeper.observe(target, target);
        }
        assert!(sleeper.margin() < US, "{:?}", sleeper.margin());
    }
}
