//! Redis memory per pending task (`used_memory` growth over the tasks stored), for tasks
//! packed densely in time (the durable workload: delays over 60 s) and spread thinly (one
//! task a second, so nearly every time bucket holds a single task), 64-byte payloads.
//!
//! `cargo run --release -p tickwheel-lab --example memory_layout [-- TASKS]`

use std::time::Duration;

use tickwheel_redis::bench::used_memory;
use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Error, Producer, RunAt, Task};

fn main() -> Result<(), Error> {
    let tasks: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let server = RedisServer::start()?;
    let mut con = redis::Client::open(server.url())?.get_connection()?;
    let payload = [b'p'; 64];
    for (name, spacing_ms) in [
        ("dense (over 60 s)", 60_000 / tasks.max(1)),
        ("sparse (1 a second)", 1000),
    ] {
        let ns = format!("mem{spacing_ms}");
        let cfg = Config::new(server.url(), &ns);
        let mut p = Producer::connect(&cfg)?;
        let before = used_memory(&mut con)?;
        let ids: Vec<String> = (0..tasks).map(|i| format!("task-{i}")).collect();
        for (c, chunk) in ids.chunks(10_000).enumerate() {
            p.schedule_many(chunk.iter().enumerate().map(|(i, id)| Task {
                id,
                run_at: RunAt::After(Duration::from_millis(
                    3_600_000 + (c * 10_000 + i) as u64 * spacing_ms.max(1),
                )),
                payload: &payload,
                recurrence: None,
                retry: None,
            }))?;
        }
        let grown = used_memory(&mut con)?.saturating_sub(before);
        println!(
            "{name:<20} {tasks} tasks: {:.0} B/task (payload 64 B, ids of {} B)",
            grown as f64 / tasks as f64,
            ids[ids.len() / 2].len()
        );
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("tw:{{{ns}*"))
            .query(&mut con)?;
        for k in keys {
            redis::cmd("DEL").arg(k).query::<()>(&mut con)?;
        }
    }
    Ok(())
}
