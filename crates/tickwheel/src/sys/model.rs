//! The reference model of the [`TimerQueue`] contract as a queue, so that the `sys` drivers
//! can be tested on their own (test-only; the real flavors have their own suite).
//!
//! There is one reference model in the workspace, `tickwheel_lab::model::Model`, which the
//! property tests and the fuzz targets compare the queues with; this is only the adapter that
//! hands out keys for it and speaks [`TimerQueue`].

use tickwheel_lab::model::Model;

use crate::queue::{TimerKey, TimerQueue};

/// [`Model`] behind the [`TimerQueue`] interface: keys are handed out in order, one
/// generation each (the model never reuses them).
#[derive(Debug)]
pub(crate) struct ModelQueue<T> {
    model: Model<TimerKey, T>,
    next_index: u32,
}

impl<T> Default for ModelQueue<T> {
    fn default() -> Self {
        ModelQueue {
            model: Model::default(),
            next_index: 0,
        }
    }
}

impl<T> TimerQueue<T> for ModelQueue<T> {
    fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        self.next_index += 1;
        let key = TimerKey::new(self.next_index, 1);
        self.model.insert(key, deadline, value);
        key
    }

    fn remove(&mut self, key: TimerKey) -> Option<T> {
        self.model.remove(key)
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        self.model.reset(key, deadline)
    }

    fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.model.timers.get(&key).map(|timer| timer.0)
    }

    fn clear(&mut self) {
        self.model.clear();
    }

    fn get(&self, key: TimerKey) -> Option<&T> {
        self.model.timers.get(&key).map(|timer| &timer.2)
    }

    fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.model.timers.get_mut(&key).map(|timer| &mut timer.2)
    }

    fn len(&self) -> usize {
        self.model.timers.len()
    }

    fn now(&self) -> u64 {
        self.model.now
    }

    fn next_expiration(&self) -> Option<u64> {
        self.model.earliest()
    }

    fn poll_expired(&mut self, now: u64) -> Option<(TimerKey, T)> {
        self.model.poll(now)
    }

    fn shrink_to_fit(&mut self) {}
}
