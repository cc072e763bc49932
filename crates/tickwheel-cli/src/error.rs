//! The CLI's one error type: why a command failed. Its `Display` is the line `tickwheel`
//! prints (after `error: `) before exiting with status 1.
//!
//! A leaf module: every other module may use it, it uses none of them.

use std::fmt;
use std::path::PathBuf;

/// Why a `tickwheel` command failed.
#[derive(Debug)]
pub enum Error {
    /// A run's check failed: a timer fired early, twice or never, a cancel found nothing, a
    /// task ran that was never scheduled. The text names the timer and what it did. No
    /// number is reported for such a run.
    Check(String),
    /// `entrant` failed `workload` (a failed check, or a failure to set it up).
    Failed {
        /// The entrant's name, as in the tables.
        entrant: &'static str,
        /// The workload's label (`W1` …).
        workload: &'static str,
        /// Why.
        source: Box<Error>,
    },
    /// `entrant` panicked in `workload`.
    Panicked {
        /// The entrant's name, as in the tables.
        entrant: &'static str,
        /// The workload's label.
        workload: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A combination the command line never makes: a workload given to a runner of another
    /// family, or the input of another workload. A bug in the CLI if it shows.
    Internal(String),
    /// The chosen workloads and entrants leave nothing to run.
    NothingToRun,
    /// The system refused something: a thread, a runtime, a child process, the timer
    /// service, a file or directory. `what` says what was attempted.
    Io {
        /// What was attempted.
        what: String,
        /// The system's answer.
        source: std::io::Error,
    },
    /// The child process that runs one W4 or W8 entrant failed, or printed no usable sample.
    Worker {
        /// The workload's label.
        workload: &'static str,
        /// The entrant it ran.
        entrant: &'static str,
        /// What went wrong.
        problem: String,
    },
    /// A plot could not be drawn.
    Plot {
        /// The file it was drawn to.
        path: PathBuf,
        /// The plotting library's message.
        message: String,
    },
    /// W6 failed: no `redis-server`, an unreachable Redis, a failed check of its own.
    Durable(tickwheel_redis::Error),
}

impl Error {
    /// An [`Error::Io`] for `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Check(what) => f.write_str(what),
            Error::Failed {
                entrant,
                workload,
                source,
            } => write!(f, "{entrant} failed {workload}: {source}"),
            Error::Panicked {
                entrant,
                workload,
                message,
            } => write!(f, "{entrant} panicked in {workload}: {message}"),
            Error::Internal(what) => write!(f, "internal error: {what}"),
            Error::NothingToRun => {
                f.write_str("nothing to run: no chosen entrant runs any chosen workload")
            }
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Worker {
                workload,
                entrant,
                problem,
            } => write!(f, "{workload} worker for {entrant} {problem}"),
            Error::Plot { path, message } => write!(f, "plot {}: {message}", path.display()),
            Error::Durable(e) => write!(f, "W6 (durable tasks on Redis): {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Failed { source, .. } => Some(source.as_ref()),
            Error::Io { source, .. } => Some(source),
            Error::Durable(e) => Some(e),
            _ => None,
        }
    }
}

/// The result of everything that can fail in the CLI.
pub type Result<T, E = Error> = std::result::Result<T, E>;
