//! The generational free-stack that the queues' storage shares: the slab of the
//! [`HashedWheel`](super::HashedWheel) and the [`Heap`](super::Heap) (`slab.rs`) and the
//! [`Wheel`](super::Wheel)'s split records (`records.rs`) each keep their entries in arrays
//! indexed by `u32` and hand out [`TimerKey`](super::TimerKey)s of (index, generation); the
//! reuse of their vacant entries and the rules that keep keys unique are this one type.
//!
//! # The stack
//!
//! A vacant entry's index waits on a stack of free indices (last freed on top), so insert and
//! remove never allocate once the arrays have grown to the high-water mark. The stack is a
//! separate `Vec<u32>`, not a list threaded through the vacant entries as in the `slab`
//! crate: popping a threaded list reads the entry it pops to find the next head, so after
//! frees in random order (timers fire in deadline order, not insertion order) every insert
//! would wait for the previous one's cache miss. Popping the stack reads memory that is
//! already in cache, and the inserts' misses overlap. It costs 4 bytes per vacant entry. A
//! pop also names the entry the insert [`PREFETCH_AHEAD`] pops later will reuse, which the
//! caller prefetches, so a run of inserts finds its entries in cache; in a service another
//! thread freed them, and they are often in another core's cache.
//!
//! # Generations
//!
//! Each entry carries a generation, starting at 1 and bumped every time the entry is reused.
//! A key matches only while the entry is occupied by the same generation, so a stale key never
//! reaches a later timer. Two rules keep that true forever rather than for 2^32 reuses:
//!
//! * an entry whose generation reaches [`MAX_GENERATION`] is retired: when freed it is not
//!   put back on the stack ([`FreeStack::push`]; 4 GiB of reuses of one entry cost one dead
//!   entry);
//! * shrinking drops vacant entries from the end, and entries pushed again at those indices
//!   start above every generation that was dropped ([`FreeStack::rebuild`]).

use alloc::vec::Vec;

/// The "no entry" index (the queues use it for list ends, unplaced links and tombstones). No
/// entry is ever stored at it.
pub(crate) const NIL: u32 = u32::MAX;

/// How many pops ahead an insert prefetches the entry it will reuse: far enough for the
/// miss to be over when that insert comes (in a loop of inserts), near enough that frees in
/// between rarely bury it.
const PREFETCH_AHEAD: usize = 8;

/// The largest generation an entry may reach before it is retired.
pub(crate) const MAX_GENERATION: u32 = u32::MAX;

/// The free indices of a generational store and the generation of its next fresh entry.
pub(crate) struct FreeStack {
    /// Vacant entries' indices, the last freed on top.
    free: Vec<u32>,
    /// Generation of an entry pushed past the end; raised by [`rebuild`](Self::rebuild).
    fresh_generation: u32,
}

impl FreeStack {
    pub(crate) const fn new() -> Self {
        FreeStack {
            free: Vec::new(),
            fresh_generation: 1,
        }
    }

    /// The stack's capacity, for tests of shrinking.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.free.capacity()
    }

    /// Bytes the stack holds, at its capacity.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.free.capacity() * core::mem::size_of::<u32>()
    }

    /// The index of a vacant entry to reuse (its generation goes up by one), if any.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// The index the insert [`PREFETCH_AHEAD`] pops later will reuse, for the caller to
    /// prefetch; asked only after a [`pop`](Self::pop) found one, so that an insert with
    /// nothing to reuse pays for one check alone.
    #[inline]
    pub(crate) fn ahead(&self) -> Option<u32> {
        let ahead = self.free.len().checked_sub(PREFETCH_AHEAD)?;
        Some(self.free[ahead])
    }

    /// The index and generation of a fresh entry pushed at the end of arrays `len` long.
    ///
    /// # Panics
    ///
    /// When `u32::MAX - 1` entries are in use at once (over 100 GiB of timers), like `Vec`
    /// panics on capacity overflow.
    #[inline]
    pub(crate) fn fresh(&self, len: usize) -> (u32, u32) {
        let index = u32::try_from(len)
            .ok()
            .filter(|&i| i != NIL)
            .expect("tickwheel: more than u32::MAX - 1 timers pending at once");
        (index, self.fresh_generation)
    }

    /// Frees the entry at `index`, which had `generation`: back on the stack, unless that
    /// generation is the last one (the entry is retired).
    #[inline]
    pub(crate) fn push(&mut self, index: u32, generation: u32) {
        if reusable(generation) {
            if self.free.len() == self.free.capacity() {
                grow(&mut self.free);
            }
            self.free.push(index);
        }
    }

    /// After the store dropped its entries from `keep` on, the highest generation among them
    /// being `dropped_max` (0 if none): raises the fresh generation above it and rebuilds the
    /// stack over the `keep` entries left, lowest index on top, with those `vacant` says are
    /// vacant and not retired.
    pub(crate) fn rebuild(
        &mut self,
        keep: usize,
        dropped_max: u32,
        vacant: impl Fn(u32) -> Option<u32>,
    ) {
        self.fresh_generation = self.fresh_generation.max(dropped_max.saturating_add(1));
        self.free.clear();
        self.free.extend(
            (0..keep as u32)
                .rev()
                .filter(|&i| vacant(i).is_some_and(reusable)),
        );
        self.free.shrink_to_fit();
    }
}

/// Whether an entry freed at `generation` may be reused.
#[inline]
pub(crate) fn reusable(generation: u32) -> bool {
    generation < MAX_GENERATION
}

/// Doubles a full vector by allocating a new one and copying, not by `realloc`.
///
/// `realloc` serves the block from the arena that allocated it, and under glibc a large
/// request first consolidates every small block freed into that arena since the last one. In a
/// timer service that arena is the producer's, and the small blocks are the callbacks the
/// workers freed: there can be hundreds of thousands of them, and consolidating them costs the
/// timer thread milliseconds in the middle of a tick. A fresh allocation comes from the
/// growing thread's own arena.
#[cold]
#[inline(never)]
pub(crate) fn grow<T: Copy>(items: &mut Vec<T>) {
    let mut grown = Vec::with_capacity((2 * items.capacity()).max(8));
    grown.extend_from_slice(items);
    *items = grown;
}

/// Asks the CPU to start loading the entry a coming insert reuses. In a service the timer
/// thread frees entries and a producer thread reuses them, so the entry is often in another
/// core's cache, and after frees in deadline order it is a random one of the slab's.
#[inline(always)]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address, and SSE (which
    // provides it) is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}
