//! Calendar schedules against a table of fire instants written out by hand from the tz rules
//! (not computed by the code under test), across the daylight-saving transitions of 2026.
//!
//! The rules used (2026 dates):
//!
//! * Europe/Paris: CET (+01:00) / CEST (+02:00). Spring forward Sunday 29 March at 01:00 UTC
//!   (02:00 CET becomes 03:00 CEST: wall times 02:00–02:59 do not exist). Fall back Sunday
//!   25 October at 01:00 UTC (03:00 CEST becomes 02:00 CET: 02:00–02:59 happen twice).
//! * America/New_York: EST (-05:00) / EDT (-04:00). Spring forward Sunday 8 March at 07:00 UTC
//!   (02:00 EST becomes 03:00 EDT). Fall back Sunday 1 November at 06:00 UTC (02:00 EDT
//!   becomes 01:00 EST: 01:00–01:59 happen twice).
//! * Australia/Lord_Howe: LHST (+10:30) / LHDT (+11:00), a 30-minute shift. Fall back Sunday
//!   5 April at 15:00 UTC on the 4th (02:00 LHDT becomes 01:30 LHST: 01:30–01:59 happen
//!   twice). Spring forward Sunday 4 October at 15:30 UTC on the 3rd (02:00 LHST becomes
//!   02:30 LHDT: 02:00–02:29 do not exist).
//! * Asia/Kolkata: IST (+05:30) all year, no transitions.
//!
//! Policy under test (see `tickwheel::cron`): fixed-time patterns run once right after a
//! gap and once (the first pass) in a fold, or in both passes with `Repeated::Both`;
//! interval-like patterns run at every wall time that occurs, in both passes of a fold.

use tickwheel::cron::jiff::Timestamp;
use tickwheel::cron::{Cron, CronError, Repeated};

fn ts(s: &str) -> Timestamp {
    s.parse()
        .unwrap_or_else(|e| panic!("bad timestamp {s}: {e}"))
}

/// (zone, pattern, repeated, after, the next fire instants in UTC).
type Row = (
    &'static str,
    &'static str,
    Repeated,
    &'static str,
    &'static [&'static str],
);

use Repeated::{Both, First};

const TABLE: &[Row] = &[
    // ---- Europe/Paris ----
    // Daily at 02:30 across the gap: the 29th's 02:30 does not exist, it runs at 03:00 CEST.
    (
        "Europe/Paris",
        "30 2 * * *",
        First,
        "2026-03-28T00:00:00Z",
        &[
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z",
        ],
    ),
    // Daily at 02:30 across the fold: once, at 02:30 CEST (the first pass).
    (
        "Europe/Paris",
        "30 2 * * *",
        First,
        "2026-10-24T00:00:00Z",
        &[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
        ],
    ),
    // ... and in both passes when asked.
    (
        "Europe/Paris",
        "30 2 * * *",
        Both,
        "2026-10-24T00:00:00Z",
        &[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-26T01:30:00Z",
        ],
    ),
    // Hourly across the gap: 01:00 CET, (02:00 missing), 03:00 CEST, 04:00 CEST.
    (
        "Europe/Paris",
        "0 * * * *",
        First,
        "2026-03-28T23:30:00Z",
        &[
            "2026-03-29T00:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z",
        ],
    ),
    // Hourly across the fold: 02:00 CEST, 02:00 CET, 03:00 CET (interval-like: both passes).
    (
        "Europe/Paris",
        "0 * * * *",
        First,
        "2026-10-24T23:30:00Z",
        &[
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T02:00:00Z",
        ],
    ),
    // Every minute across the gap: 01:59 CET then 03:00 CEST.
    (
        "Europe/Paris",
        "* * * * *",
        First,
        "2026-03-29T00:58:00Z",
        &[
            "2026-03-29T00:59:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:01:00Z",
        ],
    ),
    // Every minute into the fold: 02:59 CEST, then 02:00 CET, 02:01 CET.
    (
        "Europe/Paris",
        "* * * * *",
        First,
        "2026-10-25T00:58:30Z",
        &[
            "2026-10-25T00:59:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:01:00Z",
        ],
    ),
    // ... and out of it: 02:59 CET, 03:00 CET.
    (
        "Europe/Paris",
        "* * * * *",
        First,
        "2026-10-25T01:58:30Z",
        &["2026-10-25T01:59:00Z", "2026-10-25T02:00:00Z"],
    ),
    // 02:30 on the last Sunday of the month: the transition days themselves.
    (
        "Europe/Paris",
        "30 2 * * 0L",
        First,
        "2026-03-01T00:00:00Z",
        &["2026-03-29T01:00:00Z", "2026-04-26T00:30:00Z"],
    ),
    (
        "Europe/Paris",
        "30 2 * * 0L",
        First,
        "2026-10-01T00:00:00Z",
        &["2026-10-25T00:30:00Z", "2026-11-29T01:30:00Z"],
    ),
    // Noon on the last day of the month, CET then CEST.
    (
        "Europe/Paris",
        "0 12 L * *",
        First,
        "2026-02-01T00:00:00Z",
        &[
            "2026-02-28T11:00:00Z",
            "2026-03-31T10:00:00Z",
            "2026-04-30T10:00:00Z",
        ],
    ),
    // 29 February: only in leap years.
    (
        "Europe/Paris",
        "0 9 29 2 *",
        First,
        "2026-01-01T00:00:00Z",
        &["2028-02-29T08:00:00Z", "2032-02-29T08:00:00Z"],
    ),
    // Seconds and years: 10:15:30 every day of 2027 only.
    (
        "Europe/Paris",
        "30 15 10 * * * 2027",
        First,
        "2026-12-31T23:00:00Z",
        &["2027-01-01T09:15:30Z", "2027-01-02T09:15:30Z"],
    ),
    // W: the weekday nearest the 15th (15 August 2026 is a Saturday: Friday the 14th).
    (
        "Europe/Paris",
        "0 9 15W 8 *",
        First,
        "2026-08-01T00:00:00Z",
        &["2026-08-14T07:00:00Z"],
    ),
    // #: the second Tuesday of the month (1 September 2026 is a Tuesday: the 8th).
    (
        "Europe/Paris",
        "0 9 * 9 TUE#2",
        First,
        "2026-09-01T00:00:00Z",
        &["2026-09-08T07:00:00Z"],
    ),
    // ---- America/New_York ----
    (
        "America/New_York",
        "30 2 * * *",
        First,
        "2026-03-07T00:00:00Z",
        &[
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
        ],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        First,
        "2026-10-31T00:00:00Z",
        &[
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        Both,
        "2026-10-31T00:00:00Z",
        &[
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    ),
    // A list of hours is fixed-time too: 01:30 runs once on the fold day.
    (
        "America/New_York",
        "0 30 1,13 * * *",
        First,
        "2026-11-01T00:00:00Z",
        &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T18:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    ),
    // Hourly: 01:00 EST, (02:00 missing), 03:00 EDT, 04:00 EDT.
    (
        "America/New_York",
        "0 * * * *",
        First,
        "2026-03-08T05:30:00Z",
        &[
            "2026-03-08T06:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z",
        ],
    ),
    // Hourly: 01:00 EDT, 01:00 EST, 02:00 EST.
    (
        "America/New_York",
        "0 * * * *",
        First,
        "2026-11-01T04:30:00Z",
        &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ],
    ),
    (
        "America/New_York",
        "* * * * *",
        First,
        "2026-03-08T06:58:00Z",
        &["2026-03-08T06:59:00Z", "2026-03-08T07:00:00Z"],
    ),
    (
        "America/New_York",
        "* * * * *",
        First,
        "2026-11-01T05:58:30Z",
        &[
            "2026-11-01T05:59:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:01:00Z",
        ],
    ),
    (
        "America/New_York",
        "0 0 L * *",
        First,
        "2026-02-01T00:00:00Z",
        &["2026-02-28T05:00:00Z", "2026-03-31T04:00:00Z"],
    ),
    (
        "America/New_York",
        "0 0 29 2 *",
        First,
        "2026-01-01T00:00:00Z",
        &["2028-02-29T05:00:00Z"],
    ),
    // ---- Australia/Lord_Howe (30-minute shifts) ----
    // Daily 02:15 across the October gap (02:00-02:29 missing): runs at 02:30 LHDT.
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        First,
        "2026-10-02T00:00:00Z",
        &[
            "2026-10-02T15:45:00Z",
            "2026-10-03T15:30:00Z",
            "2026-10-04T15:15:00Z",
        ],
    ),
    // Daily 01:45 across the April fold (01:30-01:59 twice): the LHDT pass only.
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        First,
        "2026-04-03T00:00:00Z",
        &[
            "2026-04-03T14:45:00Z",
            "2026-04-04T14:45:00Z",
            "2026-04-05T15:15:00Z",
        ],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        Both,
        "2026-04-03T00:00:00Z",
        &[
            "2026-04-03T14:45:00Z",
            "2026-04-04T14:45:00Z",
            "2026-04-04T15:15:00Z",
            "2026-04-05T15:15:00Z",
        ],
    ),
    // Hourly at :00 across the gap: 01:00 LHST, (02:00 missing), 03:00 LHDT.
    (
        "Australia/Lord_Howe",
        "0 * * * *",
        First,
        "2026-10-03T14:00:00Z",
        &[
            "2026-10-03T14:30:00Z",
            "2026-10-03T16:00:00Z",
            "2026-10-03T17:00:00Z",
        ],
    ),
    // Hourly at :00 across the fold: no :00 inside the repeated half hour.
    (
        "Australia/Lord_Howe",
        "0 * * * *",
        First,
        "2026-04-04T13:30:00Z",
        &[
            "2026-04-04T14:00:00Z",
            "2026-04-04T15:30:00Z",
            "2026-04-04T16:30:00Z",
        ],
    ),
    // Hourly at :30: 01:30 LHDT, 01:30 LHST (both passes), 02:30 LHST.
    (
        "Australia/Lord_Howe",
        "30 * * * *",
        First,
        "2026-04-04T14:00:00Z",
        &[
            "2026-04-04T14:30:00Z",
            "2026-04-04T15:00:00Z",
            "2026-04-04T16:00:00Z",
        ],
    ),
    (
        "Australia/Lord_Howe",
        "* * * * *",
        First,
        "2026-04-04T14:58:30Z",
        &[
            "2026-04-04T14:59:00Z",
            "2026-04-04T15:00:00Z",
            "2026-04-04T15:01:00Z",
        ],
    ),
    (
        "Australia/Lord_Howe",
        "* * * * *",
        First,
        "2026-10-03T15:28:30Z",
        &[
            "2026-10-03T15:29:00Z",
            "2026-10-03T15:30:00Z",
            "2026-10-03T15:31:00Z",
        ],
    ),
    (
        "Australia/Lord_Howe",
        "0 12 L * *",
        First,
        "2026-03-01T00:00:00Z",
        &["2026-03-31T01:00:00Z", "2026-04-30T01:30:00Z"],
    ),
    (
        "Australia/Lord_Howe",
        "0 0 29 2 *",
        First,
        "2026-01-01T00:00:00Z",
        &["2028-02-28T13:00:00Z"],
    ),
    // ---- Asia/Kolkata (no transitions) ----
    (
        "Asia/Kolkata",
        "30 2 * * *",
        First,
        "2026-03-28T00:00:00Z",
        &["2026-03-28T21:00:00Z", "2026-03-29T21:00:00Z"],
    ),
    (
        "Asia/Kolkata",
        "30 2 * * *",
        Both,
        "2026-10-24T00:00:00Z",
        &["2026-10-24T21:00:00Z", "2026-10-25T21:00:00Z"],
    ),
    (
        "Asia/Kolkata",
        "0 * * * *",
        First,
        "2026-03-29T00:00:00Z",
        &["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"],
    ),
    (
        "Asia/Kolkata",
        "* * * * *",
        First,
        "2026-03-29T00:58:30Z",
        &["2026-03-29T00:59:00Z", "2026-03-29T01:00:00Z"],
    ),
    (
        "Asia/Kolkata",
        "0 12 L * *",
        First,
        "2026-02-01T00:00:00Z",
        &["2026-02-28T06:30:00Z", "2026-03-31T06:30:00Z"],
    ),
    (
        "Asia/Kolkata",
        "0 0 29 2 *",
        First,
        "2026-01-01T00:00:00Z",
        &["2028-02-28T18:30:00Z"],
    ),
];

#[test]
fn fire_instants_match_the_hand_written_table() {
    let mut failures = Vec::new();
    for &(zone, pattern, repeated, after, expected) in TABLE {
        let cron = Cron::new(pattern, zone)
            .unwrap_or_else(|e| panic!("{pattern} @ {zone}: {e}"))
            .repeated(repeated);
        let got: Vec<String> = cron
            .iter_after(ts(after))
            .take(expected.len())
            .map(|t| t.to_string())
            .collect();
        if got != expected {
            failures.push(format!(
                "{pattern:?} @ {zone} ({repeated:?}) after {after}:\n  expected {expected:?}\n  got      {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sub_second_and_exact_starting_points() {
    let cron = Cron::utc("* * * * * *").unwrap(); // every second
    assert_eq!(
        cron.next_after(ts("2026-01-01T00:00:00Z")),
        Some(ts("2026-01-01T00:00:01Z")),
        "strictly after"
    );
    assert_eq!(
        cron.next_after(ts("2026-01-01T00:00:00.999999999Z")),
        Some(ts("2026-01-01T00:00:01Z")),
        "sub-second digits: the next whole second"
    );
    // A fixed-time run moved past the gap is found from anywhere before it, exactly once.
    let paris = Cron::new("30 2 * * *", "Europe/Paris").unwrap();
    for after in [
        "2026-03-28T02:00:00Z",
        "2026-03-29T00:59:59Z",
        "2026-03-29T00:59:59.5Z",
    ] {
        assert_eq!(
            paris.next_after(ts(after)),
            Some(ts("2026-03-29T01:00:00Z"))
        );
    }
    assert_eq!(
        paris.next_after(ts("2026-03-29T01:00:00Z")),
        Some(ts("2026-03-30T00:30:00Z"))
    );
    // Starting inside the fold's second pass, a First pattern waits for the next day.
    let ny = Cron::new("30 1 * * *", "America/New_York").unwrap();
    assert_eq!(
        ny.next_after(ts("2026-11-01T06:10:00Z")), // 01:10 EST, second pass
        Some(ts("2026-11-02T06:30:00Z"))
    );
    let both = ny.clone().repeated(Repeated::Both);
    assert_eq!(
        both.next_after(ts("2026-11-01T06:10:00Z")),
        Some(ts("2026-11-01T06:30:00Z"))
    );
}

#[test]
fn past_only_patterns_end() {
    let cron = Cron::utc("0 0 0 1 1 * 2020").unwrap();
    assert_eq!(
        cron.next_after(ts("2019-06-01T00:00:00Z")),
        Some(ts("2020-01-01T00:00:00Z"))
    );
    assert_eq!(cron.next_after(ts("2020-01-01T00:00:00Z")), None);
    assert_eq!(cron.iter_after(ts("2026-01-01T00:00:00Z")).count(), 0);
    // In a zone with transitions too (the search stops instead of asking again in every
    // later offset segment).
    let paris = Cron::new("0 0 0 1 1 * 2020", "Europe/Paris").unwrap();
    assert_eq!(paris.next_after(ts("2026-01-01T00:00:00Z")), None);
}

#[test]
fn bad_input_is_a_typed_error_not_a_panic() {
    for pattern in [
        "",
        "* * *",
        "61 * * * *",
        "* * * * * * * *",
        "0 9 * * FUNDAY",
        "*/0 * * * *",
    ] {
        match Cron::new(pattern, "Europe/Paris") {
            Err(CronError::InvalidPattern { pattern: p, reason }) => {
                assert_eq!(p, pattern);
                assert!(!reason.is_empty());
            }
            other => panic!("{pattern:?}: {other:?}"),
        }
    }
    assert!(matches!(
        Cron::new("0 0 30 2 *", "UTC"),
        Err(CronError::NeverMatches { .. })
    ));
    let err = Cron::new("0 9 * * *", "Europe/Atlantis").unwrap_err();
    assert!(
        matches!(err, CronError::UnknownTimeZone { ref name, .. } if name == "Europe/Atlantis")
    );
    assert!(err.to_string().contains("Europe/Atlantis"));
}

#[test]
fn from_str_takes_an_optional_zone() {
    let paris: Cron = "0 9 * * TUE @ Europe/Paris".parse().unwrap();
    assert_eq!(paris.pattern(), "0 9 * * TUE");
    assert_eq!(paris.time_zone().iana_name(), Some("Europe/Paris"));
    let utc: Cron = "@daily".parse().unwrap();
    assert_eq!(
        utc.next_after(ts("2026-01-01T10:00:00Z")),
        Some(ts("2026-01-02T00:00:00Z"))
    );
    assert!("0 9 * * TUE @ Nowhere/Special".parse::<Cron>().is_err());
}

#[test]
fn classification_follows_the_policy() {
    for (pattern, interval_like) in [
        ("* * * * *", true),
        ("0 * * * *", true),
        ("*/15 9-17 * * *", true),
        ("0 10-50/20 * * * *", true),
        ("30 2 * * *", false),
        ("0 9,17 * * *", false),
        ("0 1-3 * * *", false),
        ("@daily", false),
    ] {
        assert_eq!(
            Cron::utc(pattern).unwrap().is_interval_like(),
            interval_like,
            "{pattern}"
        );
    }
}

#[test]
fn the_bundled_tz_database_has_the_zones() {
    // Without /usr/share/zoneinfo, jiff falls back to this copy: it must give the same rules.
    let bundled = tickwheel::cron::jiff::tz::TimeZoneDatabase::bundled();
    for zone in [
        "Europe/Paris",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
    ] {
        let tz = bundled.get(zone).unwrap_or_else(|e| panic!("{zone}: {e}"));
        let cron = Cron::with_time_zone("30 2 * * *", tz).unwrap();
        let system = Cron::new("30 2 * * *", zone).unwrap();
        let after = ts("2026-01-01T00:00:00Z");
        let a: Vec<_> = cron.iter_after(after).take(400).collect();
        let b: Vec<_> = system.iter_after(after).take(400).collect();
        assert_eq!(a, b, "{zone}");
    }
}
