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

use std::collections::VecDeque;

use crate::service::callback::Callback;

/// How many ticks ahead of the last drained tick the calendar takes timers (a power of two).
pub(crate) const TICKS: usize = 2048;

/// The calendar; see the module docs.
pub(crate) struct Calendar {
    /// One vector a tick, for ticks `base..base + TICKS`, by `tick % TICKS`; allocated on
    /// first use. Each holds (sequence number, callback) in sequence order.
    buckets: Vec<VecDeque<(u64, Callback)>>,
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
    /// calendar's reach starts after it.
    #[inline]
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
            self.buckets = (0..TICKS).map(|_| VecDeque::new()).collect();
        }
        let i = index(tick);
        self.buckets[i].push_back((seq, callback));
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
        self.buckets[index(tick)]
            .front()
            .map(|&(seq, _)| (tick, seq))
    }

    /// Takes the timer [`peek`](Self::peek) just reported.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<Callback> {
        let i = index(self.base);
        let (_, callback) = self.buckets.get_mut(i)?.pop_front()?;
        self.len -= 1;
        if self.buckets[i].is_empty() {
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.first = None;
        }
        Some(callback)
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
            all.extend(self.buckets[i].drain(..).map(|(seq, c)| (tick, seq, c)));
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
            self.buckets.iter_mut().for_each(VecDeque::shrink_to_fit);
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
            assert!(
                bucket
                    .iter()
                    .zip(bucket.iter().skip(1))
                    .all(|(a, b)| a.0 < b.0),
                "calendar: sequence numbers out of order at tick {i}"
            );
            len += bucket.len();
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
