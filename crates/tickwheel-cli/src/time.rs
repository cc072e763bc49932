//! Instants and durations as the command line and the dashboard read and print them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tickwheel::cron::jiff::{SignedDuration, Timestamp};

/// ms since the Unix epoch as RFC 3339 in UTC, always 24 characters
/// (`2026-11-26T01:02:03.004Z`).
pub fn rfc3339(ms: u64) -> String {
    match i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("{ms} ms"),
    }
}

/// `at - now` for people: `in 1h 2m`, `3.2s ago`, `now`.
pub fn relative(at_ms: u64, now_ms: u64) -> String {
    let (d, future) = if at_ms >= now_ms {
        (at_ms - now_ms, true)
    } else {
        (now_ms - at_ms, false)
    };
    if d == 0 {
        return "now".into();
    }
    let s = span(Duration::from_millis(d));
    if future {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

/// A duration for people, two units at most: `850ms`, `4.6s`, `3m 20s`, `2h 5m`, `3d 4h`.
pub fn span(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => two(s / 60, "m", s % 60, "s"),
        3600..=86_399 => two(s / 3600, "h", s % 3600 / 60, "m"),
        _ => two(s / 86_400, "d", s % 86_400 / 3600, "h"),
    }
}

/// `3m 20s`, or `3m` when the second unit is zero.
fn two(a: u64, ua: &str, b: u64, ub: &str) -> String {
    if b == 0 {
        format!("{a}{ua}")
    } else {
        format!("{a}{ua} {b}{ub}")
    }
}

/// A duration: `90s`, `5m`, `1h30m`, `48h`, `250ms`, or ISO 8601 (`PT1H`). Not negative.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d: SignedDuration = text.trim().parse().map_err(|_| {
        format!("`{text}` is not a duration (examples: 90s, 5m, 1h30m, 48h, 250ms)")
    })?;
    Duration::try_from(d).map_err(|_| format!("`{text}`: a duration must not be negative"))
}

/// Why `text` is not an instant the CLI takes: a date, time and offset past the range of
/// instants (1970 to 9999-12-30) is out of range, anything else is not RFC 3339.
pub fn not_an_instant(text: &str) -> String {
    let t = text.trim();
    // The date and time before the offset (`Z` or `±hh:mm`), when there is one.
    let numeric = t.len().checked_sub(6).filter(|&at| {
        t.is_char_boundary(at)
            && t[at..].starts_with(['+', '-'])
            && t.as_bytes().get(at + 3) == Some(&b':')
    });
    let civil = t
        .strip_suffix(['Z', 'z'])
        .or_else(|| numeric.map(|at| &t[..at]));
    let in_form = civil.is_some_and(|c| {
        c.contains('T') && c.parse::<tickwheel::cron::jiff::civil::DateTime>().is_ok()
    });
    if in_form {
        format!("`{text}` is out of range: instants from 1970 to 9999-12-30 are taken")
    } else {
        format!("`{text}` is not an RFC 3339 instant (example: 2026-11-26T09:00:00Z)")
    }
}

/// An RFC 3339 instant (`2026-11-26T09:00:00Z`, `2026-11-26T10:00:00+01:00`), ms since the
/// Unix epoch.
pub fn parse_rfc3339(text: &str) -> Result<u64, String> {
    let ts: Timestamp = text.trim().parse().map_err(|_| not_an_instant(text))?;
    u64::try_from(ts.as_millisecond()).map_err(|_| format!("`{text}` is before 1970"))
}

/// An instant: RFC 3339 ([`parse_rfc3339`]), or a duration from now (`10m`; `-10m` for the
/// past). ms since the Unix epoch.
pub fn parse_instant(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.parse::<Timestamp>().is_ok() {
        return parse_rfc3339(t);
    }
    let (past, rest) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let d = parse_duration(rest).map_err(|_| {
        if t.contains('T') {
            return not_an_instant(text);
        }
        format!(
            "`{text}` is neither an RFC 3339 instant (2026-11-26T09:00:00Z) nor a duration from \
             now (10m, -1h)"
        )
    })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let d = d.as_millis() as u64;
    if past {
        now.checked_sub(d)
            .ok_or_else(|| format!("`{text}` is before 1970"))
    } else {
        Ok(now.saturating_add(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_out_of_range_is_told_from_one_that_is_not_rfc_3339() {
        for far in ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59+05:00"] {
            assert!(not_an_instant(far).contains("out of range"), "{far}");
            assert!(
                parse_instant(far).unwrap_err().contains("out of range"),
                "{far}"
            );
        }
        for bad in [
            "2026-11-26 09:00",
            "2026-11-26T09:00",
            "tomorrow",
            "+05:00",
            "Z",
        ] {
            assert!(not_an_instant(bad).contains("not an RFC 3339"), "{bad}");
        }
    }

    #[test]
    fn instants_and_durations_parse_and_print() {
        assert_eq!(rfc3339(1_800_000_000_123), "2027-01-15T08:00:00.123Z");
        assert_eq!(
            parse_instant("2027-01-15T09:00:00.123+01:00"),
            Ok(1_800_000_000_123)
        );
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-5m").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_instant("2026-13-01T00:00:00Z").is_err());
        assert!(parse_instant("yesterday").is_err());
        let now = parse_instant("0s").unwrap();
        let later = parse_instant("10m").unwrap();
        assert!((599_000..=601_000).contains(&(later - now)));
        assert!(parse_instant("-10m").unwrap() < now);
        assert_eq!(relative(5_000, 1_000), "in 4.0s");
        assert_eq!(relative(1_000, 3_700_000), "1h 1m ago");
        assert_eq!(span(Duration::from_millis(850)), "850ms");
        assert_eq!(span(Duration::from_secs(600)), "10m");
        assert_eq!(span(Duration::from_secs(200)), "3m 20s");
    }
}
