//! The window: each shard's next stretch of pending tasks, read from Redis into the wheel.

#[allow(unused_imports)]
use super::*;

pub(crate) use crate::protocol::Resume;

/// A shard's window in this worker: what of the shard's pending tasks the wheel holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Window {
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

impl Window {
    /// Whether a notice for a task due at `run_at` belongs in the wheel: inside the horizon.
    /// (A later task is in a bucket the window has not read yet, and is read with it.)
    pub(crate) fn covers(&self, run_at: u64) -> bool {
        matches!(self, Window::Loaded { horizon, .. } if run_at <= *horizon)
    }

    /// Where the next read starts, if one is due at `now`: an unloaded window from its start,
    /// a loaded one from `resume` when its last read stopped at its limit or when less than
    /// three quarters of `window` lie ahead of `now`.
    pub(crate) fn next_read(&self, now: u64, window: u64) -> Option<Option<Resume>> {
        match self {
            Window::Unloaded => Some(None),
            Window::Loaded {
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
        let Window::Loaded {
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
    /// Drops the in-memory windows; the next [`tick`](Worker::tick) loads them again from
    /// Redis. Callers need it only to make a step deterministic (tests on a manual clock, where a notification may still be on its
    /// way when the clock moves).
    pub fn reload_windows(&mut self) {
        self.wheel = Wheel::with_start(self.now_ms());
        self.index.clear();
        for o in self.owned.values_mut() {
            o.window = Window::Unloaded;
        }
        self.next_maintenance = 0;
    }

    /// Puts (or moves) a shard's task in the wheel, unless the wheel holds a newer version.
    pub(crate) fn arm(&mut self, shard: u32, id: String, at: u64, version: u64) {
        let k = (shard, id);
        if let Some((key, v)) = self.index.get_mut(&k) {
            if version < *v {
                return;
            }
            *v = version;
            if self.wheel.reset(*key, at) {
                return;
            }
        }
        let key = self.wheel.insert(at, k.clone());
        self.index.insert(k, (key, version));
    }

    pub(crate) fn disarm(&mut self, shard: u32, id: String) {
        if let Some((key, _)) = self.index.remove(&(shard, id)) {
            self.wheel.remove(key);
        }
    }

    /// Tops windows up, reading at most [`Config::window_limit`] tasks per call so that a
    /// refill never holds Redis, or the deliveries waiting behind it, for long; the rest
    /// follows on the next ticks. A window is topped up once a quarter of it has passed.
    /// Returns whether more remains to read. Only while notifications flow (see
    /// `Notice::Up`).
    pub(crate) fn refill(&mut self) -> Result<bool, Error> {
        if !self.subscribed {
            return Ok(false);
        }
        let now = self.now_ms();
        let window = self.cfg.window.as_millis() as u64;
        let wanted: Vec<(u32, u64, Option<Resume>)> = self
            .owned
            .iter()
            .filter_map(|(&s, o)| Some((s, o.epoch, o.window.next_read(now, window)?)))
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
                epoch: *epoch,
                from: from.as_ref(),
                to_ms: now + window,
                limit,
                in_flight: from.is_none(),
                ahead_ms: self.cfg.ahead_ms(),
            })
            .collect();
        let con = open_con(&mut self.con, &self.cfg, &self.client)?;
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
        let window = Window::Loaded {
            horizon: read.horizon_ms,
            resume: read.next,
            more: read.more,
        };
        if let Err(e) = window.check_invariants() {
            return Err(Error::Protocol(format!("LOAD: {e}")));
        }
        // Pending tasks are armed at their run-at, in-flight ones at their visibility
        // deadline plus the claim horizon (the wheel is polled that far ahead).
        for a in read.pending.into_iter().chain(read.in_flight) {
            self.arm(shard, a.id, a.at_ms, a.version);
        }
        let more = read.more;
        if let Some(o) = self.owned.get_mut(&shard) {
            o.window = window;
        }
        Ok(more)
    }
}
