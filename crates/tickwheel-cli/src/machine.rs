//! What machine and build produced the numbers: CPU model, cores, OS, build profile, and the
//! process's CPU time and peak memory (Linux `/proc`; "unknown"/`None` elsewhere).

use std::time::Duration;

/// A description of the machine the run happened on.
#[derive(Debug, Clone)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Cores available to this process.
    pub cores: usize,
    /// OS and kernel release.
    pub os: String,
    /// `release` or `debug` (debug numbers are not meaningful).
    pub profile: &'static str,
}

impl Machine {
    /// Reads the current machine.
    pub fn detect() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: format!("{} {}", std::env::consts::OS, kernel.trim()),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }
}

/// Clock ticks per second of `/proc/self/stat` times (USER_HZ; 100 on every Linux ABI).
const USER_HZ: u64 = 100;

/// User + system CPU time of this process so far (`None` without `/proc`).
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / USER_HZ))
}

/// The CPU time of each live thread of this process, to the nanosecond: its time on a core
/// from the scheduler's statistics (`/proc/self/task/*/schedstat`), which the kernel brings
/// up to date when the thread leaves its core (and at scheduler ticks while it runs).
#[derive(Debug, Clone)]
pub struct ThreadTimes(std::collections::HashMap<String, u64>);

impl ThreadTimes {
    /// Every live thread's CPU time so far; `None` where the kernel does not report it.
    pub fn now() -> Option<ThreadTimes> {
        let mut times = std::collections::HashMap::new();
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let task = task.ok()?;
            // A thread may exit between the listing and the read: it no longer counts.
            let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let ns = stat.split_whitespace().next()?.parse().ok()?;
            times.insert(task.file_name().to_string_lossy().into_owned(), ns);
        }
        Some(ThreadTimes(times))
    }

    /// The CPU time the process's threads used since `self` was taken: each live thread's
    /// growth (from zero for one started since); a thread that has exited since is left out.
    pub fn elapsed(&self) -> Option<Duration> {
        let now = ThreadTimes::now()?;
        let ns = now
            .0
            .iter()
            .map(|(tid, &ns)| ns.saturating_sub(self.0.get(tid).copied().unwrap_or(0)))
            .sum();
        Some(Duration::from_nanos(ns))
    }
}

/// Resets the kernel's peak-RSS mark so [`peak_rss_bytes`] measures from now on.
/// Returns `false` where that is not possible (then the peak is since process start).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size (`VmHWM`) in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Current resident set size (`VmRSS`) in bytes.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
