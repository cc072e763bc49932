//! A worker process that appends every delivery to a log file, for crash tests and demos.
//!
//! ```text
//! tickwheel-redis-worker --namespace NS --log FILE [--url redis://127.0.0.1:6379/]
//!     [--lease-ms 5000] [--visibility-ms 30000] [--window-ms 10000] [--maintenance-ms 500]
//!     [--claim-ahead-ms 1000] [--connect-timeout-ms 60000] [--metrics [HOST:]PORT]
//!     [--confirm-replicas N [--confirm-timeout-ms 1000]]
//!     [--retry-max N] [--retry-ms MS] [--poison [--heal-file FILE]]
//! ```
//!
//! `--namespace` and `--log` are required; `--url` defaults to the local Redis on its default
//! port. `--help` prints the usage and exits with status 0; a
//! bad command line is a message and status 1.
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
//! `--retry-max N` and `--retry-ms MS` set a fixed retry policy (`RetryPolicy::fixed`: N
//! failed attempts, MS apart; either alone takes the other's default, 25 attempts or 1000 ms).
//!
//! `--poison` (for fault tests of failing handlers) makes the handler fail by the id's prefix,
//! after logging the delivery as any other:
//! - `poison-fail-*`: `Outcome::fail("poison fail attempt N")`, N the delivery's attempt;
//! - `poison-panic-*`: panics with `poison panic attempt N` (recorded as
//!   `panicked: poison panic attempt N`; the panic hook keeps quiet about these);
//! - `poison-fatal-*`: `Outcome::non_retryable("poison fatal")`.
//!
//! Every other id is acknowledged. With `--heal-file FILE`, poison ids are acknowledged too
//! once FILE exists (looked at on each poison delivery): a test creates it, then retries the
//! failed tasks (`Producer::retry_failed_where`) and sees them run again and succeed.
//!
//! SIGTERM or SIGINT stops the worker cleanly: it finishes the delivery in hand, sends its
//! acknowledgements, puts back the tasks it claimed ahead and never delivered (pending again
//! at their run-at, the attempt undone), releases its shards (so other workers take them at
//! once, not after the lease) and exits with status 0.

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel_redis::{Config, Outcome, RetryPolicy, Worker};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwheel-redis-worker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What `--help` prints.
const USAGE: &str = "\
Usage: tickwheel-redis-worker --namespace NS --log FILE [OPTIONS]

Runs a tickwheel-redis worker on namespace NS: it takes a fair share of the namespace's
shards and appends each delivery to FILE as one line,
`id due_ms attempt delivered_at_ms version shard epoch pid` (the id escaped: \\\\ \\s \\t \\n \\r),
before acknowledging it. SIGTERM or SIGINT stops it cleanly (status 0): it finishes the
delivery in hand, sends its acknowledgements, puts back what it claimed and did not deliver,
and releases its shards.

Required:
  --namespace NS            the namespace (as producers name it)
  --log FILE                the delivery log, appended to (created if missing)

Options:
  --url URL                 Redis (redis://, rediss://, redis+sentinel://host:port,.../name,
                            rediss+sentinel://..., redis+cluster://host:port,...,
                            rediss+cluster://host:port,...)
                            [default: redis://127.0.0.1:6379/]
  --tls-ca FILE             trust the certificate authorities in FILE (PEM) for rediss://
                            [default: the system's]
  --tls-cert FILE           present the client certificate in FILE (PEM) to a server that
                            requires one (mutual TLS); with --tls-key
  --tls-key FILE            the private key of --tls-cert (PEM)
  --lease-ms MS             shard lease [default: 5000]
  --visibility-ms MS        visibility timeout of a claim [default: 30000]
  --window-ms MS            window read into the wheel [default: 10000]
  --maintenance-ms MS       renewals and rebalancing every MS [default: 500]
  --claim-ahead-ms MS       claim this long before the run-at, at most half the window
                            [default: 1000]
  --connect-timeout-ms MS   wait this long for Redis at start [default: 60000]
  --confirm-replicas N      N replicas confirm every claim, outcome and renewal (WAIT)
                            before it counts [default: 0]
  --confirm-timeout-ms MS   ... within MS, below the I/O timeout of 5 s [default: 1000]
  --metrics [HOST:]PORT     serve Prometheus metrics at http://HOST:PORT/metrics
                            (a bare PORT is on 127.0.0.1)
  --retry-max N             a fixed retry policy: N failed attempts, then the failed set
                            [default with --retry-ms: 25]
  --retry-ms MS             ... MS apart [default with --retry-max: 1000]
  --poison                  fail by id prefix (for fault tests): poison-fail-* returns
                            a failure \"poison fail attempt N\", poison-panic-* panics
                            \"poison panic attempt N\", poison-fatal-* is non-retryable
                            \"poison fatal\"; other ids are acknowledged
  --heal-file FILE          with --poison: once FILE exists, poison ids are acknowledged
  -h, --help                print this and exit

Example:
  tickwheel-redis-worker --namespace orders --log deliveries.log --metrics 9464
";

/// Where the worker connects without `--url`: the local Redis on its default port.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// The command line, parsed: what to run with.
struct Args {
    cfg: Config,
    log: String,
    metrics: Option<String>,
    poison: Option<Poison>,
}

/// `--poison`: failing handlers by id prefix (see the header).
struct Poison {
    heal_file: Option<String>,
}

impl Poison {
    /// What the handler does with `d` besides logging it: `None` to acknowledge it.
    fn outcome(&self, d: &tickwheel_redis::Delivery) -> Option<Outcome> {
        let kind = d.id.strip_prefix("poison-")?;
        if self
            .heal_file
            .as_ref()
            .is_some_and(|f| std::path::Path::new(f).exists())
        {
            return None;
        }
        let n = d.attempt;
        if kind.starts_with("fail-") {
            Some(Outcome::fail(format!("poison fail attempt {n}")))
        } else if kind.starts_with("panic-") {
            panic!("poison panic attempt {n}");
        } else if kind.starts_with("fatal-") {
            Some(Outcome::non_retryable("poison fatal"))
        } else {
            None
        }
    }
}

/// The command line, parsed: `None` for `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = args.into_iter();
    let (mut url, mut ns, mut log) = (None, None, None);
    let mut cfg = Config::new("", "");
    cfg.connect_timeout = Duration::from_secs(60);
    let mut metrics = None;
    let (mut retry_max, mut retry_ms) = (None, None);
    let (mut poison, mut heal_file) = (false, None);
    let (mut tls_cert, mut tls_key) = (None, None);
    while let Some(a) = args.next() {
        let flag = a.as_str();
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let ms = |v: String| -> Result<Duration, String> {
            v.parse()
                .map(Duration::from_millis)
                .map_err(|_| format!("{flag} {v:?}: expected a number of milliseconds"))
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--url" => url = Some(value()?),
            "--namespace" => ns = Some(value()?),
            "--log" => log = Some(value()?),
            "--tls-ca" => {
                let path = value()?;
                let pem = std::fs::read(&path).map_err(|e| format!("{flag} {path:?}: {e}"))?;
                cfg.tls_ca = Some(pem);
            }
            "--tls-cert" | "--tls-key" => {
                let path = value()?;
                let pem = std::fs::read(&path).map_err(|e| format!("{flag} {path:?}: {e}"))?;
                *if flag == "--tls-cert" {
                    &mut tls_cert
                } else {
                    &mut tls_key
                } = Some(pem);
            }
            "--lease-ms" => cfg.lease = ms(value()?)?,
            "--visibility-ms" => cfg.visibility_timeout = ms(value()?)?,
            "--window-ms" => cfg.window = ms(value()?)?,
            "--maintenance-ms" => cfg.maintenance_interval = ms(value()?)?,
            "--claim-ahead-ms" => cfg.claim_ahead = ms(value()?)?,
            "--connect-timeout-ms" => cfg.connect_timeout = ms(value()?)?,
            "--confirm-replicas" => {
                let v = value()?;
                cfg.confirm_replicas = v
                    .parse::<u32>()
                    .map_err(|_| format!("{flag} {v:?}: expected a number of replicas"))?;
            }
            "--confirm-timeout-ms" => cfg.confirm_timeout = ms(value()?)?,
            "--metrics" => metrics = Some(metrics_addr_of(value()?)?),
            "--retry-max" => {
                let v = value()?;
                retry_max = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("{flag} {v:?}: expected a number of attempts"))?,
                );
            }
            "--retry-ms" => retry_ms = Some(ms(value()?)?),
            "--poison" => poison = true,
            "--heal-file" => heal_file = Some(value()?),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    cfg.url = url.unwrap_or_else(|| DEFAULT_URL.to_string());
    cfg.namespace = ns.ok_or("--namespace is required (see --help)")?;
    let log = log.ok_or("--log is required (see --help)")?;
    if retry_max.is_some() || retry_ms.is_some() {
        cfg.retry = RetryPolicy::fixed(
            retry_max.unwrap_or(25),
            retry_ms.unwrap_or(Duration::from_secs(1)),
        );
    }
    cfg.tls_client_cert = match (tls_cert, tls_key) {
        (Some(chain), Some(key)) => Some(tickwheel_redis::ClientCert { chain, key }),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together (see --help)".into()),
    };
    if heal_file.is_some() && !poison {
        return Err("--heal-file needs --poison (see --help)".into());
    }
    let poison = poison.then_some(Poison { heal_file });
    Ok(Some(Args {
        cfg,
        log,
        metrics,
        poison,
    }))
}

fn run() -> Result<(), String> {
    let Args {
        cfg,
        log,
        metrics,
        poison,
    } = match parse_args(std::env::args().skip(1))? {
        None => {
            print!("{USAGE}");
            return Ok(());
        }
        Some(args) => args,
    };
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
    if poison.is_some() {
        quiet_poison_panics();
    }
    let pid = std::process::id();
    let mut failed = None;
    worker
        .run(|d| match file.write_all(log_line(d, pid).as_bytes()) {
            Ok(()) => poison
                .as_ref()
                .and_then(|p| p.outcome(d))
                .unwrap_or(Outcome::Ack),
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

/// Panics of `poison-panic-*` tasks are expected: the default hook reports every other.
fn quiet_poison_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>();
        if !msg.is_some_and(|m| m.starts_with("poison panic attempt ")) {
            default(info);
        }
    }));
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
fn metrics_addr_of(v: String) -> Result<String, String> {
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
