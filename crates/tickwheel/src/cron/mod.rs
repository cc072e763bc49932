//! Calendar schedules (feature `cron`, on by default): cron patterns evaluated in an IANA
//! time zone, with a defined policy for daylight-saving changes.
//!
//! A [`Cron`] is a pattern plus a time zone. It answers one question,
//! [`next_after`](Cron::next_after): the first instant after a given one at which the
//! schedule fires. [`TimerService::schedule_recurring`](crate::TimerService::schedule_recurring)
//! with [`Recurrence::cron`](crate::service::Recurrence::cron) runs a callback at those instants;
//! [`CronStream`](crate::future::CronStream) yields them to async code.
//!
//! ```
//! use tickwheel::cron::{jiff::Timestamp, Cron};
//!
//! // Tuesdays at 09:00 in Paris.
//! let cron = Cron::new("0 9 * * TUE", "Europe/Paris").unwrap();
//! let after: Timestamp = "2026-03-20T00:00:00Z".parse().unwrap();
//! let next = cron.next_after(after).unwrap();
//! assert_eq!(next.to_string(), "2026-03-24T08:00:00Z"); // 09:00 CET = 08:00 UTC
//! // Bad input is an error at construction, never a panic.
//! assert!(Cron::new("0 9 * * TUESDAY-ish", "Europe/Paris").is_err());
//! assert!(Cron::new("0 9 * * TUE", "Europe/Pariss").is_err());
//! ```
//!
//! # Patterns
//!
//! Parsed by the `croner` crate: 5 fields (`minute hour day-of-month month day-of-week`),
//! 6 (a leading `second`) or 7 (and a trailing `year`); `*`, lists, ranges, steps (`*/15`),
//! names (`JAN`, `TUE`), `L` (last day of the month, last weekday of the month: `5L`), `W`
//! (nearest weekday: `15W`), `#` (nth weekday: `TUE#2`), and the nicknames (`@daily`…). The
//! day-of-month and day-of-week fields combine with OR, as in Vixie cron (a leading `+` on
//! the day-of-week field makes it AND). Times are whole seconds.
//!
//! # Daylight-saving policy
//!
//! A pattern names *wall-clock* times; a zone's clock skips some (a gap: spring forward) and
//! shows others twice (a fold: fall back). The schedule decides what runs when:
//!
//! * A pattern is **interval-like** when its second, minute or hour field is a wildcard or a
//!   step (`*`, `*/5`, `10-50/20`): "every minute", "every hour at :30". It is a clock-watcher:
//!   it runs at every wall-clock time that occurs, **in both passes** of a repeated hour,
//!   and wall-clock times that do not occur (inside a gap) do not run.
//! * Every other pattern is **fixed-time** (single values, lists, ranges: "at 02:30", "at 09:00
//!   and 17:00"): each matching wall-clock time is one appointment.
//!   * In a **gap**, the appointment runs **once, right after the gap** — at the transition
//!     instant, the first instant whose wall-clock time is past the gap. Several appointments
//!     in one gap, or one that coincides with the first time after the gap, run once.
//!   * In a **fold**, it runs **once, in the first pass** (the earlier instant). With
//!     [`Repeated::Both`] it runs in both passes.
//! * Zones without transitions (`Asia/Kolkata`, `UTC`) are plain: every matching time runs.
//!
//! Fire instants are strictly increasing. Where no transition is involved they are what
//! `croner`'s own `find_next_occurrence` gives. `croner` has a DST rule of its own that
//! classifies only single-value times as fixed (so "at 09:00 and 17:00" would run twice in a
//! fold and not at all in a gap); this module implements the policy above on top of
//! `croner`'s civil-time matching instead: it walks the zone's offset segments (from
//! `jiff`'s transition tables) and asks `croner` only about wall-clock times.
//!
//! # Time zones
//!
//! Zones are IANA names looked up with `jiff`: the system's `/usr/share/zoneinfo` when it
//! exists (so tz updates arrive with the OS), else the copy of the tz database built into
//! the binary (feature `tzdb-bundle-always` of `jiff`), so a schedule works the same on a
//! machine or container without zoneinfo. [`jiff`] is re-exported so callers use the same
//! version.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

pub use jiff;

use croner::parser::CronParser;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Why a [`Cron`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CronError {
    /// The pattern does not parse.
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// What the parser objected to.
        reason: String,
    },
    /// The pattern parses but names no time that exists from 1970 on (`0 0 30 2 *`).
    NeverMatches {
        /// The pattern as given.
        pattern: String,
    },
    /// The time zone name is not in the tz database.
    UnknownTimeZone {
        /// The name as given.
        name: String,
        /// What the lookup said.
        reason: String,
    },
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CronError::InvalidPattern { pattern, reason } => {
                write!(f, "invalid cron pattern {pattern:?}: {reason}")
            }
            CronError::NeverMatches { pattern } => {
                write!(f, "cron pattern {pattern:?} matches no time from 1970 on")
            }
            CronError::UnknownTimeZone { name, reason } => {
                write!(f, "unknown time zone {name:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for CronError {}

/// What a fixed-time pattern does in a repeated hour (a fold, when clocks go back). See the
/// [daylight-saving policy](self#daylight-saving-policy). Interval-like patterns always run in
/// both passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Repeated {
    /// Run once, at the first (earlier) of the two instants. The default.
    #[default]
    First,
    /// Run at both instants.
    Both,
}

/// A cron pattern in a time zone: the instants at which a calendar schedule fires. See the
/// [module documentation](self) for the syntax and the daylight-saving policy.
///
/// Cheap to clone (the zone is reference-counted).
#[derive(Clone)]
pub struct Cron {
    source: String,
    pattern: croner::Cron,
    tz: TimeZone,
    interval_like: bool,
    repeated: Repeated,
}

impl Cron {
    /// `pattern` in the IANA zone `time_zone` (`"Europe/Paris"`, `"UTC"`).
    ///
    /// # Errors
    ///
    /// [`CronError::InvalidPattern`], [`CronError::NeverMatches`] or
    /// [`CronError::UnknownTimeZone`].
    pub fn new(pattern: &str, time_zone: &str) -> Result<Cron, CronError> {
        let tz = jiff::tz::db()
            .get(time_zone)
            .map_err(|e| CronError::UnknownTimeZone {
                name: time_zone.to_string(),
                reason: e.to_string(),
            })?;
        Cron::with_time_zone(pattern, tz)
    }

    /// `pattern` in UTC.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), less the zone lookup.
    pub fn utc(pattern: &str) -> Result<Cron, CronError> {
        Cron::with_time_zone(pattern, TimeZone::UTC)
    }

    /// `pattern` in an already resolved zone (for example `TimeZone::system()`).
    ///
    /// # Errors
    ///
    /// [`CronError::InvalidPattern`] or [`CronError::NeverMatches`].
    pub fn with_time_zone(pattern: &str, tz: TimeZone) -> Result<Cron, CronError> {
        let parsed = CronParser::new()
            .parse(pattern)
            .map_err(|e| CronError::InvalidPattern {
                pattern: pattern.to_string(),
                reason: e.to_string(),
            })?;
        let p = &parsed.pattern;
        let interval_like = [&p.seconds, &p.minutes, &p.hours]
            .iter()
            .any(|field| field.from_wildcard || field.step > 1);
        let cron = Cron {
            source: pattern.to_string(),
            pattern: parsed,
            tz,
            interval_like,
            repeated: Repeated::First,
        };
        // A pattern that never matches would make every search run to croner's year limit.
        let epoch = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);
        if cron.next_civil(epoch).is_none() {
            return Err(CronError::NeverMatches {
                pattern: pattern.to_string(),
            });
        }
        Ok(cron)
    }

    /// What a fixed-time pattern does in a repeated hour (default [`Repeated::First`]).
    pub fn repeated(mut self, repeated: Repeated) -> Cron {
        self.repeated = repeated;
        self
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.source
    }

    /// The time zone.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// Whether the pattern is interval-like (a wildcard or step in its second, minute or hour
    /// field) rather than fixed-time; see the [policy](self#daylight-saving-policy).
    pub fn is_interval_like(&self) -> bool {
        self.interval_like
    }

    /// Whether the wall-clock time of `at` in the zone matches the pattern (ignoring
    /// sub-second digits). A fixed-time run moved past a gap does not match: its wall-clock
    /// time is the first one after the gap.
    pub fn matches(&self, at: Timestamp) -> bool {
        let civil = self.tz.to_offset(at).to_datetime(at);
        self.pattern.is_time_matching(&civil).unwrap_or(false)
    }

    /// The first instant strictly after `after` at which the schedule fires, by the
    /// [policy](self#daylight-saving-policy); `None` when it never fires again (a pattern
    /// limited to past years, or past `croner`'s year limit of 5000).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // Fire instants are whole seconds: the first candidate is the next whole second.
        // `as_second` truncates toward zero, so before 1970 a fraction rounds down one more.
        let floor = after.as_second() - i64::from(after.subsec_nanosecond() < 0);
        let whole = Timestamp::from_second(floor).ok()?;
        let from = whole.checked_add(SignedDuration::from_secs(1)).ok()?;
        self.next_from(from)
    }

    /// [`next_after`](Self::next_after) for a [`SystemTime`]. A time before the earliest
    /// [`Timestamp`] (year -9999) is taken as that earliest one; after the latest, the
    /// schedule has no further instant (`None`).
    pub fn next_after_system(&self, after: SystemTime) -> Option<SystemTime> {
        let after = match Timestamp::try_from(after) {
            Ok(after) => after,
            Err(_) if after < SystemTime::UNIX_EPOCH => Timestamp::MIN,
            Err(_) => return None,
        };
        self.next_after(after).map(SystemTime::from)
    }

    /// The fire instants strictly after `after`, in order.
    pub fn iter_after(&self, after: Timestamp) -> CronIter<'_> {
        CronIter {
            cron: self,
            last: Some(after),
        }
    }

    /// The first fire instant at or after the whole second `from`.
    fn next_from(&self, from: Timestamp) -> Option<Timestamp> {
        // The offset segment holding `from`: [start, end) with one offset. `start` is the last
        // transition at or before `from` (None: none known), `end` the next one after it.
        let just_after = from.checked_add(SignedDuration::from_nanos(1)).ok()?;
        let mut start = self.tz.preceding(just_after).next().map(|t| t.timestamp());
        let mut lower = from;
        loop {
            let offset = self.tz.to_offset(lower);
            let end = self.following_change(lower, offset);
            match self.in_segment(lower, start, end, offset) {
                Found::At(at) => return Some(at),
                Found::Never => return None,
                Found::NotBefore => {}
            }
            // No end: nothing further in an endless segment.
            let next = end?;
            start = Some(next);
            lower = next;
        }
    }

    /// The next transition after `at` that changes the offset from `offset`.
    fn following_change(&self, at: Timestamp, offset: Offset) -> Option<Timestamp> {
        self.tz
            .following(at)
            .find(|t| t.offset() != offset)
            .map(|t| t.timestamp())
    }

    /// The first fire instant in `[lower, end)`, a stretch of one `offset` entered by a
    /// transition at `start` (at or before `lower`; `None`: no transition known before it).
    fn in_segment(
        &self,
        lower: Timestamp,
        start: Option<Timestamp>,
        end: Option<Timestamp>,
        offset: Offset,
    ) -> Found {
        let entered = start.and_then(|s| {
            let before = self
                .tz
                .to_offset(s.checked_sub(SignedDuration::from_nanos(1)).ok()?);
            Some((s, before))
        });
        let mut civil_lower = offset.to_datetime(lower);
        if let Some((s, before)) = entered {
            let fixed = !self.interval_like;
            if fixed && before.seconds() < offset.seconds() && s == lower {
                // Entered by a gap: a fixed-time appointment inside it runs at `s`.
                let gap_start = before.to_datetime(s);
                let gap_end = offset.to_datetime(s);
                match self.next_civil(gap_start) {
                    Some(c) if c < gap_end => return Found::At(s),
                    Some(_) => {}
                    None => return Found::Never,
                }
            }
            if fixed && self.repeated == Repeated::First && before.seconds() > offset.seconds() {
                // Entered by a fold: the repeated wall-clock times already ran in the first
                // pass; this pass starts where the first one ended.
                civil_lower = civil_lower.max(before.to_datetime(s));
            }
        }
        // No match at all from here on (croner searches to its year limit): stop, rather than
        // asking again in every later segment.
        let Some(civil) = self.next_civil(civil_lower) else {
            return Found::Never;
        };
        let Ok(at) = offset.to_timestamp(civil) else {
            return Found::Never;
        };
        match end {
            Some(end) if at >= end => Found::NotBefore,
            _ => Found::At(at),
        }
    }

    /// The first wall-clock time at or after `from` that matches the pattern.
    fn next_civil(&self, from: DateTime) -> Option<DateTime> {
        self.pattern.find_next_occurrence(&from, true).ok()
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cron")
            .field("pattern", &self.source)
            .field("time_zone", &self.tz.iana_name().unwrap_or("<unnamed>"))
            .field("interval_like", &self.interval_like)
            .field("repeated", &self.repeated)
            .finish()
    }
}

impl FromStr for Cron {
    type Err = CronError;

    /// A pattern in UTC, or `"<pattern> @ <zone>"`: `"0 9 * * TUE @ Europe/Paris"`.
    fn from_str(s: &str) -> Result<Cron, CronError> {
        match s.rsplit_once('@') {
            Some((pattern, zone)) if !pattern.trim().is_empty() => {
                Cron::new(pattern.trim(), zone.trim())
            }
            _ => Cron::utc(s),
        }
    }
}

/// What a search of one offset segment found.
enum Found {
    /// The first fire instant.
    At(Timestamp),
    /// Nothing before the segment's end: look in the next one.
    NotBefore,
    /// No wall-clock time from here on matches: the schedule is over.
    Never,
}

/// The fire instants of a [`Cron`] after a given instant, in increasing order. Made by
/// [`Cron::iter_after`].
#[derive(Debug, Clone)]
pub struct CronIter<'a> {
    cron: &'a Cron,
    last: Option<Timestamp>,
}

impl Iterator for CronIter<'_> {
    type Item = Timestamp;

    fn next(&mut self) -> Option<Timestamp> {
        let next = self.cron.next_after(self.last?);
        self.last = next;
        next
    }
}
