//! The schedule: the tasks of the held shards that the worker means to claim, each at the
//! instant it is to be claimed, in a wheel, with an index by (shard, id).

use std::collections::{BTreeMap, HashMap};

use tickwheel::{TimerKey, TimerQueue, Wheel};

/// What [`Schedule::drain_due`] takes out: the ids by shard, and for the tasks whose notice
/// arrived after their run-at (stored or rescheduled into the past), when it arrived.
pub(crate) type Drained = (BTreeMap<u32, Vec<String>>, HashMap<(u32, String), u64>);

/// The wheel of tasks to claim and its index, which always agree: every index entry names a
/// timer live in the wheel whose value is the entry's own (shard, id), and the wheel holds
/// nothing else (see [`Schedule::check`]). Only this type changes either.
#[derive(Debug)]
pub(crate) struct Schedule {
    wheel: Wheel<(u32, String)>,
    /// (shard, id) → the task's timer, the version it was armed for, and (for a version
    /// whose notice arrived after its run-at) when the notice arrived, namespace-clock ms.
    index: HashMap<(u32, String), (TimerKey, u64, Option<u64>)>,
}

impl Schedule {
    /// An empty schedule whose wheel starts at `start_ms`.
    pub(crate) fn new(start_ms: u64) -> Schedule {
        Schedule {
            wheel: Wheel::with_start(start_ms),
            index: HashMap::new(),
        }
    }

    /// Tasks scheduled.
    pub(crate) fn len(&self) -> usize {
        self.wheel.len()
    }

    /// No later than the earliest instant a task is to be claimed, ms.
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_expiration()
    }

    /// Whether the task `id` of `shard` is scheduled.
    #[cfg(test)]
    pub(crate) fn contains(&self, shard: u32, id: &str) -> bool {
        self.index.contains_key(&(shard, id.to_string()))
    }

    /// Puts (or moves) a shard's task at `at`, unless a newer version is scheduled.
    pub(crate) fn arm(&mut self, shard: u32, id: String, at: u64, version: u64) {
        self.arm_noticed(shard, id, at, version, None);
    }

    /// [`arm`](Self::arm), from a notice that arrived at `noticed_ms` when it arrived after
    /// the task's run-at (the task was stored or rescheduled into the past): its first
    /// delivery is then timed from that instant, not from a run-at it never could have kept
    /// (see `Worker::take_outcome`). The instant stays with the version it came with.
    pub(crate) fn arm_noticed(
        &mut self,
        shard: u32,
        id: String,
        at: u64,
        version: u64,
        noticed_ms: Option<u64>,
    ) {
        let k = (shard, id);
        if let Some((key, v, noticed)) = self.index.get_mut(&k) {
            if version < *v {
                return;
            }
            *noticed = if version == *v {
                noticed_ms.or(*noticed)
            } else {
                noticed_ms
            };
            *v = version;
            if self.wheel.reset(*key, at) {
                self.check_len();
                return;
            }
        }
        let key = self.wheel.insert(at, k.clone());
        self.index.insert(k, (key, version, noticed_ms));
        self.check_len();
    }

    /// Takes a shard's task out, if scheduled.
    pub(crate) fn disarm(&mut self, shard: u32, id: String) {
        if let Some((key, _, _)) = self.index.remove(&(shard, id)) {
            self.wheel.remove(key);
        }
        self.check_len();
    }

    /// Takes out every task to be claimed by `until`, ms, by shard, with the instants their
    /// notices arrived for those noticed after their run-at.
    pub(crate) fn drain_due(&mut self, until: u64) -> Drained {
        let mut due: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let mut noticed = HashMap::new();
        while let Some((_, k)) = self.wheel.poll_expired(until) {
            if let Some((_, _, Some(ms))) = self.index.remove(&k) {
                noticed.insert(k.clone(), ms);
            }
            due.entry(k.0).or_default().push(k.1);
        }
        self.check();
        (due, noticed)
    }

    /// Takes out every task of `shard` (lost or released).
    pub(crate) fn drop_shard(&mut self, shard: u32) {
        self.index.retain(|(s, _), (key, _, _)| {
            if *s == shard {
                self.wheel.remove(*key);
            }
            *s != shard
        });
        self.check();
    }

    /// Asserts (in debug builds) that the wheel and the index hold as many tasks: after each
    /// arm and disarm, which a window read makes thousands of times in a row.
    fn check_len(&self) {
        debug_assert_eq!(
            self.wheel.len(),
            self.index.len(),
            "the schedule's wheel and index disagree on their length"
        );
    }

    /// Asserts (in debug builds) that the wheel and the index agree: as many timers as
    /// entries, and, while the schedule is small enough to look at whole (up to 4096 tasks,
    /// so that tests with large windows stay fast), each entry's timer live with the entry's
    /// own (shard, id). After each drain (once a step) and each dropped shard.
    fn check(&mut self) {
        self.check_len();
        if !cfg!(debug_assertions) {
            return;
        }
        if self.index.len() > 4096 {
            return;
        }
        for (k, (key, _, _)) in &self.index {
            let v = self.wheel.get_mut(*key);
            assert!(
                v.as_deref() == Some(k),
                "the index names {k:?} at {key:?}, the wheel holds {v:?} there"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    /// Arming, re-arming (an older version never moves a newer one), disarming, draining and
    /// dropping a shard keep the wheel and the index in step (each call checks them), and
    /// each drains what it should.
    #[test]
    fn the_wheel_and_the_index_move_together() {
        let mut s = Schedule::new(0);
        s.arm(0, "a".into(), 10, 2);
        s.arm(0, "a".into(), 50, 1); // older: ignored
        s.arm(1, "b".into(), 20, 1);
        s.arm(1, "c".into(), 30, 1);
        s.arm(0, "d".into(), 40, 1);
        s.arm(1, "c".into(), 35, 2); // newer: moved
        assert_eq!(s.len(), 4);
        s.disarm(0, "d".into());
        s.disarm(0, "nothing".into());
        assert!(!s.contains(0, "d"));
        s.arm_noticed(1, "n".into(), 5, 1, Some(15));
        s.arm(1, "n".into(), 5, 1); // the same version keeps its notice
        let (due, noticed) = s.drain_due(20);
        assert_eq!(noticed.len(), 1);
        assert_eq!(noticed.get(&(1, "n".to_string())), Some(&15));
        assert_eq!(due.get(&0).map(Vec::as_slice), Some(&["a".to_string()][..]));
        assert_eq!(due[&1], ["n".to_string(), "b".to_string()]);
        assert_eq!(s.len(), 1);
        s.arm(0, "e".into(), 100, 1);
        s.drop_shard(1);
        assert!(!s.contains(1, "c") && s.contains(0, "e"));
        assert_eq!(s.len(), 1);
        assert_eq!(s.drain_due(1_000).0.len(), 1);
        assert_eq!(s.len(), 0);
    }
}
