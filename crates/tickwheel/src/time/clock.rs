//! Clocks: where the `std` layers read the time.
//!
//! * [`MonotonicClock`] — `Instant::now()`; the default.
//! * [`ManualClock`] — virtual time that moves only when told ([`advance`](ManualClock::advance),
//!   [`set`](ManualClock::set)); clones share one time. Services subscribe to it and drain
//!   their due timers on every move instead of sleeping on real time.
//!
//! Invariant: a clock never goes backwards. `ManualClock::set` to an earlier instant is
//! ignored, and virtual time saturates at the largest offset `Instant` can represent.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::WallClock;

// Plain std atomics: the clock is shared state outside what the loom models check.
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of the current time for a service and the timers built on it.
///
/// Implementations must be monotonic: `now()` never returns an instant earlier than a previous
/// call did.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Asks the clock to call `listener` after every jump of its time. Returns `true` when the
    /// clock is *virtual*: it moves only by such jumps, so a service must not sleep on real time
    /// for it but wait for the listener. Real-time clocks keep the default (`false`, nothing
    /// registered). Listeners that have been dropped are forgotten.
    fn subscribe(&self, listener: Weak<dyn Fn() + Send + Sync>) -> bool {
        let _ = listener;
        false
    }

    /// This clock as a [`WallClock`], if it also tells wall-clock time: a service built on it
    /// reads its calendar schedules on it unless told otherwise
    /// ([`Recurrence::cron`](crate::service::Recurrence::cron)), so that a service on a
    /// [`ManualWallClock`](crate::time::ManualWallClock) runs them in its virtual time.
    /// [`SystemClock`](crate::time::SystemClock) and `ManualWallClock` return themselves;
    /// the default is `None`.
    fn as_wall_clock(&self) -> Option<Arc<dyn WallClock>> {
        None
    }
}

/// The system's monotonic clock, [`Instant::now`]. The default clock.
///
/// ```
/// use tickwheel::time::{Clock, MonotonicClock};
///
/// let a = MonotonicClock.now();
/// assert!(MonotonicClock.now() >= a);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Virtual time: it stands still until [`advance`](ManualClock::advance) or
/// [`set`](ManualClock::set) moves it. Cheap to clone; clones share the same time.
///
/// A service built on a `ManualClock` drains its due timers after every move; call
/// `TimerService::settle` to wait until they have all run.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::time::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - start, Duration::from_millis(250));
/// clock.set(start); // the past: ignored, time never goes back
/// assert_eq!(clock.elapsed(), Duration::from_millis(250));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    base: Instant,
    /// Nanoseconds since `base`; only grows.
    offset_ns: AtomicU64,
    /// The largest offset `base + offset` can represent.
    max_offset_ns: u64,
    listeners: Mutex<Vec<Weak<dyn Fn() + Send + Sync>>>,
}

impl ManualClock {
    /// A clock standing at the current real instant.
    pub fn new() -> ManualClock {
        ManualClock::starting_at(Instant::now())
    }

    /// A clock standing at `start`.
    pub fn starting_at(start: Instant) -> ManualClock {
        ManualClock {
            inner: Arc::new(ManualInner {
                base: start,
                offset_ns: AtomicU64::new(0),
                max_offset_ns: max_offset(start),
                listeners: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Moves time forward by `by` (saturating at the largest representable instant) and
    /// notifies subscribed services.
    pub fn advance(&self, by: Duration) {
        let by_ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let max = self.inner.max_offset_ns;
        let _ = self
            .inner
            .offset_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                Some(cur.saturating_add(by_ns).min(max))
            });
        self.notify();
    }

    /// Moves time to `to`; an instant earlier than the current time is ignored (time never
    /// goes back). Notifies subscribed services.
    pub fn set(&self, to: Instant) {
        let target = to.saturating_duration_since(self.inner.base).as_nanos();
        let target = u64::try_from(target)
            .unwrap_or(u64::MAX)
            .min(self.inner.max_offset_ns);
        self.inner.offset_ns.fetch_max(target, Ordering::AcqRel);
        self.notify();
    }

    /// The current virtual instant (also [`Clock::now`], here without importing the trait).
    #[inline]
    pub fn now(&self) -> Instant {
        let offset = self.inner.offset_ns.load(Ordering::Acquire);
        // `offset <= max_offset_ns`, which was checked to be representable.
        self.inner
            .base
            .checked_add(Duration::from_nanos(offset))
            .unwrap_or(self.inner.base)
    }

    /// Virtual time elapsed since the clock was created.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.offset_ns.load(Ordering::Acquire))
    }

    fn notify(&self) {
        let live: Vec<_> = {
            let mut listeners = self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            listeners.retain(|l| l.strong_count() > 0);
            listeners.iter().filter_map(Weak::upgrade).collect()
        };
        // Outside the lock: a listener may subscribe or read the clock.
        for listener in live {
            listener();
        }
    }
}

/// The largest offset from `base` an `Instant` can hold (huge on every real platform).
fn max_offset(base: Instant) -> u64 {
    let mut candidate = u64::MAX;
    while candidate > 0 && base.checked_add(Duration::from_nanos(candidate)).is_none() {
        candidate /= 2;
    }
    candidate
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Instant {
        ManualClock::now(self)
    }

    fn subscribe(&self, listener: Weak<dyn Fn() + Send + Sync>) -> bool {
        let mut listeners = self
            .inner
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        listeners.push(listener);
        true
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("elapsed", &self.elapsed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward_and_saturates() {
        let clock = ManualClock::new();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_secs(3));
        let shared = clock.clone();
        assert_eq!(shared.now() - start, Duration::from_secs(3));
        shared.set(start + Duration::from_secs(1));
        assert_eq!(
            clock.elapsed(),
            Duration::from_secs(3),
            "set to the past is ignored"
        );
        clock.advance(Duration::MAX);
        clock.advance(Duration::MAX);
        assert!(clock.now() > start + Duration::from_secs(3));
        clock.set(start);
        assert!(clock.now() > start, "still saturated, never back");
    }

    #[test]
    fn listeners_are_called_and_forgotten_when_dropped() {
        let clock = ManualClock::new();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = hits.clone();
        let listener: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        assert!(clock.subscribe(Arc::downgrade(&listener)));
        clock.advance(Duration::from_millis(1));
        clock.set(clock.now() + Duration::from_millis(1));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop(listener);
        clock.advance(Duration::from_millis(1));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(!MonotonicClock.subscribe(Weak::<fn()>::new()));
    }
}
