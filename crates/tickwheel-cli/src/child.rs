//! Runs one entrant of a real-clock workload in a fresh child process: `tickwheel` itself,
//! with a hidden subcommand (`service-worker` for W4, `future-worker` for W8) that runs the
//! entrant, draws any progress on the inherited stderr and prints one JSON sample on stdout.
//! In a process of its own, an entrant's memory, threads and CPU time are its own.

use crate::error::{Error, Result};
use serde_json::Value;
use std::process::{Command, Stdio};

/// Runs `tickwheel ARGS` for `entrant` of `workload` and returns the sample it printed,
/// read by `parse`; a failed child, or output that is no sample, is an [`Error::Worker`].
pub fn run<T>(
    workload: &'static str,
    entrant: &'static str,
    args: &[String],
    parse: impl FnOnce(&Value) -> Option<T>,
) -> Result<T> {
    let failed = |problem: String| Error::Worker {
        workload,
        entrant,
        problem,
    };
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find own executable", e))?;
    let output = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::io(format!("cannot start the {workload} worker"), e))?;
    if !output.status.success() {
        return Err(failed(format!(
            "failed ({}); its message is above",
            output.status
        )));
    }
    let json: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| failed(format!("printed no sample: {e}")))?;
    parse(&json).ok_or_else(|| failed("printed a malformed sample".to_owned()))
}
