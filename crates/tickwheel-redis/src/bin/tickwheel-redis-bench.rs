//! Runs the durable workload ([`tickwheel_redis::bench`]) and prints its table.
//!
//! ```text
//! tickwheel-redis-bench [--redis URL] [--tasks 1000000] [--max-delay-s 60] [--workers 1,4]
//!     [--payload 64] [--no-baseline] [--confirm 0,1]
//! ```
//! Without `--redis` it starts its own `redis-server` (which must be installed). `--confirm`:
//! replicas that must confirm each write (`Config::confirm_replicas`), one run per value;
//! above 0 the private server gets that many replicas.

use std::process::ExitCode;
use std::time::Duration;

use tickwheel_redis::bench::{self, BenchConfig};

fn main() -> ExitCode {
    let mut cfg = BenchConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "--redis" => cfg.url = Some(value("--redis")?),
                "--tasks" => cfg.tasks = value("--tasks")?.parse().map_err(|e| format!("{e}"))?,
                "--max-delay-s" => {
                    let s: u64 = value("--max-delay-s")?
                        .parse()
                        .map_err(|e| format!("{e}"))?;
                    cfg.max_delay = Duration::from_secs(s);
                }
                "--workers" => {
                    cfg.workers = value("--workers")?
                        .split(',')
                        .map(|w| w.parse().map_err(|e| format!("--workers: {e}")))
                        .collect::<Result<_, _>>()?
                }
                "--payload" => {
                    cfg.payload = value("--payload")?.parse().map_err(|e| format!("{e}"))?
                }
                "--no-baseline" => cfg.baseline = false,
                "--confirm" => {
                    cfg.confirm = value("--confirm")?
                        .split(',')
                        .map(|w| w.parse().map_err(|e| format!("--confirm: {e}")))
                        .collect::<Result<_, _>>()?
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
            Ok(())
        })();
        if let Err(e) = r {
            eprintln!("tickwheel-redis-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    match bench::run_with_reference(&cfg, true, |m| eprintln!("running: {m}")) {
        Ok((reports, zadd)) => {
            print!("{}", bench::table(&reports));
            match zadd {
                Some(r) => println!("redis-benchmark -P 64 -t zadd on the same server: {r:.0}/s"),
                None => println!("redis-benchmark: not run (not installed?)"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tickwheel-redis-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
