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

impl Worker {
    /// Drops the in-memory windows; the next [`tick`](Worker::tick) loads them again from
    /// Redis. Workers do this by themselves after a reconnect; callers need it only to make a
    /// step deterministic (tests on a manual clock, where a notification may still be on its
    /// way when the clock moves).
    pub fn reload_windows(&mut self) {
        self.wheel = Wheel::with_start(self.now_ms());
        self.index.clear();
        for o in self.owned.values_mut() {
            o.loaded_until = None;
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
        let to = now + window;
        let wanted: Vec<(u32, u64, Option<Resume>)> = self
            .owned
            .iter()
            .filter_map(|(&s, o)| match o.loaded_until {
                None => Some((s, o.epoch, None)),
                Some(h) if o.more || h < now + window * 3 / 4 => {
                    Some((s, o.epoch, Some(o.resume.clone())))
                }
                Some(_) => None,
            })
            .collect();
        if wanted.is_empty() {
            return Ok(false);
        }
        // One pipeline (one round trip) reads a share of the budget for every shard.
        let limit = (self.cfg.window_limit / wanted.len()).max(100);
        let mut pipe = redis::pipe();
        for (s, epoch, from) in &wanted {
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
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let mut more = false;
        for ((shard, _, _), reply) in wanted.into_iter().zip(replies) {
            let mut r = array(reply)?.into_iter();
            let horizon = int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)?;
            if horizon < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard);
                continue;
            }
            let mut head = || -> Result<u64, Error> {
                Ok(int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)? as u64)
            };
            let bucket = head()?;
            let generation = string(r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)?;
            let mut head = || -> Result<u64, Error> {
                Ok(int(&r.next().ok_or_else(|| Error::Protocol("LOAD".into()))?)? as u64)
            };
            let offset = head()?;
            let partial = head()? == 1;
            let resume = Resume {
                bucket,
                generation,
                offset,
            };
            // Pending tasks are armed at their run-at, in-flight ones at their visibility
            // deadline plus the claim horizon (the wheel is polled that far ahead).
            for (list, shift) in r.zip([0, self.cfg.ahead_ms()]) {
                let mut it = array(list)?.into_iter();
                while let (Some(id), Some(at), Some(v)) = (it.next(), it.next(), it.next()) {
                    let (id, at, v) = (string(id)?, int(&at)? as u64, int(&v)? as u64);
                    self.arm(shard, id, at + shift, v);
                }
            }
            if let Some(o) = self.owned.get_mut(&shard) {
                o.loaded_until = Some(horizon as u64);
                o.resume = resume;
                o.more = partial;
            }
            more |= partial;
        }
        Ok(more)
    }
}
