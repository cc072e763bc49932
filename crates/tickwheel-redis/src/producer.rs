//! The producer side: schedule, replace, cancel, reschedule, look up.

use crate::connection::{send_pipe, Answer, Shortfall};
use crate::error::Applied;
use crate::failure::RetryPolicy;
use crate::namespace::{
    check_id, connect, query_pipe, Con, Config, Endpoint, Error, Namespace, RunAt, TaskState,
};
use crate::protocol::{self, Cancel, Reschedule, Schedule, ScheduleTask, Scheduled, State, When};
use crate::task::Task;

mod once;
mod operate;
use crate::recurrence::Recurrence;
pub use operate::{Acted, BulkReport};

/// Stores tasks in a namespace. Every call is one round trip (bulk: one pipeline), and returns
/// `Ok` only once Redis has applied it. After a connection error the next call reconnects.
///
/// # What an error says, and what is safe to send again
///
/// Each task of a call is stored (cancelled, moved) by one script call, which Redis applies
/// whole or not at all. On a Redis Cluster every call follows the topology: a `MOVED` or
/// `ASK` reply (a failover, a slot migration) or `TRYAGAIN`/`CLUSTERDOWN` means the script
/// did not run, so the call is sent again to the slot's new owner, and a script that ran is
/// never sent twice.
///
/// * A single call ([`schedule`](Producer::schedule), [`cancel`](Producer::cancel), ...)
///   that fails with an error reply from Redis was not applied. One that fails because the
///   connection broke (or timed out) may have been: look it up
///   ([`state`](Producer::state)) before sending it again.
/// * A bulk call ([`schedule_many`](Producer::schedule_many), `cancel_many`,
///   `reschedule_many`, `retry_failed`, `discard_failed`) that fails after some of its
///   script calls ran returns [`Error::Partial`]: for each item, in the order given,
///   [`Applied::Yes`], [`Applied::No`] or [`Applied::Unknown`]
///   ([`Error::not_applied`] lists the positions to send again). Any other error from a
///   bulk call means that no item was applied.
/// * [`Error::NotConfirmed`] (with [`Config::confirm_replicas`]): the call, every item of a
///   bulk call, was applied on the primary but too few replicas confirmed it in time, so a
///   failover may lose it. Calling again on the same `Producer` waits for the replicas
///   again (its connection's next confirmation covers the first write); the table below
///   says which calls are safe to send again.
/// * Scheduling again with [`schedule`](Producer::schedule) a task that was stored is *not*
///   harmless: it replaces the task with a new version, and one that ran meanwhile
///   (delivered and acknowledged) is stored again and runs again. So after a failed
///   `schedule_many`, send again only the [`Applied::No`] tasks; for an
///   [`Applied::Unknown`] one, `state` tells whether it is stored (pending or in flight),
///   but not whether it was stored and has run since.
/// * [`schedule_once`](Producer::schedule_once) (and `schedule_once_many`) is the form to
///   send again without looking: it stores a task only when no task has its id and no
///   `schedule_once` named the id within [`Config::idempotency_window`], so a call sent
///   again after any error, within that window, never delivers the task a second time.
/// * Cancelling or rescheduling again is harmless (a task no longer pending answers
///   `false`; a reschedule sent again moves the task to the same run-at).
///
/// | call | send again after an unknown outcome? |
/// |---|---|
/// | `schedule_once`, `schedule_once_many` | yes, within the idempotency window |
/// | `schedule`, `schedule_many`, `schedule_recurring` | only what was not stored: a task stored and run since runs again |
/// | `cancel`, `cancel_many` | yes (the second answers `false`) |
/// | `reschedule`, `reschedule_many`, `run_now` | yes (the same run-at again, or `false` once the task is no longer pending) |
/// | `retry_failed`, `discard_failed` | yes, unless the task failed again meanwhile (the second answers [`Acted::NotFailed`] or [`Acted::LiveTaskExists`]) |
pub struct Producer {
    cfg: Config,
    client: Endpoint,
    con: Option<Con>,
    ns: Namespace,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("url", &crate::error::url_without_password(&self.cfg.url))
            .field("namespace", &self.cfg.namespace)
            .field("shards", &self.ns.shards.len())
            .finish()
    }
}

impl Producer {
    /// Connects, and creates the namespace if it does not exist yet.
    ///
    /// Errors: [`Error::InvalidUrl`], [`Error::InvalidNamespace`], [`Error::InvalidConfig`],
    /// [`Error::IncompatibleNamespace`], or [`Error::Redis`] when Redis cannot be reached.
    pub fn connect(cfg: &Config) -> Result<Producer, Error> {
        let (client, con, ns) = crate::namespace::open(cfg)?;
        Ok(Producer {
            cfg: cfg.clone(),
            client,
            con: Some(con),
            ns,
        })
    }

    /// The namespace's shard count (as stored in Redis).
    pub fn shards(&self) -> u32 {
        self.ns.shards.len() as u32
    }

    /// Runs `f` on the connection, reconnecting first if the last call broke it. A
    /// connection that broke, or that reached a replica (a `READONLY` reply: after a
    /// failover, the demoted primary), is dropped: the next call reconnects (under Sentinel,
    /// to the primary the sentinels name then); so is one to a primary the sentinels no
    /// longer name (see `Endpoint::primary_moved`).
    fn with_con<T>(
        &mut self,
        f: impl FnOnce(&mut Con, &Namespace) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.con.is_some() && self.client.primary_moved(self.cfg.io_timeout) {
            self.con = None;
        }
        if self.con.is_none() {
            self.con = Some(connect(&self.cfg, &self.client)?);
        }
        let con = self.con.as_mut().expect("connected above");
        let r = f(con, &self.ns);
        let redis_error = match &r {
            Err(Error::Redis(e)) => Some(e),
            Err(Error::Partial { source, .. }) => match &**source {
                Error::Redis(e) => Some(e),
                _ => None,
            },
            _ => None,
        };
        if redis_error.is_some_and(crate::connection::unfit) {
            self.con = None;
        }
        r
    }

    /// [`with_con`](Producer::with_con) for a call of one script: refused with `READONLY`
    /// (it did not run: the connection reached a demoted primary), it is sent once more on a
    /// new connection. Should that connection fail (no primary yet), the refusal is returned.
    fn with_con_again<T>(
        &mut self,
        mut f: impl FnMut(&mut Con, &Namespace) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let r = self.with_con(&mut f);
        match &r {
            Err(Error::Redis(e)) if crate::connection::is_readonly(e) => {
                match connect(&self.cfg, &self.client) {
                    Ok(con) => {
                        self.con = Some(con);
                        self.with_con(f)
                    }
                    Err(_) => r,
                }
            }
            _ => r,
        }
    }

    fn check(&self, id: &str, payload: &[u8]) -> Result<(), Error> {
        check_id(id)?;
        if payload.len() > self.cfg.max_payload {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: self.cfg.max_payload,
            });
        }
        Ok(())
    }

    /// Stores a task, replacing any task with the same id (pending or in flight: the new one
    /// starts at attempt 0, and an in-flight delivery of the old one can no longer be
    /// acknowledged). Returns what it stored: its version, its run-at (for [`RunAt::After`],
    /// as Redis computed it from its clock) and whether it replaced a task. Sent again after
    /// an error whose outcome is unknown, it may store a task that ran meanwhile a second
    /// time: [`schedule_once`](Producer::schedule_once) is the form safe to send again.
    pub fn schedule(
        &mut self,
        id: &str,
        run_at: RunAt,
        payload: &[u8],
    ) -> Result<Scheduled, Error> {
        self.store(Task::new(id, run_at, payload))
    }

    /// Stores a recurring task, replacing any task with the same id: its first run at
    /// `first`, then runs as `recurrence` says, each delivered like a one-shot task (with its
    /// own version and attempts). The worker acknowledging a run re-arms the task at the next
    /// run in the same script (the next run is the first instant of the schedule after the
    /// run's due time and after the moment it was claimed: runs missed while no worker was
    /// delivering are not replayed one by one). [`cancel`](Producer::cancel) stops the series.
    /// For a first run on the schedule itself, use [`Recurrence::next_after_ms`].
    /// Returns what it stored, as [`schedule`](Producer::schedule) does (the version and
    /// run-at of the first run).
    pub fn schedule_recurring(
        &mut self,
        id: &str,
        first: RunAt,
        recurrence: &Recurrence,
        payload: &[u8],
    ) -> Result<Scheduled, Error> {
        self.store(Task::new(id, first, payload).recurring(recurrence))
    }

    fn store(&mut self, task: Task<'_>) -> Result<Scheduled, Error> {
        let task = self.checked(task)?;
        let now = protocol::now(&self.cfg);
        self.with_con_again(|con, ns| {
            let shard = ns.shard_of(task.id);
            let call = Schedule {
                keys: &ns.shards[shard as usize],
                now,
                channel: &ns.channel,
                shard,
                tasks: std::slice::from_ref(&task),
            };
            let stored = protocol::invoke(con, &call)?;
            stored
                .into_iter()
                .next()
                .ok_or_else(|| Error::Protocol("SCHEDULE: no task in the reply".into()))
        })
    }

    /// Checks a task's id, payload, run-at, recurrence and policy, and encodes it.
    /// Checks tasks and groups them by shard, [`Config::batch`] a call (for
    /// [`schedule_many`](Producer::schedule_many) and its create-only form).
    fn grouped<'a, I>(&self, tasks: I) -> Result<Groups<ScheduleTask<'a>>, Error>
    where
        I: IntoIterator<Item = Task<'a>>,
    {
        let mut groups = Groups::new(self.ns.shards.len(), self.cfg.batch);
        for t in tasks {
            let t = self.checked(t)?;
            groups.push(self.ns.shard_of(t.id), t);
        }
        Ok(groups)
    }

    fn checked<'a>(&self, t: Task<'a>) -> Result<ScheduleTask<'a>, Error> {
        self.check(t.id, t.payload)?;
        let recurrence = t.recurrence.map(Recurrence::encode).transpose()?;
        if let Some(p) = &t.retry {
            p.validate("Task::retry")?;
        }
        Ok(ScheduleTask {
            id: t.id,
            when: When::new(t.run_at)?,
            payload: t.payload,
            recurrence: recurrence.unwrap_or_default(),
            policy: t
                .retry
                .as_ref()
                .map(RetryPolicy::encode)
                .unwrap_or_default(),
        })
    }

    /// Stores many tasks in one pipeline: tasks are grouped by shard, up to
    /// [`Config::batch`] per script call, and each task is stored exactly as
    /// [`schedule`](Producer::schedule) (or, with a [`Task::recurrence`],
    /// [`schedule_recurring`](Producer::schedule_recurring)) would store it, in the order
    /// given (replace by id, a new version, the owning worker told of tasks inside its loaded
    /// window: one notification per script call, however many tasks it names). Every id,
    /// payload, run-at and recurrence is checked before anything is sent. `Ok` means every
    /// task is stored. Returns what each task stored, in the order given: an id given
    /// twice replaces its earlier task, as two calls to `schedule` would.
    ///
    /// On `Err`: [`Error::Partial`] when some tasks were (or may have been) stored, saying
    /// which, task by task; any other error means none was. Send again only the tasks not
    /// stored ([`Error::not_applied`]): a task stored again is a new version, delivered
    /// again even if the first one already ran (see [`Producer`], *What an error says*).
    ///
    /// ```no_run
    /// # use tickwheel_redis::{Config, Error, Producer, RunAt, Task};
    /// # let mut p = Producer::connect(&Config::new("redis://127.0.0.1/", "orders"))?;
    /// let ids = ["a", "b", "c"];
    /// let task = |id| Task::new(id, RunAt::AtMillis(1_800_000_000_000), b"");
    /// let mut todo: Vec<&str> = ids.to_vec();
    /// while let Err(e) = p.schedule_many(todo.iter().map(|&id| task(id))) {
    ///     todo = match e.not_applied() {
    ///         Some(left) => left.into_iter().map(|i| todo[i]).collect(),
    ///         None => todo, // nothing was stored: all again (after a pause, say)
    ///     };
    /// #   break;
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn schedule_many<'a, I>(&mut self, tasks: I) -> Result<Vec<Scheduled>, Error>
    where
        I: IntoIterator<Item = Task<'a>>,
    {
        let groups = self.grouped(tasks)?;
        let now = protocol::now(&self.cfg);
        self.with_con_again(|con, ns| {
            groups.invoke(con, |shard, tasks| Schedule {
                keys: &ns.shards[shard as usize],
                now,
                channel: &ns.channel,
                shard,
                tasks,
            })
        })
    }

    /// Cancels a pending task: `true` exactly when it was pending and will not be delivered.
    /// `false` for an unknown id and for a one-shot task in flight (being delivered now: its
    /// handler's acknowledgement settles it). A recurring task stops: `true` when it was
    /// pending or in flight (the run in hand can then no longer be acknowledged nor delivered
    /// again), so no further run is delivered.
    pub fn cancel(&mut self, id: &str) -> Result<bool, Error> {
        Ok(self.cancel_many([id]).map_err(single)?[0])
    }

    /// Cancels many tasks in one pipeline (one round trip: under `appendfsync always`, one
    /// fsync instead of one per task): ids are grouped by shard, up to [`Config::batch`] per
    /// script call. Returns, for each id in the order given, what
    /// [`cancel`](Producer::cancel) would return (an id given twice: `false` the second
    /// time). Every id is checked before anything is sent; on `Err` some may be cancelled
    /// ([`Error::Partial`] says which), and calling again is safe (a task cancelled already
    /// answers `false`).
    pub fn cancel_many<S, I>(&mut self, ids: I) -> Result<Vec<bool>, Error>
    where
        S: AsRef<str>,
        I: IntoIterator<Item = S>,
    {
        let ids: Vec<S> = ids.into_iter().collect();
        let mut groups = Groups::new(self.ns.shards.len(), self.cfg.batch);
        for id in &ids {
            let id = id.as_ref();
            check_id(id)?;
            groups.push(self.ns.shard_of(id), id);
        }
        self.with_con_again(|con, ns| {
            groups.invoke(con, |shard, ids| Cancel {
                keys: &ns.shards[shard as usize],
                ids,
            })
        })
    }

    /// Moves a pending task to a new run-at, keeping its payload and attempt count (with a
    /// new version): `true` when it was pending, `false` for an unknown id or a task in
    /// flight.
    pub fn reschedule(&mut self, id: &str, run_at: RunAt) -> Result<bool, Error> {
        Ok(self.reschedule_many([(id, run_at)]).map_err(single)?[0])
    }

    /// Moves many pending tasks in one pipeline, grouped by shard, up to [`Config::batch`]
    /// per script call, each as [`reschedule`](Producer::reschedule) would, in the order
    /// given. Returns, for each move in that order, whether the task was pending and moved.
    /// Every id and run-at is checked before anything is sent; on `Err` some may have moved
    /// ([`Error::Partial`] says which), and calling again is safe (it moves them again, to
    /// the same run-at, with a new version).
    pub fn reschedule_many<S, I>(&mut self, moves: I) -> Result<Vec<bool>, Error>
    where
        S: AsRef<str>,
        I: IntoIterator<Item = (S, RunAt)>,
    {
        let moves: Vec<(S, RunAt)> = moves.into_iter().collect();
        let mut groups = Groups::new(self.ns.shards.len(), self.cfg.batch);
        for (id, run_at) in &moves {
            let id = id.as_ref();
            check_id(id)?;
            groups.push(self.ns.shard_of(id), (id, When::new(*run_at)?));
        }
        let now = protocol::now(&self.cfg);
        self.with_con_again(|con, ns| {
            groups.invoke(con, |shard, moves| Reschedule {
                keys: &ns.shards[shard as usize],
                now,
                channel: &ns.channel,
                shard,
                moves,
            })
        })
    }

    /// Where a task is: pending, in flight, or unknown (never scheduled, cancelled or
    /// acknowledged).
    pub fn state(&mut self, id: &str) -> Result<TaskState, Error> {
        check_id(id)?;
        self.with_con_again(|con, ns| {
            let keys = &ns.shards[ns.shard_of(id) as usize];
            protocol::invoke(con, &State { keys, id })
        })
    }

    /// Tasks stored in the namespace (pending and in flight), summed over shards.
    pub fn len(&mut self) -> Result<u64, Error> {
        self.with_con_again(|con, ns| {
            let mut pipe = redis::pipe();
            for s in &ns.shards {
                pipe.cmd("HLEN").arg(s.tasks());
            }
            let lens: Vec<u64> = query_pipe(con, &pipe)?;
            Ok(lens.iter().sum())
        })
    }

    /// Whether the namespace holds no task.
    pub fn is_empty(&mut self) -> Result<bool, Error> {
        Ok(self.len()? == 0)
    }
}

/// The error of a bulk call of one item, as a single call's: its cause ([`Error::Partial`]
/// says no more than that the one item may have been applied).
fn single(e: Error) -> Error {
    match e {
        Error::Partial { source, .. } => *source,
        e => e,
    }
}

/// The items of a bulk call grouped by shard, each with its position in the call, for one
/// script call per shard and batch, and the replies put back in the call's order.
struct Groups<T> {
    items: Vec<Vec<T>>,
    index: Vec<Vec<usize>>,
    len: usize,
    /// The most items in one script call ([`Config::batch`]).
    batch: usize,
}

impl<T> Groups<T> {
    fn new(shards: usize, batch: usize) -> Groups<T> {
        Groups {
            items: (0..shards).map(|_| Vec::new()).collect(),
            index: vec![Vec::new(); shards],
            len: 0,
            batch,
        }
    }

    fn push(&mut self, shard: u32, item: T) {
        self.items[shard as usize].push(item);
        self.index[shard as usize].push(self.len);
        self.len += 1;
    }

    /// Sends one script call per shard and up to `batch` of its items, made by `call` from
    /// the shard and those items, all in one pipeline ([`send_pipe`]: it follows a
    /// Cluster's topology and never sends a call twice once it ran). Returns the replies,
    /// one per item, in the order the items were pushed; on an error after some call ran
    /// (or may have), [`Error::Partial`] with what each item got.
    fn invoke<'g, C, R>(
        &'g self,
        con: &mut Con,
        mut call: impl FnMut(u32, &'g [T]) -> C,
    ) -> Result<Vec<R>, Error>
    where
        C: protocol::Call<Reply = Vec<R>>,
    {
        let calls: Vec<C> = self
            .items
            .iter()
            .enumerate()
            .flat_map(|(s, items)| items.chunks(self.batch).map(move |c| (s as u32, c)))
            .map(|(shard, items)| call(shard, items))
            .collect();
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let cmds: Vec<redis::Cmd> = calls.iter().map(protocol::command).collect();
        let (answers, broken) = send_pipe(con, &cmds);
        let mut first: Option<Error> = broken.map(Error::Redis);
        // Applied, too few replicas confirmed: the error when there is no other.
        let mut short = None;
        let mut replies = Vec::with_capacity(calls.len());
        let mut applied = Vec::with_capacity(calls.len());
        for (c, answer) in calls.iter().zip(answers) {
            let answer = match answer {
                Answer::Unconfirmed(v, s) => {
                    Shortfall::fewest(&mut short, s);
                    Answer::Reply(v)
                }
                a => a,
            };
            let (reply, a) = match answer {
                Answer::Reply(v) => match c.decode(v) {
                    Ok(r) => (Some(r), Applied::Yes),
                    Err(e) => {
                        first.get_or_insert(e);
                        (None, Applied::Yes)
                    }
                },
                Answer::Ran => {
                    first.get_or_insert(Error::Protocol(
                        "a script call ran but its reply is lost (on a Cluster, another call \
                         of the pipeline got an error reply: a topology change or a node that \
                         lost its scripts during the call)"
                            .into(),
                    ));
                    (None, Applied::Yes)
                }
                Answer::Refused(e) => {
                    first.get_or_insert(Error::Redis(e));
                    (None, Applied::No)
                }
                Answer::Failed(e) => {
                    first.get_or_insert(Error::Redis(e));
                    (None, Applied::Unknown)
                }
                Answer::Unsent => (None, Applied::No),
                Answer::Lost | Answer::Unconfirmed(..) => (None, Applied::Unknown),
            };
            replies.push(reply.unwrap_or_default());
            applied.push(a);
        }
        if let (None, Some(s)) = (&first, short) {
            // Every call applied on the primary: the caller may send them all again.
            return Err(s.into());
        }
        match first {
            None => self.scatter(replies),
            Some(e) if applied.iter().all(|&a| a == Applied::No) => Err(e),
            Some(e) => Err(Error::Partial {
                applied: self.per_item(&applied),
                source: Box::new(e),
            }),
        }
    }

    /// What each call got, spread over its items, in the order the items were pushed.
    fn per_item(&self, per_call: &[Applied]) -> Vec<Applied> {
        let mut out = vec![Applied::No; self.len];
        let calls = self.index.iter().flat_map(|idx| idx.chunks(self.batch));
        for (idx, &a) in calls.zip(per_call) {
            for &i in idx {
                out[i] = a;
            }
        }
        out
    }

    /// The replies of [`invoke`](Groups::invoke)'s calls, one per item, in the order the
    /// items were pushed.
    fn scatter<R>(&self, replies: Vec<Vec<R>>) -> Result<Vec<R>, Error> {
        let mut out: Vec<Option<R>> = (0..self.len).map(|_| None).collect();
        let calls = self.index.iter().flat_map(|idx| idx.chunks(self.batch));
        let mut replies = replies.into_iter();
        for idx in calls {
            let reply = replies.next().unwrap_or_default();
            if reply.len() != idx.len() {
                return Err(Error::Protocol(format!(
                    "{} replies to a call of {} items",
                    reply.len(),
                    idx.len()
                )));
            }
            for (&i, r) in idx.iter().zip(reply) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.ok_or_else(|| Error::Protocol("a bulk call lost an item".into())))
            .collect()
    }
}
