//! `tickwheel`: timer numbers on your own machine, side by side with the timers you use today.
//!
//! * `tickwheel bench` runs workloads W1–W8 (defined in `docs/ARCHITECTURE.md`,
//!   "Workloads") on families of entrants, each with identical seeded input, verifies
//!   every firing, and writes a table, CSV, JSON and SVG plots:
//!   - [`queues`]: timer queues on virtual time (W1 schedule + cancel, W2 schedule + fire, W3
//!     reset, W5 churn, W7 steady state): tickwheel's `Wheel`, `HashedWheel` and `Heap` against std
//!     `BinaryHeap`, the `priority-queue` crate, `BTreeMap` à la async-io, tokio-util's
//!     `DelayQueue` and `hierarchical_hash_wheel_timer`;
//!   - [`services`]: timer services on the real clock (W4): tickwheel's `TimerService`
//!     against tokio `sleep` tasks, a `DelayQueue` behind a channel and a heap-plus-thread
//!     baseline;
//!   - [`futures`]: timer futures in a 2-worker tokio runtime (W8): tickwheel's `timeout` and
//!     `sleep` (free functions and `TimerService` methods) against `tokio::time` and
//!     async-io's `Timer`;
//!   - [`durable`]: durable tasks on Redis (W6, opt-in).
//! * `tickwheel demo` schedules 6 million delayed tasks and shows how late they ran.
//! * `tickwheel tasks` shows and steers the durable tasks of a Redis namespace ([`tasks`]).
//! * `tickwheel dashboard` serves a web page on a Redis namespace's durable tasks ([`dashboard`]).
//!
//! Layout: this file parses the command line and calls [`mod@bench`] or [`demo`]; modules
//! never import from it. [`workload`] names the workloads and their family, [`entrant`]
//! joins the families' entrant names, [`report`] and [`plot`] write the files.
//!
//! Exit codes: 0 success, 1 the run failed (a verification failed, an entrant errored, a file
//! could not be written), 2 bad arguments (clap's convention).

/// `println!` that ignores a closed stdout (`tickwheel bench | head` must not panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that ignores a closed stdout.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod bench;
mod child;
mod dashboard;
mod demo;
mod durable;
mod entrant;
mod error;
mod futures;
mod machine;
mod memory;
mod plot;
mod queues;
mod redis_url;
mod report;
mod services;
mod tasks;
mod time;
mod units;
mod workload;

use clap::{Parser, Subcommand};
use entrant::Entrant;
use services::{ServiceEntrant, TickwheelSetup};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use workload::Workload;

/// Every allocation is counted, so the queue workloads can report peak heap bytes.
#[global_allocator]
static ALLOCATOR: memory::CountingAllocator = memory::CountingAllocator;

/// Timer benchmarks and demo for the tickwheel library.
#[derive(Debug, Parser)]
#[command(name = "tickwheel", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run workloads W1–W8 against peer timers; print a table, write CSV, JSON and SVG plots.
    Bench(BenchArgs),
    /// Schedule millions of delayed tasks on a real clock and report lateness, CPU and memory.
    Demo(DemoArgs),
    /// Internal: runs one service entrant on W4 and prints its sample as JSON (`bench` runs
    /// each service in a fresh process this way, so memory and CPU figures are its own).
    #[command(hide = true)]
    ServiceWorker(DemoArgs),
    /// Internal: runs one futures entrant on W8 and prints its sample as JSON (`bench` runs
    /// each in a fresh process this way, so its threads and CPU time are its own).
    #[command(hide = true)]
    FutureWorker(FutureWorkerArgs),
    /// Internal: runs one entrant's repeats of a queue workload and prints their sample as
    /// JSON (`bench` runs each queue entrant in a fresh process this way, so no timed run
    /// starts on memory another entrant freed).
    #[command(hide = true)]
    QueueWorker(QueueWorkerArgs),
    /// See and steer the durable tasks of a tickwheel-redis namespace: stats, ls, show,
    /// failed, upcoming; cancel, reschedule, run-now, retry-failed, discard-failed, pause,
    /// resume.
    Tasks(tasks::TasksArgs),
    /// Serve a web page on a tickwheel-redis namespace: totals, shards, upcoming tasks, tasks
    /// in flight, search by id (read-only unless --allow-writes with a token).
    Dashboard(dashboard::DashboardArgs),
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Seed of the SplitMix64 input generator (identical input for every entrant).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Timer counts for the queue workloads (W1, W2, W3, W5, W7), comma separated (accepts 1e6
    /// and 1_000_000).
    #[arg(long, value_delimiter = ',', value_parser = parse_count,
          default_value = "10000,100000,1000000")]
    n: Vec<usize>,
    /// Also run N = 6·10^6 (W1, W2, W3, W5, W7) and 6·10^6 tasks in W4 (so not with
    /// `--w4-n`).
    #[arg(long, conflicts_with = "w4_n")]
    full: bool,
    /// Workloads to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,w4,w5,w7,w8")]
    workloads: Vec<Workload>,
    /// Entrants to run, comma separated (default: all). Names as in the results table.
    #[arg(long, value_delimiter = ',', value_parser = parse_entrant)]
    entrants: Vec<Entrant>,
    /// Runs per (workload, entrant, N); the median is reported. Default: 5 up to N = 10^5,
    /// 3 up to 10^6, 1 above (W5 counts 10·N, its operations).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: Option<u32>,
    /// Directory for results.csv, results.json and the SVG plots (created if missing).
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Number of tasks in W4 (real time).
    #[arg(long, value_parser = parse_count, default_value = "1000000")]
    w4_n: usize,
    /// Largest W4 delay in milliseconds (the workload's is 1000); smaller values make W4 quick.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    w4_max_delay_ms: u64,
    /// Resolution of the tickwheel entrants in W4, in µs (peers keep their own).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    w4_tick_us: u64,
    /// `wake_interval` of the tickwheel entrants in W4, in µs (0: a wake-up at every tick
    /// with timers due, the default).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    w4_wake_us: u64,
    /// W8: timeouts (and messages) a worker task in each run of its timeout and reset loops.
    #[arg(long, value_parser = parse_count, default_value = "100000")]
    w8_ops: usize,
    /// W8: sleeping tasks.
    #[arg(long, value_parser = parse_count, default_value = "10000")]
    w8_tasks: usize,
    /// W8: the longest sleep in ms; sleeps are uniform from a third of it up to it.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(3..=60_000))]
    w8_max_delay_ms: u64,
    /// W8: the window over which the sleeping tasks' CPU and lateness are measured, in ms.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    w8_window_ms: u64,
    /// Also run W6, durable tasks on Redis (same as adding w6 to --workloads).
    #[arg(long)]
    durable: bool,
    /// Redis for W6; without it W6 starts its own redis-server (which must be installed).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Number of tasks in W6.
    #[arg(long, value_parser = parse_count, default_value = "1000000")]
    durable_n: usize,
    /// Largest W6 delay in milliseconds (the workload's is 60000).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    durable_max_delay_ms: u64,
    /// W6 worker counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    durable_workers: Vec<u16>,
    /// Replicas that must confirm each W6 write (tickwheel-redis's `confirm_replicas`, WAIT),
    /// comma separated: one run per value, e.g. `0,1` to compare. Above 0, W6's own
    /// redis-server gets that many replicas for every run; a --redis server needs its own.
    #[arg(long, value_delimiter = ',', default_value = "0",
          value_parser = clap::value_parser!(u32).range(0..=16))]
    durable_confirm: Vec<u32>,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Number of delayed tasks.
    #[arg(long, value_parser = parse_count, default_value = "6000000")]
    n: usize,
    /// Largest delay in milliseconds; delays are uniform in 0..=this.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    max_delay_ms: u64,
    /// Seed of the delay generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Which real-time timer runs the demo. The default is tickwheel's service with no
    /// workers: the demo's callbacks only record a timestamp, so they run on the timer
    /// thread (`tickwheel-service` runs them on a worker pool).
    #[arg(long, value_parser = parse_service, default_value = "tickwheel-service-here")]
    entrant: ServiceEntrant,
    /// Resolution of the tickwheel service, in µs (other entrants keep their own).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    tick_us: u64,
    /// `wake_interval` of the tickwheel service, in µs (0: the default).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    wake_us: u64,
}

/// What `tickwheel future-worker` runs: one W8 entrant, sized as `bench` says.
#[derive(Debug, clap::Args)]
struct FutureWorkerArgs {
    #[arg(long, value_parser = parse_future)]
    entrant: futures::FutureEntrant,
    #[arg(long, value_parser = parse_count)]
    ops: usize,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    #[arg(long, value_parser = parse_count)]
    tasks: usize,
    #[arg(long, value_parser = clap::value_parser!(u64).range(3..=60_000))]
    max_delay_ms: u64,
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    window_ms: u64,
    #[arg(long)]
    seed: u64,
}

/// What `tickwheel queue-worker` runs: one entrant's warm-up and timed repeats of a queue
/// workload.
#[derive(Debug, clap::Args)]
struct QueueWorkerArgs {
    #[arg(long, value_parser = parse_queue)]
    entrant: queues::QueueEntrant,
    #[arg(long)]
    workload: Workload,
    #[arg(long, value_parser = parse_count)]
    n: usize,
    #[arg(long)]
    seed: u64,
    /// Timed runs after the warm-up.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
}

/// The largest timer count accepted: ids are `u32`, and memory must stay sane.
const MAX_COUNT: usize = 100_000_000;

/// Parses a timer count: `10000`, `10_000`, `1e4` or `6e6`, in `1..=MAX_COUNT`.
fn parse_count(text: &str) -> Result<usize, String> {
    let clean: String = text.trim().chars().filter(|&c| c != '_').collect();
    let value = match clean.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let m: u64 = mantissa
                .parse()
                .map_err(|_| format!("`{text}` is not a count"))?;
            let e: u32 = exponent
                .parse()
                .map_err(|_| format!("`{text}` is not a count"))?;
            // Overflow is "too big", not "not a number".
            Some(
                10u64
                    .checked_pow(e)
                    .and_then(|p| p.checked_mul(m))
                    .unwrap_or(u64::MAX),
            )
        }
        None => clean.parse::<u64>().ok(),
    };
    match value {
        Some(v) if (1..=MAX_COUNT as u64).contains(&v) => Ok(v as usize),
        Some(_) => Err(format!("count must be between 1 and {MAX_COUNT}")),
        None => Err(format!(
            "`{text}` is not a count (examples: 10000, 1e6, 1_000_000)"
        )),
    }
}

fn parse_entrant(text: &str) -> Result<Entrant, String> {
    text.parse()
}

fn parse_service(text: &str) -> Result<ServiceEntrant, String> {
    match text.parse()? {
        Entrant::Service(s) => Ok(s),
        other => {
            let names: Vec<&str> = ServiceEntrant::ALL.iter().map(|e| e.name()).collect();
            Err(format!(
                "{other} is not a real-time entrant; use {}",
                names.join(", ")
            ))
        }
    }
}

fn parse_queue(text: &str) -> Result<queues::QueueEntrant, String> {
    match text.parse()? {
        Entrant::Queue(q) => Ok(q),
        other => Err(format!("{other} is not a queue entrant")),
    }
}

fn parse_future(text: &str) -> Result<futures::FutureEntrant, String> {
    match text.parse()? {
        Entrant::Future(f) => Ok(f),
        other => Err(format!("{other} is not a W8 entrant")),
    }
}

/// Runs one W8 entrant and prints its sample as JSON on stdout.
fn future_worker(args: FutureWorkerArgs) -> error::Result<()> {
    let sample = futures::run(args.entrant, &future_settings(&args))?;
    say!("{}", sample.to_json());
    Ok(())
}

fn future_settings(args: &FutureWorkerArgs) -> futures::FutureSettings {
    futures::FutureSettings {
        ops: args.ops as u64,
        repeats: args.repeat,
        tasks: args.tasks,
        max_delay: Duration::from_millis(args.max_delay_ms),
        window: Duration::from_millis(args.window_ms),
        seed: args.seed,
    }
}

fn demo_settings(args: DemoArgs) -> demo::DemoSettings {
    demo::DemoSettings {
        n: args.n,
        max_delay_ms: args.max_delay_ms,
        seed: args.seed,
        entrant: args.entrant,
        setup: TickwheelSetup {
            tick: Duration::from_micros(args.tick_us),
            wake_interval: Duration::from_micros(args.wake_us),
        },
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `tickwheel tasks --json` wants even a usage error as JSON; all else as clap says.
        Err(e) => return tasks::usage_error(e),
    };
    let command_line = redis_url::command_line(&std::env::args().collect::<Vec<_>>());
    let result = match cli.command {
        Command::Bench(args) => bench::run(bench_settings(args, command_line)),
        Command::Demo(args) => demo::run(&demo_settings(args)),
        Command::ServiceWorker(args) => demo::worker(&demo_settings(args)),
        Command::FutureWorker(args) => future_worker(args),
        Command::QueueWorker(a) => queues::worker(a.entrant, a.workload, a.seed, a.n, a.repeat),
        // Prints its own errors (the message says which Redis and namespace failed).
        Command::Tasks(args) => return tasks::run(args),
        Command::Dashboard(args) => return dashboard::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn bench_settings(args: BenchArgs, command_line: String) -> bench::Settings {
    let mut ns = args.n;
    if args.full {
        ns.push(6_000_000);
    }
    ns.sort_unstable();
    ns.dedup();
    let mut workloads = args.workloads;
    if args.durable {
        workloads.push(Workload::DurableTasks);
    }
    workloads.sort_unstable();
    workloads.dedup();
    let mut entrants = if args.entrants.is_empty() {
        Entrant::all()
    } else {
        args.entrants
    };
    entrants.sort_unstable();
    entrants.dedup();
    bench::Settings {
        seed: args.seed,
        ns,
        workloads,
        entrants,
        repeat: args.repeat,
        out: args.out,
        w4_n: if args.full { 6_000_000 } else { args.w4_n },
        w4_max_delay_ms: args.w4_max_delay_ms,
        w4: TickwheelSetup {
            tick: Duration::from_micros(args.w4_tick_us),
            wake_interval: Duration::from_micros(args.w4_wake_us),
        },
        durable: durable::DurableSettings {
            redis_url: args.redis,
            n: args.durable_n,
            max_delay_ms: args.durable_max_delay_ms,
            workers: args.durable_workers.into_iter().map(usize::from).collect(),
            confirm: args.durable_confirm,
        },
        futures: futures::FutureSettings {
            ops: args.w8_ops as u64,
            repeats: args.repeat.unwrap_or(3),
            tasks: args.w8_tasks,
            max_delay: Duration::from_millis(args.w8_max_delay_ms),
            window: Duration::from_millis(args.w8_window_ms),
            seed: args.seed,
        },
        command_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_in_every_spelling_and_reject_nonsense() {
        assert_eq!(parse_count("10000"), Ok(10_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("6e6"), Ok(6_000_000));
        assert!(parse_count("0").is_err());
        assert!(parse_count("-5").is_err());
        assert!(parse_count("1e30").is_err());
        assert!(parse_count("abc").is_err());
        assert!(parse_count("").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
