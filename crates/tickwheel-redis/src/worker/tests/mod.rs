use super::*;

use std::sync::atomic::AtomicU64;

use super::clock::{Local, ServerClock};
use super::delivery::{Deliverer, Held, Lease};
use super::notices::parse_notice;
use super::window::{Resume, ShardWindow};

mod stats;

/// A server-clock estimate over a virtual local clock (µs).
fn virtual_clock(local_us: u64) -> (ServerClock, Arc<AtomicU64>) {
    let local = Arc::new(AtomicU64::new(local_us));
    let clock = ServerClock {
        local: Local::Manual(local.clone()),
        ..ServerClock::new(TimeSource::Server)
    };
    (clock, local)
}

fn claimed(id: &str, shard: u32, due_ms: u64, node: u32) -> Held {
    Held {
        delivery: Delivery {
            id: id.into(),
            payload: Vec::new(),
            due_ms,
            attempt: 1,
            version: 1,
            shard,
            epoch: 1,
            claimed_at_ms: 0,
            recurrence: None,
        },
        next: None,
        node,
        redelivery: None,
        timed_from_ms: due_ms,
    }
}

/// Two Cluster nodes whose clocks disagree by 50 ms, each holding a shard, and a task
/// claimed ahead on each, both with the same run-at. Steps the local clock 100 µs at a
/// time and records, for each delivery, what its node's clock read then: never before
/// the run-at, and late by less than a millisecond. A single estimate fed by both nodes
/// (the later of the two) hands node b's task out with node a's, 50 ms before node b's
/// clock reaches the run-at. Then shard 1 moves from node b to node a (a resharding): a
/// task claimed on node b before the move waits for node b's clock, one claimed on node a
/// after it for node a's.
#[test]
fn a_claim_waits_for_the_clock_of_the_node_that_claimed_it() {
    let t0: u64 = 1_800_000_000_000_000;
    let (clock, local) = virtual_clock(t0);
    let offset = |node: &str| -> i64 {
        match node {
            "node-a" => 30_000, // node a's clock: local + 30 ms
            _ => -20_000,       // node b's clock: local - 20 ms
        }
    };
    // Exact samples: the reply arrived the instant the node read its clock.
    let sample = |node: &str| {
        let now = local.load(Ordering::SeqCst);
        clock.observe(node, now as i64 + offset(node), now)
    };
    let a = sample("node-a");
    let b = sample("node-b");
    assert_ne!(a, b);
    let mut d = Deliverer::new(clock.clone());
    let lease = Lease {
        epoch: 1,
        valid_until_us: u64::MAX,
    };
    d.set_leases(HashMap::from([(0, lease), (1, lease)]), &mut |_| {});
    // Both due 200 ms from now by the local clock: node a's clock reaches that 30 ms
    // early, node b's 20 ms late.
    let due = t0 / 1000 + 200;
    d.push(claimed("on-b", 1, due, b));
    d.push(claimed("on-a", 0, due, a));

    // Node clock readings at delivery, by task id.
    let mut seen: Vec<(String, u64, u64)> = Vec::new();
    let run = |d: &mut Deliverer, until_us: u64, seen: &mut Vec<(String, u64, u64)>| {
        while local.load(Ordering::SeqCst) < until_us {
            local.fetch_add(100, Ordering::SeqCst);
            let now = local.load(Ordering::SeqCst);
            if now % 100_000 == 0 {
                // The clock thread's probes, every 100 ms.
                sample("node-a");
                sample("node-b");
            }
            d.deliver(
                &mut |x| {
                    let node = if x.id.ends_with("-a") {
                        "node-a"
                    } else {
                        "node-b"
                    };
                    let node_now_us = (now as i64 + offset(node)) as u64;
                    seen.push((x.id.clone(), node_now_us, x.due_ms));
                    Outcome::Ack
                },
                &mut |_| {},
            );
        }
    };
    run(&mut d, t0 + 400_000, &mut seen);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (id, node_now_us, due_ms) in &seen {
        assert!(
            *node_now_us >= due_ms * 1000,
            "{id} delivered {} µs before its node's clock reached its run-at",
            due_ms * 1000 - node_now_us
        );
        assert!(
            *node_now_us < due_ms * 1000 + 1_000,
            "{id} delivered {} µs late",
            node_now_us - due_ms * 1000
        );
    }
    assert_eq!(seen[0].0, "on-a", "node a's clock reaches its run-at first");

    // Shard 1 moves to node a. The claim made on node b before the move still waits for
    // node b's clock; a claim made on node a after it waits for node a's.
    seen.clear();
    let base = local.load(Ordering::SeqCst);
    let due = base / 1000 + 100;
    d.push(claimed("before-move-b", 1, due, b));
    d.push(claimed("after-move-a", 1, due, a));
    run(&mut d, base + 300_000, &mut seen);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (id, node_now_us, due_ms) in &seen {
        assert!(*node_now_us >= due_ms * 1000, "{id} early: {seen:?}");
        assert!(*node_now_us < due_ms * 1000 + 1_000, "{id} late: {seen:?}");
    }
    assert_eq!(seen[0].0, "after-move-a");
}

/// A node's estimate is a lower bound: a late reply (one that waited, say, for an fsync)
/// lowers nothing, an exact one tightens it, and without samples it slides back 1 ms a
/// second; a node never read has no estimate at all, so nothing claimed on it could be
/// delivered.
/// Under Sentinel the one server (node `""`) is another machine after a failover: its
/// estimate is forgotten, so a new primary whose clock is behind the old one's is not
/// taken to be ahead (which would deliver early by the difference).
#[test]
fn a_failover_forgets_the_old_primarys_clock() {
    let t0: u64 = 1_800_000_000_000_000;
    let (clock, _local) = virtual_clock(t0);
    let n = clock.observe("", t0 as i64 + 50_000, t0); // the old primary: 50 ms ahead
    clock.forget("");
    assert_eq!(
        clock.node_now_us(n),
        None,
        "no estimate until the new primary is read"
    );
    clock.observe("", t0 as i64, t0); // the new one: on time
    assert_eq!(clock.node_now_us(n), Some(t0));
}

#[test]
fn node_estimates_are_lower_bounds_of_their_own_node() {
    let t0: u64 = 1_800_000_000_000_000;
    let (clock, local) = virtual_clock(t0);
    let server = t0 as i64 + 5_000; // the node's clock: local + 5 ms
                                    // A reply that took 3 ms to arrive after the node read its clock.
    let n = clock.observe("n", server, t0 + 3_000);
    local.store(t0 + 3_000, Ordering::SeqCst);
    assert_eq!(clock.node_now_us(n), Some(t0 + 3_000 + 2_000));
    // An exact reply tightens it ...
    clock.observe("n", server + 3_000, t0 + 3_000);
    assert_eq!(clock.node_now_us(n), Some(t0 + 3_000 + 5_000));
    // ... a late one (10 ms on its way) does not loosen it: 10 ms later the estimate has
    // slid back by 10 µs (1 ms a second), not by 10 ms.
    clock.observe("n", server + 3_000, t0 + 13_000);
    local.store(t0 + 13_000, Ordering::SeqCst);
    assert_eq!(clock.node_now_us(n), Some(t0 + 13_000 + 5_000 - 10));
    // Ten seconds without a sample: 10 ms behind, never ahead.
    local.store(t0 + 10_013_000, Ordering::SeqCst);
    assert_eq!(clock.node_now_us(n), Some(t0 + 10_013_000 + 5_000 - 10_010));
    let never = clock.node("never-read");
    assert_eq!(clock.node_now_us(never), None);
    let mut d = Deliverer::new(clock.clone());
    d.push(claimed("x", 0, 0, never));
    assert_eq!(d.deliver(&mut |_| Outcome::Ack, &mut |_| {}), 0);
}

#[test]
fn notices_carry_one_or_many_tasks_and_reject_garbage() {
    let got: Vec<(u32, u64, u64, String)> = parse_notice(b"3:7:1000:2:a:8:1001:4:b:c:")
        .unwrap()
        .into_iter()
        .map(|n| match n {
            Notice::Task {
                shard,
                version,
                run_at,
                id,
            } => (shard, version, run_at, id),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        vec![(3, 7, 1000, "a:".into()), (3, 8, 1001, "b:c:".into())]
    );
    assert!(parse_notice(b"3:7:1000:9:short").is_none());
    assert!(parse_notice(b"x:7:1000:1:a").is_none());
    assert!(parse_notice(b"3").is_none());
}

/// On a real Redis Cluster with a replica a primary, the clock thread alone: after a graceful
/// failover, which raises no error on the prober's connection (the demoted node still answers
/// its probe), the promoted node is probed within the 5 s in which the prober learns the
/// primaries anew. A connection reads its slot map only when it opens, so learning them anew
/// means opening it again; the promoted node's clock is otherwise fed only by claim replies.
#[test]
fn the_clock_thread_probes_a_promoted_primary_within_its_relearn_period() {
    let c = crate::server::RedisCluster::start_with_replicas(3, 1)
        .unwrap_or_else(|e| panic!("cannot run the Redis Cluster test: {e}"));
    let cfg = Config::cluster(&c.seeds(), "clkfo");
    let clock = ServerClock::new(TimeSource::Server);
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (client, clock, stop) = (Endpoint::of(&cfg).unwrap(), clock.clone(), stop.clone());
        std::thread::spawn(move || clock_loop(client, clock, stop, Duration::from_secs(5)))
    };
    let id = |n: usize| -> String {
        let mut con = redis::Client::open(c.nodes()[n].url().as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap()
    };
    let replica = c.replicas().unwrap()[0];
    let promoted = id(replica);
    // The prober has read the primaries once (the replica is not among them).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while clock.lock().ids.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "{:?}", clock.lock());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!clock.lock().ids.contains_key(&promoted));
    c.failover(replica, Duration::from_secs(20)).unwrap();
    let failed_over = local_us();
    // 50 rounds of 100 ms, and a margin for the rounds' own time.
    let deadline = std::time::Instant::now() + Duration::from_secs(7);
    let fresh = |clock: &ServerClock| {
        let n = clock.lock();
        n.ids
            .get(&promoted)
            .and_then(|&i| n.clocks[i as usize])
            .is_some_and(|c| c.observed_at_us > failed_over)
    };
    while !fresh(&clock) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let probed = fresh(&clock);
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert!(
        probed,
        "the promoted primary was not probed within 7 s of the failover: {:?}",
        clock.lock()
    );
}

/// On a real 3-node Redis Cluster, on the server's clock: every claim is filed under the
/// node that holds its shard (by the node id its reply carries), the worker ends up with
/// one estimate per node and no other, and each delivery comes when its own node's clock
/// (read right then with `TIME` on that node) has reached its run-at. (The nodes share
/// this machine's clock, so the disagreement itself is the unit test's above.)
#[test]
fn on_a_cluster_claims_are_filed_under_the_node_that_ran_them() {
    let c = crate::server::RedisCluster::start(3)
        .unwrap_or_else(|e| panic!("cannot run the Redis Cluster test: {e}"));
    let mut cfg = Config::cluster(&c.seeds(), "clk");
    cfg.shards = 12;
    let mut nodes: Vec<(String, redis::Connection)> = c
        .nodes()
        .iter()
        .map(|n| {
            let mut con = redis::Client::open(n.url().as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap();
            (id, con)
        })
        .collect();
    let mut p = crate::Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    // Each shard's node: the one that serves its keys (the others answer MOVED).
    let shard_node: Vec<usize> = (0..12)
        .map(|s| {
            let key = &w.ns.shards[s].0[3];
            let owners: Vec<usize> = (0..nodes.len())
                .filter(|&n| {
                    redis::cmd("EXISTS")
                        .arg(key)
                        .query::<i64>(&mut nodes[n].1)
                        .is_ok()
                })
                .collect();
            assert_eq!(owners.len(), 1, "shard {s}: {owners:?}");
            owners[0]
        })
        .collect();
    let ids: Vec<String> = (0..48).map(|i| format!("task-{i}")).collect();
    for id in &ids {
        p.schedule(id, crate::RunAt::After(Duration::from_millis(300)), b"")
            .unwrap();
    }
    // One step takes the shards, reads the windows and claims everything (due within the
    // claim-ahead): each claim must sit in its shard's node's queue.
    w.io_step(false).unwrap();
    let names: HashMap<u32, String> = w
        .clock
        .lock()
        .ids
        .iter()
        .map(|(id, &i)| (i, id.clone()))
        .collect();
    let mut filed = 0;
    for (i, q) in w.handoff.local.ready.iter().enumerate() {
        for c in q.values() {
            assert_eq!(c.node, i as u32);
            let holder = &nodes[shard_node[c.delivery.shard as usize]].0;
            assert_eq!(
                &names[&c.node], holder,
                "{} filed under another node",
                c.delivery.id
            );
            filed += 1;
        }
    }
    assert_eq!(filed, ids.len(), "all claimed in one step");
    let mut delivered = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while delivered < ids.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{delivered} delivered"
        );
        delivered += w
            .tick(&mut |d| {
                let con = &mut nodes[shard_node[d.shard as usize]].1;
                let (secs, us): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
                let node_now_us = secs * 1_000_000 + us;
                assert!(
                    node_now_us >= d.due_ms * 1000,
                    "{} delivered {} µs before its node's clock reached its run-at",
                    d.id,
                    d.due_ms * 1000 - node_now_us
                );
                Outcome::Ack
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut seen: Vec<String> = w.clock.lock().ids.keys().cloned().collect();
    let mut all: Vec<String> = nodes.iter().map(|(id, _)| id.clone()).collect();
    seen.sort();
    all.sort();
    assert_eq!(seen, all, "one estimate per node, and only those");
    assert!(w.clock.lock().clocks.iter().all(Option::is_some));

    // The clock thread alone reads every primary, each under its own id.
    let clock = ServerClock::new(TimeSource::Server);
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (client, clock, stop) = (Endpoint::of(&cfg).unwrap(), clock.clone(), stop.clone());
        std::thread::spawn(move || clock_loop(client, clock, stop, Duration::from_secs(5)))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut probed: Vec<String> = Vec::new();
    while std::time::Instant::now() < deadline {
        probed = clock.lock().ids.keys().cloned().collect();
        probed.sort();
        if probed == all {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Later rounds read the primaries one by one: every estimate stays fresh.
    std::thread::sleep(Duration::from_millis(350));
    let fresh = clock
        .lock()
        .clocks
        .iter()
        .all(|c| c.is_some_and(|c| c.observed_at_us + 250_000 > local_us()));
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert_eq!(probed, all);
    assert!(fresh, "{:?}", clock.lock());
}

/// The manual clock's start in [`manual_rig`]s (ms).
const T0: u64 = 1_000_000;

/// A Redis server of the test's own, then a namespace `name` of `shards` shards on it on a
/// manual clock at [`T0`], a producer and a worker. Bind the server to a name (`_server`,
/// not `_`) to keep it up for the test's length.
fn manual_rig(
    name: &str,
    shards: u32,
) -> (
    crate::server::RedisServer,
    crate::ManualTime,
    Config,
    crate::Producer,
    Worker,
) {
    let server = crate::server::RedisServer::start()
        .unwrap_or_else(|e| panic!("cannot run the Redis tests: {e}"));
    let time = crate::ManualTime::new(T0);
    let mut cfg = Config::new(server.url(), name);
    cfg.shards = shards;
    cfg.time = TimeSource::Manual(time.clone());
    let p = crate::Producer::connect(&cfg).unwrap();
    let w = Worker::connect(&cfg).unwrap();
    (server, time, cfg, p, w)
}

/// A claim Redis applied whose reply never came (the connection died on the way back):
/// the worker sends it again, forced, on its next step, and the task is delivered at its
/// run-at, not after the visibility timeout (30 s here). Nothing is delivered before the
/// run-at, and a claim whose reply is lost again stays unsure until one comes back. Each
/// applied claim counts as an attempt (here 3: two lost, one delivered). Manual clock.
#[test]
fn a_claim_whose_reply_was_lost_is_delivered_at_its_run_at() {
    let (_server, time, _cfg, mut p, mut w) = manual_rig("lost", 2);
    let t0 = T0;
    p.schedule("lost", crate::RunAt::AtMillis(t0 + 500), b"x")
        .unwrap();
    let mut got: Vec<(String, u32, u64)> = Vec::new();
    let tick = |w: &mut Worker, got: &mut Vec<(String, u32, u64)>| {
        w.tick(&mut |d| {
            got.push((d.id.clone(), d.attempt, time.now_ms()));
            Outcome::Ack
        })
    };
    // The first step claims it (due within claim_ahead); the reply is lost.
    w.lose_replies = true;
    assert!(matches!(tick(&mut w, &mut got), Err(Error::Redis(_))));
    let in_flight = |p: &mut crate::Producer| {
        matches!(
            p.state("lost").unwrap(),
            crate::TaskState::InFlight { attempt: 1, .. }
        )
    };
    assert!(in_flight(&mut p), "Redis applied the claim");
    // Lost again: still unsure.
    time.set_ms(t0 + 100);
    w.lose_replies = true;
    let lost_again = tick(&mut w, &mut got).is_err();
    // The next step claims it again and holds it until its run-at.
    time.set_ms(t0 + 499);
    assert_eq!(tick(&mut w, &mut got).unwrap(), 0);
    time.set_ms(t0 + 500);
    assert_eq!(tick(&mut w, &mut got).unwrap(), 1);
    // Attempt 1: the claims sent again after lost replies were the same claim, never
    // handed to a handler (an attempt counts handler calls), so no redelivery either.
    assert_eq!(got, vec![("lost".to_string(), 1, t0 + 500)]);
    let by = w.stats().redelivered_by;
    assert_eq!(
        (by.lost_claim_reply, by.visibility_timeout, by.requeued),
        (0, 0, 0)
    );
    assert!(lost_again, "the second step sent the claim again");
    assert_eq!(
        p.state("lost").unwrap(),
        crate::TaskState::Unknown,
        "acknowledged"
    );
}
/// The reply to a lease acquisition is lost (Redis restarted just after applying it): the
/// shard is the worker's in Redis, unknown to the worker. Asking again takes it at once,
/// not after the lease runs out.
#[test]
fn an_acquisition_whose_reply_was_lost_is_repeated_at_once() {
    let (_server, time, cfg, mut p, mut w) = manual_rig("lost-lease", 1);
    let t0 = T0;
    p.schedule("a", crate::RunAt::AtMillis(t0 + 100), b"x")
        .unwrap();
    // The worker's own acquisition, applied by Redis; its reply never reached the worker.
    let call = crate::protocol::Acquire {
        keys: &w.ns.shards[0],
        now: crate::protocol::now(&cfg),
        worker: &w.id,
        lease_ms: cfg.lease.as_millis() as u64,
        held_epoch: 0,
    };
    let mut con = crate::namespace::connect(&cfg, &w.redis.client).unwrap();
    let r = crate::protocol::invoke(&mut con, &call).unwrap();
    assert!(r.epoch.is_some(), "acquired in Redis");
    let mut got = Vec::new();
    for ms in [0, 50, 100] {
        time.set_ms(t0 + ms);
        w.tick(&mut |d| {
            got.push((d.id.clone(), time.now_ms()));
            Outcome::Ack
        })
        .unwrap();
    }
    assert_eq!(w.owned_shards(), [0], "the worker holds its shard");
    assert_eq!(got, [("a".to_string(), t0 + 100)], "delivered on time");
}

/// A Redis error (`run` resets the worker, then reconnects) keeps the wheel and only marks
/// the windows to be read again: what the wheel held is claimed in the first step that
/// reaches Redis, without waiting for every window to be read again (one LOAD per shard, an
/// fsync each under `appendfsync always`). A reset that dropped the wheel made the first
/// deliveries after a Redis restart up to a second late.
#[test]
fn a_reset_keeps_the_wheel_and_marks_the_windows_unread() {
    let (_server, time, _cfg, mut p, mut w) = manual_rig("reset", 2);
    let t0 = T0;
    p.schedule("kept", crate::RunAt::AtMillis(t0 + 5_000), b"x")
        .unwrap();
    let mut got: Vec<(String, u64)> = Vec::new();
    let mut tick = |w: &mut Worker| {
        w.tick(&mut |d| {
            got.push((d.id.clone(), time.now_ms()));
            Outcome::Ack
        })
        .unwrap()
    };
    tick(&mut w);
    let shard = w.ns.shard_of("kept");
    let held = |w: &Worker| w.schedule.contains(shard, "kept");
    assert!(held(&w), "the window was read into the wheel");
    w.reset();
    assert!(held(&w), "the reset kept the wheel");
    assert!(
        w.shards
            .iter()
            .all(|(_, o)| matches!(o.window, ShardWindow::Unloaded)),
        "every window is to be read again"
    );
    time.set_ms(t0 + 5_000);
    assert_eq!(tick(&mut w), 1);
    assert_eq!(
        got,
        [("kept".to_string(), t0 + 5_000)],
        "delivered on time, once"
    );
}

/// The window's table: when it reads, from where, what notices it takes, and which LOAD
/// replies break its invariants.
#[test]
fn window_table() {
    let resume = |bucket: u64, generation: &str, offset: u64| Resume {
        bucket,
        generation: generation.to_string(),
        offset,
    };
    let loaded = |horizon: u64, r: Resume, more: bool| ShardWindow::Loaded {
        horizon,
        resume: r,
        more,
    };
    let w = 10_000;
    // (window, now, expected next read)
    let reads = [
        (ShardWindow::Unloaded, 0, Some(None)),
        (loaded(19_999, resume(20, "", 0), false), 10_000, None),
        (
            loaded(19_999, resume(20, "", 0), false),
            12_500,
            Some(Some(resume(20, "", 0))),
        ),
        (
            loaded(19_999, resume(20, "7", 100), true),
            0,
            Some(Some(resume(20, "7", 100))),
        ),
    ];
    for (window, now, want) in reads {
        assert_eq!(window.next_read(now, w), want, "{window:?} at {now}");
        assert_eq!(window.check_invariants(), Ok(()), "{window:?}");
    }
    let full = loaded(19_999, resume(20, "", 0), false);
    assert!(full.covers(19_999) && !full.covers(20_000));
    assert!(
        !ShardWindow::Unloaded.covers(0),
        "an unloaded window takes no notice"
    );
    for broken in [
        loaded(19_998, resume(20, "", 0), false), // the horizon is not a bucket's end
        loaded(19_999, resume(20, "", 5), true),  // an offset without a generation
        loaded(19_999, resume(20, "7", 5), false), // a complete read inside a bucket
    ] {
        assert!(broken.check_invariants().is_err(), "{broken:?}");
    }
}
