//! What a model driver needs of a queue, written once for `tests/model.rs` and the fuzz
//! targets (`fuzz/src/lib.rs` includes this file by path: the fuzz crate is a workspace of its
//! own): [`Subject`], implemented for every [`TimerQueue`] through [`Keyed`] and for the
//! `SlimWheel` itself, whose reset returns a new key. A new queue, or a new form of one, joins
//! both drivers with one impl here.

use tickwheel::{SlimWheel, TimerKey, TimerQueue};

/// What a driver needs of a queue: a [`TimerQueue`] (through [`Keyed`]) or the `SlimWheel`.
pub trait Subject {
    fn insert(&mut self, deadline: u64, value: u32) -> TimerKey;
    fn remove(&mut self, key: TimerKey) -> Option<u32>;
    /// Removes without handing the value back; whether the key was live.
    fn cancel(&mut self, key: TimerKey) -> bool;
    /// The key the timer has after the reset: `key` itself for a [`TimerQueue`], a new one
    /// for the `SlimWheel`; `None` for a stale key.
    fn reset(&mut self, key: TimerKey, deadline: u64) -> Option<TimerKey>;
    fn deadline(&self, key: TimerKey) -> Option<u64>;
    fn get(&self, key: TimerKey) -> Option<&u32>;
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut u32>;
    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, u32)>;
    fn next_expiration(&self) -> Option<u64>;
    fn len(&self) -> usize;
    fn now(&self) -> u64;
    fn shrink_to_fit(&mut self);
    fn clear(&mut self);
    fn check_invariants(&self);
}

/// A [`TimerQueue`] as a [`Subject`]: its reset keeps the key.
pub struct Keyed<Q>(pub Q);

impl<Q: TimerQueue<u32>> Subject for Keyed<Q> {
    fn insert(&mut self, deadline: u64, value: u32) -> TimerKey {
        self.0.insert(deadline, value)
    }
    fn remove(&mut self, key: TimerKey) -> Option<u32> {
        self.0.remove(key)
    }
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.remove(key).is_some()
    }
    fn reset(&mut self, key: TimerKey, deadline: u64) -> Option<TimerKey> {
        self.0.reset(key, deadline).then_some(key)
    }
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.0.deadline(key)
    }
    fn get(&self, key: TimerKey) -> Option<&u32> {
        self.0.get(key)
    }
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut u32> {
        self.0.get_mut(key)
    }
    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, u32)> {
        self.0.poll_expired(now)
    }
    fn next_expiration(&self) -> Option<u64> {
        self.0.next_expiration()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn now(&self) -> u64 {
        self.0.now()
    }
    fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
    fn clear(&mut self) {
        self.0.clear();
    }
    fn check_invariants(&self) {
        self.0.check_invariants();
    }
}

impl Subject for SlimWheel<u32> {
    fn insert(&mut self, deadline: u64, value: u32) -> TimerKey {
        SlimWheel::insert(self, deadline, value)
    }
    fn remove(&mut self, key: TimerKey) -> Option<u32> {
        SlimWheel::remove(self, key)
    }
    fn cancel(&mut self, key: TimerKey) -> bool {
        SlimWheel::cancel(self, key)
    }
    fn reset(&mut self, key: TimerKey, deadline: u64) -> Option<TimerKey> {
        SlimWheel::reset(self, key, deadline)
    }
    fn deadline(&self, key: TimerKey) -> Option<u64> {
        SlimWheel::deadline(self, key)
    }
    fn get(&self, key: TimerKey) -> Option<&u32> {
        SlimWheel::get(self, key)
    }
    fn get_mut(&mut self, key: TimerKey) -> Option<&mut u32> {
        SlimWheel::get_mut(self, key)
    }
    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, u32)> {
        SlimWheel::poll_expired(self, now)
    }
    fn next_expiration(&self) -> Option<u64> {
        SlimWheel::next_expiration(self)
    }
    fn len(&self) -> usize {
        SlimWheel::len(self)
    }
    fn now(&self) -> u64 {
        SlimWheel::now(self)
    }
    fn shrink_to_fit(&mut self) {
        SlimWheel::shrink_to_fit(self);
    }
    fn clear(&mut self) {
        SlimWheel::clear(self);
    }
    fn check_invariants(&self) {
        SlimWheel::check_invariants(self);
    }
}

/// Everything `q` has due by `t`, in firing order.
pub fn drain<S: Subject>(q: &mut S, t: u64) -> Vec<(TimerKey, u32)> {
    std::iter::from_fn(|| q.poll_expired(t)).collect()
}
