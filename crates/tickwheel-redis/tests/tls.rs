//! TLS (feature `tls`): `rediss://` against a real `redis-server` listening with the test
//! certificates of `tests/tls/` (see its README), and the errors of a TLS set-up gone wrong.

/// Without feature `tls` these tests cannot run: they fail, saying how to run them, rather
/// than pass having run nothing.
#[cfg(not(feature = "tls"))]
#[test]
fn the_tls_tests_need_feature_tls() {
    panic!(
        "tests/tls.rs needs feature `tls`: run `cargo xtask test` (a workspace build turns it \
         on: tickwheel-cli depends on it), or `cargo test -p tickwheel-redis --features tls`"
    );
}

#[cfg(feature = "tls")]
mod over_tls {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use tickwheel_redis::server::{RedisCluster, RedisServer};
    use tickwheel_redis::{
        Config, Delivery, Error, Inspector, ManualTime, Outcome, Producer, RunAt, TimeSource,
        Worker, CLUSTER_TLS_SCHEME,
    };

    const T0: u64 = 1_000_000;

    fn certs() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls")
    }

    fn tls_server() -> RedisServer {
        RedisServer::start_tls(&certs())
            .unwrap_or_else(|e| panic!("cannot run the TLS tests (a redis-server with TLS): {e}"))
    }

    fn ca() -> Vec<u8> {
        std::fs::read(certs().join("ca.crt")).unwrap()
    }

    fn tick(w: &mut Worker, got: &mut BTreeMap<String, u32>) {
        w.tick(&mut |d: &Delivery| {
            *got.entry(d.id.clone()).or_default() += 1;
            Outcome::Ack
        })
        .unwrap();
    }

    /// Over `rediss://`, trusting the test authority: a producer stores, a worker delivers every
    /// task once, and a task stored inside the window the worker has loaded reaches it through
    /// its notification subscription, a TLS connection of its own. (The URL names the server's
    /// TLS port, which answers nothing else.)
    #[test]
    fn tasks_are_stored_and_delivered_over_tls() {
        let s = tls_server();
        delivered_over(&s.tls_url().unwrap());
    }

    /// The same on a Redis Cluster whose nodes take TLS (`rediss+cluster://`, the cluster bus
    /// over TLS too): the seeds and the nodes learnt from the slot map are reached over TLS.
    #[test]
    fn tasks_are_stored_and_delivered_over_tls_on_a_cluster() {
        let c = RedisCluster::start_tls(3, &certs())
            .unwrap_or_else(|e| panic!("cannot run the TLS tests (a redis-server with TLS): {e}"));
        delivered_over(&format!("{CLUSTER_TLS_SCHEME}{}", c.tls_seeds().join(",")));
    }

    /// Checks that `url` is refused at once, saying why, without the test authority (the
    /// system's authorities do not include it). Then stores 24 tasks there trusting it, delivers
    /// them, then one more through the worker's subscription; checks each was delivered once.
    fn delivered_over(url: &str) {
        let started = Instant::now();
        let e = Producer::connect(&Config::new(url, "tls")).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "an untrusted certificate was retried for {:?}: {e}",
            started.elapsed()
        );
        assert!(e.to_string().contains("certificate"), "{e}");

        let time = ManualTime::new(T0);
        let mut cfg = Config::new(url, "tls");
        cfg.shards = 6;
        cfg.time = TimeSource::Manual(time.clone());
        cfg.tls_ca = Some(ca());
        let mut p = Producer::connect(&cfg).unwrap();
        for i in 0..24 {
            p.schedule(&format!("t{i}"), RunAt::AtMillis(T0 + 1_000), b"x")
                .unwrap();
        }
        let mut w = Worker::connect(&cfg).unwrap();
        let mut got = BTreeMap::new();
        time.set_ms(T0 + 2_000);
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < 24 && Instant::now() < deadline {
            tick(&mut w, &mut got);
        }
        assert_eq!(got.len(), 24, "{got:?}");
        assert!(got.values().all(|&n| n == 1), "{got:?}");
        p.schedule("late", RunAt::AtMillis(T0 + 2_400), b"")
            .unwrap();
        time.set_ms(T0 + 3_000);
        let stored = Instant::now();
        while !got.contains_key("late") && stored.elapsed() < Duration::from_secs(10) {
            tick(&mut w, &mut got);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(got.get("late"), Some(&1), "not announced to the worker");
        let mut inspector = Inspector::connect(&cfg).unwrap();
        assert_eq!(inspector.stats().unwrap().pending(), 0);
        assert!(
            format!("{cfg:?}").contains("tls_ca: Some(\"1155 bytes\")"),
            "{cfg:?}"
        );
    }

    /// A `tls_ca` that holds no certificate is a configuration error at once; a
    /// `rediss+cluster://` URL is built from `rediss://` seeds.
    #[test]
    fn a_tls_ca_not_parsed_is_refused_and_tls_seeds_make_a_tls_cluster_url() {
        let s = tls_server();
        for ca in [b"not a certificate".to_vec(), Vec::new()] {
            let mut cfg = Config::new(s.tls_url().unwrap(), "tls");
            cfg.tls_ca = Some(ca);
            let e = Producer::connect(&cfg).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidConfig(m) if m.contains("tls_ca")),
                "{e}"
            );
        }

        let cfg = Config::cluster(&["rediss://:pw@10.0.0.1:7000/", "10.0.0.2:7000"], "c");
        assert_eq!(
            cfg.url,
            format!("{CLUSTER_TLS_SCHEME}:pw@10.0.0.1:7000,10.0.0.2:7000")
        );
    }
}
