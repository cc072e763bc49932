//! Outcomes: the handler's acknowledgements and retries, held until Redis answers for them.

#[allow(unused_imports)]
use super::*;

/// An acknowledgement waiting to be sent.
#[derive(Clone, Debug)]
pub(crate) struct PendingAck {
    pub(crate) shard: u32,
    pub(crate) epoch: u64,
    pub(crate) id: String,
    pub(crate) version: u64,
    pub(crate) attempt: u32,
    /// A recurring task's next run (ms), 0 for none: the ACK script re-arms it.
    pub(crate) next: u64,
}

/// How long the I/O thread may hold an acknowledgement for a claim to carry it, ms: fewer
/// write round trips (fsync waits under `appendfsync always`) while deliveries are frequent,
/// at the price of that much more redelivery after a crash.
pub(crate) const ACK_DELAY_MS: u64 = 20;

/// Held acknowledgements that go out at once.
pub(crate) const ACK_MAX: usize = 4096;

impl Worker {
    /// Takes in what became of a claimed task.
    pub(crate) fn settle(&mut self, d: Done) {
        let Some(outcome) = d.outcome else {
            self.stats.lapsed += 1;
            self.pending_retries.push((d, None));
            return;
        };
        self.stats.delivered += 1;
        match outcome {
            Outcome::Ack => match d.next {
                Some(None) => self.stats.bad_recurrences += 1,
                next => {
                    if self.pending_acks.is_empty() {
                        self.acks_due_ms = self.now_ms() + ACK_DELAY_MS;
                    }
                    self.pending_acks.push(PendingAck {
                        shard: d.shard,
                        epoch: d.epoch,
                        id: d.id,
                        version: d.version,
                        attempt: d.attempt,
                        next: next.flatten().unwrap_or(0),
                    })
                }
            },
            Outcome::RetryAfter(after) => self.pending_retries.push((d, Some(after))),
            Outcome::Leave => {}
        }
    }

    /// Sends the retries the handler asked for, and the acknowledgements when `force`d, when
    /// many are held or when the oldest has waited [`ACK_DELAY_MS`] (they also ride with
    /// every claim and go before every renewal).
    pub(crate) fn send_outcomes(&mut self, force: bool) -> Result<(), Error> {
        self.send_retries()?;
        if force || self.pending_acks.len() >= ACK_MAX || self.now_ms() >= self.acks_due_ms {
            self.flush_acks()?;
        }
        Ok(())
    }

    /// Sends the held acknowledgements now. They stay held until Redis answers for them: an
    /// error (an outage, a lost reply) keeps them for the next try, fenced by their epoch as
    /// ever, so a task delivered during an outage is not delivered again after it.
    pub(crate) fn flush_acks(&mut self) -> Result<(), Error> {
        if self.pending_acks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        let calls = self.ack_calls(&mut pipe, &self.pending_acks);
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        let acks = std::mem::take(&mut self.pending_acks);
        self.ack_replies(&acks, calls, replies)
    }

    /// Adds ACK script calls for `acks` (grouped by shard and epoch, [`Config::batch`] a call)
    /// to `pipe`; returns each call's shard and the indices of its acks.
    pub(crate) fn ack_calls(
        &self,
        pipe: &mut redis::Pipeline,
        acks: &[PendingAck],
    ) -> Vec<(u32, Vec<usize>)> {
        let mut groups: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
        for (i, a) in acks.iter().enumerate() {
            groups.entry((a.shard, a.epoch)).or_default().push(i);
        }
        let sha = scripts().ack.get_hash();
        let mut calls = Vec::new();
        for ((shard, epoch), idx) in groups {
            for chunk in idx.chunks(self.cfg.batch) {
                let keys = &self.ns.shards[shard as usize].0;
                let cmd = pipe
                    .cmd("EVALSHA")
                    .arg(sha)
                    .arg(4)
                    .arg(keys.as_slice())
                    .arg(epoch)
                    .arg(&self.ns.channel)
                    .arg(shard);
                for &i in chunk {
                    cmd.arg(&acks[i].id)
                        .arg(acks[i].version)
                        .arg(acks[i].attempt)
                        .arg(acks[i].next);
                }
                calls.push((shard, chunk.to_vec()));
            }
        }
        calls
    }

    pub(crate) fn ack_replies(
        &mut self,
        acks: &[PendingAck],
        calls: Vec<(u32, Vec<usize>)>,
        replies: Vec<Value>,
    ) -> Result<(), Error> {
        for ((shard, idx), reply) in calls.into_iter().zip(replies) {
            let mut reply = array(reply)?.into_iter();
            if int(&reply.next().ok_or_else(|| Error::Protocol("ACK".into()))?)? < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard, ShardLoss::Fenced);
                continue;
            }
            for (i, ok) in idx.into_iter().zip(reply) {
                if int(&ok)? == 1 {
                    self.stats.acked += 1;
                    self.disarm(shard, acks[i].id.clone());
                } else {
                    self.stats.stale_acks += 1;
                }
            }
        }
        Ok(())
    }

    /// Sends retries and put-backs of lapsed claims in one pipeline.
    pub(crate) fn send_retries(&mut self) -> Result<(), Error> {
        if self.pending_retries.is_empty() {
            return Ok(());
        }
        let now_arg = self.cfg.now_arg();
        let sha = scripts().retry.get_hash().to_string();
        let mut pipe = redis::pipe();
        for (d, after) in &self.pending_retries {
            let keys = &self.ns.shards[d.shard as usize].0;
            pipe.cmd("EVALSHA")
                .arg(&sha)
                .arg(4)
                .arg(keys.as_slice())
                .arg(&now_arg)
                .arg(d.epoch)
                .arg(&d.id)
                .arg(d.version)
                .arg(d.attempt)
                .arg(after.map_or(0, |a| a.as_millis() as u64))
                .arg(if after.is_none() { "1" } else { "0" });
        }
        let replies: Vec<Value> = query_pipe(self.con()?, &pipe)?;
        for ((d, after), r) in std::mem::take(&mut self.pending_retries)
            .into_iter()
            .zip(replies)
        {
            let r = array(r)?;
            match int(r.first().ok_or_else(|| Error::Protocol("RETRY".into()))?)? {
                1 => {
                    if after.is_some() {
                        self.stats.retried += 1;
                    }
                    let at = int(r.get(1).ok_or_else(|| Error::Protocol("RETRY".into()))?)?;
                    if self.owned.get(&d.shard).is_some_and(|o| o.epoch == d.epoch) {
                        self.arm(d.shard, d.id, at as u64, d.version);
                    }
                }
                -1 => {
                    self.stats.fenced += 1;
                    self.drop_shard(d.shard, ShardLoss::Fenced);
                }
                _ => self.stats.stale_acks += 1,
            }
        }
        Ok(())
    }
}
