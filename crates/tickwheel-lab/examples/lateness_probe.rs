//! Where lateness comes from: per delivery, how late the claim ran on the server (claimed_at -
//! due) and how late the handler ran locally. Tasks are stored before the first is due (no
//! producer running alongside); by default 1000 tasks, one a ms.
//!
//! `PROBE_N=200000 PROBE_PER_MS=40 cargo run --release -p tickwheel-lab --example
//! lateness_probe [-- always|everysec|no]` (the argument sets the server's `appendfsync`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Outcome, Producer, RunAt, Task, Worker};

fn main() -> Result<(), tickwheel_redis::Error> {
    let server = RedisServer::start()?;
    if let Some(mode) = std::env::args().nth(1) {
        let mut con = redis::Client::open(server.url())?.get_connection()?;
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg(&mode)
            .query::<()>(&mut con)?;
        println!("appendfsync {mode}");
    }
    let cfg = Config::new(server.url(), "probe");
    let mut p = Producer::connect(&cfg)?;
    let mut w = Worker::connect(&cfg)?;
    let stop = w.stop_handle();
    let n: usize = std::env::var("PROBE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let per_ms: usize = std::env::var("PROBE_PER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let ids: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let lead = 1000 + n as u64 / 50; // scheduled and loaded before the first is due
    for (c, chunk) in ids.chunks(10_000).enumerate() {
        p.schedule_many(chunk.iter().enumerate().map(|(i, id)| Task {
            id,
            run_at: RunAt::After(Duration::from_millis(
                lead + ((c * 10_000 + i) / per_ms) as u64,
            )),
            payload: b"",
            recurrence: None,
            retry: None,
        }))?;
    }
    let mut claim = Vec::new();
    let mut local = Vec::new();
    w.run(|d| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        claim.push(d.claimed_at_ms as i64 - d.due_ms as i64);
        local.push(now - d.due_ms as i64 * 1000);
        if local.len() == n {
            stop.stop();
        }
        Outcome::Ack
    })?;
    claim.sort_unstable();
    local.sort_unstable();
    let q = |v: &[i64], f: f64| v[((v.len() - 1) as f64 * f) as usize];
    println!(
        "claim late ms p50 {} p90 {} p99 {} max {}",
        q(&claim, 0.5),
        q(&claim, 0.9),
        q(&claim, 0.99),
        q(&claim, 1.0)
    );
    println!(
        "handler late us p50 {} p90 {} p99 {} max {}",
        q(&local, 0.5),
        q(&local, 0.9),
        q(&local, 0.99),
        q(&local, 1.0)
    );
    Ok(())
}
