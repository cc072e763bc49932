//! [`TimerHandle`]: cancel, reset, inspect or wait for one scheduled timer.
//!
//! A handle is 24 bytes: the shard the timer lives in (an `Arc`, cloned from the scheduling
//! thread's own shard, so the count is not contended) and where in it the timer is: the
//! generational cell of a timer staged through the shard's inbox (every timer
//! [`schedule`](super::TimerService::schedule) makes), which learns the queue key once the
//! timer is queued, or the queue key itself for the entries inserted directly (wakers,
//! notifications, recurring runs). Every operation locks that one shard; none allocates
//! except `wait`, which registers a waiter. An operation on a timer still in the inbox first
//! queues the inbox (see `shard/`). A stale cell or key (the timer fired, was cancelled or
//! discarded) makes every operation a harmless no-op, even after the storage was reused.

use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::callback::WakerId;
use super::shard::{Shard, Target};
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
    /// Where the timer is; [`Target::Inert`] for a timer that was never queued (the service
    /// had shut down).
    pub(crate) target: Target,
}

impl TimerHandle {
    /// Cancels the timer. Returns `true` exactly when this call removed it: its callback had
    /// not started and now never will (its closure is dropped, on this thread). `false` if it
    /// already fired (its callback was handed to a worker, maybe still running), was cancelled
    /// before, or was discarded by shutdown.
    pub fn cancel(&self) -> bool {
        // The payload (the user's closure) is dropped here, after the shard lock is released.
        self.shard.cancel(self.target).is_some()
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
        self.shard.reset(self.target, tick)
    }

    /// Makes a pending waker timer
    /// ([`ServiceLink::schedule_waker`](super::ServiceLink::schedule_waker)) wake `waker` instead:
    /// the [`WakerId`] of the waker it now holds, `None` if it is no longer pending (fired,
    /// cancelled or discarded).
    pub(crate) fn update_waker(&self, waker: &Waker) -> Option<WakerId> {
        self.shard.update_waker(self.target, waker)
    }

    /// When a pending timer fires: the start of its deadline tick (never before the deadline
    /// it was given). `None` if it is no longer pending, or if it never fires
    /// (`Duration::MAX`, or an instant past the service's tick range).
    pub fn deadline(&self) -> Option<Instant> {
        let tick = self.shard.deadline(self.target)?;
        self.shard.core.ticks.instant_of(tick)
    }

    /// Whether the timer is still waiting for its deadline (not fired, cancelled or
    /// discarded).
    pub fn is_pending(&self) -> bool {
        self.shard.is_pending(self.target)
    }

    /// Blocks the calling thread until the timer is no longer pending: it fired (its callback
    /// was handed to a worker — it may still be running), was cancelled, or was discarded by
    /// shutdown. Returns at once if it is already not pending. Boost.Asio's synchronous
    /// `wait()`.
    ///
    /// On a [`ManualClock`](crate::time::ManualClock) this returns only once another thread
    /// moves the clock past the deadline (or cancels the timer).
    pub fn wait(&self) {
        if let Some(slot) = self.shard.register_waiter(self.target) {
            slot.block();
        }
    }
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}
