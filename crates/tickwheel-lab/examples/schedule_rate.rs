//! Schedule rate of one producer against a private redis-server (AOF, `appendfsync always`),
//! for two bulk batch sizes, with delays spread over 0..=60 s as in the durable workload;
//! beside, on the same server and in the same run, `redis-benchmark -P 64` references (when
//! `redis-benchmark` is on the PATH) and a floor: a script that only stores prepared values
//! with one multi-field `HSET` (no versions, no time index, no replacement), the least a
//! script holding the tasks in a hash can do. Each line also shows the server's time per task
//! (`INFO commandstats`). Rounds repeat, interleaved, as the machine may be shared.
//!
//! `cargo run --release -p tickwheel-lab --example schedule_rate [-- TASKS [ROUNDS]]`

use std::process::Command;
use std::time::{Duration, Instant};

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Producer, RunAt, Task};

/// The floor: `HSET` of (id, value) pairs, in slices Lua's stack allows.
const FLOOR: &str = r#"
local i = 1
while i <= #ARGV do
  local j = math.min(#ARGV, i + 1999)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
return 0
"#;

fn main() -> Result<(), tickwheel_redis::Error> {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let server = RedisServer::start()?;
    let payload = [b'p'; 64];
    let ids: Vec<String> = (0..tasks).map(|i| format!("task-{i}")).collect();
    let client = redis::Client::open(server.url()).map_err(tickwheel_redis::Error::Redis)?;
    let mut con = client.get_connection()?;
    let port = server.port().to_string();
    for round in 0..rounds {
        for (name, extra) in [
            ("ZADD same member", &[][..]),
            ("ZADD distinct", &["-r", "1000000"][..]),
            ("HSET distinct", &["-r", "1000000"][..]),
        ] {
            let test = name.split(' ').next().unwrap_or_default().to_lowercase();
            let n = if extra.is_empty() {
                "2000000"
            } else {
                "400000"
            };
            let out = Command::new("redis-benchmark")
                .args(["-p", &port, "-P", "64", "-q", "-n", n, "-t", &test])
                .args(extra)
                .output();
            match out {
                Ok(o) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    let rate = text
                        .rsplit('\r')
                        .next()
                        .and_then(|l| l.split_whitespace().nth(1))
                        .unwrap_or("?");
                    println!("round {round} redis-benchmark -P 64 {name:<17}: {rate:>9} /s");
                }
                Err(e) => println!("redis-benchmark: {e}"),
            }
            redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        }
        let script = redis::Script::new(FLOOR);
        script.prepare_invoke().load(&mut con)?;
        let t = Instant::now();
        let value = |i: usize| {
            let mut v = format!("{i}:0:{}:0:", 1_700_000_000_000u64 + i as u64).into_bytes();
            v.extend_from_slice(&payload);
            v
        };
        for chunk in ids.chunks(50_000) {
            let mut pipe = redis::pipe();
            for slice in chunk.chunks(4096) {
                pipe.cmd("EVALSHA")
                    .arg(script.get_hash())
                    .arg(1)
                    .arg("floor");
                for (i, id) in slice.iter().enumerate() {
                    pipe.arg(id).arg(value(i));
                }
            }
            pipe.query::<()>(&mut con)?;
        }
        report(&mut con, round, "floor: one HSET, batch 4096", tasks, t)?;
        redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        for batch in [256, 4096] {
            let mut cfg = Config::new(server.url(), format!("rate{batch}"));
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
                    retry: None,
                }))?;
            }
            report(
                &mut con,
                round,
                &format!("schedule_many, batch {batch}"),
                tasks,
                t,
            )?;
            redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        }
    }
    Ok(())
}

/// Prints the rate since `t` and the server's script time per task, and resets the stats.
fn report(
    con: &mut redis::Connection,
    round: usize,
    what: &str,
    tasks: usize,
    t: Instant,
) -> Result<(), tickwheel_redis::Error> {
    let s = t.elapsed().as_secs_f64();
    let stats: String = redis::cmd("INFO").arg("commandstats").query(con)?;
    let usec: f64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum();
    redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(con)?;
    println!(
        "round {round} {what:<34}: {:>9.0} tasks/s, server {:.2} us/task",
        tasks as f64 / s,
        usec / tasks as f64
    );
    Ok(())
}
