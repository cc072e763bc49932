//! Configuration, errors, time sources and the key layout of a namespace.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection, ClusterPipeline};
use redis::{
    Client, Cmd, Connection, ConnectionLike, FromRedisValue, Pipeline, RedisResult, Value,
};

use crate::scripts::scripts;

/// The version of the key layout and value format this crate reads and writes. A namespace
/// stores the version that created it; clients of another version refuse to use it.
pub const SCHEMA_VERSION: u32 = 4;

/// The longest task id, in bytes.
pub const MAX_ID_LEN: usize = 1024;

/// The default [`Config::max_payload`]: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// The largest [`Config::max_payload`] accepted: 64 MiB (Redis itself caps a value at 512 MiB,
/// and a script copies a payload on each delivery).
pub const MAX_PAYLOAD_LIMIT: usize = 64 << 20;

/// What can go wrong. Every variant names its cause; none is a panic.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached or answered with an error.
    Redis(redis::RedisError),
    /// The URL given is not a Redis URL.
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The namespace name is empty, longer than 64 bytes, or contains `{`, `}` or whitespace.
    InvalidNamespace(String),
    /// A task id is empty or longer than [`MAX_ID_LEN`] bytes.
    InvalidId {
        /// The id's length in bytes.
        len: usize,
    },
    /// A payload is larger than [`Config::max_payload`].
    PayloadTooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A run-at instant before the Unix epoch, or beyond what a millisecond score can hold.
    InvalidRunAt,
    /// A configuration value is out of range (the message says which).
    InvalidConfig(String),
    /// A recurrence that cannot be stored or evaluated: a zero period, a cron pattern or time
    /// zone that does not parse, or one longer than [`MAX_RECURRENCE_LEN`](crate::MAX_RECURRENCE_LEN).
    InvalidRecurrence(String),
    /// The namespace was created by another, incompatible version of this crate (or its meta
    /// key holds something else).
    IncompatibleNamespace {
        /// The namespace.
        namespace: String,
        /// What the namespace's meta key holds.
        found: String,
        /// [`SCHEMA_VERSION`].
        expected: u32,
    },
    /// Redis answered in a shape this crate does not expect.
    Protocol(String),
    /// `redis-server` could not be started (see [`crate::server`]).
    Server(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::InvalidUrl { url, reason } => write!(f, "invalid Redis URL {url:?}: {reason}"),
            Error::InvalidNamespace(ns) => write!(
                f,
                "invalid namespace {ns:?}: 1 to 64 bytes, without '{{', '}}' or whitespace"
            ),
            Error::InvalidId { len } => {
                write!(
                    f,
                    "invalid task id of {len} bytes: ids are 1 to {MAX_ID_LEN} bytes"
                )
            }
            Error::PayloadTooLarge { len, max } => {
                write!(
                    f,
                    "payload of {len} bytes is larger than the limit of {max} bytes"
                )
            }
            Error::InvalidRunAt => {
                write!(f, "run-at instant out of range (before the Unix epoch?)")
            }
            Error::InvalidConfig(m) => write!(f, "invalid configuration: {m}"),
            Error::InvalidRecurrence(m) => write!(f, "invalid recurrence: {m}"),
            Error::IncompatibleNamespace {
                namespace,
                found,
                expected,
            } => write!(
                f,
                "namespace {namespace:?} holds schema {found}, this client uses schema \
                 {expected}: use another namespace, or drain and delete this one"
            ),
            Error::Protocol(m) => write!(f, "unexpected reply from Redis: {m}"),
            Error::Server(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Redis(e)
    }
}

/// A manual clock in milliseconds since the Unix epoch, shared by clones.
#[derive(Clone, Debug, Default)]
pub struct ManualTime(Arc<AtomicU64>);

impl ManualTime {
    /// A clock reading `ms`.
    pub fn new(ms: u64) -> ManualTime {
        ManualTime(Arc::new(AtomicU64::new(ms)))
    }
    /// The current reading.
    pub fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    /// Sets the reading.
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    /// Moves the reading forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

/// Where "now" comes from.
#[derive(Clone, Debug, Default)]
pub enum TimeSource {
    /// The Redis server's clock (`TIME`), shared by every client. The default.
    #[default]
    Server,
    /// A clock the caller sets: for tests on virtual time. Every client of a namespace must use
    /// the same one.
    Manual(ManualTime),
}

/// When a task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAt {
    /// At this wall-clock instant (rounded up to the millisecond, so never early).
    At(SystemTime),
    /// At this many milliseconds since the Unix epoch.
    AtMillis(u64),
    /// This long after the instant Redis stores it (by the namespace's clock).
    After(Duration),
}

impl RunAt {
    /// (`a`|`d`, ms): an absolute instant or a delay.
    pub(crate) fn encode(self) -> Result<(&'static str, u64), Error> {
        const MAX: u64 = 1 << 52; // exact in a Redis score (a double)
        let (mode, ms) = match self {
            RunAt::At(t) => {
                let d = t
                    .duration_since(UNIX_EPOCH)
                    .map_err(|_| Error::InvalidRunAt)?;
                let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
                ("a", u64::try_from(ms).map_err(|_| Error::InvalidRunAt)?)
            }
            RunAt::AtMillis(ms) => ("a", ms),
            RunAt::After(d) => {
                let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
                ("d", u64::try_from(ms).map_err(|_| Error::InvalidRunAt)?)
            }
        };
        if ms >= MAX {
            return Err(Error::InvalidRunAt);
        }
        Ok((mode, ms))
    }
}

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// No such task: never scheduled, cancelled, or acknowledged.
    Unknown,
    /// Waiting for its run-at instant.
    Pending {
        /// Run-at, ms since the Unix epoch.
        run_at_ms: u64,
        /// Deliveries so far (non-zero after a retry or a lease takeover).
        attempts: u32,
        /// The task's version (changes with every schedule and reschedule).
        version: u64,
    },
    /// Delivered and not yet acknowledged.
    InFlight {
        /// The run-at it was delivered for, ms since the Unix epoch.
        due_ms: u64,
        /// The attempt being delivered (1 for the first delivery).
        attempt: u32,
        /// The task's version.
        version: u64,
        /// When it becomes deliverable again if not acknowledged, ms since the Unix epoch.
        visible_at_ms: u64,
    },
}

/// Where and how to connect, and the namespace's tunables. Producers and workers of one
/// namespace should share one `Config`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Redis URL: one server (`redis://[user:password@]host[:port][/db]`, or
    /// `redis+unix:///path`), or a Redis Cluster (`redis+cluster://host:port[,host:port...]`,
    /// its seed nodes: see [`Config::cluster`]).
    pub url: String,
    /// The namespace: all keys start with `tw:{namespace`.
    pub namespace: String,
    /// Shards of a namespace this client creates (default 16). An existing namespace keeps
    /// the count it was created with.
    pub shards: u32,
    /// The largest payload accepted, in bytes (default [`DEFAULT_MAX_PAYLOAD`], at most 64 MiB).
    pub max_payload: usize,
    /// Where "now" comes from (default: the Redis server's clock).
    pub time: TimeSource,
    /// How long a worker's shard lease lasts without renewal (default 5 s). A dead worker's
    /// shards are taken over after at most this plus [`Config::maintenance_interval`].
    pub lease: Duration,
    /// How long a delivered, unacknowledged task waits before it is delivered again (default
    /// 30 s). Handlers that run longer should be given more.
    pub visibility_timeout: Duration,
    /// How far ahead a worker loads its shards' tasks into its wheel (default 10 s).
    pub window: Duration,
    /// How long before its run-at a worker claims a task (default 1 s; zero: at its run-at).
    /// A claimed task waits in the worker's memory and is handed to the handler at its run-at
    /// (never early by the worker's estimate of the server's clock, which never runs ahead),
    /// and only while the worker's lease on its shard is still valid by the worker's own,
    /// conservative reckoning. Claiming ahead takes Redis's latency (an fsync under
    /// `appendfsync always`) off the delivery path. The price: a task claimed ahead counts
    /// as in flight, so [`Producer::cancel`](crate::Producer::cancel) and
    /// [`Producer::reschedule`](crate::Producer::reschedule) answer `false` for it during
    /// that last stretch before its run-at, and replacing it then does not stop the claimed
    /// delivery (both versions are delivered; the old one's acknowledgement is refused as
    /// stale). At most half the [`Config::window`] is used. On a Redis Cluster each node has
    /// a clock of its own: a task claimed ahead waits for the worker's estimate of the clock
    /// of the node that claimed it, so node clocks that disagree never make it early.
    pub claim_ahead: Duration,
    /// How often a worker renews leases, rebalances and refills (default 500 ms; at most a
    /// third of the lease is used).
    pub maintenance_interval: Duration,
    /// Most tasks claimed or acknowledged in one script call (default 256).
    pub batch: usize,
    /// Most tasks a worker reads into its windows per step (default 10 000, shared by the
    /// shards read; a step holds Redis for about a microsecond a task): a larger window is
    /// read over several steps, between claims. Each step is a write round trip (it records
    /// the shard's horizon), an fsync wait under `appendfsync always`, so the limit also
    /// bounds how fast a worker can read tasks while Redis is busy.
    pub window_limit: usize,
    /// Timeout of each connection attempt and of each reply (default 5 s).
    pub io_timeout: Duration,
}

impl Config {
    /// Defaults for `url` and `namespace`.
    pub fn new(url: impl Into<String>, namespace: impl Into<String>) -> Config {
        Config {
            url: url.into(),
            namespace: namespace.into(),
            shards: 16,
            max_payload: DEFAULT_MAX_PAYLOAD,
            time: TimeSource::Server,
            lease: Duration::from_secs(5),
            visibility_timeout: Duration::from_secs(30),
            window: Duration::from_secs(10),
            claim_ahead: Duration::from_secs(1),
            maintenance_interval: Duration::from_millis(500),
            batch: 256,
            window_limit: 10_000,
            io_timeout: Duration::from_secs(5),
        }
    }

    /// Defaults for a Redis Cluster given by seed nodes (`host:port`, or `redis://host:port/`
    /// URLs): the URL becomes `redis+cluster://host:port,...`. The client learns the other
    /// nodes and the slot map from the seeds, routes every script and command by its shard's
    /// slot and follows `MOVED`/`ASK` redirections.
    pub fn cluster<S: AsRef<str>>(nodes: &[S], namespace: impl Into<String>) -> Config {
        let hosts: Vec<&str> = nodes
            .iter()
            .map(|n| {
                let n = n.as_ref();
                let n = n.strip_prefix("redis://").unwrap_or(n);
                n.strip_suffix('/').unwrap_or(n)
            })
            .collect();
        Config::new(format!("{CLUSTER_SCHEME}{}", hosts.join(",")), namespace)
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let ns = &self.namespace;
        if ns.is_empty()
            || ns.len() > 64
            || ns
                .chars()
                .any(|c| c == '{' || c == '}' || c.is_whitespace())
        {
            return Err(Error::InvalidNamespace(ns.clone()));
        }
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_string()));
        if self.shards == 0 || self.shards > 16384 {
            return bad("shards must be 1..=16384");
        }
        if self.max_payload > MAX_PAYLOAD_LIMIT {
            return bad("max_payload must be at most 64 MiB");
        }
        if self.lease < Duration::from_millis(100) {
            return bad("lease must be at least 100 ms");
        }
        if self.visibility_timeout < Duration::from_millis(1) {
            return bad("visibility_timeout must be at least 1 ms");
        }
        if self.window < Duration::from_millis(10) {
            return bad("window must be at least 10 ms");
        }
        if self.batch == 0 || self.window_limit == 0 {
            return bad("batch and window_limit must be positive");
        }
        if self.io_timeout.is_zero() {
            return bad("io_timeout must be positive");
        }
        Ok(())
    }

    pub(crate) fn client(&self) -> Result<Endpoint, Error> {
        let invalid = |reason: String| Error::InvalidUrl {
            url: self.url.clone(),
            reason,
        };
        if let Some(rest) = self.url.strip_prefix(CLUSTER_SCHEME) {
            let hosts = rest.strip_suffix('/').unwrap_or(rest);
            if hosts.is_empty() || hosts.contains('/') {
                return Err(invalid(
                    "expected redis+cluster://host:port[,host:port...][/]".into(),
                ));
            }
            let mut nodes = Vec::new();
            for host in hosts.split(',') {
                let url = format!("redis://{host}/");
                nodes.push(Client::open(url.as_str()).map_err(|e| invalid(e.to_string()))?);
            }
            let cluster =
                ClusterClientBuilder::new(nodes.iter().map(|c| c.get_connection_info().clone()))
                    .connection_timeout(self.io_timeout)
                    .response_timeout(self.io_timeout)
                    .build()
                    .map_err(|e| invalid(e.to_string()))?;
            return Ok(Endpoint::Cluster(Box::new(cluster), nodes));
        }
        if !(self.url.starts_with("redis://")
            || self.url.starts_with("rediss://")
            || self.url.starts_with("redis+unix://")
            || self.url.starts_with("unix://"))
        {
            return Err(invalid(
                "expected redis://host[:port][/db] or redis+cluster://host:port[,host:port...]"
                    .into(),
            ));
        }
        Client::open(self.url.as_str())
            .map(Endpoint::Single)
            .map_err(|e| invalid(e.to_string()))
    }

    /// The claim horizon in use, ms: [`Config::claim_ahead`], at most half the window.
    pub(crate) fn ahead_ms(&self) -> u64 {
        self.claim_ahead.min(self.window / 2).as_millis() as u64
    }

    /// The `now` argument of a script: empty for the server clock.
    pub(crate) fn now_arg(&self) -> String {
        match &self.time {
            TimeSource::Server => String::new(),
            TimeSource::Manual(t) => t.now_ms().to_string(),
        }
    }
}

/// The keys of one shard, in script order.
#[derive(Clone, Debug)]
pub(crate) struct ShardKeys(pub [String; 4]);

/// A namespace as opened: its keys and stored shard count.
#[derive(Clone, Debug)]
pub(crate) struct Namespace {
    pub shards: Vec<ShardKeys>,
    pub channel: String,
    pub workers_key: String,
}

impl Namespace {
    /// Checks (creating when absent) the namespace's meta key.
    pub(crate) fn open(cfg: &Config, con: &mut Con) -> Result<Namespace, Error> {
        let ns = &cfg.namespace;
        let meta = format!("tw:{{{ns}}}:meta");
        let (schema, shards): (Option<String>, Option<String>) = scripts()
            .init
            .key(&meta)
            .arg(SCHEMA_VERSION)
            .arg(cfg.shards)
            .invoke(con)
            .map_err(|e| match e.kind() {
                redis::ErrorKind::Server(_) if e.code() == Some("WRONGTYPE") => {
                    Error::IncompatibleNamespace {
                        namespace: ns.clone(),
                        found: "a key that is not a hash".into(),
                        expected: SCHEMA_VERSION,
                    }
                }
                _ => Error::Redis(e),
            })?;
        let incompatible = |found: String| Error::IncompatibleNamespace {
            namespace: ns.clone(),
            found,
            expected: SCHEMA_VERSION,
        };
        let schema = schema.ok_or_else(|| incompatible("no schema version".into()))?;
        if schema != SCHEMA_VERSION.to_string() {
            return Err(incompatible(format!("version {schema:?}")));
        }
        let n: u32 = shards
            .as_deref()
            .and_then(|s| s.parse().ok())
            .filter(|&n| (1..=16384).contains(&n))
            .ok_or_else(|| incompatible(format!("shard count {shards:?}")))?;
        Ok(Namespace {
            shards: (0..n)
                .map(|s| {
                    let tag = format!("tw:{{{ns}:{s}}}");
                    ShardKeys([
                        format!("{tag}:due"),
                        format!("{tag}:tasks"),
                        format!("{tag}:inflight"),
                        format!("{tag}:state"),
                    ])
                })
                .collect(),
            channel: format!("tw:{{{ns}}}:wake"),
            workers_key: format!("tw:{{{ns}}}:workers"),
        })
    }

    /// `script` prepared with the keys of `id`'s shard, in script order: every per-task script
    /// runs on that one shard (one hash slot in a Cluster).
    pub(crate) fn invoke<'s>(
        &self,
        script: &'s redis::Script,
        id: &str,
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        for k in &self.shards[self.shard_of(id) as usize].0 {
            inv.key(k);
        }
        inv
    }

    /// The shard of a task id: FNV-1a (64 bit) of its bytes modulo the shard count. Part of
    /// the schema: it never changes within a [`SCHEMA_VERSION`].
    pub(crate) fn shard_of(&self, id: &str) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in id.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (h % self.shards.len() as u64) as u32
    }
}

/// The URL scheme of a Redis Cluster: `redis+cluster://` and a comma-separated list of seed
/// nodes (`host:port`); the client learns the rest of the cluster from them.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// Where a client connects: one server, or a Redis Cluster (its seed nodes kept as plain
/// clients for the notification subscription).
#[derive(Clone)]
pub(crate) enum Endpoint {
    Single(Client),
    Cluster(Box<ClusterClient>, Vec<Client>),
}

impl Endpoint {
    /// A plain connection for the notification subscription. In a Cluster a `PUBLISH` reaches
    /// every node, so any reachable seed node will do.
    pub(crate) fn pubsub_connection(&self, timeout: Duration) -> RedisResult<Connection> {
        match self {
            Endpoint::Single(c) => c.get_connection_with_timeout(timeout),
            Endpoint::Cluster(_, nodes) => {
                let mut last = None;
                for c in nodes {
                    match c.get_connection_with_timeout(timeout) {
                        Ok(con) => return Ok(con),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.expect("a cluster URL names at least one node"))
            }
        }
    }
}

/// A connection to one server or to a Redis Cluster. Single commands and scripts go through
/// [`ConnectionLike`] (a Cluster connection routes them by their first key's slot and follows
/// `MOVED`/`ASK`); pipelines go through [`query_pipe`], which a Cluster splits by node.
pub(crate) enum Con {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

impl Con {
    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Con::Single(c) => c,
            Con::Cluster(c) => &mut **c,
        }
    }
}

impl ConnectionLike for Con {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.inner().req_packed_command(cmd)
    }
    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }
    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.inner().req_command(cmd)
    }
    fn get_db(&self) -> i64 {
        match self {
            Con::Single(c) => c.get_db(),
            Con::Cluster(c) => c.get_db(),
        }
    }
    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }
    fn is_open(&self) -> bool {
        match self {
            Con::Single(c) => c.is_open(),
            Con::Cluster(c) => c.is_open(),
        }
    }
}

/// Runs a pipeline: in one round trip on one server; on a Cluster as a cluster pipeline, which
/// sends each command to the node of its slot (one round trip per node involved) and returns
/// the replies in the pipeline's order. Every command here touches one shard's keys, so each
/// is routable on its own.
pub(crate) fn query_pipe<T: FromRedisValue>(con: &mut Con, pipe: &Pipeline) -> RedisResult<T> {
    match con {
        Con::Single(c) => pipe.query(c),
        Con::Cluster(c) => {
            let mut cp = ClusterPipeline::new();
            for cmd in pipe.cmd_iter() {
                cp.add_command(cmd.clone());
            }
            cp.query(c)
        }
    }
}

/// Opens a connection with the configured timeouts, and loads the scripts (on every node of a
/// Cluster).
pub(crate) fn connect(cfg: &Config, client: &Endpoint) -> Result<Con, Error> {
    let mut con = match client {
        Endpoint::Single(client) => {
            let con = client.get_connection_with_timeout(cfg.io_timeout)?;
            con.set_read_timeout(Some(cfg.io_timeout))?;
            con.set_write_timeout(Some(cfg.io_timeout))?;
            Con::Single(con)
        }
        Endpoint::Cluster(client, _) => Con::Cluster(Box::new(client.get_connection()?)),
    };
    scripts().load_all(&mut con)?;
    Ok(con)
}

pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(Error::InvalidId { len: id.len() });
    }
    Ok(())
}

/// Reply decoding helpers.
pub(crate) fn int(v: &Value) -> Result<i64, Error> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map(|f| f as i64)
            .ok_or_else(|| Error::Protocol(format!("not a number: {v:?}"))),
        Value::SimpleString(s) => s
            .parse::<f64>()
            .map(|f| f as i64)
            .map_err(|_| Error::Protocol(format!("not a number: {v:?}"))),
        _ => Err(Error::Protocol(format!("not a number: {v:?}"))),
    }
}

pub(crate) fn array(v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(a) => Ok(a),
        v => Err(Error::Protocol(format!("not an array: {v:?}"))),
    }
}

pub(crate) fn bytes(v: Value) -> Result<Vec<u8>, Error> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        v => Err(Error::Protocol(format!("not a string: {v:?}"))),
    }
}

pub(crate) fn string(v: Value) -> Result<String, Error> {
    String::from_utf8(bytes(v)?).map_err(|_| Error::Protocol("id is not UTF-8".into()))
}
