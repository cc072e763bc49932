//! Create-only schedules: `schedule_once`, safe to retry after any error.

use super::Producer;
use crate::error::Error;
use crate::namespace::RunAt;
use crate::protocol::{self, Schedule, ScheduleOnce, ScheduledOnce};
use crate::task::Task;

impl Producer {
    /// Stores a task only if its id is free, and is safe to send again after any error:
    /// a create-only schedule with an idempotency window.
    ///
    /// * A task has the id (pending, in flight, or in the failed set): nothing is stored;
    ///   [`ScheduledOnce::Exists`] with its state.
    /// * No task has it, but a `schedule_once` named it within the last
    ///   [`Config::idempotency_window`](crate::Config::idempotency_window) (1 h by
    ///   default): nothing is stored; [`ScheduledOnce::Remembered`]: the task it scheduled
    ///   may have run, been cancelled, or failed and been discarded.
    /// * Otherwise the task is stored as [`schedule`](Producer::schedule) stores it;
    ///   [`ScheduledOnce::Stored`].
    ///
    /// Every `schedule_once` of an id, whatever it answers, remembers the id for the window
    /// from that call. So the same call sent again after an error or a timeout (whose
    /// outcome is unknown: stored, or not) within the window delivers the task at most once,
    /// even if it ran and was acknowledged meanwhile. The id is the idempotency key: a second
    /// call with the same id and another run-at or payload stores nothing either (to change a
    /// task, [`reschedule`](Producer::reschedule) it, or replace it with `schedule`). A
    /// cancelled id stays remembered: a retried `schedule_once` does not bring back a task
    /// cancelled since. [`schedule`](Producer::schedule) ignores the remembered ids: it
    /// always stores.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tickwheel_redis::{Config, Error, Producer, RunAt, ScheduledOnce};
    /// # let mut p = Producer::connect(&Config::new("redis://127.0.0.1/", "orders"))?;
    /// let remind = |p: &mut Producer| {
    ///     p.schedule_once("remind-42", RunAt::After(Duration::from_secs(3600)), b"42")
    /// };
    /// let answer = loop {
    ///     match remind(&mut p) {
    ///         Ok(a) => break a,
    ///         Err(e) => eprintln!("{e}; sending it again"), // stored or not: either is fine
    ///     }
    /// #   break ScheduledOnce::Remembered;
    /// };
    /// if let ScheduledOnce::Stored(s) = answer {
    ///     println!("stored, version {}", s.version);
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn schedule_once(
        &mut self,
        id: &str,
        run_at: RunAt,
        payload: &[u8],
    ) -> Result<ScheduledOnce, Error> {
        let mut out = self
            .schedule_once_many([Task::new(id, run_at, payload)])
            .map_err(super::single)?;
        out.pop()
            .ok_or_else(|| Error::Protocol("SCHEDULE: no task in the reply".into()))
    }

    /// [`schedule_once`](Producer::schedule_once) for many tasks (one-shot or recurring,
    /// with their own retry policies) in one pipeline, grouped by shard as
    /// [`schedule_many`](Producer::schedule_many) groups them. Returns what each task got,
    /// in the order given, as that many `schedule_once` calls in that order would: an id
    /// given twice is stored the first time (when free) and answered
    /// [`ScheduledOnce::Exists`] (the task just stored) the second.
    ///
    /// On `Err` ([`Error::Partial`] says task by task what was applied, as for
    /// `schedule_many`), sending the whole call again is safe within the window: the tasks
    /// it stored answer `Exists` or `Remembered` and are not stored twice.
    pub fn schedule_once_many<'a, I>(&mut self, tasks: I) -> Result<Vec<ScheduledOnce>, Error>
    where
        I: IntoIterator<Item = Task<'a>>,
    {
        let groups = self.grouped(tasks)?;
        let now = protocol::now(&self.cfg);
        let window_ms = crate::task::ceil_ms(self.cfg.idempotency_window).unwrap_or(u64::MAX);
        self.with_con_again(|con, ns| {
            groups.invoke(con, |shard, tasks| ScheduleOnce {
                schedule: Schedule {
                    keys: &ns.shards[shard as usize],
                    now,
                    channel: &ns.channel,
                    shard,
                    tasks,
                },
                window_ms,
            })
        })
    }
}
