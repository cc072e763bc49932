//! A tick scale: `tick k` means `origin + k·tick`, and the rounding rules between ticks,
//! [`Instant`]s and [`Duration`]s that an event loop needs.
//!
//! # Invariants
//!
//! * The scale is fixed at construction: `origin` and `tick` never change, so a tick number
//!   always names the same instant (no drift from re-deriving deadlines).
//! * **Deadlines round up, readings round down.** [`deadline_at`](TickScale::deadline_at) and
//!   [`deadline_after`](TickScale::deadline_after) give the first tick at or after an instant,
//!   [`tick_at`](TickScale::tick_at) the last tick at or before it. So when `tick_at(now) >= d`
//!   for a deadline `d` made from instant `t`, `now >= t`: a timer never fires early, and a
//!   sub-tick delay becomes one tick, not zero.
//! * **No overflow, no panic.** Arithmetic is done in `u128` nanoseconds; results past
//!   `u64::MAX` ticks saturate to `u64::MAX` ("never in practice"), instants before the
//!   origin read as tick 0, and a zero `tick` is taken as 1 ns.
//!
//! This is the small conversion the `sys` drivers need; the crate's `time` layer (clocks,
//! `Clock` trait) is the general one.

use std::time::{Duration, Instant};

use crate::queue::TimerQueue;

const NANOS_PER_SEC: u128 = 1_000_000_000;
const NANOS_PER_MILLI: u128 = 1_000_000;

/// Maps ticks to instants: tick `k` is `origin + k·tick`.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sys::TickScale;
///
/// let scale = TickScale::new(Duration::from_millis(1));
/// let now = scale.origin() + Duration::from_micros(2_500);
/// assert_eq!(scale.tick_at(now), 2); // readings round down
/// assert_eq!(scale.deadline_after(now, Duration::from_micros(100)), 3); // deadlines round up
/// assert_eq!(scale.deadline_after(now, Duration::MAX), u64::MAX); // "never", no overflow
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickScale {
    origin: Instant,
    tick: Duration,
}

impl TickScale {
    /// A scale whose tick 0 is now. A zero `tick` is taken as 1 ns.
    pub fn new(tick: Duration) -> TickScale {
        TickScale::with_origin(Instant::now(), tick)
    }

    /// A scale whose tick 0 is `origin`. A zero `tick` is taken as 1 ns.
    pub fn with_origin(origin: Instant, tick: Duration) -> TickScale {
        let tick = tick.max(Duration::from_nanos(1));
        TickScale { origin, tick }
    }

    /// The instant of tick 0.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The length of one tick.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The last tick at or before `at` (rounds down); 0 before the origin.
    pub fn tick_at(&self, at: Instant) -> u64 {
        saturate(self.since_origin(at) / self.tick.as_nanos())
    }

    /// The first tick at or after `at` (rounds up): a timer at that tick never fires before
    /// `at`. 0 at or before the origin.
    pub fn deadline_at(&self, at: Instant) -> u64 {
        self.ceil_ticks(self.since_origin(at))
    }

    /// The first tick at or after `now + delay` (rounds up; a sub-tick delay gives at least
    /// the next tick after `now`'s, never `now`'s own tick unless `now` is on a boundary and
    /// `delay` is zero). `Duration::MAX` gives `u64::MAX`.
    pub fn deadline_after(&self, now: Instant, delay: Duration) -> u64 {
        self.ceil_ticks(self.since_origin(now).saturating_add(delay.as_nanos()))
    }

    /// The time from the origin to tick `k`; `None` if that does not fit a [`Duration`].
    pub fn offset_of(&self, k: u64) -> Option<Duration> {
        let nanos = u128::from(k).checked_mul(self.tick.as_nanos())?;
        let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
        // The remainder is below 10^9, so it fits a u32.
        Some(Duration::new(secs, (nanos % NANOS_PER_SEC) as u32))
    }

    /// The instant of tick `k`; `None` if it is beyond what [`Instant`] can hold.
    pub fn instant_of(&self, k: u64) -> Option<Instant> {
        self.origin.checked_add(self.offset_of(k)?)
    }

    /// How long an event loop may block at `now` before `queue` has a timer to poll: the time
    /// until the start of tick [`next_expiration()`](TimerQueue::next_expiration).
    ///
    /// `None` when the queue is empty (block without timeout); `Some(ZERO)` only when that
    /// tick has already begun; otherwise the exact remaining time, so a pending sub-tick timer
    /// never gives zero. A deadline too far to express gives `Some(Duration::MAX)`. For a
    /// millisecond API such as `epoll_wait`, use
    /// [`poll_timeout_millis`](TickScale::poll_timeout_millis), which rounds up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::queue::TimerQueue;
    /// use tickwheel::sys::TickScale;
    ///
    /// fn wait_for<Q: TimerQueue<&'static str>>(scale: &TickScale, queue: &Q) {
    ///     let timeout = scale.poll_timeout(queue, std::time::Instant::now());
    ///     // pass `timeout` to mio::Poll::poll or similar, then drain the queue
    /// #   let _ = timeout;
    /// }
    /// ```
    pub fn poll_timeout<T, Q>(&self, queue: &Q, now: Instant) -> Option<Duration>
    where
        Q: TimerQueue<T> + ?Sized,
    {
        let next = queue.next_expiration()?;
        let Some(offset) = self.offset_of(next) else {
            return Some(Duration::MAX);
        };
        let elapsed = now.saturating_duration_since(self.origin);
        Some(offset.saturating_sub(elapsed))
    }

    /// [`poll_timeout`](TickScale::poll_timeout) in whole milliseconds for `poll(2)` and
    /// `epoll_wait(2)`: `-1` when the queue is empty, otherwise rounded **up** (so a pending
    /// 0.3 ms timer waits 1 ms instead of spinning with 0) and capped at `i32::MAX`.
    pub fn poll_timeout_millis<T, Q>(&self, queue: &Q, now: Instant) -> i32
    where
        Q: TimerQueue<T> + ?Sized,
    {
        match self.poll_timeout(queue, now) {
            None => -1,
            Some(d) => millis_rounded_up(d),
        }
    }

    fn since_origin(&self, at: Instant) -> u128 {
        at.saturating_duration_since(self.origin).as_nanos()
    }

    fn ceil_ticks(&self, nanos: u128) -> u64 {
        saturate(nanos.div_ceil(self.tick.as_nanos()))
    }
}

/// `d` in milliseconds, rounded up, capped at `i32::MAX`.
fn millis_rounded_up(d: Duration) -> i32 {
    i32::try_from(d.as_nanos().div_ceil(NANOS_PER_MILLI)).unwrap_or(i32::MAX)
}

fn saturate(ticks: u128) -> u64 {
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scale_ms() -> TickScale {
        TickScale::new(Duration::from_millis(1))
    }

    #[test]
    fn readings_round_down_deadlines_round_up() {
        let s = scale_ms();
        let o = s.origin();
        for (us, down, up) in [
            (0, 0, 0),
            (1, 0, 1),
            (999, 0, 1),
            (1000, 1, 1),
            (1001, 1, 2),
        ] {
            let at = o + Duration::from_micros(us);
            assert_eq!(s.tick_at(at), down, "tick_at {us} us");
            assert_eq!(s.deadline_at(at), up, "deadline_at {us} us");
        }
    }

    #[test]
    fn deadline_is_never_before_the_instant() {
        let s = TickScale::new(Duration::from_micros(700));
        let o = s.origin();
        for us in (0..5_000).step_by(37) {
            for delay_us in [0, 1, 350, 699, 700, 701, 1_400] {
                let now = o + Duration::from_micros(us);
                let d = s.deadline_after(now, Duration::from_micros(delay_us));
                let due = s.instant_of(d).unwrap();
                assert!(due >= now + Duration::from_micros(delay_us));
                assert!(due < now + Duration::from_micros(delay_us) + s.tick());
            }
        }
    }

    #[test]
    fn sub_tick_delay_is_one_tick_not_zero() {
        let s = scale_ms();
        let now = s.origin() + Duration::from_millis(5);
        assert_eq!(s.deadline_after(now, Duration::from_nanos(1)), 6);
        assert_eq!(s.deadline_after(now, Duration::ZERO), 5);
    }

    #[test]
    fn extremes_saturate_without_panic() {
        let s = TickScale::new(Duration::ZERO);
        assert_eq!(s.tick(), Duration::from_nanos(1));
        assert_eq!(s.deadline_after(s.origin(), Duration::MAX), u64::MAX);
        let big = TickScale::new(Duration::MAX);
        assert_eq!(big.offset_of(2), None);
        assert_eq!(big.instant_of(u64::MAX), None);
        assert_eq!(big.deadline_after(big.origin(), Duration::MAX), 1);
        let before = s.origin().checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(s.tick_at(before), 0);
            assert_eq!(s.deadline_at(before), 0);
        }
    }

    #[test]
    fn offset_is_exact() {
        let s = TickScale::new(Duration::from_micros(1_500));
        assert_eq!(s.offset_of(3), Some(Duration::from_micros(4_500)));
        let ns = TickScale::new(Duration::from_nanos(1));
        assert_eq!(ns.offset_of(u64::MAX), Some(Duration::from_nanos(u64::MAX)));
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis_rounded_up(Duration::ZERO), 0);
        assert_eq!(millis_rounded_up(Duration::from_nanos(1)), 1);
        assert_eq!(millis_rounded_up(Duration::from_micros(1_001)), 2);
        assert_eq!(millis_rounded_up(Duration::from_millis(7)), 7);
        assert_eq!(millis_rounded_up(Duration::MAX), i32::MAX);
    }
}
