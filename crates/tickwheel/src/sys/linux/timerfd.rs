//! [`TimerFd`]: a timer queue plus one Linux `timerfd`, armed at the queue's earliest expiry,
//! for epoll/mio event loops (the asio `epoll_reactor` design).
//!
//! # Invariants
//!
//! * **One kernel timer, at the earliest expiry.** After every public method returns, the
//!   timerfd is armed at the start of tick [`next_expiration()`](TimerQueue::next_expiration)
//!   of the queue, or disarmed when the queue is empty. [`armed_at`](TimerFd::armed_at) caches
//!   that tick, and `timerfd_settime` is called only when it changes: an insert that does not
//!   become the earliest makes no system call.
//! * **Absolute, never early.** The fd is armed with `TFD_TIMER_ABSTIME` on `CLOCK_MONOTONIC`
//!   (the clock behind [`Instant`] on Linux) at `origin + k·tick`, so arming never drifts.
//!   The origin's `CLOCK_MONOTONIC` reading is taken just *after* its `Instant`, so the fd
//!   fires at or after the instant [`now_tick`](TimerFd::now_tick) reaches `k`, never before.
//! * **Drain re-arms.** [`drain`](TimerFd::drain) reads the fd (non-blocking; `EAGAIN` is
//!   fine), hands out what expired, and re-arms when the iterator is dropped — also when the
//!   fd fired for a tick that is still the earliest, so a level-triggered loop never spins
//!   on a stale readiness and an edge-triggered one never misses an edge.
//! * The fd is `O_NONBLOCK | O_CLOEXEC` and is closed when the `TimerFd` is dropped.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::time::{
    clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
    TimerfdFlags, TimerfdTimerFlags, Timespec,
};

use crate::queue::{TimerKey, TimerQueue, Wheel};
use crate::sys::TickScale;

/// What the kernel timer is set to, as far as this side knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    /// Disarmed: the fd cannot become readable.
    Off,
    /// Armed at the start of this tick.
    At(u64),
    /// Fired or about to; the next sync must call `timerfd_settime` whatever the target.
    Stale,
}

/// A timer queue driven by one Linux `timerfd`, for an epoll or mio event loop.
///
/// Register the fd (it is [`AsFd`]/[`AsRawFd`]) for readability; when it is readable, call
/// [`drain(now_tick())`](TimerFd::drain). Timers are kept in `Q`, the default [`Wheel`].
///
/// # Arming rules
///
/// * Between calls the fd is armed at the start of tick
///   [`next_expiration()`](TimerQueue::next_expiration) ([`armed_at`](TimerFd::armed_at)),
///   or disarmed when the queue is empty. An insert or reset that becomes the earliest
///   re-arms it; removing or moving the earliest later re-arms it later; a change that leaves
///   the earliest expiry where it was makes no system call.
/// * Arming is absolute (`TFD_TIMER_ABSTIME`, `CLOCK_MONOTONIC`, the clock of [`Instant`]) at
///   `origin + k·tick`: it never drifts and the fd never fires before `now_tick()` reaches
///   the armed tick. With a [`Wheel`], `next_expiration` may be the start of the wheel slot
///   holding the earliest timer, so a far timer can wake the loop once a level before it is
///   due; that drain yields nothing and re-arms closer. No timer ever comes out early.
/// * [`drain`](TimerFd::drain) consumes the fd's readiness and re-arms when its iterator is
///   dropped, also when it was called with a stale `now`, so an edge-triggered loop never
///   misses its next edge.
/// * `u64::MAX` and other ticks beyond the clock's range arm the fd at the farthest time the
///   kernel accepts ("never"); nothing panics.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::{TimerFd, TimerQueue};
///
/// let mut timers = TimerFd::new(Duration::from_millis(1))?;
/// let far = timers.insert_after(Duration::from_secs(60), "idle timeout");
/// let near = timers.insert(0, "due now");
/// assert_eq!(timers.armed_at(), Some(0)); // the earliest expiry
/// // ... epoll/mio reports the fd readable ...
/// let now = timers.now_tick();
/// let fired: Vec<_> = timers.drain(now).collect();
/// assert_eq!(fired, [(near, "due now")]);
/// assert_eq!(timers.armed_at(), timers.queue().next_expiration()); // re-armed for `far`
/// assert_eq!(timers.remove(far), Some("idle timeout"));
/// assert_eq!(timers.armed_at(), None); // empty: disarmed
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TimerFd<T, Q = Wheel<T>> {
    queue: Q,
    scale: TickScale,
    /// `CLOCK_MONOTONIC` at (just after) `scale.origin()`.
    pub(super) origin_mono: Duration,
    fd: OwnedFd,
    armed: Armed,
    /// `timerfd_settime` calls made, for the tests of "no syscall unless the earliest moved".
    #[cfg(test)]
    pub(super) settime_calls: u32,
    _value: PhantomData<fn() -> T>,
}

impl<T> TimerFd<T, Wheel<T>> {
    /// A timerfd over an empty [`Wheel`]; tick 0 is now, each tick lasts `tick` (a zero tick is
    /// taken as 1 ns). Fails only if the kernel refuses a timerfd (e.g. out of fds).
    pub fn new(tick: Duration) -> io::Result<Self> {
        TimerFd::with_queue(Wheel::new(), tick)
    }
}

impl<T, Q: TimerQueue<T>> TimerFd<T, Q> {
    /// A timerfd over `queue`; tick 0 is now, each tick lasts `tick`. Pass an empty queue at
    /// tick 0 (timers already in it are taken on this scale and the fd is armed for them).
    pub fn with_queue(queue: Q, tick: Duration) -> io::Result<Self> {
        let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
        let fd = timerfd_create(TimerfdClockId::Monotonic, flags)?;
        // Instant first, CLOCK_MONOTONIC second: the fd's origin is never before the Instant
        // origin, so the fd never fires before `now_tick()` reaches the armed tick.
        let scale = TickScale::new(tick);
        let origin_mono = Duration::try_from(clock_gettime(ClockId::Monotonic))
            .map_err(|_| io::Error::other("CLOCK_MONOTONIC reads negative"))?;
        let mut timers = TimerFd {
            queue,
            scale,
            origin_mono,
            fd,
            armed: Armed::Off,
            #[cfg(test)]
            settime_calls: 0,
            _value: PhantomData,
        };
        timers.sync();
        Ok(timers)
    }

    /// The tick scale: tick `k` is `origin + k·tick`.
    pub fn scale(&self) -> &TickScale {
        &self.scale
    }

    /// The current tick, read from the monotonic clock and rounded down.
    pub fn now_tick(&self) -> u64 {
        self.scale.tick_at(Instant::now())
    }

    /// The deadline tick `delay` from now, rounded up (never early); `Duration::MAX` gives
    /// `u64::MAX`.
    pub fn deadline_after(&self, delay: Duration) -> u64 {
        self.scale.deadline_after(Instant::now(), delay)
    }

    /// Adds a timer at tick `deadline` (see [`TimerQueue::insert`]) and re-arms the fd if it
    /// became the earliest.
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let key = self.queue.insert(deadline, value);
        self.sync();
        key
    }

    /// Adds a timer `delay` from now (rounded up to a tick).
    pub fn insert_after(&mut self, delay: Duration, value: T) -> TimerKey {
        self.insert(self.deadline_after(delay), value)
    }

    /// Removes a pending timer; `None` for a stale key. Re-arms (or disarms) the fd if the
    /// earliest expiry changed.
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        let value = self.queue.remove(key)?;
        self.sync();
        Some(value)
    }

    /// Moves a pending timer to tick `deadline` (see [`TimerQueue::reset`]); `false` for a
    /// stale key. Re-arms the fd if the earliest expiry changed, earlier or later.
    pub fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let found = self.queue.reset(key, deadline);
        if found {
            self.sync();
        }
        found
    }

    /// Moves a pending timer to `delay` from now (rounded up); `false` for a stale key.
    pub fn reset_after(&mut self, key: TimerKey, delay: Duration) -> bool {
        self.reset(key, self.deadline_after(delay))
    }

    /// The effective deadline tick of a pending timer; `None` for a stale key.
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.queue.deadline(key)
    }

    /// The number of pending timers.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no timer is pending (then the fd is disarmed).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The tick the fd is armed at, `None` when disarmed. Always equals the queue's
    /// [`next_expiration()`](TimerQueue::next_expiration) between calls.
    pub fn armed_at(&self) -> Option<u64> {
        match self.armed {
            Armed::At(k) => Some(k),
            Armed::Off | Armed::Stale => None,
        }
    }

    /// The queue, read-only.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// Runs `f` on the queue, then re-arms the fd for whatever `f` changed.
    pub fn with_queue_mut<R>(&mut self, f: impl FnOnce(&mut Q) -> R) -> R {
        let result = f(&mut self.queue);
        self.sync();
        result
    }

    /// The portable path: how long a loop may block at `now` before a timer is due (see
    /// [`TickScale::poll_timeout`]); `None` when empty. Not needed when the fd is registered.
    pub fn poll_timeout(&self, now: Instant) -> Option<Duration> {
        self.scale.poll_timeout(&self.queue, now)
    }

    /// Consumes the fd's readiness and returns an iterator over the timers due at tick `now`
    /// (pass [`now_tick()`](TimerFd::now_tick)), in firing order. When the iterator is dropped
    /// the fd is re-armed at the next expiry; timers not taken stay queued.
    pub fn drain(&mut self, now: u64) -> Drain<'_, T, Q> {
        let fired = self.consume_expirations();
        if fired || matches!(self.armed, Armed::At(k) if k <= now) {
            self.armed = Armed::Stale;
        }
        Drain { timers: self, now }
    }

    /// Reads the fd's expiration count; `true` if it had fired.
    fn consume_expirations(&mut self) -> bool {
        if self.armed == Armed::Off {
            return false; // a disarmed timerfd is never readable
        }
        let mut count = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut count) {
                Ok(n) => return n == count.len(),
                Err(Errno::INTR) => continue,
                // EAGAIN: not fired yet. Nothing else can happen on a timerfd we own.
                Err(_) => return false,
            }
        }
    }

    /// Arms the fd at the queue's next expiry if that differs from what it is armed at.
    fn sync(&mut self) {
        let target = match self.queue.next_expiration() {
            Some(k) => Armed::At(k),
            None => Armed::Off,
        };
        if target == self.armed {
            return;
        }
        let value = match target {
            Armed::At(k) => self.absolute_time(k),
            Armed::Off | Armed::Stale => Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        #[cfg(test)]
        {
            self.settime_calls += 1;
        }
        match timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec) {
            Ok(_) => self.armed = target,
            // EBADF/EFAULT/EINVAL are ruled out by construction (own fd, valid timespec);
            // should one happen anyway, stay Stale so the next call tries again.
            Err(_) => self.armed = Armed::Stale,
        }
    }

    /// `CLOCK_MONOTONIC` time of tick `k`'s start: valid (`tv_nsec < 10^9`, `tv_sec >= 0`),
    /// never all-zero (which would disarm), saturating at `i64::MAX` seconds ("never").
    fn absolute_time(&self, k: u64) -> Timespec {
        let at = self
            .scale
            .offset_of(k)
            .and_then(|offset| self.origin_mono.checked_add(offset))
            .unwrap_or(Duration::MAX)
            .max(Duration::from_nanos(1));
        Timespec {
            tv_sec: i64::try_from(at.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: at.subsec_nanos().into(),
        }
    }
}

impl<T, Q> AsFd for TimerFd<T, Q> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<T, Q> AsRawFd for TimerFd<T, Q> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl<T, Q: TimerQueue<T>> fmt::Debug for TimerFd<T, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerFd")
            .field("fd", &self.fd.as_raw_fd())
            .field("tick", &self.scale.tick())
            .field("len", &self.queue.len())
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

/// The iterator of [`TimerFd::drain`]: the timers due, in firing order. Re-arms the fd when
/// dropped.
#[must_use = "nothing expires until the iterator is advanced"]
pub struct Drain<'a, T, Q: TimerQueue<T>> {
    timers: &'a mut TimerFd<T, Q>,
    now: u64,
}

impl<T, Q: TimerQueue<T>> Iterator for Drain<'_, T, Q> {
    type Item = (TimerKey, T);

    fn next(&mut self) -> Option<(TimerKey, T)> {
        self.timers.queue.poll_expired(self.now)
    }
}

impl<T, Q: TimerQueue<T>> Drop for Drain<'_, T, Q> {
    fn drop(&mut self) {
        self.timers.sync();
    }
}

impl<T, Q: TimerQueue<T>> fmt::Debug for Drain<'_, T, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}
