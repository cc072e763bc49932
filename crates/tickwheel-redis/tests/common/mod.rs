//! Test support: a private redis-server per test (own port, own temp dir, AOF with
//! `appendfsync always`), killed on drop. A missing `redis-server` fails the test loudly.
#![allow(dead_code)]

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, ManualTime, TimeSource};

/// Starts a server or fails the test with the reason (and how to install redis-server).
pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot run the Redis tests: {e}"),
    }
}

/// A config on a manual clock starting at 1_000_000 ms.
pub fn manual(server: &RedisServer, ns: &str, shards: u32) -> (Config, ManualTime) {
    let time = ManualTime::new(1_000_000);
    let mut cfg = Config::new(server.url(), ns);
    cfg.shards = shards;
    cfg.time = TimeSource::Manual(time.clone());
    (cfg, time)
}
