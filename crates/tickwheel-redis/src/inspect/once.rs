//! What [`Producer::schedule_once`](crate::Producer::schedule_once) remembers of an id.

use super::Inspector;
use crate::connection::query_one;
use crate::error::Error;
use crate::namespace::check_id;

impl Inspector {
    /// Until when (ms since the Unix epoch, by the namespace's clock)
    /// [`schedule_once`](crate::Producer::schedule_once) remembers `id`: until then a
    /// `schedule_once` of it stores nothing and answers
    /// [`Remembered`](crate::ScheduledOnce::Remembered) (or `Exists` while a task has the
    /// id). `None` when no window of it is open: never named by a `schedule_once`, or its
    /// window ([`Config::idempotency_window`](crate::Config::idempotency_window)) ended.
    /// [`Error::InvalidId`] for an id no task can have.
    pub fn remembered(&mut self, id: &str) -> Result<Option<u64>, Error> {
        check_id(id)?;
        let now = self.now_ms()?;
        let shard = self.ns.shard_of(id) as usize;
        let until: Option<f64> = self.with_con(|con, ns, _| {
            let mut zscore = redis::cmd("ZSCORE");
            zscore.arg(ns.shards[shard].once()).arg(id);
            query_one(con, zscore)
        })?;
        Ok(until.map(|ms| ms as u64).filter(|&ms| ms > now))
    }
}
