//! The window: each shard's next stretch of pending tasks, read from Redis into the wheel.

use super::{Schedule, ShardLoss, Worker};
use crate::namespace::Error;
use crate::protocol;
pub(crate) use crate::protocol::Resume;

/// A shard's window in this worker: what of the shard's pending tasks the schedule holds.
/// (Not `protocol::Window`, which is one LOAD's reply.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum ShardWindow {
    /// Nothing read yet (a new lease, a reconnect): the next refill reads from the start,
    /// in-flight tasks included.
    #[default]
    Unloaded,
    /// Every pending task with a run-at up to `horizon` is in the wheel, or announced by a
    /// notice on its way; later ones are read from `resume` on. `more`: the last read
    /// stopped at its limit, so the next step reads on at once.
    Loaded {
        horizon: u64,
        resume: Resume,
        more: bool,
    },
}

impl ShardWindow {
    /// Whether a notice for a task due at `run_at` belongs in the wheel: inside the horizon.
    /// (A later task is in a bucket the window has not read yet, and is read with it.)
    pub(crate) fn covers(&self, run_at: u64) -> bool {
        matches!(self, ShardWindow::Loaded { horizon, .. } if run_at <= *horizon)
    }

    /// Where the next read starts, if one is due at `now`: an unloaded window from its start,
    /// a loaded one from `resume` when its last read stopped at its limit or when less than
    /// three quarters of `window` lie ahead of `now`.
    pub(crate) fn next_read(&self, now: u64, window: u64) -> Option<Option<Resume>> {
        match self {
            ShardWindow::Unloaded => Some(None),
            ShardWindow::Loaded {
                horizon,
                resume,
                more,
            } => (*more || *horizon < now + window * 3 / 4).then(|| Some(resume.clone())),
        }
    }

    /// The invariants LOAD's reply keeps (see the LOAD script): the horizon ends where the
    /// resumed bucket starts; an offset belongs to a generation; a read that did not stop at
    /// its limit resumes at the start of a bucket never read.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let ShardWindow::Loaded {
            horizon,
            resume,
            more,
        } = self
        else {
            return Ok(());
        };
        if horizon.checked_add(1)
            != resume
                .bucket
                .checked_mul(crate::protocol::scripts::BUCKET_MS)
        {
            return Err(format!(
                "horizon {horizon} is not the end of the bucket before {resume:?}"
            ));
        }
        if resume.offset > 0 && resume.generation.is_empty() {
            return Err(format!("an offset without a generation: {resume:?}"));
        }
        if !more && (resume.offset > 0 || !resume.generation.is_empty()) {
            return Err(format!(
                "a complete read resumes inside a bucket: {resume:?}"
            ));
        }
        Ok(())
    }
}

impl Worker {
    /// Drops the in-memory windows; the next [`tick`](Worker::tick) loads them again from Redis.
    /// Callers need it only to make a step deterministic (tests on a manual clock, where a
    /// notification may still be on its way when the clock moves).
    pub fn reload_windows(&mut self) {
        self.schedule = Schedule::new(self.now_ms());
        self.shards.unload_all();
    }

    /// Tops windows up, reading at most [`Config::window_limit`](crate::Config::window_limit) tasks
    /// per call so that a refill never holds Redis, or the deliveries waiting behind it, for long;
    /// the rest follows on the next ticks. A window is topped up once a quarter of it has passed.
    /// Returns whether more remains to read. Only while notifications flow (see `Notice::Up`).
    pub(crate) fn refill(&mut self) -> Result<bool, Error> {
        if !self.link.subscribed {
            return Ok(false);
        }
        let now = self.now_ms();
        let window = self.cfg.window.as_millis() as u64;
        let wanted: Vec<(u32, u64, Option<Resume>)> = self
            .shards
            .iter()
            .filter_map(|(s, o)| Some((s, o.epoch, o.window.next_read(now, window)?)))
            .collect();
        if wanted.is_empty() {
            return Ok(false);
        }
        // One pipeline (one round trip) reads a share of the budget for every shard.
        let limit = (self.cfg.window_limit / wanted.len()).max(100);
        let calls: Vec<protocol::Load> = wanted
            .iter()
            .map(|(s, epoch, from)| protocol::Load {
                keys: &self.ns.shards[*s as usize],
                tenure: protocol::Tenure::new(*epoch, &self.id),
                from: from.as_ref(),
                to_ms: now + window,
                limit,
                in_flight: from.is_none(),
                ahead_ms: self.cfg.ahead_ms(),
            })
            .collect();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let replies = protocol::invoke_all(con, &calls)?;
        drop(calls);
        let mut more = false;
        for ((shard, _, _), reply) in wanted.into_iter().zip(replies) {
            more |= self.apply_load(shard, reply)?;
        }
        Ok(more)
    }

    /// Takes in one shard's LOAD reply: arms what it read, records the window (its
    /// invariants checked: a reply that breaks them is an error, never a wrong window).
    /// Returns whether the read stopped at its limit.
    fn apply_load(&mut self, shard: u32, reply: protocol::LoadReply) -> Result<bool, Error> {
        let protocol::LoadReply::Loaded(read) = reply else {
            self.stats.fenced += 1;
            self.drop_shard(shard, ShardLoss::Fenced);
            return Ok(false);
        };
        let window = ShardWindow::Loaded {
            horizon: read.horizon_ms,
            resume: read.next,
            more: read.more,
        };
        if let Err(e) = window.check_invariants() {
            return Err(Error::Protocol(format!("LOAD: {e}")));
        }
        // Pending tasks are armed at their run-at, in-flight ones at their visibility
        // deadline plus the claim-ahead (the wheel is polled that far ahead).
        for a in read.pending.into_iter().chain(read.in_flight) {
            self.schedule.arm(shard, a.id, a.at_ms, a.version);
        }
        let more = read.more;
        self.shards.set_window(shard, window);
        if !more {
            // Everything due is armed: a shard back from a pause may be claimed again.
            self.shards.caught_up(shard);
        }
        Ok(more)
    }
}
