//! [`BootClock`]: monotonic time that keeps counting while the machine is suspended.

use std::time::{Duration, Instant};

use super::Clock;

/// A monotonic clock that **counts time spent suspended** (Linux `CLOCK_BOOTTIME`).
///
/// [`Instant`] (and so [`MonotonicClock`](super::MonotonicClock)) is `CLOCK_MONOTONIC` on
/// Linux, which stops while a laptop or VM is suspended: a 30-minute timer set before a
/// 10-minute suspend fires 40 minutes of real time later. A service built on a `BootClock`
/// counts its deadlines in boot time instead, so a deadline that passed during the suspend is
/// due as soon as the machine resumes and the timer thread looks at the clock again.
///
/// Its readings are `Instant`s on the same scale as `Instant::now()`, ahead of it by the time
/// the kernel reports as suspended ([`suspended`](Self::suspended)): `now()` is
/// `I0 + (boottime − monotonic₀)`, where `monotonic₀` and `I0` are a `CLOCK_MONOTONIC`
/// reading and an `Instant` taken back to back once per process (so it reads at most that
/// read delay, nanoseconds, ahead of the true boot time). It never goes back.
///
/// The timer thread of a service still *sleeps* on the monotonic clock (the OS has no
/// portable boot-time sleep), so a sleep that spans a suspend ends late by the time suspended;
/// what the clock guarantees is that a deadline is judged by boot time whenever the thread
/// wakes, for example for another timer.
///
/// # Other platforms
///
/// Elsewhere `BootClock` reads `Instant::now()` and [`suspended`](Self::suspended) is zero:
/// on Windows `Instant` (QueryPerformanceCounter) already counts suspend; on macOS and the
/// BSDs it does not, and `BootClock` is then no different from `MonotonicClock`.
///
/// ```
/// use tickwheel::time::{BootClock, Clock, MonotonicClock};
///
/// let boot = BootClock.now();
/// // Ahead of the monotonic clock by at most the time spent suspended (and the read delay).
/// assert!(boot + std::time::Duration::from_millis(5) >= MonotonicClock.now());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct BootClock;

impl BootClock {
    /// The time the machine has spent suspended since boot, as the kernel reports it
    /// (`CLOCK_BOOTTIME − CLOCK_MONOTONIC`); zero on platforms without `CLOCK_BOOTTIME`.
    pub fn suspended() -> Duration {
        imp::suspended()
    }
}

impl Clock for BootClock {
    #[inline]
    fn now(&self) -> Instant {
        imp::now()
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use rustix::time::{clock_gettime, ClockId, Timespec};

    /// An `Instant` and the `CLOCK_MONOTONIC` reading taken right *before* it, so that a
    /// machine that never slept reads at or just ahead of `Instant::now()`, never behind.
    static BASE: OnceLock<(Instant, Duration)> = OnceLock::new();

    fn read(id: ClockId) -> Duration {
        let Timespec { tv_sec, tv_nsec } = clock_gettime(id);
        // Both clocks start at boot: non-negative, nanoseconds below 10^9.
        Duration::new(
            u64::try_from(tv_sec).unwrap_or(0),
            u32::try_from(tv_nsec).unwrap_or(0),
        )
    }

    pub(super) fn now() -> Instant {
        let (instant, monotonic) = *BASE.get_or_init(|| {
            let monotonic = read(ClockId::Monotonic);
            (Instant::now(), monotonic)
        });
        // Boot time never runs behind the monotonic clock; saturate all the same.
        let ahead = read(ClockId::Boottime).saturating_sub(monotonic);
        instant.checked_add(ahead).unwrap_or(instant)
    }

    pub(super) fn suspended() -> Duration {
        let monotonic = read(ClockId::Monotonic);
        read(ClockId::Boottime).saturating_sub(monotonic)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::time::{Duration, Instant};

    pub(super) fn now() -> Instant {
        Instant::now()
    }

    pub(super) fn suspended() -> Duration {
        Duration::ZERO
    }
}
