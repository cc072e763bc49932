//! Claims: what the wheel says is due within the claim horizon, claimed in one pipeline.

#[allow(unused_imports)]
use super::*;

impl Worker {
    /// Claims everything due within the claim horizon in one pipeline (one script call per
    /// shard and batch, carrying the acknowledgements held so far) and puts the claims in the
    /// deliverer, to be handed out at their run-at: one write round trip per wake-up whatever
    /// the number of shards, which matters when every write waits for an fsync
    /// (`appendfsync always`).
    pub(crate) fn claim_due(&mut self) -> Result<(), Error> {
        let ahead = self.cfg.ahead_ms();
        let (due, unsure) = self.claims_wanted(self.now_ms() + ahead);
        if due.is_empty() && unsure.is_empty() {
            return Ok(());
        }
        let vis = self.cfg.visibility_timeout.as_millis() as u64;
        let now_arg = self.cfg.now_arg();
        let sha = scripts().deliver.get_hash().to_string();
        let node_arg = self.node_arg();
        let mut pipe = redis::pipe();
        let acks = std::mem::take(&mut self.pending_acks);
        let ack_calls = self.ack_calls(&mut pipe, &acks);
        let mut calls: Vec<(u32, u64)> = Vec::new();
        let mut sent: Vec<(u32, u64, String)> = Vec::new();
        for (set, force) in [(&due, "0"), (&unsure, "1")] {
            for (shard, ids) in set {
                let Some(epoch) = self.owned.get(shard).map(|o| o.epoch) else {
                    continue;
                };
                for chunk in ids.chunks(self.cfg.batch) {
                    let keys = &self.ns.shards[*shard as usize].0;
                    let cmd = pipe.cmd("EVALSHA").arg(&sha).arg(4).arg(keys.as_slice());
                    cmd.arg(&now_arg)
                        .arg(epoch)
                        .arg(vis)
                        .arg(ahead)
                        .arg(node_arg)
                        .arg(force);
                    cmd.arg(chunk);
                    calls.push((*shard, epoch));
                    sent.extend(chunk.iter().map(|id| (*shard, epoch, id.clone())));
                }
            }
        }
        if calls.is_empty() {
            self.pending_acks = acks;
            return Ok(());
        }
        let replies = self
            .con()
            .and_then(|c| Ok(query_pipe::<Vec<Value>>(c, &pipe)?));
        #[cfg(test)]
        let replies = match std::mem::take(&mut self.lose_claim_replies) {
            true => replies.and_then(|_| {
                let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reply lost");
                Err(Error::Redis(e.into()))
            }),
            false => replies,
        };
        // Without replies these claims may or may not have been applied: sent again, forced.
        let replies = match replies {
            Ok(r) => r,
            Err(e) => {
                // Unanswered: the acknowledgements are held for the next try (see
                // `flush_acks`), ahead of any settled since.
                self.unsure = sent;
                let later = std::mem::replace(&mut self.pending_acks, acks);
                self.pending_acks.extend(later);
                return Err(e);
            }
        };
        let after = self.clock.local_us();
        let mut replies = replies.into_iter();
        let ack_replies: Vec<Value> = replies.by_ref().take(ack_calls.len()).collect();
        self.ack_replies(&acks, ack_calls, ack_replies)?;
        for ((shard, epoch), reply) in calls.into_iter().zip(replies) {
            let mut reply = array(reply)?.into_iter();
            let mut head = || {
                reply
                    .next()
                    .ok_or_else(|| Error::Protocol("DELIVER".into()))
            };
            let status = int(&head()?)?;
            let server_now = int(&head()?)? as u64;
            let server_us = int(&head()?)?;
            // The claims below wait for this node's clock, whatever node holds the shard
            // later on.
            let node = self.clock.observe(&string(head()?)?, server_us, after);
            if status < 0 {
                self.stats.fenced += 1;
                self.drop_shard(shard, ShardLoss::Fenced);
                continue;
            }
            for entry in reply {
                self.take_claim(shard, epoch, node, server_now, entry)?;
            }
        }
        Ok(())
    }

    /// A claimed run's recurrence (decoded from its stored form `rec`) and what its
    /// acknowledgement re-arms: `None` for a one-shot task, `Some(None)` when this worker
    /// cannot evaluate the recurrence, else `Some(Some(next run ms, 0 when none))`.
    pub(crate) fn next_run(
        &mut self,
        rec: &str,
        due_ms: u64,
        claimed_ms: u64,
    ) -> (Option<Recurrence>, Option<Option<u64>>) {
        if rec.is_empty() {
            return (None, None);
        }
        if self.rules.len() > 1024 {
            self.rules.clear();
        }
        let entry = self.rules.entry(rec.to_string()).or_insert_with(|| {
            let r = Recurrence::decode(rec).ok().flatten()?;
            let rule = r.rule().ok()?;
            Some((r, rule))
        });
        match entry {
            Some((r, rule)) => (
                Some(r.clone()),
                Some(Some(rule.next_after(due_ms, claimed_ms).unwrap_or(0))),
            ),
            None => (Recurrence::decode(rec).ok().flatten(), Some(None)),
        }
    }

    /// What to claim now: the wheel's tasks due by `until` (the claim horizon), and the
    /// claims whose reply was lost, still under the epoch they were sent with; by shard.
    #[allow(clippy::type_complexity)]
    fn claims_wanted(
        &mut self,
        until: u64,
    ) -> (BTreeMap<u32, Vec<String>>, BTreeMap<u32, Vec<String>>) {
        let mut due: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        while let Some((_, k)) = self.wheel.poll_expired(until) {
            self.index.remove(&k);
            due.entry(k.0).or_default().push(k.1);
        }
        let mut unsure: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (shard, epoch, id) in std::mem::take(&mut self.unsure) {
            if self.owned.get(&shard).is_some_and(|o| o.epoch == epoch) {
                unsure.entry(shard).or_default().push(id);
            }
        }
        (due, unsure)
    }

    /// Takes in one entry of a DELIVER reply: a claim goes to the deliverer (and is armed
    /// again at its visibility deadline), a task not yet claimable is armed at its time.
    fn take_claim(
        &mut self,
        shard: u32,
        epoch: u64,
        node: u32,
        server_now: u64,
        entry: Value,
    ) -> Result<(), Error> {
        let ahead = self.cfg.ahead_ms();
        let mut e = array(entry)?.into_iter();
        let mut next = || {
            e.next()
                .ok_or_else(|| Error::Protocol("DELIVER entry".into()))
        };
        match int(&next()?)? {
            1 => {
                let id = string(next()?)?;
                let version = int(&next()?)? as u64;
                let attempt = int(&next()?)? as u32;
                let due_ms = int(&next()?)? as u64;
                let payload = bytes(next()?)?;
                let rec = string(next()?)?;
                let visible_at = int(&next()?)? as u64;
                // Claimed again if still unacknowledged at its visibility deadline.
                self.arm(shard, id.clone(), visible_at + ahead, version);
                let (recurrence, next_run) = self.next_run(&rec, due_ms, server_now);
                self.deliverer.push(Claimed {
                    delivery: Delivery {
                        id,
                        payload,
                        due_ms,
                        attempt,
                        version,
                        shard,
                        epoch,
                        claimed_at_ms: server_now,
                        recurrence,
                    },
                    next: next_run,
                    node,
                });
            }
            2 => {
                let id = string(next()?)?;
                let at = int(&next()?)? as u64;
                let version = int(&next()?)? as u64;
                // Not before the next millisecond, should the estimate be ahead.
                let at = at.max(self.now_ms() + ahead + 1);
                self.arm(shard, id, at, version);
            }
            _ => {}
        }
        Ok(())
    }
}
