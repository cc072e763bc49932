//! Replica-confirmed writes ([`Config::confirm_replicas`]): against a real primary with a
//! real replica (`REPLICAOF`), and a Cluster with a replica per primary, on a manual clock.
//! What each write waits for is read on the replica right after it returns; a replica
//! stopped with SIGSTOP (it holds its link and acknowledges nothing) makes writes
//! unconfirmed.
//!
//! Expected results:
//!
//! | confirm | replica          | a write returns                         | the worker            |
//! |---------|------------------|-----------------------------------------|-----------------------|
//! | 0       | any              | at once, `Ok`                           | delivers              |
//! | 1       | live             | `Ok` once the replica has it            | delivers, acks on it  |
//! | 1       | stopped / absent | `NotConfirmed` after the timeout (applied on the primary) | delivers nothing until it is back, then once |

mod common;

use common::proxy::{Proxy, Verdict};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tickwheel_redis::server::{RedisCluster, RedisServer};
use tickwheel_redis::{
    Config, Delivery, Error, ManualTime, Outcome, Producer, RunAt, Task, TaskState, TimeSource,
    Worker,
};

const T0: u64 = 1_000_000;
const SHARDS: u32 = 4;

fn replica_of(primary: &RedisServer) -> RedisServer {
    RedisServer::start_replica_of(primary).expect("a replica")
}

fn config(url: String, ns: &str, replicas: u32, timeout: Duration) -> (Config, ManualTime) {
    let time = ManualTime::new(T0);
    let mut cfg = Config::new(url, ns);
    cfg.shards = SHARDS;
    cfg.time = TimeSource::Manual(time.clone());
    cfg.claim_ahead = Duration::ZERO;
    cfg.confirm_replicas = replicas;
    cfg.confirm_timeout = timeout;
    (cfg, time)
}

/// The stored value of task `id` on a server (a replica), read with `HGET` on every shard's
/// task hash (on a Cluster replica, `READONLY` first; keys of other nodes' slots are
/// skipped).
fn stored_on(server: &RedisServer, ns: &str, shards: u32, id: &str) -> Option<Vec<u8>> {
    let mut con = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: Result<String, _> = redis::cmd("READONLY").query(&mut con);
    (0..shards).find_map(|s| {
        redis::cmd("HGET")
            .arg(format!("tw:{{{ns}:{s}}}:tasks"))
            .arg(id)
            .query::<Option<Vec<u8>>>(&mut con)
            .ok()
            .flatten()
    })
}

fn deliveries(w: &mut Worker, got: &mut BTreeMap<String, u32>) -> Result<usize, Error> {
    w.tick(&mut |d: &Delivery| {
        assert!(d.claimed_at_ms >= d.due_ms, "{} delivered early", d.id);
        *got.entry(d.id.clone()).or_default() += 1;
        Outcome::Ack
    })
}

fn not_confirmed<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::NotConfirmed {
            confirmed: 0,
            wanted: 1,
        }) => {}
        other => panic!("expected NotConfirmed {{ 0 of 1 }}, got {other:?}"),
    }
}

#[test]
fn with_a_live_replica_every_write_is_on_it_when_the_call_returns() {
    let primary = common::server();
    let replica = replica_of(&primary);
    let ns = "live";
    let (cfg, time) = config(primary.url(), ns, 1, Duration::from_secs(2));
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let on_replica = |id: &str| stored_on(&replica, ns, SHARDS, id);

    p.schedule("a", RunAt::AtMillis(T0 + 100), b"a").unwrap();
    assert!(on_replica("a").is_some());
    let many = ["b", "c", "d"].map(|id| Task::new(id, RunAt::AtMillis(T0 + 100), b"m"));
    p.schedule_many(many).unwrap();
    for id in ["b", "c", "d"] {
        assert!(on_replica(id).is_some(), "{id}");
    }
    let before = on_replica("b");
    assert!(p.reschedule("b", RunAt::AtMillis(T0 + 200)).unwrap());
    assert_ne!(on_replica("b"), before, "the move is on the replica");
    assert!(p.cancel("c").unwrap());
    assert_eq!(on_replica("c"), None);

    // The replica stalls for 400 ms: the write returns only once it has caught up.
    replica.sigstop().unwrap();
    let waker = {
        let pid = replica.pid().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status()
                .unwrap();
        })
    };
    let t = Instant::now();
    p.schedule("e", RunAt::AtMillis(T0 + 100), b"e").unwrap();
    let waited = t.elapsed();
    waker.join().unwrap();
    assert!(
        waited >= Duration::from_millis(350),
        "returned after {waited:?}"
    );
    assert!(on_replica("e").is_some());

    // The worker's claims and acknowledgements: acknowledged tasks are gone from the
    // replica when `tick` returns.
    let mut got = BTreeMap::new();
    deliveries(&mut w, &mut got).unwrap();
    time.set_ms(T0 + 250);
    let mut n = 0;
    for _ in 0..5 {
        n += deliveries(&mut w, &mut got).unwrap();
    }
    assert_eq!(n, 4, "{got:?}");
    for id in ["a", "b", "d", "e"] {
        assert_eq!(got.get(id), Some(&1), "{id}");
        assert_eq!(on_replica(id), None, "{id} acknowledged on the replica");
    }
    assert_eq!(p.state("a").unwrap(), TaskState::Unknown);
}

#[test]
fn without_confirmation_a_stopped_replica_changes_nothing() {
    let primary = common::server();
    let replica = replica_of(&primary);
    let (cfg, time) = config(primary.url(), "off", 0, Duration::from_secs(1));
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    replica.sigstop().unwrap();
    let t = Instant::now();
    p.schedule("a", RunAt::AtMillis(T0 + 100), b"a").unwrap();
    assert!(p.cancel("a").unwrap());
    p.schedule("a", RunAt::AtMillis(T0 + 100), b"a").unwrap();
    let mut got = BTreeMap::new();
    deliveries(&mut w, &mut got).unwrap();
    time.set_ms(T0 + 200);
    deliveries(&mut w, &mut got).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(got.get("a"), Some(&1));
    replica.sigcont().unwrap();
}

#[test]
fn a_stopped_replica_makes_writes_unconfirmed_and_the_worker_delivers_only_once_confirmed() {
    let primary = common::server();
    let replica = replica_of(&primary);
    let ns = "stop";
    let timeout = Duration::from_millis(300);
    let (cfg, time) = config(primary.url(), ns, 1, timeout);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let mut got = BTreeMap::new();
    p.schedule("t", RunAt::AtMillis(T0 + 200), b"t").unwrap();
    // The worker takes its shards and reads "t" into its wheel (maintenance next due at
    // T0 + 500).
    assert_eq!(deliveries(&mut w, &mut got).unwrap(), 0);

    replica.sigstop().unwrap();
    let far = RunAt::AtMillis(T0 + 3_600_000);
    let t = Instant::now();
    not_confirmed(p.schedule("u", far, b"u"));
    let waited = t.elapsed();
    assert!(
        waited >= timeout - Duration::from_millis(20) && waited < Duration::from_secs(3),
        "NotConfirmed after {waited:?}"
    );
    // Applied on the primary (the state read waits for no replica).
    assert!(matches!(p.state("u").unwrap(), TaskState::Pending { .. }));
    not_confirmed(p.schedule_many([Task::new("v", far, b"v"), Task::new("x", far, b"x")]));
    not_confirmed(p.reschedule("v", RunAt::AtMillis(T0 + 7_200_000)));
    not_confirmed(p.cancel("x"));
    assert_eq!(p.state("x").unwrap(), TaskState::Unknown);

    // "t" is due: its claim runs on the primary, unconfirmed: not delivered.
    time.set_ms(T0 + 300);
    for _ in 0..2 {
        not_confirmed(deliveries(&mut w, &mut got));
        assert!(got.is_empty(), "delivered unconfirmed: {got:?}");
    }
    assert!(matches!(p.state("t").unwrap(), TaskState::InFlight { .. }));

    // The replica is back: the claim is confirmed and "t" delivered, once.
    replica.sigcont().unwrap();
    let mut n = 0;
    for _ in 0..4 {
        n += deliveries(&mut w, &mut got).unwrap();
    }
    assert_eq!(n, 1, "{got:?}");
    assert_eq!(got.get("t"), Some(&1));
    assert_eq!(stored_on(&replica, ns, SHARDS, "t"), None);
    assert_eq!(
        stored_on(&replica, ns, SHARDS, "x"),
        None,
        "the cancel replicated"
    );
    time.set_ms(T0 + 60_000);
    for _ in 0..3 {
        deliveries(&mut w, &mut got).unwrap();
    }
    assert_eq!(got.get("t"), Some(&1), "delivered twice: {got:?}");
}

#[test]
fn an_unconfirmed_renewal_does_not_extend_the_lease() {
    let primary = common::server();
    let replica = replica_of(&primary);
    let (cfg, time) = config(primary.url(), "renew", 1, Duration::from_millis(200));
    let mut w = Worker::connect(&cfg).unwrap();
    let mut got = BTreeMap::new();
    deliveries(&mut w, &mut got).unwrap();
    let lease_left = |w: &Worker| {
        let s = w.status().snapshot();
        assert_eq!(s.shards.len(), SHARDS as usize, "{s:?}");
        s.shards.iter().map(|s| s.lease_left).max().unwrap()
    };
    let full = lease_left(&w);
    assert!(full >= Duration::from_millis(4_500), "{full:?}");

    // Maintenance is due: the renewal runs on the primary, unconfirmed.
    replica.sigstop().unwrap();
    time.set_ms(T0 + 1_000);
    not_confirmed(deliveries(&mut w, &mut got));
    assert_eq!(
        lease_left(&w),
        full - Duration::from_millis(1_000),
        "extended"
    );

    // Confirmed: extended from this renewal.
    replica.sigcont().unwrap();
    deliveries(&mut w, &mut got).unwrap();
    assert_eq!(lease_left(&w), full);

    // A stopping worker's releases wait for no replica (lost in a failover, they run out
    // with the lease): it stops at once, not after a timeout per shard.
    replica.sigstop().unwrap();
    let t = Instant::now();
    w.shutdown();
    let took = t.elapsed();
    replica.sigcont().unwrap();
    assert!(took < Duration::from_millis(600), "shutdown took {took:?}");
}

#[test]
fn without_any_replica_writes_are_applied_but_never_confirmed() {
    let primary = common::server();
    let (cfg, time) = config(primary.url(), "none", 1, Duration::from_millis(200));
    // Opening the namespace waits for no replica.
    let mut p = Producer::connect(&cfg).unwrap();
    let t = Instant::now();
    not_confirmed(p.schedule("a", RunAt::AtMillis(T0 + 100), b"a"));
    assert!(
        t.elapsed() >= Duration::from_millis(180),
        "{:?}",
        t.elapsed()
    );
    assert!(matches!(p.state("a").unwrap(), TaskState::Pending { .. }));
    let mut w = Worker::connect(&cfg).unwrap();
    let mut got = BTreeMap::new();
    time.set_ms(T0 + 200);
    for _ in 0..3 {
        not_confirmed(deliveries(&mut w, &mut got));
    }
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn confirmation_settings_are_checked() {
    let mut cfg = Config::new("redis://127.0.0.1:1/", "bad");
    cfg.confirm_replicas = 1;
    cfg.confirm_timeout = Duration::ZERO;
    let e = Producer::connect(&cfg).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidConfig(m) if m.contains("confirm_timeout")),
        "{e}"
    );
    cfg.confirm_timeout = cfg.io_timeout;
    let e = Producer::connect(&cfg).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidConfig(m) if m.contains("below io_timeout")),
        "{e}"
    );
    // Unused without confirmation.
    cfg.confirm_replicas = 0;
    cfg.connect_timeout = Duration::ZERO;
    assert!(matches!(Producer::connect(&cfg), Err(Error::Redis(_))));
}

/// A Cluster of 3 primaries with a replica each.
fn cluster_with_replicas() -> RedisCluster {
    RedisCluster::start_with_replicas(3, 1)
        .unwrap_or_else(|e| panic!("cannot run the Redis Cluster test: {e}"))
}

#[test]
fn on_a_cluster_with_a_replica_per_primary_bulk_writes_and_acks_are_confirmed() {
    let c = cluster_with_replicas();
    let ns = "cl";
    let shards = 12;
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), ns);
    cfg.shards = shards;
    cfg.time = TimeSource::Manual(time.clone());
    cfg.claim_ahead = Duration::ZERO;
    cfg.confirm_replicas = 1;
    cfg.confirm_timeout = Duration::from_secs(2);
    let replicas: Vec<&RedisServer> = c
        .replicas()
        .unwrap()
        .into_iter()
        .map(|i| &c.nodes()[i])
        .collect();
    assert_eq!(replicas.len(), 3);
    let on_a_replica = |id: &str| replicas.iter().find_map(|r| stored_on(r, ns, shards, id));

    let mut p = Producer::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..60).map(|i| format!("t{i}")).collect();
    p.schedule_many(
        ids.iter()
            .map(|id| Task::new(id, RunAt::AtMillis(T0 + 100), b"x")),
    )
    .unwrap();
    for id in &ids {
        assert!(on_a_replica(id).is_some(), "{id} not on its replica");
    }
    p.schedule("one", RunAt::AtMillis(T0 + 100), b"1").unwrap();
    assert!(on_a_replica("one").is_some());

    let mut w = Worker::connect(&cfg).unwrap();
    let mut got = BTreeMap::new();
    deliveries(&mut w, &mut got).unwrap();
    time.set_ms(T0 + 200);
    let mut n = 0;
    for _ in 0..6 {
        n += deliveries(&mut w, &mut got).unwrap();
    }
    assert_eq!(n, 61, "{got:?}");
    assert!(got.values().all(|&k| k == 1), "{got:?}");
    for id in ids.iter().map(String::as_str).chain(["one"]) {
        assert_eq!(on_a_replica(id), None, "{id}: its ack not on the replica");
    }

    // One replica stopped: a bulk call over every shard writes to its primary too, and
    // fewer replicas confirm it there (the writes there are unconfirmed, and the call).
    replicas[0].sigstop().unwrap();
    let t = Instant::now();
    let far = RunAt::AtMillis(T0 + 3_600_000);
    not_confirmed(p.schedule_many(ids.iter().map(|id| Task::new(id, far, b"y"))));
    let waited = t.elapsed();
    replicas[0].sigcont().unwrap();
    assert!(
        waited >= Duration::from_millis(1_950),
        "NotConfirmed after {waited:?}"
    );
    for id in &ids {
        assert!(
            matches!(p.state(id).unwrap(), TaskState::Pending { .. }),
            "{id}"
        );
    }
}

/// The shards of `ns` whose slots a primary serves (it answers `EXISTS` on their keys, and
/// `MOVED` on the others').
fn shards_served(node: &RedisServer, ns: &str, shards: u32) -> BTreeSet<u32> {
    let mut con = redis::Client::open(node.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    (0..shards)
        .filter(|s| {
            redis::cmd("EXISTS")
                .arg(format!("tw:{{{ns}:{s}}}:tasks"))
                .query::<i64>(&mut con)
                .is_ok()
        })
        .collect()
}

/// A Cluster of 3 primaries with a replica each, one replica stopped (SIGSTOP: its shard A
/// confirms nothing), after a call that wrote to A too (so the producer's connection to A
/// carries a write A's replica has not confirmed). A bulk call that writes to several slots,
/// all of them on the other two primaries, is confirmed there, at once: its `WAIT` goes to
/// the primaries it wrote to, not to every primary of the Cluster (then A's answer, 0, after
/// the whole timeout, counted for every write: `NotConfirmed`). A call that writes to A is
/// still `NotConfirmed`, after the timeout (once, for all of A's slots).
#[test]
fn on_a_cluster_a_stopped_replica_leaves_writes_to_the_other_shards_confirmed() {
    let c = cluster_with_replicas();
    let ns = "shardwise";
    let shards = 12;
    let timeout = Duration::from_secs(2);
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), ns);
    cfg.shards = shards;
    cfg.time = TimeSource::Manual(time);
    cfg.claim_ahead = Duration::ZERO;
    cfg.confirm_replicas = 1;
    cfg.confirm_timeout = timeout;
    let stopped = c.replicas().unwrap()[0];
    let a = c.primary_of(stopped).unwrap();
    let on_a = shards_served(&c.nodes()[a], ns, shards);
    let others: Vec<(usize, BTreeSet<u32>)> = c
        .replicas()
        .unwrap()
        .into_iter()
        .map(|r| c.primary_of(r).unwrap())
        .filter(|&n| n != a)
        .map(|n| (n, shards_served(&c.nodes()[n], ns, shards)))
        .collect();
    assert_eq!(others.len(), 2);
    assert!(!on_a.is_empty() && others.iter().all(|(_, s)| !s.is_empty()));
    let far = RunAt::AtMillis(T0 + 3_600_000);

    let mut p = Producer::connect(&cfg).unwrap();
    let inspector = tickwheel_redis::Inspector::connect(&cfg).unwrap();
    // Every shard written while the replicas answer (the scripts are loaded on every node).
    let all: Vec<String> = (0..48).map(|i| format!("all{i}")).collect();
    p.schedule_many(all.iter().map(|id| Task::new(id, far, b"x")))
        .unwrap();

    // Ids of shards on B and C only: several slots on each.
    let elsewhere: Vec<String> = (0..)
        .map(|i| format!("bc{i}"))
        .filter(|id| !on_a.contains(&inspector.shard_of(id)))
        .take(24)
        .collect();
    let written: BTreeSet<u32> = elsewhere.iter().map(|id| inspector.shard_of(id)).collect();
    for (n, served) in &others {
        assert!(
            written.intersection(served).count() >= 2,
            "node {n}: {written:?} {served:?}"
        );
    }

    let mixed: Vec<String> = (0..24).map(|i| format!("mixed{i}")).collect();
    // Several slots on A: one timeout for them all, not one per slot.
    let mixed_on_a: BTreeSet<u32> = mixed
        .iter()
        .map(|id| inspector.shard_of(id))
        .filter(|s| on_a.contains(s))
        .collect();
    assert!(mixed_on_a.len() >= 2, "{mixed_on_a:?}");
    let one_on_a = (0..)
        .map(|i| format!("a{i}"))
        .find(|id| on_a.contains(&inspector.shard_of(id)))
        .unwrap();
    let timed = |f: &mut dyn FnMut() -> Result<(), Error>| {
        let t = Instant::now();
        let r = f();
        (r, t.elapsed())
    };

    c.nodes()[stopped].sigstop().unwrap();
    // A call that writes to every shard, A's too: not confirmed there. A's connection now
    // carries a write its replica has not confirmed.
    let (mixed_r, mixed_t) = timed(&mut || {
        p.schedule_many(mixed.iter().map(|id| Task::new(id, far, b"z")))
            .map(drop)
    });
    // Calls that write to B and C only.
    let (bc_r, bc_t) = timed(&mut || {
        p.schedule_many(elsewhere.iter().map(|id| Task::new(id, far, b"y")))
            .map(drop)
    });
    let (cancel_r, cancel_t) = timed(&mut || {
        let cancelled = p.cancel_many(&elsewhere)?;
        assert!(cancelled.iter().all(|&c| c), "{cancelled:?}");
        Ok(())
    });
    // A lone write to A.
    let (a_r, a_t) = timed(&mut || p.schedule(&one_on_a, far, b"a").map(drop));
    c.nodes()[stopped].sigcont().unwrap();
    eprintln!(
        "A's replica stopped; a write to every shard: {mixed_r:?} in {mixed_t:?}; writes to \
         {} slots of B and C: {bc_r:?} in {bc_t:?}, their cancel: {cancel_r:?} in \
         {cancel_t:?}; one write to A: {a_r:?} in {a_t:?}",
        written.len()
    );

    assert!(
        bc_r.is_ok(),
        "writes to B and C only: {bc_r:?} after {bc_t:?}"
    );
    assert!(bc_t < timeout / 4, "writes to B and C only took {bc_t:?}");
    assert!(cancel_r.is_ok(), "{cancel_r:?} after {cancel_t:?}");
    assert!(cancel_t < timeout / 4, "the cancel took {cancel_t:?}");
    // What A's replica did not confirm is not confirmed.
    let late = timeout - Duration::from_millis(50);
    not_confirmed(mixed_r);
    assert!(mixed_t >= late && mixed_t < timeout * 3 / 2, "{mixed_t:?}");
    not_confirmed(a_r);
    assert!(a_t >= late, "{a_t:?}");
    for id in mixed.iter().chain([&one_on_a]) {
        assert!(
            matches!(p.state(id).unwrap(), TaskState::Pending { .. }),
            "{id}"
        );
    }
    // The replica back: confirmed everywhere.
    p.schedule_many(mixed.iter().map(|id| Task::new(id, far, b"w")))
        .unwrap();
}

/// `calls` of `EVALSHA` in a server's `INFO commandstats`.
fn evalsha_calls(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn on_a_cluster_a_write_whose_reply_is_lost_is_not_sent_again() {
    // A one-node Cluster that announces the proxy's port, so every connection of the
    // client goes through the proxy.
    let node = RedisServer::start_cluster_node().unwrap();
    // Once armed, the first chunk that sends "drop-me" runs and loses its reply.
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arm = armed.clone();
    let proxy = Proxy::start(node.port(), move |chunk| {
        let hit = chunk.windows(7).any(|w| w == b"drop-me");
        if hit && arm.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Verdict::ForwardThenCut
        } else {
            Verdict::Forward
        }
    });
    let mut con = redis::Client::open(node.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    for (k, v) in [
        ("cluster-announce-ip", "127.0.0.1".to_string()),
        ("cluster-announce-port", proxy.port.to_string()),
    ] {
        let _: String = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut con)
            .unwrap();
    }
    let _: String = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut con)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        if info.lines().any(|l| l.trim() == "cluster_state:ok") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the one-node cluster is not ok: {info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&[format!("127.0.0.1:{}", proxy.port)], "lost");
    cfg.shards = SHARDS;
    cfg.time = TimeSource::Manual(time);
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("first", RunAt::AtMillis(T0 + 100), b"1")
        .unwrap();

    let _: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = p.schedule("drop-me", RunAt::AtMillis(T0 + 100), b"2");
    assert!(
        matches!(r, Err(Error::Redis(_))),
        "a lost reply is in doubt: {r:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(evalsha_calls(&mut con), 1, "the schedule was sent again");
    // It ran once; the producer connects again and goes on.
    assert!(matches!(
        p.state("drop-me").unwrap(),
        TaskState::Pending { .. }
    ));
    p.schedule("after", RunAt::AtMillis(T0 + 100), b"3")
        .unwrap();
}

/// `INFO replication` of a node, or `None` when it does not answer within 500 ms.
fn replication(node: &RedisServer) -> Option<String> {
    let client = redis::Client::open(node.url().as_str()).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    redis::cmd("INFO").arg("replication").query(&mut con).ok()
}

/// A Cluster (3 primaries, a replica each) whose replica of one primary stops, its link cut, for a
/// second while a producer schedules; then the primary stops and the replica, back, is promoted
/// without the writes it missed. Returns the ids whose `schedule` returned `Ok`, and those of them
/// the promoted replica lacks.
fn fail_over_behind_a_lagging_replica(confirm: u32) -> (Vec<String>, Vec<String>) {
    let c = cluster_with_replicas();
    c.config_set("cluster-node-timeout", "1000").unwrap();
    // The primary to stop (not the first seed, which the client tries first), and its
    // replica.
    let replicas = c.replicas().unwrap();
    let victim = (1..c.nodes().len())
        .find(|i| !replicas.contains(i))
        .unwrap();
    let port = c.nodes()[victim].port();
    let heir = *replicas
        .iter()
        .find(|&&r| {
            replication(&c.nodes()[r])
                .unwrap()
                .contains(&format!("master_port:{port}"))
        })
        .unwrap();

    let mut cfg = Config::cluster(&c.seeds(), "fo");
    cfg.shards = 12;
    cfg.confirm_replicas = confirm;
    cfg.confirm_timeout = Duration::from_millis(300);
    cfg.io_timeout = Duration::from_secs(1);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (cfg, stop) = (cfg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut p = Producer::connect(&cfg).unwrap();
            let mut stored = Vec::new();
            let far = RunAt::After(Duration::from_secs(3600));
            for i in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let id = format!("k{i}");
                if p.schedule(&id, far, b"x").is_ok() {
                    stored.push(id);
                }
            }
            stored
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // The replica stops, and its link is cut (else what the primary sends meanwhile waits
    // in its socket buffer, and it reads it when it resumes).
    c.nodes()[heir].sigstop().unwrap();
    let mut con = redis::Client::open(c.nodes()[victim].url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    c.nodes()[victim].sigstop().unwrap();
    c.nodes()[heir].sigcont().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replication(&c.nodes()[heir]).is_some_and(|r| r.contains("role:master")) {
        assert!(Instant::now() < deadline, "the replica was not promoted");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let stored = producer.join().unwrap();
    let mut p = Producer::connect(&cfg).unwrap();
    let lost = stored
        .iter()
        .filter(|id| p.state(id).unwrap() == TaskState::Unknown)
        .cloned()
        .collect();
    c.nodes()[victim].sigcont().unwrap();
    (stored, lost)
}

#[test]
fn on_a_cluster_a_confirmed_schedule_survives_a_failover_behind_a_lagging_replica() {
    let (stored, lost) = fail_over_behind_a_lagging_replica(1);
    assert!(stored.len() > 100, "{} stored", stored.len());
    assert!(
        lost.is_empty(),
        "{} of {} lost: {lost:?}",
        lost.len(),
        stored.len()
    );
    // Without confirmation the same failover loses what the replica missed.
    let (stored, lost) = fail_over_behind_a_lagging_replica(0);
    eprintln!(
        "without confirmation: {} of {} lost",
        lost.len(),
        stored.len()
    );
    assert!(!lost.is_empty(), "{} stored, none lost", stored.len());
}
