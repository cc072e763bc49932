//! Starts a private `redis-server` for tests, benchmarks and demos: its own port, its own
//! directory, the append-only file on with `appendfsync always`, no RDB snapshots; or a
//! private Redis Cluster of such servers ([`RedisCluster`]); or a primary with replicas
//! under private sentinels ([`RedisSentinel`]), for failover tests.
//!
//! The binary is `redis-server` from `PATH`, or the path in `TICKWHEEL_REDIS_SERVER`. When it
//! is missing, [`RedisServer::start`] returns [`Error::Server`] saying how to install it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::Error;

/// How to install `redis-server`, for error messages.
pub const INSTALL_HINT: &str = "redis-server was not found: install it (Debian/Ubuntu: \
     `apt-get install -y redis-server`; macOS: `brew install redis`) or set \
     TICKWHEEL_REDIS_SERVER to its path";

/// A `redis-server` child process, killed (and its directory removed) on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    binary: String,
    cluster: bool,
    /// More arguments (a replica's `--replicaof`), given last.
    extra: Vec<String>,
    /// A sentinel: its configuration file's text (written once: the sentinel rewrites it).
    sentinel: Option<String>,
    /// A TLS port beside the plain one, and the directory of its certificates.
    tls: Option<(u16, PathBuf)>,
}

/// The arguments that make a server or sentinel take TLS clients on `port`, with the
/// certificates in `certs` (see [`RedisServer::start_tls`]), not requiring theirs.
fn tls_args<'a>(cmd: &'a mut Command, port: u16, certs: &Path) -> &'a mut Command {
    cmd.args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
        .arg("--tls-cert-file")
        .arg(certs.join("server.crt"))
        .arg("--tls-key-file")
        .arg(certs.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(certs.join("ca.crt"))
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Server(format!("cannot find a free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| Error::Server(e.to_string()))?
        .port())
}

/// Waits until every replica connected to `primary` has acknowledged a write made now: its
/// replication stream flows.
///
/// A replica reports its link `up` as soon as it has loaded the primary's data, but after a
/// diskless sync the primary streams writes to it only once the replica's first
/// acknowledgement after the transfer arrives; when that one raced the end of the transfer,
/// the next comes a second later. A primary that stops in that window takes every write
/// since the sync with it, on every replica. So "ready" here means: a probe key written and
/// deleted on the primary, and `WAIT` answered by every connected replica. A node that
/// takes no writes (a replica by now, or a Cluster primary that serves no slot) has nothing
/// to confirm.
fn confirm_streaming(primary: &RedisServer, deadline: Instant) -> Result<(), Error> {
    let client = redis::Client::open(primary.url().as_str())?;
    let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    loop {
        // A node in a failover may change role or slots between two calls: `MOVED` or
        // `READONLY` means "look again".
        let last = match streams_flow(&mut con) {
            Ok(true) => return Ok(()),
            Ok(false) => "not every replica acknowledged".to_string(),
            Err(e) if matches!(e.code(), Some("MOVED" | "READONLY")) => e.to_string(),
            Err(e) => return Err(e.into()),
        };
        if Instant::now() > deadline {
            return Err(Error::Server(format!(
                "port {}: replication does not flow: {last}",
                primary.port
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One try of [`confirm_streaming`]: whether every replica connected to the node behind
/// `con` acknowledged a probe write within 100 ms (`true` too for a node that takes no
/// writes).
fn streams_flow(con: &mut redis::Connection) -> redis::RedisResult<bool> {
    let repl: String = redis::cmd("INFO").arg("replication").query(con)?;
    let replicas: usize = repl
        .lines()
        .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if replicas == 0 || !repl.lines().any(|l| l.trim() == "role:master") {
        return Ok(true);
    }
    let Some(key) = probe_key(con)? else {
        return Ok(true);
    };
    let () = redis::cmd("DEL").arg(&key).query(con)?;
    let acked: usize = redis::cmd("WAIT").arg(replicas).arg(100).query(con)?;
    Ok(acked >= replicas)
}

/// Writes a key outside every namespace on the primary behind `con`, and returns its name;
/// `None` for a Cluster primary that serves no slot. In a Cluster, a name whose slot the
/// node serves (by its own `CLUSTER NODES` line).
fn probe_key(con: &mut redis::Connection) -> redis::RedisResult<Option<String>> {
    let name = |i: u32| format!("tickwheel-harness:streaming:{i}");
    match redis::cmd("SET").arg(name(0)).arg(1).query::<()>(con) {
        Ok(()) => return Ok(Some(name(0))),
        Err(e) if e.code() == Some("MOVED") => {}
        Err(e) => return Err(e),
    }
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(con)?;
    let myself = nodes
        .lines()
        .find(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("myself")));
    // Slot fields: `a-b` or `a`; `[a->-id]` and `[a-<-id]` are migrations, not served.
    let range = myself.and_then(|l| {
        l.split(' ').skip(8).find_map(|f| {
            let (lo, hi) = f.split_once('-').unwrap_or((f, f));
            Some((lo.parse::<u16>().ok()?, hi.parse::<u16>().ok()?))
        })
    });
    let Some((lo, hi)) = range else {
        return Ok(None);
    };
    // Every slot has a name among the first million (about 61 each).
    let Some(key) = (1..1_000_000)
        .map(name)
        .find(|k| (lo..=hi).contains(&key_slot(k.as_bytes())))
    else {
        return Ok(None);
    };
    let () = redis::cmd("SET").arg(&key).arg(1).query(con)?;
    Ok(Some(key))
}

/// The Cluster slot of a key without a hash tag: CRC16 (XMODEM) modulo 16384.
fn key_slot(key: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in key {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 16383
}

impl RedisServer {
    /// Starts a server on a free port in a new directory under the system temp dir.
    pub fn start() -> Result<RedisServer, Error> {
        RedisServer::start_with(false)
    }

    fn start_with(cluster: bool) -> Result<RedisServer, Error> {
        RedisServer::start_as(cluster, Vec::new(), None, None)
    }

    /// Starts a server with more arguments, or (`sentinel`: a configuration without its
    /// `port` line, added here) a sentinel.
    fn start_as(
        cluster: bool,
        extra: Vec<String>,
        sentinel: Option<String>,
        tls: Option<&Path>,
    ) -> Result<RedisServer, Error> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tickwheel-redis-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Server(format!("cannot create {}: {e}", dir.display())))?;
        let binary =
            std::env::var("TICKWHEEL_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut s = RedisServer {
            child: None,
            port: free_port()?,
            dir,
            binary,
            cluster,
            extra,
            sentinel,
            tls: None,
        };
        let tls_port = || -> Result<Option<(u16, PathBuf)>, Error> {
            tls.map(|certs| Ok((free_port()?, certs.to_path_buf())))
                .transpose()
        };
        s.tls = tls_port()?;
        // The port was free when chosen, but another process may take it (or, in a Cluster,
        // its bus port, 10 000 above) before the server binds it: then it exits at once,
        // and another port is tried.
        let mut tries = 0;
        loop {
            match s.spawn() {
                Err(Error::Server(m)) if m.contains("exited at start") && tries < 4 => {
                    tries += 1;
                    s.port = free_port()?;
                    s.tls = tls_port()?;
                }
                r => return r.map(|()| s),
            }
        }
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let mut cmd = Command::new(&self.binary);
        if let Some(conf) = &self.sentinel {
            let path = self.dir.join("sentinel.conf");
            std::fs::write(
                &path,
                format!(
                    "port {}\nbind 127.0.0.1\ndir {}\nlogfile sentinel.log\n{conf}",
                    self.port,
                    self.dir.display()
                ),
            )
            .map_err(|e| Error::Server(format!("cannot write {}: {e}", path.display())))?;
            cmd.arg(&path).arg("--sentinel");
            if let Some((port, certs)) = &self.tls {
                // The sentinel takes TLS clients (and reaches the nodes and the other
                // sentinels over TLS with `--tls-replication yes` among its extra arguments).
                tls_args(&mut cmd, *port, certs);
            }
            // Last, as for a server.
            cmd.args(&self.extra);
        } else if self.cluster {
            // nodes.conf lands in --dir.
            // A node unreachable for 3 s is failed over (Redis's default, 15 s, would
            // make failover tests long).
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "3000",
            ]);
        }
        if self.sentinel.is_none() {
            cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(&self.dir)
                .args([
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    "--save",
                    "",
                ])
                .args(["--daemonize", "no", "--logfile", "redis.log"]);
            if let Some((port, certs)) = &self.tls {
                tls_args(&mut cmd, *port, certs);
            }
            // Last: the later of two settings stands (`--tls-auth-clients yes`, say).
            cmd.args(&self.extra);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::Server(INSTALL_HINT.into()),
                _ => Error::Server(format!("cannot start {}: {e}", self.binary)),
            })?;
        self.child = Some(child);
        let client = redis::Client::open(self.url().as_str())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ping = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            match ping {
                Ok(_) => return self.answered_by_ours(&client),
                Err(_) if Instant::now() < deadline => {
                    if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                        return Err(Error::Server(format!(
                            "redis-server exited at start ({status}); see {}",
                            self.dir.join("redis.log").display()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(Error::Server(format!("redis-server did not answer: {e}"))),
            }
        }
    }

    /// After a `PING` on the port answered: whether the server that answered is ours. The port
    /// was free when chosen, but another test's server may have taken it since (and ours then
    /// fails to bind it): its answer must not pass for ours. If it is another's, ours is
    /// stopped and the start fails as one that exited, so that another port is tried.
    fn answered_by_ours(&mut self, client: &redis::Client) -> Result<(), Error> {
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut con)?;
        let pid = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("process_id:"))
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some() && pid == self.pid() {
            return Ok(());
        }
        self.kill();
        Err(Error::Server(format!(
            "redis-server exited at start: port {} is another server's (process {pid:?})",
            self.port
        )))
    }

    /// Starts a server that also takes TLS connections, on [`tls_url`](RedisServer::tls_url),
    /// with the certificate `server.crt`, its key `server.key` and the authority `ca.crt` in
    /// `certs` (its plain port stays open, for the tests' own checks), not requiring client
    /// certificates until told to ([`config_set`](RedisServer::config_set)). The
    /// `redis-server` must have been built with TLS, as Debian's is.
    pub fn start_tls(certs: &Path) -> Result<RedisServer, Error> {
        RedisServer::start_as(false, Vec::new(), None, Some(certs))
    }

    /// The server's TLS URL (`rediss://`), if it was started with
    /// [`start_tls`](RedisServer::start_tls).
    pub fn tls_url(&self) -> Option<String> {
        Some(format!("rediss://127.0.0.1:{}/", self.tls_port()?))
    }

    /// The server's TLS port, if it takes TLS connections.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|(port, _)| *port)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `CONFIG SET parameter value`, over the plain port (`tls-auth-clients yes` makes a
    /// server started with [`start_tls`](RedisServer::start_tls) require client certificates
    /// from its next TLS connection on, as `redis-server` does by default).
    pub fn config_set(&self, parameter: &str, value: &str) -> Result<(), Error> {
        let client = redis::Client::open(self.url().as_str())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(parameter)
            .arg(value)
            .query::<()>(&mut con)?;
        Ok(())
    }

    /// The server's directory (its append-only file and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends the server SIGSTOP (`true`: it stops, its connections stay open and unanswered,
    /// as a stalled host's) or SIGCONT (`false`).
    pub fn pause(&self, stop: bool) -> Result<(), Error> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Server("the server is not running".into()))?;
        let sig = if stop { "-STOP" } else { "-CONT" };
        let out = Command::new("kill")
            .args([sig, &pid.to_string()])
            .output()
            .map_err(|e| Error::Server(format!("cannot run kill: {e}")))?;
        if !out.status.success() {
            return Err(Error::Server(format!(
                "kill {sig} {pid}: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Kills the server with SIGKILL (no shutdown, no final save) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills the server and starts it again on the same port and directory: it reloads its
    /// append-only file. (A replica started by [`start_replica_of`](RedisServer::start_replica_of)
    /// comes back a primary.)
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }

    /// Starts a server as a replica of `primary` (`REPLICAOF`), and waits until its link
    /// to the primary is up, it has the primary's data (`master_link_status:up`) and it
    /// acknowledges new writes (see `confirm_streaming`), for at most 10 s. For
    /// replica-confirmed writes ([`Config::confirm_replicas`](crate::Config::confirm_replicas))
    /// and failovers.
    pub fn start_replica_of(primary: &RedisServer) -> Result<RedisServer, Error> {
        let s = RedisServer::start()?;
        let client = redis::Client::open(s.url().as_str())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let _: String = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query(&mut con)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let repl: String = redis::cmd("INFO").arg("replication").query(&mut con)?;
            if repl.lines().any(|l| l.trim() == "master_link_status:up") {
                confirm_streaming(primary, deadline)?;
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "the replica on port {} is not in sync with port {} within 10 s: {repl}",
                    s.port, primary.port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a server with `--cluster-enabled yes`, in no cluster yet (no slots): for a
    /// test that builds a cluster of its own.
    pub fn start_cluster_node() -> Result<RedisServer, Error> {
        RedisServer::start_with(true)
    }

    /// Stops the server's process with SIGSTOP (it holds its connections and answers
    /// nothing) until [`sigcont`](RedisServer::sigcont).
    pub fn sigstop(&self) -> Result<(), Error> {
        self.signal("-STOP")
    }

    /// Resumes a server stopped by [`sigstop`](RedisServer::sigstop) (SIGCONT).
    pub fn sigcont(&self) -> Result<(), Error> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> Result<(), Error> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Server("the server is not running".into()))?;
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .map_err(|e| Error::Server(format!("cannot run kill {sig}: {e}")))?;
        if !status.success() {
            return Err(Error::Server(format!("kill {sig} {pid} failed: {status}")));
        }
        Ok(())
    }
}

mod cluster;
mod sentinel;
pub use cluster::RedisCluster;
pub use sentinel::{Promotion, RedisSentinel};

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server started on a port another server took (between `free_port` and its start,
    /// as concurrent tests' servers can) must not take the other's answer for its own: the
    /// start fails as one that exited, so that `start_as` tries another port. It did not:
    /// `PING` on the port answered, and a Cluster test then asked another test's node to
    /// join its cluster ("Node ... is not empty").
    #[test]
    fn a_port_another_server_answers_on_is_not_taken_for_ours() {
        let other = RedisServer::start().expect("a redis-server");
        let dir = other.dir().with_extension("second");
        std::fs::create_dir_all(&dir).unwrap();
        let mut second = RedisServer {
            child: None,
            port: other.port(),
            dir,
            binary: other.binary.clone(),
            cluster: false,
            extra: Vec::new(),
            sentinel: None,
            tls: None,
        };
        match second.spawn() {
            Err(Error::Server(m)) => assert!(m.contains("exited at start"), "{m}"),
            r => panic!("started on a port another server answers on: {r:?}"),
        }
        assert!(second.pid().is_none(), "the second server was left running");
    }

    /// Slots as `CLUSTER KEYSLOT` answers them (redis-server 7.0).
    #[test]
    fn key_slots_are_redis_clusters() {
        for (key, slot) in [
            ("foo", 12182),
            ("123456789", 12739),
            ("tickwheel-harness:streaming:7", 1311),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }
}
