//! The metrics endpoint against a running worker and a real redis-server: counts that match
//! the deliveries, one lease gauge per shard, the lateness histogram, a 404 elsewhere.

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
    assert_eq!(
        sample(&body, "tickwheel_redis_delivery_lateness_seconds_count"),
        Some(25.0)
    );
    assert_eq!(
        sample(
            &body,
            "tickwheel_redis_delivery_lateness_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(25.0)
    );
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
