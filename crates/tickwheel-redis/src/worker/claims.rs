//! Claims: what the schedule says is due within the claim-ahead, claimed in one pipeline.

use std::collections::{BTreeMap, HashMap};

use super::delivery::{Delivery, Held};
use super::{Redelivery, ShardLoss, Worker};
use crate::namespace::Error;
use crate::protocol;
use crate::recurrence::{split_anchor, Recurrence};

/// How long due tasks of a paused shard wait in the wheel before they are looked at again,
/// ms (a resume re-arms them at once).
const PAUSED_RECHECK_MS: u64 = 1000;

impl Worker {
    /// Claims everything due within the claim-ahead in one pipeline (one script call per
    /// shard and batch, carrying the acknowledgements held so far) and puts the claims in the
    /// deliverer, to be handed out at their run-at: one write round trip per wake-up whatever
    /// the number of shards, which matters when every write waits for an fsync
    /// (`appendfsync always`).
    pub(crate) fn claim_due(&mut self) -> Result<(), Error> {
        let ahead = self.cfg.ahead_ms();
        let (due, noticed, unsure) = self.claims_wanted(self.now_ms() + ahead);
        // (shard, epoch, force, ids): one DELIVER call each.
        let mut batches: Vec<(u32, u64, bool, Vec<String>)> = Vec::new();
        for (set, force) in [(due, false), (unsure, true)] {
            for (shard, ids) in set {
                let Some(epoch) = self.shards.epoch(shard) else {
                    continue;
                };
                for chunk in ids.chunks(self.cfg.batch) {
                    batches.push((shard, epoch, force, chunk.to_vec()));
                }
            }
        }
        if batches.is_empty() {
            return Ok(());
        }
        let delivers: Vec<redis::Cmd> = batches
            .iter()
            .map(|b| protocol::command(&self.deliver_call(b)))
            .collect();
        let acks = self.outbox.take_acks();
        let (answered, mut replies) = match self.send_with_acks(&acks, delivers) {
            Ok(r) => r,
            Err(e) => {
                // Without replies these claims may or may not have been applied: sent again,
                // forced; the acknowledgements they carried are held for the next try.
                self.outbox.set_unsure(
                    batches
                        .into_iter()
                        .flat_map(|(s, e, _, ids)| ids.into_iter().map(move |id| (s, e, id)))
                        .collect(),
                );
                self.outbox.hold_again(acks);
                return Err(e);
            }
        };
        let after = self.clock.local_us();
        self.apply_acks(&acks, answered);
        for b in &batches {
            let reply = protocol::next_reply(&self.deliver_call(b), &mut replies)?;
            // The claims below wait for this node's clock, whatever node holds the shard
            // later on.
            let node = self.clock.observe(&reply.node, reply.now_us, after);
            if reply.paused {
                // Paused since the worker last heard: nothing was claimed. The tasks wait in
                // the wheel, and no claim is sent for the shard until a resume notice or a
                // renewal says it is resumed.
                if self.shards.set_paused(b.0, true) {
                    self.forward(false);
                }
                self.park(b.0, b.3.clone());
                continue;
            }
            let Some(claims) = reply.claims else {
                self.stats.fenced += 1;
                self.drop_shard(b.0, ShardLoss::Fenced);
                continue;
            };
            for claim in claims {
                self.take_claim((b.0, b.1, b.2), node, reply.now_ms, &noticed, claim);
            }
        }
        Ok(())
    }

    /// The DELIVER call of one batch (shard, epoch, force, ids).
    fn deliver_call<'a>(&'a self, b: &'a (u32, u64, bool, Vec<String>)) -> protocol::Deliver<'a> {
        protocol::Deliver {
            keys: &self.ns.shards[b.0 as usize],
            now: protocol::now(&self.cfg),
            tenure: protocol::Tenure::new(b.1, &self.id),
            visibility_ms: self.cfg.visibility_timeout.as_millis() as u64,
            ahead_ms: self.cfg.ahead_ms(),
            cluster: self.redis.on_cluster(),
            force: b.2,
            ids: &b.3,
        }
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
        // A retried run carries the due of the run it retries: the series keeps that phase.
        let (rec, anchor) = split_anchor(rec);
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
        let phase = anchor.unwrap_or(due_ms).min(due_ms);
        match entry {
            Some((r, rule)) => (
                Some(r.clone()),
                Some(Some(
                    rule.next_after(phase, due_ms.max(claimed_ms)).unwrap_or(0),
                )),
            ),
            None => (Recurrence::decode(rec).ok().flatten(), Some(None)),
        }
    }

    /// What to claim now: the schedule's tasks due by `until` (now plus the claim-ahead), with the
    /// instants the notices of those stored late arrived, and the claims whose reply was
    /// lost, still under the epoch they were sent with; by shard.
    #[allow(clippy::type_complexity)]
    fn claims_wanted(
        &mut self,
        until: u64,
    ) -> (
        BTreeMap<u32, Vec<String>>,
        HashMap<(u32, String), u64>,
        BTreeMap<u32, Vec<String>>,
    ) {
        let (mut due, noticed) = self.schedule.drain_due(until);
        // Nothing is claimed of a paused shard, nor of one back from a pause before its
        // window is read again (see `Owned::resuming`): what is due of it waits.
        let waiting: Vec<u32> = due
            .keys()
            .copied()
            .filter(|&s| self.shards.paused_or_resuming(s, self.link.subscribed))
            .collect();
        for shard in waiting {
            let ids = due.remove(&shard).unwrap_or_default();
            self.park(shard, ids);
        }
        let mut unsure: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (shard, epoch, id) in self.outbox.take_unsure() {
            if self.shards.holds(shard, epoch) {
                unsure.entry(shard).or_default().push(id);
            }
        }
        (due, noticed, unsure)
    }

    /// Puts due tasks of a shard that may not be claimed now (paused, or resuming) back in
    /// the wheel, [`PAUSED_RECHECK_MS`] later: a resume reads the shard's window again and
    /// arms them at their run-at anyway, so this only keeps them from spinning.
    fn park(&mut self, shard: u32, ids: Vec<String>) {
        let at = self.now_ms() + self.cfg.ahead_ms() + PAUSED_RECHECK_MS;
        for id in ids {
            // Version 0: any arming the window read makes (a real version) replaces it.
            self.schedule.arm(shard, id, at, 0);
        }
    }

    /// Takes in one entry of a DELIVER reply to a batch (shard, epoch, forced): a claim goes
    /// to the deliverer (and is armed again at its visibility deadline), a task not yet
    /// claimable is armed at its time. `noticed`: when the notices of tasks stored after
    /// their run-at arrived.
    ///
    /// The instant a delivery's lateness is timed from: a first delivery's run-at, or the
    /// arrival of its notice when that came later (a task stored or rescheduled into the
    /// past could not be on time); a redelivery's run-at, or the claim that redelivered it
    /// when that came later (a task left in flight past its visibility deadline is claimable
    /// again from that deadline, which DELIVER does not return: the claim follows it within
    /// a step once the worker's wheel reaches it).
    fn take_claim(
        &mut self,
        (shard, epoch, forced): (u32, u64, bool),
        node: u32,
        server_now: u64,
        noticed: &HashMap<(u32, String), u64>,
        claim: protocol::Claim,
    ) {
        match claim {
            protocol::Claim::Claimed(c) => {
                self.stats.claimed += 1;
                let redelivery = match (c.attempt > 1, c.was_in_flight, forced) {
                    (false, _, _) => None,
                    (true, true, true) => Some(Redelivery::LostClaimReply),
                    (true, true, false) => Some(Redelivery::VisibilityTimeout),
                    (true, false, _) => Some(Redelivery::Requeued),
                };
                // Claimed again if still unacknowledged at its visibility deadline.
                self.schedule
                    .arm(shard, c.id.clone(), c.rearm_at_ms, c.version);
                let (recurrence, next_run) = self.next_run(&c.recurrence, c.due_ms, server_now);
                let timed_from_ms = match redelivery {
                    None => {
                        let key = (shard, c.id.clone());
                        c.due_ms.max(noticed.get(&key).copied().unwrap_or(0))
                    }
                    Some(_) => c.due_ms.max(server_now),
                };
                self.handoff.local.push(Held {
                    delivery: Delivery {
                        id: c.id,
                        payload: c.payload,
                        due_ms: c.due_ms,
                        attempt: c.attempt,
                        version: c.version,
                        shard,
                        epoch,
                        claimed_at_ms: server_now,
                        recurrence,
                    },
                    next: next_run,
                    node,
                    redelivery,
                    timed_from_ms,
                });
            }
            protocol::Claim::NotYet { id, at_ms, version } => {
                // Not before the next millisecond, should the estimate be ahead.
                let at = at_ms.max(self.now_ms() + self.cfg.ahead_ms() + 1);
                self.schedule.arm(shard, id, at, version);
            }
            protocol::Claim::Gone { .. } => {}
        }
    }
}
