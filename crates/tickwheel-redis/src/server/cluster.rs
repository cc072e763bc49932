//! A private Redis Cluster of [`RedisServer`] nodes, on loopback ports: for Cluster tests,
//! failovers and partitions.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{confirm_streaming, free_port, RedisServer};
use crate::Error;

/// Refuses fewer than 3 primaries, as Redis Cluster does.
fn enough_primaries(primaries: usize) -> Result<(), Error> {
    if primaries < 3 {
        return Err(Error::Server(
            "a Redis Cluster needs at least 3 nodes".into(),
        ));
    }
    Ok(())
}

/// A Redis Cluster of private `redis-server` nodes (each as [`RedisServer`] starts one, with
/// `--cluster-enabled yes` and its `nodes.conf` in its own directory), its slots spread evenly
/// over the primaries by `redis-cli --cluster create`; no replicas ([`start`](RedisCluster::start))
/// or some per primary ([`start_with_replicas`](RedisCluster::start_with_replicas), for
/// failovers: [`failover`](RedisCluster::failover)). Killed on drop.
///
/// `redis-cli` is taken from `PATH`, or the path in `TICKWHEEL_REDIS_CLI`; Debian's
/// `redis-server` package ships it (as `redis-tools`).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` nodes (at least 3, as Redis Cluster requires), forms the cluster and waits
    /// until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> Result<RedisCluster, Error> {
        RedisCluster::start_with_replicas(n, 0)
    }

    /// Starts `primaries` primaries (at least 3) and `replicas` replicas of each, forms the
    /// cluster (`redis-cli --cluster create ... --cluster-replicas <replicas>`, which picks
    /// which node serves which) and waits until every node reports `cluster_state:ok` and
    /// every replica's link to its primary is up.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> Result<RedisCluster, Error> {
        enough_primaries(primaries)?;
        let nodes = (0..primaries * (1 + replicas))
            .map(|_| RedisServer::start_with(true))
            .collect::<Result<Vec<_>, _>>()?;
        RedisCluster::form(nodes, replicas)
    }

    /// [`start_with_replicas`](Self::start_with_replicas), with each node's cluster bus behind
    /// a port of the caller's: `behind(bus)` gets the port a node's bus listens on
    /// (`cluster-port`) and returns the port the node announces for it
    /// (`cluster-announce-bus-port`: a proxy to `bus`, say), so that every link between two
    /// nodes goes through the caller's ports from the start (for partition tests).
    pub fn start_with_replicas_behind(
        primaries: usize,
        replicas: usize,
        mut behind: impl FnMut(u16) -> u16,
    ) -> Result<RedisCluster, Error> {
        enough_primaries(primaries)?;
        let nodes = (0..primaries * (1 + replicas))
            .map(|_| {
                let bus = free_port()?;
                let announced = behind(bus);
                let args = [
                    "--cluster-port".to_string(),
                    bus.to_string(),
                    "--cluster-announce-bus-port".to_string(),
                    announced.to_string(),
                ];
                RedisServer::start_as(true, args.to_vec(), None, None)
            })
            .collect::<Result<Vec<_>, _>>()?;
        RedisCluster::form(nodes, replicas)
    }

    /// Starts `primaries` primaries (at least 3), no replicas, each also taking TLS
    /// connections as [`RedisServer::start_tls`] does, with the cluster bus over TLS too: a
    /// node answers a TLS client with its nodes' TLS ports ([`tls_seeds`](Self::tls_seeds)),
    /// a plain one with their plain ports.
    pub fn start_tls(primaries: usize, certs: &std::path::Path) -> Result<RedisCluster, Error> {
        enough_primaries(primaries)?;
        let tls_bus = ["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from);
        let nodes = (0..primaries)
            .map(|_| RedisServer::start_as(true, tls_bus.to_vec(), None, Some(certs)))
            .collect::<Result<Vec<_>, _>>()?;
        RedisCluster::form(nodes, 0)
    }

    /// Forms a cluster of `nodes`, `replicas` replicas a primary, and waits until it is ok.
    fn form(nodes: Vec<RedisServer>, replicas: usize) -> Result<RedisCluster, Error> {
        let cli = std::env::var("TICKWHEEL_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let out = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|s| format!("127.0.0.1:{}", s.port)))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::Server(format!(
                    "{cli} was not found: it ships with redis-server (Debian/Ubuntu: \
                     `apt-get install -y redis-server`), or set TICKWHEEL_REDIS_CLI to its path"
                )),
                _ => Error::Server(format!("cannot run {cli}: {e}")),
            })?;
        if !out.status.success() {
            return Err(Error::Server(format!(
                "{cli} --cluster create failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// Waits until every node reports `cluster_state:ok`, every replica's link to its
    /// primary is up (`master_link_status:up`), and every primary's connected replicas
    /// acknowledge new writes (see `confirm_streaming`).
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.nodes.len() {
            if self.nodes[i].pid().is_none() {
                continue; // killed
            }
            loop {
                let info = self.info(i, "CLUSTER", "INFO")?;
                let repl = self.info(i, "INFO", "replication")?;
                let ok = info.lines().any(|l| l.trim() == "cluster_state:ok")
                    && (repl.lines().any(|l| l.trim() == "role:master")
                        || repl.lines().any(|l| l.trim() == "master_link_status:up"));
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::Server(format!(
                        "node {i} is not ready within {timeout:?}: {info}{repl}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Every replica's link is up: now its stream must flow (a replica has nothing to
        // confirm, `confirm_streaming` sees).
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            confirm_streaming(node, deadline)?;
        }
        Ok(())
    }

    /// A node's answer to `<cmd> <arg>` (e.g. `CLUSTER INFO`, `INFO replication`) as text.
    fn info(&self, node: usize, cmd: &str, arg: &str) -> Result<String, Error> {
        let client = redis::Client::open(self.nodes[node].url().as_str())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        Ok(redis::cmd(cmd).arg(arg).query(&mut con)?)
    }

    /// Whether node `node` is a primary now (`INFO replication` says `role:master`).
    pub fn is_primary(&self, node: usize) -> Result<bool, Error> {
        let repl = self.info(node, "INFO", "replication")?;
        Ok(repl.lines().any(|l| l.trim() == "role:master"))
    }

    /// `CONFIG SET parameter value` on every node.
    pub fn config_set(&self, parameter: &str, value: &str) -> Result<(), Error> {
        self.nodes
            .iter()
            .try_for_each(|node| node.config_set(parameter, value))
    }

    /// The primary (an index into [`nodes`](RedisCluster::nodes)) that replica `node`
    /// replicates: the node at its `master_port` (`INFO replication`).
    pub fn primary_of(&self, node: usize) -> Result<usize, Error> {
        let repl = self.info(node, "INFO", "replication")?;
        let port: u16 = repl
            .lines()
            .find_map(|l| l.trim().strip_prefix("master_port:"))
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::Server(format!("node {node} is not a replica: {repl}")))?;
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .ok_or_else(|| Error::Server(format!("node {node} replicates port {port}, no node")))
    }

    /// The indices (into [`nodes`](RedisCluster::nodes)) of the nodes that are replicas now
    /// (a killed node is neither).
    pub fn replicas(&self) -> Result<Vec<usize>, Error> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            if self.nodes[i].pid().is_some() && !self.is_primary(i)? {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// A graceful failover: `CLUSTER FAILOVER` on replica `node`, which then takes over its
    /// primary's slots (the old primary becomes its replica). Waits until `node` is a primary
    /// and every node reports `cluster_state:ok` (see [`wait_ok`](RedisCluster::wait_ok)).
    pub fn failover(&self, node: usize, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let client = redis::Client::open(self.nodes[node].url().as_str())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        // A manual failover the primary does not take part in within 5 s (Redis's
        // CLUSTER_MF_TIMEOUT: say, just after its own promotion) is given up: ask again.
        let mut asked: Option<Instant> = None;
        while !self.is_primary(node)? {
            if asked.is_none_or(|t| t.elapsed() > Duration::from_secs(6)) {
                let _: String = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut con)?;
                asked = Some(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "node {node} is not a primary {timeout:?} after CLUSTER FAILOVER"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.wait_ok(deadline.saturating_duration_since(Instant::now()))
    }

    /// Kills primary `node` (SIGKILL: writes it acknowledged and had not yet sent to its
    /// replica are lost) and waits until another node has become a primary (its replica,
    /// promoted once the others mark it failed: the nodes' timeout is 3 s) and every live
    /// node reports `cluster_state:ok`. Returns when that was seen.
    pub fn kill_primary(&mut self, node: usize, timeout: Duration) -> Result<Instant, Error> {
        let deadline = Instant::now() + timeout;
        let before = self.replicas()?;
        if before.contains(&node) {
            return Err(Error::Server(format!("node {node} is not a primary")));
        }
        self.nodes[node].kill();
        loop {
            let promoted = before
                .iter()
                .any(|&i| self.nodes[i].pid().is_some() && self.is_primary(i).unwrap_or(false));
            let ok = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].pid().is_some())
                .all(|i| {
                    self.info(i, "CLUSTER", "INFO")
                        .is_ok_and(|t| t.lines().any(|l| l.trim() == "cluster_state:ok"))
                });
            if promoted && ok {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "no replica of node {node} took over within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes' addresses, `127.0.0.1:port`: seeds for
    /// [`Config::cluster`](crate::Config::cluster).
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The nodes' TLS `host:port`s, for a `rediss+cluster://` URL: empty unless started with
    /// [`start_tls`](RedisCluster::start_tls).
    pub fn tls_seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|s| s.tls.as_ref().map(|(port, _)| format!("127.0.0.1:{port}")))
            .collect()
    }
}
