//! Where lateness comes from: per delivery, how late the claim ran on the server (claimed_at -
//! due) and how late the handler ran locally, at a light load (1000 tasks, one a ms).
//!
//! `cargo run --release -p tickwheel-redis --example lateness_probe`

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
    let ids: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
    p.schedule_many(ids.iter().enumerate().map(|(i, id)| Task {
        id,
        run_at: RunAt::After(Duration::from_millis(1000 + i as u64)),
        payload: b"",
    }))?;
    let mut claim = Vec::new();
    let mut local = Vec::new();
    w.run(|d| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        claim.push(d.claimed_at_ms as i64 - d.due_ms as i64);
        local.push(now - d.due_ms as i64 * 1000);
        if local.len() == 1000 {
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
