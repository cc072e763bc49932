//! The window: each shard's next stretch of pending tasks, read from Redis into the wheel.

#[allow(unused_imports)]
use super::*;

/// Where a window read goes on: the first bucket not read to its end, the generation of its
/// list that was read (empty: none), and how many of that generation's entries were read.
/// A list deleted and created again has a new generation, read from its start: no entry is
/// skipped whatever happens to a bucket between two reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) bucket: u64,
    pub(crate) generation: String,
    pub(crate) offset: u64,
}

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
        if horizon.checked_add(1) != resume.bucket.checked_mul(crate::scripts::BUCKET_MS) {
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

/// LOAD's reply for one shard (see the script): `None` when fenced.
fn decode_load(reply: Value) -> Result<Option<(Window, Vec<Value>)>, Error> {
    let bad = || Error::Protocol("LOAD".into());
    let mut r = array(reply)?.into_iter();
    let horizon = int(&r.next().ok_or_else(bad)?)?;
    if horizon < 0 {
        return Ok(None);
    }
    let bucket = int(&r.next().ok_or_else(bad)?)? as u64;
    let generation = string(r.next().ok_or_else(bad)?)?;
    let offset = int(&r.next().ok_or_else(bad)?)? as u64;
    let more = int(&r.next().ok_or_else(bad)?)? == 1;
    let window = Window::Loaded {
        horizon: horizon as u64,
        resume: Resume {
            bucket,
            generation,
            offset,
        },
        more,
    };
    if let Err(e) = window.check_invariants() {
        return Err(Error::Protocol(format!("LOAD: {e}")));
    }
    Ok(Some((window, r.collect())))
}

impl Worker {
    /// Drops the in-memory windows; the next [`tick`](Worker::tick) loads them again from
    /// Redis. Workers do this by themselves after a reconnect; callers need it only to make a
    /// step deterministic (tests on a manual clock, where a notification may still be on its
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
        let pipe = self.load_pipeline(&wanted, now + window, limit);
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let mut more = false;
        for ((shard, _, _), reply) in wanted.into_iter().zip(replies) {
            more |= self.apply_load(shard, reply)?;
        }
        Ok(more)
    }

    /// One LOAD call per wanted shard: from where its read goes on up to the bucket holding
    /// `to`, `limit` entries at most (in-flight tasks too, for a window read from its start).
    fn load_pipeline(
        &self,
        wanted: &[(u32, u64, Option<Resume>)],
        to: u64,
        limit: usize,
    ) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for (s, epoch, from) in wanted {
            let (from_arg, generation, offset) = from
                .as_ref()
                .map_or(("-inf".to_string(), String::new(), 0), |r| {
                    (r.bucket.to_string(), r.generation.clone(), r.offset)
                });
            pipe.cmd("EVALSHA")
                .arg(scripts().load.get_hash())
                .arg(4)
                .arg(self.ns.shards[*s as usize].0.as_slice())
                .arg(epoch)
                .arg(from_arg)
                .arg(generation)
                .arg(offset)
                .arg(to)
                .arg(limit)
                .arg(if from.is_none() { "1" } else { "0" });
        }
        pipe
    }

    /// Takes in one shard's LOAD reply: arms what it read, records the window. Returns
    /// whether the read stopped at its limit.
    fn apply_load(&mut self, shard: u32, reply: Value) -> Result<bool, Error> {
        let Some((window, lists)) = decode_load(reply)? else {
            self.stats.fenced += 1;
            self.drop_shard(shard, ShardLoss::Fenced);
            return Ok(false);
        };
        // Pending tasks are armed at their run-at, in-flight ones at their visibility
        // deadline plus the claim horizon (the wheel is polled that far ahead).
        for (list, shift) in lists.into_iter().zip([0, self.cfg.ahead_ms()]) {
            let mut it = array(list)?.into_iter();
            while let (Some(id), Some(at), Some(v)) = (it.next(), it.next(), it.next()) {
                let (id, at, v) = (string(id)?, int(&at)? as u64, int(&v)? as u64);
                self.arm(shard, id, at + shift, v);
            }
        }
        let more = matches!(window, Window::Loaded { more: true, .. });
        if let Some(o) = self.owned.get_mut(&shard) {
            o.window = window;
        }
        Ok(more)
    }
}
