//! A `BTreeMap` timer queue that follows the [`TimerQueue`] contract literally, so the `sys`
//! drivers can be tested on their own (test-only; the real flavors have their own suite).

use std::collections::{BTreeMap, HashMap};

use crate::queue::{TimerKey, TimerQueue};

/// Timers keyed by (effective deadline, insertion sequence).
#[derive(Debug, Default)]
pub(crate) struct ModelQueue<T> {
    order: BTreeMap<(u64, u64), u32>,
    entries: HashMap<u32, (u64, u64, T)>,
    seq: u64,
    next_index: u32,
    now: u64,
}

impl<T> ModelQueue<T> {
    fn push(&mut self, index: u32, deadline: u64, value: T) {
        let at = deadline.max(self.now);
        self.seq += 1;
        self.order.insert((at, self.seq), index);
        self.entries.insert(index, (at, self.seq, value));
    }
}

impl<T> TimerQueue<T> for ModelQueue<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        self.next_index += 1;
        self.push(self.next_index, deadline, value);
        TimerKey::new(self.next_index, 1)
    }

    fn remove(&mut self, key: TimerKey) -> Option<T> {
        let (at, seq, value) = self.entries.remove(&key.index())?;
        self.order.remove(&(at, seq));
        Some(value)
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        match self.remove(key) {
            Some(value) => {
                self.push(key.index(), deadline, value);
                true
            }
            None => false,
        }
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.entries.get(&key.index()).map(|e| e.0)
    }

    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.entries.get_mut(&key.index()).map(|e| &mut e.2)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn next_expiration(&self) -> Option<u64> {
        self.order.keys().next().map(|&(at, _)| at)
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if now < self.now {
            return None;
        }
        match self.order.first_key_value() {
            Some((&(at, seq), &index)) if at <= now => {
                self.order.remove(&(at, seq));
                let (_, _, value) = self.entries.remove(&index)?;
                self.now = at;
                Some((TimerKey::new(index, 1), value))
            }
            _ => {
                self.now = now;
                None
            }
        }
    }

    fn shrink_to_fit(&mut self) {}
}
