//! A worker process that appends every delivery to a log file, for crash tests and demos.
//!
//! ```text
//! tickwheel-redis-worker --url redis://127.0.0.1:6379/ --namespace NS --log FILE
//!     [--lease-ms 5000] [--visibility-ms 30000] [--window-ms 10000] [--maintenance-ms 500]
//!     [--claim-ahead-ms 1000] [--connect-timeout-ms 60000] [--metrics [HOST:]PORT]
//! ```
//!
//! At start it waits up to `--connect-timeout-ms` for Redis (starting, loading its data)
//! before it gives up with status 1. `--metrics PORT` serves the worker's counters for
//! Prometheus at `http://127.0.0.1:PORT/metrics` (loopback unless a host is given: see
//! `tickwheel_redis::metrics`).
//!
//! Each delivery is one line, written (one `write`) before it is acknowledged, so a SIGKILL
//! never loses the record of a delivery that Redis saw acknowledged:
//! `id due_ms attempt delivered_at_ms version shard epoch pid`.
//!
//! Ids may hold any character, so the id is written escaped: a backslash as `\\`, a space as
//! `\s`, a tab as `\t`, a line feed as `\n` and a carriage return as `\r`. The line then has
//! exactly eight space-separated fields whatever the id, and an id without those characters is
//! written as it is.
//!
//! SIGTERM or SIGINT stops the worker cleanly: it finishes the delivery in hand, sends its
//! acknowledgements, puts back the tasks it claimed ahead and never delivered (pending again
//! at their run-at, the attempt undone), releases its shards (so other workers take them at
//! once, not after the lease) and exits with status 0.

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel_redis::{Config, Outcome, Worker};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwheel-redis-worker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line, parsed.
struct Args {
    cfg: Config,
    log: String,
    metrics: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut ns, mut log) = (None, None, None);
    let mut cfg = Config::new("", "");
    cfg.connect_timeout = Duration::from_secs(60);
    let mut metrics = None;
    let ms = |v: Option<String>| -> Result<Duration, String> {
        v.and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .ok_or_else(|| "expected a number of milliseconds".to_string())
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--url" => url = args.next(),
            "--namespace" => ns = args.next(),
            "--log" => log = args.next(),
            "--lease-ms" => cfg.lease = ms(args.next())?,
            "--visibility-ms" => cfg.visibility_timeout = ms(args.next())?,
            "--window-ms" => cfg.window = ms(args.next())?,
            "--maintenance-ms" => cfg.maintenance_interval = ms(args.next())?,
            "--claim-ahead-ms" => cfg.claim_ahead = ms(args.next())?,
            "--connect-timeout-ms" => cfg.connect_timeout = ms(args.next())?,
            "--metrics" => metrics = Some(metrics_addr_of(args.next())?),
            other => {
                return Err(format!(
                    "unknown argument {other:?} (see the source's header)"
                ))
            }
        }
    }
    cfg.url = url.ok_or("--url is required")?;
    cfg.namespace = ns.ok_or("--namespace is required")?;
    let log = log.ok_or("--log is required")?;
    Ok(Args { cfg, log, metrics })
}

fn run() -> Result<(), String> {
    let Args { cfg, log, metrics } = parse_args()?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{log}: {e}"))?;
    let mut worker = Worker::connect(&cfg).map_err(|e| e.to_string())?;
    let _metrics = match metrics {
        Some(addr) => Some(
            tickwheel_redis::metrics::serve(addr.as_str(), worker.status())
                .map_err(|e| format!("--metrics {addr}: {e}"))?,
        ),
        None => None,
    };
    stop_on_signals(worker.stop_handle())?;
    let pid = std::process::id();
    let mut failed = None;
    worker
        .run(|d| match file.write_all(log_line(d, pid).as_bytes()) {
            Ok(()) => Outcome::Ack,
            Err(e) => {
                failed.get_or_insert(e);
                Outcome::Leave
            }
        })
        .map_err(|e| e.to_string())?;
    match failed {
        Some(e) => Err(format!("{log}: {e}")),
        None => Ok(()),
    }
}

/// SIGTERM and SIGINT stop the worker (it then releases its shards).
fn stop_on_signals(stop: tickwheel_redis::StopHandle) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| format!("cannot handle signals: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            stop.stop();
        }
    });
    Ok(())
}

/// A delivery's log line (see the header).
fn log_line(d: &tickwheel_redis::Delivery, pid: u32) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.as_millis());
    format!(
        "{} {} {} {} {} {} {} {}\n",
        escape_id(&d.id),
        d.due_ms,
        d.attempt,
        now,
        d.version,
        d.shard,
        d.epoch,
        pid
    )
}

/// `--metrics`' address: a bare port is on loopback.
fn metrics_addr_of(v: Option<String>) -> Result<String, String> {
    let v = v.ok_or("--metrics needs a port or host:port")?;
    if v.parse::<u16>().is_ok() {
        return Ok(format!("127.0.0.1:{v}"));
    }
    match v.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(v),
        _ => Err(format!("--metrics {v:?}: expected PORT or HOST:PORT")),
    }
}

/// The id as the log writes it: `\\`, `\s`, `\t`, `\n`, `\r` for a backslash, a space, a
/// tab, a line feed and a carriage return; every other character as it is.
fn escape_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' => out.push_str("\\s"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}
