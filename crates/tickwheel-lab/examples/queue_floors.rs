//! Floors under the `Wheel` on W1, W2, W3 and W5: how fast a 64-slot wheel that does *less*
//! than the queue contract asks can go, beside `Wheel` and the lazy `BinaryHeap` (the fastest
//! peer in `tickwheel bench`), on the same inputs, in one run.
//!
//! * `lazy heap`: `BinaryHeap<Reverse<(deadline, seq, id, generation)>>`; a cancel bumps the
//!   id's generation and leaves the entry in the heap (the `std-binaryheap` peer).
//! * `SlimWheel`: `tickwheel::SlimWheel`, the queue built on `split wheel`'s layout below with
//!   the `Wheel`'s levels and pacing; it cancels with `cancel` and takes the key a reset
//!   returns.
//! * `IdWheel` (W1, W3, W5): `tickwheel::IdWheel`, the `SlimWheel` told the caller's ids (the
//!   workloads' timer ids, dense), as the lazy heap is, as `split/by id` below is: a reset and
//!   a cancel by id, no key, no free stack. It holds the ids as values, as every entrant does.
//! * `bare wheel`: a classic wheel, 64 slots and 4 levels (ticks below 2^24), items
//!   `(deadline, id, generation)` in slot vectors, cascaded when the clock enters a slot. No
//!   keys and no slab: it cancels lazily, as the heap does.
//! * `keyed wheel`: `bare wheel` plus the least that cancelling without keeping memory needs:
//!   a slab entry per timer (generation, deadline, slot, position), updated at every move, and
//!   a cancel that swap-removes the item and frees the entry. Swapping breaks the order within
//!   a slot, which the contract specifies; it is a floor, not a queue.
//! * `find+free` (W1 only): inserts as `keyed wheel` does; a cancel finds the entry and frees
//!   it and does nothing else, leaving the item where it is.
//! * `split wheel`: storage split hot/cold so that a cancel touches one random 8-byte record
//!   and no item: hot `(generation, slot)`, cold deadline and value, items `(index,
//!   generation)`; slot live counts kept in batches, mostly-stale slots compacted (bounded
//!   memory). A reset hands out a new key.
//! * `lean wheel`: `split wheel` with the deadline in the item (16 bytes, as `bare wheel`),
//!   so a reset touches no cold line either.
//! * `packed wheel`: `lean wheel` with a 4-byte hot record (21-bit generation, 11-bit slot):
//!   the lazy heap's 4 bytes a cancel touches, at the price of generations that wrap.
//! * `…/nocount`: the same without slot accounting: a cancel is a generation bump and a free
//!   push, exactly the lazy heap's cancel plus the push; slots are emptied only when the
//!   clock walks them (unbounded memory under cancels).
//! * `heap/by handle`, `bare/by handle` (W3, W5): the lazy heap and `bare wheel` with a
//!   reset that takes the timer's id from its handle instead of from the caller, as a keyed
//!   queue takes its record's index from the key. Both index their generations by the id;
//!   from the caller the id is known before the handle is loaded, so the generation's miss
//!   can overlap the handle's, and from the handle it cannot.
//! * `split/by id` (W3, W5): `split wheel` told the caller's id, as the lazy heap is: one
//!   timer an id, its hot record at the id's index (no free stack), so a reset's record miss
//!   starts beside the handle's. Less than the contract in what it asks of the caller (dense
//!   ids, one timer each); bounded memory as `split wheel`.
//!
//! The workloads are defined in `docs/ARCHITECTURE.md` ("Workloads"); the inputs are
//! `tickwheel bench --seed 42`'s, from [`tickwheel_lab::workloads`]. A reset of the lazy
//! queues is a cancel and an insert. Each queue is built before its clock starts, as in
//! `tickwheel bench`. Every run is checked: every W1 cancel must find its timer; after W2,
//! and after W3's resets (untimed), each timer fires once, at its (last) deadline; in W5 every
//! firing is at the slot's last deadline and every slot an operation touches is pending.
//! Cells: median ns a timer (W5: an operation, firings included, as `tickwheel bench`
//! counts) over the repeats, and in brackets how many times faster than the lazy heap. As in
//! `tickwheel bench`, each entrant runs in a fresh process of its own for each N (this
//! program again), once untimed and then the repeats, so that no timed run starts on memory
//! another entrant freed. With
//! `FLOORS_PHASES=1` W1 also prints each run's insert and cancel phases; `FLOORS_ONLY=Wheel,…`
//! runs only the entrants named (and the lazy heap); `FLOORS_CPU=1` times by thread CPU time
//! instead of the wall clock (Linux), for comparing binaries on a machine others load.
//!
//! `cargo run --release -p tickwheel-lab --example queue_floors [-- N[,N…] [REPEATS
//! [W1,W2,W3,W5]]]` (default `10000,100000,1000000 5`, every workload).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tickwheel::{IdWheel, SlimWheel, TimerKey, TimerQueue, Wheel};
use tickwheel_lab::workloads::{self, ChurnInput, ChurnOp, QueueInput};

/// What a workload needs of a queue: the same operations as `tickwheel bench`'s entrants.
trait Queue: Default {
    type Handle: Copy;
    fn insert(&mut self, id: u32, deadline: u64) -> Self::Handle;
    fn cancel(&mut self, handle: Self::Handle) -> bool;
    /// Moves timer `id` to `deadline`: a cancel and an insert unless the queue does better.
    fn reset(&mut self, handle: Self::Handle, id: u32, deadline: u64) -> Self::Handle {
        self.cancel(handle);
        self.insert(id, deadline)
    }
    /// Advances to `now` (one more than the last call), appending what fired.
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>);
}

#[derive(Default)]
struct TheWheel(Wheel<u32>);

impl Queue for TheWheel {
    type Handle = TimerKey;
    fn insert(&mut self, id: u32, deadline: u64) -> TimerKey {
        self.0.insert(deadline, id)
    }
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.remove(key).is_some()
    }
    fn reset(&mut self, key: TimerKey, _: u32, deadline: u64) -> TimerKey {
        self.0.reset(key, deadline);
        key
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((_, id)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}

/// `tickwheel::SlimWheel`: a cancel that reads no value, a reset that returns a new key.
#[derive(Default)]
struct TheSlim(SlimWheel<u32>);

impl Queue for TheSlim {
    type Handle = TimerKey;
    fn insert(&mut self, id: u32, deadline: u64) -> TimerKey {
        self.0.insert(deadline, id)
    }
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.cancel(key)
    }
    fn reset(&mut self, key: TimerKey, id: u32, deadline: u64) -> TimerKey {
        self.0
            .reset(key, deadline)
            .unwrap_or_else(|| self.0.insert(deadline, id))
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((_, id)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}

/// `tickwheel::IdWheel`: told the caller's id; the handle is the id.
struct TheId(IdWheel<u32>);

impl Default for TheId {
    fn default() -> TheId {
        TheId(IdWheel::new(u32::MAX))
    }
}

impl Queue for TheId {
    type Handle = u32;
    fn insert(&mut self, id: u32, deadline: u64) -> u32 {
        let replaced = self.0.insert(id, deadline, id).expect("id below u32::MAX");
        debug_assert!(replaced.is_none());
        id
    }
    fn cancel(&mut self, id: u32) -> bool {
        self.0.cancel(id)
    }
    fn reset(&mut self, _: u32, id: u32, deadline: u64) -> u32 {
        if !self.0.reset(id, deadline) {
            self.insert(id, deadline);
        }
        id
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some((id, _)) = self.0.poll_expired(now) {
            fired.push((id, now));
        }
    }
}

/// Lazy cancellation, shared by the heap and the bare wheel: a generation per id, odd while
/// the timer is pending.
#[derive(Default)]
struct Generations(Vec<u32>);

impl Generations {
    fn start(&mut self, id: u32) -> u32 {
        let id = id as usize;
        if id >= self.0.len() {
            self.0.resize(id + 1, 0);
        }
        self.0[id] = (self.0[id] | 1).wrapping_add(2);
        self.0[id]
    }
    /// Ends the timer `(id, generation)` if it is still pending; whether it was.
    fn end(&mut self, (id, generation): (u32, u32)) -> bool {
        let current = &mut self.0[id as usize];
        let pending = *current == generation;
        if pending {
            *current = current.wrapping_add(1);
        }
        pending
    }
}

#[derive(Default)]
struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    generations: Generations,
    sequence: u64,
}

impl Queue for LazyHeap {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let generation = self.generations.start(id);
        self.sequence += 1;
        self.heap
            .push(Reverse((deadline, self.sequence, id, generation)));
        (id, generation)
    }
    fn cancel(&mut self, handle: (u32, u32)) -> bool {
        self.generations.end(handle)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some(&Reverse((deadline, _, id, generation))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if self.generations.end((id, generation)) {
                fired.push((id, now));
            }
        }
    }
}

/// A lazy queue whose reset takes the timer's id from its handle (the `…/by handle` rows;
/// see the module docs).
#[derive(Default)]
struct ByHandle<Q>(Q);

impl<Q: Queue<Handle = (u32, u32)>> Queue for ByHandle<Q> {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        self.0.insert(id, deadline)
    }
    fn cancel(&mut self, handle: (u32, u32)) -> bool {
        self.0.cancel(handle)
    }
    fn reset(&mut self, handle: (u32, u32), _id: u32, deadline: u64) -> (u32, u32) {
        self.0.cancel(handle);
        self.0.insert(handle.0, deadline)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.0.advance(now, fired);
    }
}

/// Levels of the floor wheels: ticks below 2^24, enough for all three workloads.
const LEVELS: usize = 4;

/// The level and slot number of `deadline` from `now`: the highest 6-bit group in which they
/// differ (Linux's rule).
fn place(now: u64, deadline: u64) -> (usize, usize) {
    let level = ((63 - ((deadline ^ now) | 63).leading_zeros()) / 6) as usize;
    assert!(level < LEVELS, "the floor wheels cover ticks below 2^24");
    let slot = ((deadline >> (6 * level)) & 63) as usize;
    (level, level * 64 + slot)
}

/// The slots `now` enters, highest level first, that must be cascaded or fired.
fn entered(now: u64) -> impl Iterator<Item = (usize, usize)> {
    (0..LEVELS)
        .rev()
        .filter(move |&level| level == 0 || now & ((1 << (6 * level)) - 1) == 0)
        .map(move |level| (level, level * 64 + ((now >> (6 * level)) & 63) as usize))
}

struct BareWheel {
    slots: Vec<Vec<(u64, u32, u32)>>,
    occupied: [u64; LEVELS],
    generations: Generations,
    now: u64,
}

impl Default for BareWheel {
    fn default() -> BareWheel {
        BareWheel {
            slots: (0..LEVELS * 64).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
            generations: Generations::default(),
            now: 0,
        }
    }
}

impl BareWheel {
    fn push(&mut self, item: (u64, u32, u32)) {
        let (level, number) = place(self.now, item.0);
        self.slots[number].push(item);
        self.occupied[level] |= 1 << (number % 64);
    }
}

impl Queue for BareWheel {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let generation = self.generations.start(id);
        self.push((deadline, id, generation));
        (id, generation)
    }
    fn cancel(&mut self, handle: (u32, u32)) -> bool {
        self.generations.end(handle)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.now = now;
        for (level, number) in entered(now) {
            if self.occupied[level] & (1 << (number % 64)) == 0 {
                continue;
            }
            self.occupied[level] &= !(1 << (number % 64));
            let mut items = std::mem::take(&mut self.slots[number]);
            for &(deadline, id, generation) in &items {
                if level > 0 {
                    self.push((deadline, id, generation));
                } else if self.generations.end((id, generation)) {
                    fired.push((id, now));
                }
            }
            items.clear();
            self.slots[number] = items;
        }
    }
}

/// A timer's slab entry in the keyed floors.
struct Entry {
    deadline: u64,
    slot: u32,
    pos: u32,
    generation: u32,
    value: Option<u32>,
}

/// `keyed wheel` (`LAZY = false`) and `find+free` (`LAZY = true`, whose cancels leave stale
/// items that moves and expiry must then recognise).
struct KeyedWheel<const LAZY: bool> {
    slots: Vec<Vec<u32>>,
    occupied: [u64; LEVELS],
    entries: Vec<Entry>,
    free: Vec<u32>,
    now: u64,
}

impl<const LAZY: bool> Default for KeyedWheel<LAZY> {
    fn default() -> KeyedWheel<LAZY> {
        KeyedWheel {
            slots: (0..LEVELS * 64).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
            entries: Vec::new(),
            free: Vec::new(),
            now: 0,
        }
    }
}

impl<const LAZY: bool> KeyedWheel<LAZY> {
    fn link(&mut self, index: u32, deadline: u64) {
        let (level, number) = place(self.now, deadline);
        let items = &mut self.slots[number];
        let entry = &mut self.entries[index as usize];
        entry.slot = number as u32;
        entry.pos = items.len() as u32;
        items.push(index);
        self.occupied[level] |= 1 << (number % 64);
    }

    /// Swap-removes the item of the timer at `index` from its slot.
    fn unlink(&mut self, index: u32) {
        let entry = &self.entries[index as usize];
        let (number, pos) = (entry.slot as usize, entry.pos as usize);
        let items = &mut self.slots[number];
        items.swap_remove(pos);
        if let Some(&moved) = items.get(pos) {
            self.entries[moved as usize].pos = pos as u32;
        } else if items.is_empty() {
            self.occupied[number / 64] &= !(1 << (number % 64));
        }
    }

    /// Whether the item at `pos` of slot `number` is the current item of a live timer.
    fn current(&self, index: u32, number: usize, pos: usize) -> bool {
        let entry = &self.entries[index as usize];
        !LAZY
            || (entry.value.is_some() && entry.slot as usize == number && entry.pos as usize == pos)
    }
}

impl<const LAZY: bool> Queue for KeyedWheel<LAZY> {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let index = match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                entry.generation += 1;
                entry.deadline = deadline;
                entry.value = Some(id);
                index
            }
            None => {
                self.entries.push(Entry {
                    deadline,
                    slot: 0,
                    pos: 0,
                    generation: 0,
                    value: Some(id),
                });
                self.entries.len() as u32 - 1
            }
        };
        self.link(index, deadline);
        (index, self.entries[index as usize].generation)
    }
    fn cancel(&mut self, (index, generation): (u32, u32)) -> bool {
        let entry = &mut self.entries[index as usize];
        if entry.generation != generation || entry.value.take().is_none() {
            return false;
        }
        if !LAZY {
            self.unlink(index);
        }
        self.free.push(index);
        true
    }
    fn reset(&mut self, handle: (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        if LAZY {
            self.cancel(handle);
            return self.insert(id, deadline);
        }
        let (index, _) = handle;
        self.unlink(index);
        self.entries[index as usize].deadline = deadline;
        self.link(index, deadline);
        handle
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.now = now;
        for (level, number) in entered(now) {
            if self.occupied[level] & (1 << (number % 64)) == 0 {
                continue;
            }
            self.occupied[level] &= !(1 << (number % 64));
            let mut items = std::mem::take(&mut self.slots[number]);
            for (pos, &index) in items.iter().enumerate() {
                if !self.current(index, number, pos) {
                    continue;
                }
                if level > 0 {
                    let deadline = self.entries[index as usize].deadline;
                    self.link(index, deadline);
                } else if let Some(id) = self.entries[index as usize].value.take() {
                    self.free.push(index);
                    fired.push((id, now));
                }
            }
            items.clear();
            self.slots[number] = items;
        }
    }
}

/// Keeps the items `valid` accepts, in order. Branch-free, unlike `Vec::retain`: the
/// validity look-ups miss the cache at random, half of them fail at random, and a branch on
/// each would flush the look-ups in flight behind it at every misprediction.
fn compact<I: Copy>(items: &mut Vec<I>, valid: impl Fn(&I) -> bool) {
    let mut kept = 0;
    for read in 0..items.len() {
        let item = items[read];
        items[kept] = item;
        kept += usize::from(valid(&item));
    }
    items.truncate(kept);
}

/// A timer's hot record in `split wheel`: all a cancel touches.
#[derive(Clone, Copy)]
struct Hot {
    /// Odd while the timer is pending; bumped at every insert, reset, cancel and firing.
    generation: u32,
    /// The slot number of the timer's current item.
    slot: u32,
}

/// `split wheel` (`BY_ID` false) and `split/by id` (true: a timer's record is at its id's index,
/// see the module docs): the layout a one-touch cancel needs, on the floor wheels' cascade. A dense
/// hot array (8 bytes a timer: generation, slot), the deadline and the value in separate
/// cold arrays, items `(index, generation)` in slot vectors. A cancel writes the hot record
/// (generation bump), pushes the index on the free stack and logs the slot it left; it
/// touches no item. A reset bumps the generation too, so it hands out a new key: less than
/// the contract, where a reset keeps its key. With `COUNT` the logged departures are applied
/// to the slots' live counts (in the slot table, cache-resident) 64 at a time: a slot whose
/// count reaches 0 is cleared, and one holding more than 3 items a live one (plus 32) is
/// compacted in place, as bounded memory needs. Without `COUNT` slots are only emptied when
/// the clock walks them: unbounded memory under cancels, a floor below any real queue.
struct SplitWheel<const COUNT: bool, const BY_ID: bool = false> {
    slots: Vec<Vec<(u32, u32)>>,
    live: Vec<u32>,
    occupied: [u64; LEVELS],
    hot: Vec<Hot>,
    deadlines: Vec<u64>,
    values: Vec<u32>,
    free: Vec<u32>,
    /// Slots that timers left since the last [`Self::settle`].
    departed: Vec<u32>,
    now: u64,
}

impl<const COUNT: bool, const BY_ID: bool> Default for SplitWheel<COUNT, BY_ID> {
    fn default() -> SplitWheel<COUNT, BY_ID> {
        SplitWheel {
            slots: (0..LEVELS * 64).map(|_| Vec::new()).collect(),
            live: vec![0; LEVELS * 64],
            occupied: [0; LEVELS],
            hot: Vec::new(),
            deadlines: Vec::new(),
            values: Vec::new(),
            free: Vec::new(),
            departed: Vec::with_capacity(64),
            now: 0,
        }
    }
}

impl<const COUNT: bool, const BY_ID: bool> SplitWheel<COUNT, BY_ID> {
    /// Appends the item of the pending timer at `index` to the slot of `deadline`.
    fn link(&mut self, index: u32, generation: u32, deadline: u64) {
        let (level, number) = place(self.now, deadline);
        self.slots[number].push((index, generation));
        self.live[number] += 1;
        self.occupied[level] |= 1 << (number % 64);
        self.hot[index as usize].slot = number as u32;
    }

    /// A timer left slot `number`: with `COUNT`, account for it in a batch of 64 (accounting
    /// at once makes every cancel wait on its hot record's miss to decrement a counter that
    /// the cancels before it also decrement); without, never (a floor that lets slots grow).
    fn departs(&mut self, number: usize) {
        if COUNT {
            self.departed.push(number as u32);
            if self.departed.len() == 64 {
                self.settle();
            }
        }
    }

    /// Applies the batched departures to the slots' live counts.
    fn settle(&mut self) {
        let mut departed = std::mem::take(&mut self.departed);
        for &number in &departed {
            self.unlinked(number as usize);
        }
        departed.clear();
        self.departed = departed;
    }

    /// The timer left slot `number`: clear it if it is empty, compact it if it is mostly stale.
    fn unlinked(&mut self, number: usize) {
        self.live[number] -= 1;
        let live = self.live[number] as usize;
        if live == 0 {
            self.slots[number].clear();
            self.occupied[number / 64] &= !(1 << (number % 64));
        } else if self.slots[number].len() > 3 * live + 32 {
            let hot = &self.hot;
            compact(&mut self.slots[number], |&(index, generation)| {
                hot[index as usize].generation == generation
            });
        }
    }
}

impl<const COUNT: bool, const BY_ID: bool> Queue for SplitWheel<COUNT, BY_ID> {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let index = match if BY_ID { Some(id) } else { self.free.pop() } {
            Some(index) if (index as usize) < self.hot.len() => {
                self.deadlines[index as usize] = deadline;
                self.values[index as usize] = id;
                index
            }
            _ => {
                let index = if BY_ID { id } else { self.hot.len() as u32 };
                let len = index as usize + 1;
                let vacant = Hot {
                    generation: 0,
                    slot: 0,
                };
                self.hot.resize(len, vacant);
                self.deadlines.resize(len, 0);
                self.values.resize(len, 0);
                self.deadlines[index as usize] = deadline;
                self.values[index as usize] = id;
                index
            }
        };
        let hot = &mut self.hot[index as usize];
        hot.generation = hot.generation.wrapping_add(1);
        let generation = hot.generation;
        self.link(index, generation, deadline);
        (index, generation)
    }
    fn cancel(&mut self, (index, generation): (u32, u32)) -> bool {
        let hot = &mut self.hot[index as usize];
        if hot.generation != generation {
            return false;
        }
        hot.generation = generation.wrapping_add(1);
        let number = hot.slot as usize;
        if !BY_ID {
            self.free.push(index);
        }
        self.departs(number);
        true
    }
    fn reset(&mut self, (index, generation): (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        // By id, the record is the caller's id's, whose address is known before the handle.
        let index = if BY_ID { id } else { index };
        let hot = &mut self.hot[index as usize];
        if hot.generation != generation {
            return self.insert(id, deadline);
        }
        hot.generation = generation.wrapping_add(2);
        let (old, generation) = (hot.slot as usize, hot.generation);
        self.deadlines[index as usize] = deadline;
        self.link(index, generation, deadline);
        self.departs(old);
        (index, generation)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.settle();
        self.now = now;
        for (level, number) in entered(now) {
            if self.occupied[level] & (1 << (number % 64)) == 0 {
                continue;
            }
            self.occupied[level] &= !(1 << (number % 64));
            self.live[number] = 0;
            let mut items = std::mem::take(&mut self.slots[number]);
            for &(index, generation) in &items {
                let hot = &mut self.hot[index as usize];
                if hot.generation != generation {
                    continue;
                }
                if level > 0 {
                    let deadline = self.deadlines[index as usize];
                    self.link(index, generation, deadline);
                } else {
                    hot.generation = generation.wrapping_add(1);
                    if !BY_ID {
                        self.free.push(index);
                    }
                    fired.push((self.values[index as usize], now));
                }
            }
            items.clear();
            self.slots[number] = items;
        }
    }
}

/// `lean wheel`: `split wheel` with the deadline in the item, as `bare wheel` keeps it:
/// items `(deadline, index, generation)` of 16 bytes, hot records `(generation, slot)` of 8,
/// values cold. A reset then writes the hot record and appends an item, and touches no cold
/// line. Departures are accounted in batches of 64 (`COUNT`) or never (a floor that lets
/// slots grow without bound); with `COUNT`, mostly-stale slots are compacted as in `split
/// wheel`.
struct LeanWheel<const COUNT: bool> {
    slots: Vec<Vec<(u64, u32, u32)>>,
    live: Vec<u32>,
    occupied: [u64; LEVELS],
    hot: Vec<Hot>,
    values: Vec<u32>,
    free: Vec<u32>,
    departed: Vec<u32>,
    now: u64,
}

impl<const COUNT: bool> Default for LeanWheel<COUNT> {
    fn default() -> LeanWheel<COUNT> {
        LeanWheel {
            slots: (0..LEVELS * 64).map(|_| Vec::new()).collect(),
            live: vec![0; LEVELS * 64],
            occupied: [0; LEVELS],
            hot: Vec::new(),
            values: Vec::new(),
            free: Vec::new(),
            departed: Vec::with_capacity(64),
            now: 0,
        }
    }
}

impl<const COUNT: bool> LeanWheel<COUNT> {
    fn link(&mut self, index: u32, generation: u32, deadline: u64) {
        let (level, number) = place(self.now, deadline);
        self.slots[number].push((deadline, index, generation));
        self.live[number] += 1;
        self.occupied[level] |= 1 << (number % 64);
        self.hot[index as usize].slot = number as u32;
    }

    fn departs(&mut self, number: usize) {
        if COUNT {
            self.departed.push(number as u32);
            if self.departed.len() == 64 {
                self.settle();
            }
        }
    }

    fn settle(&mut self) {
        for i in 0..self.departed.len() {
            let number = self.departed[i] as usize;
            self.live[number] -= 1;
            let live = self.live[number] as usize;
            if live == 0 {
                self.slots[number].clear();
                self.occupied[number / 64] &= !(1 << (number % 64));
            } else if self.slots[number].len() > 3 * live + 32 {
                let hot = &self.hot;
                compact(&mut self.slots[number], |&(_, index, generation)| {
                    hot[index as usize].generation == generation
                });
            }
        }
        self.departed.clear();
    }
}

impl<const COUNT: bool> Queue for LeanWheel<COUNT> {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let index = match self.free.pop() {
            Some(index) => {
                self.values[index as usize] = id;
                index
            }
            None => {
                self.hot.push(Hot {
                    generation: 0,
                    slot: 0,
                });
                self.values.push(id);
                self.hot.len() as u32 - 1
            }
        };
        let hot = &mut self.hot[index as usize];
        hot.generation = hot.generation.wrapping_add(1);
        let generation = hot.generation;
        self.link(index, generation, deadline);
        (index, generation)
    }
    fn cancel(&mut self, (index, generation): (u32, u32)) -> bool {
        let hot = &mut self.hot[index as usize];
        if hot.generation != generation {
            return false;
        }
        hot.generation = generation.wrapping_add(1);
        let number = hot.slot as usize;
        self.free.push(index);
        self.departs(number);
        true
    }
    fn reset(&mut self, (index, generation): (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        let hot = &mut self.hot[index as usize];
        if hot.generation != generation {
            return self.insert(id, deadline);
        }
        hot.generation = generation.wrapping_add(2);
        let (old, generation) = (hot.slot as usize, hot.generation);
        self.link(index, generation, deadline);
        self.departs(old);
        (index, generation)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.settle();
        self.now = now;
        for (level, number) in entered(now) {
            if self.occupied[level] & (1 << (number % 64)) == 0 {
                continue;
            }
            self.occupied[level] &= !(1 << (number % 64));
            self.live[number] = 0;
            let mut items = std::mem::take(&mut self.slots[number]);
            for &(deadline, index, generation) in &items {
                let hot = &mut self.hot[index as usize];
                if hot.generation != generation {
                    continue;
                }
                if level > 0 {
                    self.link(index, generation, deadline);
                } else {
                    hot.generation = generation.wrapping_add(1);
                    self.free.push(index);
                    fired.push((self.values[index as usize], now));
                }
            }
            items.clear();
            self.slots[number] = items;
        }
    }
}

/// `packed wheel`: `lean wheel` with a 4-byte hot record, the generation in the high 21
/// bits and the slot number in the low 11 (as many as the real wheel's 1408 slots need), like
/// the lazy heap's 4-byte generation. Less than the contract: generations wrap after 2^21
/// reuses of an entry, so a key that old could name a later timer.
const SLOT_BITS: u32 = 11;
/// The slot number's bits of a packed hot record.
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

struct PackedWheel<const COUNT: bool> {
    slots: Vec<Vec<(u64, u32, u32)>>,
    live: Vec<u32>,
    occupied: [u64; LEVELS],
    hot: Vec<u32>,
    values: Vec<u32>,
    free: Vec<u32>,
    departed: Vec<u32>,
    now: u64,
}

impl<const COUNT: bool> Default for PackedWheel<COUNT> {
    fn default() -> PackedWheel<COUNT> {
        PackedWheel {
            slots: (0..LEVELS * 64).map(|_| Vec::new()).collect(),
            live: vec![0; LEVELS * 64],
            occupied: [0; LEVELS],
            hot: Vec::new(),
            values: Vec::new(),
            free: Vec::new(),
            departed: Vec::with_capacity(64),
            now: 0,
        }
    }
}

impl<const COUNT: bool> PackedWheel<COUNT> {
    fn link(&mut self, index: u32, generation: u32, deadline: u64) {
        let (level, number) = place(self.now, deadline);
        self.slots[number].push((deadline, index, generation));
        self.live[number] += 1;
        self.occupied[level] |= 1 << (number % 64);
        let hot = &mut self.hot[index as usize];
        *hot = (*hot & !SLOT_MASK) | number as u32;
    }

    fn departs(&mut self, number: usize) {
        if COUNT {
            self.departed.push(number as u32);
            if self.departed.len() == 64 {
                self.settle();
            }
        }
    }

    fn settle(&mut self) {
        for i in 0..self.departed.len() {
            let number = self.departed[i] as usize;
            self.live[number] -= 1;
            let live = self.live[number] as usize;
            if live == 0 {
                self.slots[number].clear();
                self.occupied[number / 64] &= !(1 << (number % 64));
            } else if self.slots[number].len() > 3 * live + 32 {
                let hot = &self.hot;
                compact(&mut self.slots[number], |&(_, index, generation)| {
                    hot[index as usize] >> SLOT_BITS == generation
                });
            }
        }
        self.departed.clear();
    }
}

impl<const COUNT: bool> Queue for PackedWheel<COUNT> {
    type Handle = (u32, u32);
    fn insert(&mut self, id: u32, deadline: u64) -> (u32, u32) {
        let index = match self.free.pop() {
            Some(index) => {
                self.values[index as usize] = id;
                index
            }
            None => {
                self.hot.push(0);
                self.values.push(id);
                self.hot.len() as u32 - 1
            }
        };
        let hot = &mut self.hot[index as usize];
        *hot = hot.wrapping_add(1 << SLOT_BITS);
        let generation = *hot >> SLOT_BITS;
        self.link(index, generation, deadline);
        (index, generation)
    }
    fn cancel(&mut self, (index, generation): (u32, u32)) -> bool {
        let hot = &mut self.hot[index as usize];
        if *hot >> SLOT_BITS != generation {
            return false;
        }
        *hot = hot.wrapping_add(1 << SLOT_BITS);
        let number = (*hot & SLOT_MASK) as usize;
        self.free.push(index);
        self.departs(number);
        true
    }
    fn reset(&mut self, (index, generation): (u32, u32), id: u32, deadline: u64) -> (u32, u32) {
        let hot = &mut self.hot[index as usize];
        if *hot >> SLOT_BITS != generation {
            return self.insert(id, deadline);
        }
        *hot = hot.wrapping_add(2 << SLOT_BITS);
        let (old, generation) = ((*hot & SLOT_MASK) as usize, *hot >> SLOT_BITS);
        self.link(index, generation, deadline);
        self.departs(old);
        (index, generation)
    }
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        self.settle();
        self.now = now;
        for (level, number) in entered(now) {
            if self.occupied[level] & (1 << (number % 64)) == 0 {
                continue;
            }
            self.occupied[level] &= !(1 << (number % 64));
            self.live[number] = 0;
            let mut items = std::mem::take(&mut self.slots[number]);
            for &(deadline, index, generation) in &items {
                let hot = &mut self.hot[index as usize];
                if *hot >> SLOT_BITS != generation {
                    continue;
                }
                if level > 0 {
                    self.link(index, generation, deadline);
                } else {
                    *hot = hot.wrapping_add(1 << SLOT_BITS);
                    self.free.push(index);
                    fired.push((self.values[index as usize], now));
                }
            }
            items.clear();
            self.slots[number] = items;
        }
    }
}

/// Times a run: by the wall clock, or with `FLOORS_CPU=1` (Linux) by the thread's CPU time,
/// which leaves out the time other processes held the core (the figures stay comparable
/// between binaries on a loaded machine; cache contention still shows).
struct Stopwatch(Duration);

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch(Self::read())
    }

    fn elapsed(&self) -> Duration {
        Self::read().saturating_sub(self.0)
    }

    fn read() -> Duration {
        static CPU: OnceLock<bool> = OnceLock::new();
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        if *CPU.get_or_init(|| std::env::var_os("FLOORS_CPU").is_some()) {
            #[cfg(target_os = "linux")]
            {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
            }
        }
        EPOCH.get_or_init(Instant::now).elapsed()
    }
}

fn insert_all<Q: Queue>(queue: &mut Q, deadlines: &[u64]) -> Vec<Q::Handle> {
    let ids = 0u32..;
    ids.zip(deadlines)
        .map(|(id, &deadline)| queue.insert(id, deadline))
        .collect()
}

/// Advances tick by tick until `n` timers have fired or `last` has passed.
fn fire_all<Q: Queue>(queue: &mut Q, n: usize, last: u64, fired: &mut Vec<(u32, u64)>) {
    let mut tick = 0;
    while fired.len() < n && tick <= last {
        tick += 1;
        queue.advance(tick, fired);
    }
}

/// Checks that each timer fired once, at `deadlines[id]`.
fn check(fired: &[(u32, u64)], deadlines: &[u64]) {
    let mut seen = vec![false; deadlines.len()];
    for &(id, tick) in fired {
        assert_eq!(
            tick, deadlines[id as usize],
            "timer {id} fires at its deadline"
        );
        assert!(
            !std::mem::replace(&mut seen[id as usize], true),
            "timer {id} fires once"
        );
    }
    assert_eq!(fired.len(), deadlines.len(), "every timer fires");
}

/// W1: insert all, cancel all in `order`; ns a timer.
fn w1<Q: Queue>(input: &QueueInput) -> f64 {
    let mut queue = Q::default();
    let start = Stopwatch::start();
    let handles = insert_all(&mut queue, &input.deadlines);
    let inserted = start.elapsed();
    let cancelled = input
        .cancel_order
        .iter()
        .filter(|&&id| queue.cancel(handles[id as usize]))
        .count();
    let ns = start.elapsed().as_nanos() as f64 / input.deadlines.len() as f64;
    if std::env::var_os("FLOORS_PHASES").is_some() {
        let insert = inserted.as_nanos() as f64 / input.deadlines.len() as f64;
        eprintln!(
            "  {}: insert {insert:.1} + cancel {:.1}",
            std::any::type_name::<Q>(),
            ns - insert
        );
    }
    assert_eq!(
        cancelled,
        input.deadlines.len(),
        "every cancel finds its timer"
    );
    ns
}

/// W2: insert all, advance tick by tick until all fired; ns a timer.
fn w2<Q: Queue>(input: &QueueInput) -> f64 {
    let deadlines = &input.deadlines;
    let last = deadlines.iter().copied().max().unwrap_or(0);
    let mut fired = Vec::with_capacity(deadlines.len());
    let mut queue = Q::default();
    let start = Stopwatch::start();
    insert_all(&mut queue, deadlines);
    fire_all(&mut queue, deadlines.len(), last, &mut fired);
    let ns = start.elapsed().as_nanos() as f64 / deadlines.len() as f64;
    check(&fired, deadlines);
    ns
}

/// W3: insert all (untimed), then the resets; ns a reset. Then everything fires (untimed) and
/// is checked against the last deadline each timer was given.
fn w3<Q: Queue>(input: &QueueInput) -> f64 {
    let mut queue = Q::default();
    let mut handles = insert_all(&mut queue, &input.deadlines);
    let start = Stopwatch::start();
    for &(id, deadline) in &input.resets {
        let handle = &mut handles[id as usize];
        *handle = queue.reset(*handle, id, deadline);
    }
    let ns = start.elapsed().as_nanos() as f64 / input.resets.len() as f64;
    let mut last = input.deadlines.clone();
    for &(id, deadline) in &input.resets {
        last[id as usize] = deadline;
    }
    let mut fired = Vec::with_capacity(last.len());
    let end = last.iter().copied().max().unwrap_or(0);
    fire_all(&mut queue, last.len(), end, &mut fired);
    check(&fired, &last);
    ns
}

/// W5: `n` live timers, then each tick: advance one tick, replace every timer that fired, and
/// apply the tick's operations (generated untimed); ns an operation, firings included (as
/// `tickwheel bench` counts). Every firing is checked against the slot's last deadline, and
/// every slot must still be pending when an operation touches it.
fn w5<Q: Queue>(input: &ChurnInput) -> f64 {
    let mut queue = Q::default();
    let mut expected = input.deadlines.clone();
    let mut handles = insert_all(&mut queue, &input.deadlines);
    let mut ops = Vec::with_capacity(input.ops_per_tick());
    let mut fired = Vec::new();
    let mut elapsed = Duration::ZERO;
    let mut counted = 0;
    for now in 1..=input.ticks {
        input.ops_at(now, &mut ops);
        fired.clear();
        let start = Stopwatch::start();
        queue.advance(now, &mut fired);
        for &(slot, _) in &fired {
            let s = slot as usize;
            assert_eq!(expected[s], now, "slot {slot} fires at its deadline");
            expected[s] = now + input.refill_timeout(slot, now);
            handles[s] = queue.insert(slot, expected[s]);
        }
        for &op in &ops {
            let (ChurnOp::Reset { slot, timeout } | ChurnOp::Replace { slot, timeout }) = op;
            let s = slot as usize;
            assert!(expected[s] > now, "slot {slot} is pending");
            expected[s] = now + timeout;
            handles[s] = match op {
                ChurnOp::Reset { .. } => queue.reset(handles[s], slot, expected[s]),
                ChurnOp::Replace { .. } => {
                    assert!(queue.cancel(handles[s]), "slot {slot}'s cancel finds it");
                    queue.insert(slot, expected[s])
                }
            };
        }
        elapsed += start.elapsed();
        counted += fired.len() + ops.len();
    }
    elapsed.as_nanos() as f64 / counted as f64
}

/// A named entrant: runs its workload once at N timers and returns ns a timer.
type Entrant = (&'static str, Box<dyn Fn(usize) -> f64>);

/// Runs `repeats` of entrant `name` on `workload` at `n` timers in a fresh process (this
/// program again, with `FLOORS_CHILD` set), after one untimed run, and returns its median:
/// in one process, an entrant run after another gets the memory the other freed, already
/// faulted in or not, so at N = 10^6 its figure depends on which entrant ran before it.
fn in_child(workload: &str, name: &str, n: usize, repeats: usize) -> f64 {
    let exe = std::env::current_exe().expect("own executable");
    let out = std::process::Command::new(exe)
        .env("FLOORS_CHILD", format!("{workload}|{name}|{n}|{repeats}"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the child runs");
    assert!(out.status.success(), "{name} failed on {workload} at N={n}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().expect("the child prints its median")
}

/// The child's part: `spec` is `WORKLOAD|NAME|N|REPEATS`; one untimed run (the warm-up, also
/// checked), then the repeats, and their median on stdout.
fn child(spec: &str, runs: &[(&str, &str, Vec<Entrant>)]) {
    let parts: Vec<&str> = spec.split('|').collect();
    let [workload, name, n, repeats] = parts[..] else {
        panic!("FLOORS_CHILD is WORKLOAD|NAME|N|REPEATS, not {spec}");
    };
    let n: usize = n.parse().expect("N is a count");
    let repeats: usize = repeats.parse().expect("REPEATS is a count");
    let (_, run) = runs
        .iter()
        .filter(|(w, _, _)| *w == workload)
        .flat_map(|(_, _, entrants)| entrants)
        .find(|(entrant, _)| *entrant == name)
        .unwrap_or_else(|| panic!("no entrant {name} on {workload}"));
    run(n);
    let samples = (0..repeats).map(|_| run(n)).collect();
    println!("{}", median(samples));
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ns: Vec<usize> = args
        .next()
        .map(|list| {
            list.split(',')
                .map(|n| n.parse().expect("N is a count of timers"))
                .collect()
        })
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let repeats: usize = args
        .next()
        .map(|r| r.parse().expect("REPEATS is a count"))
        .unwrap_or(5);

    let only: Option<String> = args.next();
    let wanted = |label: &str| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|w| w == label))
    };

    /// An entrant whose input is generated once a size, before any timing.
    fn entrant<I: 'static>(
        name: &'static str,
        generate: fn(u64, usize) -> I,
        run: fn(&I) -> f64,
    ) -> Entrant {
        let cache = std::cell::RefCell::new(None::<(usize, I)>);
        (
            name,
            Box::new(move |n| {
                let mut cache = cache.borrow_mut();
                if cache.as_ref().is_none_or(|(m, _)| *m != n) {
                    *cache = Some((n, generate(42, n)));
                }
                run(&cache.as_ref().expect("generated").1)
            }),
        )
    }
    let runs: Vec<(&str, &str, Vec<Entrant>)> = vec![
        (
            "W1",
            "schedule+cancel",
            vec![
                entrant("lazy heap", workloads::w1, w1::<LazyHeap>),
                entrant("Wheel", workloads::w1, w1::<TheWheel>),
                entrant("SlimWheel", workloads::w1, w1::<TheSlim>),
                entrant("IdWheel", workloads::w1, w1::<TheId>),
                entrant("keyed wheel", workloads::w1, w1::<KeyedWheel<false>>),
                entrant("find+free", workloads::w1, w1::<KeyedWheel<true>>),
                entrant("split wheel", workloads::w1, w1::<SplitWheel<true>>),
                entrant("lean wheel", workloads::w1, w1::<LeanWheel<true>>),
                entrant("packed wheel", workloads::w1, w1::<PackedWheel<true>>),
                entrant("split/nocount", workloads::w1, w1::<SplitWheel<false>>),
                entrant("packed/nocount", workloads::w1, w1::<PackedWheel<false>>),
            ],
        ),
        (
            "W2",
            "schedule+fire",
            vec![
                entrant("lazy heap", workloads::w2, w2::<LazyHeap>),
                entrant("Wheel", workloads::w2, w2::<TheWheel>),
                entrant("SlimWheel", workloads::w2, w2::<TheSlim>),
                entrant("bare wheel", workloads::w2, w2::<BareWheel>),
                entrant("keyed wheel", workloads::w2, w2::<KeyedWheel<false>>),
                entrant("split wheel", workloads::w2, w2::<SplitWheel<true>>),
                entrant("packed wheel", workloads::w2, w2::<PackedWheel<true>>),
            ],
        ),
        (
            "W3",
            "reset",
            vec![
                entrant("lazy heap", workloads::w3, w3::<LazyHeap>),
                entrant("Wheel", workloads::w3, w3::<TheWheel>),
                entrant("SlimWheel", workloads::w3, w3::<TheSlim>),
                entrant("IdWheel", workloads::w3, w3::<TheId>),
                entrant("bare wheel", workloads::w3, w3::<BareWheel>),
                entrant("heap/by handle", workloads::w3, w3::<ByHandle<LazyHeap>>),
                entrant("bare/by handle", workloads::w3, w3::<ByHandle<BareWheel>>),
                entrant("keyed wheel", workloads::w3, w3::<KeyedWheel<false>>),
                entrant("split wheel", workloads::w3, w3::<SplitWheel<true>>),
                entrant("split/by id", workloads::w3, w3::<SplitWheel<true, true>>),
                entrant("lean wheel", workloads::w3, w3::<LeanWheel<true>>),
                entrant("packed wheel", workloads::w3, w3::<PackedWheel<true>>),
                entrant("packed/nocount", workloads::w3, w3::<PackedWheel<false>>),
            ],
        ),
        (
            "W5",
            "churn, ns an operation",
            vec![
                entrant("lazy heap", workloads::w5, w5::<LazyHeap>),
                entrant("Wheel", workloads::w5, w5::<TheWheel>),
                entrant("SlimWheel", workloads::w5, w5::<TheSlim>),
                entrant("IdWheel", workloads::w5, w5::<TheId>),
                entrant("bare wheel", workloads::w5, w5::<BareWheel>),
                entrant("heap/by handle", workloads::w5, w5::<ByHandle<LazyHeap>>),
                entrant("bare/by handle", workloads::w5, w5::<ByHandle<BareWheel>>),
                entrant("split wheel", workloads::w5, w5::<SplitWheel<true>>),
                entrant("split/by id", workloads::w5, w5::<SplitWheel<true, true>>),
                entrant("lean wheel", workloads::w5, w5::<LeanWheel<true>>),
                entrant("packed wheel", workloads::w5, w5::<PackedWheel<true>>),
                entrant("packed/nocount", workloads::w5, w5::<PackedWheel<false>>),
            ],
        ),
    ];
    // In a child: run the one entrant FLOORS_CHILD names and print its median.
    if let Ok(spec) = std::env::var("FLOORS_CHILD") {
        child(&spec, &runs);
        return;
    }
    // FLOORS_ONLY=name,name… keeps those entrants (the lazy heap, the baseline, always runs).
    let only_entrants = std::env::var("FLOORS_ONLY").ok();
    for (workload, what, mut entrants) in runs {
        if !wanted(workload) {
            continue;
        }
        if let Some(list) = &only_entrants {
            let mut first = true;
            entrants.retain(|(name, _)| {
                std::mem::take(&mut first) || list.split(',').any(|wanted| wanted == *name)
            });
        }
        println!(
            "\n{workload} {what}: ns a timer, median of {repeats}; (×) = times faster than the lazy heap"
        );
        print!("{:<13}", "");
        for n in &ns {
            print!("{:>18}", format!("N={n}"));
        }
        println!();
        let mut table = vec![Vec::new(); entrants.len()];
        for &n in &ns {
            for (row, (name, _)) in table.iter_mut().zip(&entrants) {
                row.push(in_child(workload, name, n, repeats));
            }
        }
        for (row, (name, _)) in table.iter().zip(&entrants) {
            print!("{name:<13}");
            for (ns, heap) in row.iter().zip(&table[0]) {
                print!("{:>18}", format!("{ns:.1} ({:.2}×)", heap / ns));
            }
            println!();
        }
    }
}
