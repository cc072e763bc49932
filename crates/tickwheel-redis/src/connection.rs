//! Connections to one server, a primary that Redis Sentinel watches, or a Redis Cluster;
//! pipelines, and reply decoding.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{Client, Cmd, Connection, ConnectionLike, RedisError, RedisResult, Value};

use crate::config::{Config, CLUSTER_SCHEME, SENTINEL_SCHEME};
use crate::error::Error;

mod pipeline;
mod sentinel;
pub(crate) use pipeline::{query_pipe, send_pipe, Answer};
pub(crate) use sentinel::Sentinel;

/// Where a client connects: one server; a primary that Redis Sentinel watches (each
/// connection asks a sentinel where it is now); or a Redis Cluster (its seed nodes kept as
/// plain clients for the notification subscription).
#[derive(Clone)]
pub(crate) enum Endpoint {
    Single(Client),
    Sentinel(Box<Sentinel>),
    Cluster(Box<ClusterClient>, Vec<Client>),
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
        let invalid = |reason: String| Error::InvalidUrl {
            url: cfg.url.clone(),
            reason,
        };
        if let Some(rest) = cfg.url.strip_prefix(CLUSTER_SCHEME) {
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
                    .connection_timeout(cfg.io_timeout)
                    .response_timeout(cfg.io_timeout)
                    .build()
                    .map_err(|e| invalid(e.to_string()))?;
            return Ok(Endpoint::Cluster(Box::new(cluster), nodes));
        }
        if cfg.url.starts_with(SENTINEL_SCHEME) {
            return Sentinel::parse(&cfg.url)
                .map(|s| Endpoint::Sentinel(Box::new(s)))
                .map_err(invalid);
        }
        if !(cfg.url.starts_with("redis://")
            || cfg.url.starts_with("rediss://")
            || cfg.url.starts_with("redis+unix://")
            || cfg.url.starts_with("unix://"))
        {
            return Err(invalid(
                "expected redis://host[:port][/db], \
                 redis+sentinel://host[:port][,host[:port]...]/<primary name>[/db] or \
                 redis+cluster://host:port[,host:port...]"
                    .into(),
            ));
        }
        Client::open(cfg.url.as_str())
            .map(Endpoint::Single)
            .map_err(|e| invalid(e.to_string()))
    }

    /// A plain connection, its read and write timeouts set to `timeout`: to the one server,
    /// to the primary as the sentinels name it now (and its address), or, on a Cluster, to any reachable seed node (for the
    /// notification subscription: in a Cluster a `PUBLISH` reaches every node).
    pub(crate) fn plain_connection(
        &self,
        timeout: Duration,
    ) -> RedisResult<(Connection, Option<String>)> {
        let timed = |con: Connection| -> RedisResult<Connection> {
            con.set_read_timeout(Some(timeout))?;
            con.set_write_timeout(Some(timeout))?;
            Ok(con)
        };
        match self {
            Endpoint::Single(c) => Ok((timed(c.get_connection_with_timeout(timeout)?)?, None)),
            Endpoint::Sentinel(s) => s.connect(timeout).map(|(con, addr)| (con, Some(addr))),
            Endpoint::Cluster(_, nodes) => {
                let mut last = None;
                for c in nodes {
                    match c.get_connection_with_timeout(timeout).and_then(timed) {
                        Ok(con) => return Ok((con, None)),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.expect("a cluster URL names at least one node"))
            }
        }
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

    /// Opens a connection, its read and write timeouts set to `timeout` (the connection
    /// itself, not its scripts: see `protocol::connect`).
    pub(crate) fn connect(&self, timeout: Duration) -> RedisResult<Con> {
        match self {
            Endpoint::Cluster(client, _) => Ok(Con::Cluster(Box::new(client.get_connection()?))),
            _ => Ok(Con::Single(self.plain_connection(timeout)?.0)),
        }
    }
}

/// A connection to one server or to a Redis Cluster. Single commands and scripts go through
/// [`ConnectionLike`] (a Cluster connection routes them by their first key's slot and follows
/// `MOVED`/`ASK`); pipelines go through [`send_pipe`] or [`query_pipe`], which a Cluster
/// splits by node and which follow redirections too (`redis`'s cluster pipeline does not:
/// it hands a `MOVED` reply back, and its slot map stays stale).
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
