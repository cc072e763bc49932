//! Pause, a re-sent claim, and a retried recurring run's phase, against a real
//! `redis-server` on a manual clock.

use super::failure::{acquired, claim_at, claimed, detail, fail};
use super::*;

/// A paused shard claims nothing (and says so); resumed, it claims again. A forced claim
/// sent again after a lost reply does not count a second attempt.
#[test]
fn a_paused_shard_claims_nothing_and_a_resent_claim_is_one_attempt() {
    let (_s, mut con, keys) = setup("pause");
    acquired(&mut con, &keys);
    schedule(&mut con, &keys, T0, &[task("p", When::At(T0))]);
    let pause = |paused| Pause {
        keys: &keys,
        channel: "c",
        shard: 0,
        paused,
    };
    assert!(invoke(&mut con, &pause(true)).unwrap());
    assert!(!invoke(&mut con, &pause(true)).unwrap(), "already paused");
    let renew = Acquire {
        keys: &keys,
        now: Some(T0),
        worker: "w",
        lease_ms: 3_600_000,
        held_epoch: 1,
    };
    assert!(
        invoke(&mut con, &renew).unwrap().paused,
        "a renewal says so"
    );
    let r = claim_at(&mut con, &keys, T0, &["p"], false);
    assert!(r.paused && r.claims.is_none(), "{r:?}");
    assert!(matches!(
        state(&mut con, &keys, "p"),
        TaskState::Pending { .. }
    ));
    assert!(invoke(&mut con, &pause(false)).unwrap());
    assert_eq!(
        claimed(&claim_at(&mut con, &keys, T0, &["p"], false)),
        [("p".into(), 1, 1)]
    );
    // The reply was "lost": the worker sends the claim again, forced.
    assert_eq!(
        claimed(&claim_at(&mut con, &keys, T0 + 5, &["p"], true)),
        [("p".into(), 1, 1)]
    );
    // Past its visibility deadline it is a real redelivery.
    assert_eq!(
        claimed(&claim_at(&mut con, &keys, T0 + 40_000, &["p"], true)),
        [("p".into(), 1, 2)]
    );
}

/// A recurring run retried (a snooze, a failed attempt) carries its due as the series'
/// phase anchor; re-armed at its next run, or moved by a reschedule, it carries none.
#[test]
fn a_retried_recurring_run_carries_its_phase_until_the_series_moves_on() {
    let (_s, mut con, keys) = setup("anchor");
    acquired(&mut con, &keys);
    let rec = |id, when| ScheduleTask {
        recurrence: "p1000".into(),
        ..task(id, when)
    };
    schedule(
        &mut con,
        &keys,
        T0,
        &[rec("r", When::At(T0)), rec("m", When::At(T0))],
    );
    claim_at(&mut con, &keys, T0, &["r", "m"], false);
    let snooze = |id, version| Retry {
        keys: &keys,
        now: Some(T0 + 5),
        tenure: Tenure::new(1, "w"),
        id,
        version,
        attempt: 1,
        after_ms: Some(10),
    };
    invoke(&mut con, &snooze("r", 1)).unwrap();
    assert_eq!(
        detail(&mut con, &keys, "r").row.recurrence,
        format!("p1000@{T0}")
    );
    claim_at(&mut con, &keys, T0 + 15, &["r"], false);
    let r = fail(
        &mut con,
        &keys,
        T0 + 15,
        ("r", 1, 2),
        RetryAsk::AfterMs(10),
        "3,1,1,1,0,0",
        10,
        0,
    );
    assert!(matches!(r, FailReply::Retrying { .. }), "{r:?}");
    assert_eq!(
        detail(&mut con, &keys, "r").row.recurrence,
        format!("p1000@{T0}"),
        "kept, not moved"
    );
    claim_at(&mut con, &keys, T0 + 25, &["r"], false);
    let item = AckItem {
        id: "r",
        version: 1,
        attempt: 3,
        next_run_ms: Some(T0 + 1000),
    };
    let ack = Ack {
        keys: &keys,
        tenure: Tenure::new(1, "w"),
        channel: "c",
        shard: 0,
        acks: &[item],
    };
    assert_eq!(invoke(&mut con, &ack).unwrap(), Some(vec![true]));
    assert_eq!(
        detail(&mut con, &keys, "r").row.recurrence,
        "p1000",
        "the next run has no anchor"
    );
    // A reschedule by the user sets a new phase.
    invoke(&mut con, &snooze("m", 2)).unwrap();
    let moves = [("m", When::At(T0 + 500))];
    let call = Reschedule {
        keys: &keys,
        now: Some(T0),
        channel: "c",
        shard: 0,
        moves: &moves,
    };
    assert_eq!(invoke(&mut con, &call).unwrap(), [true]);
    assert_eq!(detail(&mut con, &keys, "m").row.recurrence, "p1000");
}
