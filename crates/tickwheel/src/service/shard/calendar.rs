//! [`Calendar`]: a shard's detached timers of the near future, by tick, stored in place.
//!
//! A timer with no handle (`schedule_detached`) is never cancelled, reset or looked up, so it
//! needs none of what the queue keeps per timer for that: a key, a generation, a record
//! that knows where its item is. What it needs is to fire at its tick, in schedule order.
//! When its tick is less than [`TICKS`] ahead of the last tick the shard drained, the shard
//! keeps it here instead: appended to the vector of its tick, callback and all. Filing a
//! timer is one append; firing a tick is reading its vector front to back. The queue would
//! instead write a record somewhere in a large array when the timer arrives, move it down a
//! level or two (reading and writing the record again) and read it once more when it fires,
//! each time at a random place in memory.
//!
//! Order: every timer a shard queues, here or in the queue, takes the shard's next sequence
//! number, and a drain merges the two by (tick, sequence): the firing order is the one the
//! queue alone would give.
//!
//! # In the shard
//!
//! Since nothing can look a detached timer up, queuing one due less than [`TICKS`] ticks
//! after the last drained tick files it in the shard's [`Calendar`] instead of the queue
//! (`ShardState::enqueue`). Every timer queued, in the queue or the calendar, takes the
//! shard's next sequence number ([`Entry::seq`](super::Entry::seq); a reset takes a new one),
//! and a drain (`drain.rs`) merges the two by (tick, sequence number): the firing order is
//! exactly the queue's alone. The queue's next due timer is held (`held`) while calendar
//! timers before it go out; a drain runs until neither has a timer due, so nothing stays held
//! after it.

use std::ptr;

use crate::queue::free::prefetch;
use crate::service::callback::Callback;
use crate::service::shard::Job;

/// How many ticks ahead of the last drained tick the calendar takes timers (a power of two).
pub(crate) const TICKS: usize = 2048;

/// The calendar; see the module docs.
pub(crate) struct Calendar {
    /// One bucket a tick, for ticks `base..base + TICKS`, by `tick % TICKS`; allocated on
    /// first use.
    buckets: Vec<Bucket>,
    /// Bit `i` is set when bucket `i` holds timers.
    occupied: Vec<u64>,
    /// Every tick below `base` has been drained.
    base: u64,
    len: usize,
    /// The earliest tick held, when known: a drain asks once per timer it takes out of the
    /// queue, so the occupancy scan runs only after a tick's vector empties.
    first: Option<u64>,
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar {
            buckets: Vec::new(),
            occupied: vec![0; TICKS / 64],
            base: 0,
            len: 0,
            first: None,
        }
    }
}

impl Calendar {
    /// Timers held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Files `callback` at `tick` with sequence number `seq` (larger than every one filed
    /// before), if `tick` is within the calendar's reach and not `u64::MAX`; otherwise gives
    /// it back.
    /// `drained` is the last tick the shard's drains have passed: with nothing held, the
    /// calendar's reach starts after it. Always inlined (see `ShardState::enqueue`).
    #[inline(always)]
    pub(crate) fn file(
        &mut self,
        tick: u64,
        seq: u64,
        callback: Callback,
        drained: u64,
    ) -> Result<(), Callback> {
        if self.len == 0 {
            self.base = self.base.max(drained.saturating_add(1));
        }
        // `u64::MAX` is "never": the queue keeps those.
        if tick == u64::MAX || tick < self.base || tick - self.base >= TICKS as u64 {
            return Err(callback);
        }
        if self.buckets.is_empty() {
            self.buckets = (0..TICKS).map(|_| Bucket::default()).collect();
        }
        let i = index(tick);
        self.buckets[i].push(seq, callback);
        self.occupied[i / 64] |= 1 << (i % 64);
        if self.len == 0 || self.first.is_some_and(|first| tick < first) {
            self.first = Some(tick);
        }
        self.len += 1;
        Ok(())
    }

    /// The (tick, sequence number) of the first timer due by `now`, if any.
    #[inline]
    pub(crate) fn peek(&mut self, now: u64) -> Option<(u64, u64)> {
        let tick = self.first_tick()?;
        if tick > now {
            return None;
        }
        self.base = tick;
        self.buckets[index(tick)].front_seq().map(|seq| (tick, seq))
    }

    /// Takes the timer [`peek`](Self::peek) just reported.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<Callback> {
        let i = index(self.base);
        let callback = self.buckets.get_mut(i)?.pop_front()?;
        self.taken(i, 1);
        Some(callback)
    }

    /// Counts `n` timers taken from bucket `i`, clearing its occupancy bit once it is empty.
    #[inline]
    fn taken(&mut self, i: usize, n: usize) {
        self.len -= n;
        if self.buckets[i].is_empty() {
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.first = None;
        }
    }

    /// Moves up to `limit` timers of the first tick due by `now`, in sequence order, to
    /// `jobs` (as [`peek`](Self::peek) and [`take`](Self::take) would, one by one); returns how
    /// many. For a drain whose queue has nothing due: no merge to make, so a tick's timers go
    /// out in one pass over its vector.
    pub(crate) fn take_due(&mut self, now: u64, limit: usize, jobs: &mut Vec<Job>) -> usize {
        let Some(tick) = self.first_tick().filter(|&tick| tick <= now) else {
            return 0;
        };
        self.base = tick;
        let i = index(tick);
        let taken = self.buckets[i].take_into(limit, tick, jobs);
        self.taken(i, taken);
        taken
    }

    /// The tick of the earliest timer held, if any.
    #[inline]
    pub(crate) fn first_tick(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        if self.first.is_none() {
            self.first = self.scan();
        }
        self.first
    }

    /// The earliest occupied tick from `base` on, by the occupancy bits.
    fn scan(&self) -> Option<u64> {
        // The occupancy bits from `base` on, wrapping around once.
        let start = index(self.base);
        let words = TICKS / 64;
        for step in 0..=words {
            let word = (start / 64 + step) % words;
            let mut bits = self.occupied[word];
            if step == 0 {
                bits &= !0u64 << (start % 64);
            } else if step == words {
                bits &= (1u64 << (start % 64)).wrapping_sub(1);
            }
            if bits != 0 {
                let i = word * 64 + bits.trailing_zeros() as usize;
                let ahead = (i + TICKS - start) % TICKS;
                return Some(self.base + ahead as u64);
            }
        }
        None
    }

    /// Takes every timer out, in (tick, sequence) order (for shutdown).
    pub(crate) fn take_all(&mut self) -> Vec<(u64, u64, Callback)> {
        let mut all = Vec::with_capacity(self.len);
        while let Some(tick) = self.first_tick() {
            self.base = tick;
            let i = index(tick);
            let before = all.len();
            all.extend(self.buckets[i].drain().map(|(seq, c)| (tick, seq, c)));
            self.len -= all.len() - before;
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.first = None;
        }
        all
    }

    /// Gives back the buckets' memory when nothing is held.
    pub(crate) fn shrink_to_fit(&mut self) {
        if self.len == 0 {
            self.buckets = Vec::new();
        } else {
            self.buckets.iter_mut().for_each(Bucket::shrink_to_fit);
        }
    }
}

impl Calendar {
    /// Checks the calendar's bookkeeping and panics naming the first rule broken: `len`
    /// counts the timers of every bucket, a bucket's occupancy bit is set exactly when it
    /// holds timers, sequence numbers increase within a bucket, and a known `first` is the
    /// earliest occupied tick from `base` on. O(buckets + timers).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn check_invariants(&self) {
        let mut len = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            let occupied = (self.occupied[i / 64] >> (i % 64)) & 1 == 1;
            assert_eq!(
                occupied,
                !bucket.is_empty(),
                "calendar: occupancy bit of tick {i}"
            );
            let held = &bucket.slots[bucket.head..];
            assert!(
                held.iter()
                    .zip(held.iter().skip(1))
                    .all(|(a, b)| a.seq < b.seq),
                "calendar: sequence numbers out of order at tick {i}"
            );
            assert!(
                held.iter().all(|s| s.callback.is_some())
                    && bucket.slots[..bucket.head]
                        .iter()
                        .all(|s| s.callback.is_none()),
                "calendar: tick {i} holds exactly its slots from the head on"
            );
            len += bucket.slots.len() - bucket.head;
        }
        if self.buckets.is_empty() {
            assert!(
                self.occupied.iter().all(|&w| w == 0),
                "calendar: bits with no buckets"
            );
        }
        assert_eq!(len, self.len, "calendar: len counts the timers held");
        if let Some(first) = self.first {
            assert_eq!(
                Some(first),
                self.scan(),
                "calendar: first is the earliest tick"
            );
        }
    }
}

/// A tick's timers in sequence order: the slots from `head` on are held; those before it
/// were taken (their callbacks are `None`). Taking one is reading it where it lies, and a
/// vector emptied so is cleared with its capacity kept: filing writes each timer once, into
/// a vector that only grows at its end.
#[derive(Default)]
struct Bucket {
    slots: Vec<Slot>,
    head: usize,
}

/// A filed timer: its sequence number and its callback (`None` once taken). 32 bytes.
struct Slot {
    seq: u64,
    callback: Option<Callback>,
}

impl Bucket {
    #[inline]
    fn is_empty(&self) -> bool {
        self.head == self.slots.len()
    }

    /// Appends a timer (its `seq` larger than every one held), written field by field where
    /// it lands: a `Slot` built first and moved in by `Vec::push` is kept on the stack across
    /// the vector's growth check, its fields stored 8 and 16 bytes at a time and read back as
    /// two 16-byte halves, loads the store buffer cannot forward, so each waits for every
    /// older store, the previous timers' cache-missing appends included.
    #[inline]
    fn push(&mut self, seq: u64, callback: Callback) {
        self.slots.reserve(1);
        let at = self.slots.spare_capacity_mut()[0].as_mut_ptr();
        // SAFETY: `at` is the first slot of the vector's spare capacity (`reserve` made one),
        // valid for writes, aligned and referenced by nothing else; the field pointers are
        // made without a reference to the uninitialised `Slot`. `set_len` counts the slot
        // only once both its fields are written (plain stores, which do not unwind).
        unsafe {
            ptr::addr_of_mut!((*at).seq).write(seq);
            ptr::addr_of_mut!((*at).callback).write(Some(callback));
            self.slots.set_len(self.slots.len() + 1);
        }
        // The next line of this tick's vector, which its next timers fill: a burst of filing
        // appends to a thousand ticks' vectors in turn, each append a store to a line not
        // in the cache, and without it each waited for its line in turn.
        prefetch(self.slots.as_ptr().wrapping_add(self.slots.len() + 2));
    }

    /// The sequence number of the first timer held.
    #[inline]
    fn front_seq(&self) -> Option<u64> {
        self.slots.get(self.head).map(|slot| slot.seq)
    }

    /// Takes the first timer held.
    #[inline]
    fn pop_front(&mut self) -> Option<Callback> {
        let callback = self.slots.get_mut(self.head)?.callback.take();
        self.head += 1;
        self.clear_if_taken();
        callback
    }

    /// Moves up to `limit` timers held, in order, to `jobs` as due at `tick`; returns how many.
    fn take_into(&mut self, limit: usize, tick: u64, jobs: &mut Vec<Job>) -> usize {
        let end = self.slots.len().min(self.head.saturating_add(limit));
        let taken = end - self.head;
        jobs.extend(self.slots[self.head..end].iter_mut().filter_map(|slot| {
            Some(Job {
                callback: slot.callback.take()?,
                deadline: tick,
            })
        }));
        self.head = end;
        self.clear_if_taken();
        taken
    }

    /// Clears the vector, its capacity kept, once every slot is taken: nothing to drop.
    #[inline]
    fn clear_if_taken(&mut self) {
        if self.head == self.slots.len() {
            self.slots.clear();
            self.head = 0;
        }
    }

    /// Takes every timer held, in order.
    fn drain(&mut self) -> impl Iterator<Item = (u64, Callback)> + '_ {
        let head = std::mem::take(&mut self.head);
        self.slots
            .drain(..)
            .skip(head)
            .filter_map(|slot| Some((slot.seq, slot.callback?)))
    }

    fn shrink_to_fit(&mut self) {
        if self.is_empty() {
            self.slots = Vec::new();
            self.head = 0;
        } else {
            self.slots.shrink_to_fit();
        }
    }
}

#[inline]
fn index(tick: u64) -> usize {
    (tick % TICKS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cb() -> Callback {
        Callback::new(|| {})
    }

    /// Files (tick, seq) pairs and takes everything due by `now`, as a drain would.
    fn drain(cal: &mut Calendar, now: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(head) = cal.peek(now) {
            assert!(cal.take().is_some());
            out.push(head);
        }
        out
    }

    #[test]
    fn timers_come_out_by_tick_then_sequence_and_only_when_due() {
        let mut cal = Calendar::default();
        for (seq, tick) in [5u64, 3, 5, 1, 3].into_iter().enumerate() {
            assert!(cal.file(tick, seq as u64, cb(), 0).is_ok());
        }
        assert_eq!(cal.first_tick(), Some(1));
        assert_eq!(drain(&mut cal, 0), []);
        assert_eq!(drain(&mut cal, 3), [(1, 3), (3, 1), (3, 4)]);
        assert_eq!(cal.len(), 2);
        assert_eq!(drain(&mut cal, 10), [(5, 0), (5, 2)]);
        assert_eq!((cal.len(), cal.first_tick()), (0, None));
    }

    #[test]
    fn reach_starts_after_the_drained_tick_and_spans_ticks() {
        let mut cal = Calendar::default();
        // Nothing held: the reach moves to the tick after the drained one.
        assert!(cal.file(100, 0, cb(), 100).is_err());
        assert!(cal.file(101, 1, cb(), 100).is_ok());
        assert!(cal.file(100 + TICKS as u64, 2, cb(), 100).is_ok());
        assert!(cal.file(101 + TICKS as u64, 3, cb(), 100).is_err());
        // The last tick of the reach sits in the bucket before the first one: found after it.
        assert_eq!(cal.first_tick(), Some(101));
        assert_eq!(drain(&mut cal, 101), [(101, 1)]);
        assert_eq!(cal.first_tick(), Some(100 + TICKS as u64));
        // With a timer held, the reach stays where it is, so nothing jumps ahead of it.
        assert!(cal.file(102, 4, cb(), 5000).is_ok());
        assert_eq!(
            drain(&mut cal, u64::MAX),
            [(102, 4), (100 + TICKS as u64, 2)]
        );
        assert!(cal.file(u64::MAX, 5, cb(), u64::MAX - 1).is_err());
    }

    #[test]
    fn every_callback_filed_is_called_or_dropped_exactly_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let (token, runs) = (Arc::new(()), Arc::new(AtomicUsize::new(0)));
        let counted = || {
            let (t, r) = (token.clone(), runs.clone());
            Callback::new(move || {
                let _t = t;
                r.fetch_add(1, Ordering::SeqCst);
            })
        };
        let mut cal = Calendar::default();
        for seq in 0..7u64 {
            assert!(cal.file(1 + seq % 2, seq, counted(), 0).is_ok());
        }
        // Tick 1 holds seqs 0, 2, 4, 6: all four taken (its slots cleared for reuse), then two
        // of tick 2's three.
        for _ in 0..6 {
            assert!(cal.peek(2).is_some());
            cal.take().expect("a timer").call();
        }
        cal.check_invariants();
        assert_eq!(runs.load(Ordering::SeqCst), 6);
        assert_eq!(Arc::strong_count(&token), 2, "one callback held");
        // Tick 1's emptied vector takes the timers of its next turn, `TICKS` later.
        assert!(cal.file(1 + TICKS as u64, 7, counted(), 0).is_ok());
        assert!(cal.file(2 + TICKS as u64, 8, counted(), 0).is_err());
        cal.check_invariants();
        assert_eq!(Arc::strong_count(&token), 3);
        assert_eq!(
            drain(&mut cal, 1 + TICKS as u64),
            [(2, 5), (1 + TICKS as u64, 7)]
        );
        // Dropping the calendar drops what it holds, and only that.
        assert!(cal.file(5 + TICKS as u64, 9, counted(), 0).is_ok());
        assert!(cal.file(5 + TICKS as u64, 10, counted(), 0).is_ok());
        assert!(cal.peek(u64::MAX).is_some());
        cal.take().expect("a timer").call();
        drop(cal);
        assert_eq!(Arc::strong_count(&token), 1);
        assert_eq!(runs.load(Ordering::SeqCst), 7);
    }

    /// `take_due` gives what `peek` and `take` give, in the same order, a tick at a time and at
    /// most `limit` at once, and nothing not yet due.
    #[test]
    fn take_due_takes_a_tick_in_order_as_take_does() {
        use std::sync::{Arc, Mutex};
        let ran = Arc::new(Mutex::new(Vec::new()));
        let mut cal = Calendar::default();
        let ticks = [4u64, 2, 4, 9, 2, 4, 2, 3];
        for (seq, &tick) in ticks.iter().enumerate() {
            let ran = Arc::clone(&ran);
            let filed = cal.file(
                tick,
                seq as u64,
                Callback::new(move || ran.lock().unwrap().push((tick, seq))),
                0,
            );
            assert!(filed.is_ok());
        }
        let mut jobs = Vec::new();
        assert_eq!(cal.take_due(1, 10, &mut jobs), 0, "nothing due at 1");
        // Tick 2 holds three timers: two, then one.
        assert_eq!(cal.take_due(4, 2, &mut jobs), 2);
        cal.check_invariants();
        assert_eq!(cal.take_due(4, 10, &mut jobs), 1);
        assert_eq!(cal.take_due(4, 10, &mut jobs), 1, "tick 3");
        assert_eq!(cal.take_due(4, 10, &mut jobs), 3, "tick 4");
        assert_eq!(cal.take_due(4, 10, &mut jobs), 0, "tick 9 is not due");
        cal.check_invariants();
        assert_eq!(cal.len(), 1);
        let deadlines: Vec<u64> = jobs.iter().map(|job| job.deadline).collect();
        assert_eq!(deadlines, [2, 2, 2, 3, 4, 4, 4]);
        jobs.into_iter().for_each(|job| job.callback.call());
        assert_eq!(
            *ran.lock().unwrap(),
            [(2, 1), (2, 4), (2, 6), (3, 7), (4, 0), (4, 2), (4, 5)]
        );
        // The emptied vectors take new timers, and the rest comes out as `take` gives it.
        assert!(cal.file(5, 8, cb(), 0).is_ok());
        assert_eq!(drain(&mut cal, 10), [(5, 8), (9, 3)]);
    }

    #[test]
    fn take_all_empties_it_in_order() {
        let mut cal = Calendar::default();
        for (seq, tick) in [9u64, 2, 9, 7].into_iter().enumerate() {
            assert!(cal.file(tick, seq as u64, cb(), 0).is_ok());
        }
        let all: Vec<(u64, u64)> = cal.take_all().into_iter().map(|(t, s, _)| (t, s)).collect();
        assert_eq!(all, [(2, 1), (7, 3), (9, 0), (9, 2)]);
        assert_eq!((cal.len(), cal.first_tick()), (0, None));
        cal.shrink_to_fit();
        assert!(cal.buckets.is_empty());
    }
}
