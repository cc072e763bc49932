//! The storage every queue keeps its timers in: a slab of entries addressed by `u32` index.
//!
//! # Implementation
//!
//! Entries live in one `Vec`. A vacant entry holds no value and sits on a singly linked free
//! list threaded through its link field ([`Link::next_free`]), so insert and remove never
//! allocate once the vector has grown to the high-water mark (slab's design). An insert that
//! pops the free list prefetches the new head for the next insert: in a service another
//! thread freed it, and it is usually in another core's cache (docs/DESIGN-NOTES.md).
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

/// The "no entry" index: list ends, empty free list. No entry is ever stored at it.
pub(crate) const NIL: u32 = u32::MAX;

/// The largest generation an entry may reach before it is retired.
const MAX_GENERATION: u32 = u32::MAX;

/// The per-queue link data of an entry; while vacant it threads the free list.
pub(crate) trait Link: Copy {
    /// The link of a vacant entry pointing at the next vacant entry.
    fn vacant(next_free: u32) -> Self;
    /// The next vacant entry, read from a vacant entry's link.
    fn next_free(&self) -> u32;
}

pub(crate) struct Entry<L, T> {
    pub(crate) link: L,
    generation: u32,
    pub(crate) value: Option<T>,
}

pub(crate) struct Slab<L, T> {
    entries: Vec<Entry<L, T>>,
    /// Head of the free list, or [`NIL`].
    free: u32,
    /// Occupied entries.
    len: usize,
    /// Generation of an entry pushed past the end; raised by `shrink_to_fit`.
    fresh_generation: u32,
}

impl<L: Link, T> Slab<L, T> {
    pub(crate) const fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: NIL,
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

    /// Stores a value and returns its index and key.
    ///
    /// # Panics
    ///
    /// When `u32::MAX - 1` entries are in use at once (over 100 GiB of timers), like `Vec`
    /// panics on capacity overflow.
    #[inline]
    pub(crate) fn insert(&mut self, link: L, value: T) -> (u32, TimerKey) {
        self.len += 1;
        if self.free != NIL {
            let index = self.free;
            let entry = &mut self.entries[index as usize];
            self.free = entry.link.next_free();
            entry.generation += 1;
            entry.link = link;
            entry.value = Some(value);
            let key = TimerKey::new(index, entry.generation);
            if self.free != NIL {
                prefetch(self.entries.as_ptr().wrapping_add(self.free as usize));
            }
            return (index, key);
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

    /// Frees the live entry at `index` and returns its value. The caller has already unlinked
    /// it from its queue structure.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take();
        debug_assert!(value.is_some(), "slab: freeing a vacant entry");
        self.len -= 1;
        if entry.generation < MAX_GENERATION {
            entry.link = L::vacant(self.free);
            self.free = index;
        }
        // Only live entries are ever freed, so `value` is `Some`; `expect` documents it.
        value.expect("slab: freeing a vacant entry")
    }

    /// Reads the generation and occupancy of every entry `keys` name, and nothing else: a safe stand-in for
    /// prefetch instructions. The loads do not depend on each other and nothing branches on
    /// them, so their cache misses overlap; the caller's validity checks that follow find the
    /// entries in cache instead of missing one at a time.
    #[inline]
    pub(crate) fn touch(&self, keys: &[TimerKey]) {
        let mut sum = 0u32;
        for key in keys {
            if let Some(entry) = self.entries.get(key.index() as usize) {
                // Both ends of a 56-byte entry may sit in different cache lines.
                sum = sum.wrapping_add(entry.generation) ^ u32::from(entry.value.is_some());
            }
        }
        core::hint::black_box(sum);
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
        // Rebuild the free list over what is left, lowest index first.
        self.free = NIL;
        for index in (0..keep).rev() {
            let entry = &mut self.entries[index];
            if entry.value.is_none() && entry.generation < MAX_GENERATION {
                entry.link = L::vacant(self.free);
                self.free = index as u32;
            }
        }
    }
}

/// Asks the CPU to start loading the free list's new head, which the next insert reads. In
/// a service the timer thread frees entries and a producer thread reuses them, so the head
/// is usually in another core's cache: without this every insert waits for that transfer.
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
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

    #[derive(Clone, Copy)]
    struct Next(u32);
    impl Link for Next {
        fn vacant(next_free: u32) -> Self {
            Next(next_free)
        }
        fn next_free(&self) -> u32 {
            self.0
        }
    }

    #[test]
    fn reuse_bumps_generation_and_stales_old_keys() {
        let mut slab: Slab<Next, &str> = Slab::new();
        let (i, a) = slab.insert(Next(0), "a");
        assert_eq!(slab.find(a), Some(i));
        assert_eq!(slab.remove(i), "a");
        assert_eq!(slab.find(a), None);
        let (j, b) = slab.insert(Next(0), "b");
        assert_eq!(i, j, "the free entry is reused");
        assert_ne!(a, b);
        assert_eq!(slab.find(a), None);
        assert_eq!(slab.find(b), Some(j));
    }

    #[test]
    fn free_list_is_reused_last_freed_first() {
        // Popping a head with more behind it prefetches the next one (the `unsafe` hint that
        // Miri runs over in CI).
        let mut slab: Slab<Next, u32> = Slab::new();
        let indices: Vec<u32> = (0..4).map(|v| slab.insert(Next(0), v).0).collect();
        for &i in &indices[..3] {
            slab.remove(i);
        }
        let reused: Vec<u32> = (10..13).map(|v| slab.insert(Next(0), v).0).collect();
        assert_eq!(reused, [indices[2], indices[1], indices[0]]);
        assert_eq!(slab.len(), 4);
        let (fresh, _) = slab.insert(Next(0), 13);
        assert_eq!(fresh, 4, "an empty free list grows the slab");
    }

    #[test]
    fn exhausted_generation_is_retired() {
        let mut slab: Slab<Next, u8> = Slab::new();
        let (i, _) = slab.insert(Next(0), 1);
        slab.entries[i as usize].generation = MAX_GENERATION;
        let last = slab.key(i);
        slab.remove(i);
        let (j, fresh) = slab.insert(Next(0), 2);
        assert_ne!(i, j, "a retired entry is never handed out again");
        assert_eq!(slab.find(last), None);
        assert_eq!(slab.find(fresh), Some(j));
    }

    #[test]
    fn shrink_keeps_stale_keys_stale() {
        let mut slab: Slab<Next, u8> = Slab::new();
        let keys: Vec<_> = (0..4).map(|v| slab.insert(Next(0), v)).collect();
        for &(i, _) in &keys[1..] {
            slab.remove(i);
        }
        slab.shrink_to_fit();
        assert_eq!(slab.entries.len(), 1);
        assert_eq!(slab.find(keys[0].1), Some(0));
        for _ in 0..3 {
            let (i, k) = slab.insert(Next(0), 9);
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
