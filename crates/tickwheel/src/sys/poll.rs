//! The portable event-loop path: how long a loop may block before a queue has a timer due,
//! computed from the crate's one tick conversion, [`time::Ticks`](Ticks).
//!
//! # Invariants
//!
//! * **Zero only when due.** [`poll_timeout`] is the exact time from `now` to the start of
//!   tick [`next_expiration()`](TimerQueue::next_expiration); it is zero only once that tick
//!   has begun, so a pending sub-tick timer never makes a loop spin.
//! * **Milliseconds round up.** [`poll_timeout_millis`] rounds up (a 0.3 ms wait is 1 ms, not
//!   0; mio does the same for `epoll_wait`) and caps at `i32::MAX`; `-1` means "no timer".
//! * **No overflow, no panic.** A [`NEVER`] tick, or one past what [`Instant`] can hold, gives
//!   `Some(Duration::MAX)` (and `i32::MAX` ms): block as long as the API allows.
//!
//! The rounding of instants to ticks (deadlines up, "now" down) is [`Ticks`]'s; nothing here
//! converts on its own.

use std::time::{Duration, Instant};

use crate::queue::TimerQueue;
use crate::time::Ticks;
#[cfg(doc)]
use crate::time::NEVER;

const NANOS_PER_MILLI: u128 = 1_000_000;

/// How long an event loop may block at `now` before `queue` has a timer to poll: the time
/// until the start of tick [`next_expiration()`](TimerQueue::next_expiration) on `ticks`.
///
/// `None` when the queue is empty (block without timeout); `Some(ZERO)` only when that tick
/// has already begun; otherwise the exact remaining time, so a pending sub-tick timer never
/// gives zero. A [`NEVER`] tick, or one too far for an [`Instant`], gives
/// `Some(Duration::MAX)`. For a millisecond API such as `epoll_wait`, use
/// [`poll_timeout_millis`], which rounds up.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sys::poll_timeout;
/// use tickwheel::time::Ticks;
/// use tickwheel::{TimerQueue, Wheel};
///
/// let origin = Instant::now();
/// let ticks = Ticks::new(origin, Duration::from_millis(1));
/// let mut wheel = Wheel::new();
/// let now = origin + Duration::from_micros(2_500);
/// assert_eq!(poll_timeout(&ticks, &wheel, now), None); // empty: no timeout
/// wheel.insert(ticks.delay_tick(now, Duration::from_micros(100)), "retransmit");
/// // Tick 3 starts 0.5 ms after `now`: block that long (pass it to `mio::Poll::poll`).
/// assert_eq!(poll_timeout(&ticks, &wheel, now), Some(Duration::from_micros(500)));
/// let later = origin + Duration::from_millis(3);
/// let due: Vec<_> = wheel.drain_expired(ticks.now_tick(later)).map(|(_, v)| v).collect();
/// assert_eq!(due, ["retransmit"]);
/// ```
pub fn poll_timeout<T, Q>(ticks: &Ticks, queue: &Q, now: Instant) -> Option<Duration>
where
    Q: TimerQueue<T> + ?Sized,
{
    let next = queue.next_expiration()?;
    match ticks.instant_of(next) {
        Some(at) => Some(at.saturating_duration_since(now)),
        None => Some(Duration::MAX),
    }
}

/// [`poll_timeout`] in whole milliseconds for `poll(2)` and `epoll_wait(2)`: `-1` when the
/// queue is empty, otherwise rounded **up** (so a pending 0.3 ms timer waits 1 ms instead of
/// spinning with 0) and capped at `i32::MAX`.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sys::poll_timeout_millis;
/// use tickwheel::time::Ticks;
/// use tickwheel::{Heap, TimerQueue};
///
/// let origin = Instant::now();
/// let ticks = Ticks::new(origin, Duration::from_millis(1));
/// let mut heap = Heap::new();
/// assert_eq!(poll_timeout_millis(&ticks, &heap, origin), -1);
/// heap.insert(1, ());
/// let now = origin + Duration::from_micros(700); // 0.3 ms before tick 1
/// assert_eq!(poll_timeout_millis(&ticks, &heap, now), 1);
/// ```
pub fn poll_timeout_millis<T, Q>(ticks: &Ticks, queue: &Q, now: Instant) -> i32
where
    Q: TimerQueue<T> + ?Sized,
{
    match poll_timeout(ticks, queue, now) {
        None => -1,
        Some(d) => millis_rounded_up(d),
    }
}

/// `d` in milliseconds, rounded up, capped at `i32::MAX`.
fn millis_rounded_up(d: Duration) -> i32 {
    i32::try_from(d.as_nanos().div_ceil(NANOS_PER_MILLI)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    //! The poll-timeout rules, and the rounding rules of [`Ticks`] this path relies on.

    use super::*;
    use crate::sys::model::ModelQueue;
    use crate::time::{MIN_RESOLUTION, NEVER};

    fn ticks_ms() -> Ticks {
        Ticks::new(Instant::now(), Duration::from_millis(1))
    }

    #[test]
    fn readings_round_down_deadlines_round_up() {
        let s = ticks_ms();
        let o = s.origin();
        for (us, down, up) in [
            (0, 0, 0),
            (1, 0, 1),
            (999, 0, 1),
            (1000, 1, 1),
            (1001, 1, 2),
        ] {
            let at = o + Duration::from_micros(us);
            assert_eq!(s.now_tick(at), down, "now_tick {us} us");
            assert_eq!(s.deadline_tick(at), up, "deadline_tick {us} us");
        }
    }

    #[test]
    fn deadline_is_never_before_the_instant() {
        let s = Ticks::new(Instant::now(), Duration::from_micros(700));
        let o = s.origin();
        for us in (0..5_000).step_by(37) {
            for delay_us in [0, 1, 350, 699, 700, 701, 1_400] {
                let now = o + Duration::from_micros(us);
                let d = s.delay_tick(now, Duration::from_micros(delay_us));
                let due = s.instant_of(d).unwrap();
                assert!(due >= now + Duration::from_micros(delay_us));
                assert!(due < now + Duration::from_micros(delay_us) + s.resolution());
            }
        }
    }

    #[test]
    fn sub_tick_delay_is_one_tick_not_zero() {
        let s = ticks_ms();
        let now = s.origin() + Duration::from_millis(5);
        assert_eq!(s.delay_tick(now, Duration::from_nanos(1)), 6);
        assert_eq!(s.delay_tick(now, Duration::ZERO), 5);
    }

    #[test]
    fn extremes_saturate_without_panic() {
        // `Ticks` clamps a zero resolution to the finest one, 1 µs.
        let s = Ticks::new(Instant::now(), Duration::ZERO);
        assert_eq!(s.resolution(), MIN_RESOLUTION);
        assert_eq!(s.delay_tick(s.origin(), Duration::MAX), NEVER);
        // A huge resolution is clamped to 1 s, so `Duration::MAX` is "never" there too.
        let big = Ticks::new(Instant::now(), Duration::MAX);
        assert_eq!(big.instant_of(NEVER), None);
        assert_eq!(big.delay_tick(big.origin(), Duration::MAX), NEVER);
        let before = s.origin().checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(s.now_tick(before), 0);
            assert_eq!(s.deadline_tick(before), 0);
        }
    }

    #[test]
    fn poll_timeout_rounds_up_and_is_zero_only_when_due() {
        let s = ticks_ms();
        let mut q = ModelQueue::default();
        let now = s.origin() + Duration::from_micros(10_300);
        assert_eq!(poll_timeout(&s, &q, now), None);
        assert_eq!(poll_timeout_millis(&s, &q, now), -1);
        q.insert(11, ()); // 0.7 ms away: not zero
        assert_eq!(poll_timeout(&s, &q, now), Some(Duration::from_micros(700)));
        assert_eq!(poll_timeout_millis(&s, &q, now), 1);
        q.insert(10, ()); // tick 10 began 0.3 ms ago: due
        assert_eq!(poll_timeout(&s, &q, now), Some(Duration::ZERO));
        assert_eq!(poll_timeout_millis(&s, &q, now), 0);
        // Too far to express: with the resolution clamped to 1 s, the far tick is NEVER.
        let far = Ticks::new(Instant::now(), Duration::MAX);
        let mut q = ModelQueue::default();
        q.insert(NEVER, ());
        assert_eq!(poll_timeout(&far, &q, far.origin()), Some(Duration::MAX));
        assert_eq!(poll_timeout_millis(&far, &q, far.origin()), i32::MAX);
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
