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

    use tickwheel_redis::server::{RedisCluster, RedisSentinel, RedisServer};
    use tickwheel_redis::{
        ClientCert, Config, Delivery, Error, Inspector, ManualTime, Outcome, Producer, RunAt,
        TimeSource, Worker, CLUSTER_TLS_SCHEME,
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

    /// The test client certificate: the server's own, which the authority signed for client
    /// authentication too (see `tests/tls/README.md`).
    fn client_cert() -> ClientCert {
        ClientCert {
            chain: std::fs::read(certs().join("server.crt")).unwrap(),
            key: std::fs::read(certs().join("server.key")).unwrap(),
        }
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
        delivered_over(&s.tls_url().unwrap(), &|| {
            s.config_set("tls-auth-clients", "yes").unwrap();
        });
    }

    /// The same on a Redis Cluster whose nodes take TLS (`rediss+cluster://`, the cluster bus
    /// over TLS too): the seeds and the nodes learnt from the slot map are reached over TLS.
    #[test]
    fn tasks_are_stored_and_delivered_over_tls_on_a_cluster() {
        let c = RedisCluster::start_tls(3, &certs())
            .unwrap_or_else(|e| panic!("cannot run the TLS tests (a redis-server with TLS): {e}"));
        delivered_over(
            &format!("{CLUSTER_TLS_SCHEME}{}", c.tls_seeds().join(",")),
            &|| c.config_set("tls-auth-clients", "yes").unwrap(),
        );
    }

    /// The same under Redis Sentinel (`rediss+sentinel://`): the sentinels are asked over TLS,
    /// and name the nodes' TLS ports (`tls-replication yes`), which are reached over TLS too;
    /// after a `SENTINEL FAILOVER` a new connection finds the new primary the same way.
    #[test]
    fn tasks_are_stored_and_delivered_over_tls_under_sentinel() {
        let s = RedisSentinel::start_tls(1, 1, &certs())
            .unwrap_or_else(|e| panic!("cannot run the TLS tests (a redis-server with TLS): {e}"));
        let url = s.tls_url().unwrap();
        delivered_over(&url, &|| {
            for node in s.nodes() {
                node.config_set("tls-auth-clients", "yes").unwrap();
            }
        });
        let (old, new, _) = s.failover(Duration::from_secs(30)).unwrap();
        assert_ne!(old, new);
        let mut cfg = Config::new(url, "after-failover");
        cfg.tls_ca = Some(ca());
        cfg.tls_client_cert = Some(client_cert());
        let mut p = Producer::connect(&cfg).unwrap();
        p.schedule("on-the-new-primary", RunAt::AtMillis(T0), b"")
            .unwrap();
        let mut on_new: redis::Connection = redis::Client::open(s.nodes()[new].url())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("tw:{after-failover*")
            .query(&mut on_new)
            .unwrap();
        assert!(!keys.is_empty(), "nothing stored on the new primary");
    }

    /// Sentinels (and nodes) that require client certificates from the start, as
    /// `redis-server` does by default with TLS: without one the sentinel refuses at once,
    /// saying why; with one, tasks are stored and delivered.
    #[test]
    fn sentinels_that_require_client_certificates_are_given_one() {
        let s = RedisSentinel::start_tls_requiring_client_certs(1, 1, &certs())
            .unwrap_or_else(|e| panic!("cannot run the TLS tests (a redis-server with TLS): {e}"));
        let mut cfg = Config::new(s.tls_url().unwrap(), "mtls-sentinel");
        cfg.tls_ca = Some(ca());
        let started = Instant::now();
        let e = Producer::connect(&cfg).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "retried: {e}");
        assert!(e.to_string().contains("CertificateRequired"), "{e}");
        cfg.tls_client_cert = Some(client_cert());
        stored_and_delivered(cfg);
    }

    /// Checks that `url` is refused at once, saying why, without the test authority (the
    /// system's authorities do not include it), then that tasks are stored and delivered there
    /// trusting it ([`stored_and_delivered`]). Then makes the servers require a client
    /// certificate (`require_client_certs`) and checks that a connection without one is
    /// refused at once, saying why, and that with one tasks are stored and delivered again.
    fn delivered_over(url: &str, require_client_certs: &dyn Fn()) {
        let refused_at_once = |cfg: &Config, why: &str| {
            let started = Instant::now();
            let e = Producer::connect(cfg).unwrap_err();
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{why}: retried for {:?}: {e}",
                started.elapsed()
            );
            let message = e.to_string().to_lowercase();
            assert!(message.contains("certificate"), "{why}: {e}");
        };
        refused_at_once(&Config::new(url, "tls"), "an untrusted server certificate");
        let mut cfg = Config::new(url, "tls");
        cfg.tls_ca = Some(ca());
        stored_and_delivered(cfg.clone());

        require_client_certs();
        refused_at_once(&cfg, "no client certificate");
        cfg.namespace = "mtls".into();
        cfg.tls_client_cert = Some(client_cert());
        stored_and_delivered(cfg);
    }

    /// Stores 24 tasks with `cfg`, delivers them, then one more through the worker's
    /// subscription; checks each was delivered once.
    fn stored_and_delivered(mut cfg: Config) {
        let time = ManualTime::new(T0);
        cfg.shards = 6;
        cfg.time = TimeSource::Manual(time.clone());
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
        let shown = format!("{cfg:?}");
        assert!(shown.contains("tls_ca: Some(\"1155 bytes\")"), "{shown}");
        if let Some(cert) = &cfg.tls_client_cert {
            let key = String::from_utf8(cert.key.clone()).unwrap();
            let secret = key.lines().nth(1).unwrap();
            assert!(!shown.contains(secret), "the key shown: {shown}");
            assert!(shown.contains("key: 1704 bytes (not shown)"), "{shown}");
        }
    }

    /// A `tls_ca` that holds no certificate, a client certificate or key that does not parse,
    /// and a key that is not the certificate's are configuration errors at once, each saying
    /// which setting; a `rediss+cluster://` URL is built from `rediss://` seeds.
    #[test]
    fn tls_settings_not_parsed_are_refused_and_tls_seeds_make_a_tls_cluster_url() {
        let s = tls_server();
        let refused = |cfg: &Config, setting: &str, why: &str| {
            let e = Producer::connect(cfg).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidConfig(m) if m.contains(setting) && m.contains(why)),
                "{setting} ({why}): {e}"
            );
        };
        for ca in [b"not a certificate".to_vec(), Vec::new()] {
            let mut cfg = Config::new(s.tls_url().unwrap(), "tls");
            cfg.tls_ca = Some(ca);
            refused(&cfg, "tls_ca", "no certificate authority");
        }
        let unrelated = std::fs::read(certs().join("unrelated.key")).unwrap();
        let good = client_cert();
        for (chain, key, why) in [
            (
                b"not a certificate".to_vec(),
                good.key.clone(),
                "no certificate",
            ),
            (good.chain.clone(), b"not a key".to_vec(), "its key"),
            (good.key.clone(), good.chain.clone(), "no certificate"),
            (good.chain.clone(), unrelated, "not the certificate's"),
        ] {
            let mut cfg = Config::new(s.tls_url().unwrap(), "tls");
            cfg.tls_ca = Some(ca());
            cfg.tls_client_cert = Some(ClientCert { chain, key });
            refused(&cfg, "tls_client_cert", why);
        }

        let cfg = Config::cluster(&["rediss://:pw@10.0.0.1:7000/", "10.0.0.2:7000"], "c");
        assert_eq!(
            cfg.url,
            format!("{CLUSTER_TLS_SCHEME}:pw@10.0.0.1:7000,10.0.0.2:7000")
        );
    }
}
