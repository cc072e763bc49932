//! Connections to one server or a Redis Cluster, pipelines, and reply decoding.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{Client, Cmd, Connection, ConnectionLike, RedisResult, Value};

use crate::config::{Config, CLUSTER_SCHEME};
use crate::error::Error;

mod pipeline;
pub(crate) use pipeline::{query_pipe, send_pipe, Answer};

/// Where a client connects: one server, or a Redis Cluster (its seed nodes kept as plain
/// clients for the notification subscription).
#[derive(Clone)]
pub(crate) enum Endpoint {
    Single(Client),
    Cluster(Box<ClusterClient>, Vec<Client>),
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
        if !(cfg.url.starts_with("redis://")
            || cfg.url.starts_with("rediss://")
            || cfg.url.starts_with("redis+unix://")
            || cfg.url.starts_with("unix://"))
        {
            return Err(invalid(
                "expected redis://host[:port][/db] or redis+cluster://host:port[,host:port...]"
                    .into(),
            ));
        }
        Client::open(cfg.url.as_str())
            .map(Endpoint::Single)
            .map_err(|e| invalid(e.to_string()))
    }

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
