//! Where and how to connect, where "now" comes from, and a namespace's tunables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::failure::{Retention, RetryPolicy};
use crate::limits::{DEFAULT_MAX_PAYLOAD, MAX_PAYLOAD_LIMIT};

/// The URL scheme of a Redis Cluster: `redis+cluster://` and a comma-separated list of seed
/// nodes (`host:port`); the client learns the rest of the cluster from them.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// [`CLUSTER_SCHEME`] over TLS (feature `tls`): every node is reached as `rediss://` reaches
/// one server, trusting [`Config::tls_ca`] or the system's certificate authorities.
pub const CLUSTER_TLS_SCHEME: &str = "rediss+cluster://";

/// The URL scheme of a primary that Redis Sentinel watches: `redis+sentinel://`, a
/// comma-separated list of sentinels (`host[:port]`, port 26379 by default), then
/// `/<primary name>` as the sentinels know it, and optionally `/<db>`; credentials
/// (`user:password@` before the sentinels) are the primary's. See [`Config::url`].
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// The scheme of a Sentinel URL over TLS: the sentinels and the primary they name are all
/// reached over TLS (feature `tls`), as `rediss://` reaches one server.
pub const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel://";

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
    /// Moves the reading forward by `by` in whole milliseconds (a fraction is dropped); the
    /// reading stops at `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(ms))
            });
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

/// Where and how to connect, and the namespace's tunables. Producers and workers of one
/// namespace should share one `Config`. Its `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct Config {
    /// The Redis URL, one of:
    /// - one server: `redis://[user:password@]host[:port][/db]`, `redis+unix:///path`, or
    ///   over TLS `rediss://[user:password@]host[:port][/db]` (feature `tls`, trusting
    ///   [`Config::tls_ca`] or the system's authorities; without the feature such a URL is
    ///   refused, saying so);
    /// - a primary with replicas under Redis Sentinel:
    ///   `redis+sentinel://[user:password@]host[:port][,host[:port]...]/<primary name>[/db]`
    ///   (the sentinels, port 26379 by default, and the name they know the primary by; the
    ///   credentials and database are the primary's; the sentinels are asked without
    ///   credentials, and with these once a sentinel answers that it wants a password, as
    ///   deployments that give the sentinels the data nodes' password do). Every connection
    ///   asks the sentinels, in the order given, where the primary is now, and checks
    ///   (`ROLE`) that the node it reaches is a primary; a connection that breaks, or whose
    ///   write is refused with `READONLY` (a primary demoted by a failover), is dropped, and
    ///   the next call asks again. A producer's or inspector's single call refused with
    ///   `READONLY` did not run, and is sent once more on the new connection; the worker's
    ///   notification subscription moves to the new primary as soon as the sentinels name
    ///   it. `rediss+sentinel://` ([`SENTINEL_TLS_SCHEME`]) reaches the sentinels and the
    ///   primary over TLS, as `rediss://` does one server (a TLS deployment's sentinels
    ///   name its nodes' TLS ports);
    /// - a Redis Cluster: `redis+cluster://[user:password@]host:port[,host:port...]`, its
    ///   seed nodes (see [`Config::cluster`]); the credentials, given once, are every node's
    ///   (a `,` or `@` in them percent-encoded). `rediss+cluster://` ([`CLUSTER_TLS_SCHEME`])
    ///   reaches every node over TLS, as `rediss://` does one server.
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
    /// How long before its run-at a worker claims a task (default 1 s; zero: at its run-at). A
    /// claimed task waits in the worker's memory and is handed to the handler at its run-at (never
    /// early by the worker's estimate of the server's clock, which never runs ahead), and only
    /// while the worker's lease on its shard is still valid by the worker's own, conservative
    /// reckoning. Claiming ahead takes Redis's latency (an fsync under `appendfsync always`) off
    /// the delivery path. The price: a task claimed ahead counts as in flight, so
    /// [`Producer::cancel`](crate::Producer::cancel) and
    /// [`Producer::reschedule`](crate::Producer::reschedule) answer `false` for it during that last
    /// stretch before its run-at, and replacing it then does not stop the claimed delivery (both
    /// versions are delivered; the old one's acknowledgement is refused as stale). At most half the
    /// [`Config::window`] (a larger value is a configuration error: a worker must read a task into
    /// its wheel before it claims it). On a Redis Cluster each node has a clock of its own: a task
    /// claimed ahead waits for the worker's estimate of the clock of the node that claimed it, so
    /// node clocks that disagree never make it early.
    pub claim_ahead: Duration,
    /// How often a worker renews leases, rebalances and refills (default 500 ms; at most a
    /// third of the lease, so that two renewals can fail before it lapses: a larger value is a
    /// configuration error).
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
    /// How long [`Worker::connect`](crate::Worker::connect) and
    /// [`Producer::connect`](crate::Producer::connect) keep trying while Redis cannot be
    /// reached or is still loading its data (default 10 s; attempts 50 ms apart, doubling up
    /// to 1 s). Zero: one attempt. Errors a retry cannot fix (a bad URL, a refused password,
    /// an incompatible namespace) return at once.
    pub connect_timeout: Duration,
    /// How a task whose handler fails is retried (default [`RetryPolicy::DEFAULT`]: 25
    /// attempts, exponential backoff from 1 s up to 1 h). A task may carry its own
    /// ([`Task::retry`](crate::Task::retry)); the workers apply this one to the rest, so
    /// every worker of a namespace should have the same.
    pub retry: RetryPolicy,
    /// How many failed tasks are kept, and for how long (default [`Retention::DEFAULT`]:
    /// 10 000, 180 days).
    pub failed_retention: Retention,
    /// How long [`Producer::schedule_once`](crate::Producer::schedule_once) remembers an id
    /// it named (default 1 h): within this window after the last `schedule_once` of an id,
    /// another one stores nothing, even once the task has run, so a `schedule_once` retried
    /// within it never delivers a task twice. Zero: only a task that has the id stops a
    /// `schedule_once`. A remembered id costs Redis about 100 bytes plus its length (113 for
    /// an 11-byte id) for the window; plain [`schedule`](crate::Producer::schedule) never
    /// pays it. The window a call gives applies to the ids of that call.
    pub idempotency_window: Duration,
    /// How many replicas must confirm every write before the call that made it returns
    /// (default 0: none, the write is acknowledged by the primary alone, as Redis replicates
    /// asynchronously). Above 0, each round trip that writes ends with `WAIT <n> <timeout>`
    /// on the same connection (on a Cluster, on each primary written to), and a write fewer
    /// replicas confirmed within [`Config::confirm_timeout`] returns
    /// [`Error::NotConfirmed`]: applied on the primary, not yet on enough replicas, so a
    /// failover may lose it. Every write waits: a producer's schedule, cancel and
    /// reschedule calls and the operator's, and a worker's claims, acknowledgements,
    /// retries, lease acquisitions and renewals (a worker treats an unconfirmed write as a
    /// lost reply: see docs/DESIGN-NOTES.md); not a shard's release, which a failover that
    /// loses it only delays by a lease. Costs a replica's round trip per write round trip.
    /// At most the replicas the primary has: with fewer, every write fails after the
    /// timeout.
    pub confirm_replicas: u32,
    /// How long a write waits for [`Config::confirm_replicas`] replicas (default 1 s; `WAIT`'s
    /// timeout, in whole milliseconds). At least 1 ms, and below [`Config::io_timeout`] (a
    /// reply that outwaits the I/O timeout is lost). Unused when `confirm_replicas` is 0.
    pub confirm_timeout: Duration,
    /// The certificate authorities a TLS connection (`rediss://`, `rediss+cluster://`)
    /// trusts, as PEM text (one certificate or more): for servers whose certificates a
    /// private authority signed. `None` (the default) trusts the system's authorities.
    /// Needs feature `tls`; unused by plain connections. A PEM that does not parse is
    /// [`Error::InvalidConfig`].
    pub tls_ca: Option<Vec<u8>>,
    /// The certificate a TLS connection presents to the server, with its key (mutual TLS):
    /// for a server that requires one, as `redis-server` with TLS does unless told
    /// `tls-auth-clients no`. `None` (the default) presents none. Needs feature `tls`; unused
    /// by plain connections. A certificate or key that does not parse, or a key that is not
    /// the certificate's, is [`Error::InvalidConfig`].
    pub tls_client_cert: Option<ClientCert>,
}

/// A TLS client certificate and its private key ([`Config::tls_client_cert`]), both PEM text
/// as the files that hold them. Its `Debug` shows their sizes, never the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The client's certificate, then any intermediate certificates the server needs to link
    /// it to an authority it trusts.
    pub chain: Vec<u8>,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientCert {{ chain: {} bytes, key: {} bytes (not shown) }}",
            self.chain.len(),
            self.key.len()
        )
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field by name, so that a new one cannot be left out.
        let Config {
            url,
            namespace,
            shards,
            max_payload,
            time,
            lease,
            visibility_timeout,
            window,
            claim_ahead,
            maintenance_interval,
            batch,
            window_limit,
            io_timeout,
            connect_timeout,
            retry,
            failed_retention,
            idempotency_window,
            confirm_replicas,
            confirm_timeout,
            tls_ca,
            tls_client_cert,
        } = self;
        f.debug_struct("Config")
            .field("url", &crate::error::url_without_password(url))
            .field("namespace", namespace)
            .field("shards", shards)
            .field("max_payload", max_payload)
            .field("time", time)
            .field("lease", lease)
            .field("visibility_timeout", visibility_timeout)
            .field("window", window)
            .field("claim_ahead", claim_ahead)
            .field("maintenance_interval", maintenance_interval)
            .field("batch", batch)
            .field("window_limit", window_limit)
            .field("io_timeout", io_timeout)
            .field("connect_timeout", connect_timeout)
            .field("retry", retry)
            .field("failed_retention", failed_retention)
            .field("idempotency_window", idempotency_window)
            .field("confirm_replicas", confirm_replicas)
            .field("confirm_timeout", confirm_timeout)
            .field(
                "tls_ca",
                &tls_ca.as_ref().map(|pem| format!("{} bytes", pem.len())),
            )
            .field("tls_client_cert", tls_client_cert)
            .finish()
    }
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
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::DEFAULT,
            failed_retention: Retention::DEFAULT,
            idempotency_window: Duration::from_secs(3600),
            confirm_replicas: 0,
            confirm_timeout: Duration::from_secs(1),
            tls_ca: None,
            tls_client_cert: None,
        }
    }

    /// Defaults for a Redis Cluster given by seed nodes (`host:port`, or
    /// `redis://[user:password@]host:port/` URLs): the URL becomes
    /// `redis+cluster://[user:password@]host:port,...` (`rediss+cluster://` when the first
    /// seed is a `rediss://` URL), with the credentials of the first seed that has any (a
    /// Cluster's nodes share them). The client learns the other nodes and the
    /// slot map from the seeds, routes every script and command by its shard's slot and
    /// follows `MOVED`/`ASK` redirections.
    pub fn cluster<S: AsRef<str>>(nodes: &[S], namespace: impl Into<String>) -> Config {
        let mut auth = None;
        let tls = nodes
            .first()
            .is_some_and(|n| n.as_ref().starts_with("rediss://"));
        let hosts: Vec<&str> = nodes
            .iter()
            .map(|n| {
                let n = n.as_ref();
                let n = n
                    .strip_prefix("redis://")
                    .or_else(|| n.strip_prefix("rediss://"))
                    .unwrap_or(n);
                let n = n.strip_suffix('/').unwrap_or(n);
                match n.rsplit_once('@') {
                    Some((credentials, host)) => {
                        auth.get_or_insert(credentials);
                        host
                    }
                    None => n,
                }
            })
            .collect();
        let auth = auth.map_or(String::new(), |a| format!("{a}@"));
        let scheme = if tls {
            CLUSTER_TLS_SCHEME
        } else {
            CLUSTER_SCHEME
        };
        Config::new(format!("{scheme}{auth}{}", hosts.join(",")), namespace)
    }

    /// The longest duration any setting takes: 100 years (365-day years). A longer one is
    /// [`Error::InvalidConfig`]; the limit keeps every instant a setting adds to "now"
    /// within what Redis stores exactly.
    pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

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
        for (name, d) in [
            ("lease", self.lease),
            ("visibility_timeout", self.visibility_timeout),
            ("window", self.window),
            ("claim_ahead", self.claim_ahead),
            ("maintenance_interval", self.maintenance_interval),
            ("io_timeout", self.io_timeout),
            ("connect_timeout", self.connect_timeout),
            ("idempotency_window", self.idempotency_window),
            ("confirm_timeout", self.confirm_timeout),
        ] {
            if d > Config::MAX_DURATION {
                return bad(&format!(
                    "{name} must be at most 100 years (Config::MAX_DURATION), not {d:?}"
                ));
            }
        }
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
        if self.maintenance_interval.is_zero() || self.maintenance_interval > self.lease / 3 {
            return bad("maintenance_interval must be positive and at most a third of the lease");
        }
        if self.claim_ahead > self.window / 2 {
            return bad("claim_ahead must be at most half the window");
        }
        if self.confirm_replicas > 0 {
            if self.confirm_timeout < Duration::from_millis(1) {
                return bad(
                    "confirm_timeout must be at least 1 ms (WAIT's timeout 0 waits forever)",
                );
            }
            if self.confirm_timeout >= self.io_timeout {
                return bad(&format!(
                    "confirm_timeout ({:?}) must be below io_timeout ({:?}): a write's \
                     confirmation waits that long for its reply",
                    self.confirm_timeout, self.io_timeout
                ));
            }
        }
        self.retry.validate("retry")?;
        self.failed_retention.validate()
    }

    /// The claim-ahead, ms: [`Config::claim_ahead`] (at most half the window, see
    /// `validate`).
    pub(crate) fn ahead_ms(&self) -> u64 {
        self.claim_ahead.as_millis() as u64
    }
}
