//! A primary watched by Redis Sentinel: each connection asks a sentinel where the primary is
//! now, and checks (`ROLE`) that the node it reaches is one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{Client, Connection, ErrorKind, RedisError, RedisResult, Value};

use super::tls::{handshake_failed, open, TlsFiles};
use crate::config::{Config, SENTINEL_SCHEME, SENTINEL_TLS_SCHEME};
use crate::error::Error;

/// The port of a sentinel whose address names none (Redis Sentinel's default).
const SENTINEL_PORT: u16 = 26379;

/// How often a client asks the sentinels whether the primary it reached is still the
/// primary (see [`Sentinel::moved`]).
pub(crate) const MOVE_CHECK: Duration = Duration::from_secs(1);

/// The longest a client waits for a sentinel's answer to that check (a sentinel answers in
/// well under a millisecond; one that does not answer at all is passed over for the next).
const CHECK_TIMEOUT: Duration = Duration::from_millis(200);

/// Where to find a primary that Redis Sentinel watches: the sentinels to ask, in the order
/// the URL lists them, the name they know the primary by, and how to reach the primary once
/// found (the URL's credentials and database); and the primary the last connection reached.
/// A clone starts without the last: each owner of a connection has its own.
pub(crate) struct Sentinel {
    sentinels: Vec<Client>,
    /// The same sentinels with the URL's credentials (none without them): for sentinels
    /// that want a password, as deployments that give the sentinels the data nodes' do.
    sentinels_with_auth: Vec<Client>,
    /// Set when a sentinel answered `NOAUTH`: the sentinels are asked with the credentials
    /// from then on.
    sentinels_want_auth: AtomicBool,
    name: String,
    /// `user:password@` as the URL spells it (still percent-encoded), or empty.
    auth: String,
    db: u32,
    /// For `rediss+sentinel://`: the TLS settings every connection, to a sentinel or the
    /// primary, is made with.
    tls: Option<TlsFiles>,
    /// The primary the last connection reached (`host:port`), and when the sentinels last
    /// confirmed it.
    reached: Mutex<Option<(String, Instant)>>,
    /// The sentinel that answered last: asked first next time, so that one down costs its
    /// timeout once, not at every connection and check.
    answered: AtomicUsize,
}

impl Clone for Sentinel {
    fn clone(&self) -> Sentinel {
        Sentinel {
            sentinels: self.sentinels.clone(),
            sentinels_with_auth: self.sentinels_with_auth.clone(),
            sentinels_want_auth: AtomicBool::new(self.sentinels_want_auth.load(Ordering::Relaxed)),
            name: self.name.clone(),
            auth: self.auth.clone(),
            db: self.db,
            tls: self.tls.clone(),
            reached: Mutex::new(None),
            answered: AtomicUsize::new(self.answered.load(Ordering::Relaxed)),
        }
    }
}

/// Whether a node refused the connection for good: the URL's credentials (a wrong password
/// or user, none given where one is wanted, or a user not allowed a command), or the TLS
/// handshake (a certificate not trusted, one the node wanted and did not get). Another
/// sentinel or a later attempt gets the same answer: the nodes of a set share their
/// credentials and certificates.
fn refused(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || handshake_failed(e)
}

impl Sentinel {
    /// Parses `cfg.url`,
    /// `redis+sentinel://[user:password@]host[:port][,host[:port]...]/<name>[/db]` (a
    /// sentinel's port defaults to 26379), or the same with `rediss+sentinel://` for TLS with
    /// `cfg`'s TLS settings; an [`Error::InvalidUrl`] says what is wrong.
    pub(crate) fn parse(cfg: &Config) -> Result<Sentinel, Error> {
        let invalid = |reason: String| Error::invalid_url(&cfg.url, reason);
        let form = "expected redis+sentinel:// (rediss+sentinel:// over TLS), then \
                    [user:password@]host[:port][,host[:port]...]/<primary name>[/db]";
        let (rest, tls) = match cfg.url.strip_prefix(SENTINEL_SCHEME) {
            Some(rest) => (rest, None),
            None => (
                cfg.url
                    .strip_prefix(SENTINEL_TLS_SCHEME)
                    .ok_or_else(|| invalid(form.into()))?,
                Some(TlsFiles::of(cfg)),
            ),
        };
        let scheme = if tls.is_some() { "rediss" } else { "redis" };
        let (authority, path) = rest
            .split_once('/')
            .ok_or_else(|| invalid(format!("no primary name: {form}")))?;
        let (auth, hosts) = match authority.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), authority),
        };
        let path = path.strip_suffix('/').unwrap_or(path);
        let (name, db) = match path.split_once('/') {
            Some((name, db)) => {
                let db = db.parse::<u32>().map_err(|_| {
                    invalid(format!("the database must be a number, not {db:?}: {form}"))
                })?;
                (name, db)
            }
            None => (path, 0),
        };
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(format!("no primary name: {form}")));
        }
        if hosts.is_empty() {
            return Err(invalid(format!("no sentinel: {form}")));
        }
        let mut sentinels = Vec::new();
        let mut sentinels_with_auth = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() || host.contains('@') {
                return Err(invalid(format!("bad sentinel address {host:?}: {form}")));
            }
            // `host`, `host:port`, `[::1]` or `[::1]:port`.
            let has_port = host
                .rsplit_once(':')
                .is_some_and(|(_, p)| !p.ends_with(']'));
            let address = if has_port {
                host.to_string()
            } else {
                format!("{host}:{SENTINEL_PORT}")
            };
            let open = |auth: &str| {
                let url = format!("{scheme}://{auth}{address}/");
                open(&url, tls.as_ref(), |e| {
                    invalid(format!("sentinel {host:?}: {e}"))
                })
            };
            sentinels.push(open("")?);
            if !auth.is_empty() {
                sentinels_with_auth.push(open(&auth)?);
            }
        }
        Ok(Sentinel {
            sentinels,
            sentinels_with_auth,
            sentinels_want_auth: AtomicBool::new(false),
            name: name.to_string(),
            auth,
            db,
            tls,
            reached: Mutex::new(None),
            answered: AtomicUsize::new(0),
        })
    }

    /// The sentinels, the one that answered last first, then the others in the URL's order
    /// from there; and each one's index.
    fn in_turn(&self) -> impl Iterator<Item = (usize, &Client)> {
        let n = self.sentinels.len();
        let first = self.answered.load(Ordering::Relaxed) % n;
        (0..n).map(move |k| ((first + k) % n, &self.sentinels[(first + k) % n]))
    }

    /// What sentinel `i` names as the primary (`SENTINEL get-master-addr-by-name`), asked
    /// within `timeout`: `Ok(None)` when it knows no primary of that name. An answer makes
    /// it the one asked first next time.
    /// A sentinel that answers `NOAUTH` is asked again with the URL's credentials, if it has
    /// any, and so is every sentinel from then on.
    fn ask(&self, i: usize, timeout: Duration) -> RedisResult<Option<String>> {
        let query = |s: &Client| -> RedisResult<Option<(String, u16)>> {
            let mut con = s.get_connection_with_timeout(timeout)?;
            con.set_read_timeout(Some(timeout))?;
            con.set_write_timeout(Some(timeout))?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.name)
                .query(&mut con)
        };
        let with_auth = self.sentinels_with_auth.get(i);
        let addr = match with_auth {
            Some(s) if self.sentinels_want_auth.load(Ordering::Relaxed) => query(s),
            _ => match query(&self.sentinels[i]) {
                Err(e) if e.code() == Some("NOAUTH") && with_auth.is_some() => {
                    self.sentinels_want_auth.store(true, Ordering::Relaxed);
                    with_auth.map_or(Err(e), query)
                }
                answer => answer,
            },
        }?;
        self.answered.store(i, Ordering::Relaxed);
        Ok(addr.map(|(host, port)| {
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }))
    }

    /// A connection to the primary, its read and write timeouts set to `timeout`, and the primary's
    /// address (`host:port`). Asks the sentinels in turn (the URL's order, from the one that
    /// answered last) and connects to the first primary named whose `ROLE` says it is one: right
    /// after a failover a sentinel may still name the old primary (gone, or demoted) while another
    /// names the new one. An I/O error when none does (a retry may help);
    /// [`ErrorKind::MasterNameNotFoundBySentinel`] when every sentinel that answered knows no
    /// primary of that name.
    pub(crate) fn connect(&self, timeout: Duration) -> RedisResult<(Connection, String)> {
        let mut failed = Vec::new();
        let mut tried: Vec<String> = Vec::new();
        let mut unknown = false;
        for (i, s) in self.in_turn() {
            let addr = match self.ask(i, timeout) {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    unknown = true;
                    continue;
                }
                // As a primary's refusal below: the sentinels of a set share their password
                // and certificates.
                Err(e) if refused(&e) => return Err(e),
                Err(e) => {
                    failed.push(format!("sentinel {}: {e}", s.get_connection_info().addr()));
                    continue;
                }
            };
            if tried.contains(&addr) {
                continue;
            }
            match self.primary_at(&addr, timeout) {
                Ok(con) => {
                    *self.reached() = Some((addr.clone(), Instant::now()));
                    return Ok((con, addr));
                }
                // The primary's own answer, which no other sentinel or later attempt changes
                // (the nodes of a set share their credentials and certificates): as it is, so
                // that it is not taken for an unreachable primary and retried.
                Err(e) if refused(&e) => return Err(e),
                Err(e) => failed.push(format!("primary {addr}: {e}")),
            }
            tried.push(addr);
        }
        if unknown && tried.is_empty() {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel knows a primary of this name",
                format!("{:?} ({})", self.name, failed.join("; ")),
            )));
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("no primary {:?} reached: {}", self.name, failed.join("; ")),
        )
        .into())
    }

    /// A connection to `addr`, checked with `ROLE` to be a primary.
    fn primary_at(&self, addr: &str, timeout: Duration) -> RedisResult<Connection> {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let url = format!("{scheme}://{}{addr}/{}", self.auth, self.db);
        // The TLS settings were checked when the sentinels' clients were made, and the URL is
        // the one the sentinels' own clients took but for the host: an error here is the
        // host's, as `Client::open` would give it.
        let client = open(&url, self.tls.as_ref(), |reason| {
            Error::invalid_url(&url, reason)
        })
        .map_err(|e| {
            RedisError::from((ErrorKind::InvalidClientConfig, "bad primary", e.to_string()))
        })?;
        let mut con = client.get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut con)?;
        let role = match role.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            other => format!("{other:?}"),
        };
        if role != "master" {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("a {role}, not a primary (a failover is under way)"),
            )
            .into());
        }
        Ok(con)
    }

    fn reached(&self) -> std::sync::MutexGuard<'_, Option<(String, Instant)>> {
        self.reached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the primary the last connection reached is no longer the primary: at most
    /// every [`MOVE_CHECK`] (else `false` at once), the first sentinel that answers names
    /// another node (each asked within 200 ms at most). A connection to a primary that a
    /// failover demoted goes on working until a sentinel tells the node to replicate the
    /// new primary (it then closes its clients' connections), which may take seconds;
    /// writes it takes meanwhile are lost with it: so a client asks, rather than wait for
    /// an error.
    pub(crate) fn moved(&self, timeout: Duration) -> bool {
        let addr = {
            let mut reached = self.reached();
            match &mut *reached {
                Some((addr, checked)) if checked.elapsed() >= MOVE_CHECK => {
                    *checked = Instant::now();
                    addr.clone()
                }
                _ => return false,
            }
        };
        for (i, _) in self.in_turn() {
            if let Ok(Some(now)) = self.ask(i, timeout.min(CHECK_TIMEOUT)) {
                if now != addr {
                    *self.reached() = None;
                    return true;
                }
                return false;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let s = Sentinel::parse(&Config::new(
            "redis+sentinel://a:1,b,[::1]:3,[::2]/main/2",
            "ns",
        ))
        .unwrap();
        let addrs: Vec<String> = s
            .sentinels
            .iter()
            .map(|c| c.get_connection_info().addr().to_string())
            .collect();
        assert_eq!(addrs, ["a:1", "b:26379", "::1:3", "::2:26379"]);
        assert_eq!((s.name.as_str(), s.db, s.auth.as_str()), ("main", 2, ""));
        let s = Sentinel::parse(&Config::new("redis+sentinel://u:p%40w@h:5/m/", "ns")).unwrap();
        assert_eq!(
            (s.name.as_str(), s.db, s.auth.as_str()),
            ("m", 0, "u:p%40w@")
        );
        // The sentinels twice: as given, and with the credentials (for a sentinel that
        // wants them), which a URL without any has no second set for.
        let info = |c: &Client| {
            let i = c.get_connection_info();
            (
                i.addr().to_string(),
                i.redis_settings().password().map(str::to_string),
            )
        };
        assert_eq!(info(&s.sentinels[0]), ("h:5".into(), None));
        assert_eq!(
            info(&s.sentinels_with_auth[0]),
            ("h:5".into(), Some("p@w".into()))
        );
        let s = Sentinel::parse(&Config::new("redis+sentinel://a:1,b/main", "ns")).unwrap();
        assert!(s.sentinels_with_auth.is_empty());
        for bad in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel:///m",
            "redis+sentinel://h:1,/m",
            "redis+sentinel://h:1/m/x",
            "redis+sentinel://h:1/m/1/2",
            "redis+sentinel://h:x/m",
            "redis://h/m",
        ] {
            assert!(Sentinel::parse(&Config::new(bad, "ns")).is_err(), "{bad}");
        }
    }

    /// `rediss+sentinel://`: the sentinels' clients are TLS ones, the primary is reached by
    /// `rediss://`, and a TLS setting that does not parse is a configuration error.
    #[cfg(feature = "tls")]
    #[test]
    fn tls_urls() {
        let cfg = Config::new("rediss+sentinel://u:p@a:1,b/main/3", "ns");
        let s = Sentinel::parse(&cfg).unwrap();
        assert!(s.tls.is_some());
        for c in s.sentinels.iter().chain(&s.sentinels_with_auth) {
            let addr = c.get_connection_info().addr();
            assert!(
                matches!(addr, redis::ConnectionAddr::TcpTls { .. }),
                "{addr:?}"
            );
        }
        assert_eq!((s.name.as_str(), s.db), ("main", 3));
        let mut cfg = cfg;
        cfg.tls_ca = Some(b"not a certificate".to_vec());
        assert!(matches!(
            Sentinel::parse(&cfg),
            Err(Error::InvalidConfig(m)) if m.starts_with("tls_ca")
        ));
    }
}
