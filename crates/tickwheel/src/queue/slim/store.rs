//! The per-timer storage of the [`SlimWheel`](super::SlimWheel) and the
//! [`IdWheel`](crate::queue::IdWheel): an 8-byte hot record, the deadline and the value each in
//! an array of their own. The two differ only in how a record is found and freed, the
//! [`Naming`] parameter: the `SlimWheel` hands out keys and keeps its free records on a
//! [`FreeStack`]; the `IdWheel` is told the caller's id, the record's index, and keeps no free
//! list (`id/store.rs`).
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
pub(in crate::queue) const VACANT: u32 = NIL;

/// What the `Lean` wheels do differently with a record: what a fired timer is named by, and
/// what becomes of a freed record.
pub(in crate::queue) trait Naming {
    /// What a timer comes out of a poll with: its key, or the caller's id.
    type Name;
    /// The name of the timer `item` is the current item of.
    fn name(item: Item) -> Self::Name;
    /// The record at `index`, at `generation`, was freed.
    fn freed(&mut self, index: u32, generation: u32);
    /// Bytes held beyond the struct.
    fn allocated_bytes(&self) -> usize;
}

/// The `SlimWheel`'s: keys, and free records on a stack for reuse.
impl Naming for FreeStack {
    type Name = TimerKey;

    #[inline]
    fn name(item: Item) -> TimerKey {
        item.key()
    }

    #[inline]
    fn freed(&mut self, index: u32, generation: u32) {
        self.push(index, generation);
    }

    fn allocated_bytes(&self) -> usize {
        FreeStack::allocated_bytes(self)
    }
}

/// A timer's hot record. Aligned to its size, so that it never straddles two cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(in crate::queue) struct Hot {
    /// The generation of the key that names the timer (of the last one, if vacant).
    pub(in crate::queue) generation: u32,
    /// The slot number of the current item; [`VACANT`] while the record is free.
    pub(in crate::queue) slot: u32,
}

/// A slot's entry: the record it names and the generation it was appended with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::queue) struct Item {
    pub(in crate::queue) index: u32,
    pub(in crate::queue) generation: u32,
}

impl Item {
    /// The key of the timer this item was appended for.
    #[inline]
    pub(super) fn key(self) -> TimerKey {
        TimerKey::new(self.index, self.generation)
    }
}

/// Hot records, deadlines and values by index, and what `N` keeps of the free records.
pub(in crate::queue) struct Store<T, N> {
    pub(in crate::queue) hot: Vec<Hot>,
    pub(in crate::queue) deadlines: Vec<u64>,
    pub(in crate::queue) values: Vec<MaybeUninit<T>>,
    pub(in crate::queue) free: N,
    /// Live records.
    pub(in crate::queue) len: usize,
}

impl<T, N> Store<T, N> {
    /// Empty arrays with room for `capacity` records, and `free`.
    pub(in crate::queue) fn with_free(capacity: usize, free: N) -> Self {
        Store {
            hot: Vec::with_capacity(capacity),
            deadlines: Vec::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
            free,
            len: 0,
        }
    }
}

impl<T> Store<T, FreeStack> {
    pub(super) fn new() -> Self {
        Store::with_capacity(0)
    }

    pub(super) fn with_capacity(capacity: usize) -> Self {
        Store::with_free(capacity, FreeStack::new())
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
        if let Some(index) = self.free.pop() {
            if let Some(next) = self.free.ahead() {
                let next = next as usize;
                prefetch(self.hot.as_ptr().wrapping_add(next));
                prefetch(self.deadlines.as_ptr().wrapping_add(next));
                prefetch(self.values.as_ptr().wrapping_add(next));
            }
            return self.occupy(index, deadline, value, slot);
        }
        self.len += 1;
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

    /// The live timer at `index`, due at `deadline`, gets a new key; its current item will be
    /// appended to slot `slot`. Returns that item: the same record with the next generation,
    /// or, when this record's generation is the last one, another record (this one retires).
    #[inline]
    pub(super) fn rekey(&mut self, index: u32, deadline: u64, slot: u32) -> Item {
        if self.hot[index as usize].generation == MAX_GENERATION {
            return self.move_out(index, deadline, slot);
        }
        self.bump(index, deadline, slot)
    }

    /// [`rekey`](Self::rekey) of a record whose generation is spent: its value goes to a new
    /// record, and it is freed without going back on the stack.
    #[cold]
    #[inline(never)]
    fn move_out(&mut self, index: u32, deadline: u64, slot: u32) -> Item {
        let value = self.take(index);
        self.insert(deadline, value, slot)
    }

    /// The value of the live timer `key` names, if it is still live.
    #[inline]
    pub(super) fn get(&self, key: TimerKey) -> Option<&T> {
        let (index, _) = self.find(key)?;
        self.value(index)
    }

    /// The value of the live timer `key` names, if it is still live, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let (index, _) = self.find(key)?;
        self.value_mut(index)
    }

    /// Drops vacant records from the end and gives their memory back. Keys of live timers stay
    /// valid; stale keys stay stale (see the module docs).
    pub(super) fn shrink_to_fit(&mut self) {
        let (keep, dropped_max) = self.truncate_vacant();
        let hot = &self.hot;
        self.free.rebuild(keep, dropped_max, |i| {
            let hot = &hot[i as usize];
            (hot.slot == VACANT).then_some(hot.generation)
        });
    }
}

impl<T, N: Naming> Store<T, N> {
    #[inline]
    pub(in crate::queue) fn len(&self) -> usize {
        self.len
    }

    /// Records held, live or not (the arrays' length).
    #[inline]
    pub(in crate::queue) fn records(&self) -> usize {
        self.hot.len()
    }

    /// The slot of the live record at `index` (the `IdWheel`'s pending timer on id `index`);
    /// `None` when it is vacant or past the arrays.
    #[inline]
    pub(in crate::queue) fn slot_of(&self, index: u32) -> Option<u32> {
        let hot = self.hot.get(index as usize)?;
        (hot.slot != VACANT).then_some(hot.slot)
    }

    pub(in crate::queue) fn capacity(&self) -> usize {
        self.hot.capacity()
    }

    /// Bytes the three arrays and the free records' list hold, at their capacity.
    pub(in crate::queue) fn allocated_bytes(&self) -> usize {
        self.hot.capacity() * core::mem::size_of::<Hot>()
            + self.deadlines.capacity() * core::mem::size_of::<u64>()
            + self.values.capacity() * core::mem::size_of::<MaybeUninit<T>>()
            + self.free.allocated_bytes()
    }

    /// Fills the vacant record at `index` with a timer whose item the caller appends to slot
    /// `slot`, at the record's next generation (below [`MAX_GENERATION`]); returns that item.
    #[inline]
    pub(in crate::queue) fn occupy(
        &mut self,
        index: u32,
        deadline: u64,
        value: T,
        slot: u32,
    ) -> Item {
        debug_assert!(slot != VACANT);
        self.len += 1;
        let i = index as usize;
        let hot = &mut self.hot[i];
        debug_assert!(hot.slot == VACANT && hot.generation < MAX_GENERATION);
        let generation = hot.generation + 1;
        *hot = Hot { generation, slot };
        self.deadlines[i] = deadline;
        self.values[i] = MaybeUninit::new(value);
        Item { index, generation }
    }

    /// The live timer at `index`, whose generation is below [`MAX_GENERATION`], gets the next
    /// one and the deadline `deadline`; its current item will be appended to slot `slot`.
    /// Returns that item.
    #[inline]
    pub(in crate::queue) fn bump(&mut self, index: u32, deadline: u64, slot: u32) -> Item {
        let i = index as usize;
        let generation = self.hot[i].generation + 1;
        self.hot[i] = Hot { generation, slot };
        self.deadlines[i] = deadline;
        Item { index, generation }
    }

    /// Starts loading the deadline at `index`, which a reset is about to write: its address
    /// is known from the key or id alone, so the miss overlaps the hot record's instead of
    /// starting when the store leaves the store buffer, after that miss.
    #[inline]
    pub(in crate::queue) fn touch_deadline_at(&self, index: u32) {
        prefetch(self.deadlines.as_ptr().wrapping_add(index as usize));
    }

    /// Starts loading the value at `index`, which a removal is about to read (as
    /// [`touch_deadline_at`](Self::touch_deadline_at) does for a reset).
    #[inline]
    pub(in crate::queue) fn touch_value_at(&self, index: u32) {
        prefetch(self.values.as_ptr().wrapping_add(index as usize));
    }

    /// Whether `item`, in slot `number`, is the current item of a live timer.
    #[inline]
    pub(in crate::queue) fn valid(&self, item: Item, number: usize) -> bool {
        self.hot
            .get(item.index as usize)
            .is_some_and(|hot| hot.generation == item.generation && hot.slot as usize == number)
    }

    /// Notes that the current item of the live record at `index` is now in slot `slot`.
    #[inline]
    pub(in crate::queue) fn set_slot(&mut self, index: u32, slot: u32) {
        debug_assert!(slot != VACANT && self.hot[index as usize].slot != VACANT);
        self.hot[index as usize].slot = slot;
    }

    #[inline]
    pub(in crate::queue) fn deadline(&self, index: u32) -> u64 {
        self.deadlines[index as usize]
    }

    /// The value of the record at `index`, if it is live.
    #[inline]
    pub(in crate::queue) fn value(&self, index: u32) -> Option<&T> {
        let live = self.hot.get(index as usize)?.slot != VACANT;
        // SAFETY: the record is live, and a live record's value is initialised.
        live.then(|| unsafe { self.values[index as usize].assume_init_ref() })
    }

    /// The value of the record at `index` if it is live, to change.
    #[inline]
    pub(in crate::queue) fn value_mut(&mut self, index: u32) -> Option<&mut T> {
        let live = self.hot.get(index as usize)?.slot != VACANT;
        // SAFETY: the record is live, and a live record's value is initialised.
        live.then(|| unsafe { self.values[index as usize].assume_init_mut() })
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
    pub(in crate::queue) fn take(&mut self, index: u32) -> T {
        let generation = self.vacate(index);
        // SAFETY: the record was live (`vacate` checked), so its value is initialised; it is
        // vacant now, so the value is never read or dropped again.
        let value = unsafe { self.values[index as usize].assume_init_read() };
        self.free.freed(index, generation);
        value
    }

    /// Frees the live record at `index` and drops its value where it lies: a value without
    /// drop glue is not read at all, so a cancel touches its hot record alone.
    #[inline]
    pub(in crate::queue) fn discard(&mut self, index: u32) {
        let generation = self.vacate(index);
        if core::mem::needs_drop::<T>() {
            // SAFETY: as in `take`: initialised until now, never used again.
            unsafe { self.values[index as usize].assume_init_drop() };
        }
        self.free.freed(index, generation);
    }

    /// Starts loading the hot records `items` name (see the wheel's docs, "Storage"). A
    /// prefetch is a hint: an index past the end costs nothing.
    #[inline]
    pub(in crate::queue) fn touch(&self, items: &[Item]) {
        let hot = self.hot.as_ptr();
        for item in items {
            prefetch(hot.wrapping_add(item.index as usize));
        }
    }

    /// Starts loading the values `items` name, for expiry.
    #[inline]
    pub(in crate::queue) fn touch_values(&self, items: &[Item]) {
        let values = self.values.as_ptr();
        for item in items {
            prefetch(values.wrapping_add(item.index as usize));
        }
    }

    /// Starts loading the deadlines `items` name, for a move down a level.
    #[inline]
    pub(in crate::queue) fn touch_deadlines(&self, items: &[Item]) {
        let deadlines = self.deadlines.as_ptr();
        for item in items {
            prefetch(deadlines.wrapping_add(item.index as usize));
        }
    }

    /// Drops the vacant records at the end and gives their memory back. Returns how many
    /// records are kept and the highest generation among those dropped (0 if none).
    pub(in crate::queue) fn truncate_vacant(&mut self) -> (usize, u32) {
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
        (keep, dropped_max)
    }

    /// The generation of the record at `index`, for tests (and the `IdWheel`'s test hook).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(in crate::queue) fn generation_mut(&mut self, index: u32) -> &mut u32 {
        &mut self.hot[index as usize].generation
    }
}

impl<T, N> Drop for Store<T, N> {
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
