//! The worker's counters: the lateness histograms and redeliveries by cause.

use std::time::Duration;

use super::{manual_rig, T0};
use crate::namespace::{Config, TimeSource};
use crate::worker::{Lateness, Outcome, Worker};

/// The lateness histogram's table: which bucket a lateness lands in, and the quantiles.
#[test]
fn lateness_histogram_table() {
    let mut h = Lateness::default();
    assert_eq!(h.quantile_ms(0.5), None, "empty");
    // (lateness ms, bucket index: the first bound at or above it)
    for (ms, bucket) in [
        (0, 0),
        (1, 1),
        (3, 3),
        (5, 3),
        (6, 4),
        (10_000, 13),
        (10_001, 14),
        (3_600_000, 18),
        (3_600_001, 19),
    ] {
        let before = h.counts[bucket];
        h.record(ms);
        assert_eq!(h.counts[bucket], before + 1, "{ms} ms");
    }
    assert_eq!(h.count(), 9);
    assert_eq!(h.sum_ms, 7_220_017);
    assert_eq!(h.quantile_ms(0.0), Some(0));
    assert_eq!(h.quantile_ms(0.5), Some(10), "5th of 9: 6 ms");
    assert_eq!(h.quantile_ms(0.7), Some(30_000), "7th of 9: 10 001 ms");
    assert_eq!(h.quantile_ms(1.0), None, "past the last bound");
}

/// Each redelivery is counted under its cause: a delivery left unacknowledged past its
/// visibility deadline, and a retry the handler asked for.
#[test]
fn redeliveries_are_counted_by_cause() {
    let server = crate::server::RedisServer::start()
        .unwrap_or_else(|e| panic!("cannot run the Redis tests: {e}"));
    let t0 = 1_000_000;
    let time = crate::ManualTime::new(t0);
    let mut cfg = Config::new(server.url(), "causes");
    cfg.shards = 1;
    cfg.time = TimeSource::Manual(time.clone());
    cfg.claim_ahead = Duration::ZERO;
    cfg.visibility_timeout = Duration::from_secs(1);
    let mut p = crate::Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    p.schedule("a", crate::RunAt::AtMillis(t0 + 100), b"")
        .unwrap();
    // (time after t0, outcome, expected attempt delivered, expected (visibility, requeued))
    let steps = [
        (100, Outcome::Leave, 1, (0, 0)),
        (
            1_100,
            Outcome::RetryAfter(Duration::from_millis(500)),
            2,
            (1, 0),
        ),
        (1_600, Outcome::Ack, 3, (1, 1)),
    ];
    for (ms, outcome, attempt, (vis, requeued)) in steps {
        time.set_ms(t0 + ms);
        w.reload_windows();
        let mut got = Vec::new();
        w.tick(&mut |d| {
            got.push(d.attempt);
            outcome.clone()
        })
        .unwrap();
        assert_eq!(got, [attempt], "at {ms} ms");
        let by = w.stats().redelivered_by;
        assert_eq!(
            (by.visibility_timeout, by.requeued),
            (vis, requeued),
            "at {ms} ms"
        );
    }
    assert_eq!(w.stats().redelivered, 2);
}

/// Lateness is timed from when a delivery could have been on time, and first deliveries
/// and redeliveries are kept apart. A task stored 1 000 s in the past (as a reschedule into
/// the past does) is delivered the moment its notice arrives: 0 ms late, not 1 000 s. A
/// task whose handler never acknowledges is redelivered after its visibility timeout
/// (30 s): that redelivery lands in `redelivery_lateness`, 0 ms late from the claim that
/// redelivered it, not 30 s from its run-at. Manual clock, so every lateness is exact.
#[test]
fn lateness_is_timed_from_when_a_delivery_could_be_on_time() {
    let (_server, time, _cfg, mut p, mut w) = manual_rig("late", 1);
    let mut got: Vec<(String, u32)> = Vec::new();
    let tick = |w: &mut Worker, got: &mut Vec<(String, u32)>| {
        w.tick(&mut |d| {
            got.push((d.id.clone(), d.attempt));
            if d.id == "poison" {
                Outcome::Leave
            } else {
                Outcome::Ack
            }
        })
        .unwrap()
    };
    tick(&mut w, &mut got); // the shard taken, its window read
    p.schedule("past", crate::RunAt::AtMillis(1), b"").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while got.is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20)); // the notice is on its way
        tick(&mut w, &mut got);
    }
    assert_eq!(got, [("past".to_string(), 1)], "delivered on its notice");
    p.schedule("poison", crate::RunAt::AtMillis(T0 + 100), b"")
        .unwrap();
    for ms in [100, 30_100] {
        time.set_ms(T0 + ms);
        w.reload_windows();
        tick(&mut w, &mut got);
    }
    assert_eq!(
        got[1..],
        [("poison".to_string(), 1), ("poison".to_string(), 2)]
    );
    let s = w.stats();
    assert_eq!(
        (s.lateness.count(), s.lateness.sum_ms),
        (2, 0),
        "first deliveries: {:?}",
        s.lateness
    );
    assert_eq!(
        (s.redelivery_lateness.count(), s.redelivery_lateness.sum_ms),
        (1, 0),
        "redeliveries: {:?}",
        s.redelivery_lateness
    );
}
