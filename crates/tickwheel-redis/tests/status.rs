//! A worker's status handle and events, read from another thread while `run` runs, against a
//! real redis-server: shards taken, given up to a second worker, a Redis restart seen as
//! disconnected and reconnected, and counters that match the deliveries.

mod common;

use std::sync::mpsc::Receiver;
use std::time::Duration;

use tickwheel_redis::{
    Config, Outcome, Producer, RunAt, ShardLoss, Worker, WorkerEvent, WorkerSnapshot,
};

use common::eventually;

fn drain(rx: &Receiver<WorkerEvent>) -> Vec<WorkerEvent> {
    rx.try_iter().collect()
}

#[test]
fn status_and_events_follow_a_running_worker() {
    let mut s = common::server();
    let mut cfg = Config::new(s.url(), "status");
    cfg.shards = 4;
    cfg.lease = Duration::from_millis(900);
    cfg.maintenance_interval = Duration::from_millis(300);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut a = Worker::connect(&cfg).unwrap();
    let status = a.status();
    let events = status.events();
    let stop = a.stop_handle();
    let runner = std::thread::spawn(move || a.run(|_| Outcome::Ack));

    let snap = |s: &WorkerSnapshot| s.shards.iter().map(|x| x.shard).collect::<Vec<_>>();
    assert!(eventually(Duration::from_secs(3), || snap(
        &status.snapshot()
    )
    .len()
        == 4));
    let acquired: Vec<u32> = drain(&events)
        .into_iter()
        .filter_map(|e| match e {
            WorkerEvent::ShardAcquired { shard, .. } => Some(shard),
            _ => None,
        })
        .collect();
    assert_eq!(acquired.len(), 4, "one event per shard taken");
    let first = status.snapshot();
    assert!(first.connected && first.id.contains('-'));
    assert!(first
        .shards
        .iter()
        .all(|s| s.epoch > 0 && s.lease_left > Duration::ZERO));

    for i in 0..40 {
        p.schedule(
            &format!("t{i}"),
            RunAt::After(Duration::from_millis(50)),
            b"",
        )
        .unwrap();
    }
    assert!(eventually(Duration::from_secs(3), || status
        .snapshot()
        .stats
        .acked
        == 40));
    let stats = status.snapshot().stats;
    assert_eq!(
        (stats.delivered, stats.claimed, stats.redelivered),
        (40, 40, 0)
    );
    assert_eq!(
        stats.lateness.count(),
        40,
        "every delivery's lateness recorded"
    );
    assert!(
        stats.lateness.quantile_ms(0.5).is_some_and(|ms| ms <= 100),
        "{:?}",
        stats.lateness
    );

    // A second worker: the first gives up half of the shards to it.
    let b = Worker::connect(&cfg).unwrap();
    let (bstop, bh) = (b.stop_handle(), {
        let mut b = b;
        std::thread::spawn(move || b.run(|_| Outcome::Ack))
    });
    assert!(eventually(Duration::from_secs(5), || snap(
        &status.snapshot()
    )
    .len()
        == 2));
    let released = drain(&events)
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                WorkerEvent::ShardLost {
                    cause: ShardLoss::Released,
                    ..
                }
            )
        })
        .count();
    assert_eq!(released, 2, "two shards released to rebalance");

    // Redis restarts: the worker says so, and says when it is back.
    s.restart().unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        let e = drain(&events);
        e.iter().any(|e| matches!(e, WorkerEvent::Reconnected))
    }));
    assert!(status.snapshot().stats.redis_errors > 0);
    assert!(eventually(Duration::from_secs(2), || status
        .snapshot()
        .connected));

    bstop.stop();
    bh.join().unwrap().unwrap();
    stop.stop();
    runner.join().unwrap().unwrap();
}
