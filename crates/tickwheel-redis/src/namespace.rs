//! The key layout of a namespace, its shards and their keys, and `open`: validate, connect
//! with retries, check (or create) the namespace.

// The namespace's neighbours, under the paths the rest of the crate has used.
#[allow(unused_imports)]
pub(crate) use crate::config::ManualTime;
pub(crate) use crate::config::{Config, TimeSource};
pub(crate) use crate::connection::{query_pipe, string, Con, Endpoint};
pub(crate) use crate::error::Error;
pub(crate) use crate::limits::{MAX_ID_LEN, SCHEMA_VERSION};
pub(crate) use crate::protocol::{connect, ShardKeys};
#[allow(unused_imports)]
pub(crate) use crate::task::{RunAt, TaskState};

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
        let meta = Namespace::meta_key(ns);
        let init = crate::protocol::Init {
            meta: &meta,
            schema: SCHEMA_VERSION,
            shards: cfg.shards,
        };
        // Unconfirmed: a namespace's meta is the same whoever writes it, and any client
        // writes it again should a failover lose it; refusing to open without replicas
        // would keep even an inspector out.
        let init = con.unconfirmed(|con| crate::protocol::invoke(con, &init));
        let (schema, shards) = init.map_err(|e| match e {
            Error::Redis(e) if e.code() == Some("WRONGTYPE") => Error::IncompatibleNamespace {
                namespace: ns.clone(),
                found: "a key that is not a hash".into(),
                expected: SCHEMA_VERSION,
            },
            e => e,
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
        Ok(Namespace::layout(ns, n))
    }

    /// The keys of namespace `ns` with `shards` shards: the one place the layout is written
    /// (a shard's own keys are [`ShardKeys::new`]). The namespace's own keys share the tag
    /// `{ns}`.
    pub(crate) fn layout(ns: &str, shards: u32) -> Namespace {
        Namespace {
            shards: (0..shards).map(|s| ShardKeys::new(ns, s)).collect(),
            channel: format!("tw:{{{ns}}}:wake"),
            workers_key: format!("tw:{{{ns}}}:workers"),
        }
    }

    /// The namespace's meta key (schema version, shard count).
    pub(crate) fn meta_key(ns: &str) -> String {
        format!("tw:{{{ns}}}:meta")
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

pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(Error::InvalidId { len: id.len() });
    }
    Ok(())
}

/// Connects and opens the namespace, trying again while Redis cannot be reached or is still
/// loading, until [`Config::connect_timeout`] has passed (see there).
pub(crate) fn open(cfg: &Config) -> Result<(Endpoint, Con, Namespace), Error> {
    cfg.validate()?;
    let client = Endpoint::of(cfg)?;
    let deadline = std::time::Instant::now() + cfg.connect_timeout;
    let mut wait = std::time::Duration::from_millis(50);
    loop {
        let attempt = connect(cfg, &client).and_then(|mut con| {
            let ns = Namespace::open(cfg, &mut con)?;
            Ok((con, ns))
        });
        match attempt {
            Ok((con, ns)) => return Ok((client, con, ns)),
            Err(Error::Redis(e)) if retryable(&e) && std::time::Instant::now() < deadline => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                std::thread::sleep(wait.min(left));
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a Redis error may go away by itself: Redis unreachable, restarting, loading its
/// data, or a Cluster between configurations; not a TLS handshake that failed, which
/// `redis` reports as an I/O error too.
pub(crate) fn retryable(e: &redis::RedisError) -> bool {
    !crate::connection::handshake_failed(e) && retryable_kind(e)
}

fn retryable_kind(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.code(),
            Some("LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "BUSY")
        )
}
