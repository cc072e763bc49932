//! Prints the next 10 runs of a cron pattern in a time zone, then runs a job at each run on
//! the real clock until Ctrl-C (or after the first run with `--once`; `--list` only prints).
//!
//! ```text
//! cargo run -p tickwheel --example cron -- "0 9 * * TUE" Europe/Paris
//! cargo run -p tickwheel --example cron -- "*/2 * * * * *" Asia/Kolkata --once
//! ```
//!
//! With no pattern it uses `*/2 * * * * *` (every two seconds) in `Europe/Paris`.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::SystemTime;

use tickwheel::cron::jiff::{Timestamp, Zoned};
use tickwheel::cron::Cron;
use tickwheel::service::Recurrence;
use tickwheel::TimerService;

fn main() -> ExitCode {
    let mut once = false;
    let mut list_only = false;
    let mut positional = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--once" => once = true,
            "--list" => list_only = true,
            "-h" | "--help" => {
                println!("usage: cron [PATTERN] [ZONE] [--once | --list]");
                return ExitCode::SUCCESS;
            }
            _ => positional.push(arg),
        }
    }
    let pattern = positional.first().map_or("*/2 * * * * *", String::as_str);
    let zone = positional.get(1).map_or("Europe/Paris", String::as_str);
    let cron = match Cron::new(pattern, zone) {
        Ok(cron) => cron,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tz = cron.time_zone().clone();
    let show = |t: Timestamp| Zoned::new(t, tz.clone()).strftime("%a %Y-%m-%d %H:%M:%S %Z (%:z)");

    println!(
        "{pattern:?} in {zone} ({}):",
        if cron.is_interval_like() {
            "interval-like: runs at every wall time that occurs"
        } else {
            "fixed-time: once right after a DST gap, first pass of a repeated hour"
        }
    );
    for at in cron.iter_after(Timestamp::now()).take(10) {
        println!("  {}", show(at));
    }
    if list_only {
        return ExitCode::SUCCESS;
    }

    let service = match TimerService::builder().worker_threads(1).build() {
        Ok(service) => service,
        Err(e) => {
            eprintln!("error: cannot start the timer service: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (tx, rx) = mpsc::channel();
    let handle = service.schedule_recurring(Recurrence::cron(cron), move || {
        let _ = tx.send(SystemTime::now());
    });
    if let Some(next) = handle.next_run_wall() {
        let next = Timestamp::try_from(next).unwrap_or(Timestamp::UNIX_EPOCH);
        println!("running a job at each run; the next at {}", show(next));
    }
    for ran_at in rx {
        let at = Timestamp::try_from(ran_at).unwrap_or(Timestamp::UNIX_EPOCH);
        println!("job ran at {}", show(at));
        if once {
            handle.cancel();
            break;
        }
    }
    ExitCode::SUCCESS
}
