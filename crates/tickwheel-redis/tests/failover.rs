//! A graceful failover (`CLUSTER FAILOVER`: a replica takes over its primary's slots) under a
//! `Producer`, an `Inspector` and a `Worker` that connected before it: every call to the moved
//! slots gets `MOVED` from the old primary, and each must follow the new topology at once
//! (issue #35: bulk calls kept failing with `MOVED` for as long as the client lived). A
//! Cluster of 3 primaries with a replica each, on loopback ports, on a manual clock. And a
//! primary killed under load (producers scheduling, workers delivering), on the server's
//! clock: the figures of the failover (tests/common/load.rs says what each one counts). And a
//! primary cut off from the rest of the Cluster with its clients, under load.

#[path = "common/load.rs"]
mod load;
#[path = "common/partition.rs"]
mod partition;
#[path = "common/proxy.rs"]
mod proxy;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use partition::BusCut;
use proxy::{Proxy, Verdict};

use tickwheel_redis::server::RedisCluster;
use tickwheel_redis::{
    Applied, Config, Delivery, Error, Inspector, ManualTime, Outcome, Producer, RunAt, Task,
    TaskState, Worker,
};

const T0: u64 = 1_000_000;
const SHARDS: u32 = 12;
/// How long after `cluster_state:ok` every call must succeed.
const FOLLOW: Duration = Duration::from_secs(1);

fn tasks(ids: &[String], at: u64) -> impl Iterator<Item = Task<'_>> {
    ids.iter()
        .map(move |id| Task::new(id, RunAt::AtMillis(at), id.as_bytes()))
}

/// Runs `f`, which must succeed within [`FOLLOW`] of `ok` (the client library retries
/// redirections itself; the test does not).
fn within<T>(what: &str, ok: Instant, f: impl FnOnce() -> Result<T, tickwheel_redis::Error>) -> T {
    let r = f();
    let late = ok.elapsed();
    match r {
        Ok(v) => {
            eprintln!("{what}: answered {late:?} after cluster_state:ok");
            assert!(
                late <= FOLLOW,
                "{what}: answered {late:?} after cluster_state:ok"
            );
            v
        }
        Err(e) => panic!("{what} after a graceful failover ({late:?} after cluster_state:ok): {e}"),
    }
}

fn tick(w: &mut Worker, got: &mut BTreeMap<String, u32>) -> Result<usize, tickwheel_redis::Error> {
    w.tick(&mut |d: &Delivery| {
        *got.entry(d.id.clone()).or_default() += 1;
        Outcome::Ack
    })
}

#[test]
fn every_call_follows_a_graceful_failover() {
    let c = match RedisCluster::start_with_replicas(3, 1) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster failover test: {e}"),
    };
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), "fo");
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());

    let before: Vec<String> = (0..300).map(|i| format!("b{i}")).collect();
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule_many(tasks(&before, T0 + 5_000)).unwrap();
    assert_eq!(p.len().unwrap(), 300);
    let mut w = Worker::connect(&cfg).unwrap();
    let mut got: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..4 {
        tick(&mut w, &mut got).unwrap();
        time.advance(Duration::from_millis(500));
    }
    assert_eq!(w.owned_shards().len(), SHARDS as usize);

    // The graceful failover of one primary: a third of the slots move to its replica.
    let ok = failover(&c, 0);

    // The producer's first calls to the moved slots are bulk calls.
    let after: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
    let stored = within("schedule_many", ok, || {
        p.schedule_many(tasks(&after, T0 + 5_000))
    });
    assert!(stored.iter().all(|s| !s.replaced));
    assert_eq!(within("len", ok, || p.len()), 600);
    let cancelled = within("cancel_many", ok, || p.cancel_many(&after[..100]));
    assert!(cancelled.iter().all(|&c| c), "{cancelled:?}");
    let moved = within("reschedule_many", ok, || {
        p.reschedule_many(
            before[..100]
                .iter()
                .map(|id| (id, RunAt::AtMillis(T0 + 6_000))),
        )
    });
    assert!(moved.iter().all(|&m| m), "{moved:?}");
    assert_eq!(within("len", ok, || p.len()), 500);

    // A fresh inspector sees the new topology.
    let mut i = Inspector::connect(&cfg).unwrap();
    let stats = within("Inspector::stats", ok, || i.stats());
    assert_eq!(stats.pending(), 500);

    // The worker, connected before the failover, follows too.
    time.set_ms(T0 + 3_000);
    within("Worker::tick", ok, || tick(&mut w, &mut got));

    // Each other bulk call as the first call after a failover of its own (the issue saw
    // `len` fail as well): another replica promoted each time.
    let ok = failover(&c, 1);
    assert!(got.is_empty(), "nothing is due yet: {got:?}");
    assert_eq!(within("len, first", ok, || p.len()), 500);
    let ok = failover(&c, 2);
    let cancelled = within("cancel_many, first", ok, || p.cancel_many(&after[100..150]));
    assert!(cancelled.iter().all(|&c| c), "{cancelled:?}");
    let ok = failover(&c, 3);
    let moved = within("reschedule_many, first", ok, || {
        p.reschedule_many(
            after[150..200]
                .iter()
                .map(|id| (id, RunAt::AtMillis(T0 + 6_500))),
        )
    });
    assert!(moved.iter().all(|&m| m), "{moved:?}");
    let ok = Instant::now();
    within("Worker::tick", ok, || tick(&mut w, &mut got));

    // Everything is delivered once.
    time.set_ms(T0 + 7_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 450 && Instant::now() < deadline {
        w.reload_windows();
        tick(&mut w, &mut got).unwrap();
    }
    let want: BTreeSet<String> = before.iter().chain(&after[150..]).cloned().collect();
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), want);
    assert!(got.values().all(|&n| n == 1), "exactly once");
    assert!(p.is_empty().unwrap(), "every delivery acknowledged");

    // A node that lost its scripts (a restart, `SCRIPT FLUSH`): a bulk call reloads them
    // and stores every task once (a `NOSCRIPT` in a cluster pipeline would lose the other
    // nodes' replies).
    let primary = (0..c.nodes().len())
        .find(|&n| c.is_primary(n).unwrap())
        .unwrap();
    for node in &c.nodes()[primary..=primary] {
        let mut con = redis::Client::open(node.url().as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("SCRIPT").arg("FLUSH").exec(&mut con).unwrap();
    }
    let flushed: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
    let stored = p.schedule_many(tasks(&flushed, T0 + 60_000)).unwrap();
    assert!(stored.iter().all(|s| !s.replaced));
    assert_eq!(p.len().unwrap(), 100);
}

/// A client whose seed node still has the slot map from before a failover (gossip has not
/// reached it yet) reads that stale map each time it reconnects to follow a `MOVED`: it must
/// keep following, with a growing pause, until the seed learns the new map, not give up
/// after a burst of redirections (CI saw `reschedule_many` fail with `MOVED` 22 ms after
/// `cluster_state:ok`). The seed is a proxy that answers `CLUSTER SLOTS` with the map from
/// before the failover for 500 ms after it.
#[test]
fn a_seed_with_a_stale_slot_map_is_followed() {
    let c = match RedisCluster::start_with_replicas(3, 1) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster failover test: {e}"),
    };
    let seed = StaleSlots::start(c.nodes()[0].port());
    let mut cfg = Config::cluster(&[format!("127.0.0.1:{}", seed.port)], "stale");
    cfg.shards = SHARDS;
    let mut p = Producer::connect(&cfg).unwrap();
    let before: Vec<String> = (0..200).map(|i| format!("b{i}")).collect();
    p.schedule_many(tasks(&before, 4_000_000_000_000)).unwrap();

    let ok = failover(&c, 0);
    seed.stale_for(Duration::from_millis(500));
    let after: Vec<String> = (0..200).map(|i| format!("a{i}")).collect();
    let stored = p.schedule_many(tasks(&after, 4_000_000_000_000));
    eprintln!(
        "schedule_many answered {:?} after cluster_state:ok",
        ok.elapsed()
    );
    let stored = stored.unwrap_or_else(|e| panic!("schedule_many with a stale seed: {e}"));
    assert!(stored.iter().all(|s| !s.replaced));
    assert!(seed.answered() > 0, "the stale map was never read");
    assert_eq!(p.len().unwrap(), 400);
    let moved = p
        .reschedule_many(
            before
                .iter()
                .map(|id| (id, RunAt::AtMillis(4_000_000_000_001))),
        )
        .unwrap();
    assert!(moved.iter().all(|&m| m));
}

/// A proxy in front of a Cluster node that records the node's `CLUSTER SLOTS` reply and,
/// while told to be stale, answers `CLUSTER SLOTS` with it: a seed that gossip has not
/// reached yet.
struct StaleSlots {
    port: u16,
    /// Stale until then; how many times the stale map was given.
    until: Arc<Mutex<(Option<Instant>, usize)>>,
}

impl StaleSlots {
    const SLOTS: &'static [u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

    fn start(to: u16) -> StaleSlots {
        use std::io::{Read, Write};
        // The map as it is now, read raw.
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", to)).unwrap();
        raw.write_all(Self::SLOTS).unwrap();
        raw.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut old = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = raw.read(&mut buf) {
            if n == 0 {
                break;
            }
            old.extend_from_slice(&buf[..n]);
        }
        assert!(old.starts_with(b"*"), "CLUSTER SLOTS: {old:?}");
        let until = Arc::new(Mutex::new((None::<Instant>, 0usize)));
        let stale = until.clone();
        let proxy = Proxy::start(to, move |chunk| {
            let mut s = stale.lock().unwrap();
            if chunk == Self::SLOTS && s.0.is_some_and(|t| Instant::now() < t) {
                s.1 += 1;
                Verdict::Answer(old.clone())
            } else {
                Verdict::Forward
            }
        });
        StaleSlots {
            port: proxy.port,
            until,
        }
    }

    /// Answers `CLUSTER SLOTS` with the recorded map from now until `d` from now.
    fn stale_for(&self, d: Duration) {
        self.until.lock().unwrap().0 = Some(Instant::now() + d);
    }

    /// How many times the stale map was given.
    fn answered(&self) -> usize {
        self.until.lock().unwrap().1
    }
}

/// Promotes a replica (the `k`-th, modulo their number) with `CLUSTER FAILOVER`; returns
/// when the cluster is ok again.
fn failover(c: &RedisCluster, k: usize) -> Instant {
    let replicas = c.replicas().unwrap();
    let node = replicas[k % replicas.len()];
    c.failover(node, Duration::from_secs(20)).unwrap();
    Instant::now()
}

/// A multi-slot call whose `WAIT` is in flight when `CLUSTER FAILOVER` demotes a primary it
/// waits on, then calls that write only to slots the failover did not move: the sequence of
/// `a_graceful_failover_is_followed_under_load`'s CI failure (fixed in 9b7d2de). The demoted
/// node answers the `WAIT` `UNBLOCKED ... (master -> replica)`, which `redis` reads as an
/// extension error, not an error reply (`connection::unfit`), so the producer opens a new
/// connection for its next call, with the slot map of a seed that has not heard of the
/// failover yet: the demoted node is a primary there. `WAIT` on several slots goes to every
/// node the map calls a primary, and a call to slots that did not move gets no `MOVED`
/// (which makes a call read the map again), so each such call failed with "WAIT cannot be
/// used with replica instances" for as long as the connection lived, unless a failed `WAIT`
/// makes the connection read the map again. Since a `WAIT` goes only to the nodes a call
/// wrote to (by slot), these calls send none to the demoted node, and none fails. Here the
/// `WAIT` is held on purpose (it asks for 2 replicas, and the primary's second replica is
/// stopped until the first has taken over), and the seed is a proxy that answers `CLUSTER
/// SLOTS` with the map from before the failover until 200 ms after the calls start.
#[test]
fn a_wait_in_flight_at_a_demotion_is_not_sent_to_the_demoted_node_again() {
    let c = match RedisCluster::start_with_replicas(3, 2) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster failover test: {e}"),
    };
    let promoted = c.replicas().unwrap()[0];
    let demoted = c.primary_of(promoted).unwrap();
    let stopped = c
        .replicas()
        .unwrap()
        .into_iter()
        .find(|&r| r != promoted && c.primary_of(r).unwrap() == demoted)
        .expect("the primary has two replicas");
    let seed = StaleSlots::start(c.nodes()[promoted].port());
    let ns = "held";
    let mut cfg = Config::cluster(&[format!("127.0.0.1:{}", seed.port)], ns);
    cfg.shards = SHARDS;
    cfg.confirm_replicas = 2;
    cfg.confirm_timeout = Duration::from_secs(5);
    cfg.io_timeout = Duration::from_secs(10);
    let mut p = Producer::connect(&cfg).unwrap();
    let inspector = Inspector::connect(&cfg).unwrap();

    // The shards the demoted node serves: it answers `MOVED` for the others' keys.
    let mut con = redis::Client::open(c.nodes()[demoted].url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let moving: BTreeSet<u32> = (0..SHARDS)
        .filter(|s| {
            redis::cmd("EXISTS")
                .arg(format!("tw:{{{ns}:{s}}}:tasks"))
                .query::<i64>(&mut con)
                .is_ok()
        })
        .collect();
    assert!(!moving.is_empty() && moving.len() < SHARDS as usize - 1);
    // Three calls after the failover, each to several shards, none of them moved.
    let kept: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|id| !moving.contains(&inspector.shard_of(id)))
        .take(24)
        .collect();
    let after: Vec<&[String]> = kept.chunks(8).collect();
    for ids in &after {
        let shards: BTreeSet<u32> = ids.iter().map(|id| inspector.shard_of(id)).collect();
        assert!(
            shards.len() > 1,
            "{ids:?}: one slot, its WAIT goes to one node"
        );
    }

    // The held call: it writes to every shard, then its WAIT for 2 replicas waits on the
    // demoted node, whose second replica is stopped.
    const AT: u64 = 4_000_000_000_000;
    let held: Vec<String> = (0..48).map(|i| format!("h{i}")).collect();
    assert!(held
        .iter()
        .any(|id| moving.contains(&inspector.shard_of(id))));
    // A first write while every node answers: on a new Cluster its slot probe gets `NOSCRIPT`,
    // and the scripts are loaded then (on every node: the held call must not wait on that).
    assert!(p.cancel_many(&held).unwrap().iter().all(|&c| !c));
    c.nodes()[stopped].sigstop().unwrap();
    let call = std::thread::spawn({
        let held = held.clone();
        move || {
            let r = p.schedule_many(tasks(&held, AT)).map(|_| ());
            (p, r)
        }
    });
    let mut blocked = || {
        redis::cmd("INFO")
            .arg("clients")
            .query::<String>(&mut con)
            .unwrap()
            .lines()
            .any(|l| {
                l.trim()
                    .strip_prefix("blocked_clients:")
                    .is_some_and(|n| n != "0")
            })
    };
    let until = Instant::now() + Duration::from_secs(4);
    while !blocked() {
        if Instant::now() > until {
            c.nodes()[stopped].sigcont().unwrap();
            let (_, r) = call.join().unwrap();
            panic!("the WAIT is not held on the primary; the call: {r:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    // The failover, with the WAIT in flight (the seed keeps the old map meanwhile); the
    // stopped replica resumes once the primary is demoted (the WAIT unblocked).
    seed.stale_for(Duration::from_secs(60));
    let mut con = redis::Client::open(c.nodes()[promoted].url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut con)
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while c.is_primary(demoted).unwrap() {
        assert!(
            Instant::now() < until,
            "CLUSTER FAILOVER did not demote the primary"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    c.nodes()[stopped].sigcont().unwrap();
    let (mut p, r) = call.join().unwrap();
    match r {
        Err(e) => assert!(e.to_string().contains("UNBLOCKED"), "the held call: {e}"),
        Ok(()) => panic!("the held call was confirmed: its WAIT was not in flight"),
    }
    // The stopped replica follows the new primary, so that 2 replicas confirm there too.
    let until = Instant::now() + Duration::from_secs(10);
    while !replication(&c, promoted)
        .lines()
        .any(|l| l.trim() == "connected_slaves:2")
    {
        assert!(Instant::now() < until, "the new primary has not 2 replicas");
        std::thread::sleep(Duration::from_millis(10));
    }
    c.wait_ok(Duration::from_secs(20)).unwrap();

    // The calls, each failed one sent again after 20 ms (as tests/common/load.rs does), for
    // at most 2 s; the seed learns the new map 200 ms from now.
    seed.stale_for(Duration::from_millis(200));
    let start = Instant::now();
    let mut failed: Vec<(Duration, String)> = Vec::new();
    let mut stored = 0;
    'calls: for ids in &after {
        loop {
            let at = start.elapsed();
            match p.schedule_many(tasks(ids, AT)) {
                Ok(_) => break,
                Err(e) => failed.push((at, e.to_string())),
            }
            if at > Duration::from_secs(2) {
                break 'calls;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stored += 1;
    }
    eprintln!(
        "calls after the demotion: {stored} of {} stored in {:?}; {} failed, the last {:?} \
         after the first call; first error: {:?}",
        after.len(),
        start.elapsed(),
        failed.len(),
        failed.last().map(|f| f.0),
        failed.first().map(|f| &f.1),
    );
    // The premise: the new connection's map had the demoted node as a primary.
    assert!(seed.answered() > 0, "the stale map was never read");
    // A `WAIT` goes only to the nodes a call wrote to (by slot), none of them the demoted
    // one: no call fails. (Sent to every primary of the map, the first calls failed with
    // "WAIT cannot be used with replica instances" until the map was read again.)
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(stored, after.len(), "calls after the demotion: {failed:?}");
    // Nothing lost: the held call's writes ran, and reached the promoted replica before it
    // took over.
    assert_eq!(p.len().unwrap(), (held.len() + kept.len()) as u64);
    for id in held.iter().chain(&kept) {
        assert!(
            matches!(p.state(id).unwrap(), TaskState::Pending { .. }),
            "{id}"
        );
    }
}

/// A node's `INFO replication`.
fn replication(c: &RedisCluster, node: usize) -> String {
    let mut con = redis::Client::open(c.nodes()[node].url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .unwrap()
}

/// An inspector connected before a graceful failover, whose first calls after it are
/// `remembered`, one lone `ZSCORE` each, some to the moved slots: each must follow the new
/// topology as the pipelined calls do. Sent straight through the cluster connection, a lone
/// command got `MOVED` on every call for as long as nothing else reopened the connection. The
/// inspector's only seed is a proxy that answers `CLUSTER SLOTS` with the map from before
/// the failover for 300 ms after it, so a connection reopened meanwhile (the demoted node may
/// have closed it) reads the stale map too.
#[test]
fn an_inspector_connected_before_a_failover_answers_remembered_after_it() {
    let c = match RedisCluster::start_with_replicas(3, 1) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster failover test: {e}"),
    };
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), "rem");
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    let ids: Vec<String> = (0..24).map(|i| format!("o{i}")).collect();
    let mut p = Producer::connect(&cfg).unwrap();
    for id in &ids {
        p.schedule_once(id, RunAt::AtMillis(T0 + 60_000), b"")
            .unwrap();
    }
    let seed = StaleSlots::start(c.nodes()[0].port());
    cfg.url = Config::cluster(&[format!("127.0.0.1:{}", seed.port)], "rem").url;
    let mut i = Inspector::connect(&cfg).unwrap();
    assert!(i.remembered(&ids[0]).unwrap().is_some());

    let ok = failover(&c, 0);
    seed.stale_for(Duration::from_millis(300));
    let mut failed = 0;
    for id in &ids {
        loop {
            match i.remembered(id) {
                Ok(Some(_)) => break,
                r => {
                    failed += 1;
                    assert!(
                        ok.elapsed() < Duration::from_secs(2),
                        "{id}: {r:?}, {:?} after the failover ({failed} failed calls)",
                        ok.elapsed()
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    eprintln!(
        "remembered: all answered {:?} after the failover, {failed} failed calls",
        ok.elapsed()
    );
}

/// A bulk call that fails part way says what each task got ([`Error::Partial`]), so that a
/// caller sends again only what was not applied: here one shard's task hash holds a string,
/// so its script call fails while running (in doubt), and the other shards' calls store
/// their tasks.
#[test]
fn a_bulk_call_failing_part_way_says_what_it_stored() {
    let s = tickwheel_redis::server::RedisServer::start().unwrap();
    let mut cfg = Config::new(s.url(), "part");
    cfg.shards = 4;
    let mut p = Producer::connect(&cfg).unwrap();
    let i = Inspector::connect(&cfg).unwrap();
    let mut con = redis::Client::open(s.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("SET")
        .arg("tw:{part:0}:tasks")
        .arg("not a hash")
        .exec(&mut con)
        .unwrap();

    let ids: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
    let e = p.schedule_many(tasks(&ids, 4_000_000_000_000)).unwrap_err();
    let Error::Partial { applied, source } = &e else {
        panic!("not a Partial error: {e}");
    };
    assert!(source.to_string().contains("WRONGTYPE"), "{e}");
    assert_eq!(applied.len(), ids.len());
    for (id, a) in ids.iter().zip(applied) {
        let want = if i.shard_of(id) == 0 {
            Applied::Unknown
        } else {
            Applied::Yes
        };
        assert_eq!(*a, want, "{id}");
        if want == Applied::Yes {
            assert!(
                matches!(p.state(id).unwrap(), TaskState::Pending { .. }),
                "{id}"
            );
        }
    }
    assert_eq!(e.not_applied(), Some(vec![]), "{e}");
    // The same call on one task: the cause itself.
    let zero = ids.iter().find(|id| i.shard_of(id) == 0).unwrap();
    assert!(matches!(p.cancel(zero), Err(Error::Redis(_))));
}

/// A primary SIGKILLed while two producers schedule and three workers deliver (a Cluster of
/// 3 primaries with two replicas each): its replica takes over once the others mark it failed
/// (3 s), and every client follows. With a replica confirming each write (the default here:
/// `TICKWHEEL_FAILOVER_CONFIRM=0` measures the loss without), nothing stored is lost.
#[test]
fn a_killed_primary_is_followed_under_load() {
    under_load("killed primary", "killed", |c| {
        let victim = (0..c.nodes().len())
            .find(|&n| c.is_primary(n).unwrap())
            .unwrap();
        c.kill_primary(victim, Duration::from_secs(30)).unwrap()
    });
}

/// `CLUSTER FAILOVER` on a replica while two producers schedule and three workers deliver:
/// the primary stops taking writes until its replica caught up, then the replica takes its
/// slots. Every client follows (`MOVED`, then the new slot map), and with a replica
/// confirming each write nothing stored is lost.
#[test]
fn a_graceful_failover_is_followed_under_load() {
    under_load("CLUSTER FAILOVER", "graceful", |c| {
        let replica = c.replicas().unwrap()[0];
        c.failover(replica, Duration::from_secs(30)).unwrap();
        Instant::now()
    });
}

/// A failover under load on a Cluster of 3 primaries with two replicas each (the promoted
/// replica keeps one to confirm writes): `fault` strikes 3 s in and returns when the new
/// primary was seen ready (`cluster_state:ok`). Judged by the target: never early, no
/// task stored twice by a retried call, every call answered within [`FOLLOW`] of the new
/// primary, and with confirmation nothing stored lost and nothing acknowledged twice.
fn under_load(what: &str, ns: &str, fault: impl FnOnce(&mut RedisCluster) -> Instant) {
    let mut c = match RedisCluster::start_with_replicas(3, 2) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster failover test: {e}"),
    };
    under_load_on(&mut c, what, ns, fault);
}

/// [`under_load`] on a Cluster already started.
fn under_load_on(
    c: &mut RedisCluster,
    what: &str,
    ns: &str,
    fault: impl FnOnce(&mut RedisCluster) -> Instant,
) {
    let mut cfg = Config::cluster(&c.seeds(), ns);
    cfg.shards = SHARDS;
    cfg.io_timeout = Duration::from_secs(1);
    let confirm = load::confirm(&mut cfg);
    let load = load::Load {
        tasks: load::Load::tasks_from_env(10_000),
        producers: 2,
        workers: 3,
        schedule_for: Duration::from_secs(10),
        ahead_ms: (6_000, 9_000),
        fault_at: Duration::from_secs(3),
    };
    let mut p = Producer::connect(&cfg).unwrap();
    let mut inspector = Inspector::connect(&cfg).unwrap();
    p.schedule("far", RunAt::AtMillis(4_000_000_000_000), b"x")
        .unwrap();
    let run = load::run(&cfg, &load, || fault(c));
    let f = load::report(&format!("{what} (Cluster, {confirm} confirming)"), &run);
    load::judged_with_logs(c.nodes(), || f.assert_target(confirm, FOLLOW));
    let stats = inspector.stats().unwrap();
    assert_eq!((stats.pending(), stats.in_flight()), (1, 0), "{stats:?}");
    assert!(inspector.show("far").unwrap().is_some());
}

/// A primary cut off from the rest of the Cluster while its clients still reach it (a
/// partition with the clients on the primary's side), under load (3 primaries with two
/// replicas each, so that the promoted one keeps one to confirm writes): the other nodes mark
/// it failed after the nodes' timeout (3 s) and promote one of its replicas, while the old
/// primary goes on answering its clients; healed 5 s after the promotion, it learns of the
/// newer configuration and replicates the new primary. Judged as [`under_load`] judges:
/// every call follows the new primary within [`FOLLOW`] (though a client may read the old
/// primary's stale slot map), and with a replica confirming each write (the default here)
/// nothing a producer was told is stored is lost: nor stranded by a worker whose
/// notifications came through the old primary, which hears no `PUBLISH` from the other side.
/// The cut is on the cluster bus (the replication links stay until the promoted replica drops
/// its own and the other follows it): every node's bus is behind a proxy that the node
/// announces; the old primary's proxy closes every link, the others' the links the old
/// primary opened (its node ID is in the header of the first message it sends on one).
#[test]
fn a_partitioned_primary_keeps_its_clients_and_loses_nothing_confirmed() {
    let (mut c, bus) = BusCut::cluster(3, 2);
    let old = (0..c.nodes().len())
        .find(|&n| c.is_primary(n).unwrap())
        .unwrap();
    let replicas: Vec<usize> = c
        .replicas()
        .unwrap()
        .into_iter()
        .filter(|&r| c.primary_of(r).unwrap() == old)
        .collect();
    assert_eq!(replicas.len(), 2, "the primary's replicas");
    bus.isolate(&c, old);
    let mut healed = None;
    under_load_on(&mut c, "partitioned primary", "cut", |c| {
        bus.cut();
        let cut = Instant::now();
        let promoted =
            |c: &RedisCluster| replicas.iter().any(|&r| c.is_primary(r).unwrap_or(false));
        while !promoted(c) || !majority_ok(c, old) {
            assert!(
                cut.elapsed() < Duration::from_secs(30),
                "no replica was promoted within 30 s of the cut"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let ready = Instant::now();
        // The old primary still answers as one: the clients on its side can still reach it.
        assert!(
            c.is_primary(old).unwrap(),
            "the partitioned primary stopped answering as a primary"
        );
        eprintln!("cut to the new primary ready: {:?}", ready - cut);
        std::thread::sleep(Duration::from_secs(5));
        bus.heal();
        healed = Some(Instant::now());
        ready
    });
    // Healed, the old primary learns of the newer configuration: no second primary stays.
    partition::wait_demoted(healed.unwrap(), || c.is_primary(old).unwrap());
}

/// Whether every node but `cut_off` reports `cluster_state:ok`.
fn majority_ok(c: &RedisCluster, cut_off: usize) -> bool {
    (0..c.nodes().len()).filter(|&n| n != cut_off).all(|n| {
        redis::Client::open(c.nodes()[n].url().as_str())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut con| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut con))
            .is_ok_and(|info| info.lines().any(|l| l.trim() == "cluster_state:ok"))
    })
}
