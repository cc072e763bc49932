//! The metrics endpoint against a running worker and a real redis-server: counts that match
//! the deliveries, one lease gauge per shard, the lateness histogram, a 404 elsewhere, and
//! `shards_held` counting only the leases the worker can still be sure of.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tickwheel_redis::{metrics, Config, Outcome, Producer, RunAt, Worker};

/// One HTTP GET; returns the status line and the body.
fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample line that starts with `prefix ` (a name and its labels).
fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(prefix)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn the_endpoint_serves_what_the_worker_did() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "metrics");
    cfg.shards = 4;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let server = metrics::serve("127.0.0.1:0", w.status()).unwrap();
    let addr = server.local_addr();
    let stop = w.stop_handle();
    let runner = std::thread::spawn(move || w.run(|_| Outcome::Ack));
    for i in 0..25 {
        p.schedule(
            &format!("m{i}"),
            RunAt::After(Duration::from_millis(30)),
            b"",
        )
        .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(5);
    let body = loop {
        let (status, body) = get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        if sample(&body, "tickwheel_redis_acks_total") == Some(25.0) || Instant::now() > until {
            break body;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        sample(&body, "tickwheel_redis_deliveries_total"),
        Some(25.0),
        "{body}"
    );
    assert_eq!(sample(&body, "tickwheel_redis_acks_total"), Some(25.0));
    assert_eq!(
        sample(
            &body,
            "tickwheel_redis_redeliveries_total{cause=\"visibility_timeout\"}"
        ),
        Some(0.0)
    );
    for cause in ["lost_claim_reply", "requeued"] {
        let name = format!("tickwheel_redis_redeliveries_total{{cause=\"{cause}\"}}");
        assert_eq!(sample(&body, &name), Some(0.0), "{cause}");
    }
    let lateness = |series: &str| {
        let name = format!("tickwheel_redis_delivery_lateness_seconds_{series}");
        sample(&body, &name)
    };
    assert_eq!(lateness("count{delivery=\"first\"}"), Some(25.0), "{body}");
    assert_eq!(
        lateness("bucket{le=\"+Inf\",delivery=\"first\"}"),
        Some(25.0),
        "{body}"
    );
    // The buckets reach an hour: 30 s and 1 h late are told apart.
    assert_eq!(
        lateness("bucket{le=\"3600.0\",delivery=\"first\"}"),
        Some(25.0),
        "{body}"
    );
    assert!(lateness("bucket{le=\"30.0\",delivery=\"first\"}").is_some());
    assert_eq!(lateness("count{delivery=\"redelivery\"}"), Some(0.0));
    assert_eq!(sample(&body, "tickwheel_redis_shards_held"), Some(4.0));
    assert_eq!(sample(&body, "tickwheel_redis_claims_in_hand"), Some(0.0));
    assert_eq!(sample(&body, "tickwheel_redis_connected"), Some(1.0));
    for shard in 0..4 {
        let lease = sample(
            &body,
            &format!("tickwheel_redis_shard_lease_remaining_seconds{{shard=\"{shard}\"}}"),
        );
        assert!(
            lease.is_some_and(|s| s > 0.0 && s <= 5.0),
            "shard {shard}: {lease:?}"
        );
    }
    assert!(body.contains("# TYPE tickwheel_redis_delivery_lateness_seconds histogram"));
    assert!(body.trim_end().ends_with("# EOF"));
    assert_eq!(get(addr, "/").0, "HTTP/1.1 404 Not Found");
    stop.stop();
    runner.join().unwrap().unwrap();
}

/// Redis goes away and every lease runs out by the worker's own reckoning (lease 900 ms):
/// `shards_held` falls to 0 (it counted 4 throughout the outage before), the per-shard lease
/// gauges read 0, and the snapshot still names the 4 shards (the worker has not been told it
/// lost them; it renews them once Redis is back). Back up, `shards_held` is 4 again.
#[test]
fn shards_held_counts_only_leases_still_sure() {
    let mut s = common::server();
    let mut cfg = Config::new(s.url(), "held");
    cfg.shards = 4;
    cfg.lease = Duration::from_millis(900);
    cfg.maintenance_interval = Duration::from_millis(300);
    let mut w = Worker::connect(&cfg).unwrap();
    let status = w.status();
    let server = metrics::serve("127.0.0.1:0", w.status()).unwrap();
    let addr = server.local_addr();
    let stop = w.stop_handle();
    let runner = std::thread::spawn(move || w.run(|_| Outcome::Ack));
    let held = || sample(&get(addr, "/metrics").1, "tickwheel_redis_shards_held");
    assert!(
        common::eventually(Duration::from_secs(3), || held() == Some(4.0)),
        "{:?}",
        held()
    );
    s.kill();
    // The last renewal was at most 300 ms before the kill; 900 ms less a twentieth later the
    // worker can no longer be sure of any lease.
    assert!(
        common::eventually(Duration::from_secs(3), || held() == Some(0.0)),
        "shards_held during the outage: {:?}",
        held()
    );
    let body = get(addr, "/metrics").1;
    assert_eq!(sample(&body, "tickwheel_redis_connected"), Some(0.0));
    for shard in 0..4 {
        let name = format!("tickwheel_redis_shard_lease_remaining_seconds{{shard=\"{shard}\"}}");
        assert_eq!(sample(&body, &name), Some(0.0), "shard {shard}");
    }
    let snap = status.snapshot();
    assert_eq!(snap.shards.len(), 4, "still held, in doubt: {snap:?}");
    assert_eq!(snap.shards_held(), 0);
    s.restart().unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || held() == Some(4.0)),
        "after Redis is back: {:?}",
        held()
    );
    stop.stop();
    runner.join().unwrap().unwrap();
}

/// Failures and pauses as the scrape shows them: failed attempts, the failed set by reason,
/// and the paused shards among those held.
#[test]
fn failures_and_pauses_are_exported() {
    let mut snap = tickwheel_redis::WorkerSnapshot::default();
    snap.stats.failed_attempts = 7;
    snap.stats.failed.exhausted = 2;
    snap.stats.failed.non_retryable = 1;
    for (shard, paused) in [(0, true), (1, false), (2, true)] {
        snap.shards.push(tickwheel_redis::ShardStatus {
            shard,
            epoch: 1,
            lease_left: Duration::from_secs(1),
            loaded_until_ms: None,
            paused,
        });
    }
    let body = metrics::encode(&snap);
    assert_eq!(
        sample(&body, "tickwheel_redis_failed_attempts_total"),
        Some(7.0)
    );
    assert_eq!(
        sample(&body, "tickwheel_redis_failed_total{reason=\"exhausted\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &body,
            "tickwheel_redis_failed_total{reason=\"non_retryable\"}"
        ),
        Some(1.0)
    );
    assert_eq!(sample(&body, "tickwheel_redis_shards_paused"), Some(2.0));
}
