//! The storage [`HashedWheel`](super::HashedWheel) and [`Heap`](super::Heap) keep their
//! timers in: a slab of entries addressed by `u32` index. (The [`Wheel`](super::Wheel) splits
//! its records hot and cold instead: `queue/records.rs`.)
//!
//! # Implementation
//!
//! Entries live in one `Vec`. A vacant entry holds no value; its index waits on a stack of
//! free indices (last freed on top), so insert and remove never allocate once both vectors
//! have grown to the high-water mark. The stack is a separate `Vec<u32>`, not a list threaded
//! through the vacant entries as in the `slab` crate: popping a threaded list reads the entry
//! it pops to find the next head, so after frees in random order (timers fire in deadline
//! order, not insertion order) every insert would wait for the previous one's cache miss.
//! Popping the stack reads memory that is already in cache, and the inserts' misses overlap.
//! It costs 4 bytes per vacant entry. An insert prefetches the entry the insert [`PREFETCH_AHEAD`] pops later will
//! reuse — the stack knows it already — so a run of inserts finds its entries in cache; in a
//! service another thread freed them, and they are often in another core's cache.
//!
//! # Generations
//!
//! Each entry carries a generation, starting at 1 and bumped every time the entry is reused.
//! A [`TimerKey`] is (index, generation) and matches only while the entry is occupied by the
//! same generation, so a stale key never reaches a later timer. Two rules keep that true
//! forever rather than for 2^32 reuses:
//!
//! * an entry whose generation reaches `u32::MAX` is retired: when freed it is not put back on
//!   the free list (4 GiB of reuses of one entry cost one dead entry);
//! * [`Slab::shrink_to_fit`] drops vacant entries from the end, and entries pushed again at
//!   those indices start above every generation that was dropped.

use alloc::vec::Vec;

use super::TimerKey;

/// The "no entry" index (the queues use it for list ends and unplaced links). No entry is
/// ever stored at it.
pub(crate) const NIL: u32 = u32::MAX;

/// How many pops ahead an insert prefetches the entry it will reuse: far enough for the
/// miss to be over when that insert comes (in a loop of inserts), near enough that frees in
/// between rarely bury it.
const PREFETCH_AHEAD: usize = 8;

/// The largest generation an entry may reach before it is retired.
const MAX_GENERATION: u32 = u32::MAX;

/// A slot of the slab. `link` is the queue's own per-timer data (meaningless while vacant).
pub(crate) struct Entry<L, T> {
    pub(crate) link: L,
    generation: u32,
    pub(crate) value: Option<T>,
}

impl<L, T> Entry<L, T> {
    /// Vacant and not retired: may go on the free list.
    fn vacant_for_reuse(&self) -> bool {
        self.value.is_none() && self.generation < MAX_GENERATION
    }
}

pub(crate) struct Slab<L, T> {
    entries: Vec<Entry<L, T>>,
    /// Vacant entries' indices, the last freed on top.
    free: Vec<u32>,
    /// Occupied entries.
    len: usize,
    /// Generation of an entry pushed past the end; raised by `shrink_to_fit`.
    fresh_generation: u32,
}

impl<L, T> Slab<L, T> {
    pub(crate) const fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
            fresh_generation: 1,
        }
    }

    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            ..Slab::new()
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Bytes the entries and the free stack hold, at their capacity.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.entries.capacity() * core::mem::size_of::<Entry<L, T>>()
            + self.free.capacity() * core::mem::size_of::<u32>()
    }

    /// Stores a value and returns its index and key.
    ///
    /// # Panics
    ///
    /// When `u32::MAX - 1` entries are in use at once (over 100 GiB of timers), like `Vec`
    /// panics on capacity overflow.
    #[inline]
    pub(crate) fn insert(&mut self, link: L, value: T) -> (u32, TimerKey) {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            if let Some(ahead) = self.free.len().checked_sub(PREFETCH_AHEAD) {
                prefetch(
                    self.entries
                        .as_ptr()
                        .wrapping_add(self.free[ahead] as usize),
                );
            }
            let entry = &mut self.entries[index as usize];
            entry.generation += 1;
            entry.link = link;
            entry.value = Some(value);
            return (index, TimerKey::new(index, entry.generation));
        }
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("tickwheel: more than u32::MAX - 1 timers pending at once");
        self.entries.push(Entry {
            link,
            generation: self.fresh_generation,
            value: Some(value),
        });
        (index, TimerKey::new(index, self.fresh_generation))
    }

    /// The index of the live entry `key` names, if it is still live.
    #[inline]
    pub(crate) fn find(&self, key: TimerKey) -> Option<u32> {
        let index = key.index();
        let entry = self.entries.get(index as usize)?;
        (entry.generation == key.generation() && entry.value.is_some()).then_some(index)
    }

    /// The value of the live entry `key` names, if it is still live.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index() as usize)?;
        if entry.generation != key.generation() {
            return None;
        }
        entry.value.as_mut()
    }

    /// The key of the live entry at `index`.
    #[inline]
    pub(crate) fn key(&self, index: u32) -> TimerKey {
        TimerKey::new(index, self.entries[index as usize].generation)
    }

    #[inline]
    pub(crate) fn link(&self, index: u32) -> &L {
        &self.entries[index as usize].link
    }

    #[inline]
    pub(crate) fn link_mut(&mut self, index: u32) -> &mut L {
        &mut self.entries[index as usize].link
    }

    /// Frees the live entry at `index` and returns its value (always `Some`: only live entries
    /// are freed). The caller has already unlinked it from its queue structure.
    ///
    /// It returns the `Option` it took rather than unwrapping it: callers return an
    /// `Option<T>` anyway, and unwrapping then rewrapping a multi-word `T` made the compiler
    /// copy it through the stack in overlapping pieces, which stalls on store forwarding.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take();
        debug_assert!(value.is_some(), "slab: freeing a vacant entry");
        self.len -= 1;
        if entry.vacant_for_reuse() {
            if self.free.len() == self.free.capacity() {
                grow(&mut self.free);
            }
            self.free.push(index);
        }
        value
    }

    /// Drops vacant entries from the end and gives their memory back. Keys of live entries
    /// stay valid; stale keys stay stale (see the module docs).
    pub(crate) fn shrink_to_fit(&mut self) {
        let keep = self
            .entries
            .iter()
            .rposition(|e| e.value.is_some())
            .map_or(0, |i| i + 1);
        let dropped_max = self.entries[keep..]
            .iter()
            .map(|e| e.generation)
            .max()
            .unwrap_or(0);
        self.fresh_generation = self.fresh_generation.max(dropped_max.saturating_add(1));
        self.entries.truncate(keep);
        self.entries.shrink_to_fit();
        // Rebuild the free list over what is left, lowest index on top.
        self.free.clear();
        self.free.extend(
            (0..keep as u32)
                .rev()
                .filter(|&i| self.entries[i as usize].vacant_for_reuse()),
        );
        self.free.shrink_to_fit();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a queue's link; the slab never looks at it.
    #[derive(Clone, Copy)]
    struct Next;

    #[test]
    fn reuse_bumps_generation_and_stales_old_keys() {
        let mut slab: Slab<Next, &str> = Slab::new();
        let (i, a) = slab.insert(Next, "a");
        assert_eq!(slab.find(a), Some(i));
        assert_eq!(slab.remove(i), Some("a"));
        assert_eq!(slab.find(a), None);
        let (j, b) = slab.insert(Next, "b");
        assert_eq!(i, j, "the free entry is reused");
        assert_ne!(a, b);
        assert_eq!(slab.find(a), None);
        assert_eq!(slab.find(b), Some(j));
    }

    #[test]
    fn free_list_is_reused_last_freed_first() {
        // Popping with more than PREFETCH_AHEAD behind prefetches one of them (the `unsafe`
        // hint that Miri runs over in CI).
        let mut slab: Slab<Next, u32> = Slab::new();
        let indices: Vec<u32> = (0..13).map(|v| slab.insert(Next, v).0).collect();
        for &i in &indices[..12] {
            slab.remove(i);
        }
        let reused: Vec<u32> = (20..32).map(|v| slab.insert(Next, v).0).collect();
        let expected: Vec<u32> = indices[..12].iter().rev().copied().collect();
        assert_eq!(reused, expected);
        assert_eq!(slab.len(), 13);
        let (fresh, _) = slab.insert(Next, 99);
        assert_eq!(fresh, 13, "an empty free list grows the slab");
    }

    #[test]
    fn exhausted_generation_is_retired() {
        let mut slab: Slab<Next, u8> = Slab::new();
        let (i, _) = slab.insert(Next, 1);
        slab.entries[i as usize].generation = MAX_GENERATION;
        let last = slab.key(i);
        slab.remove(i);
        let (j, fresh) = slab.insert(Next, 2);
        assert_ne!(i, j, "a retired entry is never handed out again");
        assert_eq!(slab.find(last), None);
        assert_eq!(slab.find(fresh), Some(j));
    }

    #[test]
    fn shrink_rebuilds_the_free_stack_lowest_index_first_without_retired_entries() {
        let mut slab: Slab<Next, u32> = Slab::new();
        for v in 0..6 {
            slab.insert(Next, v);
        }
        slab.entries[2].generation = MAX_GENERATION;
        for i in [1, 2, 3, 5] {
            slab.remove(i);
        }
        slab.shrink_to_fit();
        assert_eq!(slab.entries.len(), 5, "the vacant tail (5) is dropped");
        assert!(
            slab.free.capacity() < 8,
            "the stack is shrunk too (it grew to 8)"
        );
        let reused: Vec<u32> = (0..3).map(|v| slab.insert(Next, v).0).collect();
        assert_eq!(
            reused,
            [1, 3, 5],
            "lowest first, retired 2 skipped, then growth"
        );
    }

    #[test]
    fn shrink_keeps_stale_keys_stale() {
        let mut slab: Slab<Next, u8> = Slab::new();
        let keys: Vec<_> = (0..4).map(|v| slab.insert(Next, v)).collect();
        for &(i, _) in &keys[1..] {
            slab.remove(i);
        }
        slab.shrink_to_fit();
        assert_eq!(slab.entries.len(), 1);
        assert_eq!(slab.find(keys[0].1), Some(0));
        for _ in 0..3 {
            let (i, k) = slab.insert(Next, 9);
            assert!(
                keys.iter().all(|&(_, old)| old != k),
                "index {i} reissued a stale key"
            );
        }
        for &(_, old) in &keys[1..] {
            assert_eq!(slab.find(old), None);
        }
    }
}
