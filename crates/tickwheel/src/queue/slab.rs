//! The storage [`HashedWheel`](super::HashedWheel) and [`Heap`](super::Heap) keep their
//! timers in: a slab of entries addressed by `u32` index. (The [`Wheel`](super::Wheel) splits
//! its records hot and cold instead: `queue/records.rs`.)
//!
//! Entries live in one `Vec`; a vacant entry holds no value, and its index waits on the
//! shared generational [`FreeStack`] (`queue/free.rs`), which also holds the rules that keep
//! a stale [`TimerKey`] stale forever.

use alloc::vec::Vec;

pub(crate) use super::free::NIL;
use super::free::{prefetch, FreeStack};
use super::TimerKey;

/// A slot of the slab. `link` is the queue's own per-timer data (meaningless while vacant).
pub(crate) struct Entry<L, T> {
    pub(crate) link: L,
    generation: u32,
    pub(crate) value: Option<T>,
}

pub(crate) struct Slab<L, T> {
    entries: Vec<Entry<L, T>>,
    /// Vacant entries' indices and the next fresh generation.
    free: FreeStack,
    /// Occupied entries.
    len: usize,
}

impl<L, T> Slab<L, T> {
    pub(crate) const fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: FreeStack::new(),
            len: 0,
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
        self.entries.capacity() * core::mem::size_of::<Entry<L, T>>() + self.free.allocated_bytes()
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
            if let Some(ahead) = self.free.ahead() {
                prefetch(self.entries.as_ptr().wrapping_add(ahead as usize));
            }
            let entry = &mut self.entries[index as usize];
            entry.generation += 1;
            entry.link = link;
            entry.value = Some(value);
            return (index, TimerKey::new(index, entry.generation));
        }
        let (index, generation) = self.free.fresh(self.entries.len());
        self.entries.push(Entry {
            link,
            generation,
            value: Some(value),
        });
        (index, TimerKey::new(index, generation))
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
    pub(crate) fn get(&self, key: TimerKey) -> Option<&T> {
        let entry = self.entries.get(key.index() as usize)?;
        if entry.generation != key.generation() {
            return None;
        }
        entry.value.as_ref()
    }

    /// The value of the live entry `key` names, if it is still live, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index() as usize)?;
        if entry.generation != key.generation() {
            return None;
        }
        entry.value.as_mut()
    }

    /// The key of the first live entry at or after index `*from`, moving `*from` past it:
    /// a walk over the live entries that tolerates their removal as it goes (`clear`).
    pub(crate) fn next_live(&self, from: &mut u32) -> Option<TimerKey> {
        while let Some(entry) = self.entries.get(*from as usize) {
            *from += 1;
            if entry.value.is_some() {
                return Some(TimerKey::new(*from - 1, entry.generation));
            }
        }
        None
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
        self.free.push(index, entry.generation);
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
        self.entries.truncate(keep);
        self.entries.shrink_to_fit();
        let entries = &self.entries;
        self.free.rebuild(keep, dropped_max, |i| {
            let entry = &entries[i as usize];
            entry.value.is_none().then_some(entry.generation)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::free::MAX_GENERATION;

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
