//! The [`SlimWheel`](super::SlimWheel)'s per-timer storage: an 8-byte hot record, the
//! deadline and the value each in an array of their own.
//!
//! # Layout
//!
//! A timer is an index into three parallel arrays:
//!
//! * **hot** ([`Hot`], 8 bytes, eight a cache line): the generation of the timer's key and the
//!   slot its current item is in ([`VACANT`] while the record is free). A look-up by key, the
//!   check of an item, a cancel and a reset read this record and nothing else at random.
//! * **deadlines**: the effective deadline, 8 bytes, written by insert and reset, read when
//!   the timer moves down a level and by `deadline`.
//! * **values**: the value, initialised exactly while the record is live; read by `remove`
//!   and by expiry, and by `cancel` only when the value has drop glue.
//!
//! An item ([`Item`], 8 bytes) names its record and the generation it was appended with. It is
//! the timer's current item exactly when the record holds that generation and names that
//! slot; a reset gives the timer a new generation (and so a new key), so the item it left is
//! stale wherever it sits, with no position to keep in the record.
//!
//! # Generations
//!
//! A record's generation goes up by one at each reuse and at each reset, so no key is issued
//! twice. A reset of a record already at [`MAX_GENERATION`] moves the timer to another record
//! and retires this one; the [`FreeStack`] retires a record freed at that generation and, after
//! [`Store::shrink_to_fit`], starts the records pushed again at dropped indices above every
//! generation dropped (as the `Wheel`'s records do, `queue/records.rs`).

use alloc::vec::Vec;
use core::mem::MaybeUninit;

use crate::queue::free::{prefetch, FreeStack, MAX_GENERATION, NIL};
use crate::queue::TimerKey;

/// The slot of a vacant record. No slot has this number.
pub(super) const VACANT: u32 = NIL;

/// A timer's hot record. Aligned to its size, so that it never straddles two cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct Hot {
    /// The generation of the key that names the timer (of the last one, if vacant).
    pub(super) generation: u32,
    /// The slot number of the current item; [`VACANT`] while the record is free.
    pub(super) slot: u32,
}

/// A slot's entry: the record it names and the generation it was appended with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::queue) struct Item {
    pub(super) index: u32,
    pub(super) generation: u32,
}

impl Item {
    /// The key of the timer this item was appended for.
    #[inline]
    pub(super) fn key(self) -> TimerKey {
        TimerKey::new(self.index, self.generation)
    }
}

/// Hot records, deadlines and values by index, and the free records.
pub(super) struct Store<T> {
    hot: Vec<Hot>,
    deadlines: Vec<u64>,
    values: Vec<MaybeUninit<T>>,
    free: FreeStack,
    /// Live records.
    len: usize,
}

impl<T> Store<T> {
    pub(super) const fn new() -> Self {
        Store {
            hot: Vec::new(),
            deadlines: Vec::new(),
            values: Vec::new(),
            free: FreeStack::new(),
            len: 0,
        }
    }

    pub(super) fn with_capacity(capacity: usize) -> Self {
        Store {
            hot: Vec::with_capacity(capacity),
            deadlines: Vec::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
            free: FreeStack::new(),
            len: 0,
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Records held, live or not (the arrays' length).
    #[inline]
    pub(super) fn records(&self) -> usize {
        self.hot.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.hot.capacity()
    }

    /// Bytes the three arrays and the free stack hold, at their capacity.
    pub(super) fn allocated_bytes(&self) -> usize {
        self.hot.capacity() * core::mem::size_of::<Hot>()
            + self.deadlines.capacity() * core::mem::size_of::<u64>()
            + self.values.capacity() * core::mem::size_of::<MaybeUninit<T>>()
            + self.free.allocated_bytes()
    }

    /// Stores a timer whose item the caller appends to slot `slot` (never [`VACANT`]), and
    /// returns that item.
    ///
    /// # Panics
    ///
    /// When `u32::MAX - 1` records are in use at once (over 100 GiB of timers), like `Vec`
    /// panics on capacity overflow.
    #[inline]
    pub(super) fn insert(&mut self, deadline: u64, value: T, slot: u32) -> Item {
        debug_assert!(slot != VACANT);
        self.len += 1;
        if let Some(index) = self.free.pop() {
            if let Some(next) = self.free.ahead() {
                let next = next as usize;
                prefetch(self.hot.as_ptr().wrapping_add(next));
                prefetch(self.deadlines.as_ptr().wrapping_add(next));
                prefetch(self.values.as_ptr().wrapping_add(next));
            }
            let i = index as usize;
            let hot = &mut self.hot[i];
            let generation = hot.generation + 1;
            *hot = Hot { generation, slot };
            self.deadlines[i] = deadline;
            self.values[i] = MaybeUninit::new(value);
            return Item { index, generation };
        }
        let (index, generation) = self.free.fresh(self.hot.len());
        self.hot.push(Hot { generation, slot });
        self.deadlines.push(deadline);
        self.values.push(MaybeUninit::new(value));
        Item { index, generation }
    }

    /// The index and slot of the live timer `key` names, if it is still live.
    #[inline]
    pub(super) fn find(&self, key: TimerKey) -> Option<(u32, u32)> {
        let index = key.index();
        let hot = *self.hot.get(index as usize)?;
        (hot.generation == key.generation() && hot.slot != VACANT).then_some((index, hot.slot))
    }

    /// Starts loading the deadline of the timer `key` names, which a reset is about to write:
    /// its address is known from the key alone, so the miss overlaps the hot record's
    /// instead of starting when the store leaves the store buffer, after that miss.
    #[inline]
    pub(super) fn touch_deadline(&self, key: TimerKey) {
        prefetch(self.deadlines.as_ptr().wrapping_add(key.index() as usize));
    }

    /// Starts loading the value of the timer `key` names, which a removal is about to read
    /// (as [`touch_deadline`](Self::touch_deadline) does for a reset).
    #[inline]
    pub(super) fn touch_value(&self, key: TimerKey) {
        prefetch(self.values.as_ptr().wrapping_add(key.index() as usize));
    }

    /// Whether `item`, in slot `number`, is the current item of a live timer.
    #[inline]
    pub(super) fn valid(&self, item: Item, number: usize) -> bool {
        self.hot
            .get(item.index as usize)
            .is_some_and(|hot| hot.generation == item.generation && hot.slot as usize == number)
    }

    /// The live timer at `index`, due at `deadline`, gets a new key; its current item will be
    /// appended to slot `slot`. Returns that item: the same record with the next generation,
    /// or, when this record's generation is the last one, another record (this one retires).
    #[inline]
    pub(super) fn rekey(&mut self, index: u32, deadline: u64, slot: u32) -> Item {
        let i = index as usize;
        let generation = self.hot[i].generation;
        if generation == MAX_GENERATION {
            return self.move_out(index, deadline, slot);
        }
        let generation = generation + 1;
        self.hot[i] = Hot { generation, slot };
        self.deadlines[i] = deadline;
        Item { index, generation }
    }

    /// [`rekey`](Self::rekey) of a record whose generation is spent: its value goes to a new
    /// record, and it is freed without going back on the stack.
    #[cold]
    #[inline(never)]
    fn move_out(&mut self, index: u32, deadline: u64, slot: u32) -> Item {
        let value = self.take(index);
        self.insert(deadline, value, slot)
    }

    /// Notes that the current item of the live record at `index` is now in slot `slot`.
    #[inline]
    pub(super) fn set_slot(&mut self, index: u32, slot: u32) {
        debug_assert!(slot != VACANT && self.hot[index as usize].slot != VACANT);
        self.hot[index as usize].slot = slot;
    }

    #[inline]
    pub(super) fn deadline(&self, index: u32) -> u64 {
        self.deadlines[index as usize]
    }

    /// The value of the live timer `key` names, if it is still live.
    #[inline]
    pub(super) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let (index, _) = self.find(key)?;
        // SAFETY: `find` found the record live, and a live record's value is initialised.
        Some(unsafe { self.values[index as usize].assume_init_mut() })
    }

    /// Marks the record at `index` vacant; panics if it already is. Returns its generation.
    #[inline]
    fn vacate(&mut self, index: u32) -> u32 {
        let hot = &mut self.hot[index as usize];
        assert!(hot.slot != VACANT, "tickwheel: freed a vacant record");
        hot.slot = VACANT;
        self.len -= 1;
        hot.generation
    }

    /// Frees the live record at `index` and returns its value.
    #[inline]
    pub(super) fn take(&mut self, index: u32) -> T {
        let generation = self.vacate(index);
        // SAFETY: the record was live (`vacate` checked), so its value is initialised; it is
        // vacant now, so the value is never read or dropped again.
        let value = unsafe { self.values[index as usize].assume_init_read() };
        self.free.push(index, generation);
        value
    }

    /// Frees the live record at `index` and drops its value where it lies: a value without
    /// drop glue is not read at all, so a cancel touches its hot record alone.
    #[inline]
    pub(super) fn discard(&mut self, index: u32) {
        let generation = self.vacate(index);
        if core::mem::needs_drop::<T>() {
            // SAFETY: as in `take`: initialised until now, never used again.
            unsafe { self.values[index as usize].assume_init_drop() };
        }
        self.free.push(index, generation);
    }

    /// Starts loading the hot records `items` name (see the wheel's docs, "Storage"). A
    /// prefetch is a hint: an index past the end costs nothing.
    #[inline]
    pub(super) fn touch(&self, items: &[Item]) {
        let hot = self.hot.as_ptr();
        for item in items {
            prefetch(hot.wrapping_add(item.index as usize));
        }
    }

    /// Starts loading the values `items` name, for expiry.
    #[inline]
    pub(super) fn touch_values(&self, items: &[Item]) {
        let values = self.values.as_ptr();
        for item in items {
            prefetch(values.wrapping_add(item.index as usize));
        }
    }

    /// Starts loading the deadlines `items` name, for a move down a level.
    #[inline]
    pub(super) fn touch_deadlines(&self, items: &[Item]) {
        let deadlines = self.deadlines.as_ptr();
        for item in items {
            prefetch(deadlines.wrapping_add(item.index as usize));
        }
    }

    /// Drops vacant records from the end and gives their memory back. Keys of live timers stay
    /// valid; stale keys stay stale (see the module docs).
    pub(super) fn shrink_to_fit(&mut self) {
        let keep = self
            .hot
            .iter()
            .rposition(|hot| hot.slot != VACANT)
            .map_or(0, |i| i + 1);
        let dropped_max = self.hot[keep..]
            .iter()
            .map(|hot| hot.generation)
            .max()
            .unwrap_or(0);
        self.hot.truncate(keep);
        self.hot.shrink_to_fit();
        self.deadlines.truncate(keep);
        self.deadlines.shrink_to_fit();
        // Vacant values are uninitialised: truncating drops nothing.
        self.values.truncate(keep);
        self.values.shrink_to_fit();
        let hot = &self.hot;
        self.free.rebuild(keep, dropped_max, |i| {
            let hot = &hot[i as usize];
            (hot.slot == VACANT).then_some(hot.generation)
        });
    }

    /// The generation of the record at `index`, for tests.
    #[cfg(test)]
    pub(super) fn generation_mut(&mut self, index: u32) -> &mut u32 {
        &mut self.hot[index as usize].generation
    }
}

impl<T> Drop for Store<T> {
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        for (hot, value) in self.hot.iter().zip(&mut self.values) {
            if hot.slot != VACANT {
                // SAFETY: a live record's value is initialised, and this is its last use.
                unsafe { value.assume_init_drop() };
            }
        }
    }
}
