//! Producer and workers against a real 3-node Redis Cluster that the test forms itself
//! (`redis-server --cluster-enabled yes` three times, then `redis-cli --cluster create`), on a
//! manual clock. A missing `redis-server` or `redis-cli` fails the test loudly.

#[path = "common/partition.rs"]
mod partition;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use partition::BusCut;
use tickwheel_redis::server::RedisCluster;
use tickwheel_redis::{
    Config, Delivery, Inspector, ManualTime, Outcome, Producer, RunAt, Task, TaskState, Worker,
    CLUSTER_SCHEME,
};

const T0: u64 = 1_000_000;
const SHARDS: u32 = 12;

fn cluster() -> RedisCluster {
    match RedisCluster::start(3) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster test: {e}"),
    }
}

/// The shards whose keys sit on each node, read with `KEYS` node by node.
fn shards_per_node(c: &RedisCluster, ns: &str) -> Vec<BTreeSet<u32>> {
    c.nodes()
        .iter()
        .map(|node| {
            let mut con = redis::Client::open(node.url().as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("tw:{{{ns}:*"))
                .query(&mut con)
                .unwrap();
            keys.iter()
                .filter_map(|k| {
                    let tag = k.split('{').nth(1)?.split('}').next()?;
                    tag.rsplit(':').next()?.parse().ok()
                })
                .collect()
        })
        .collect()
}

fn tick(w: &mut Worker, got: &mut BTreeMap<String, u32>) -> usize {
    w.tick(&mut |d: &Delivery| {
        *got.entry(d.id.clone()).or_default() += 1;
        assert!(d.claimed_at_ms >= d.due_ms, "{} delivered early", d.id);
        Outcome::Ack
    })
    .unwrap()
}

#[test]
fn producer_and_two_workers_on_a_three_node_cluster() {
    let c = cluster();
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), "cl");
    assert!(cfg.url.starts_with(CLUSTER_SCHEME), "{}", cfg.url);
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    let mut p = Producer::connect(&cfg).unwrap();
    assert_eq!(p.shards(), SHARDS);

    // One-by-one schedules, cancel, reschedule and state, each routed to its shard's node.
    assert!(
        !p.schedule("one", RunAt::AtMillis(T0 + 5_000), b"1")
            .unwrap()
            .replaced
    );
    assert!(
        p.schedule("one", RunAt::AtMillis(T0 + 6_000), b"1")
            .unwrap()
            .replaced
    );
    assert!(matches!(
        p.state("one").unwrap(),
        TaskState::Pending {
            run_at_ms,
            ..
        } if run_at_ms == T0 + 6_000
    ));
    assert!(p.reschedule("one", RunAt::AtMillis(T0 + 7_000)).unwrap());
    p.schedule("gone", RunAt::AtMillis(T0 + 5_000), b"")
        .unwrap();
    assert!(p.cancel("gone").unwrap());
    assert!(!p.cancel("gone").unwrap());
    assert_eq!(p.state("gone").unwrap(), TaskState::Unknown);

    // Bulk: one cluster pipeline, split by node.
    let ids: Vec<String> = (0..600).map(|i| format!("t{i}")).collect();
    let tasks = ids.iter().enumerate().map(|(i, id)| Task {
        id,
        run_at: RunAt::AtMillis(T0 + 5_000 + (i as u64 % 50) * 10),
        payload: id.as_bytes(),
        recurrence: None,
        retry: None,
    });
    assert!(p.schedule_many(tasks).unwrap().iter().all(|s| !s.replaced));
    assert_eq!(p.len().unwrap(), 601);

    // The shards spread over all three nodes, each shard on exactly one.
    let per_node = shards_per_node(&c, "cl");
    assert!(
        per_node.iter().all(|s| !s.is_empty()),
        "every node holds shards: {per_node:?}"
    );
    let all: Vec<u32> = per_node.iter().flatten().copied().collect();
    assert_eq!(
        all.len(),
        SHARDS as usize,
        "each shard on one node: {per_node:?}"
    );

    // Two workers share the shards (notifications come through any node's pub/sub).
    let mut a = Worker::connect(&cfg).unwrap();
    let mut b = Worker::connect(&cfg).unwrap();
    let mut got = BTreeMap::new();
    for _ in 0..8 {
        tick(&mut a, &mut got);
        tick(&mut b, &mut got);
        time.advance(Duration::from_millis(500));
    }
    assert!(got.is_empty(), "nothing is due yet: {got:?}");
    let (sa, sb) = (a.owned_shards(), b.owned_shards());
    assert!(!sa.is_empty() && !sb.is_empty(), "{sa:?} {sb:?}");
    assert_eq!(sa.len() + sb.len(), SHARDS as usize, "{sa:?} {sb:?}");

    time.set_ms(T0 + 8_000);
    for _ in 0..20 {
        a.reload_windows();
        b.reload_windows();
        let n = tick(&mut a, &mut got) + tick(&mut b, &mut got);
        if n == 0 && got.len() == 601 {
            break;
        }
    }
    assert_eq!(got.len(), 601, "every task delivered");
    assert!(got.values().all(|&n| n == 1), "exactly once");
    assert!(!got.contains_key("gone"));
    assert!(p.is_empty().unwrap(), "every delivery acknowledged");

    // A task due inside the loaded windows reaches its owner by notification (a script's
    // PUBLISH on one node reaches the subscription on another): no window is reloaded and
    // the virtual clock stays short of the next refill.
    a.tick(&mut |_| Outcome::Ack).unwrap();
    b.tick(&mut |_| Outcome::Ack).unwrap();
    let late: Vec<String> = (0..SHARDS).map(|i| format!("late{i}")).collect();
    for id in &late {
        p.schedule(id, RunAt::AtMillis(T0 + 8_100), b"").unwrap();
    }
    time.set_ms(T0 + 8_200);
    for _ in 0..50 {
        tick(&mut a, &mut got);
        tick(&mut b, &mut got);
        if late.iter().all(|id| got.contains_key(id)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        late.iter().all(|id| got.get(id) == Some(&1)),
        "notified tasks delivered once: {:?}",
        late.iter().map(|id| got.get(id)).collect::<Vec<_>>()
    );
    assert!(p.is_empty().unwrap());
}

/// A Cluster whose nodes want a password: the URL gives the credentials once, before the
/// seeds, and every connection to every node uses them (the slot map, the scripts, the
/// worker's subscription), as `Config::cluster` does with seeds that carry them. Without
/// them, or with wrong ones, connecting fails at once and says why, and no error shows the
/// password.
#[test]
fn a_password_protected_cluster_takes_the_credentials_from_the_url() {
    const PASSWORD: &str = "s3cret-pw";
    let c = cluster();
    c.config_set("requirepass", PASSWORD).unwrap();
    let hosts = c.seeds().join(",");
    let refused = |auth: &str, why: &[&str]| {
        let started = std::time::Instant::now();
        let url = format!("{CLUSTER_SCHEME}{auth}{hosts}");
        let e = Producer::connect(&Config::new(url, "pw")).unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(why.iter().any(|w| shown.contains(w)), "{auth:?}: {shown}");
        assert!(!shown.contains("wrong-pw"), "{shown}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{auth:?}: took {:?}",
            started.elapsed()
        );
    };
    refused("", &["NOAUTH", "Authentication required"]);
    for auth in [":wrong-pw@", "default:wrong-pw@"] {
        refused(auth, &["Password authentication failed"]);
    }

    let time = ManualTime::new(T0);
    let seeds: Vec<String> = c
        .seeds()
        .iter()
        .map(|s| format!("redis://:{PASSWORD}@{s}/"))
        .collect();
    let mut cfg = Config::cluster(&seeds, "pw");
    assert_eq!(cfg.url, format!("{CLUSTER_SCHEME}:{PASSWORD}@{hosts}"));
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    let mut p = Producer::connect(&cfg).unwrap();
    for i in 0..SHARDS * 2 {
        p.schedule(&format!("t{i}"), RunAt::AtMillis(T0 + 1_000), b"x")
            .unwrap();
    }
    let mut w = Worker::connect(&cfg).unwrap();
    // What a program logs of its clients shows no password.
    let inspector = Inspector::connect(&cfg).unwrap();
    for shown in [
        format!("{cfg:?}"),
        format!("{p:?}"),
        format!("{w:?}"),
        format!("{inspector:?}"),
    ] {
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
    let mut got = BTreeMap::new();
    time.set_ms(T0 + 2_000);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got.len() < (SHARDS * 2) as usize && std::time::Instant::now() < deadline {
        tick(&mut w, &mut got);
    }
    assert_eq!(got.len(), (SHARDS * 2) as usize, "{got:?}");
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    // A task stored inside the window the worker has loaded reaches it only through its
    // subscription (the clock stays inside the window, which is not read again).
    p.schedule("late", RunAt::AtMillis(T0 + 2_400), b"")
        .unwrap();
    time.set_ms(T0 + 3_000);
    let stored = std::time::Instant::now();
    while !got.contains_key("late") && stored.elapsed() < Duration::from_secs(10) {
        tick(&mut w, &mut got);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(got.get("late"), Some(&1), "not announced to the worker");
}

#[test]
fn malformed_cluster_urls_are_clear_errors() {
    for url in [
        "redis+cluster://",
        "redis+cluster:///",
        "redis+cluster://127.0.0.1:1/0",
        "redis+cluster://127.0.0.1:notaport",
        "redis+cluster://:hunter2@",
        "redis+cluster://:hunter2@127.0.0.1:1,",
        "redis+cluster://:hunter2@127.0.0.1:1/0",
    ] {
        let err = Producer::connect(&Config::new(url, "bad")).unwrap_err();
        assert!(
            matches!(err, tickwheel_redis::Error::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

/// A configuration for namespace `ns` on a manual clock whose first seed is `node` (where a
/// worker's subscription goes first), with a 500 ms I/O timeout.
fn subscribed_first_to(c: &RedisCluster, node: usize, ns: &str) -> (Config, ManualTime) {
    let mut seeds = c.seeds();
    seeds.swap(0, node);
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&seeds, ns);
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    cfg.io_timeout = Duration::from_millis(500);
    (cfg, time)
}

/// A worker that owns every shard, its windows loaded, and what it delivered.
fn worker_with_every_shard(cfg: &Config, time: &ManualTime) -> (Worker, BTreeMap<String, u32>) {
    let mut w = Worker::connect(cfg).unwrap();
    let mut got = BTreeMap::new();
    for _ in 0..4 {
        tick(&mut w, &mut got);
        time.advance(Duration::from_millis(100));
    }
    assert_eq!(w.owned_shards().len(), SHARDS as usize);
    (w, got)
}

/// A worker hears of tasks stored inside a window it has loaded over one subscription, to the
/// first seed that answers (a Cluster broadcasts every `PUBLISH` to every node). A subscribed
/// node that stops answering (SIGSTOP here: a hung or cut-off node) raises no error on a
/// connection that only reads, so the subscription must find out by itself and subscribe again
/// elsewhere; otherwise a task stored inside the loaded window is announced to nobody and waits
/// for the window to be read again. Here the first seed is a replica (the Cluster serves every
/// slot without it); a task is stored 2 s ahead, inside the loaded window, after it stopped.
#[test]
fn a_subscription_whose_node_stops_answering_is_made_again_elsewhere() {
    let c = match RedisCluster::start_with_replicas(3, 1) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster test: {e}"),
    };
    let replica = c.replicas().unwrap()[0];
    let (cfg, time) = subscribed_first_to(&c, replica, "sub");
    let mut p = Producer::connect(&cfg).unwrap();
    let (mut w, mut got) = worker_with_every_shard(&cfg, &time);

    c.nodes()[replica].sigstop().unwrap();
    let stopped = std::time::Instant::now();
    p.schedule("late", RunAt::AtMillis(T0 + 2_400), b"")
        .unwrap();
    time.set_ms(T0 + 3_000);
    // About 3 s here: a `PING` a second, unanswered for the I/O timeout, then the stopped
    // seed refused for that long again, then the windows read anew. The bound is loose for
    // a loaded machine; without the `PING` it never comes (the clock stays inside the window).
    while !got.contains_key("late") && stopped.elapsed() < Duration::from_secs(10) {
        tick(&mut w, &mut got);
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = stopped.elapsed();
    c.nodes()[replica].sigcont().unwrap();
    assert_eq!(
        got.get("late"),
        Some(&1),
        "not delivered within {waited:?} of the subscribed node's stop"
    );
    eprintln!("delivered {waited:?} after the subscribed node stopped");
    assert!(waited < Duration::from_secs(6), "{waited:?}");
}

/// As above, but the subscribed node keeps answering: it is cut off from the rest of the
/// Cluster (its cluster bus behind a proxy that closes every link, the other nodes' behind
/// proxies that close the links it opens), and the nodes' timeout is 30 s, so for that long it
/// still says the Cluster is in order while it hears no `PUBLISH` made elsewhere. What finds
/// it out is the probe the subscriber publishes each second through another seed. The first
/// seed is a replica of a primary that does not serve the task's shard (its primary's
/// `PUBLISH`es would reach it through replication).
#[test]
fn a_subscription_whose_node_is_cut_off_is_made_again_elsewhere() {
    let (c, bus) = BusCut::cluster(3, 1);
    c.config_set("cluster-node-timeout", "30000").unwrap();
    let replica = c.replicas().unwrap()[0];
    let (cfg, time) = subscribed_first_to(&c, replica, "cut");
    let mut p = Producer::connect(&cfg).unwrap();
    let inspector = Inspector::connect(&cfg).unwrap();
    let (mut w, _) = worker_with_every_shard(&cfg, &time);
    // A task id whose shard the replica's primary does not serve.
    let task = task_of(&c, &inspector, c.primary_of(replica).unwrap(), "cut", false);
    // About 2 s: a probe a second, unheard for the I/O timeout, then the windows read anew
    // through another node. Without the probe it comes only after the nodes' timeout.
    let waited = cut_then_deliver(&c, &bus, replica, &mut p, &mut w, &time, &task);
    eprintln!("delivered {waited:?} after the subscribed node was cut off");
    assert!(waited < Duration::from_secs(6), "{waited:?}");
}

/// A task stored on a primary just as a partition cut it off from the rest of the Cluster is
/// announced to no worker: the primary's `PUBLISH` no longer crosses the cut, and the worker's
/// subscription, on a node of the other side, is in order (it hears its probes). Its replica,
/// which had the task by replication, is promoted after the nodes' timeout; the worker's calls
/// to that shard follow it (a fresh slot map) and the worker must then read its windows
/// again, or the task waits for the next time they are read (here: never, the clock stands
/// still inside the window).
#[test]
fn a_task_announced_by_a_primary_cut_off_is_found_after_the_failover() {
    let (c, bus) = BusCut::cluster(3, 1);
    let primaries: Vec<usize> = (0..c.nodes().len())
        .filter(|&n| c.is_primary(n).unwrap())
        .collect();
    let (cut_off, other) = (primaries[0], primaries[1]);
    // The subscription goes to `other` first, the probes through the next seed; the cut-off
    // primary is the last seed.
    let mut seeds: Vec<String> = c.seeds();
    let mine = seeds.remove(cut_off);
    seeds.push(mine);
    let pos = seeds
        .iter()
        .position(|s| s.ends_with(&format!(":{}", c.nodes()[other].port())));
    seeds.swap(0, pos.unwrap());
    let time = ManualTime::new(T0);
    let mut cfg = Config::cluster(&seeds, "ann");
    cfg.shards = SHARDS;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    cfg.io_timeout = Duration::from_millis(500);
    let mut p = Producer::connect(&cfg).unwrap();
    let inspector = Inspector::connect(&cfg).unwrap();
    let (mut w, _) = worker_with_every_shard(&cfg, &time);
    // A task id whose shard the cut-off primary serves.
    let task = task_of(&c, &inspector, cut_off, "ann", true);
    let waited = cut_then_deliver(&c, &bus, cut_off, &mut p, &mut w, &time, &task);
    eprintln!("delivered {waited:?} after the cut (a failover after 3 s of it)");
}

/// A task id of namespace `ns` whose shard `node` serves (`served`) or does not (it answers
/// `MOVED` to a key of the shard).
fn task_of(c: &RedisCluster, inspector: &Inspector, node: usize, ns: &str, served: bool) -> String {
    let mut con = redis::Client::open(c.nodes()[node].url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    (0..)
        .map(|i| format!("{ns}{i}"))
        .find(|id| {
            let key = format!("tw:{{{ns}:{}}}:tasks", inspector.shard_of(id));
            redis::cmd("EXISTS").arg(key).query::<i64>(&mut con).is_ok() == served
        })
        .unwrap()
}

/// Cuts `node` off the Cluster's buses, schedules `task` 2.4 s ahead (inside the worker's
/// loaded window), moves the clock past it and ticks `w` until it delivers the task (at most
/// 15 s), then heals; asserts the task was delivered once, and returns how long after the cut.
fn cut_then_deliver(
    c: &RedisCluster,
    bus: &BusCut,
    node: usize,
    p: &mut Producer,
    w: &mut Worker,
    time: &ManualTime,
    task: &str,
) -> Duration {
    let mut got = BTreeMap::new();
    bus.isolate(c, node);
    bus.cut();
    let cut = std::time::Instant::now();
    p.schedule(task, RunAt::AtMillis(T0 + 2_400), b"").unwrap();
    time.set_ms(T0 + 3_000);
    while !got.contains_key(task) && cut.elapsed() < Duration::from_secs(15) {
        tick(w, &mut got);
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = cut.elapsed();
    bus.heal();
    assert_eq!(
        got.get(task),
        Some(&1),
        "not delivered within {waited:?} of the cut"
    );
    waited
}
