//! A primary with replicas under Redis Sentinel, on loopback ports: for failover tests.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::RedisServer;
use crate::Error;

/// A TLS set-up's certificates, and whether its nodes and sentinels require client ones.
struct Tls<'a> {
    certs: &'a std::path::Path,
    clients: bool,
}

/// How [`RedisSentinel::promote`] takes the primary away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// SIGKILL: the primary is gone (its connections reset); writes it acknowledged and had
    /// not yet sent to its replica are lost.
    Kill,
    /// SIGSTOP: the primary stalls, its connections open and unanswered (a hung host, or one
    /// cut off by a partition). [`RedisSentinel::resume`] continues it: it comes back as the
    /// primary it was until a sentinel tells it to replicate the new one.
    Stop,
}

/// A primary with replicas (private `redis-server`s, each as [`RedisServer`] starts one; the
/// replicas with `--replicaof`) watched by private sentinels (`redis-server <conf>
/// --sentinel`) that fail it over quickly: `down-after-milliseconds` 3000 (as the test
/// Cluster's node timeout), `failover-timeout` 2000. Clients reach it by
/// [`url`](RedisSentinel::url). Killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    /// Ports that lead to a node without being its own (a proxy in front of the first
    /// primary, see [`start_behind`](RedisSentinel::start_behind)), with the node.
    fronts: Vec<(u16, usize)>,
}

impl RedisSentinel {
    /// The name the sentinels know the primary by.
    pub const NAME: &'static str = "tickwheel";

    /// Starts a primary, `replicas` replicas of it and `sentinels` sentinels (a majority of
    /// them must agree that the primary is down: the quorum), and waits until every replica
    /// is in sync and every sentinel knows every replica and every other sentinel.
    pub fn start(replicas: usize, sentinels: usize) -> Result<RedisSentinel, Error> {
        RedisSentinel::start_behind(replicas, sentinels, |port| (port, port))
    }

    /// [`start`](RedisSentinel::start), with the first primary reached through other ports
    /// (proxies a partition test can cut): `front` is given the primary's port and returns
    /// the port the sentinels monitor it by, which is also the address they give clients,
    /// and the port the replicas replicate it from. Nodes the sentinels reconfigure later
    /// are reached directly.
    pub fn start_behind(
        replicas: usize,
        sentinels: usize,
        front: impl FnOnce(u16) -> (u16, u16),
    ) -> Result<RedisSentinel, Error> {
        RedisSentinel::start_as(replicas, sentinels, front, None)
    }

    /// [`start`](RedisSentinel::start), every node and sentinel also taking TLS connections as
    /// [`RedisServer::start_tls`] does with the certificates in `certs`, and everything among
    /// them over TLS (`tls-replication yes`): the sentinels name the nodes' TLS ports, so
    /// clients reach them by [`tls_url`](RedisSentinel::tls_url).
    pub fn start_tls(
        replicas: usize,
        sentinels: usize,
        certs: &std::path::Path,
    ) -> Result<RedisSentinel, Error> {
        RedisSentinel::start_over_tls(replicas, sentinels, certs, false)
    }

    /// [`start_tls`](RedisSentinel::start_tls), every node and sentinel requiring a client
    /// certificate from its TLS clients (`tls-auth-clients yes`, `redis-server`'s default);
    /// sentinels have no `CONFIG SET` to be told so later.
    pub fn start_tls_requiring_client_certs(
        replicas: usize,
        sentinels: usize,
        certs: &std::path::Path,
    ) -> Result<RedisSentinel, Error> {
        RedisSentinel::start_over_tls(replicas, sentinels, certs, true)
    }

    fn start_over_tls(
        replicas: usize,
        sentinels: usize,
        certs: &std::path::Path,
        clients: bool,
    ) -> Result<RedisSentinel, Error> {
        let tls = Tls { certs, clients };
        RedisSentinel::start_as(replicas, sentinels, |port| (port, port), Some(tls))
    }

    /// What [`start_behind`](RedisSentinel::start_behind) and the TLS starts do: the latter
    /// with their certificates and client requirement as `tls`.
    fn start_as(
        replicas: usize,
        sentinels: usize,
        front: impl FnOnce(u16) -> (u16, u16),
        tls: Option<Tls<'_>>,
    ) -> Result<RedisSentinel, Error> {
        // Over TLS, everything among them is TLS too; `tls-auth-clients` when asked.
        let tls_extra: Vec<String> = match &tls {
            None => Vec::new(),
            Some(t) => {
                let mut args = vec!["--tls-replication".into(), "yes".into()];
                if t.clients {
                    args.extend(["--tls-auth-clients".into(), "yes".into()]);
                }
                args
            }
        };
        let tls_certs = tls.as_ref().map(|t| t.certs);
        if replicas == 0 || sentinels == 0 {
            return Err(Error::Server(
                "a Sentinel set-up needs a replica and a sentinel".into(),
            ));
        }
        // A replica moved to the new primary after a failover resynchronizes from the
        // replication backlog (partially) only if the backlog holds what it missed, else
        // in full; the default backlog (1 MB) is outrun in a second of a busy test, and a
        // full sync waits 5 s (`repl-diskless-sync-delay`) before it starts: meanwhile no
        // write can be confirmed by a replica.
        let sync = || -> Vec<String> {
            let mut args = [
                "--repl-backlog-size",
                "64mb",
                "--repl-diskless-sync-delay",
                "0",
            ]
            .map(String::from)
            .to_vec();
            args.extend(tls_extra.iter().cloned());
            args
        };
        let primary = RedisServer::start_as(false, sync(), None, tls_certs)?;
        // Over TLS, the nodes and sentinels reach the primary on its TLS port.
        let reached_on = primary.tls_port().unwrap_or(primary.port());
        let (port, replicate_from) = front(reached_on);
        let fronts = [port, replicate_from]
            .into_iter()
            .filter(|&p| p != reached_on)
            .map(|p| (p, 0))
            .collect();
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let mut args = vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                replicate_from.to_string(),
            ];
            args.extend(sync());
            nodes.push(RedisServer::start_as(false, args, None, tls_certs)?);
        }
        let quorum = sentinels / 2 + 1;
        // Not shorter: a primary just promoted under a test's load has missed a sentinel's
        // pings for a second, and a second failover then demoted it; the sentinels move a
        // demoted primary under the new one only when they next poll it (every 10 s), and
        // until then the new primary had no replica to confirm a write.
        let name = RedisSentinel::NAME;
        let conf = format!(
            "sentinel monitor {name} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {name} 3000\n\
             sentinel failover-timeout {name} 2000\n\
             sentinel parallel-syncs {name} 1\n"
        );
        let mut s = RedisSentinel {
            nodes,
            sentinels: Vec::new(),
            fronts,
        };
        s.wait_replicas(Duration::from_secs(20))?;
        for _ in 0..sentinels {
            s.sentinels.push(RedisServer::start_as(
                false,
                tls_extra.clone(),
                Some(conf.clone()),
                tls_certs,
            )?);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..sentinels {
            loop {
                let m = s.sentinel_view(i)?;
                let field = |k: &str| m.get(k).map(String::as_str).unwrap_or("");
                if field("flags") == "master"
                    && field("num-slaves") == replicas.to_string()
                    && field("num-other-sentinels") == (sentinels - 1).to_string()
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::Server(format!(
                        "sentinel {i} does not see the set-up within 30 s: {m:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(s)
    }

    /// The URL clients connect by: `redis+sentinel://` the sentinels, then the primary's
    /// name.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!(
            "{}{}/{}",
            crate::config::SENTINEL_SCHEME,
            hosts.join(","),
            RedisSentinel::NAME
        )
    }

    /// The URL clients connect by over TLS (`rediss+sentinel://`), when started with
    /// [`start_tls`](RedisSentinel::start_tls).
    pub fn tls_url(&self) -> Option<String> {
        let hosts = self
            .sentinels
            .iter()
            .map(|s| s.tls_port().map(|port| format!("127.0.0.1:{port}")))
            .collect::<Option<Vec<String>>>()?;
        Some(format!(
            "{}{}/{}",
            crate::config::SENTINEL_TLS_SCHEME,
            hosts.join(","),
            RedisSentinel::NAME
        ))
    }

    /// The data nodes: the first started as the primary, the others as its replicas.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// `SENTINEL MASTER` as sentinel `i` answers it.
    fn sentinel_view(&self, i: usize) -> Result<HashMap<String, String>, Error> {
        let mut con = connect(&self.sentinels[i])?;
        Ok(redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(RedisSentinel::NAME)
            .query(&mut con)?)
    }

    /// The node sentinel `i` names as the primary (`SENTINEL get-master-addr-by-name`).
    pub fn named_by(&self, i: usize) -> Result<usize, Error> {
        let mut con = connect(&self.sentinels[i])?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(RedisSentinel::NAME)
            .query(&mut con)?;
        self.node_at(port)
            .ok_or_else(|| Error::Server(format!("sentinel {i} names an unknown port {port}")))
    }

    /// The node at `port`, its own (plain or TLS) or a front's.
    fn node_at(&self, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.port() == port || n.tls_port() == Some(port))
            .or_else(|| {
                self.fronts
                    .iter()
                    .find(|&&(front, _)| front == port)
                    .map(|&(_, node)| node)
            })
    }

    /// Whether node `i` answers `ROLE` as a primary (`false` when it does not answer).
    pub fn is_primary(&self, i: usize) -> bool {
        let role = connect(&self.nodes[i])
            .and_then(|mut c| Ok(redis::cmd("ROLE").query::<Vec<redis::Value>>(&mut c)?));
        matches!(role.as_deref(), Ok([redis::Value::BulkString(b), ..]) if b == b"master")
    }

    /// The primary as the first sentinel that answers names it.
    pub fn primary(&self) -> Result<usize, Error> {
        let mut last = None;
        for i in 0..self.sentinels.len() {
            match self.named_by(i) {
                Ok(n) => return Ok(n),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Server("no sentinel".into())))
    }

    /// Takes the primary away (SIGKILL or SIGSTOP) and waits until a sentinel names another
    /// node as the primary and that node answers as one: the new primary is ready. Returns
    /// the old primary, the new one, and when it was seen ready.
    pub fn promote(
        &mut self,
        how: Promotion,
        timeout: Duration,
    ) -> Result<(usize, usize, Instant), Error> {
        let old = self.primary()?;
        match how {
            Promotion::Kill => self.nodes[old].kill(),
            Promotion::Stop => self.nodes[old].pause(true)?,
        }
        let (new, ready) = self.wait_new_primary(old, timeout)?;
        Ok((old, new, ready))
    }

    /// A failover the sentinels are asked for (`SENTINEL FAILOVER`, on the first sentinel),
    /// the primary up: a replica is promoted, and later (when a sentinel next sees the old
    /// primary, up to 10 s on) the old primary is told to replicate it. Waits as
    /// [`promote`](RedisSentinel::promote) does (not for the old primary: see
    /// [`wait_replicas`](RedisSentinel::wait_replicas)). Returns the old primary, the new
    /// one, and when it was seen ready.
    pub fn failover(&self, timeout: Duration) -> Result<(usize, usize, Instant), Error> {
        let deadline = Instant::now() + timeout;
        let old = self.primary()?;
        let mut con = connect(&self.sentinels[0])?;
        // Refused while a failover is still settling (`INPROG`): ask again.
        loop {
            let r: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(RedisSentinel::NAME)
                .query(&mut con);
            match r {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let (new, ready) =
            self.wait_new_primary(old, deadline.saturating_duration_since(Instant::now()))?;
        Ok((old, new, ready))
    }

    /// Waits until a sentinel names a node other than `old` as the primary and that node
    /// answers as one (the new primary is ready), for a test that takes the primary away
    /// itself (a partition); returns the node and when it was seen ready.
    pub fn wait_new_primary(
        &self,
        old: usize,
        timeout: Duration,
    ) -> Result<(usize, Instant), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            for i in 0..self.sentinels.len() {
                if let Ok(n) = self.named_by(i) {
                    if n != old && self.is_primary(n) {
                        return Ok((n, Instant::now()));
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "no sentinel names a new primary {timeout:?} after node {old} went"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGCONT to node `i` (stopped by [`promote`](RedisSentinel::promote)): it answers again,
    /// as the primary it was until a sentinel reconfigures it as a replica.
    pub fn resume(&self, i: usize) -> Result<(), Error> {
        self.nodes[i].pause(false)
    }

    /// Waits until every running node but the primary the sentinels name reports a
    /// replica whose link to that primary is up (`master_link_status:up`), and every one
    /// acknowledges new writes (see `confirm_streaming` in `server.rs`).
    pub fn wait_replicas(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let primary = if self.sentinels.is_empty() {
                0
            } else {
                self.primary()?
            };
            let synced = self.nodes.iter().enumerate().all(|(i, n)| {
                i == primary || n.pid().is_none() || {
                    let info = connect(n).and_then(|mut c| {
                        Ok(redis::cmd("INFO")
                            .arg("replication")
                            .query::<String>(&mut c)?)
                    });
                    info.is_ok_and(|t| {
                        let master = t
                            .lines()
                            .find_map(|l| l.strip_prefix("master_port:"))
                            .and_then(|p| p.trim().parse().ok());
                        t.contains("master_link_status:up")
                            && master.and_then(|p| self.node_at(p)) == Some(primary)
                    })
                }
            });
            if synced {
                return super::confirm_streaming(&self.nodes[primary], deadline);
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "the replicas are not in sync with node {primary} within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills node `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }
}

/// A connection to `s`, with a 1 s timeout.
fn connect(s: &RedisServer) -> Result<redis::Connection, Error> {
    let client = redis::Client::open(s.url().as_str())?;
    let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_secs(1)))?;
    Ok(con)
}
