//! Hashed wheel (placeholder; see the foundation issue).
use super::{TimerKey, TimerQueue};

/// Hashed wheel timer queue.
#[derive(Debug, Default)]
pub struct HashedWheel<T>(core::marker::PhantomData<T>);
impl<T> HashedWheel<T> {
    /// An empty hashed wheel at tick 0.
    pub fn new() -> Self {
        HashedWheel(core::marker::PhantomData)
    }
}
impl<T> TimerQueue<T> for HashedWheel<T> {
    fn insert(&mut self, _: u64, _: T) -> TimerKey {
        todo!()
    }
    fn remove(&mut self, _: TimerKey) -> Option<T> {
        todo!()
    }
    fn reset(&mut self, _: TimerKey, _: u64) -> bool {
        todo!()
    }
    fn deadline(&self, _: TimerKey) -> Option<u64> {
        todo!()
    }
    fn len(&self) -> usize {
        todo!()
    }
    fn now(&self) -> u64 {
        todo!()
    }
    fn next_expiration(&self) -> Option<u64> {
        todo!()
    }
    fn poll_expired(&mut self, _: u64) -> Option<(TimerKey, T)> {
        todo!()
    }
    fn shrink_to_fit(&mut self) {
        todo!()
    }
}
