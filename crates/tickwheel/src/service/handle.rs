//! [`TimerHandle`]: cancel, reset, inspect or wait for one scheduled timer.
//!
//! A handle is 16 bytes: the shard the timer lives in (an `Arc`, cloned from the scheduling
//! thread's own shard, so the count is not contended) and the timer's generational
//! [`TimerKey`]. Every operation locks that one shard; none allocates except `wait`, which
//! registers a waiter. A stale key (the timer fired, was cancelled or discarded) makes every
//! operation a harmless no-op, even after the queue reused the timer's storage.

use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::shard::Shard;
use crate::queue::TimerKey;
use crate::sync::Arc;

/// The handle of a timer scheduled on a [`TimerService`](super::TimerService).
///
/// Dropping a handle does **not** cancel the timer: the callback still runs at its deadline.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::service::TimerService;
/// use tickwheel::time::ManualClock;
///
/// let clock = ManualClock::new();
/// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
/// let handle = service.schedule(Duration::from_secs(5), || println!("never printed"));
/// assert!(handle.is_pending());
/// assert!(handle.cancel()); // it had not started, and now never will
/// assert!(!handle.cancel()); // only the call that cancelled it returns true
/// assert!(!handle.is_pending());
/// handle.wait(); // returns at once: the timer is no longer pending
/// ```
pub struct TimerHandle {
    pub(crate) shard: Arc<Shard>,
    /// `None` for a timer that was never queued (the service had shut down).
    pub(crate) key: Option<TimerKey>,
}

impl TimerHandle {
    /// Cancels the timer. Returns `true` exactly when this call removed it: its callback had
    /// not started and now never will (its closure is dropped, on this thread). `false` if it
    /// already fired (its callback was handed to a worker, maybe still running), was cancelled
    /// before, or was discarded by shutdown.
    pub fn cancel(&self) -> bool {
        let Some(key) = self.key else { return false };
        // The payload (the user's closure) is dropped here, after the shard lock is released.
        self.shard.cancel(key).is_some()
    }

    /// Moves a pending timer to fire `delay` from now (rounded up to the next tick, like a new
    /// timer; `Duration::MAX` means never). Returns `false`, and does nothing, if the timer is
    /// no longer pending. A reset timer fires after timers already due at its new tick.
    pub fn reset(&self, delay: Duration) -> bool {
        let core = &self.shard.core;
        let tick = core.ticks.delay_tick(core.clock.now(), delay);
        self.reset_tick(tick)
    }

    /// Moves a pending timer to fire at `deadline` (rounded up to the next tick); like
    /// [`reset`](Self::reset) otherwise.
    pub fn reset_at(&self, deadline: Instant) -> bool {
        let tick = self.shard.core.ticks.deadline_tick(deadline);
        self.reset_tick(tick)
    }

    /// Moves a pending timer to tick `tick`; the futures layer's reset.
    pub(crate) fn reset_tick(&self, tick: u64) -> bool {
        match self.key {
            Some(key) => self.shard.reset(key, tick),
            None => false,
        }
    }

    /// Makes a pending waker timer ([`ServiceRef::schedule_waker`](super::ServiceRef)) wake
    /// `waker` instead; `false` if it is no longer pending (fired, cancelled or discarded).
    pub(crate) fn update_waker(&self, waker: &Waker) -> bool {
        self.key
            .is_some_and(|key| self.shard.update_waker(key, waker))
    }

    /// When a pending timer fires: the start of its deadline tick (never before the deadline
    /// it was given). `None` if it is no longer pending, or if it never fires
    /// (`Duration::MAX`, or an instant past the service's tick range).
    pub fn deadline(&self) -> Option<Instant> {
        let tick = self.shard.deadline(self.key?)?;
        self.shard.core.ticks.instant_of(tick)
    }

    /// Whether the timer is still waiting for its deadline (not fired, cancelled or
    /// discarded).
    pub fn is_pending(&self) -> bool {
        self.key
            .is_some_and(|key| self.shard.deadline(key).is_some())
    }

    /// Blocks the calling thread until the timer is no longer pending: it fired (its callback
    /// was handed to a worker — it may still be running), was cancelled, or was discarded by
    /// shutdown. Returns at once if it is already not pending. Boost.Asio's synchronous
    /// `wait()`.
    ///
    /// On a [`ManualClock`](crate::time::ManualClock) this returns only once another thread
    /// moves the clock past the deadline (or cancels the timer).
    pub fn wait(&self) {
        let Some(key) = self.key else { return };
        if let Some(slot) = self.shard.register_waiter(key) {
            slot.block();
        }
    }
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}
