//! Outcomes: the handler's acknowledgements and retries, held until Redis answers for them.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use super::{Outcome, Redelivery, ShardLoss, Worker};
use crate::namespace::{query_pipe, Error};
use crate::protocol;

/// What became of a claimed task: `outcome` is `None` when it was not delivered (lapsed).
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) shard: u32,
    pub(crate) epoch: u64,
    pub(crate) id: String,
    pub(crate) version: u64,
    pub(crate) attempt: u32,
    pub(crate) next: Option<Option<u64>>,
    pub(crate) outcome: Option<Outcome>,
    /// How late the handler got it, ms past
    /// [`Held::timed_from_ms`](super::delivery::Held::timed_from_ms) by the clock of the node that
    /// claimed it (`None`: not delivered).
    pub(crate) late_ms: Option<u64>,
    /// Why it was delivered again, when its attempt was not the first.
    pub(crate) redelivery: Option<Redelivery>,
}

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

/// Outcomes not yet answered by Redis: every one is sent, or sent again after an error,
/// until Redis answers for it (each fenced by the epoch it was delivered under).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Acknowledgements not sent yet: they ride with the next claim, or go once the oldest
    /// has waited [`ACK_DELAY_MS`] (see `send_outcomes`).
    acks: Vec<PendingAck>,
    /// When the held acknowledgements go out at the latest, namespace-clock ms.
    acks_due_ms: u64,
    /// Retries the handler asked for (`Some(delay)`), and claims that lapsed undelivered
    /// (`None`: put back as they were, so they are claimed again at once should the worker
    /// still hold their shard, instead of after the visibility timeout), not sent yet.
    retries: Vec<(Done, Option<Duration>)>,
    /// Claims sent whose reply never came (shard, epoch, id): Redis may have applied them.
    /// The next claim sends them again with `force`, which takes a task in flight too, so a
    /// claim that was applied is delivered at its run-at instead of after the visibility
    /// timeout (see `claim_due`).
    unsure: Vec<(u32, u64, String)>,
    /// Failed attempts not sent yet (FAIL: retried by the policy, or to the failed set).
    fails: Vec<(Done, FailAsk)>,
}

/// A failed attempt as the handler reported it.
#[derive(Debug)]
pub(crate) struct FailAsk {
    /// Bounded to [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN).
    error: String,
    retry: protocol::RetryAsk,
}

impl Outbox {
    /// Holds an acknowledgement; the first one held sets when they go at the latest.
    fn hold_ack(&mut self, ack: PendingAck, now_ms: u64) {
        if self.acks.is_empty() {
            self.acks_due_ms = now_ms + ACK_DELAY_MS;
        }
        self.acks.push(ack);
    }

    /// Takes the held acknowledgements out, to send.
    pub(crate) fn take_acks(&mut self) -> Vec<PendingAck> {
        std::mem::take(&mut self.acks)
    }

    /// Puts acknowledgements that got no answer back among the held ones, ahead of any
    /// settled since.
    pub(crate) fn hold_again(&mut self, acks: Vec<PendingAck>) {
        let later = std::mem::replace(&mut self.acks, acks);
        self.acks.extend(later);
    }

    /// When the held acknowledgements are due, if any are held.
    pub(crate) fn acks_due_ms(&self) -> Option<u64> {
        (!self.acks.is_empty()).then_some(self.acks_due_ms)
    }

    /// Whether retries or unsure claims wait to be sent: the next step should come at once.
    pub(crate) fn wants_io_now(&self) -> bool {
        !self.retries.is_empty() || !self.unsure.is_empty() || !self.fails.is_empty()
    }

    /// Outcomes (acknowledgements, retries, lapsed claims) held.
    pub(crate) fn held(&self) -> usize {
        self.acks.len() + self.retries.len() + self.fails.len()
    }

    /// Records claims whose reply never came, to send again forced.
    pub(crate) fn set_unsure(&mut self, unsure: Vec<(u32, u64, String)>) {
        self.unsure = unsure;
    }

    /// Takes out the claims whose reply never came.
    pub(crate) fn take_unsure(&mut self) -> Vec<(u32, u64, String)> {
        std::mem::take(&mut self.unsure)
    }
}

impl Worker {
    /// Takes in what became of a claimed task (delivered, with the handler's outcome, or
    /// lapsed), into the counters and the outbox.
    pub(crate) fn take_outcome(&mut self, mut d: Done) {
        let Some(outcome) = d.outcome.take() else {
            self.stats.lapsed += 1;
            self.outbox.retries.push((d, None));
            return;
        };
        self.stats.delivered += 1;
        if let Some(cause) = d.redelivery {
            self.stats.redelivered += 1;
            self.stats.redelivered_by.record(cause);
        }
        if let Some(ms) = d.late_ms {
            match d.redelivery {
                None => self.stats.lateness.record(ms),
                Some(_) => self.stats.redelivery_lateness.record(ms),
            }
        }
        match outcome {
            Outcome::Ack => match d.next {
                Some(None) => self.stats.bad_recurrences += 1,
                next => {
                    let now = self.now_ms();
                    let ack = PendingAck {
                        shard: d.shard,
                        epoch: d.epoch,
                        id: d.id,
                        version: d.version,
                        attempt: d.attempt,
                        next: next.flatten().unwrap_or(0),
                    };
                    self.outbox.hold_ack(ack, now);
                }
            },
            Outcome::RetryAfter(after) => self.outbox.retries.push((d, Some(after))),
            Outcome::Failed { error, retry_in } => {
                let retry = match retry_in {
                    None => protocol::RetryAsk::Policy,
                    Some(after) => protocol::RetryAsk::AfterMs(retry_ms(after)),
                };
                let error = crate::failure::bounded(&error);
                self.outbox.fails.push((d, FailAsk { error, retry }));
            }
            Outcome::NonRetryable { error } => {
                let error = crate::failure::bounded(&error);
                let retry = protocol::RetryAsk::Never;
                self.outbox.fails.push((d, FailAsk { error, retry }));
            }
            Outcome::Leave => {}
        }
    }

    /// Sends the retries the handler asked for, and the acknowledgements when `force`d, when
    /// many are held or when the oldest has waited [`ACK_DELAY_MS`] (they also ride with
    /// every claim and go before every renewal).
    pub(crate) fn send_outcomes(&mut self, force: bool) -> Result<(), Error> {
        self.send_retries()?;
        self.send_fails()?;
        let many = self.outbox.acks.len() >= ACK_MAX;
        if force || many || self.now_ms() >= self.outbox.acks_due_ms {
            self.flush_acks()?;
        }
        Ok(())
    }

    /// Sends the held acknowledgements now. They stay held until Redis answers for them: an
    /// error (an outage, a lost reply) keeps them for the next try, fenced by their epoch as
    /// ever, so a task delivered during an outage is not delivered again after it.
    pub(crate) fn flush_acks(&mut self) -> Result<(), Error> {
        if self.outbox.acks.is_empty() {
            return Ok(());
        }
        let acks = self.outbox.take_acks();
        match self.send_with_acks(&acks, Vec::new()) {
            Ok((answered, _)) => {
                self.apply_acks(&acks, answered);
                Ok(())
            }
            Err(e) => {
                self.outbox.hold_again(acks);
                Err(e)
            }
        }
    }

    /// Sends `acks` (ACK calls grouped by shard and epoch, [`Config::batch`](crate::Config::batch)
    /// a call) and then the commands `after`, in one pipeline: one round trip. Returns what each
    /// ACK call answered (its shard, the indices of its acks in `acks`, and `None` when fenced),
    /// and the replies to `after`, in order.
    #[allow(clippy::type_complexity)]
    pub(crate) fn send_with_acks(
        &mut self,
        acks: &[PendingAck],
        after: Vec<redis::Cmd>,
    ) -> Result<
        (
            Vec<(u32, Vec<usize>, Option<Vec<bool>>)>,
            std::vec::IntoIter<Value>,
        ),
        Error,
    > {
        let mut groups: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
        for (i, a) in acks.iter().enumerate() {
            groups.entry((a.shard, a.epoch)).or_default().push(i);
        }
        let batches: Vec<(u32, u64, Vec<usize>)> = groups
            .into_iter()
            .flat_map(|((s, e), idx)| {
                let chunks: Vec<Vec<usize>> =
                    idx.chunks(self.cfg.batch).map(<[usize]>::to_vec).collect();
                chunks.into_iter().map(move |c| (s, e, c))
            })
            .collect();
        let items: Vec<Vec<protocol::AckItem>> = batches
            .iter()
            .map(|(_, _, idx)| idx.iter().map(|&i| acks[i].item()).collect())
            .collect();
        let calls: Vec<protocol::Ack> = batches
            .iter()
            .zip(&items)
            .map(|((shard, epoch, _), items)| protocol::Ack {
                keys: &self.ns.shards[*shard as usize],
                tenure: protocol::Tenure::new(*epoch, &self.id),
                channel: &self.ns.channel,
                shard: *shard,
                acks: items,
            })
            .collect();
        let mut pipe = redis::pipe();
        calls.iter().for_each(|c| protocol::push(&mut pipe, c));
        for c in after {
            pipe.add_command(c);
        }
        if pipe.is_empty() {
            return Ok((Vec::new(), Vec::new().into_iter()));
        }
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let replies: Vec<Value> = query_pipe(con, &pipe)?;
        #[cfg(test)]
        if std::mem::take(&mut self.lose_replies) {
            let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reply lost");
            return Err(Error::Redis(e.into()));
        }
        let mut replies = replies.into_iter();
        let mut answered = Vec::with_capacity(calls.len());
        for (call, (shard, _, idx)) in calls.iter().zip(batches) {
            answered.push((shard, idx, protocol::next_reply(call, &mut replies)?));
        }
        Ok((answered, replies))
    }

    /// Takes in what Redis answered for acknowledgements: accepted ones leave the wheel,
    /// stale ones are counted, a fenced call drops its shard.
    pub(crate) fn apply_acks(
        &mut self,
        acks: &[PendingAck],
        answered: Vec<(u32, Vec<usize>, Option<Vec<bool>>)>,
    ) {
        for (shard, idx, reply) in answered {
            let Some(oks) = reply else {
                self.stats.fenced += 1;
                self.drop_shard(shard, ShardLoss::Fenced);
                continue;
            };
            for (i, ok) in idx.into_iter().zip(oks) {
                if ok {
                    self.stats.acked += 1;
                    self.schedule.disarm(shard, acks[i].id.clone());
                } else {
                    self.stats.stale_acks += 1;
                }
            }
        }
    }

    /// Sends retries and put-backs of lapsed claims in one pipeline.
    pub(crate) fn send_retries(&mut self) -> Result<(), Error> {
        if self.outbox.retries.is_empty() {
            return Ok(());
        }
        let now = protocol::now(&self.cfg);
        let calls: Vec<protocol::Retry> = self
            .outbox
            .retries
            .iter()
            .map(|(d, after)| protocol::Retry {
                keys: &self.ns.shards[d.shard as usize],
                now,
                tenure: protocol::Tenure::new(d.epoch, &self.id),
                id: &d.id,
                version: d.version,
                attempt: d.attempt,
                after_ms: after.map(retry_ms),
            })
            .collect();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let replies = protocol::invoke_all(con, &calls)?;
        drop(calls);
        for ((d, after), r) in std::mem::take(&mut self.outbox.retries)
            .into_iter()
            .zip(replies)
        {
            match r {
                protocol::RetryReply::Requeued { run_at_ms } => {
                    if after.is_some() {
                        self.stats.retried += 1;
                    }
                    if self.shards.holds(d.shard, d.epoch) {
                        self.schedule.arm(d.shard, d.id, run_at_ms, d.version);
                    }
                }
                protocol::RetryReply::Fenced => {
                    self.stats.fenced += 1;
                    self.drop_shard(d.shard, ShardLoss::Fenced);
                }
                protocol::RetryReply::Stale => self.stats.stale_acks += 1,
            }
        }
        Ok(())
    }
}

impl Worker {
    /// Sends the failed attempts in one pipeline (FAIL). Each stays held until Redis
    /// answers for it, fenced by the epoch it was delivered under, as acknowledgements are.
    pub(crate) fn send_fails(&mut self) -> Result<(), Error> {
        if self.outbox.fails.is_empty() {
            return Ok(());
        }
        let now = protocol::now(&self.cfg);
        let policy = self.cfg.retry.encode();
        let keep = self.cfg.failed_retention.per_shard(self.ns.shards.len());
        let keep_ms = self.cfg.failed_retention.max_age.as_millis() as u64;
        let draws: Vec<u32> = (0..self.outbox.fails.len())
            .map(|_| jitter_draw())
            .collect();
        let calls: Vec<protocol::Fail> = self
            .outbox
            .fails
            .iter()
            .zip(&draws)
            .map(|((d, ask), &draw)| protocol::Fail {
                keys: &self.ns.shards[d.shard as usize],
                now,
                tenure: protocol::Tenure::new(d.epoch, &self.id),
                channel: &self.ns.channel,
                shard: d.shard,
                id: &d.id,
                version: d.version,
                attempt: d.attempt,
                error: &ask.error,
                retry: ask.retry,
                policy: &policy,
                draw,
                keep,
                keep_ms,
                next_run_ms: d.next.flatten().unwrap_or(0),
            })
            .collect();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let replies = protocol::invoke_all(con, &calls)?;
        drop(calls);
        for ((d, _), r) in std::mem::take(&mut self.outbox.fails)
            .into_iter()
            .zip(replies)
        {
            match r {
                protocol::FailReply::Retrying { run_at_ms, .. } => {
                    self.stats.failed_attempts += 1;
                    self.stats.retried += 1;
                    if self.shards.holds(d.shard, d.epoch) {
                        self.schedule.arm(d.shard, d.id, run_at_ms, d.version);
                    }
                }
                protocol::FailReply::Failed { reason, .. } => {
                    self.stats.failed_attempts += 1;
                    self.stats.failed.record(reason);
                    // A series going on was published at its next run, if in the window.
                    self.schedule.disarm(d.shard, d.id);
                }
                protocol::FailReply::Fenced => {
                    self.stats.fenced += 1;
                    self.drop_shard(d.shard, ShardLoss::Fenced);
                }
                protocol::FailReply::Stale => self.stats.stale_acks += 1,
            }
        }
        Ok(())
    }
}

/// A jitter draw, 0 ..= 999 999: a fresh hash of the time, enough to spread retries (no
/// cryptographic quality needed).
fn jitter_draw() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (RandomState::new().hash_one(t) % 1_000_000) as u32
}

impl PendingAck {
    /// This acknowledgement as an ACK call carries it.
    fn item(&self) -> protocol::AckItem<'_> {
        protocol::AckItem {
            id: &self.id,
            version: self.version,
            attempt: self.attempt,
            next_run_ms: (self.next > 0).then_some(self.next),
        }
    }
}

/// The delay of an [`Outcome::RetryAfter`] in ms: rounded up, and below
/// [`RunAt::MAX_MS`](crate::RunAt::MAX_MS) as documented there.
fn retry_ms(after: Duration) -> u64 {
    let most = crate::RunAt::MAX_MS - 1;
    crate::task::ceil_ms(after).map_or(most, |ms| ms.min(most))
}
