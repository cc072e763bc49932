//! Each queue entrant behind [`VirtualTimeQueue`], one file each.
//!
//! Invariants every adapter keeps, so the runners can compare them fairly:
//! * Time is virtual: the queue starts at tick 0, and [`VirtualTimeQueue::advance`] is called
//!   with ticks 1, 2, 3, … one at a time, never skipping, as a server's tick loop would.
//! * Values are the timer id (`u32`); an adapter stores nothing else per timer that its
//!   users wouldn't also store.
//! * The adapters use each peer the way its own documentation says to, with the cheapest
//!   correct operation it offers (e.g. lazy cancellation for `BinaryHeap`, which has none;
//!   `change_priority` for `priority-queue`).

mod binary_heap;
mod btree;
mod delay_queue;
mod hhwt;
mod id;
mod priority_queue;
mod slim;
mod tickwheel;

pub use binary_heap::LazyBinaryHeap;
pub use btree::BTreeTimers;
pub use delay_queue::TokioDelayQueue;
pub use hhwt::HierarchicalHashWheel;
pub use id::IdQueue;
pub use priority_queue::IndexedPriorityQueue;
pub use slim::SlimQueue;
pub use tickwheel::TickwheelQueue;

/// The operations the virtual-time workloads need, over virtual ticks.
pub trait VirtualTimeQueue {
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
