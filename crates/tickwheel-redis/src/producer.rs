//! The producer side: schedule, replace, cancel, reschedule, look up.

use redis::Value;

use crate::namespace::{
    array, check_id, connect, int, query_pipe, Con, Config, Endpoint, Error, Namespace, RunAt,
    TaskState,
};
use crate::recurrence::Recurrence;
use crate::scripts::scripts;

/// One task of a bulk [`Producer::schedule_many`].
#[derive(Clone, Copy, Debug)]
pub struct Task<'a> {
    /// The task's id; scheduling an existing id replaces that task.
    pub id: &'a str,
    /// When it runs.
    pub run_at: RunAt,
    /// The bytes handed to the handler.
    pub payload: &'a [u8],
    /// `Some` for a recurring task, stored as [`Producer::schedule_recurring`] stores it
    /// (`run_at` is then its first run); `None` for a one-shot task.
    pub recurrence: Option<&'a Recurrence>,
}

/// Stores tasks in a namespace. Every call is one round trip (bulk: one pipeline), and returns
/// `Ok` only once Redis has applied it. After a connection error the next call reconnects.
pub struct Producer {
    cfg: Config,
    client: Endpoint,
    con: Option<Con>,
    ns: Namespace,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("url", &self.cfg.url)
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

    /// Runs `f` on the connection, reconnecting first if the last call broke it.
    fn with_con<T>(
        &mut self,
        f: impl FnOnce(&mut Con, &Namespace) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.con.is_none() {
            self.con = Some(connect(&self.cfg, &self.client)?);
        }
        let con = self.con.as_mut().expect("connected above");
        let r = f(con, &self.ns);
        if let Err(Error::Redis(e)) = &r {
            // Anything but an error reply from the server leaves the connection in doubt.
            if !matches!(e.kind(), redis::ErrorKind::Server(_)) {
                self.con = None;
            }
        }
        r
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
    /// acknowledged). Returns whether it replaced one.
    pub fn schedule(&mut self, id: &str, run_at: RunAt, payload: &[u8]) -> Result<bool, Error> {
        self.store(id, run_at, payload, String::new())
    }

    /// Stores a recurring task, replacing any task with the same id: its first run at
    /// `first`, then runs as `recurrence` says, each delivered like a one-shot task (with its
    /// own version and attempts). The worker acknowledging a run re-arms the task at the next
    /// run in the same script (the next run is the first instant of the schedule after the
    /// run's due time and after the moment it was claimed: runs missed while no worker was
    /// delivering are not replayed one by one). [`cancel`](Producer::cancel) stops the series.
    /// For a first run on the schedule itself, use [`Recurrence::next_after_ms`].
    /// Returns whether it replaced a task.
    pub fn schedule_recurring(
        &mut self,
        id: &str,
        first: RunAt,
        recurrence: &Recurrence,
        payload: &[u8],
    ) -> Result<bool, Error> {
        let rec = recurrence.encode()?;
        self.store(id, first, payload, rec)
    }

    fn store(
        &mut self,
        id: &str,
        run_at: RunAt,
        payload: &[u8],
        rec: String,
    ) -> Result<bool, Error> {
        self.check(id, payload)?;
        let (when, tail) = schedule_args(run_at, payload, &rec)?;
        let now = self.cfg.now_arg();
        self.with_con(|con, ns| {
            let mut inv = ns.invoke(&scripts().schedule, id);
            inv.arg(now)
                .arg(&ns.channel)
                .arg(ns.shard_of(id))
                .arg(id)
                .arg(&when)
                .arg(&tail);
            let replaced: i64 = inv.invoke(con)?;
            Ok(replaced > 0)
        })
    }

    /// Stores many tasks in one pipeline: tasks are grouped by shard, up to
    /// [`Config::batch`] per script call, and each task is stored exactly as
    /// [`schedule`](Producer::schedule) (or, with a [`Task::recurrence`],
    /// [`schedule_recurring`](Producer::schedule_recurring)) would store it, in the order given (replace by id,
    /// a new version, the owning worker told of tasks inside its loaded window: one
    /// notification per script call, however many tasks it names). Every id, payload and
    /// recurrence is checked before anything is sent. `Ok` means every task is stored; on `Err` some may
    /// be, and calling again with the same tasks is safe (same ids replace). Returns how many
    /// tasks replaced existing ones (as many as `true`s the same calls to `schedule` would
    /// return).
    pub fn schedule_many<'a, I>(&mut self, tasks: I) -> Result<usize, Error>
    where
        I: IntoIterator<Item = Task<'a>>,
    {
        let shards = self.ns.shards.len();
        let mut groups: Vec<Vec<(&'a str, String, Vec<u8>)>> = vec![Vec::new(); shards];
        for t in tasks {
            self.check(t.id, t.payload)?;
            let rec = t.recurrence.map(Recurrence::encode).transpose()?;
            let (when, tail) = schedule_args(t.run_at, t.payload, &rec.unwrap_or_default())?;
            groups[self.ns.shard_of(t.id) as usize].push((t.id, when, tail));
        }
        let batch = self.cfg.batch;
        let now = self.cfg.now_arg();
        let sha = scripts().schedule.get_hash().to_string();
        let mut pipe = redis::pipe();
        for (shard, group) in groups.iter().enumerate() {
            for chunk in group.chunks(batch) {
                let keys = &self.ns.shards[shard].0;
                let cmd = pipe.cmd("EVALSHA").arg(&sha).arg(4).arg(keys.as_slice());
                cmd.arg(&now).arg(&self.ns.channel).arg(shard);
                for (id, when, tail) in chunk {
                    cmd.arg(*id).arg(when).arg(tail);
                }
            }
        }
        if pipe.is_empty() {
            return Ok(0);
        }
        self.with_con(|con, _| {
            let run = |con: &mut Con| -> redis::RedisResult<Vec<i64>> { query_pipe(con, &pipe) };
            let replaced = match run(con) {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    scripts().schedule.prepare_invoke().load(con)?;
                    run(con)?
                }
                r => r?,
            };
            Ok(replaced.iter().map(|&n| n as usize).sum())
        })
    }

    /// Cancels a pending task: `true` exactly when it was pending and will not be delivered.
    /// `false` for an unknown id and for a one-shot task in flight (being delivered now: its
    /// handler's acknowledgement settles it). A recurring task stops: `true` when it was
    /// pending or in flight (the run in hand can then no longer be acknowledged nor delivered
    /// again), so no further run is delivered.
    pub fn cancel(&mut self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        self.with_con(|con, ns| {
            let n: i64 = ns.invoke(&scripts().cancel, id).arg(id).invoke(con)?;
            Ok(n == 1)
        })
    }

    /// Moves a pending task to a new run-at, keeping its payload and attempt count: `true` when
    /// it was pending, `false` for an unknown id or a task in flight.
    pub fn reschedule(&mut self, id: &str, run_at: RunAt) -> Result<bool, Error> {
        check_id(id)?;
        let (mode, ms) = run_at.encode()?;
        let now = self.cfg.now_arg();
        self.with_con(|con, ns| {
            let mut inv = ns.invoke(&scripts().reschedule, id);
            inv.arg(now)
                .arg(&ns.channel)
                .arg(ns.shard_of(id))
                .arg(id)
                .arg(mode)
                .arg(ms);
            let n: i64 = inv.invoke(con)?;
            Ok(n == 1)
        })
    }

    /// Where a task is: pending, in flight, or unknown (never scheduled, cancelled or
    /// acknowledged).
    pub fn state(&mut self, id: &str) -> Result<TaskState, Error> {
        check_id(id)?;
        self.with_con(|con, ns| {
            let v: Value = ns.invoke(&scripts().state, id).arg(id).invoke(con)?;
            let a = array(v)?;
            let n = |i: usize| {
                a.get(i)
                    .ok_or_else(|| Error::Protocol("short STATE".into()))
                    .and_then(int)
            };
            Ok(match n(0)? {
                1 => TaskState::Pending {
                    run_at_ms: n(1)? as u64,
                    attempts: n(2)? as u32,
                    version: n(3)? as u64,
                },
                2 => TaskState::InFlight {
                    due_ms: n(1)? as u64,
                    attempt: n(2)? as u32,
                    version: n(3)? as u64,
                    visible_at_ms: n(4)? as u64,
                },
                _ => TaskState::Unknown,
            })
        })
    }

    /// Tasks stored in the namespace (pending and in flight), summed over shards.
    pub fn len(&mut self) -> Result<u64, Error> {
        self.with_con(|con, ns| {
            let mut pipe = redis::pipe();
            for s in &ns.shards {
                pipe.cmd("HLEN").arg(&s.0[1]);
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

/// A task's arguments to the schedule script after its id: the run-at (`<ms>` an instant,
/// `-<ms>` a delay from the server's now) and the stored value's tail (`<recurrence
/// length>:<recurrence><payload>`), so the script only prepends the version, attempt and due.
fn schedule_args(run_at: RunAt, payload: &[u8], rec: &str) -> Result<(String, Vec<u8>), Error> {
    let (mode, ms) = run_at.encode()?;
    let when = if mode == "d" {
        format!("-{ms}")
    } else {
        ms.to_string()
    };
    let mut tail = Vec::with_capacity(rec.len() + payload.len() + 8);
    tail.extend_from_slice(format!("{}:{rec}", rec.len()).as_bytes());
    tail.extend_from_slice(payload);
    Ok((when, tail))
}
