//! What happens when a handler fails: the retry policy, the failed set's retention, and the
//! errors kept of failed attempts.

use std::time::Duration;

use crate::config::Config;
use crate::error::Error;

/// How a task whose handler fails is retried, and when it fails for good.
///
/// A *failed attempt* is a handler call that returned [`Outcome::Failed`](crate::Outcome)
/// or panicked. After failed attempt `n` the task is pending again after
/// `min(max_delay, initial_delay * factor^(n-1))`, less up to `jitter` of that (a random
/// share, so that tasks that failed together do not come back together); once
/// `max_attempts` attempts have failed it moves to its shard's *failed set* with the errors
/// of its attempts, where an operator retries or discards it
/// ([`Producer::retry_failed`](crate::Producer::retry_failed)). An
/// [`Outcome::NonRetryable`](crate::Outcome::NonRetryable) moves it there at once.
///
/// The namespace's policy is [`Config::retry`]; a task may carry its own
/// ([`Task::retry`](crate::Task::retry)), stored with it. Deliveries that never reached a
/// handler's verdict (the worker crashed or stalled with the task in hand, its visibility
/// timeout ran out) are not failed attempts: they are delivered again and count in
/// [`Delivery::attempt`](crate::Delivery::attempt) only.
///
/// The default, [`RetryPolicy::DEFAULT`], follows what Sidekiq and River do: 25 attempts,
/// exponential backoff from 1 s doubling up to 1 h, 20 % jitter. A task that always fails
/// spends about 14 hours retrying before it reaches the failed set.
///
/// | failed attempts | delay before the next (no jitter) |
/// |---:|---:|
/// | 1 | 1 s |
/// | 2 | 2 s |
/// | 5 | 16 s |
/// | 12 | 34 min 8 s |
/// | 13 and on | 1 h |
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Failed attempts before the task moves to the failed set (1: no retry). Zero: no
    /// limit, the task is retried for ever.
    pub max_attempts: u32,
    /// The delay after the first failed attempt.
    pub initial_delay: Duration,
    /// What each further failed attempt multiplies the delay by: 1.0 ..= 1000.0 (1.0: a
    /// fixed delay).
    pub factor: f64,
    /// The longest delay (from 1 ms to [`Config::MAX_DURATION`]).
    pub max_delay: Duration,
    /// The share of each delay taken off at random: 0.0 (none) ..= 1.0 (anywhere from zero
    /// to the full delay). Jitter only shortens a delay, so `max_delay` stays the longest.
    pub jitter: f64,
    /// For a recurring task: whether a run that fails for good ends the series. By default
    /// (`false`) the failed run goes to the failed set and the series goes on at its next
    /// run, as an acknowledged run would. A run retried after a failure (or a snooze) is
    /// delivered at the retry's run-at, and the series keeps its phase: the next run is the
    /// schedule's first instant after the retry, counted from the run's own due time.
    pub stop_series_on_failure: bool,
}

impl RetryPolicy {
    /// 25 attempts, 1 s doubling up to 1 h, 20 % jitter; a recurring series goes on.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: 25,
        initial_delay: Duration::from_secs(1),
        factor: 2.0,
        max_delay: Duration::from_secs(3600),
        jitter: 0.2,
        stop_series_on_failure: false,
    };

    /// No retry: the first failed attempt moves the task to the failed set.
    pub fn no_retry() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::DEFAULT
        }
    }

    /// `max_attempts` attempts, `delay` apart, without jitter.
    pub fn fixed(max_attempts: u32, delay: Duration) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_delay: delay,
            factor: 1.0,
            max_delay: delay,
            jitter: 0.0,
            stop_series_on_failure: false,
        }
    }

    /// The delay after failed attempt `failures` (from 1) before jitter, as the scripts
    /// compute it, to the millisecond.
    pub fn delay_after(&self, failures: u32) -> Duration {
        let initial = self.initial_delay.as_millis() as f64;
        let cap = self.max_delay.as_millis() as f64;
        let n = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let ms = (initial * self.factor.powi(n)).min(cap);
        Duration::from_millis(ms.floor() as u64)
    }

    /// Checks the ranges documented on each field; `what` names the setting in the error.
    pub(crate) fn validate(&self, what: &str) -> Result<(), Error> {
        let bad = |m: String| Err(Error::InvalidConfig(format!("{what}: {m}")));
        if !(self.factor.is_finite() && (1.0..=1000.0).contains(&self.factor)) {
            return bad(format!(
                "factor must be 1.0 ..= 1000.0, not {}",
                self.factor
            ));
        }
        if !(self.jitter.is_finite() && (0.0..=1.0).contains(&self.jitter)) {
            return bad(format!("jitter must be 0.0 ..= 1.0, not {}", self.jitter));
        }
        for (name, d) in [
            ("initial_delay", self.initial_delay),
            ("max_delay", self.max_delay),
        ] {
            if d < Duration::from_millis(1) || d > Config::MAX_DURATION {
                return bad(format!(
                    "{name} must be 1 ms ..= 100 years (Config::MAX_DURATION), not {d:?}"
                ));
            }
        }
        if self.initial_delay > self.max_delay {
            return bad("initial_delay must be at most max_delay".into());
        }
        Ok(())
    }

    /// The policy as the scripts read it: `max,initial ms,factor,cap ms,jitter,stop` (see
    /// `fail.lua`). Rust prints floats without an exponent, which Lua's `tonumber` reads.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{},{},{},{},{},{}",
            self.max_attempts,
            self.initial_delay.as_millis(),
            self.factor,
            self.max_delay.as_millis(),
            self.jitter,
            u8::from(self.stop_series_on_failure)
        )
    }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::DEFAULT
    }
}

/// How many failed tasks a namespace keeps, and for how long: the oldest beyond either
/// bound are removed when a task enters the failed set (counted in
/// [`ShardStats::trimmed`](crate::ShardStats::trimmed), never silently). The count is
/// shared out evenly among the shards (each keeps `ceil(max_count / shards)`). The default,
/// as Sidekiq's dead set: 10 000 tasks, 180 days.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The most failed tasks kept (at least 1).
    pub max_count: u64,
    /// The longest a failed task is kept (1 s ..= [`Config::MAX_DURATION`]).
    pub max_age: Duration,
}

impl Retention {
    /// 10 000 failed tasks, 180 days.
    pub const DEFAULT: Retention = Retention {
        max_count: 10_000,
        max_age: Duration::from_secs(180 * 86_400),
    };

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.max_count == 0 || self.max_count > 1 << 40 {
            return Err(Error::InvalidConfig(format!(
                "failed_retention.max_count must be 1 ..= 2^40, not {}",
                self.max_count
            )));
        }
        if self.max_age < Duration::from_secs(1) || self.max_age > Config::MAX_DURATION {
            return Err(Error::InvalidConfig(format!(
                "failed_retention.max_age must be 1 s ..= 100 years, not {:?}",
                self.max_age
            )));
        }
        Ok(())
    }

    /// What one of `shards` shards keeps.
    pub(crate) fn per_shard(&self, shards: usize) -> u64 {
        self.max_count.div_ceil(shards.max(1) as u64)
    }
}

impl Default for Retention {
    fn default() -> Retention {
        Retention::DEFAULT
    }
}

/// Why a task is in the failed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailReason {
    /// Its retry policy's `max_attempts` attempts failed.
    Exhausted,
    /// A handler said it cannot succeed
    /// ([`Outcome::NonRetryable`](crate::Outcome::NonRetryable)).
    NonRetryable,
}

impl FailReason {
    /// The reason as stored and as a metric label: `exhausted`, `non_retryable`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Exhausted => "exhausted",
            FailReason::NonRetryable => "non_retryable",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<FailReason, Error> {
        match s {
            "exhausted" => Ok(FailReason::Exhausted),
            "non_retryable" => Ok(FailReason::NonRetryable),
            _ => Err(Error::Protocol(format!("a failure reason {s:?}"))),
        }
    }
}

/// Tasks moved to the failed set, counted by [`FailReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailedCounts {
    /// [`FailReason::Exhausted`].
    pub exhausted: u64,
    /// [`FailReason::NonRetryable`].
    pub non_retryable: u64,
}

impl FailedCounts {
    /// Counts one.
    pub fn record(&mut self, reason: FailReason) {
        match reason {
            FailReason::Exhausted => self.exhausted += 1,
            FailReason::NonRetryable => self.non_retryable += 1,
        }
    }

    /// Each reason with its count.
    pub fn by_reason(&self) -> [(FailReason, u64); 2] {
        [
            (FailReason::Exhausted, self.exhausted),
            (FailReason::NonRetryable, self.non_retryable),
        ]
    }
}

/// One failed attempt as kept: which, when, and the error the handler gave (or the panic's
/// message), at most [`MAX_ERROR_LEN`] bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptError {
    /// The delivery's [`attempt`](crate::Delivery::attempt).
    pub attempt: u32,
    /// When the failure was recorded, ms since the Unix epoch (by the namespace's clock).
    pub at_ms: u64,
    /// The error text.
    pub error: String,
}

/// A task's failed attempts: how many, since when, and the errors of the latest
/// [`ERRORS_KEPT`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorLog {
    /// Failed attempts counted against the retry policy (set to 0 by an operator's retry;
    /// the errors stay).
    pub failures: u32,
    /// When the first failure was recorded, ms since the Unix epoch (0 when none).
    pub first_failed_ms: u64,
    /// The latest errors, oldest first.
    pub errors: Vec<AttemptError>,
}

/// How many errors a task keeps: the latest this many failed attempts.
pub const ERRORS_KEPT: usize = crate::protocol::scripts::ERRORS_KEPT;

/// The longest error text kept, in bytes: a longer one is cut at a character boundary and
/// ends in `…`.
pub const MAX_ERROR_LEN: usize = 2048;

/// `text` cut to [`MAX_ERROR_LEN`] bytes.
pub(crate) fn bounded(text: &str) -> String {
    if text.len() <= MAX_ERROR_LEN {
        return text.to_string();
    }
    let mut end = MAX_ERROR_LEN - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl ErrorLog {
    /// Reads a log as `log_add` in `prelude.lua` writes it (empty: no failure).
    pub(crate) fn decode(b: &[u8]) -> Result<ErrorLog, Error> {
        /// The number before the next colon, and the rest after it.
        fn num(rest: &mut &[u8]) -> Option<u64> {
            let i = rest.iter().position(|&c| c == b':')?;
            let n = std::str::from_utf8(&rest[..i]).ok()?.parse().ok()?;
            *rest = &rest[i + 1..];
            Some(n)
        }
        let mut log = ErrorLog::default();
        if b.is_empty() {
            return Ok(log);
        }
        let mut rest = b;
        let mut read = || -> Option<()> {
            log.failures = u32::try_from(num(&mut rest)?).ok()?;
            log.first_failed_ms = num(&mut rest)?;
            while !rest.is_empty() {
                let attempt = u32::try_from(num(&mut rest)?).ok()?;
                let at_ms = num(&mut rest)?;
                let len = usize::try_from(num(&mut rest)?).ok()?;
                let text = rest.get(..len)?;
                log.errors.push(AttemptError {
                    attempt,
                    at_ms,
                    error: String::from_utf8_lossy(text).into_owned(),
                });
                rest = &rest[len..];
            }
            Some(())
        };
        read().ok_or_else(|| Error::Protocol("a malformed error log".into()))?;
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in `RetryPolicy`'s docs.
    #[test]
    fn the_default_delays_are_the_documented_table() {
        let p = RetryPolicy::DEFAULT;
        let s = |n| p.delay_after(n).as_secs();
        assert_eq!(
            [s(1), s(2), s(5), s(12), s(13), s(25)],
            [1, 2, 16, 2048, 3600, 3600]
        );
        let total: u64 = (1..25).map(s).sum();
        assert!((13 * 3600..15 * 3600).contains(&total), "{total} s");
        assert_eq!(p.delay_after(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn out_of_range_policies_are_refused_with_the_field_named() {
        let bad = [
            RetryPolicy {
                factor: 0.5,
                ..RetryPolicy::DEFAULT
            },
            RetryPolicy {
                factor: f64::NAN,
                ..RetryPolicy::DEFAULT
            },
            RetryPolicy {
                jitter: 1.5,
                ..RetryPolicy::DEFAULT
            },
            RetryPolicy {
                initial_delay: Duration::ZERO,
                ..RetryPolicy::DEFAULT
            },
            RetryPolicy {
                max_delay: Duration::MAX,
                ..RetryPolicy::DEFAULT
            },
            RetryPolicy {
                initial_delay: Duration::from_secs(7200),
                ..RetryPolicy::DEFAULT
            },
        ];
        for p in bad {
            let e = p.validate("retry").unwrap_err().to_string();
            assert!(e.contains("retry:"), "{e}");
        }
        RetryPolicy::DEFAULT.validate("retry").unwrap();
        RetryPolicy::fixed(3, Duration::from_millis(1))
            .validate("retry")
            .unwrap();
    }

    #[test]
    fn the_encoding_is_what_fail_lua_reads() {
        assert_eq!(RetryPolicy::DEFAULT.encode(), "25,1000,2,3600000,0.2,0");
        let p = RetryPolicy {
            stop_series_on_failure: true,
            ..RetryPolicy::fixed(3, Duration::from_millis(1500))
        };
        assert_eq!(p.encode(), "3,1500,1,1500,0,1");
    }

    #[test]
    fn error_logs_read_as_log_add_writes_them() {
        let log = ErrorLog::decode(b"3:100:2:150:5:a:b:c3:200:0:").unwrap();
        assert_eq!(log.failures, 3);
        assert_eq!(log.first_failed_ms, 100);
        let e: Vec<_> = log
            .errors
            .iter()
            .map(|e| (e.attempt, e.at_ms, e.error.as_str()))
            .collect();
        assert_eq!(e, [(2, 150, "a:b:c"), (3, 200, "")]);
        assert_eq!(ErrorLog::decode(b"").unwrap(), ErrorLog::default());
        for bad in [&b"3:100:2:150:9:short"[..], b"x:1:", b"1:2:3"] {
            assert!(
                ErrorLog::decode(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = bounded(&long);
        assert!(
            cut.len() <= MAX_ERROR_LEN && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        assert_eq!(bounded("short"), "short");
    }
}
