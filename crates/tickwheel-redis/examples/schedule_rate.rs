//! Schedule rate of one producer against a private redis-server (AOF, `appendfsync always`),
//! for a few bulk batch sizes, with delays spread over 0..=60 s as in the durable workload.
//!
//! `cargo run --release -p tickwheel-redis --example schedule_rate [-- TASKS]`

use std::time::{Duration, Instant};

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Producer, RunAt, Task};

fn main() -> Result<(), tickwheel_redis::Error> {
    let tasks: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let server = RedisServer::start()?;
    let payload = [b'p'; 64];
    let ids: Vec<String> = (0..tasks).map(|i| format!("task-{i}")).collect();
    let client = redis::Client::open(server.url()).map_err(tickwheel_redis::Error::Redis)?;
    let mut con = client.get_connection()?;
    for (fsync, batch) in [("always", 256), ("always", 4096), ("no", 256), ("no", 4096)] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg(fsync)
            .query::<()>(&mut con)?;
        let mut cfg = Config::new(server.url(), format!("rate{batch}{fsync}"));
        cfg.batch = batch;
        let mut p = Producer::connect(&cfg)?;
        let t = Instant::now();
        for (c, chunk) in ids.chunks(50_000).enumerate() {
            p.schedule_many(chunk.iter().enumerate().map(|(i, id)| Task {
                id,
                run_at: RunAt::After(Duration::from_millis(
                    ((c * 50_000 + i) as u64 * 7919) % 60_001,
                )),
                payload: &payload,
                recurrence: None,
            }))?;
        }
        let s = t.elapsed().as_secs_f64();
        let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut con)?;
        let eval = stats
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha"))
            .unwrap_or("");
        eprintln!("{eval}");
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut con)?;
        println!(
            "appendfsync {fsync:<6} batch {batch:>5}: {:>9.0} tasks/s",
            tasks as f64 / s
        );
    }
    Ok(())
}
