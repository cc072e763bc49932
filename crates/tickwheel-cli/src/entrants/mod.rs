//! The entrants of the virtual-time workloads W1–W3, one file each, behind [`VirtualQueue`].
//!
//! Invariants every adapter keeps, so the runner can compare them fairly:
//! * Time is virtual: the queue starts at tick 0, and [`VirtualQueue::advance`] is called with
//!   ticks 1, 2, 3, … one at a time (W2), never skipping, as a server's tick loop would.
//! * Values are the timer id (`u32`); an adapter stores nothing else per timer that its
//!   users wouldn't also store.
//! * The adapters use each peer the way its own documentation says to, with the cheapest
//!   correct operation it offers (e.g. lazy cancellation for `BinaryHeap`, which has none).

mod binary_heap;
mod btree;
mod delay_queue;
mod hhwt;
mod tickwheel_queues;

pub use binary_heap::LazyBinaryHeap;
pub use btree::BTreeTimers;
pub use delay_queue::TokioDelayQueue;
pub use hhwt::HierarchicalHashWheel;
pub use tickwheel_queues::TickwheelQueue;

use std::fmt;
use std::str::FromStr;

/// The operations W1–W3 need, over virtual ticks.
pub trait VirtualQueue {
    /// What the queue hands back for a timer, to cancel or reset it later.
    type Handle: Copy;

    /// Schedules timer `id` at tick `deadline` (> the current tick).
    fn insert(&mut self, id: u32, deadline: u64) -> Self::Handle;

    /// Cancels a pending timer; `true` if it was pending.
    fn cancel(&mut self, handle: Self::Handle) -> bool;

    /// Moves pending timer `id` to `deadline`; returns its (possibly new) handle.
    fn reset(&mut self, handle: Self::Handle, id: u32, deadline: u64) -> Self::Handle;

    /// Advances to tick `now` (one more than the last call) and appends every timer that
    /// fired as `(id, now)`.
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>);

    /// Runs `f` with whatever context the queue needs (a tokio runtime for `DelayQueue`).
    fn scoped<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R
    where
        Self: Sized,
    {
        f(self)
    }
}

/// Every entrant `tickwheel bench` knows, in table order (tickwheel first, then peers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entrant {
    /// `tickwheel::Wheel` (virtual time) / `tickwheel::TimerService` (W4).
    Wheel,
    /// `tickwheel::HashedWheel`.
    HashedWheel,
    /// `tickwheel::Heap`.
    Heap,
    /// `std::collections::BinaryHeap` with lazy cancellation.
    BinaryHeap,
    /// `BTreeMap<(deadline, id), _>`, async-io's design.
    BTreeMap,
    /// tokio-util's `DelayQueue` on paused tokio time.
    DelayQueue,
    /// `hierarchical_hash_wheel_timer`'s cancellable four-level wheel.
    Hhwt,
    /// W4: tickwheel's `TimerService` with callbacks.
    Service,
    /// W4: tokio `sleep` tasks on a multi-thread runtime.
    TokioSleep,
    /// W4: tokio-util's `DelayQueue` in one task, fed through an unbounded channel.
    DelayQueueChannel,
    /// W4: a `BinaryHeap` behind a mutex plus one timer thread.
    HeapThread,
}

impl Entrant {
    /// All entrants, in table order.
    pub const ALL: [Entrant; 11] = [
        Entrant::Wheel,
        Entrant::HashedWheel,
        Entrant::Heap,
        Entrant::BinaryHeap,
        Entrant::BTreeMap,
        Entrant::DelayQueue,
        Entrant::Hhwt,
        Entrant::Service,
        Entrant::TokioSleep,
        Entrant::DelayQueueChannel,
        Entrant::HeapThread,
    ];

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            Entrant::Wheel => "tickwheel-wheel",
            Entrant::HashedWheel => "tickwheel-hashed",
            Entrant::Heap => "tickwheel-heap",
            Entrant::BinaryHeap => "std-binaryheap",
            Entrant::BTreeMap => "btreemap",
            Entrant::DelayQueue => "tokio-delayqueue",
            Entrant::Hhwt => "hhwt",
            Entrant::Service => "tickwheel-service",
            Entrant::TokioSleep => "tokio-sleep",
            Entrant::DelayQueueChannel => "delayqueue-channel",
            Entrant::HeapThread => "binaryheap-thread",
        }
    }

    /// Whether this entrant is tickwheel's own (as opposed to a peer).
    pub fn is_tickwheel(self) -> bool {
        matches!(
            self,
            Entrant::Wheel | Entrant::HashedWheel | Entrant::Heap | Entrant::Service
        )
    }

    /// Whether this entrant runs the virtual-time workloads W1–W3.
    pub fn is_virtual(self) -> bool {
        !self.is_realtime()
    }

    /// Whether this entrant runs the real-time workload W4.
    pub fn is_realtime(self) -> bool {
        matches!(
            self,
            Entrant::Service
                | Entrant::TokioSleep
                | Entrant::DelayQueueChannel
                | Entrant::HeapThread
        )
    }
}

impl fmt::Display for Entrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Entrant {
    type Err = String;

    fn from_str(s: &str) -> Result<Entrant, String> {
        Entrant::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let names: Vec<&str> = Entrant::ALL.iter().map(|e| e.name()).collect();
                format!("unknown entrant `{s}`; known: {}", names.join(", "))
            })
    }
}
