//! Pause and resume under load, in real time against a real redis-server: two workers in
//! `run`, tasks due every few milliseconds across the pause. While the namespace is paused
//! no handler runs; after resume every task due meanwhile is delivered, in run-at order per
//! shard, none lost and none twice.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwheel_redis::{Config, Delivery, Outcome, Producer, RunAt, Task, Worker};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// (shard, due, id, delivered at) of every delivery.
type Log = Arc<Mutex<Vec<(u32, u64, String, u64)>>>;

#[test]
fn while_paused_no_handler_runs_and_on_resume_everything_due_comes_in_order() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "pause-load");
    cfg.shards = 8;
    cfg.claim_ahead = Duration::from_millis(200);
    let mut p = Producer::connect(&cfg).unwrap();
    let log: Log = Arc::default();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let mut w = Worker::connect(&cfg).unwrap();
            let (stop, log) = (w.stop_handle(), log.clone());
            let h = std::thread::spawn(move || {
                w.run(move |d: &Delivery| {
                    let at = now_ms();
                    log.lock()
                        .unwrap()
                        .push((d.shard, d.due_ms, d.id.clone(), at));
                    Outcome::Ack
                })
            });
            (stop, h)
        })
        .collect();
    // 3000 tasks, one every millisecond from 0.5 s to 3.5 s from now.
    let start = now_ms() + 500;
    let ids: Vec<String> = (0..3000).map(|i| format!("t{i}")).collect();
    let tasks = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Task::new(id, RunAt::AtMillis(start + i as u64), b""));
    p.schedule_many(tasks).unwrap();
    // Paused from 1.5 s to 4.5 s after `start`.
    std::thread::sleep(Duration::from_millis(
        (start + 1_000).saturating_sub(now_ms()),
    ));
    p.pause().unwrap();
    let paused_at = now_ms();
    std::thread::sleep(Duration::from_millis(3_000));
    let resumed_at = now_ms();
    p.resume().unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while p.len().unwrap() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (stop, h) in workers {
        stop.stop();
        h.join().unwrap().unwrap();
    }
    let log = log.lock().unwrap();
    // A handler call under way when the pause landed may finish just after; the workers hear
    // of it within a notification (milliseconds): none may start 100 ms into the pause.
    let during: Vec<_> = log
        .iter()
        .filter(|d| d.3 > paused_at + 100 && d.3 < resumed_at)
        .collect();
    assert!(
        during.is_empty(),
        "{} delivered while paused: {:?}",
        during.len(),
        &during[..during.len().min(5)]
    );
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for d in log.iter() {
        *by_id.entry(d.2.as_str()).or_default() += 1;
    }
    assert_eq!(by_id.len(), 3000, "none lost");
    assert!(by_id.values().all(|&n| n == 1), "none twice");
    // After the resume, each shard's deliveries come in run-at order.
    let mut per_shard: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for d in log.iter().filter(|d| d.3 >= resumed_at) {
        per_shard.entry(d.0).or_default().push(d.1);
    }
    let after: usize = per_shard.values().map(Vec::len).sum();
    assert!(after > 1500, "{after} delivered after the resume");
    for (shard, dues) in &per_shard {
        assert!(
            dues.windows(2).all(|w| w[0] <= w[1]),
            "shard {shard} out of run-at order"
        );
    }
    eprintln!(
        "{} before the pause, {after} after the resume, the last {} ms after it",
        log.len() - after,
        log.iter().map(|d| d.3).max().unwrap() - resumed_at
    );
}
