//! The read-only inspection API against a real redis-server with a real worker running:
//! counts and listings that match what was scheduled, cancelled, delivered and left in
//! flight; filters; `show` of hostile ids and binary payloads; `upcoming` from the bucket
//! counts; paging that neither skips nor repeats; and a namespace that does not exist or
//! holds another schema refused without being created.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel_redis::{
    Config, Error, Inspector, ListFilter, Outcome, Producer, Recurrence, RunAt, StateFilter, Task,
    TaskState, Worker, MAX_STEP, PREVIEW_BYTES,
};

use common::eventually;

fn ids(tasks: &[tickwheel_redis::TaskInfo]) -> BTreeSet<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

#[test]
fn stats_and_listings_match_what_was_scheduled_cancelled_and_delivered() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "ops");
    cfg.shards = 4;
    let mut p = Producer::connect(&cfg).unwrap();
    let hour = Duration::from_secs(3600);
    // 300 far tasks at distinct seconds, 50 of them cancelled; 20 due at once (delivered and
    // acknowledged); 6 due at once that the handler leaves in flight.
    let far: Vec<String> = (0..300).map(|i| format!("far-{i}")).collect();
    for (i, id) in far.iter().enumerate() {
        p.schedule(id, RunAt::After(hour + Duration::from_secs(i as u64)), b"x")
            .unwrap();
    }
    let cancelled: Vec<&String> = far.iter().step_by(6).collect();
    assert_eq!(cancelled.len(), 50);
    assert!(p.cancel_many(&cancelled).unwrap().iter().all(|&c| c));
    for i in 0..20 {
        p.schedule(
            &format!("now-{i}"),
            RunAt::After(Duration::from_millis(100)),
            b"",
        )
        .unwrap();
    }
    for i in 0..6 {
        p.schedule(
            &format!("hold-{i}"),
            RunAt::After(Duration::from_millis(100)),
            b"",
        )
        .unwrap();
    }

    let mut w = Worker::connect(&cfg).unwrap();
    let worker_id = w.id().to_string();
    let stop = w.stop_handle();
    let acked = Arc::new(AtomicUsize::new(0));
    let counter = acked.clone();
    let runner = std::thread::spawn(move || {
        w.run(|d| {
            if d.id.starts_with("hold-") {
                Outcome::Leave
            } else {
                counter.fetch_add(1, Ordering::SeqCst);
                Outcome::Ack
            }
        })
    });

    let mut ins = Inspector::connect(&cfg).unwrap();
    assert_eq!(ins.shards(), 4);
    assert!(eventually(Duration::from_secs(10), || {
        let st = ins.stats().unwrap();
        acked.load(Ordering::SeqCst) == 20 && st.in_flight() == 6 && st.pending() == 250
    }));
    let st = ins.stats().unwrap();
    assert_eq!(st.shards.len(), 4);
    assert_eq!(st.live_workers, 1);
    assert_eq!(st.workers[0].id, worker_id);
    assert_eq!(st.unowned(), 0);
    for sh in &st.shards {
        assert_eq!(sh.owner.as_deref(), Some(worker_id.as_str()));
        assert!(sh.epoch >= 1 && sh.lease_left.is_some());
        assert!(sh.next_run_at_exact);
    }
    let expected: BTreeSet<String> = far
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 6 != 0)
        .map(|(_, id)| id.clone())
        .collect();
    // The earliest pending task is the first far one not cancelled.
    let first = ins.show("far-1").unwrap().unwrap();
    assert_eq!(st.next_run_at_ms(), Some(first.info.due_ms()));
    assert_eq!(st.in_flight_expired(), 0);

    // Everything: the 6 held tasks first, then the 250 pending ones by second.
    let all = ins.list(&ListFilter::default()).unwrap();
    assert_eq!(all.len(), 256);
    let held: BTreeSet<String> = (0..6).map(|i| format!("hold-{i}")).collect();
    assert_eq!(ids(&all[..6]), held);
    assert!(all[..6]
        .iter()
        .all(|t| matches!(t.state, TaskState::InFlight { attempt: 1, .. })));
    assert_eq!(ids(&all[6..]), expected);
    assert!(all[6..]
        .windows(2)
        .all(|w| w[0].due_ms() / 1000 <= w[1].due_ms() / 1000));
    for t in &all {
        assert_eq!(t.shard, ins.shard_of(&t.id));
    }

    // Filters: state, shard, due range, limit.
    let pending = ins
        .list(&ListFilter {
            state: StateFilter::Pending,
            ..ListFilter::default()
        })
        .unwrap();
    assert_eq!(ids(&pending), expected);
    let in_flight = ins
        .list(&ListFilter {
            state: StateFilter::InFlight,
            ..ListFilter::default()
        })
        .unwrap();
    assert_eq!(ids(&in_flight), held);
    for shard in 0..4 {
        let of_shard = ins
            .list(&ListFilter {
                shards: Some(vec![shard]),
                ..ListFilter::default()
            })
            .unwrap();
        let want: BTreeSet<String> = expected
            .iter()
            .chain(&held)
            .filter(|id| ins.shard_of(id) == shard)
            .cloned()
            .collect();
        assert_eq!(ids(&of_shard), want, "shard {shard}");
    }
    let t10 = ins.show("far-10").unwrap().unwrap().info.due_ms();
    let t20 = ins.show("far-20").unwrap().unwrap().info.due_ms();
    let window = ins
        .list(&ListFilter {
            due_after_ms: Some(t10),
            due_before_ms: Some(t20),
            ..ListFilter::default()
        })
        .unwrap();
    let want: BTreeSet<String> = (10..20)
        .filter(|i| i % 6 != 0)
        .map(|i| format!("far-{i}"))
        .collect();
    assert_eq!(ids(&window), want);
    let first7 = ins
        .list(&ListFilter {
            state: StateFilter::Pending,
            limit: Some(7),
            ..ListFilter::default()
        })
        .unwrap();
    let want: Vec<String> = expected_in_order(&far).into_iter().take(7).collect();
    assert_eq!(
        first7.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        want
    );

    // Upcoming: per minute over 2 hours; the 250 far tasks sit 60-65 minutes ahead.
    let up = ins
        .upcoming(Duration::from_secs(60), Duration::from_secs(7200))
        .unwrap();
    assert_eq!(up.counts.len(), 120);
    assert_eq!(up.overdue, 0);
    assert_eq!(up.counts.iter().sum::<u64>(), 250);
    assert!(up.counts[..59].iter().all(|&c| c == 0));

    // Cancelling and delivering show at once.
    assert!(p.cancel("far-1").unwrap());
    assert!(ins.show("far-1").unwrap().is_none());
    assert_eq!(ins.stats().unwrap().pending(), 249);

    stop.stop();
    runner.join().unwrap().unwrap();
    common::check_layout(&s.url(), "ops", 4);
}

/// The far tasks not cancelled, in run-at order.
fn expected_in_order(far: &[String]) -> Vec<String> {
    far.iter()
        .enumerate()
        .filter(|(i, _)| i % 6 != 0)
        .map(|(_, id)| id.clone())
        .collect()
}

#[test]
fn show_returns_hostile_ids_and_binary_payloads_as_stored() {
    let s = common::server();
    let cfg = Config::new(s.url(), "show");
    let mut p = Producer::connect(&cfg).unwrap();
    let hostile = "<script>alert(1)</script>";
    let binary: Vec<u8> = (0..=255u8).chain([0, 0x1b, b'[', b'2', b'J']).collect();
    p.schedule(hostile, RunAt::After(Duration::from_secs(60)), &binary)
        .unwrap();
    let control = "id\u{1b}[31mred\r\n\u{202e}";
    p.schedule(control, RunAt::After(Duration::from_secs(60)), b"")
        .unwrap();
    let big = vec![7u8; PREVIEW_BYTES * 3];
    let every = Recurrence::Every(Duration::from_secs(90));
    p.schedule_recurring("big", RunAt::After(Duration::from_secs(60)), &every, &big)
        .unwrap();

    let mut ins = Inspector::connect(&cfg).unwrap();
    let t = ins.show(hostile).unwrap().unwrap();
    assert_eq!(t.info.id, hostile);
    assert_eq!(t.payload_preview, binary);
    assert_eq!(t.info.payload_len, binary.len() as u64);
    assert!(matches!(
        t.info.state,
        TaskState::Pending {
            attempts: 0,
            version: 1,
            ..
        }
    ));
    assert!(t.recurrence.is_none() && !t.info.recurring);
    assert_eq!(ins.show(control).unwrap().unwrap().info.id, control);
    let b = ins.show("big").unwrap().unwrap();
    assert_eq!(b.info.payload_len, big.len() as u64);
    assert_eq!(b.payload_preview.len(), PREVIEW_BYTES);
    assert_eq!(b.recurrence, Some(every));
    assert!(ins.show("nothing-here").unwrap().is_none());
    assert!(matches!(ins.show(""), Err(Error::InvalidId { len: 0 })));
    let listed = ins.list(&ListFilter::default()).unwrap();
    assert_eq!(
        ids(&listed),
        [hostile, control, "big"].map(String::from).into()
    );
}

#[test]
fn a_namespace_that_does_not_exist_or_holds_another_schema_is_refused_and_left_alone() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "absent");
    cfg.connect_timeout = Duration::ZERO;
    let e = Inspector::connect(&cfg).unwrap_err();
    assert!(
        matches!(&e, tickwheel_redis::Error::NoSuchNamespace(ns) if ns == "absent"),
        "{e}"
    );
    let mut con = redis::Client::open(s.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "the inspector created {keys:?}");

    let _: () = redis::cmd("HSET")
        .arg("tw:{old}:meta")
        .arg("schema")
        .arg("1")
        .arg("shards")
        .arg("16")
        .query(&mut con)
        .unwrap();
    let e = Inspector::connect(&Config::new(s.url(), "old")).unwrap_err();
    assert!(
        matches!(&e, Error::IncompatibleNamespace { found, .. } if found.contains("\"1\"")),
        "{e}"
    );
    let _: () = redis::cmd("SET")
        .arg("tw:{str}:meta")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let e = Inspector::connect(&Config::new(s.url(), "str")).unwrap_err();
    assert!(
        matches!(&e, Error::IncompatibleNamespace { found, .. } if found.contains("string")),
        "{e}"
    );

    // Unreachable: an error, not a hang past the connect timeout.
    let mut cfg = Config::new("redis://127.0.0.1:1/", "x");
    cfg.connect_timeout = Duration::from_millis(200);
    let t = Instant::now();
    assert!(matches!(Inspector::connect(&cfg), Err(Error::Redis(_))));
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// Pages of at most MAX_STEP entries a call: a scan over buckets far larger than a step, and
/// buckets emptied and refilled between pages, neither skips nor repeats a task that stays.
#[test]
fn a_scan_in_pages_neither_skips_nor_repeats() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "pages", 3);
    let mut p = Producer::connect(&cfg).unwrap();
    let t0 = time.now_ms() + 60_000;
    let names: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
    // 4500 tasks in one second (about 1500 per shard: a page resumes inside a bucket), 500
    // in the next.
    let tasks: Vec<Task> = names
        .iter()
        .enumerate()
        .map(|(i, id)| Task::new(id, RunAt::AtMillis(t0 + u64::from(i >= 4500) * 1000), b"p"))
        .collect();
    p.schedule_many(tasks).unwrap();

    let mut ins = Inspector::connect(&cfg).unwrap();
    let mut scan = ins
        .scan(ListFilter {
            state: StateFilter::Pending,
            ..ListFilter::default()
        })
        .unwrap();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut pages = 0;
    let mut last_second = 0;
    let mut before_refill = 0;
    while let Some(page) = scan.next_page().unwrap() {
        pages += 1;
        assert!(pages < 100, "the scan does not advance");
        for t in &page {
            *seen.entry(t.id.clone()).or_default() += 1;
            assert!(t.due_ms() / 1000 >= last_second, "out of order: {}", t.id);
            last_second = t.due_ms() / 1000;
        }
        if pages == 1 {
            // Between two pages, the first second's bucket is emptied (its list deleted)
            // and filled again: the scan, inside that bucket, must read the new list from
            // its start.
            before_refill = seen.len();
            assert!(before_refill < 4500);
            let mut p2 = Producer::connect(&cfg).unwrap();
            p2.cancel_many(&names[..4500]).unwrap();
            let back: Vec<String> = (0..30).map(|i| format!("back-{i}")).collect();
            p2.schedule_many(
                back.iter()
                    .map(|id| Task::new(id, RunAt::AtMillis(t0), b"")),
            )
            .unwrap();
        }
    }
    // Each call reads at most MAX_STEP entries: at least two rounds for 1500 in a shard.
    assert!(pages >= 2 && 1500 > MAX_STEP, "{pages} pages");
    assert!(seen.values().all(|&n| n == 1), "a task listed twice");
    for id in names[4500..]
        .iter()
        .chain(&(0..30).map(|i| format!("back-{i}")).collect::<Vec<_>>())
    {
        assert!(seen.contains_key(id), "{id} skipped");
    }
    // Of the cancelled tasks, only those the first round of calls had read (at most
    // MAX_STEP a shard) are listed.
    let first_second = names[..4500]
        .iter()
        .filter(|id| seen.contains_key(*id))
        .count();
    assert!(
        (before_refill..=3 * MAX_STEP).contains(&first_second),
        "{first_second} cancelled tasks listed"
    );
}

/// On a 3-node Redis Cluster (shards spread over the nodes, the server clock read by `TIME`
/// on some node): the same counts, listings, task and slots.
#[test]
fn the_inspector_reads_a_redis_cluster() {
    let c = match tickwheel_redis::server::RedisCluster::start(3) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster test: {e}"),
    };
    let mut cfg = Config::cluster(&c.seeds(), "ops");
    cfg.shards = 12;
    let mut p = Producer::connect(&cfg).unwrap();
    let names: Vec<String> = (0..600).map(|i| format!("c-{i}")).collect();
    p.schedule_many(
        names
            .iter()
            .map(|id| Task::new(id, RunAt::After(Duration::from_secs(600)), b"c")),
    )
    .unwrap();
    let mut ins = Inspector::connect(&cfg).unwrap();
    let st = ins.stats().unwrap();
    assert_eq!(
        (st.shards.len(), st.pending(), st.in_flight()),
        (12, 600, 0)
    );
    assert_eq!(st.unowned(), 12);
    let all = ins.list(&ListFilter::default()).unwrap();
    assert_eq!(ids(&all), names.iter().cloned().collect());
    let t = ins.show("c-7").unwrap().unwrap();
    assert_eq!(t.payload_preview, b"c");
    let up = ins
        .upcoming(Duration::from_secs(60), Duration::from_secs(3600))
        .unwrap();
    assert_eq!(up.counts.iter().sum::<u64>(), 600);
    assert_eq!(up.counts[9] + up.counts[10], 600);
}

/// The `AsyncInspector`: its calls run on its own thread (from any clone) and read what a
/// plain `Inspector` reads; `connect` answers the `Inspector`'s errors. (The order of calls
/// and the rest of the machinery, shared with the `AsyncProducer`, are tested in
/// tests/producer.rs.)
#[test]
fn an_async_inspector_reads_on_its_thread_in_order() {
    use tickwheel_redis::AsyncInspector;
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    let s = common::server();
    let cfg = Config::new(s.url(), "async-ops");
    let mut p = Producer::connect(&cfg).unwrap();
    for i in 0..5 {
        p.schedule(
            &format!("t-{i}"),
            RunAt::After(Duration::from_secs(600)),
            b"x",
        )
        .unwrap();
    }
    let connecting = AsyncInspector::connect(&cfg);
    let ins = common::block_on(connecting).unwrap();
    send_and_sync(&ins);
    let ran_on = common::block_on(ins.call(|_| std::thread::current().name().map(str::to_owned)));
    assert_eq!(ran_on.as_deref(), Some("tickwheel-redis-inspector"));
    // From a clone and from the first, around a write; the later calls awaited last first.
    let other = ins.clone();
    let pending = |i: &mut Inspector| i.stats().map(|st| st.pending());
    assert_eq!(common::block_on(other.call(pending)).unwrap(), 5);
    p.cancel("t-0").unwrap();
    let after = ins.call(pending);
    let shown = other.call(|i| i.show("t-1"));
    assert!(common::block_on(shown).unwrap().is_some());
    assert_eq!(common::block_on(after).unwrap(), 4);
    let mut plain = Inspector::connect(&cfg).unwrap();
    assert_eq!(plain.stats().unwrap().pending(), 4);

    let refused = common::block_on(AsyncInspector::connect(&Config::new("http://h/", "ops")));
    assert!(
        matches!(refused, Err(Error::InvalidUrl { .. })),
        "{refused:?}"
    );
}
