//! [`Ticks`]: `Instant` ↔ tick conversion, deadlines rounded up, "now" rounded down.
//!
//! Invariants (tested below): `deadline_tick(t)` is the smallest tick whose start is `>= t`;
//! `now_tick(t)` is the largest tick whose start is `<= t`, capped at [`MAX_NOW_TICK`]; no
//! arithmetic overflows, whatever the instant or duration.

use std::time::{Duration, Instant};

/// The tick of a timer that never fires: `Duration::MAX`, instants past the tick range.
pub const NEVER: u64 = u64::MAX;

/// The largest tick "now" ever reaches, one below [`NEVER`], so "never" timers never fire.
pub const MAX_NOW_TICK: u64 = NEVER - 1;

/// The finest resolution a service accepts.
pub const MIN_RESOLUTION: Duration = Duration::from_micros(1);

/// The coarsest resolution a service accepts.
pub const MAX_RESOLUTION: Duration = Duration::from_secs(1);

/// Converts between [`Instant`]s and ticks of a fixed resolution counted from an origin.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::time::{Ticks, NEVER};
///
/// let origin = Instant::now();
/// let ticks = Ticks::new(origin, Duration::from_millis(1));
/// // Deadlines round up: 1.2 ms is tick 2, and a 1 ns delay is a whole tick.
/// assert_eq!(ticks.deadline_tick(origin + Duration::from_micros(1_200)), 2);
/// assert_eq!(ticks.deadline_tick(origin + Duration::from_nanos(1)), 1);
/// // "Now" rounds down: at 1.2 ms the clock is in tick 1.
/// assert_eq!(ticks.now_tick(origin + Duration::from_micros(1_200)), 1);
/// // Duration::MAX means never.
/// assert_eq!(ticks.delay_tick(origin, Duration::MAX), NEVER);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Ticks {
    origin: Instant,
    /// Nanoseconds a tick, within [`MIN_RESOLUTION`, `MAX_RESOLUTION`].
    resolution_ns: u64,
}

impl Ticks {
    /// Ticks of `resolution` counted from `origin` (tick 0 starts at `origin`). The resolution
    /// is clamped to [`MIN_RESOLUTION`]`..=`[`MAX_RESOLUTION`].
    pub fn new(origin: Instant, resolution: Duration) -> Ticks {
        let clamped = resolution.clamp(MIN_RESOLUTION, MAX_RESOLUTION);
        // At most 10^9, fits.
        let resolution_ns = clamped.as_nanos() as u64;
        Ticks {
            origin,
            resolution_ns,
        }
    }

    /// The instant tick 0 starts at.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The length of one tick.
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(self.resolution_ns)
    }

    /// The first tick whose start is at or after `deadline` (rounds up; never early). Instants
    /// before the origin give tick 0; instants past the tick range give [`NEVER`].
    #[inline]
    pub fn deadline_tick(&self, deadline: Instant) -> u64 {
        match nanos_since(self.origin, deadline) {
            Some(ns) => ns.div_ceil(self.resolution_ns),
            None => self.slow_deadline_tick(deadline.saturating_duration_since(self.origin)),
        }
    }

    /// The tick of `now + delay`, rounded up; [`NEVER`] when the sum overflows (`Duration::MAX`).
    #[inline]
    pub fn delay_tick(&self, now: Instant, delay: Duration) -> u64 {
        // Fast path: both fit in u64 nanoseconds (585 years), no `Instant` arithmetic.
        if let (Some(base), Some(d)) = (nanos_since(self.origin, now), nanos_of(delay)) {
            if let Some(ns) = base.checked_add(d) {
                return ns.div_ceil(self.resolution_ns);
            }
        }
        match now.checked_add(delay) {
            Some(deadline) => self.deadline_tick(deadline),
            None => NEVER,
        }
    }

    #[cold]
    fn slow_deadline_tick(&self, since: Duration) -> u64 {
        let tick = since.as_nanos().div_ceil(u128::from(self.resolution_ns));
        u64::try_from(tick).unwrap_or(NEVER)
    }

    /// The tick `now` is in (rounds down), at most [`MAX_NOW_TICK`].
    #[inline]
    pub fn now_tick(&self, now: Instant) -> u64 {
        let tick = match nanos_since(self.origin, now) {
            Some(ns) => ns / self.resolution_ns,
            None => {
                let ns = now.saturating_duration_since(self.origin).as_nanos();
                u64::try_from(ns / u128::from(self.resolution_ns)).unwrap_or(MAX_NOW_TICK)
            }
        };
        tick.min(MAX_NOW_TICK)
    }

    /// How long after the start of tick `tick` the instant `now` is, in nanoseconds: 0 if
    /// `now` is earlier, `None` for [`NEVER`] and past 2^64 ns (585 years) from the origin.
    /// All in `u64` (no 128-bit division): workers call it for every callback they start.
    #[inline]
    pub(crate) fn nanos_after(&self, tick: u64, now: Instant) -> Option<u64> {
        if tick == NEVER {
            return None;
        }
        let start = tick.checked_mul(self.resolution_ns)?;
        Some(nanos_since(self.origin, now)?.saturating_sub(start))
    }

    /// The instant tick `tick` starts at; `None` for [`NEVER`] and for ticks past what
    /// `Instant` can represent.
    #[inline]
    pub fn instant_of(&self, tick: u64) -> Option<Instant> {
        if tick == NEVER {
            return None;
        }
        let ns = u128::from(tick) * u128::from(self.resolution_ns);
        let secs = u64::try_from(ns / 1_000_000_000).ok()?;
        let sub = (ns % 1_000_000_000) as u32;
        self.origin.checked_add(Duration::new(secs, sub))
    }
}

/// `to - from` in nanoseconds (0 if `to` is earlier), if it fits in a `u64`.
#[inline]
fn nanos_since(from: Instant, to: Instant) -> Option<u64> {
    nanos_of(to.saturating_duration_since(from))
}

/// `d` in nanoseconds, if it fits in a `u64`.
#[inline]
fn nanos_of(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(res: Duration) -> (Instant, Ticks) {
        let origin = Instant::now();
        (origin, Ticks::new(origin, res))
    }

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let (o, t) = ticks(Duration::from_micros(10));
        for ns in [0u64, 1, 9_999, 10_000, 10_001, 19_999, 20_000, 123_456_789] {
            let at = o + Duration::from_nanos(ns);
            let d = t.deadline_tick(at);
            let n = t.now_tick(at);
            assert!(t.instant_of(d).unwrap() >= at, "deadline early at {ns}");
            assert!(
                d == 0 || t.instant_of(d - 1).unwrap() < at,
                "not the first at {ns}"
            );
            assert!(t.instant_of(n).unwrap() <= at);
            assert!(t.instant_of(n + 1).unwrap() > at);
            assert_eq!(d, ns.div_ceil(10_000));
            assert_eq!(n, ns / 10_000);
        }
    }

    #[test]
    fn sub_tick_delay_is_one_tick_not_zero() {
        let (o, t) = ticks(Duration::from_millis(1));
        let now = o + Duration::from_millis(5);
        assert_eq!(t.delay_tick(now, Duration::from_nanos(1)), 6);
        assert_eq!(t.delay_tick(now, Duration::ZERO), 5);
        // Mid-tick: the deadline's tick starts after the deadline.
        let mid = o + Duration::from_micros(5_500);
        assert_eq!(t.delay_tick(mid, Duration::from_micros(100)), 6);
        assert!(t.delay_tick(mid, Duration::from_micros(100)) > t.now_tick(mid));
    }

    #[test]
    fn never_and_extremes_do_not_overflow() {
        let (o, t) = ticks(Duration::from_micros(1));
        assert_eq!(t.delay_tick(o, Duration::MAX), NEVER);
        assert_eq!(t.instant_of(NEVER), None);
        let later = Ticks::new(o + Duration::from_secs(1), Duration::from_micros(1));
        assert_eq!(
            later.now_tick(o),
            0,
            "instants before the origin are tick 0"
        );
        assert_eq!(later.deadline_tick(o), 0);
        // Far future (500 years): still finite at 1 µs, and "now" never reaches NEVER.
        let far = Duration::from_secs(500 * 365 * 86_400);
        if let Some(at) = o.checked_add(far) {
            assert!(t.deadline_tick(at) < NEVER);
            assert!(t.now_tick(at) <= MAX_NOW_TICK);
        }
        // 2^64 µs is past what `Instant` holds on Linux: no panic, just `None`.
        let _ = t.instant_of(MAX_NOW_TICK);
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let (o, t) = ticks(Duration::from_micros(7));
        // Around the u64-nanosecond limit the fast path hands over to the u128 one.
        for secs in [
            0u64,
            1,
            18_446_744_072,
            18_446_744_073,
            18_446_744_074,
            1 << 40,
        ] {
            let d = Duration::new(secs, 999_999_999);
            if let Some(at) = o.checked_add(d) {
                let slow = u64::try_from(d.as_nanos().div_ceil(7_000)).unwrap_or(NEVER);
                assert_eq!(t.deadline_tick(at), slow, "deadline at {secs} s");
                assert_eq!(t.delay_tick(o, d), slow, "delay of {secs} s");
                let floor = u64::try_from(d.as_nanos() / 7_000).unwrap_or(MAX_NOW_TICK);
                assert_eq!(t.now_tick(at), floor.min(MAX_NOW_TICK));
            }
        }
    }

    #[test]
    fn nanos_after_agrees_with_instant_of() {
        let (origin, t) = ticks(Duration::from_micros(10));
        for (tick, at_us) in [(0, 0), (0, 7), (3, 30), (3, 31), (3, 29), (100, 12_345)] {
            let now = origin + Duration::from_micros(at_us);
            let expected = now.saturating_duration_since(t.instant_of(tick).unwrap());
            assert_eq!(
                t.nanos_after(tick, now),
                Some(expected.as_nanos() as u64),
                "tick {tick} at {at_us} us"
            );
        }
        assert_eq!(t.nanos_after(NEVER, origin), None);
        assert_eq!(
            t.nanos_after(u64::MAX / 2, origin),
            None,
            "tick start overflows u64 ns"
        );
    }

    #[test]
    fn resolution_is_clamped() {
        let (_, fine) = ticks(Duration::from_nanos(1));
        assert_eq!(fine.resolution(), MIN_RESOLUTION);
        let (_, coarse) = ticks(Duration::from_secs(60));
        assert_eq!(coarse.resolution(), MAX_RESOLUTION);
    }
}
