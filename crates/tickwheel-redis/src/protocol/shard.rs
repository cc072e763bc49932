//! Leases, liveness, clocks and the namespace: ACQUIRE, RELEASE, HEARTBEAT, PROBE, INIT.

use redis::{Cmd, Script, Value};

use super::ShardKeys;
use super::{flag, int_reply, now_arg, shard_keys, Call, Fields};
use crate::error::Error;
use crate::protocol::scripts::{scripts, PROBE};

/// A worker's tenure of a shard: the epoch it took the shard under and its own id. It is
/// the fencing token of every call that reads or changes the shard's tasks for the worker
/// (LOAD, DELIVER, ACK, RETRY, FAIL, RELEASE; `holds` in `prelude.lua`): such a call runs only
/// while the shard's state names this worker as owner under this epoch. The epoch alone is
/// not enough: a failover that loses a write can issue the same epoch twice, to two
/// workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tenure<'a> {
    pub epoch: u64,
    pub worker: &'a str,
}

impl<'a> Tenure<'a> {
    /// Worker `worker`'s tenure under `epoch`.
    pub(crate) fn new(epoch: u64, worker: &'a str) -> Tenure<'a> {
        Tenure { epoch, worker }
    }
}

impl redis::ToRedisArgs for Tenure<'_> {
    /// One argument, `epoch:worker`.
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(format_args!("{}:{}", self.epoch, self.worker));
    }
}

impl redis::ToSingleRedisArg for Tenure<'_> {}

/// ACQUIRE (`acquire.lua`): takes a shard (`held_epoch` 0) or renews the lease held under
/// `held_epoch`. Taking bumps the shard's epoch (with the owner, the fencing token: a
/// [`Tenure`]) and puts the previous tenure's in-flight tasks back among the pending ones. A
/// worker may take a shard whose live lease it holds itself (after losing the reply to its
/// acquisition).
pub(crate) struct Acquire<'a> {
    pub keys: &'a ShardKeys,
    pub now: Option<u64>,
    /// The worker's id.
    pub worker: &'a str,
    pub lease_ms: u64,
    /// The epoch held, 0 to take the shard.
    pub held_epoch: u64,
}

/// The reply to [`Acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AcquireReply {
    /// The epoch now held, `None` when refused (another live owner, or a renewal under an
    /// epoch that moved on: the shard is lost).
    pub epoch: Option<u64>,
    /// The script's now, ms.
    pub now_ms: u64,
    /// Whether the shard is paused.
    pub paused: bool,
}

impl Call for Acquire<'_> {
    type Reply = AcquireReply;

    fn script(&self) -> &'static Script {
        &scripts().acquire
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        now_arg(cmd, self.now);
        cmd.arg(self.worker).arg(self.lease_ms).arg(self.held_epoch);
    }

    /// `{epoch or 0, now, paused}`.
    fn decode(&self, reply: Value) -> Result<AcquireReply, Error> {
        let mut f = Fields::new("ACQUIRE", reply)?;
        let epoch = f.u64()?;
        Ok(AcquireReply {
            epoch: (epoch > 0).then_some(epoch),
            now_ms: f.u64()?,
            paused: f.int()? == 1,
        })
    }
}

/// RELEASE (`release.lua`): gives a shard up if it is held under `tenure` (the next owner
/// bumps the epoch). Reply: whether it was given up.
pub(crate) struct Release<'a> {
    pub keys: &'a ShardKeys,
    pub tenure: Tenure<'a>,
}

impl Call for Release<'_> {
    type Reply = bool;

    fn script(&self) -> &'static Script {
        &scripts().release
    }

    fn encode(&self, cmd: &mut Cmd) {
        shard_keys(cmd, self.keys);
        cmd.arg(self.tenure);
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        Ok(int_reply("RELEASE", &reply)? == 1)
    }
}

/// HEARTBEAT (`heartbeat.lua`): registers `worker` as live for `ttl_ms` (0: leaves), and
/// counts the live workers.
pub(crate) struct Heartbeat<'a> {
    /// The namespace's worker set.
    pub workers_key: &'a str,
    pub now: Option<u64>,
    pub worker: &'a str,
    /// 0 to leave.
    pub ttl_ms: u64,
    /// Whether Redis is a Cluster (the reply then names the node, see `node_id`).
    pub cluster: bool,
}

/// The reply to [`Heartbeat`]: the live workers and a reading of the clock of the node that
/// ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeartbeatReply {
    pub live: u64,
    pub now_ms: u64,
    pub now_us: i64,
    /// The Cluster node id, empty on one server.
    pub node: String,
}

impl Call for Heartbeat<'_> {
    type Reply = HeartbeatReply;

    fn script(&self) -> &'static Script {
        &scripts().heartbeat
    }

    fn encode(&self, cmd: &mut Cmd) {
        cmd.arg(1).arg(self.workers_key);
        now_arg(cmd, self.now);
        cmd.arg(self.worker)
            .arg(self.ttl_ms)
            .arg(flag(self.cluster));
    }

    /// `{live workers, now, now_us, node}`.
    fn decode(&self, reply: Value) -> Result<HeartbeatReply, Error> {
        let mut f = Fields::new("HEARTBEAT", reply)?;
        Ok(HeartbeatReply {
            live: f.u64()?,
            now_ms: f.u64()?,
            now_us: f.int()?,
            node: f.string()?,
        })
    }
}

/// INIT (`init.lua`): creates the namespace's meta hash when absent. Reply: its schema
/// version and shard count as stored (`None` for a field missing, or a foreign key).
/// A key of another type fails with a `WRONGTYPE` [`Error::Redis`].
pub(crate) struct Init<'a> {
    /// The namespace's meta key.
    pub meta: &'a str,
    pub schema: u32,
    pub shards: u32,
}

impl Call for Init<'_> {
    type Reply = (Option<String>, Option<String>);

    fn script(&self) -> &'static Script {
        &scripts().init
    }

    fn encode(&self, cmd: &mut Cmd) {
        cmd.arg(1).arg(self.meta).arg(self.schema).arg(self.shards);
    }

    fn decode(&self, reply: Value) -> Result<Self::Reply, Error> {
        redis::from_redis_value(reply).map_err(|e| Error::Protocol(format!("INIT: {e}")))
    }
}

/// PROBE (`probe.lua`): a reading of a Cluster node's clock, sent with `EVAL` (no keys, no
/// prelude) to each primary in turn, for the workers' clock estimates.
pub(crate) struct Probe;

/// The reply to [`Probe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProbeReply {
    /// The node's clock, µs since the Unix epoch.
    pub now_us: i64,
    /// The node's Cluster id.
    pub node: String,
}

impl Probe {
    /// The `EVAL` command (the probe is sent with its text, to nodes that may not have it
    /// cached).
    pub(crate) fn command() -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(PROBE).arg(0);
        cmd
    }

    /// `{seconds, microseconds, node id}`.
    pub(crate) fn decode(reply: Value) -> Result<ProbeReply, Error> {
        let mut f = Fields::new("PROBE", reply)?;
        let (secs, micros) = (f.int()?, f.int()?);
        Ok(ProbeReply {
            now_us: secs * 1_000_000 + micros,
            node: f.string()?,
        })
    }
}
