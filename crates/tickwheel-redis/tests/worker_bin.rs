//! The worker binary as an operator runs it: it waits for a Redis that is not up yet, serves
//! its metrics on loopback, and refuses a bad `--metrics` address with a message.

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
