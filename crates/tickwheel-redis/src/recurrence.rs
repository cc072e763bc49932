//! Recurring tasks: a fixed period or a cron pattern in a time zone, stored with the task.

use std::time::Duration;

use tickwheel::cron::jiff::Timestamp;
use tickwheel::cron::Cron;

use crate::error::Error;
use crate::task::RunAt;

/// The longest stored recurrence (a cron pattern and its zone name), in bytes.
pub const MAX_RECURRENCE_LEN: usize = 512;

/// How a recurring task repeats (see
/// [`Producer::schedule_recurring`](crate::Producer::schedule_recurring)).
///
/// The recurrence is stored with the task; the worker that delivers a run computes the next
/// one and the script that acknowledges the run re-arms the task at it, in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recurrence {
    /// Every period (whole milliseconds, at least 1 and below 2^52; a finer period rounds
    /// up to the next whole millisecond, as run-at instants do): runs at
    /// `first + k × period`. A run
    /// answered with [`Outcome::RetryAfter`](crate::Outcome::RetryAfter) is due again at the
    /// retry's instant, and the period counts on from there.
    Every(Duration),
    /// At the instants of a cron pattern in an IANA time zone, with the daylight-saving policy
    /// of [`tickwheel::cron`] (fixed-time runs in a gap run once right after it, in a fold
    /// once in the first pass). Build it with [`Recurrence::cron`], which checks both.
    Cron {
        /// The pattern, as [`Cron::new`] takes it.
        pattern: String,
        /// The IANA zone name (`"Europe/Paris"`, `"UTC"`).
        zone: String,
    },
}

impl Recurrence {
    /// A cron recurrence, checked: [`Error::InvalidRecurrence`] when the pattern or the zone
    /// does not parse, or they are too long to store.
    pub fn cron(pattern: &str, zone: &str) -> Result<Recurrence, Error> {
        let r = Recurrence::Cron {
            pattern: pattern.to_string(),
            zone: zone.to_string(),
        };
        r.encode()?;
        Ok(r)
    }

    /// The first run strictly after `after_ms` (ms since the Unix epoch, as [`RunAt::AtMillis`]):
    /// for a period, `after_ms + period`; for a cron pattern, its next instant. `Ok(None)`
    /// when there is none: a cron pattern that never fires again, or a run at or past
    /// [`RunAt::MAX_MS`], the last run-at a task can have. A series whose next run is `None`
    /// ends with the run in hand.
    pub fn next_after_ms(&self, after_ms: u64) -> Result<Option<u64>, Error> {
        Ok(self.rule()?.next_after(after_ms, after_ms))
    }

    /// The stored form: `p<ms>` or `c<zone> <pattern>`.
    pub(crate) fn encode(&self) -> Result<String, Error> {
        self.rule()?;
        let s = match self {
            Recurrence::Every(d) => format!("p{}", period_ms(*d)?),
            Recurrence::Cron { pattern, zone } => format!("c{zone} {pattern}"),
        };
        if s.len() > MAX_RECURRENCE_LEN {
            return Err(Error::InvalidRecurrence(format!(
                "{} bytes stored, at most {MAX_RECURRENCE_LEN}",
                s.len()
            )));
        }
        Ok(s)
    }

    /// Reads the stored form back (`None` for an empty one: a one-shot task). A period's
    /// phase anchor (see [`split_anchor`]) is not part of the recurrence.
    pub(crate) fn decode(stored: &str) -> Result<Option<Recurrence>, Error> {
        let bad = || Error::InvalidRecurrence(format!("stored recurrence {stored:?}"));
        let (s, _) = split_anchor(stored);
        if s.is_empty() {
            return Ok(None);
        }
        let r = if let Some(ms) = s.strip_prefix('p') {
            Recurrence::Every(Duration::from_millis(ms.parse().map_err(|_| bad())?))
        } else if let Some(rest) = s.strip_prefix('c') {
            let (zone, pattern) = rest.split_once(' ').ok_or_else(bad)?;
            Recurrence::Cron {
                pattern: pattern.to_string(),
                zone: zone.to_string(),
            }
        } else {
            return Err(bad());
        };
        Ok(Some(r))
    }

    /// The evaluable form.
    pub(crate) fn rule(&self) -> Result<Rule, Error> {
        match self {
            Recurrence::Every(d) => Ok(Rule::Every(period_ms(*d)?)),
            Recurrence::Cron { pattern, zone } => {
                if zone.contains(char::is_whitespace) || zone.is_empty() {
                    return Err(Error::InvalidRecurrence(format!("time zone {zone:?}")));
                }
                Cron::new(pattern, zone)
                    .map(|c| Rule::Cron(Box::new(c)))
                    .map_err(|e| Error::InvalidRecurrence(e.to_string()))
            }
        }
    }
}

/// A stored recurrence and its phase anchor: a run retried after a failure or a snooze is
/// stored as `p<ms>@<its due>` (see `anchored` in `prelude.lua`), so that the series' next
/// run keeps the phase of the run, not of its retry. `(stored, None)` for anything else.
pub(crate) fn split_anchor(stored: &str) -> (&str, Option<u64>) {
    if stored.starts_with('p') {
        if let Some((base, at)) = stored.split_once('@') {
            if let Ok(at) = at.parse() {
                return (base, Some(at));
            }
        }
    }
    (stored, None)
}

fn period_ms(d: Duration) -> Result<u64, Error> {
    match crate::task::ceil_ms(d) {
        Some(ms) if ms > 0 && ms < RunAt::MAX_MS => Ok(ms),
        _ => Err(Error::InvalidRecurrence(format!(
            "period {d:?}: 1 ms to below 2^52 ms"
        ))),
    }
}

/// A recurrence ready to evaluate (a parsed cron pattern).
#[derive(Clone, Debug)]
pub(crate) enum Rule {
    Every(u64),
    Cron(Box<Cron>),
}

impl Rule {
    /// The run that follows a run due at `due_ms` and claimed at `claimed_ms`: the first
    /// instant of the schedule after `due_ms` and after `claimed_ms` (runs that fell while the
    /// task waited for its delivery are not delivered one by one; a period keeps its phase).
    /// `None` when the schedule never fires again, or not before [`RunAt::MAX_MS`].
    pub(crate) fn next_after(&self, due_ms: u64, claimed_ms: u64) -> Option<u64> {
        let after = due_ms.max(claimed_ms);
        let next = match self {
            Rule::Every(p) => {
                let k = (after - due_ms) / p + 1;
                due_ms.checked_add(k.checked_mul(*p)?)
            }
            Rule::Cron(c) => {
                let t = Timestamp::from_millisecond(i64::try_from(after).ok()?).ok()?;
                let next = c.next_after(t)?.as_millisecond();
                u64::try_from(next).ok()
            }
        };
        // A run at or past the last run-at a task can have never comes: the series ends.
        next.filter(|&next| next < RunAt::MAX_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_keep_their_phase_and_stored_forms_round_trip() {
        let r = Rule::Every(1000);
        assert_eq!(r.next_after(5000, 5000), Some(6000));
        assert_eq!(r.next_after(5000, 5999), Some(6000));
        assert_eq!(
            r.next_after(5000, 6000),
            Some(7000),
            "a missed run is skipped"
        );
        // The last run-at a task can have is RunAt::MAX_MS - 1: a run past it never comes.
        let last = RunAt::MAX_MS - 1;
        assert_eq!(r.next_after(last - 1000, last - 1000), Some(last));
        assert_eq!(r.next_after(last - 999, last - 999), None);
        assert_eq!(Rule::Every(last).next_after(last, last), None);
        for rec in [
            Recurrence::Every(Duration::from_millis(250)),
            Recurrence::cron("0 9 * * TUE", "Europe/Paris").unwrap(),
        ] {
            let s = rec.encode().unwrap();
            assert_eq!(Recurrence::decode(&s).unwrap(), Some(rec));
        }
        assert_eq!(Recurrence::decode("").unwrap(), None);
        // A retried run's phase anchor is not part of the recurrence.
        assert_eq!(
            Recurrence::decode("p250@1000100").unwrap(),
            Some(Recurrence::Every(Duration::from_millis(250)))
        );
        assert_eq!(split_anchor("p250@1000100"), ("p250", Some(1_000_100)));
        assert_eq!(split_anchor("cUTC @daily"), ("cUTC @daily", None));
        assert!(Recurrence::decode("x").is_err());
        assert!(Recurrence::Every(Duration::ZERO).encode().is_err());
        assert!(Recurrence::cron("0 9 * * TUE", "Europe/Pariss").is_err());
        assert!(Recurrence::cron("not a pattern", "UTC").is_err());
        let long = format!("0 0 1 1 * {}", "x".repeat(600));
        assert!(Recurrence::cron(&long, "UTC").is_err());
    }
}
