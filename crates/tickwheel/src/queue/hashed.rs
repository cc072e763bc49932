//! [`HashedWheel`]: one level of slots with implicit round counts (Varghese & Lauck scheme 6;
//! Netty's `HashedWheelTimer`; libco's wheel, without its clamping).
//!
//! # Implementation
//!
//! A timer with effective deadline `d` lives in slot `d mod slots`, in a doubly linked list
//! threaded through the slab links by `u32` index (next, prev, and the deadline itself). Lists
//! are appended at the tail, so timers with equal deadlines keep insertion order (a reset is a
//! new insertion: unlinked and appended again). An occupancy bitmap over the slots lets the
//! cursor jump straight to the next non-empty slot with `trailing_zeros`.
//!
//! The wheel's clock advances by visiting ticks. At tick `t` the slot `t mod slots` is walked;
//! timers whose deadline is `t` move, in list order, to the *ready* list, which
//! [`poll_expired`](TimerQueue::poll_expired) drains first. The others stay: they are whole
//! revolutions away (Netty stores `remainingRounds`; here it is derived from the deadline, so
//! nothing is decremented). Timers inserted with an effective deadline equal to `now()` go to
//! the ready list directly.
//!
//! A big time jump would visit `jump / slots` revolutions of slots; instead, when the cursor
//! is about to pass a whole revolution without a timer firing, the wheel computes the minimum
//! deadline over all pending timers (O(n)) and jumps there, so `poll_expired(2^60)` returns
//! promptly. The minimum is kept as `floor`, a lower bound on every slotted deadline (inserts
//! lower it), so a later poll or [`next_expiration`](TimerQueue::next_expiration) skips the
//! empty stretch before it too.
//!
//! # Invariants
//!
//! * every timer in a slot has deadline `> now` and `>= floor`, and `deadline mod slots` is
//!   that slot;
//! * every timer in the ready list has deadline `== now`; lists are in insertion order among
//!   timers of equal deadline;
//! * a slot's bit is set in the bitmap exactly when its list is non-empty.
//!
//! # Trade-offs against the hierarchical [`Wheel`](super::Wheel)
//!
//! * **Expiry cost.** Visiting a slot walks all of it, including timers that are rounds away;
//!   with `n` timers spread over a horizon much longer than `slots` ticks, each tick costs about
//!   `n / slots`. The hierarchical wheel touches a timer at most once a level. Size `slots` to
//!   the usual timeout span (Netty's default is 512 slots of 100 ms).
//! * **Far timers.** A revolution without a fire costs an O(n) minimum search before the jump;
//!   the hierarchical wheel finds its next expiry from its bitmaps in O(levels).
//! * **`next_expiration`** is a lower bound: the later of `floor` and the next tick whose slot
//!   is occupied, and that slot may hold only timers rounds away. A driver that sleeps until
//!   then may wake early and find nothing due (it then gets a later answer; within one
//!   revolution of idle wake-ups the minimum search makes the answer exact). The hierarchical
//!   wheel is closer (the start of the slot that holds the earliest timer).
//! * **Simplicity and memory.** One array of list heads and one bitmap, no cascading: insert,
//!   remove and reset are a list append or unlink, and a timer never moves until it fires.

use core::fmt;

use super::slab::{Slab, NIL};
use super::{TimerKey, TimerQueue};
use alloc::vec;
use alloc::vec::Vec;

/// Bits in one bitmap word.
const WORD_BITS: usize = u64::BITS as usize;

/// The slab link: list neighbours and the effective deadline.
#[derive(Clone, Copy)]
struct HashLink {
    next: u32,
    prev: u32,
    deadline: u64,
}

/// Head and tail of one doubly linked list of slab entries.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// Which list a timer is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Ready,
    Slot(usize),
}

/// A hashed timing wheel: one level of `slots` lists, O(1) insert, remove and reset.
///
/// Keeps the [`TimerQueue`] contract exactly (same firing order as [`Wheel`](super::Wheel) and
/// [`Heap`](super::Heap)). A timer with deadline `d` waits in slot `d mod slots`; each tick
/// walks one slot and fires the timers due at it, leaving those that are whole revolutions away
/// (Varghese & Lauck scheme 6, Netty's `HashedWheelTimer`).
///
/// # Trade-offs against [`Wheel`](super::Wheel)
///
/// * Expiry walks a whole slot, timers rounds away included: about `n / slots` entries a tick
///   when timers span more than one revolution. Size `slots` to the usual timeout span; the
///   hierarchical wheel touches a timer at most once a level whatever the span.
/// * A revolution that fires nothing costs an O(n) search for the earliest deadline (so huge
///   time jumps stay prompt); the hierarchical wheel finds it in O(levels).
/// * [`next_expiration`](TimerQueue::next_expiration) is a lower bound that may name a tick at
///   which nothing is due (the next occupied slot); it becomes exact after such a search.
/// * In exchange it is simpler: no cascading, a timer never moves until it fires.
///
/// ```
/// use tickwheel::{HashedWheel, TimerQueue};
///
/// let mut wheel = HashedWheel::with_slots(8);
/// wheel.insert(3, "a");
/// wheel.insert(11, "b"); // same slot as "a", one round later
/// wheel.insert(3, "c");
/// let fired: Vec<_> = wheel.drain_expired(10).map(|(_, v)| v).collect();
/// assert_eq!(fired, ["a", "c"]);
/// assert_eq!(wheel.drain_expired(11).next().map(|(_, v)| v), Some("b"));
/// ```
pub struct HashedWheel<T> {
    slab: Slab<HashLink, T>,
    slots: Vec<List>,
    /// Bit `s` set iff `slots[s]` is non-empty.
    occupied: Vec<u64>,
    /// Timers due at `now`, in firing order.
    ready: List,
    /// `slots.len() - 1`; the slot count is a power of two.
    mask: u64,
    now: u64,
    /// A lower bound on every slotted deadline: lowered by inserts, made exact by a minimum
    /// search. Ticks before it need no visit.
    floor: u64,
    /// The tick since which no timer has fired or minimum was searched (`<= now`); visiting a
    /// tick a revolution past it, other than `floor` itself, triggers a minimum search.
    idle_since: u64,
}

impl<T> HashedWheel<T> {
    /// Slots of [`HashedWheel::new`] (Netty's default `ticksPerWheel`).
    pub const DEFAULT_SLOTS: usize = 512;

    /// The most slots a wheel may have (2^24: 128 MiB of list heads); larger requests are
    /// clamped.
    pub const MAX_SLOTS: usize = 1 << 24;

    /// An empty wheel of [`DEFAULT_SLOTS`](Self::DEFAULT_SLOTS) slots at tick 0.
    pub fn new() -> Self {
        HashedWheel::with_slots_and_start(Self::DEFAULT_SLOTS, 0)
    }

    /// How many timers the slab holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Bytes of memory the wheel holds (its own struct excluded): slab, list heads and
    /// occupancy bitmap. [`shrink_to_fit`](TimerQueue::shrink_to_fit) gives back what pending
    /// timers do not need.
    pub fn allocated_bytes(&self) -> usize {
        self.slab.allocated_bytes()
            + self.slots.capacity() * core::mem::size_of::<List>()
            + self.occupied.capacity() * core::mem::size_of::<u64>()
    }

    /// An empty wheel at tick 0 with `slots` rounded up to a power of two, at least 1 and at
    /// most [`MAX_SLOTS`](Self::MAX_SLOTS).
    ///
    /// ```
    /// use tickwheel::HashedWheel;
    ///
    /// assert_eq!(HashedWheel::<()>::with_slots(100).slots(), 128);
    /// assert_eq!(HashedWheel::<()>::with_slots(0).slots(), 1);
    /// ```
    pub fn with_slots(slots: usize) -> Self {
        HashedWheel::with_slots_and_start(slots, 0)
    }

    /// An empty wheel of [`DEFAULT_SLOTS`](Self::DEFAULT_SLOTS) slots whose clock starts at
    /// tick `start`.
    ///
    /// ```
    /// use tickwheel::{HashedWheel, TimerQueue};
    ///
    /// let wheel = HashedWheel::<()>::with_start(1 << 40);
    /// assert_eq!(wheel.now(), 1 << 40);
    /// ```
    pub fn with_start(start: u64) -> Self {
        HashedWheel::with_slots_and_start(Self::DEFAULT_SLOTS, start)
    }

    /// An empty wheel with `slots` slots (as in [`with_slots`](HashedWheel::with_slots))
    /// whose clock starts at tick `start`.
    pub fn with_slots_and_start(slots: usize, start: u64) -> Self {
        let slots = Self::slot_count(slots);
        HashedWheel {
            slab: Slab::new(),
            slots: vec![List::EMPTY; slots],
            occupied: vec![0; slots.div_ceil(WORD_BITS)],
            ready: List::EMPTY,
            mask: slots as u64 - 1,
            now: start,
            floor: u64::MAX,
            idle_since: start,
        }
    }

    /// `asked` rounded up to a power of two within `1..=MAX_SLOTS`.
    fn slot_count(asked: usize) -> usize {
        asked.clamp(1, Self::MAX_SLOTS).next_power_of_two()
    }

    /// The number of slots (a power of two).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slot of tick `tick`.
    #[inline]
    fn slot_of(&self, tick: u64) -> usize {
        (tick & self.mask) as usize
    }

    /// The list a timer with this effective deadline belongs on.
    #[inline]
    fn place_of(&self, deadline: u64) -> Place {
        if deadline == self.now {
            Place::Ready
        } else {
            Place::Slot(self.slot_of(deadline))
        }
    }

    #[inline]
    fn list_mut(&mut self, place: Place) -> &mut List {
        match place {
            Place::Ready => &mut self.ready,
            Place::Slot(slot) => &mut self.slots[slot],
        }
    }

    /// Appends the (unlinked) entry `index` at the tail of its list.
    fn push_back(&mut self, index: u32, place: Place) {
        let tail = self.list_mut(place).tail;
        {
            let link = self.slab.link_mut(index);
            link.prev = tail;
            link.next = NIL;
        }
        if tail == NIL {
            self.list_mut(place).head = index;
        } else {
            self.slab.link_mut(tail).next = index;
        }
        self.list_mut(place).tail = index;
        if let Place::Slot(slot) = place {
            self.occupied[slot / WORD_BITS] |= 1 << (slot % WORD_BITS);
        }
    }

    /// Takes the entry `index` out of its list.
    fn unlink(&mut self, index: u32, place: Place) {
        let HashLink { next, prev, .. } = *self.slab.link(index);
        if prev == NIL {
            self.list_mut(place).head = next;
        } else {
            self.slab.link_mut(prev).next = next;
        }
        if next == NIL {
            self.list_mut(place).tail = prev;
        } else {
            self.slab.link_mut(next).prev = prev;
        }
        if let Place::Slot(slot) = place {
            if self.slots[slot].head == NIL {
                self.occupied[slot / WORD_BITS] &= !(1 << (slot % WORD_BITS));
            }
        }
    }

    /// The first occupied slot at or after `from`, wrapping around; `None` if all are empty.
    fn next_occupied(&self, from: usize) -> Option<usize> {
        let words = self.occupied.len();
        let first = from / WORD_BITS;
        let masked = self.occupied[first] & (u64::MAX << (from % WORD_BITS));
        if masked != 0 {
            return Some(first * WORD_BITS + masked.trailing_zeros() as usize);
        }
        // The rest of the words, wrapping, then the low bits of the first word again.
        (1..=words).find_map(|step| {
            let word = (first + step) % words;
            let bits = self.occupied[word];
            (bits != 0).then(|| word * WORD_BITS + bits.trailing_zeros() as usize)
        })
    }

    /// The first tick after `now` and not before `floor` whose slot is occupied; `None` if
    /// no slot is.
    ///
    /// Never later than the earliest slotted deadline (which is `> now` and `>= floor`), so
    /// it cannot overflow.
    fn next_occupied_tick(&self) -> Option<u64> {
        let start = self.now.saturating_add(1).max(self.floor);
        let from = self.slot_of(start);
        let slot = self.next_occupied(from)?;
        let distance = (slot as u64).wrapping_sub(from as u64) & self.mask;
        Some(start.saturating_add(distance))
    }

    /// Sets the clock to `tick` and moves the timers of its slot that are due at it to the
    /// ready list, in list order. Requires an empty ready list and `tick > now`.
    fn visit(&mut self, tick: u64) {
        debug_assert!(self.ready.head == NIL && tick > self.now);
        self.now = tick;
        let slot = self.slot_of(tick);
        let mut cursor = self.slots[slot].head;
        while cursor != NIL {
            let HashLink { next, deadline, .. } = *self.slab.link(cursor);
            if deadline == tick {
                self.unlink(cursor, Place::Slot(slot));
                self.push_back(cursor, Place::Ready);
                self.idle_since = tick;
            }
            cursor = next;
        }
    }

    /// The smallest deadline of any pending timer (O(n) over the slab via the slot lists).
    fn min_deadline(&self) -> Option<u64> {
        let mut min = None;
        for list in &self.slots {
            let mut cursor = list.head;
            while cursor != NIL {
                let link = self.slab.link(cursor);
                min = Some(min.map_or(link.deadline, |m: u64| m.min(link.deadline)));
                cursor = link.next;
            }
        }
        min
    }

    /// Advances the clock towards `target` (> now, ready list empty) until some timer is due
    /// or `target` is reached.
    fn advance(&mut self, target: u64) {
        while self.ready.head == NIL {
            let next = match self.next_occupied_tick() {
                Some(tick) if tick <= target => tick,
                _ => break,
            };
            if next != self.floor && next - self.idle_since > self.mask {
                // A whole revolution without a fire: find the earliest deadline and go there,
                // now or (through `floor`) at a later poll, without another search.
                let Some(min) = self.min_deadline() else {
                    break;
                };
                self.floor = min;
                self.idle_since = self.now;
                if min > target {
                    break;
                }
                self.visit(min);
            } else {
                self.visit(next);
            }
        }
        if self.ready.head == NIL {
            self.now = target;
        }
    }

    /// Pops the head of the ready list.
    fn pop_ready(&mut self) -> Option<(TimerKey, T)> {
        let index = self.ready.head;
        if index == NIL {
            return None;
        }
        self.unlink(index, Place::Ready);
        let key = self.slab.key(index);
        self.slab.remove(index).map(|value| (key, value))
    }
}

impl<T> TimerQueue<T> for HashedWheel<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.now);
        let link = HashLink {
            next: NIL,
            prev: NIL,
            deadline,
        };
        let (index, key) = self.slab.insert(link, value);
        self.push_back(index, self.place_of(deadline));
        self.floor = self.floor.min(deadline);
        key
    }

    fn remove(&mut self, key: TimerKey) -> Option<T> {
        let index = self.slab.find(key)?;
        self.unlink(index, self.place_of(self.slab.link(index).deadline));
        self.slab.remove(index)
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(index) = self.slab.find(key) else {
            return false;
        };
        self.unlink(index, self.place_of(self.slab.link(index).deadline));
        let deadline = deadline.max(self.now);
        self.slab.link_mut(index).deadline = deadline;
        self.push_back(index, self.place_of(deadline));
        self.floor = self.floor.min(deadline);
        true
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        let index = self.slab.find(key)?;
        Some(self.slab.link(index).deadline)
    }

    fn clear(&mut self) {
        let mut from = 0;
        while let Some(key) = self.slab.next_live(&mut from) {
            self.remove(key);
        }
    }

    #[inline]
    fn get(&self, key: TimerKey) -> Option<&T> {
        self.slab.get(key)
    }

    #[inline]
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.slab.get_mut(key)
    }

    #[inline]
    fn len(&self) -> usize {
        self.slab.len()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now
    }

    fn next_expiration(&self) -> Option<u64> {
        if self.ready.head != NIL {
            Some(self.now)
        } else {
            self.next_occupied_tick()
        }
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if now < self.now {
            return None;
        }
        if self.ready.head == NIL && now > self.now {
            self.advance(now);
        }
        self.pop_ready()
    }

    fn shrink_to_fit(&mut self) {
        // Live entries keep their indices, so the lists stay intact.
        self.slab.shrink_to_fit();
    }
}

impl<T> Default for HashedWheel<T> {
    fn default() -> Self {
        HashedWheel::new()
    }
}

impl<T> fmt::Debug for HashedWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashedWheel")
            .field("slots", &self.slots.len())
            .field("len", &self.slab.len())
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_counts_round_up_to_powers_of_two() {
        for (asked, got) in [(0, 1), (1, 1), (2, 2), (3, 4), (512, 512), (513, 1024)] {
            assert_eq!(HashedWheel::<()>::with_slots(asked).slots(), got);
        }
        let max = HashedWheel::<()>::MAX_SLOTS;
        assert!(max.is_power_of_two());
        assert_eq!(HashedWheel::<()>::slot_count(max - 1), max);
        assert_eq!(HashedWheel::<()>::slot_count(usize::MAX), max);
    }

    #[test]
    fn next_occupied_wraps_and_finds_every_slot() {
        for slots in [1, 8, 64, 128, 512] {
            for target in 0..slots {
                let mut wheel = HashedWheel::with_slots(slots);
                wheel.insert(slots as u64 * 3 + target as u64, ());
                for from in 0..slots {
                    assert_eq!(wheel.next_occupied(from), Some(target), "{slots} {from}");
                }
            }
            assert_eq!(HashedWheel::<()>::with_slots(slots).next_occupied(0), None);
        }
    }

    #[test]
    fn bitmap_tracks_list_occupancy() {
        let mut wheel = HashedWheel::with_slots(64);
        let a = wheel.insert(5, 'a');
        let b = wheel.insert(69, 'b');
        assert_eq!(wheel.occupied[0], 1 << 5);
        wheel.remove(a);
        assert_eq!(wheel.occupied[0], 1 << 5, "b still holds slot 5");
        wheel.reset(b, 6);
        assert_eq!(wheel.occupied[0], 1 << 6);
        assert_eq!(wheel.poll_expired(6).map(|(_, v)| v), Some('b'));
        assert_eq!(wheel.occupied[0], 0);
    }
}
