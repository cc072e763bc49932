//! The Rust–Lua contract: one typed call per script, the one place where script arguments are
//! encoded and replies decoded.
//!
//! Each script lives in its own file under `protocol/lua/` (its header says its KEYS, ARGV
//! and reply; `prelude.lua` describes a shard's keys and the functions every script shares),
//! compiled by [`scripts`]. Here, each script has a struct of its arguments that
//! implements [`Call`]: [`Call::encode`] writes its keys and ARGV in the script's order, and
//! [`Call::decode`] turns its `redis::Value` reply into a typed reply. The conventions of the
//! wire live here only: the `now` argument (empty for the server's clock, see [`now`]), a
//! run-at as `<ms>` or `-<ms>` (a delay), flags as `1`|`0`, a window read's resume point, and
//! the claim-ahead offset (every time a reply hands the worker to arm in its wheel is a
//! *wheel time*: the instant at which `now + claim_ahead` reaches the moment the task can
//! be claimed; see [`delivery::Armed`] and [`delivery::Claimed::rearm_at_ms`]).
//!
//! Following a delivery: the producer stores it with [`Schedule`] (`schedule.lua`); the
//! worker owning its shard ([`Acquire`], renewed with the same call, and [`Heartbeat`]) reads
//! it into its window with [`Load`] (`load.lua`), or hears of it from the notification
//! SCHEDULE publishes; it claims it ahead of its run-at with [`Deliver`] (`deliver.lua`),
//! and settles it with [`Ack`] or [`Retry`].
//!
//! Use: build a call, then either [`invoke`] it (one round trip), [`invoke_all`] many calls
//! of one script (one pipeline), or [`push`] it into a pipeline of your own and decode its
//! reply with [`next_reply`] (several scripts in one pipeline), e.g. a heartbeat and the
//! lease renewals in one round trip:
//!
//! ```text
//! let beat = Heartbeat { workers_key: &ns.workers_key, now: protocol::now(&cfg), worker: &id,
//!                        ttl_ms: lease, cluster };
//! let renewals: Vec<Acquire> = held.iter().map(|&(s, epoch)| Acquire { keys: &ns.shards[s],
//!     now: protocol::now(&cfg), worker: &id, lease_ms: lease, held_epoch: epoch }).collect();
//! let mut pipe = redis::pipe();
//! protocol::push(&mut pipe, &beat);
//! renewals.iter().for_each(|r| protocol::push(&mut pipe, r));
//! let mut replies = query_pipe::<Vec<Value>>(con, &pipe)?.into_iter();
//! let live = protocol::next_reply(&beat, &mut replies)?.live;
//! for r in &renewals {
//!     if protocol::next_reply(r, &mut replies)?.epoch.is_none() { /* the shard is lost */ }
//! }
//! ```

mod delivery;
mod failure;
mod inspect;
mod producer;
pub(crate) mod scripts;
mod shard;

pub(crate) use delivery::{Ack, AckItem, Claim, Deliver, Load, LoadReply};
pub(crate) use delivery::{Resume, Retry, RetryReply};
pub(crate) use failure::*;
pub(crate) use inspect::*;
pub(crate) use producer::{Cancel, Reschedule, Schedule, ScheduleOnce, ScheduleTask, State, When};
pub use producer::{Scheduled, ScheduledOnce};
pub(crate) use shard::{Acquire, Heartbeat, Init, Probe};
pub(crate) use shard::{Release, Tenure};

use redis::{Cmd, Pipeline, Script, Value};

use crate::config::{Config, TimeSource};
use crate::connection::{self, query_pipe, Con, Confirm, Endpoint};
use crate::error::Error;

/// The keys of one shard, in script order (see `prelude.lua`): the one place they are named.
#[derive(Clone, Debug)]
pub(crate) struct ShardKeys(pub [String; 8]);

impl ShardKeys {
    /// The keys of shard `shard` of namespace `ns`: all under the hash tag `{ns:shard}`, so a
    /// Cluster keeps them on one node.
    pub(crate) fn new(ns: &str, shard: u32) -> ShardKeys {
        let tag = format!("tw:{{{ns}:{shard}}}");
        ShardKeys(
            [
                "due", "tasks", "inflight", "state", "errors", "failed", "dead", "once",
            ]
            .map(|k| format!("{tag}:{k}")),
        )
    }

    /// The task hash (id -> value).
    pub(crate) fn tasks(&self) -> &str {
        &self.0[1]
    }

    /// The shard's state hash (`owner`, `epoch`, `expires`, ...).
    pub(crate) fn state(&self) -> &str {
        &self.0[3]
    }

    /// The ids `schedule_once` remembers (sorted set id -> remembered until, ms).
    pub(crate) fn once(&self) -> &str {
        &self.0[7]
    }
}

/// Opens a connection with the configured timeouts and confirmation
/// ([`Config::confirm_replicas`]), and loads the scripts (on every node of a Cluster).
pub(crate) fn connect(cfg: &Config, client: &Endpoint) -> Result<Con, Error> {
    let confirm = Confirm::of(cfg);
    let mut con = match client {
        Endpoint::Cluster(cluster, _) => {
            // A seed first, on a connection of its own: `redis`'s cluster connection reports
            // a password every seed refuses (or lacks) as an I/O error, which the callers
            // retry for their whole connect timeout; a seed's `PING` answers what it is.
            let (mut seed, _) = client.plain_connection(cfg.io_timeout)?;
            redis::cmd("PING").query::<Value>(&mut seed)?;
            Con::cluster(cluster, cfg.io_timeout, confirm)?
        }
        _ => Con::single(client.plain_connection(cfg.io_timeout)?.0, confirm),
    };
    con.check_auth()?;
    con.load_scripts()?;
    Ok(con)
}

/// One call of one script: its arguments, and how its reply reads.
pub(crate) trait Call {
    /// The reply, decoded.
    type Reply;
    /// The compiled script this call runs.
    fn script(&self) -> &'static Script;
    /// Appends `numkeys`, the keys and ARGV, in the script's order, to an `EVALSHA`.
    fn encode(&self, cmd: &mut Cmd);
    /// Decodes the script's reply to this call.
    fn decode(&self, reply: Value) -> Result<Self::Reply, Error>;
}

/// The `EVALSHA` command of a call.
pub(crate) fn command(call: &impl Call) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(call.script().get_hash());
    call.encode(&mut cmd);
    cmd
}

/// Adds a call to a pipeline; decode its reply (at the same position) with [`Call::decode`].
/// The scripts must be loaded already (see `Scripts::load_all`): a pipeline cannot load a
/// missing one in the middle.
pub(crate) fn push(pipe: &mut Pipeline, call: &impl Call) {
    pipe.add_command(command(call));
}

/// Decodes the next reply of a pipeline as the reply to `call` (the call pushed at that
/// position); an error when the pipeline answered fewer.
pub(crate) fn next_reply<C: Call>(
    call: &C,
    replies: &mut impl Iterator<Item = Value>,
) -> Result<C::Reply, Error> {
    let reply = replies
        .next()
        .ok_or_else(|| Error::Protocol("a pipeline answered fewer calls than it had".into()))?;
    call.decode(reply)
}

/// Runs one call: one round trip (and one more to load the scripts if Redis lost them), as
/// a pipeline of one through `connection::send_pipe`, like every call: it follows a
/// Cluster's redirections, never sends a call that ran again, and confirms a write with
/// `WAIT` on the same connection when [`Config::confirm_replicas`] asks for it
/// ([`Error::NotConfirmed`] when too few replicas did: the call was applied).
pub(crate) fn invoke<C: Call>(con: &mut Con, call: &C) -> Result<C::Reply, Error> {
    let mut pipe = redis::pipe();
    push(&mut pipe, call);
    let reply = query_pipe::<Vec<Value>>(con, &pipe)?
        .pop()
        .ok_or_else(|| Error::Protocol("a call got no reply".into()))?;
    call.decode(reply)
}

/// Runs calls of one script in one pipeline (a call refused for a lost script is sent again
/// once the scripts are loaded; no call that ran is sent again). Replies in the order of
/// `calls`.
pub(crate) fn invoke_all<C: Call>(con: &mut Con, calls: &[C]) -> Result<Vec<C::Reply>, Error> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for c in calls {
        push(&mut pipe, c);
    }
    // A lost script (a restart, a promoted replica) is loaded again and only the calls it
    // refused are sent again, by `query_pipe` (see `connection::send_pipe`).
    let replies: Vec<Value> = query_pipe(con, &pipe)?;
    if replies.len() != calls.len() {
        return Err(Error::Protocol(format!(
            "{} replies to {} script calls",
            replies.len(),
            calls.len()
        )));
    }
    let mut replies = replies.into_iter();
    calls.iter().map(|c| next_reply(c, &mut replies)).collect()
}

/// The clock the scripts read: `None` for the Redis server's (`TIME`), `Some(ms)` for a
/// manual clock ([`TimeSource::Manual`]).
pub(crate) fn now(cfg: &Config) -> Option<u64> {
    match &cfg.time {
        TimeSource::Server => None,
        TimeSource::Manual(t) => Some(t.now_ms()),
    }
}

/// Encodes the `now` argument: empty for the server's clock.
fn now_arg(cmd: &mut Cmd, now: Option<u64>) {
    match now {
        Some(ms) => cmd.arg(ms),
        None => cmd.arg(""),
    };
}

/// Encodes a shard's keys (`numkeys` then the keys in script order).
fn shard_keys(cmd: &mut Cmd, keys: &ShardKeys) {
    cmd.arg(keys.0.len()).arg(keys.0.as_slice());
}

/// Encodes a flag: `1`|`0`.
fn flag(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

/// A script's reply read field by field; errors name the script.
struct Fields {
    script: &'static str,
    it: std::vec::IntoIter<Value>,
}

impl Fields {
    /// The reply of `script`, which must be an array.
    fn new(script: &'static str, reply: Value) -> Result<Fields, Error> {
        let a = connection::array(reply).map_err(|e| Error::Protocol(format!("{script}: {e}")))?;
        Ok(Fields {
            script,
            it: a.into_iter(),
        })
    }

    fn next(&mut self) -> Result<Value, Error> {
        self.it
            .next()
            .ok_or_else(|| Error::Protocol(format!("{}: reply too short", self.script)))
    }

    fn wrap<T>(&self, r: Result<T, Error>) -> Result<T, Error> {
        r.map_err(|e| Error::Protocol(format!("{}: {e}", self.script)))
    }

    fn int(&mut self) -> Result<i64, Error> {
        let v = self.next()?;
        self.wrap(connection::int(&v))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let n = self.int()?;
        self.wrap(u64::try_from(n).map_err(|_| Error::Protocol(format!("negative: {n}"))))
    }

    fn string(&mut self) -> Result<String, Error> {
        let v = self.next()?;
        self.wrap(connection::string(v))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, Error> {
        let v = self.next()?;
        self.wrap(connection::bytes(v))
    }

    /// The next field, itself an array.
    fn nested(&mut self) -> Result<Fields, Error> {
        let v = self.next()?;
        Fields::new(self.script, v)
    }

    fn is_empty(&self) -> bool {
        self.it.len() == 0
    }
}

/// A reply that is a single integer.
fn int_reply(script: &'static str, reply: &Value) -> Result<i64, Error> {
    connection::int(reply).map_err(|e| Error::Protocol(format!("{script}: {e}")))
}

/// Flags `{1|0, ...}`, one per item of a call.
fn flags(script: &'static str, reply: Value, n: usize) -> Result<Vec<bool>, Error> {
    let mut f = Fields::new(script, reply)?;
    let out = (0..n)
        .map(|_| Ok(f.int()? == 1))
        .collect::<Result<Vec<bool>, Error>>()?;
    if !f.is_empty() {
        return Err(Error::Protocol(format!("{script}: reply too long")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
