//! The run loop on the Redis server's clock: notifications, refills and a Redis restart.

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwheel_redis::{Config, Outcome, Producer, RunAt, Worker};

/// (id, due, attempt, local ms at delivery)
type Seen = (String, u64, u32, u64);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs a worker in a thread; deliveries come back as (id, due, attempt, local ms at delivery).
fn spawn_worker(
    cfg: &Config,
) -> (
    tickwheel_redis::StopHandle,
    mpsc::Receiver<Seen>,
    std::thread::JoinHandle<()>,
) {
    let mut w = Worker::connect(cfg).unwrap();
    let stop = w.stop_handle();
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        w.run(|d| {
            let _ = tx.send((d.id.clone(), d.due_ms, d.attempt, now_ms()));
            Outcome::Ack
        })
        .unwrap();
    });
    (stop, rx, h)
}

fn collect(rx: &mpsc::Receiver<Seen>, n: usize, limit: Duration) -> Vec<Seen> {
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(d) => got.push(d),
            Err(_) => break,
        }
    }
    got
}

#[test]
fn new_tasks_inside_the_window_and_beyond_it_are_delivered_on_time() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "rt");
    cfg.shards = 4;
    cfg.window = Duration::from_millis(800);
    cfg.claim_ahead = cfg.window / 2;
    cfg.maintenance_interval = Duration::from_millis(100);
    let mut p = Producer::connect(&cfg).unwrap();
    let (stop, rx, h) = spawn_worker(&cfg);
    std::thread::sleep(Duration::from_millis(300)); // the worker loads its windows
                                                    // Inside the loaded window: reaches the worker by notification. Beyond it: by a refill.
    for i in 0..20u64 {
        p.schedule(
            &format!("in{i}"),
            RunAt::After(Duration::from_millis(100 + i * 10)),
            b"",
        )
        .unwrap();
        p.schedule(
            &format!("out{i}"),
            RunAt::After(Duration::from_millis(1500 + i * 10)),
            b"",
        )
        .unwrap();
    }
    // Further ahead than claim_ahead (400 ms), so no worker can have claimed it yet: inside
    // its last claim_ahead a task may be claimed, and cancel then answers false.
    p.schedule("cancelled", RunAt::After(Duration::from_millis(700)), b"")
        .unwrap();
    assert!(p.cancel("cancelled").unwrap());
    let got = collect(&rx, 40, Duration::from_secs(10));
    stop.stop();
    h.join().unwrap();
    assert_eq!(got.len(), 40, "{got:?}");
    for (id, due, attempt, at) in &got {
        assert!(at >= due, "{id} delivered early: due {due}, at {at}");
        assert_eq!(*attempt, 1);
        assert!(id != "cancelled");
    }
    assert!(p.is_empty().unwrap());
    assert!(rx.try_recv().is_err());
}

#[test]
fn workers_resume_after_a_redis_restart_and_lose_nothing() {
    let mut s = common::server();
    let mut cfg = Config::new(s.url(), "restart");
    cfg.shards = 4;
    cfg.visibility_timeout = Duration::from_secs(1);
    let mut p = Producer::connect(&cfg).unwrap();
    let (stop, rx, h) = spawn_worker(&cfg);
    for i in 0..200u64 {
        p.schedule(
            &format!("t{i}"),
            RunAt::After(Duration::from_millis(i * 10)),
            b"x",
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(700));
    s.restart().unwrap();
    let got = collect(&rx, 200, Duration::from_secs(15));
    let mut more = collect(&rx, usize::MAX, Duration::from_millis(1500));
    stop.stop();
    h.join().unwrap();
    // The producer's connection broke with the restart: that call fails, the next reconnects.
    let _ = p.len();
    let mut all = got;
    all.append(&mut more);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (id, due, _, at) in &all {
        assert!(at >= due, "{id} delivered early");
        *seen.entry(id.clone()).or_default() += 1;
    }
    assert_eq!(seen.len(), 200, "every task delivered");
    let dups = all.len() - seen.len();
    eprintln!("redis restart: 200 tasks, {dups} duplicate deliveries (in flight at the restart)");
    assert!(p.is_empty().unwrap());
}
