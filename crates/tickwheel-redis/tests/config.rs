//! Configuration: values out of range are errors at connect (never silently clamped), and
//! connecting waits for a Redis that is down or restarting, up to `connect_timeout`.

mod common;

use std::time::{Duration, Instant};

use tickwheel_redis::{Config, Error, Producer, Worker};

/// (what is changed, whether the configuration is accepted)
#[test]
fn table_of_configurations() {
    let s = common::server();
    type Change = fn(&mut Config);
    let table: [(&str, Change, bool); 10] = [
        ("defaults", |_| {}, true),
        (
            "claim_ahead = window / 2",
            |c| c.claim_ahead = c.window / 2,
            true,
        ),
        (
            "claim_ahead > window / 2",
            |c| c.claim_ahead = c.window / 2 + Duration::from_millis(1),
            false,
        ),
        ("claim_ahead = 0", |c| c.claim_ahead = Duration::ZERO, true),
        (
            "maintenance = lease / 3",
            |c| c.maintenance_interval = c.lease / 3,
            true,
        ),
        (
            "maintenance > lease / 3",
            |c| c.maintenance_interval = c.lease / 3 + Duration::from_millis(1),
            false,
        ),
        (
            "maintenance = 0",
            |c| c.maintenance_interval = Duration::ZERO,
            false,
        ),
        (
            "lease 99 ms",
            |c| c.lease = Duration::from_millis(99),
            false,
        ),
        ("no shards", |c| c.shards = 0, false),
        (
            "window 9 ms",
            |c| c.window = Duration::from_millis(9),
            false,
        ),
    ];
    for (what, change, ok) in table {
        let mut cfg = Config::new(s.url(), "config");
        change(&mut cfg);
        let r = Worker::connect(&cfg);
        match (ok, r) {
            (true, Ok(_)) => {}
            (false, Err(Error::InvalidConfig(m))) => assert!(!m.is_empty(), "{what}"),
            (_, r) => panic!("{what}: {:?}", r.map(|_| ())),
        }
        let p = Producer::connect(&cfg);
        assert_eq!(p.is_ok(), ok, "{what}: the producer agrees");
    }
}

#[test]
fn connecting_waits_for_redis_to_come_back() {
    let mut s = common::server();
    let cfg = {
        let mut c = Config::new(s.url(), "waits");
        c.connect_timeout = Duration::ZERO;
        c
    };
    Producer::connect(&cfg).unwrap(); // the namespace exists
    s.kill();
    let t = Instant::now();
    assert!(
        matches!(Worker::connect(&cfg), Err(Error::Redis(_))),
        "connect_timeout zero: one attempt"
    );
    assert!(t.elapsed() < Duration::from_secs(1));

    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        s.restart().unwrap();
        s
    });
    let mut cfg = cfg;
    cfg.connect_timeout = Duration::from_secs(10);
    let t = Instant::now();
    let w = Worker::connect(&cfg).expect("connects once Redis is back");
    assert!(t.elapsed() >= Duration::from_millis(700), "it waited");
    let p = Producer::connect(&cfg).expect("so does a producer");
    let _s = restart.join().unwrap();
    drop((w, p));
}

#[test]
fn a_bad_url_is_not_retried() {
    let mut cfg = Config::new("http://127.0.0.1:1/", "bad");
    cfg.connect_timeout = Duration::from_secs(10);
    let t = Instant::now();
    assert!(matches!(
        Worker::connect(&cfg),
        Err(Error::InvalidUrl { .. })
    ));
    assert!(t.elapsed() < Duration::from_secs(1));
}
