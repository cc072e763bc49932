//! Property test of calendar schedules: for random patterns, zones and starting instants the
//! fire instants are strictly increasing, each one matches the pattern in the zone (or is a
//! fixed-time run moved to the end of a gap), and they are exactly what `croner`'s own
//! `find_next_occurrence` gives — everywhere when its DST rule and the policy coincide, away
//! from transitions otherwise.

use std::str::FromStr;

use proptest::prelude::*;
use tickwheel::cron::jiff::{tz::TimeZone, SignedDuration, Timestamp, Zoned};
use tickwheel::cron::{Cron, CronError, Repeated};

const ZONES: &[&str] = &[
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "UTC",
    "Pacific/Chatham",  // +12:45 / +13:45
    "America/St_Johns", // -03:30 / -02:30
    "Europe/London",
    "America/Sao_Paulo", // DST abolished in 2019
];

fn time_field(max: u32) -> impl Strategy<Value = String> {
    // Single values weigh most: fixed times are where the DST policy has most to say.
    prop_oneof![
        1 => Just("*".to_string()),
        1 => (2..=max / 2).prop_map(|n| format!("*/{n}")),
        4 => (0..=max).prop_map(|n| n.to_string()),
        1 => (0..=max, 0..=max).prop_map(|(a, b)| format!("{},{}", a.min(b), a.max(b))),
        1 => (0..=max, 0..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
    ]
}

fn pattern() -> impl Strategy<Value = String> {
    let second = prop_oneof![Just(None), time_field(59).prop_map(Some)];
    let hour = prop_oneof![
        time_field(23),
        // Bias towards the hours of DST transitions.
        prop::sample::select(vec!["1", "2", "3", "0-3", "1,2", "2,14"]).prop_map(String::from),
    ];
    let dom = prop_oneof![
        4 => Just("*".to_string()),
        1 => (1u32..=31).prop_map(|d| d.to_string()),
        1 => Just("L".to_string()),
        1 => (1u32..=28).prop_map(|d| format!("{d}W")),
    ];
    let month = prop_oneof![
        3 => Just("*".to_string()),
        1 => (1u32..=12).prop_map(|m| m.to_string()),
        1 => Just("3,4,10,11".to_string()),
    ];
    let dow = prop_oneof![
        4 => Just("*".to_string()),
        1 => (0u32..=6).prop_map(|d| d.to_string()),
        1 => (0u32..=6).prop_map(|d| format!("{d}L")),
        1 => (0u32..=6, 1u32..=4).prop_map(|(d, n)| format!("{d}#{n}")),
    ];
    (second, time_field(59), hour, dom, month, dow).prop_map(|(s, mi, h, d, mo, w)| match s {
        Some(s) => format!("{s} {mi} {h} {d} {mo} {w}"),
        None => format!("{mi} {h} {d} {mo} {w}"),
    })
}

/// Whether a transition of `tz` that changes the offset lies in `[from, to]`.
fn transition_between(tz: &TimeZone, from: Timestamp, to: Timestamp) -> bool {
    let before = from.checked_sub(SignedDuration::from_secs(1)).unwrap();
    let offset = tz.to_offset(before);
    tz.following(before)
        .take_while(|t| t.timestamp() <= to)
        .any(|t| t.offset() != offset)
}

/// Whether `at` is the end of a gap that holds a wall time matching `pattern`.
fn is_moved_past_gap(pattern: &croner::Cron, tz: &TimeZone, at: Timestamp) -> bool {
    let before = tz.to_offset(at.checked_sub(SignedDuration::from_nanos(1)).unwrap());
    let after = tz.to_offset(at);
    if before.seconds() >= after.seconds() {
        return false;
    }
    let gap_start = before.to_datetime(at);
    let gap_end = after.to_datetime(at);
    pattern
        .find_next_occurrence(&gap_start, true)
        .is_ok_and(|c| c < gap_end)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn fire_instants_increase_match_and_agree_with_croner(
        pattern in pattern(),
        zone in prop::sample::select(ZONES),
        // 2020-01-01 .. 2031-01-01
        start in 1_577_836_800i64..1_924_992_000,
        both in any::<bool>(),
        // Half the cases start within six hours before one of the zone's transitions.
        near in prop::option::of(0i64..6 * 3600),
    ) {
        let cron = match Cron::new(&pattern, zone) {
            Ok(c) => c,
            Err(CronError::NeverMatches { .. }) => return Ok(()),
            Err(e) => panic!("generated pattern {pattern:?} rejected: {e}"),
        };
        let cron = cron.repeated(if both { Repeated::Both } else { Repeated::First });
        let tz = cron.time_zone().clone();
        let reference = croner::Cron::from_str(&pattern).unwrap();
        let mut prev = Timestamp::from_second(start).unwrap();
        if let (Some(before), Some(t)) = (near, tz.following(prev).next()) {
            prev = t.timestamp().checked_sub(SignedDuration::from_secs(before)).unwrap();
        }
        for _ in 0..12 {
            let Some(next) = cron.next_after(prev) else { break };
            prop_assert!(next > prev, "{pattern} @ {zone}: {next} not after {prev}");
            let civil = tz.to_offset(next).to_datetime(next);
            let matches = reference.is_time_matching(&civil).unwrap();
            prop_assert!(
                matches || (!cron.is_interval_like() && is_moved_past_gap(&reference, &tz, next)),
                "{pattern} @ {zone}: {next} ({civil}) does not match"
            );
            prop_assert_eq!(cron.matches(next), matches);
            // croner's own answer, from the zoned instant.
            let zoned = Zoned::new(prev, tz.clone());
            if let Ok(theirs) = reference.find_next_occurrence(&zoned, false) {
                let theirs = theirs.timestamp();
                let last = theirs.max(next);
                // croner's own DST rule agrees with the policy for single-value times and for
                // interval-like patterns; it differs for lists and ranges of times (which it
                // treats as intervals) and has no "both passes" option.
                let same_policy = if cron.is_interval_like() {
                    true
                } else {
                    !both && reference.determine_job_type() == croner::JobType::FixedTime
                };
                if same_policy || !transition_between(&tz, prev, last) {
                    prop_assert_eq!(next, theirs, "{} @ {} after {}", pattern, zone, prev);
                }
            }
            prev = next;
        }
    }
}
