//! Opening a namespace read-only: its meta key read, never created.

use crate::config::Config;
use crate::connection::{Con, Endpoint};
use crate::error::Error;
use crate::namespace::{Namespace, SCHEMA_VERSION};
use crate::protocol::{self, connect, InspectMeta, MetaReply};

/// A connection with the scripts loaded.
pub(super) fn open_con(cfg: &Config, client: &Endpoint) -> Result<Con, Error> {
    connect(cfg, client)
}

/// Reads the namespace's meta key (never creating it) and names its shards' keys as
/// `Namespace::open` does.
pub(super) fn open_namespace(cfg: &Config, con: &mut Con) -> Result<Namespace, Error> {
    let ns = &cfg.namespace;
    let meta = Namespace::meta_key(ns);
    let incompatible = |found: String| Error::IncompatibleNamespace {
        namespace: ns.clone(),
        found,
        expected: SCHEMA_VERSION,
    };
    let (schema, shards) = match protocol::invoke(con, &InspectMeta { meta: &meta })? {
        MetaReply::Missing => return Err(Error::NoSuchNamespace(ns.clone())),
        MetaReply::NotAHash(t) => return Err(incompatible(format!("a key of type {t}"))),
        MetaReply::Hash { schema, shards } => (schema, shards),
    };
    if schema != SCHEMA_VERSION.to_string() {
        return Err(incompatible(if schema.is_empty() {
            "no schema version".into()
        } else {
            format!("version {schema:?}")
        }));
    }
    let n: u32 = shards
        .parse()
        .ok()
        .filter(|&n| (1..=16384).contains(&n))
        .ok_or_else(|| incompatible(format!("shard count {shards:?}")))?;
    Ok(Namespace::layout(ns, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys named here are those `Namespace::open` names (the layout lives there).
    #[test]
    fn the_read_only_open_names_the_keys_the_namespace_names() {
        let server = crate::server::RedisServer::start().expect("redis-server");
        let mut cfg = Config::new(server.url(), "keys");
        cfg.shards = 3;
        let client = Endpoint::of(&cfg).unwrap();
        let mut con = open_con(&cfg, &client).unwrap();
        let missing = open_namespace(&cfg, &mut con).unwrap_err();
        assert!(matches!(missing, Error::NoSuchNamespace(_)), "{missing}");
        let created = Namespace::open(&cfg, &mut con).unwrap();
        let read = open_namespace(&cfg, &mut con).unwrap();
        assert_eq!(
            format!("{:?}", read.shards),
            format!("{:?}", created.shards)
        );
        assert_eq!(read.channel, created.channel);
        assert_eq!(read.workers_key, created.workers_key);
    }
}
