//! Clients on a Redis Cluster whose topology changes under them, for the calls that do not
//! go through the crate's pipelines' own checks: a lone command (`Inspector::remembered`)
//! after a failover, and connecting while a replica is down. A Cluster of 3 primaries with a
//! replica each, on loopback ports, on a manual clock.

use std::time::{Duration, Instant};

use tickwheel_redis::server::RedisCluster;
use tickwheel_redis::{Config, Inspector, ManualTime, Producer, RunAt};

const T0: u64 = 1_000_000;

fn cluster() -> RedisCluster {
    match RedisCluster::start_with_replicas(3, 1) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster test: {e}"),
    }
}

fn config(c: &RedisCluster, ns: &str) -> Config {
    let mut cfg = Config::cluster(&c.seeds(), ns);
    cfg.shards = 12;
    cfg.time = tickwheel_redis::TimeSource::Manual(ManualTime::new(T0));
    cfg
}

/// An inspector connected before a graceful failover: its first calls after it are
/// `remembered`, one lone `ZSCORE` each, some to the moved slots. Each must follow the new
/// topology at once, as the pipelined calls do (a lone command sent straight through the
/// cluster connection got `MOVED` on every call, for as long as nothing else reopened it).
#[test]
fn an_inspector_connected_before_a_failover_answers_remembered_after_it() {
    let c = cluster();
    let cfg = config(&c, "rem");
    let ids: Vec<String> = (0..24).map(|i| format!("o{i}")).collect();
    let mut p = Producer::connect(&cfg).unwrap();
    for id in &ids {
        p.schedule_once(id, RunAt::AtMillis(T0 + 60_000), b"").unwrap();
    }
    let mut i = Inspector::connect(&cfg).unwrap();
    assert!(i.remembered(&ids[0]).unwrap().is_some());

    let replica = c.replicas().unwrap()[0];
    c.failover(replica, Duration::from_secs(30)).unwrap();
    let ok = Instant::now();
    for id in &ids {
        let r = i.remembered(id);
        assert!(
            matches!(r, Ok(Some(_))),
            "{id}, {:?} after the failover: {r:?}",
            ok.elapsed()
        );
    }
    assert!(ok.elapsed() < Duration::from_secs(1), "{:?}", ok.elapsed());
}

/// A replica that is down (killed) stays in the other nodes' slot map until they mark it
/// failed (3 s here, 15 s by Redis's default). Connecting meanwhile must not wait for that:
/// the scripts are loaded where they run, on the primaries, and a producer and an inspector
/// connect and work at once.
#[test]
fn a_replica_that_is_down_holds_up_no_connection() {
    let mut c = cluster();
    let cfg = config(&c, "down");
    let replica = c.replicas().unwrap()[0];
    c.kill(replica);
    let killed = Instant::now();
    let mut p = Producer::connect(&cfg).unwrap();
    let mut i = Inspector::connect(&cfg).unwrap();
    let connected = killed.elapsed();
    p.schedule("x", RunAt::AtMillis(T0 + 60_000), b"").unwrap();
    assert_eq!(i.stats().unwrap().pending(), 1);
    assert!(
        connected < Duration::from_secs(1),
        "connecting took {connected:?} with a replica down"
    );
}
