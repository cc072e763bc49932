//! Delivery: claimed tasks wait for their run-at and go to the handler while the lease holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::clock::ServerClock;
use super::notices::Notice;
use super::outcomes::Done;
use super::{Redelivery, Worker};
use crate::recurrence::Recurrence;

/// One delivery of a task to a handler: everything it needs to do the work and to
/// de-duplicate (a task is delivered at least once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The task's id.
    pub id: String,
    /// The payload it was scheduled with.
    pub payload: Vec<u8>,
    /// The run-at instant it is delivered for, ms since the Unix epoch.
    pub due_ms: u64,
    /// Which handler call this is for the task: 1 for the first delivery, higher for each
    /// redelivery (a retry, a snooze, or a delivery cut short by a crash or stall). A claim whose
    /// reply was lost and that the worker sends again is the same attempt. Reset to 0 when a
    /// recurring task is re-armed and when an operator retries a failed task. Failed attempts,
    /// which the retry policy counts, are kept apart
    /// ([`ErrorLog::failures`](crate::ErrorLog::failures)).
    pub attempt: u32,
    /// The task's version: it changes whenever the id is scheduled again or rescheduled, so
    /// `(id, version, attempt)` names one delivery.
    pub version: u64,
    /// The shard it lives in.
    pub shard: u32,
    /// The shard epoch under which it was claimed (with the worker, the fencing token).
    pub epoch: u64,
    /// When Redis handed it out, ms since the Unix epoch (by the namespace's clock).
    pub claimed_at_ms: u64,
    /// For a run of a recurring task, how it repeats: acknowledging the run re-arms the task
    /// at its next run, in the same step. `None` for a one-shot task.
    pub recurrence: Option<Recurrence>,
}

impl Delivery {
    /// The run-at instant as a `SystemTime`.
    pub fn due(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.due_ms)
    }
}

/// What a handler asks the worker to do with a delivery.
///
/// ```
/// # use std::time::Duration;
/// # use tickwheel_redis::{Delivery, Outcome};
/// fn handle(task: &Delivery) -> Outcome {
///     match std::str::from_utf8(&task.payload) {
///         Err(e) => Outcome::non_retryable(format!("not UTF-8: {e}")), // to the failed set now
///         Ok("busy") => Outcome::fail("the downstream is busy"),     // retried by the policy
///         Ok(_) => Outcome::Ack,
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Done: remove the task (a recurring one is re-armed at its next run instead).
    Ack,
    /// The attempt failed, with this error (kept with the task, at most
    /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes). The task is retried after the
    /// retry policy's delay ([`Config::retry`](crate::Config::retry), or its own), or after
    /// `retry_in` when given; once the policy's `max_attempts` attempts have failed it moves
    /// to the failed set instead. A panic in the handler is a failed attempt too, its
    /// message the error.
    Failed {
        /// What went wrong.
        error: String,
        /// The delay before the retry (rounded up to whole ms, as [`Outcome::RetryAfter`]);
        /// `None`: the policy's backoff.
        retry_in: Option<Duration>,
    },
    /// The attempt failed and no retry can succeed: the task moves to the failed set now,
    /// with this error. A recurring series goes on at its next run, unless its policy says
    /// [`stop_series_on_failure`](crate::RetryPolicy::stop_series_on_failure).
    NonRetryable {
        /// What went wrong.
        error: String,
    },
    /// Not a failure: deliver it again after this delay (a "snooze"; nothing is recorded,
    /// and it does not count against the retry policy, though [`Delivery::attempt`] grows),
    /// rounded up to whole milliseconds. A delay of [`RunAt::MAX_MS`](crate::RunAt::MAX_MS)
    /// ms or more (over 142 000 years) is that many ms less one: the task waits, pending,
    /// cancellable and shown by the inspector, practically for ever.
    RetryAfter(Duration),
    /// Do nothing now: the task is delivered again after the visibility timeout.
    Leave,
}

impl Outcome {
    /// [`Outcome::Failed`] with `error`, retried by the policy's backoff.
    pub fn fail(error: impl std::fmt::Display) -> Outcome {
        Outcome::Failed {
            error: error.to_string(),
            retry_in: None,
        }
    }

    /// [`Outcome::NonRetryable`] with `error`.
    pub fn non_retryable(error: impl std::fmt::Display) -> Outcome {
        Outcome::NonRetryable {
            error: error.to_string(),
        }
    }

    /// The failed attempt a panic is: its message (a `&str` or `String` payload; else
    /// "a panic without a message") as the error.
    pub(crate) fn panicked(p: &(dyn std::any::Any + Send)) -> Outcome {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Outcome::fail(format!("panicked: {msg}"))
    }
}

/// A claimed task held for its run-at (not `protocol::Claimed`, which is one entry of a
/// DELIVER reply), and what acknowledging it re-arms: `None` for a
/// one-shot task, `Some(None)` when this worker cannot evaluate its recurrence, else
/// `Some(Some(next run ms, 0 when none))`.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) delivery: Delivery,
    pub(crate) next: Option<Option<u64>>,
    /// The node whose clock judged the claim (an index of [`ServerClock::node`]): the one its
    /// delivery waits for.
    pub(crate) node: u32,
    /// Why it is delivered again, when its attempt is not the first.
    pub(crate) redelivery: Option<Redelivery>,
    /// The instant its lateness is timed from, ms (see `Worker::take_claim`): its run-at,
    /// or later when it could not have been delivered by then.
    pub(crate) timed_from_ms: u64,
}

/// A lease as the worker reckons it: the epoch, and the local instant (µs, see
/// [`ServerClock::lease_us`]) until which no other worker can have taken the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) epoch: u64,
    pub(crate) valid_until_us: u64,
}

/// Claimed tasks waiting for their run-at, delivered by `tick` or by `run`'s delivery
/// thread. A task is handed to the handler only once the estimate of the clock of the node
/// that claimed it reaches its run-at, and only while the lease it was claimed under is valid
/// by the worker's reckoning: a worker that stalled past its lease delivers nothing more.
#[derive(Debug)]
pub(crate) struct Deliverer {
    /// By node (index of [`ServerClock::node`]), in run-at order.
    pub(crate) ready: Vec<BTreeMap<(u64, u64), Held>>,
    pub(crate) seq: u64,
    pub(crate) leases: HashMap<u32, Lease>,
    pub(crate) clock: ServerClock,
}

impl Deliverer {
    pub(crate) fn new(clock: ServerClock) -> Deliverer {
        Deliverer {
            ready: Vec::new(),
            seq: 0,
            leases: HashMap::new(),
            clock,
        }
    }

    pub(crate) fn push(&mut self, c: Held) {
        self.seq += 1;
        let node = c.node as usize;
        if self.ready.len() <= node {
            self.ready.resize_with(node + 1, BTreeMap::new);
        }
        self.ready[node].insert((c.delivery.due_ms, self.seq), c);
    }

    /// Takes every claimed task out (to hand them to another thread).
    pub(crate) fn take_all(&mut self) -> Vec<Held> {
        self.ready
            .iter_mut()
            .flat_map(|q| std::mem::take(q).into_values())
            .collect()
    }

    /// Takes in the leases held now; claims under any other lease are dropped (reported as
    /// lapsed).
    pub(crate) fn set_leases(&mut self, leases: HashMap<u32, Lease>, done: &mut dyn FnMut(Done)) {
        self.leases = leases;
        let leases = &self.leases;
        for q in &mut self.ready {
            let gone: Vec<(u64, u64)> = q
                .iter()
                .filter(|(_, c)| {
                    leases
                        .get(&c.delivery.shard)
                        .is_none_or(|l| l.epoch != c.delivery.epoch)
                })
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                if let Some(c) = q.remove(&k) {
                    done(finish(c, None));
                }
            }
        }
    }

    /// How long until the next claimed task falls due by its node's clock, µs (`None`: none
    /// held). A node without a reading yet (no claim comes without one) is looked at again
    /// after 100 ms.
    pub(crate) fn next_wait_us(&self) -> Option<u64> {
        self.ready
            .iter()
            .enumerate()
            .filter_map(|(node, q)| {
                let due = q.keys().next()?.0;
                Some(match self.clock.node_now_us(node as u32) {
                    Some(now) => (due * 1000).saturating_sub(now),
                    None => 100_000,
                })
            })
            .min()
    }

    /// Hands every claimed task due by now (by its node's clock) to `handler`, in run-at
    /// order.
    pub(crate) fn deliver(
        &mut self,
        handler: &mut dyn FnMut(&Delivery) -> Outcome,
        done: &mut dyn FnMut(Done),
    ) -> usize {
        let nows: Vec<Option<u64>> = (0..self.ready.len())
            .map(|node| self.clock.node_now_us(node as u32).map(|us| us / 1000))
            .collect();
        let mut n = 0;
        loop {
            // The earliest task due by its own node's clock.
            let next = self
                .ready
                .iter()
                .zip(&nows)
                .enumerate()
                .filter_map(|(node, (q, now))| {
                    let k = *q.keys().next()?;
                    (k.0 <= (*now)?).then_some((k, node))
                })
                .min();
            let Some((k, node)) = next else {
                break;
            };
            let c = self.ready[node].remove(&k).expect("a key just seen");
            let valid = self.leases.get(&c.delivery.shard).is_some_and(|l| {
                l.epoch == c.delivery.epoch && self.clock.lease_us() < l.valid_until_us
            });
            if valid {
                n += 1;
                let now_ms = self
                    .clock
                    .node_now_us(node as u32)
                    .map_or(k.0, |us| us / 1000);
                let late_ms = now_ms.saturating_sub(c.timed_from_ms);
                // A panic is a failed attempt, recorded with its message; the handler's own
                // state is the caller's to keep sound (it is called again after).
                let call =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&c.delivery)));
                let outcome = call.unwrap_or_else(|p| Outcome::panicked(&*p));
                let mut d = finish(c, Some(outcome));
                d.late_ms = Some(late_ms);
                done(d);
            } else {
                done(finish(c, None));
            }
        }
        n
    }
}

pub(crate) fn finish(c: Held, outcome: Option<Outcome>) -> Done {
    let d = c.delivery;
    Done {
        shard: d.shard,
        epoch: d.epoch,
        id: d.id,
        version: d.version,
        attempt: d.attempt,
        next: c.next,
        outcome,
        late_ms: None,
        redelivery: c.redelivery,
    }
}

/// What `run`'s I/O thread tells its delivery thread.
pub(crate) enum ToDeliverer {
    Claims(Vec<Held>),
    /// The leases held now; the sender, when given, is answered once they are in force (no
    /// handler call under a dropped lease after that).
    Leases(HashMap<u32, Lease>, Option<Sender<()>>),
}

/// The delivery thread of `run`: waits for the next claimed task's run-at or a message,
/// delivers, and reports every outcome to the I/O thread. Ends when the I/O thread hangs up.
pub(crate) fn deliver_loop(
    handler: &mut dyn FnMut(&Delivery) -> Outcome,
    rx: &Receiver<ToDeliverer>,
    done_tx: &Sender<Notice>,
    clock: ServerClock,
) {
    let mut d = Deliverer::new(clock);
    // Outcomes go to the I/O thread in one message per round, not one per task.
    let mut done: Vec<Done> = Vec::new();
    let send = |done: &mut Vec<Done>| {
        if !done.is_empty() {
            let _ = done_tx.send(Notice::Done(std::mem::take(done)));
        }
    };
    loop {
        let msg = match d.next_wait_us() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(wait) => rx.recv_timeout(Duration::from_micros(wait)),
        };
        let apply = |m: ToDeliverer, d: &mut Deliverer, done: &mut Vec<Done>| match m {
            ToDeliverer::Claims(v) => v.into_iter().for_each(|c| d.push(c)),
            ToDeliverer::Leases(l, confirm) => {
                d.set_leases(l, &mut |x| done.push(x));
                if let Some(c) = confirm {
                    // What the new leases dropped reaches the I/O thread before the answer.
                    send(done);
                    let _ = c.send(());
                }
            }
        };
        match msg {
            Ok(m) => apply(m, &mut d, &mut done),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while let Ok(m) = rx.try_recv() {
            apply(m, &mut d, &mut done);
        }
        d.deliver(handler, &mut |x| done.push(x));
        send(&mut done);
    }
}

/// Claimed tasks on their way to the handler: held here (`tick`, or claims not yet handed
/// on), and in `run` the channel to the delivery thread that holds them, with the leases it
/// was last told.
#[derive(Debug)]
pub(crate) struct Handoff {
    pub(crate) local: Deliverer,
    pub(crate) thread: Option<(Sender<ToDeliverer>, HashMap<u32, Lease>)>,
}

impl Handoff {
    pub(crate) fn new(clock: ServerClock) -> Handoff {
        Handoff {
            local: Deliverer::new(clock),
            thread: None,
        }
    }
}

impl Worker {
    /// In `run`: hands the claimed tasks to the delivery thread and tells it of lease changes.
    /// With `confirm`, waits until the delivery thread has the new leases in force (it
    /// finishes the handler call in hand first), so no delivery under a dropped lease can
    /// follow, then takes in the outcomes it reported.
    pub(crate) fn forward(&mut self, confirm: bool) {
        let Some((to, told)) = self.handoff.thread.as_mut() else {
            return;
        };
        let ready = self.handoff.local.take_all();
        if !ready.is_empty() && to.send(ToDeliverer::Claims(ready)).is_err() {
            return;
        }
        let leases = self.shards.leases();
        if !confirm && leases == *told {
            return;
        }
        *told = leases.clone();
        let (ctx, crx) = mpsc::channel();
        let confirm_tx = confirm.then_some(ctx);
        if to.send(ToDeliverer::Leases(leases, confirm_tx)).is_err() || !confirm {
            return;
        }
        // A lapsed lease makes the delivery thread refuse on its own: no need to wait longer.
        let _ = crx.recv_timeout(self.cfg.lease);
        while let Ok(n) = self.link.notices.try_recv() {
            self.handle_notice(n);
        }
    }

    /// Applies the current leases to the claims held in this thread (`tick`, or claims not
    /// yet forwarded), and takes in what that drops.
    pub(crate) fn apply_leases_locally(&mut self) {
        let leases = self.shards.leases();
        let mut done = Vec::new();
        self.handoff.local.set_leases(leases, &mut |d| done.push(d));
        for d in done {
            self.take_outcome(d);
        }
    }
}
