//! The [`Wheel`](super::Wheel)'s per-timer storage, split hot and cold.
//!
//! # Layout
//!
//! A timer is an index into two parallel arrays:
//!
//! * **hot**: a [`Place`] (12 bytes: the generation its key was issued with, and the slot and
//!   position of its current item; the slot is [`VACANT`] while the record is free) and the
//!   value. Every look-up by key, every validity check of an item, every removal and every
//!   firing reads this record and nothing else at random.
//! * **deadlines**: the effective deadline, 8 bytes, read when the timer moves down a level
//!   and by [`TimerQueue::deadline`](super::TimerQueue::deadline), written by insert and
//!   reset.
//!
//! A `Wheel<u32>`'s hot record is 16 bytes, four a cache line, where one array of whole
//! entries (deadline, place, generation, value as `Option<T>`) took 32 bytes: at a million
//! timers a cancel misses in 16 MB instead of 32. The value sits in the hot record, not in an
//! array of its own, because the operations that read it (remove, expiry) read the hot
//! record anyway: in a third array it would cost every firing and every cancel a second
//! random cache line. Whether a record is live is told by its slot, so the value needs no
//! `Option` tag: it is a `MaybeUninit<T>`, initialised exactly while the record is live (4
//! bytes a timer less for a `u32` value, which has no niche for `Option` to use).
//!
//! Vacant records' indices wait on the generational free-stack the queues' slab uses too
//! ([`FreeStack`], `queue/free.rs`): an insert pops it and prefetches the records a later
//! insert will reuse.
//!
//! # What a cancel costs at a million timers
//!
//! At 10^6 timers the records no longer fit in cache, and a cancel waits for its hot
//! record's miss. The split makes the array it misses in 16 MB for a `Wheel<u32>` (four
//! records a cache line) where one array of whole entries (deadline, place, generation,
//! value) was 32 MB, and the items 4 bytes instead of 8; that speeds up inserts and expiry
//! (fewer, smaller arrays to fill and walk) more than the cancel itself, which still waits
//! on a record in main memory. The value sits in the hot record rather than in an array of
//! its own because `remove` returns it and expiry hands it out, so it is read with the
//! record anyway. A large value makes the hot record large: a timer whose payload is big is
//! cheaper to cancel with the payload boxed, or kept in the caller's own array and named by
//! an index.
//!
//! A cancel still costs more than the lazy `BinaryHeap` peer's at 10^6: that cancel writes
//! a 4-byte generation in a 4 MB array that stays in the last-level cache and keeps no
//! structure current, while this one misses in a 16 MB array, and a queue with bounded
//! memory must also count what left each slot, tombstone the item and compact the slots that
//! cancels thinned out. The wheel does that work for 64 cancels at a time, off the path of
//! the record's miss (`wheel/slots.rs`, "Departures"), so the misses of consecutive cancels
//! overlap. The wheels of `cargo run --release -p tickwheel-lab --example queue_floors`,
//! which do less than this contract, show how far a layout alone can go (the workloads are
//! defined in `docs/ARCHITECTURE.md`). The [`SlimWheel`](crate::SlimWheel) takes the
//! smallest of those layouts with bounded memory (8-byte records, `queue/slim/store.rs`) at
//! the price of a key that does not survive a reset.
//!
//! # Generations
//!
//! A record's generation starts at 1 and is bumped every time the record is reused; a
//! [`TimerKey`] (index, generation) matches only while the record is live with that
//! generation. The [`FreeStack`] retires a record whose generation reaches its last value,
//! and after [`Records::shrink_to_fit`] starts records pushed again at dropped indices above
//! every generation dropped, so a stale key stays stale forever.

use alloc::vec::Vec;
use core::mem::MaybeUninit;

use super::free::{prefetch, FreeStack, NIL};
use super::TimerKey;

/// The slot of a vacant record. No slot has this number.
pub(crate) const VACANT: u32 = NIL;

/// A timer's hot record: its key's generation and where its current item is.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    generation: u32,
    /// Slot number, [`VACANT`] while the record is free.
    pub(crate) slot: u32,
    /// Position of the current item in the slot.
    pub(crate) pos: u32,
}

/// A hot record: the place and the value.
struct Hot<T> {
    place: Place,
    /// Initialised exactly while the record is live (`place.slot != VACANT`).
    value: MaybeUninit<T>,
}

/// Hot records, deadlines and values of a wheel's timers, by index.
pub(crate) struct Records<T> {
    hot: Vec<Hot<T>>,
    deadlines: Vec<u64>,
    /// Vacant records' indices and the next fresh generation.
    free: FreeStack,
    /// Live records.
    len: usize,
}

impl<T> Records<T> {
    pub(crate) const fn new() -> Self {
        Records {
            hot: Vec::new(),
            deadlines: Vec::new(),
            free: FreeStack::new(),
            len: 0,
        }
    }

    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Records {
            hot: Vec::with_capacity(capacity),
            deadlines: Vec::with_capacity(capacity),
            free: FreeStack::new(),
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.hot.capacity()
    }

    /// Bytes the three arrays and the free stack hold, at their capacity.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.hot.capacity() * core::mem::size_of::<Hot<T>>()
            + self.deadlines.capacity() * core::mem::size_of::<u64>()
            + self.free.allocated_bytes()
    }

    /// Stores a timer whose item the caller puts at position `pos` of slot `slot` (a slot
    /// number, never [`VACANT`]), and returns its index and key.
    ///
    /// # Panics
    ///
    /// When `u32::MAX - 1` records are in use at once (over 100 GiB of timers), like `Vec`
    /// panics on capacity overflow.
    #[inline]
    pub(crate) fn insert(
        &mut self,
        deadline: u64,
        value: T,
        slot: u32,
        pos: u32,
    ) -> (u32, TimerKey) {
        debug_assert!(slot != VACANT);
        self.len += 1;
        let placed = Place {
            generation: 0,
            slot,
            pos,
        };
        if let Some(index) = self.free.pop() {
            if let Some(next) = self.free.ahead() {
                let next = next as usize;
                prefetch(self.hot.as_ptr().wrapping_add(next));
                prefetch(self.deadlines.as_ptr().wrapping_add(next));
            }
            let i = index as usize;
            let hot = &mut self.hot[i];
            let generation = hot.place.generation + 1;
            *hot = Hot {
                place: Place {
                    generation,
                    ..placed
                },
                value: MaybeUninit::new(value),
            };
            self.deadlines[i] = deadline;
            return (index, TimerKey::new(index, generation));
        }
        let (index, generation) = self.free.fresh(self.hot.len());
        self.hot.push(Hot {
            place: Place {
                generation,
                ..placed
            },
            value: MaybeUninit::new(value),
        });
        self.deadlines.push(deadline);
        (index, TimerKey::new(index, generation))
    }

    /// The index of the live record `key` names, if it is still live.
    #[inline]
    pub(crate) fn find(&self, key: TimerKey) -> Option<u32> {
        let index = key.index();
        let hot = &self.hot.get(index as usize)?.place;
        (hot.generation == key.generation() && hot.slot != VACANT).then_some(index)
    }

    /// The index and place of the live record `key` names, if it is still live.
    #[inline]
    pub(crate) fn find_place(&self, key: TimerKey) -> Option<(u32, Place)> {
        let index = key.index();
        let place = self.hot.get(index as usize)?.place;
        (place.generation == key.generation() && place.slot != VACANT).then_some((index, place))
    }

    /// The key of the record at `index`.
    #[inline]
    pub(crate) fn key(&self, index: u32) -> TimerKey {
        TimerKey::new(index, self.hot[index as usize].place.generation)
    }

    /// Where the current item of the record at `index` is; slot [`VACANT`] if it is free,
    /// and `None` past the end.
    #[inline]
    pub(crate) fn place(&self, index: u32) -> Option<&Place> {
        self.hot.get(index as usize).map(|hot| &hot.place)
    }

    /// Records where the current item of the live record at `index` is (`slot` is a slot
    /// number, never [`VACANT`]). A vacant record is left as it is: only
    /// [`insert`](Self::insert) makes a record live, as it initialises the value.
    #[inline]
    pub(crate) fn set_place(&mut self, index: u32, slot: u32, pos: u32) {
        debug_assert!(slot != VACANT);
        let hot = &mut self.hot[index as usize].place;
        if hot.slot == VACANT || slot == VACANT {
            return;
        }
        hot.slot = slot;
        hot.pos = pos;
    }

    /// Records the new position of the current item of the live record at `index`.
    #[inline]
    pub(crate) fn set_pos(&mut self, index: u32, pos: u32) {
        self.hot[index as usize].place.pos = pos;
    }

    #[inline]
    pub(crate) fn deadline(&self, index: u32) -> u64 {
        self.deadlines[index as usize]
    }

    #[inline]
    pub(crate) fn set_deadline(&mut self, index: u32, deadline: u64) {
        self.deadlines[index as usize] = deadline;
    }

    /// The value of the live record `key` names, if it is still live.
    #[inline]
    pub(crate) fn get(&self, key: TimerKey) -> Option<&T> {
        let index = self.find(key)?;
        // SAFETY: `find` found the record live, and a live record's value is initialised.
        Some(unsafe { self.hot[index as usize].value.assume_init_ref() })
    }

    /// The value of the live record `key` names, if it is still live, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let index = self.find(key)?;
        let hot = &mut self.hot[index as usize];
        // SAFETY: `find` found the record live, and a live record's value is initialised.
        Some(unsafe { hot.value.assume_init_mut() })
    }

    /// Frees the live record at `index` and returns its value (`None` if it is vacant, which
    /// the wheel never asks). The caller has already taken its item out of its slot.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let i = index as usize;
        let hot = &mut self.hot[i];
        if hot.place.slot == VACANT {
            return None;
        }
        Some(self.take(index))
    }

    /// Frees the record at `index`, which the caller knows to be live, and returns its value.
    #[inline]
    pub(crate) fn take(&mut self, index: u32) -> T {
        let hot = &mut self.hot[index as usize];
        assert!(hot.place.slot != VACANT, "tickwheel: took a vacant record");
        hot.place.slot = VACANT;
        let generation = hot.place.generation;
        // SAFETY: the record was live (checked above), so its value is initialised; it is
        // now vacant, so the value is never read or dropped again.
        let value = unsafe { hot.value.assume_init_read() };
        self.len -= 1;
        self.free.push(index, generation);
        value
    }

    /// Starts loading the hot records of the timers `items` name, so that the validity
    /// checks that follow find them in cache: their misses overlap instead of forming a
    /// chain. A prefetch is a hint: an item that names no record ([`NIL`]) costs nothing.
    #[inline]
    pub(crate) fn touch(&self, items: &[u32]) {
        let hot = self.hot.as_ptr();
        for &index in items {
            // A record may straddle two cache lines: fetch both ends.
            let at = hot.wrapping_add(index as usize);
            prefetch(at);
            prefetch(
                at.cast::<u8>()
                    .wrapping_add(core::mem::size_of::<Hot<T>>() - 1),
            );
        }
    }

    /// Starts loading the deadlines of the timers `items` name, for a move down a level.
    #[inline]
    pub(crate) fn touch_deadlines(&self, items: &[u32]) {
        let deadlines = self.deadlines.as_ptr();
        for &index in items {
            prefetch(deadlines.wrapping_add(index as usize));
        }
    }

    /// Drops vacant records from the end and gives their memory back. Keys of live records
    /// stay valid; stale keys stay stale (see the module docs).
    pub(crate) fn shrink_to_fit(&mut self) {
        let keep = self
            .hot
            .iter()
            .rposition(|hot| hot.place.slot != VACANT)
            .map_or(0, |i| i + 1);
        let dropped_max = self.hot[keep..]
            .iter()
            .map(|hot| hot.place.generation)
            .max()
            .unwrap_or(0);
        self.hot.truncate(keep);
        self.hot.shrink_to_fit();
        self.deadlines.truncate(keep);
        self.deadlines.shrink_to_fit();
        let hot = &self.hot;
        self.free.rebuild(keep, dropped_max, |i| {
            let place = &hot[i as usize].place;
            (place.slot == VACANT).then_some(place.generation)
        });
    }
}

impl<T> Drop for Records<T> {
    fn drop(&mut self) {
        for hot in &mut self.hot {
            if hot.place.slot != VACANT {
                // SAFETY: a live record's value is initialised, and this is its last use.
                unsafe { hot.value.assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::free::MAX_GENERATION;
    use alloc::vec::Vec;

    /// Inserts and places a timer the way the wheel does.
    fn add(records: &mut Records<u32>, value: u32) -> (u32, TimerKey) {
        records.insert(u64::from(value), value, 0, value)
    }

    #[test]
    fn reuse_bumps_generation_and_stales_old_keys() {
        let mut records = Records::new();
        let (i, a) = add(&mut records, 1);
        assert_eq!(records.find(a), Some(i));
        assert_eq!(records.deadline(i), 1);
        assert_eq!(records.remove(i), Some(1));
        assert_eq!(records.find(a), None);
        assert_eq!(records.get_mut(a), None);
        let (j, b) = add(&mut records, 2);
        assert_eq!(i, j, "the free record is reused");
        assert_ne!(a, b);
        assert_eq!(records.find(a), None);
        assert_eq!(records.find(b), Some(j));
        assert_eq!(records.get_mut(b), Some(&mut 2));
        assert_eq!(records.key(j), b);
    }

    #[test]
    fn free_stack_is_reused_last_freed_first() {
        // Popping with more than PREFETCH_AHEAD behind prefetches one of them.
        let mut records = Records::new();
        let indices: Vec<u32> = (0..13).map(|v| add(&mut records, v).0).collect();
        for &i in &indices[..12] {
            records.remove(i);
        }
        let reused: Vec<u32> = (20..32).map(|v| add(&mut records, v).0).collect();
        let expected: Vec<u32> = indices[..12].iter().rev().copied().collect();
        assert_eq!(reused, expected);
        assert_eq!(records.len(), 13);
        assert_eq!(
            add(&mut records, 99).0,
            13,
            "an empty stack grows the arrays"
        );
        // Prefetching past the end or for a tombstone is a hint, never a fault.
        records.touch(&[0, 5, NIL]);
        records.touch_deadlines(&[0, 5, NIL]);
    }

    /// Values are owned: moved out once by `remove`, dropped once with the records, never
    /// read from a vacant record (Miri checks this test in CI).
    #[test]
    fn values_move_out_once_and_the_rest_drop_with_the_records() {
        use alloc::string::{String, ToString};
        let mut records: Records<String> = Records::new();
        let placed =
            |records: &mut Records<String>, text: &str| records.insert(7, text.to_string(), 1, 0);
        let (a, key_a) = placed(&mut records, "a");
        let (b, key_b) = placed(&mut records, "b");
        placed(&mut records, "c");
        records.get_mut(key_b).unwrap().push('!');
        assert_eq!(records.remove(b).as_deref(), Some("b!"));
        assert_eq!(records.remove(b), None, "a vacant record has no value");
        assert_eq!(records.get_mut(key_b), None);
        records.set_place(b, 2, 0);
        assert_eq!(
            records.find(key_b),
            None,
            "placing a vacant record revives nothing"
        );
        let (reused, _) = placed(&mut records, "d");
        assert_eq!(reused, b);
        assert_eq!(records.get_mut(key_a).map(|v| v.as_str()), Some("a"));
        records.remove(a);
        records.shrink_to_fit();
        assert_eq!(records.len(), 2);
        // "c" and "d" are dropped here.
    }

    #[test]
    fn exhausted_generation_is_retired() {
        let mut records = Records::new();
        let (i, _) = add(&mut records, 1);
        records.hot[i as usize].place.generation = MAX_GENERATION;
        let last = records.key(i);
        assert_eq!(records.find(last), Some(i));
        records.remove(i);
        let (j, fresh) = add(&mut records, 2);
        assert_ne!(i, j, "a retired record is never handed out again");
        assert_eq!(records.find(last), None);
        assert_eq!(records.find(fresh), Some(j));
    }

    #[test]
    fn shrink_keeps_live_keys_and_stale_keys_stale() {
        let mut records = Records::new();
        let keys: Vec<_> = (0..6).map(|v| add(&mut records, v)).collect();
        records.hot[2].place.generation = MAX_GENERATION;
        for i in [1, 2, 3, 5] {
            records.remove(i);
        }
        let before = records.allocated_bytes();
        records.shrink_to_fit();
        assert!(records.allocated_bytes() < before);
        assert_eq!(records.hot.len(), 5, "the vacant tail (5) is dropped");
        assert_eq!(records.find(keys[0].1), Some(0));
        assert_eq!(records.find(keys[4].1), Some(4));
        let reused: Vec<_> = (0..3).map(|v| add(&mut records, v)).collect();
        let indices: Vec<u32> = reused.iter().map(|&(i, _)| i).collect();
        assert_eq!(
            indices,
            [1, 3, 5],
            "lowest first, retired 2 skipped, then growth"
        );
        for &(_, new) in &reused {
            assert!(
                keys.iter().all(|&(_, old)| old != new),
                "a stale key reissued"
            );
        }
        for &(_, old) in &keys[1..4] {
            assert_eq!(records.find(old), None);
        }
        assert_eq!(records.find(keys[5].1), None);
    }
}
