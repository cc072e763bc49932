//! Connections to one server, a primary that Redis Sentinel watches, or a Redis Cluster;
//! pipelines, and reply decoding.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
#[cfg(test)]
use redis::ConnectionLike;
use redis::{Client, Cmd, Connection, RedisError, RedisResult, Value};

use crate::config::{
    Config, CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, SENTINEL_SCHEME, SENTINEL_TLS_SCHEME,
};
use crate::error::Error;

mod pipeline;
mod sentinel;
mod tls;
pub(crate) use pipeline::{query_one, query_pipe, send_pipe, Answer, Shortfall};
pub(crate) use sentinel::Sentinel;
pub(crate) use tls::handshake_failed;
use tls::TlsFiles;

/// Where a client connects: one server; a primary that Redis Sentinel watches (each
/// connection asks a sentinel where it is now); or a Redis Cluster (its seed nodes kept as
/// plain clients for the notification subscription).
#[derive(Clone)]
pub(crate) enum Endpoint {
    Single(Box<Client>),
    Sentinel(Box<Sentinel>),
    Cluster(Arc<Seeds>, Vec<Client>),
}

/// A Redis Cluster's seed nodes, as one cluster client for each rotation of their list: each
/// connection opened reads its slot map from the next seed in turn. `redis` reads a new
/// connection's map from the first seed that answers, and a seed can answer with a stale one:
/// a primary cut off from the rest of the Cluster still answers its clients, with the map from
/// before its replica took over, until the partition heals. Opened always from the same first
/// seed, every connection made again after an error would get that map again, and its calls
/// would fail for as long as the partition lasts; in turn, the next one asks another seed.
pub(crate) struct Seeds {
    clients: Vec<ClusterClient>,
    next: AtomicUsize,
    /// The seed a subscription tries first next (see [`Endpoint::subscription`]).
    next_subscription: AtomicUsize,
}

impl Seeds {
    /// A new connection, its slot map read from the next seed in turn (the first seed
    /// first).
    pub(crate) fn connect(&self) -> RedisResult<ClusterConnection> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[turn].get_connection()
    }
}

/// A new connection with its read and write timeouts set to `timeout`.
fn timed(con: RedisResult<Connection>, timeout: Duration) -> RedisResult<Connection> {
    let con = con?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// How a subscriber on a Cluster checks that its node hears the Cluster's `PUBLISH`es: a
/// second connection to the node, to ask it whether the Cluster is in order (`CLUSTER
/// INFO`: a node cut off from the majority of the primaries says `fail`, but only once the
/// nodes' timeout has passed, 15 s by default), and a connection to another seed, if the URL
/// names one, to publish probes through: a probe published there reaches the subscription
/// within a round trip when the two nodes are linked, and never when they are not.
pub(crate) struct Watch {
    pub(crate) node: Connection,
    pub(crate) through: Option<Connection>,
}

impl Watch {
    /// Whether the node says its Cluster is in order (`CLUSTER INFO`: `cluster_state:ok`).
    pub(crate) fn cluster_ok(&mut self) -> RedisResult<bool> {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut self.node)?;
        Ok(info.lines().any(|l| l.trim() == "cluster_state:ok"))
    }
}

/// Whether an error leaves the connection it came on unfit for the next call: anything but
/// an error reply (the connection broke, timed out, or is in doubt), or a `READONLY` reply
/// (the node is a replica now: after a failover, the old primary demoted; a new connection
/// finds the new primary, through the sentinels or the Cluster's slot map). A command
/// refused with `READONLY` did not run.
pub(crate) fn unfit(e: &RedisError) -> bool {
    !matches!(e.kind(), redis::ErrorKind::Server(_)) || is_readonly(e)
}

/// Whether an error is a `READONLY` reply: a write sent to a replica, not run.
pub(crate) fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
}

impl Endpoint {
    /// Where `cfg.url` says to connect (checked: an `Error::InvalidUrl` says why not).
    pub(crate) fn of(cfg: &Config) -> Result<Endpoint, Error> {
        let invalid = |reason: String| Error::invalid_url(&cfg.url, reason);
        let cluster = [(CLUSTER_SCHEME, false), (CLUSTER_TLS_SCHEME, true)]
            .into_iter()
            .find_map(|(scheme, tls)| cfg.url.strip_prefix(scheme).map(|rest| (rest, tls)));
        if let Some((rest, tls)) = cluster {
            let form = "expected redis+cluster:// or rediss+cluster://, then \
                        [user:password@]host:port[,host:port...][/]";
            let authority = rest.strip_suffix('/').unwrap_or(rest);
            if authority.contains('/') {
                return Err(invalid(form.into()));
            }
            // The credentials, once before the hosts, are every node's (a Cluster's nodes
            // share them): up to the last `@`, which no host contains.
            let (auth, hosts) = match authority.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), authority),
            };
            if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
                return Err(invalid(form.into()));
            }
            let tls = tls.then(|| TlsFiles::of(cfg));
            let scheme = if tls.is_some() { "rediss" } else { "redis" };
            let nodes = hosts
                .split(',')
                .map(|host| tls::open(&format!("{scheme}://{auth}{host}/"), tls.as_ref(), invalid))
                .collect::<Result<Vec<Client>, Error>>()?;
            // No retries: `redis` sends a command again after an I/O error (on a new
            // connection), so a write that ran would run twice, and a `WAIT` on a fresh
            // connection confirms nothing. Redirections are followed by `send_pipe`.
            let client = |first: usize| {
                let rotated = nodes[first..].iter().chain(&nodes[..first]);
                let mut builder =
                    ClusterClientBuilder::new(rotated.map(|c| c.get_connection_info().clone()))
                        .connection_timeout(cfg.io_timeout)
                        .response_timeout(cfg.io_timeout)
                        .retries(0);
                if let Some(tls) = &tls {
                    builder = tls::cluster(builder, tls, invalid)?;
                }
                builder.build().map_err(|e| invalid(e.to_string()))
            };
            let seeds = Seeds {
                clients: (0..nodes.len()).map(client).collect::<Result<_, _>>()?,
                next: AtomicUsize::new(0),
                next_subscription: AtomicUsize::new(0),
            };
            return Ok(Endpoint::Cluster(Arc::new(seeds), nodes));
        }
        if cfg.url.starts_with(SENTINEL_SCHEME) || cfg.url.starts_with(SENTINEL_TLS_SCHEME) {
            return Sentinel::parse(cfg).map(|s| Endpoint::Sentinel(Box::new(s)));
        }
        if cfg.url.starts_with("rediss://") {
            return tls::client(&cfg.url, &TlsFiles::of(cfg), invalid)
                .map(|c| Endpoint::Single(Box::new(c)));
        }
        if !(cfg.url.starts_with("redis://")
            || cfg.url.starts_with("redis+unix://")
            || cfg.url.starts_with("unix://"))
        {
            return Err(invalid(
                "expected redis://host[:port][/db] (rediss:// over TLS), \
                 redis+sentinel://host[:port][,host[:port]...]/<primary name>[/db] \
                 (rediss+sentinel:// over TLS) or redis+cluster://host:port[,host:port...] \
                 (rediss+cluster:// over TLS)"
                    .into(),
            ));
        }
        Client::open(cfg.url.as_str())
            .map(|c| Endpoint::Single(Box::new(c)))
            .map_err(|e| invalid(e.to_string()))
    }

    /// A plain connection, its read and write timeouts set to `timeout`: to the one server, to the
    /// primary as the sentinels name it now (and its address), or, on a Cluster, to any reachable
    /// seed node (for the notification subscription: in a Cluster a `PUBLISH` reaches every node).
    pub(crate) fn plain_connection(
        &self,
        timeout: Duration,
    ) -> RedisResult<(Connection, Option<String>)> {
        let timed = |con: RedisResult<Connection>| timed(con, timeout);
        match self {
            Endpoint::Single(c) => Ok((timed(c.get_connection_with_timeout(timeout))?, None)),
            Endpoint::Sentinel(s) => s.connect(timeout).map(|(con, addr)| (con, Some(addr))),
            Endpoint::Cluster(_, nodes) => {
                let mut last = None;
                for c in nodes {
                    match timed(c.get_connection_with_timeout(timeout)) {
                        Ok(con) => return Ok((con, None)),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.expect("a cluster URL names at least one node"))
            }
        }
    }

    /// A connection to subscribe with: [`plain_connection`](Self::plain_connection)'s, and on a
    /// Cluster what the subscriber checks its node with ([`Watch`]). A node cut off from the
    /// rest of the Cluster still answers its clients, but a `PUBLISH` made on the other side
    /// of the cut no longer reaches it: a subscription there hears nothing of it, with no
    /// error. Each subscription tries the seeds from the one after the last subscription's,
    /// so that one made again after its node went wrong goes to another node.
    pub(crate) fn subscription(
        &self,
        timeout: Duration,
    ) -> RedisResult<(Connection, Option<Watch>)> {
        let Endpoint::Cluster(seeds, nodes) = self else {
            return Ok((self.plain_connection(timeout)?.0, None));
        };
        let first = seeds.next_subscription.fetch_add(1, Ordering::Relaxed);
        let open = |i: usize| {
            timed(
                nodes[i % nodes.len()].get_connection_with_timeout(timeout),
                timeout,
            )
        };
        let mut last = None;
        for i in first..first + nodes.len() {
            let pair = open(i).and_then(|con| Ok((con, open(i)?)));
            match pair {
                Ok((con, node)) => {
                    // The probes go through the first other seed that answers, if any.
                    let through = (i + 1..i + nodes.len())
                        .filter(|j| j % nodes.len() != i % nodes.len())
                        .find_map(|j| open(j).ok());
                    return Ok((con, Some(Watch { node, through })));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("a cluster URL names at least one node"))
    }

    /// Under Sentinel, whether the primary that this endpoint's last connection reached is
    /// no longer the primary (asked at most every second: see `Sentinel::moved`): its
    /// owner then drops that connection. Every owner of a connection asks before it uses it.
    pub(crate) fn primary_moved(&self, timeout: Duration) -> bool {
        match self {
            Endpoint::Sentinel(s) => s.moved(timeout),
            _ => false,
        }
    }
}

/// A connection to one server or to a Redis Cluster, and the replicas that must confirm its
/// writes. Every script call goes through [`send_pipe`] (or [`query_pipe`]), which a
/// Cluster splits by node and which follow redirections (`redis`'s cluster pipeline does
/// not: it hands a `MOVED` reply back, and its slot map stays stale), and which end each
/// round trip that writes with `WAIT` when [`Config::confirm_replicas`] asks for it. A lone
/// command goes through [`query_one`]; the clock and the scripts have methods of their own
/// (`time_us`, `load_scripts`), which on a Cluster pick their nodes by a fresh slot map.
/// `Con` is no [`ConnectionLike`](redis::ConnectionLike) outside the tests, so no call can
/// bypass all of this and keep a stale slot map for good.
pub(crate) struct Con {
    pub(crate) link: Link,
    /// `WAIT`'s arguments, when writes must be confirmed.
    pub(crate) confirm: Option<Confirm>,
}

/// The connection proper.
pub(crate) enum Link {
    Single(Connection),
    Cluster(Box<ClusterLink>),
}

/// A Cluster connection, and the seeds to open it again with a fresh slot map (it is built
/// without retries, so it never follows a redirection itself: see [`Endpoint::of`]).
pub(crate) struct ClusterLink {
    pub(crate) con: ClusterConnection,
    pub(crate) seeds: Arc<Seeds>,
    /// For the plain connection a command redirected by `ASK` goes through.
    pub(crate) io_timeout: Duration,
    /// How many times the connection was opened again with a fresh slot map (see
    /// [`Con::remaps`]).
    pub(crate) remaps: u64,
}

/// How many replicas must confirm a write, and how long to wait for them (`WAIT`'s
/// arguments): [`Config::confirm_replicas`], [`Config::confirm_timeout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Confirm {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

impl Confirm {
    /// The confirmation `cfg` asks for: `None` when `confirm_replicas` is 0.
    pub(crate) fn of(cfg: &Config) -> Option<Confirm> {
        (cfg.confirm_replicas > 0).then(|| Confirm {
            replicas: cfg.confirm_replicas,
            timeout_ms: (cfg.confirm_timeout.as_millis() as u64).max(1),
        })
    }

    /// The `WAIT` command.
    pub(crate) fn wait(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(self.timeout_ms);
        cmd
    }
}

impl Con {
    /// A connection to one server.
    pub(crate) fn single(con: Connection, confirm: Option<Confirm>) -> Con {
        Con {
            link: Link::Single(con),
            confirm,
        }
    }

    /// A connection to a Cluster, opened from `seeds`.
    pub(crate) fn cluster(
        seeds: &Arc<Seeds>,
        io_timeout: Duration,
        confirm: Option<Confirm>,
    ) -> RedisResult<Con> {
        Ok(Con {
            link: Link::Cluster(Box::new(ClusterLink {
                con: seeds.connect()?,
                seeds: Arc::clone(seeds),
                io_timeout,
                remaps: 0,
            })),
            confirm,
        })
    }

    /// How many times this connection followed a change of the Cluster's topology (opened
    /// again with a fresh slot map after a redirection, a slot in flux or a failed `WAIT`); 0
    /// on one server. A worker reads its windows again when it grows: a node that stopped
    /// serving a shard may have published the notices of its last writes to nobody (a
    /// partition that cut its links took the messages in flight with them).
    pub(crate) fn remaps(&self) -> u64 {
        match &self.link {
            Link::Cluster(c) => c.remaps,
            Link::Single(_) => 0,
        }
    }

    /// Runs `f` with no confirmation: for writes whose loss in a failover costs nothing a
    /// retry or a lease's expiry does not repair (a namespace's meta, a shard's release).
    pub(crate) fn unconfirmed<T>(&mut self, f: impl FnOnce(&mut Con) -> T) -> T {
        let confirm = self.confirm.take();
        let r = f(self);
        self.confirm = confirm;
        r
    }

    #[cfg(test)]
    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match &mut self.link {
            Link::Single(c) => c,
            Link::Cluster(c) => &mut c.con,
        }
    }
}

/// Tests read and write keys straight through a `Con` (one server). The crate itself has no
/// such path: every call goes through [`send_pipe`] (or [`query_one`]), which on a Cluster
/// follows the topology, so no call can keep a stale slot map for good.
#[cfg(test)]
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
        match &self.link {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.con.get_db(),
        }
    }
    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }
    fn is_open(&self) -> bool {
        match &self.link {
            Link::Single(c) => c.is_open(),
            Link::Cluster(c) => c.con.is_open(),
        }
    }
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
