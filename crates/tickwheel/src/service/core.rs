//! [`Core`]: what every shard and handle of one service shares — the clock, the tick
//! conversion, the way to wake the timer thread, and the optional cap accounting.
//!
//! # Waking the timer thread (no lost wake-ups)
//!
//! The timer thread publishes the tick it is about to sleep towards in `sleeping_until`
//! (`AWAKE` while it works), then re-reads every shard's `earliest`, then parks. An insert
//! stores its shard's lowered `earliest`, then reads `sleeping_until` and unparks the thread
//! if the new tick is earlier. Both sides use `SeqCst`, so at least one of them sees the
//! other's store: either the timer thread's re-read finds the new earliest, or the inserter
//! finds the sleep target and unparks (an unpark before the park is kept by the park token).
//! Inserts that do not lower their shard's earliest, and all inserts while the timer thread
//! is awake, cost no wake-up at all.

// The clock is a trait object in std's `Arc` (loom's cannot coerce to `dyn`).
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use crate::sync::{AtomicU64, AtomicUsize, CachePadded, Ordering};

use crate::time::{Clock, Ticks};

/// What scheduling does when the cap set with `Builder::max_pending` is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtCap {
    /// Refuse the timer (`try_schedule`).
    Refuse,
    /// Take the timer anyway, counting it toward the cap (`schedule`, the futures' and
    /// recurring series' timers, detached timers).
    Admit,
}

/// `sleeping_until` while the timer thread is awake: no insert needs to wake it.
pub(crate) const AWAKE: u64 = 0;

pub(crate) struct Core {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ticks: Ticks,
    /// The tick the timer thread sleeps towards, or [`AWAKE`]. Written by the timer thread at
    /// every wake-up: padded away from the read-mostly fields every schedule reads.
    sleeping_until: CachePadded<AtomicU64>,
    /// The timer thread, once started.
    driver: OnceLock<Thread>,
    /// The cap on pending timers, if any, and the count kept for it.
    pub(crate) cap: Option<usize>,
    capped: CachePadded<AtomicUsize>,
}

impl Core {
    pub(crate) fn new(clock: Arc<dyn Clock>, ticks: Ticks, cap: Option<usize>) -> Core {
        Core {
            clock,
            ticks,
            sleeping_until: CachePadded(AtomicU64::new(AWAKE)),
            driver: OnceLock::new(),
            cap,
            capped: CachePadded(AtomicUsize::new(0)),
        }
    }

    /// The current tick of the service's clock.
    #[inline]
    pub(crate) fn now_tick(&self) -> u64 {
        self.ticks.now_tick(self.clock.now())
    }

    /// The wall clock calendars read on this service: its own clock when that is a wall
    /// clock ([`Clock::as_wall_clock`]), else [`SystemClock`](crate::time::SystemClock),
    /// which advances with the default monotonic clock.
    #[cfg(feature = "cron")]
    pub(crate) fn wall_clock(&self) -> Arc<dyn crate::time::WallClock> {
        self.clock
            .as_wall_clock()
            .unwrap_or_else(|| Arc::new(crate::time::SystemClock))
    }

    pub(crate) fn set_driver(&self, thread: Thread) {
        let _ = self.driver.set(thread);
    }

    /// Called by an insert that lowered its shard's earliest tick to `tick`.
    #[inline]
    pub(crate) fn lowered_earliest(&self, tick: u64) {
        if tick < self.sleeping_until.load(Ordering::SeqCst) {
            self.unpark_driver();
        }
    }

    pub(crate) fn unpark_driver(&self) {
        if let Some(driver) = self.driver.get() {
            driver.unpark();
        }
    }

    /// The timer thread announces its sleep target (or [`AWAKE`]).
    pub(crate) fn set_sleeping_until(&self, tick: u64) {
        self.sleeping_until.store(tick, Ordering::SeqCst);
    }

    /// Reserves room for one timer under the cap; `false` when full and `at_cap` refuses.
    /// Without a cap, always `true` and free.
    #[inline]
    pub(crate) fn reserve(&self, at_cap: AtCap) -> bool {
        let Some(cap) = self.cap else { return true };
        let before = self.capped.fetch_add(1, Ordering::AcqRel);
        if at_cap == AtCap::Refuse && before >= cap {
            self.capped.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Returns the room of `n` timers that left the queues (fired, cancelled, discarded, or
    /// never inserted).
    #[inline]
    pub(crate) fn release(&self, n: usize) {
        if self.cap.is_some() && n > 0 {
            self.capped.fetch_sub(n, Ordering::AcqRel);
        }
    }
}
