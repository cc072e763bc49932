//! The worker binary as an operator runs it: it waits for a Redis that is not up yet, serves
//! its metrics on loopback, refuses a bad `--metrics` address with a message, prints its
//! usage on `--help`, and on SIGTERM puts back what it claimed and never delivered.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn metrics(port: u16) -> Option<String> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut all = String::new();
    c.read_to_string(&mut all).ok()?;
    Some(all)
}

#[test]
fn the_worker_binary_waits_for_redis_and_serves_its_metrics() {
    let mut s = common::server();
    tickwheel_redis::Producer::connect(&tickwheel_redis::Config::new(s.url(), "bin")).unwrap();
    s.kill();
    let port = free_port();
    let log = s.dir().join("deliveries.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickwheel-redis-worker"))
        .args(["--url", &s.url(), "--namespace", "bin", "--log"])
        .arg(&log)
        .args(["--metrics", &port.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        child.try_wait().unwrap().is_none(),
        "still waiting for Redis"
    );
    s.restart().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let body = loop {
        if let Some(b) = metrics(port).filter(|b| b.contains("tickwheel_redis_shards_held 16")) {
            break b;
        }
        assert!(Instant::now() < until, "no metrics with 16 shards held");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.starts_with("HTTP/1.1 200 OK"));
    assert!(body.contains("tickwheel_redis_connected 1"));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_bad_metrics_address_is_refused_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_tickwheel-redis-worker"))
        .args([
            "--url",
            "redis://127.0.0.1:1/",
            "--namespace",
            "x",
            "--log",
            "/dev/null",
        ])
        .args(["--metrics", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics \"nonsense\""), "{err}");
}

/// Runs the worker binary on namespace `ns` of `url`, logging to `log`, with `extra` flags.
fn worker(url: &str, ns: &str, log: &std::path::Path, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tickwheel-redis-worker"))
        .args(["--url", url, "--namespace", ns, "--log"])
        .arg(log)
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Tasks claimed ahead of their run-at (claim ahead 10 s, run-at 8 s away) are in the
/// delivery thread's hands, never given to the handler, when SIGTERM comes. The worker
/// puts them back as they were before the claim (pending, attempts 0, at their run-at)
/// before it releases its shards, so the next worker delivers them as first deliveries
/// (attempt 1), not as redeliveries. Before the fix they stayed in flight under the
/// released lease and the next worker delivered them with attempt 2, counted as
/// `redeliveries{cause="requeued"}`.
#[test]
fn sigterm_puts_back_what_was_claimed_and_not_delivered() {
    use tickwheel_redis::{Config, Producer, RunAt, TaskState};
    let s = common::server();
    let cfg = Config::new(s.url(), "term");
    let mut p = Producer::connect(&cfg).unwrap();
    // Far enough ahead that a slow start still claims them all before their run-at.
    let due = std::time::SystemTime::now() + Duration::from_secs(8);
    let ids: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
    for id in &ids {
        p.schedule(id, RunAt::At(due), b"x").unwrap();
    }
    let first_log = s.dir().join("first.log");
    let ahead = ["--window-ms", "20000", "--claim-ahead-ms", "10000"];
    let mut first = worker(&s.url(), "term", &first_log, &ahead);
    let claimed = common::eventually(Duration::from_secs(6), || {
        ids.iter()
            .all(|id| matches!(p.state(id).unwrap(), TaskState::InFlight { attempt: 1, .. }))
    });
    assert!(claimed, "the first worker claimed every task ahead");
    let kill = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(first.wait().unwrap().success(), "a clean exit on SIGTERM");
    let delivered = std::fs::read_to_string(&first_log).unwrap_or_default();
    assert_eq!(delivered, "", "nothing was due before SIGTERM");
    for id in &ids {
        let state = p.state(id).unwrap();
        assert!(
            matches!(state, TaskState::Pending { attempts: 0, .. }),
            "{id}: put back as it was before the claim, found {state:?}"
        );
    }
    let second_log = s.dir().join("second.log");
    let mut second = worker(&s.url(), "term", &second_log, &[]);
    let all = common::eventually(Duration::from_secs(20), || {
        let log = std::fs::read_to_string(&second_log).unwrap_or_default();
        log.lines().count() >= ids.len()
    });
    let _ = second.kill();
    let _ = second.wait();
    assert!(all, "the second worker delivered every task");
    let log = std::fs::read_to_string(&second_log).unwrap();
    for line in log.lines() {
        let attempt = line.split(' ').nth(2).unwrap();
        assert_eq!(attempt, "1", "a first delivery: {line}");
    }
}

/// `--url rediss://... --tls-ca FILE --tls-cert FILE --tls-key FILE`: the binary delivers
/// over TLS, trusting the test authority and presenting the test client certificate to a
/// server that requires one (see `tests/tls/README.md`). With feature `tls` (a workspace
/// build has it; without it tests/tls.rs fails, saying so).
#[cfg(feature = "tls")]
#[test]
fn the_worker_binary_delivers_over_tls() {
    use tickwheel_redis::{Config, Producer, RunAt};
    let certs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let s = tickwheel_redis::server::RedisServer::start_tls(&certs).unwrap();
    let url = s.tls_url().unwrap();
    let mut cfg = Config::new(url.as_str(), "bin-tls");
    cfg.tls_ca = Some(std::fs::read(certs.join("ca.crt")).unwrap());
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("over-tls", RunAt::After(Duration::ZERO), b"x")
        .unwrap();
    s.config_set("tls-auth-clients", "yes").unwrap();
    let log = s.dir().join("tls.log");
    let file = |name: &str| certs.join(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (file("ca.crt"), file("server.crt"), file("server.key"));
    let tls = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let mut child = worker(&url, "bin-tls", &log, &tls);
    let delivered = common::eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("over-tls"))
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(delivered, "delivered over TLS");
}

fn worker_bin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tickwheel-redis-worker"))
        .args(args)
        .output()
        .unwrap()
}

/// `--help` and `-h` print the usage to stdout and exit 0 (before: "unknown argument",
/// status 1), naming every flag, the required ones as required, and the default URL.
#[test]
fn help_prints_the_usage_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = worker_bin(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let usage = String::from_utf8(out.stdout).unwrap();
        assert!(usage.starts_with("Usage: tickwheel-redis-worker --namespace NS --log FILE"));
        assert!(usage.contains("Required:\n  --namespace NS"), "{usage}");
        assert!(usage.contains("--log FILE"), "{usage}");
        assert!(
            usage.contains("[default: redis://127.0.0.1:6379/]"),
            "{usage}"
        );
        for f in [
            "--url",
            "--lease-ms",
            "--visibility-ms",
            "--window-ms",
            "--maintenance-ms",
            "--claim-ahead-ms",
            "--connect-timeout-ms",
            "--metrics",
            "--retry-max",
            "--retry-ms",
            "--poison",
            "--heal-file",
            "--tls-ca",
            "--tls-cert",
            "--tls-key",
        ] {
            assert!(usage.contains(f), "{f} missing from the usage");
        }
        assert!(out.stderr.is_empty());
    }
}

/// A bad command line is a message that points at `--help`, and status 1: a missing
/// required flag, an unknown argument, a flag without its value (never a silent default).
#[test]
fn a_bad_command_line_points_at_help() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["--log", "/dev/null"],
            "--namespace is required (see --help)",
        ),
        (&["--namespace", "x"], "--log is required (see --help)"),
        (&["--bogus"], "unknown argument \"--bogus\" (see --help)"),
        (
            &["--namespace", "x", "--log", "/dev/null", "--url"],
            "--url needs a value",
        ),
        (
            &["--namespace", "x", "--log", "/dev/null", "--heal-file", "f"],
            "--heal-file needs --poison",
        ),
        (
            &["--namespace", "x", "--log", "/dev/null", "--retry-max", "x"],
            "--retry-max \"x\": expected a number of attempts",
        ),
        (
            &[
                "--namespace",
                "x",
                "--log",
                "/dev/null",
                "--tls-ca",
                "/no/such",
            ],
            "--tls-ca \"/no/such\": No such file",
        ),
        (
            &[
                "--namespace",
                "x",
                "--log",
                "/dev/null",
                "--tls-cert",
                "/dev/null",
            ],
            "--tls-cert and --tls-key go together",
        ),
    ];
    for (args, want) in cases {
        let out = worker_bin(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Without `--url` the worker connects to the local Redis on the default port: the
/// command operations.md shows, `--namespace NS --log FILE --metrics PORT`, runs as it is
/// (here against a server of the test's own, its URL given only to check the rest of the
/// line; the default itself is checked by the usage test).
#[test]
fn the_documented_command_runs() {
    let docs = include_str!("../../../docs/operations.md");
    // The command shown: `$ tickwheel-redis-worker --namespace ...`.
    let line = docs
        .lines()
        .find_map(|l| l.strip_prefix("$ tickwheel-redis-worker "))
        .expect("operations.md shows a worker command line");
    let s = common::server();
    let port = free_port();
    let log = s.dir().join("docs.log");
    let mut args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    for (i, a) in args.clone().iter().enumerate() {
        match a.as_str() {
            "--log" => args[i + 1] = log.display().to_string(),
            "--metrics" => args[i + 1] = port.to_string(),
            _ => {}
        }
    }
    args.extend(["--url".to_string(), s.url()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickwheel-redis-worker"))
        .args(&args)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let up = common::eventually(Duration::from_secs(10), || {
        metrics(port).is_some_and(|b| b.contains("tickwheel_redis_connected 1"))
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "the documented command serves its metrics: {args:?}");
}
