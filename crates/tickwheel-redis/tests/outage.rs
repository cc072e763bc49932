//! A Redis outage with a real redis-server (SIGKILL, then a restart on its append-only file)
//! while a worker runs in real time: the tasks it claimed before the outage are delivered
//! during it, and their acknowledgements, held while Redis is away, are sent once it answers
//! again. So each task is delivered once, not again after the outage.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::thread::JoinHandle;

use tickwheel_redis::{
    Config, Delivery, Error, ManualTime, Outcome, Producer, RunAt, StopHandle, Task, TimeSource,
    Worker, WorkerStatus,
};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Each id's delivered attempts, in order.
type Seen = Arc<Mutex<BTreeMap<String, Vec<u32>>>>;

/// A worker running on its own thread, recording every delivery in `seen` and acknowledging
/// it; its stop handle, its status and its thread.
fn spawn_recording(
    cfg: &Config,
    seen: &Seen,
) -> (StopHandle, WorkerStatus, JoinHandle<Result<(), Error>>) {
    let mut w = Worker::connect(cfg).unwrap();
    let (stop, status, mut record) = (w.stop_handle(), w.status(), recorder(seen));
    let h = std::thread::spawn(move || w.run(move |d: &Delivery| record(d)));
    (stop, status, h)
}

/// A handler that records every delivery's attempt in `seen` and acknowledges it.
fn recorder(seen: &Seen) -> impl FnMut(&Delivery) -> Outcome + Send + 'static {
    let log = seen.clone();
    move |d: &Delivery| {
        log.lock()
            .unwrap()
            .entry(d.id.clone())
            .or_default()
            .push(d.attempt);
        Outcome::Ack
    }
}

/// 200 tasks due `start`..`start + 200` ms.
fn schedule_200(producer: &mut Producer, start: u64) {
    let ids: Vec<String> = (0..200).map(|i| format!("task-{i}")).collect();
    producer
        .schedule_many(
            ids.iter()
                .enumerate()
                .map(|(i, id)| Task::new(id, RunAt::AtMillis(start + i as u64), b"")),
        )
        .unwrap();
}

#[test]
fn acknowledgements_held_during_an_outage_are_sent_after_it() {
    let mut server = common::server();
    let mut cfg = Config::new(server.url(), "outage");
    cfg.shards = 4;
    cfg.visibility_timeout = Duration::from_secs(3); // a lost ack would show within the test
    cfg.io_timeout = Duration::from_millis(500);
    let mut producer = Producer::connect(&cfg).unwrap();
    let seen: Seen = Arc::default();
    let (stop, _, runner) = spawn_recording(&cfg, &seen);
    std::thread::sleep(Duration::from_millis(300)); // shards taken

    // 200 tasks due 1.5-1.7 s from now: claimed (1 s ahead) before the outage begins at
    // 1.3 s, delivered during it.
    let start = now_ms() + 1_500;
    schedule_200(&mut producer, start);
    std::thread::sleep(Duration::from_millis(start - 200 - now_ms()));
    server.kill();
    std::thread::sleep(Duration::from_millis(start + 800 - now_ms()));
    let during = seen.lock().unwrap().len();
    server.restart().unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while producer.len().map_or(true, |n| n > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Past the visibility timeout: an unacknowledged task would be delivered again by now.
    std::thread::sleep(cfg.visibility_timeout + Duration::from_secs(1));
    stop.stop();
    runner.join().unwrap().unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(during, 200, "every task was delivered during the outage");
    let twice: Vec<_> = seen.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "delivered again after the outage: {twice:?}"
    );
    assert_eq!(seen.len(), 200);
    assert_eq!(producer.len().unwrap(), 0, "every task acknowledged");
}

/// An outage longer than the lease: Redis's clock runs on while it is down, so every lease
/// has expired when it is back. Each shard must stay with its owner, which renews it and
/// sends the acknowledgements it held; a worker that took another's shard first would fence
/// them, and each task delivered during the outage would be delivered again.
#[test]
fn an_outage_longer_than_the_lease_moves_no_shard_and_doubles_no_delivery() {
    let mut server = common::server();
    let mut cfg = Config::new(server.url(), "long-outage");
    cfg.shards = 8;
    cfg.lease = Duration::from_millis(900);
    cfg.maintenance_interval = Duration::from_millis(300);
    cfg.visibility_timeout = Duration::from_secs(4);
    cfg.io_timeout = Duration::from_millis(500);
    let mut producer = Producer::connect(&cfg).unwrap();
    let seen: Seen = Arc::default();
    let workers: Vec<_> = (0..2).map(|_| spawn_recording(&cfg, &seen)).collect();
    // Both workers hold their fair share.
    let until = Instant::now() + Duration::from_secs(5);
    while workers.iter().any(|w| w.1.snapshot().shards.len() != 4) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Tasks due 0.9-1.1 s from now: claimed before the outage, delivered while the workers
    // still trust their leases, early in the outage.
    let start = now_ms() + 900;
    schedule_200(&mut producer, start);
    std::thread::sleep(Duration::from_millis(start - 150 - now_ms()));
    server.kill();
    // Down for twice the lease.
    std::thread::sleep(Duration::from_millis(1_800));
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while producer.len().map_or(true, |n| n > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(cfg.visibility_timeout + Duration::from_secs(1));
    for (stop, _, h) in workers {
        stop.stop();
        h.join().unwrap().unwrap();
    }
    let seen = seen.lock().unwrap();
    let twice: Vec<_> = seen.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "{} delivered twice: {twice:?}",
        twice.len()
    );
    assert_eq!(seen.len(), 200);
    assert_eq!(producer.len().unwrap(), 0, "every task acknowledged");
}

/// Faults that stack: a shard orphaned by a dead worker, then a Redis restart before its
/// lease ran out. The live worker must not wait a whole lease after the restart to take the
/// orphan (it used to: no acquisition in the first lease after a Redis error); it waits a
/// grace of three maintenance intervals, in which every live owner renews, and then takes the
/// shard as soon as the dead worker's lease has run out.
#[test]
fn an_orphaned_shard_is_taken_a_grace_after_a_restart_not_a_lease() {
    let mut server = common::server();
    let mut cfg = Config::new(server.url(), "orphan");
    cfg.shards = 4;
    cfg.lease = Duration::from_secs(5);
    cfg.maintenance_interval = Duration::from_millis(200);
    cfg.io_timeout = Duration::from_millis(500);
    let mut producer = Producer::connect(&cfg).unwrap();
    // A worker that died holding shards 2 and 3: its lease runs 2 s more, by Redis's clock.
    let mut con = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let ghost_until = s * 1000 + us / 1000 + 2_000;
    for shard in [2, 3] {
        let _: () = redis::cmd("HSET")
            .arg(format!("tw:{{orphan:{shard}}}:state"))
            .arg(&["owner", "dead-worker", "epoch", "1", "expires"][..])
            .arg(ghost_until)
            .query(&mut con)
            .unwrap();
    }
    let t0 = Instant::now();
    let seen: Seen = Arc::default();
    let (stop, status, h) = spawn_recording(&cfg, &seen);
    let until = Instant::now() + Duration::from_secs(5);
    while status.snapshot().shards.len() != 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        status.snapshot().shards.len(),
        2,
        "the live worker holds 0 and 1"
    );
    // A task in every shard, due 1 s from the start.
    let due = now_ms() + 1_000 - t0.elapsed().as_millis() as u64;
    for i in 0..40 {
        producer
            .schedule(&format!("o{i}"), RunAt::AtMillis(due), b"")
            .unwrap();
    }
    // Redis down 300-800 ms after the start, while the dead worker's lease still runs.
    std::thread::sleep(Duration::from_millis(300).saturating_sub(t0.elapsed()));
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    server.restart().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while status.snapshot().shards.len() != 4 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let taken = t0.elapsed();
    // The orphan's lease ends about 2 s after the start; a lease after the restart would be
    // about 5.8 s.
    assert!(
        taken < Duration::from_millis(3_800),
        "the orphaned shards were taken {taken:?} after the start"
    );
    while producer.len().map_or(true, |n| n > 0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let delivered = t0.elapsed();
    stop.stop();
    h.join().unwrap().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 40, "every task delivered");
    assert!(
        delivered < Duration::from_millis(4_500),
        "the last task was delivered {delivered:?} after the start"
    );
    eprintln!("orphans taken after {taken:?}, every task delivered after {delivered:?}");
}

/// A namespace of 4 shards on a manual clock with a 2 s lease and a 500 ms maintenance
/// interval (a grace of 1.5 s), and its clock.
fn on_manual_time(server: &tickwheel_redis::server::RedisServer, ns: &str) -> (ManualTime, Config) {
    let time = ManualTime::new(1_000_000);
    let mut cfg = Config::new(server.url(), ns);
    cfg.shards = 4;
    cfg.time = TimeSource::Manual(time.clone());
    cfg.lease = Duration::from_secs(2);
    cfg.maintenance_interval = Duration::from_millis(500);
    (time, cfg)
}

/// A worker that joins as Redis comes back from an outage longer than the lease (a worker
/// started, or restarted after a crash, while Redis was down: its connection waited for
/// Redis) finds every lease expired by Redis's clock, their owners alive and about to renew.
/// It cannot tell that from an orphan, so it leaves a shard with an owner to that owner for
/// the grace a worker back from an outage waits (three maintenance intervals): taking it
/// would fence the owner's held acknowledgements, and every task it delivered during the
/// outage would be delivered again. A shard still unrenewed after the grace is an orphan,
/// and is taken. Manual clock: the joiner's steps come first, deterministically.
#[test]
fn a_worker_joining_as_redis_comes_back_leaves_owned_shards_to_their_owners_for_a_grace() {
    let mut server = common::server();
    let (time, cfg) = on_manual_time(&server, "joining");
    let ack = &mut |_: &Delivery| Outcome::Ack;
    let mut owner = Worker::connect(&cfg).unwrap();
    owner.tick(ack).unwrap();
    assert_eq!(owner.owned_shards().len(), 4);

    // Redis down for twice the lease; the joiner connects as it comes back.
    server.kill();
    time.advance(Duration::from_secs(4));
    server.restart().unwrap();
    let mut joiner = Worker::connect(&cfg).unwrap();
    for _ in 0..3 {
        joiner.tick(ack).unwrap();
        assert_eq!(
            joiner.owned_shards(),
            Vec::<u32>::new(),
            "the joiner took shards before their owner could renew"
        );
        time.advance(Duration::from_millis(499));
    }
    // The grace (1.5 s) is over and the owner never renewed: orphans, taken.
    time.advance(Duration::from_millis(3));
    joiner.tick(ack).unwrap();
    assert_eq!(joiner.owned_shards(), vec![0, 1, 2, 3]);

    // A shard nobody holds (released) is taken at once, grace or not.
    joiner.shutdown();
    let mut next = Worker::connect(&cfg).unwrap();
    next.tick(ack).unwrap();
    assert_eq!(next.owned_shards(), vec![0, 1, 2, 3]);
    drop(owner);
}

/// A worker driven by `tick` (no `run`) through a Redis restart: the ticks during the outage
/// fail, and once Redis answers the next tick reconnects (it does not keep the broken
/// connection), leaves owned shards to their owners for the grace as `run` does, and
/// delivers what is due, each task once. Manual clock: the grace is deterministic.
#[test]
fn a_worker_driven_by_tick_reconnects_after_an_outage_and_waits_the_grace() {
    let mut server = common::server();
    let (time, mut cfg) = on_manual_time(&server, "ticking");
    cfg.connect_timeout = Duration::ZERO;
    let seen: Seen = Arc::default();
    let mut record = recorder(&seen);
    let ack = &mut |d: &Delivery| record(d);
    // Two workers share the shards; `a` is driven through the outage, `b` sits it out and
    // renews right after it.
    let mut a = Worker::connect(&cfg).unwrap();
    a.tick(ack).unwrap();
    let mut b = Worker::connect(&cfg).unwrap();
    let quiet = &mut |_: &Delivery| Outcome::Ack;
    for _ in 0..6 {
        time.advance(Duration::from_millis(500));
        b.tick(quiet).unwrap();
        a.tick(ack).unwrap();
    }
    let (held_a, held_b) = (a.owned_shards(), b.owned_shards());
    assert_eq!(held_a.len(), 2, "a holds {held_a:?}, b {held_b:?}");

    server.kill();
    // A tick with nothing to send touches no connection; a maintenance step does.
    time.advance(Duration::from_millis(500));
    assert!(
        a.tick(ack).is_err(),
        "a maintenance step with Redis down succeeded"
    );
    time.advance(Duration::from_secs(3)); // past the lease: every lease has run out
    assert!(a.tick(ack).is_err());
    server.restart().unwrap();

    // The first tick after the outage answers: the connection is opened again.
    a.tick(ack).expect("a tick after Redis came back");
    // Within the grace `a` takes none of `b`'s shards, though their leases ran out.
    for _ in 0..2 {
        time.advance(Duration::from_millis(500));
        a.tick(ack).unwrap();
        for s in &held_b {
            assert!(
                !a.owned_shards().contains(s),
                "a took b's shard {s} within the grace"
            );
        }
    }
    // And it delivers: a task on every shard, due now, each delivered once.
    let mut producer = Producer::connect(&cfg).unwrap();
    let now = time.now_ms();
    let ids: Vec<String> = (0..40).map(|i| format!("after-{i}")).collect();
    producer
        .schedule_many(
            ids.iter()
                .map(|id| Task::new(id, RunAt::AtMillis(now), b"")),
        )
        .unwrap();
    b.shutdown();
    // The notification subscription reconnects on its own thread, in real time: until it
    // is back the windows wait (a window read without it could miss a notice).
    let until = Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < ids.len() && Instant::now() < until {
        time.advance(Duration::from_millis(100));
        a.tick(ack).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = seen.lock().unwrap();
    for id in &ids {
        assert_eq!(
            seen.get(id).map(Vec::len),
            Some(1),
            "{id}: {:?}",
            seen.get(id)
        );
    }
}
