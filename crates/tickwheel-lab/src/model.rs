//! The reference model of a timer queue, the only one in the workspace: the `TimerQueue`
//! contract written as plainly as possible, over a `BTreeMap`. The property tests
//! (`crates/tickwheel/tests/model.rs`) and the fuzz targets (`fuzz/`) replay the same
//! operations on a queue and on this model and demand identical answers after every step;
//! the `sys` drivers' unit tests run on it as their queue, through a `TimerQueue` adapter
//! (`crates/tickwheel/src/sys/model.rs`).
//!
//! The contract it encodes: a timer's effective deadline is `max(deadline, now)` at insert;
//! timers fire in (effective deadline, insertion) order, and a reset counts as a new
//! insertion; a poll behind `now` does nothing; a poll moves `now` to the deadline of the
//! timer it returns, or to the polled tick when none is due.
//!
//! Keys are whatever the queue under test hands out (`K`), so this crate needs no dependency
//! on `tickwheel`.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A model queue of values `V` under keys `K`.
#[derive(Debug, Clone)]
pub struct Model<K, V> {
    /// The model's current tick.
    pub now: u64,
    /// The insertion counter (every insert and reset takes the next number).
    pub seq: u64,
    /// Pending timers in firing order: (effective deadline, insertion number) → key.
    pub order: BTreeMap<(u64, u64), K>,
    /// key → (effective deadline, insertion number, value).
    pub timers: HashMap<K, (u64, u64, V)>,
}

impl<K, V> Default for Model<K, V> {
    fn default() -> Self {
        Model {
            now: 0,
            seq: 0,
            order: BTreeMap::new(),
            timers: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V> Model<K, V> {
    /// Records the insertion of `value` under `key` (the key the real queue returned).
    pub fn insert(&mut self, key: K, deadline: u64, value: V) {
        let eff = deadline.max(self.now);
        self.seq += 1;
        self.order.insert((eff, self.seq), key);
        self.timers.insert(key, (eff, self.seq, value));
    }

    /// Records `value` under `key` as a new insertion, replacing the timer pending under
    /// `key` if there is one (as `HashMap::insert` does, and the `IdWheel`'s insert): returns
    /// the replaced value.
    pub fn insert_or_replace(&mut self, key: K, deadline: u64, value: V) -> Option<V> {
        let old = self.remove(key);
        self.insert(key, deadline, value);
        old
    }

    /// Removes a pending timer: its value, or `None` when `key` is not pending.
    pub fn remove(&mut self, key: K) -> Option<V> {
        let (eff, seq, value) = self.timers.remove(&key)?;
        self.order.remove(&(eff, seq));
        Some(value)
    }

    /// Removes every pending timer; the clock stays where it is.
    pub fn clear(&mut self) {
        self.order.clear();
        self.timers.clear();
    }

    /// Moves a pending timer to `deadline` as a new insertion: `false` when not pending.
    pub fn reset(&mut self, key: K, deadline: u64) -> bool {
        self.remove(key)
            .map(|v| self.insert(key, deadline, v))
            .is_some()
    }

    /// The next timer due at or before `t`, removed; `None` (and `now` moves to `t`) when
    /// none is due. A `t` behind `now` does nothing.
    pub fn poll(&mut self, t: u64) -> Option<(K, V)> {
        if t < self.now {
            return None;
        }
        match self.order.first_key_value() {
            Some((&(eff, _), &key)) if eff <= t => {
                self.now = eff;
                Some((key, self.remove(key)?))
            }
            _ => {
                self.now = t;
                None
            }
        }
    }

    /// The earliest effective deadline pending, if any.
    pub fn earliest(&self) -> Option<u64> {
        self.order.keys().next().map(|&(eff, _)| eff)
    }
}

#[cfg(test)]
mod tests {
    use super::Model;

    #[test]
    fn fires_in_deadline_then_insertion_order_and_never_behind_now() {
        let mut m: Model<u32, &str> = Model::default();
        m.insert(1, 10, "b");
        m.insert(2, 5, "a");
        m.insert(3, 10, "c");
        assert!(m.reset(1, 10)); // a reset is a new insertion: now after 3
        assert_eq!(m.earliest(), Some(5));
        assert_eq!(m.poll(4), None);
        assert_eq!(m.now, 4);
        assert_eq!(m.poll(20), Some((2, "a")));
        assert_eq!(m.poll(20), Some((3, "c")));
        assert_eq!(m.poll(20), Some((1, "b")));
        assert_eq!(m.poll(20), None);
        assert_eq!(m.poll(3), None); // behind now: nothing moves
        assert_eq!(m.now, 20);
        m.insert(4, 0, "past"); // a past deadline becomes now
        assert_eq!(m.timers[&4].0, 20);
        assert_eq!(m.remove(4), Some("past"));
        assert_eq!(m.remove(4), None);
        assert!(!m.reset(4, 30));
        m.insert(5, 30, "e");
        m.insert(6, 30, "f");
        assert_eq!(m.insert_or_replace(5, 30, "g"), Some("e")); // behind 6 now
        assert_eq!(m.insert_or_replace(7, 30, "h"), None);
        assert_eq!(m.poll(30), Some((6, "f")));
        assert_eq!(m.poll(30), Some((5, "g")));
        assert_eq!(m.poll(30), Some((7, "h")));
        assert_eq!(m.poll(30), None);
    }
}
