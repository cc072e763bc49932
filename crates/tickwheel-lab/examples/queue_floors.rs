//! Floors under the `Wheel` on W1, W2 and W3: how fast a 64-slot wheel that does *less* than
//! the queue contract asks can go, beside `Wheel` and the lazy `BinaryHeap` (the fastest
//! peer in `tickwheel bench`), on the same inputs, in one run.
//!
//! * `lazy heap`: `BinaryHeap<Reverse<(deadline, seq, id, generation)>>`; a cancel bumps the
//!   id's generation and leaves the entry in the heap (the `std-binaryheap` peer).
//! * `bare wheel`: a classic wheel, 64 slots and 4 levels (ticks below 2^24), items
//!   `(deadline, id, generation)` in slot vectors, cascaded when the clock enters a slot. No
//!   keys and no slab: it cancels lazily, as the heap does.
//! * `keyed wheel`: `bare wheel` plus the least that cancelling without keeping memory needs:
//!   a slab entry per timer (generation, deadline, slot, position), updated at every move, and
//!   a cancel that swap-removes the item and frees the entry. Swapping breaks the order within
//!   a slot, which the contract specifies; it is a floor, not a queue.
//! * `find+free` (W1 only): inserts as `keyed wheel` does; a cancel finds the entry and frees
//!   it and does nothing else, leaving the item where it is: one random cache line a cancel,
//!   the least any queue that really removes pays.
//!
//! The workloads are defined in `docs/ARCHITECTURE.md` ("Workloads"); the inputs are
//! `tickwheel bench --seed 42`'s, from [`tickwheel_lab::workloads`]. A reset of the lazy
//! queues is a cancel and an insert. Each queue is built before its clock starts, as in
//! `tickwheel bench`. Every run is checked: every W1 cancel must find its timer; after W2, and after W3's
//! resets (untimed), each timer fires once, at its (last) deadline. Cells: median ns a timer
//! over the repeats, and in brackets how many times faster than the lazy heap.
//!
//! `cargo run --release -p tickwheel-lab --example queue_floors [-- N[,N…] [REPEATS]]`
//! (default `10000,100000,1000000 5`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use tickwheel::{TimerKey, TimerQueue, Wheel};
use tickwheel_lab::workloads::{self, QueueInput};

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
    let start = Instant::now();
    let handles = insert_all(&mut queue, &input.deadlines);
    let cancelled = input
        .cancel_order
        .iter()
        .filter(|&&id| queue.cancel(handles[id as usize]))
        .count();
    let ns = start.elapsed().as_nanos() as f64 / input.deadlines.len() as f64;
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
    let start = Instant::now();
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
    let start = Instant::now();
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

    type Entrants = [(&'static str, fn(&QueueInput) -> f64); 4];
    type Generate = fn(u64, usize) -> QueueInput;
    let runs: [(&str, Generate, Entrants); 3] = [
        (
            "W1 schedule+cancel",
            workloads::w1,
            [
                ("lazy heap", w1::<LazyHeap>),
                ("Wheel", w1::<TheWheel>),
                ("keyed wheel", w1::<KeyedWheel<false>>),
                ("find+free", w1::<KeyedWheel<true>>),
            ],
        ),
        (
            "W2 schedule+fire",
            workloads::w2,
            [
                ("lazy heap", w2::<LazyHeap>),
                ("Wheel", w2::<TheWheel>),
                ("bare wheel", w2::<BareWheel>),
                ("keyed wheel", w2::<KeyedWheel<false>>),
            ],
        ),
        (
            "W3 reset",
            workloads::w3,
            [
                ("lazy heap", w3::<LazyHeap>),
                ("Wheel", w3::<TheWheel>),
                ("bare wheel", w3::<BareWheel>),
                ("keyed wheel", w3::<KeyedWheel<false>>),
            ],
        ),
    ];
    for (workload, generate, entrants) in runs {
        println!(
            "\n{workload}: ns a timer, median of {repeats}; (×) = times faster than the lazy heap"
        );
        print!("{:<12}", "");
        for n in &ns {
            print!("{:>18}", format!("N={n}"));
        }
        println!();
        let mut table = vec![Vec::new(); entrants.len()];
        for &n in &ns {
            let input = generate(42, n);
            // Repeats interleave the entrants, so drift hits them alike.
            let mut samples = vec![Vec::new(); entrants.len()];
            for _ in 0..repeats {
                for (sample, (_, run)) in samples.iter_mut().zip(&entrants) {
                    sample.push(run(&input));
                }
            }
            for (row, sample) in table.iter_mut().zip(samples) {
                row.push(median(sample));
            }
        }
        for (row, (name, _)) in table.iter().zip(&entrants) {
            print!("{name:<12}");
            for (ns, heap) in row.iter().zip(&table[0]) {
                print!("{:>18}", format!("{ns:.1} ({:.2}×)", heap / ns));
            }
            println!();
        }
    }
}
