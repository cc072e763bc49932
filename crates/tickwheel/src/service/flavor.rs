//! [`QueueFlavor`] and [`AnyQueue`]: the queue behind each shard, chosen at build time.
//!
//! An enum rather than `Box<dyn TimerQueue>`: the match is a predictable branch the compiler
//! can inline through, where a virtual call on the schedule hot path is not.

use crate::queue::{HashedWheel, Heap, TimerKey, TimerQueue, Wheel};

/// Which [`TimerQueue`] implementation a service keeps its timers in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueFlavor {
    /// The hierarchical [`Wheel`]: O(1) everything, exact firing ticks. The default.
    #[default]
    Wheel,
    /// The indexed 4-ary [`Heap`]: O(log n), compact; every tick pays only for the timers it
    /// fires (the wheel also moves the next slots down, in paced steps, ahead of time).
    Heap,
    /// The single-level [`HashedWheel`] with its default slot count. Each tick scans one slot
    /// holding every timer whose deadline hashes there, so it suits delays within a few times
    /// the slot count in ticks; long delays at a fine resolution make it scan long slots every
    /// tick (1 s delays at 10 µs resolution are 100 000 ticks: each timer is scanned about
    /// 100 000 / slots times before it fires, and the timer thread falls behind).
    HashedWheel,
    /// The [`HashedWheel`] with `slots` slots, rounded up to a power of two and clamped to
    /// `1..=`[`HashedWheel::MAX_SLOTS`] (as [`HashedWheel::with_slots`] does). Choose about
    /// the longest common delay in ticks, so that most timers wait less than a rotation.
    HashedWheelWithSlots(usize),
}

/// One queue of whichever flavor.
pub(crate) enum AnyQueue<T> {
    Wheel(Wheel<T>),
    Heap(Heap<T>),
    Hashed(HashedWheel<T>),
}

macro_rules! each {
    ($self:expr, $q:ident => $body:expr) => {
        match $self {
            AnyQueue::Wheel($q) => $body,
            AnyQueue::Heap($q) => $body,
            AnyQueue::Hashed($q) => $body,
        }
    };
}

impl<T> AnyQueue<T> {
    pub(crate) fn new(flavor: QueueFlavor) -> AnyQueue<T> {
        match flavor {
            QueueFlavor::Wheel => AnyQueue::Wheel(Wheel::new()),
            QueueFlavor::Heap => AnyQueue::Heap(Heap::new()),
            QueueFlavor::HashedWheel => AnyQueue::Hashed(HashedWheel::new()),
            QueueFlavor::HashedWheelWithSlots(slots) => {
                AnyQueue::Hashed(HashedWheel::with_slots(slots))
            }
        }
    }

    /// Timers the queue holds memory for, pending or vacant.
    pub(crate) fn capacity(&self) -> usize {
        each!(self, q => q.capacity())
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        each!(self, q => q.shrink_to_fit())
    }

    /// The queue's [`check_invariants`](crate::TimerQueue::check_invariants).
    #[cfg(any(all(test, not(loom)), debug_assertions))]
    pub(crate) fn check_invariants(&self) {
        each!(self, q => q.check_invariants())
    }

    #[inline]
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        each!(self, q => q.insert(deadline, value))
    }

    #[inline]
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<T> {
        each!(self, q => q.remove(key))
    }

    #[inline]
    pub(crate) fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        each!(self, q => q.reset(key, deadline))
    }

    #[inline]
    pub(crate) fn deadline(&self, key: TimerKey) -> Option<u64> {
        each!(self, q => q.deadline(key))
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        each!(self, q => q.get_mut(key))
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        each!(self, q => q.len())
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        each!(self, q => q.now())
    }

    #[inline]
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        each!(self, q => q.next_expiration())
    }

    #[inline]
    pub(crate) fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        each!(self, q => q.poll_expired(now))
    }
}
