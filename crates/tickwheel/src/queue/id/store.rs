//! The [`IdWheel`](super::IdWheel)'s records: the `SlimWheel`'s [`Store`] (`slim/store.rs`:
//! an 8-byte hot record, the deadline and the value each in an array of their own) indexed by
//! the caller's id, with no free list ([`ById`]).
//!
//! # Growth
//!
//! The arrays hold a record for every id below their length, pending or idle. An insert on an
//! id past the end grows them to cover it, at least doubling and never past the id limit
//! ([`Store::grow_to`]), so memory follows the largest id used, not the limit.
//!
//! # Generations
//!
//! A record's generation goes up by one at each insert and each reset on its id, as a
//! `SlimWheel` record's does at each reuse and reset; it is never exposed, and only tells the
//! items a reset, a cancel or a firing left behind in slots from the current one. A record
//! cannot be retired as the `SlimWheel` retires a spent one (the id is the caller's), so the
//! wheel restarts a spent generation after it has compacted every slot
//! (`IdWheel::restart_generation`, in `mod.rs`); [`Store::restart`] is the record's part.

use core::mem::MaybeUninit;

use crate::queue::free::MAX_GENERATION;
use crate::queue::slim::store::{Hot, Item, Naming, Store, VACANT};

/// The `IdWheel`'s [`Naming`]: a timer is named by its record's index, the caller's id, and a
/// freed record waits at its id for that id's next insert.
pub(in crate::queue) struct ById;

impl Naming for ById {
    type Name = u32;

    #[inline]
    fn name(item: Item) -> u32 {
        item.index
    }

    #[inline]
    fn freed(&mut self, _index: u32, _generation: u32) {}

    fn allocated_bytes(&self) -> usize {
        0
    }
}

/// Ids a first growth covers at least: a few records cost less than a second allocation.
const FIRST_IDS: usize = 16;

impl<T> Store<T, ById> {
    pub(super) fn new() -> Self {
        Store::with_free(0, ById)
    }

    /// Grows the arrays to hold `id` (below `limit`): to at least twice their length, at most
    /// `limit` records. New records are vacant at generation 0.
    #[cold]
    #[inline(never)]
    pub(super) fn grow_to(&mut self, id: u32, limit: u32) {
        let len = self.hot.len();
        let want = (id as usize + 1).max(2 * len).max(FIRST_IDS);
        let want = want.min(limit as usize).max(id as usize + 1);
        if want <= len {
            return;
        }
        let more = want - len;
        self.hot.reserve_exact(more);
        self.deadlines.reserve_exact(more);
        self.values.reserve_exact(more);
        self.hot.resize(
            want,
            Hot {
                generation: 0,
                slot: VACANT,
            },
        );
        self.deadlines.resize(want, 0);
        self.values.resize_with(want, MaybeUninit::uninit);
    }

    /// Gives the live timer at `id`, whose generation is below [`MAX_GENERATION`], a new
    /// deadline and value, as a new insertion whose item the caller appends to slot `slot`.
    /// Returns that item and the old value.
    #[inline]
    pub(super) fn replace(&mut self, id: u32, deadline: u64, value: T, slot: u32) -> (Item, T) {
        let item = self.bump(id, deadline, slot);
        let old = core::mem::replace(&mut self.values[id as usize], MaybeUninit::new(value));
        // SAFETY: the record was live (the caller checked), so its old value was initialised;
        // it is moved out here and its place holds the new one.
        (item, unsafe { old.assume_init() })
    }

    /// Sets the generation of the vacant record at `id` (grown to hold it). Only when no item
    /// names the record any more (the wheel has compacted every slot), or with a generation
    /// above every item's (the test hook).
    pub(super) fn restart(&mut self, id: u32, generation: u32) {
        let hot = &mut self.hot[id as usize];
        debug_assert!(hot.slot == VACANT);
        hot.generation = generation;
    }

    /// The generation of the record at `id`, spent ([`MAX_GENERATION`]) or not.
    #[inline]
    pub(super) fn spent(&self, id: u32) -> bool {
        self.hot[id as usize].generation == MAX_GENERATION
    }
}
