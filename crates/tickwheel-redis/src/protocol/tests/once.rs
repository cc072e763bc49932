//! SCHEDULE's create-only mode against a real `redis-server`, on a manual clock: what it
//! answers for an id in each state (a table), the window sliding with every call naming the
//! id, a window of 0, and the bounded trimming of expired remembered ids.

use super::failure::{acquired, claim_at, claimed, fail};
use super::*;
use crate::failure::FailReason;

const W: u64 = 10_000;

fn once(
    con: &mut Con,
    keys: &ShardKeys,
    now: u64,
    window_ms: u64,
    tasks: &[ScheduleTask],
) -> Vec<ScheduledOnce> {
    let call = ScheduleOnce {
        schedule: Schedule {
            keys,
            now: Some(now),
            channel: "tw:{t}:wake",
            shard: 0,
            tasks,
        },
        window_ms,
    };
    invoke(con, &call).unwrap()
}

fn once1(con: &mut Con, keys: &ShardKeys, now: u64, id: &str) -> ScheduledOnce {
    once(con, keys, now, W, &[task(id, When::At(now))])[0]
}

/// Claims and acknowledges `id` at `now`.
fn run_and_ack(con: &mut Con, keys: &ShardKeys, now: u64, id: &str) {
    let c = claimed(&claim_at(con, keys, now, &[id], false));
    assert_eq!(c.len(), 1, "{id} claimed");
    let item = AckItem {
        id,
        version: c[0].1,
        attempt: c[0].2,
        next_run_ms: None,
    };
    let ack = Ack {
        keys,
        tenure: Tenure::new(1, "w"),
        channel: "c",
        shard: 0,
        acks: &[item],
    };
    assert_eq!(invoke(con, &ack).unwrap(), Some(vec![true]), "{id} acked");
}

fn remembered(con: &mut Con, keys: &ShardKeys) -> u64 {
    redis::cmd("ZCARD").arg(&keys.0[7]).query(con).unwrap()
}

/// What a create-only schedule answers, id by id: the state each id is brought to first,
/// then the answer of a `schedule_once` at the time given.
#[test]
fn a_create_only_schedule_stores_only_a_free_id_and_answers_each_state() {
    let (_s, mut con, keys) = setup("once");
    acquired(&mut con, &keys);
    let t = T0 + 1_000;
    // Absent: stored, with the version and run-at a schedule gives.
    let got = once(&mut con, &keys, t, W, &[task("absent", When::After(500))]);
    assert_eq!(
        got,
        [ScheduledOnce::Stored(Scheduled {
            version: 1,
            run_at_ms: t + 500,
            replaced: false
        })]
    );
    // Pending (stored by a plain schedule): not stored again, its state.
    schedule(&mut con, &keys, T0, &[task("pending", When::At(t + 9))]);
    // In flight.
    schedule(&mut con, &keys, T0, &[task("in-flight", When::At(T0))]);
    claimed(&claim_at(&mut con, &keys, T0, &["in-flight"], false));
    // Failed for good: in the failed set.
    schedule(&mut con, &keys, T0, &[task("failed", When::At(T0))]);
    let c = claimed(&claim_at(&mut con, &keys, T0, &["failed"], false));
    let failed = ("failed", c[0].1, c[0].2);
    fail(
        &mut con,
        &keys,
        T0,
        failed,
        RetryAsk::Never,
        "3,1,1,1,0,0",
        100,
        0,
    );
    // Acknowledged within the window, and after it (stored by a create-only schedule).
    for id in ["acked-within", "acked-after", "cancelled"] {
        assert!(once1(&mut con, &keys, T0, id).stored().is_some(), "{id}");
    }
    run_and_ack(&mut con, &keys, T0, "acked-within");
    run_and_ack(&mut con, &keys, T0, "acked-after");
    // Cancelled within the window.
    let cancel = Cancel {
        keys: &keys,
        ids: &["cancelled"],
    };
    assert_eq!(invoke(&mut con, &cancel).unwrap(), [true]);

    let table: [(&str, u64, ScheduledOnce); 6] = [
        (
            "pending",
            t,
            ScheduledOnce::Exists(TaskState::Pending {
                run_at_ms: t + 9,
                attempts: 0,
                version: 2,
            }),
        ),
        (
            "in-flight",
            t,
            ScheduledOnce::Exists(TaskState::InFlight {
                due_ms: T0,
                attempt: 1,
                version: 3,
                visible_at_ms: T0 + 30_000,
            }),
        ),
        (
            "failed",
            t,
            ScheduledOnce::Exists(TaskState::Failed {
                failed_at_ms: T0,
                attempts: 1,
                version: 4,
                reason: FailReason::NonRetryable,
            }),
        ),
        ("acked-within", T0 + W - 1, ScheduledOnce::Remembered),
        ("cancelled", T0 + W - 1, ScheduledOnce::Remembered),
        (
            "acked-after",
            T0 + W,
            ScheduledOnce::Stored(Scheduled {
                version: 8,
                run_at_ms: T0 + W,
                replaced: false,
            }),
        ),
    ];
    for (id, at, want) in table {
        assert_eq!(
            once1(&mut con, &keys, at, id),
            want,
            "{id} at T0 + {}",
            at - T0
        );
    }
    // Nothing was stored but the task stored after its window.
    assert_eq!(
        state(&mut con, &keys, "cancelled"),
        TaskState::Unknown,
        "a cancelled task stays cancelled"
    );
    assert_eq!(state(&mut con, &keys, "acked-within"), TaskState::Unknown);

    // An id repeated in one call: stored the first time, the task just stored the second;
    // a remembered id answers the same each time; the call's other ids are unaffected.
    let tasks = [
        task("twice", When::At(t + 5)),
        task("acked-within", When::At(t)),
        task("twice", When::At(t + 7)),
        task("other", When::After(3)),
        task("acked-within", When::At(t)),
    ];
    let stored = |version, run_at_ms| {
        ScheduledOnce::Stored(Scheduled {
            version,
            run_at_ms,
            replaced: false,
        })
    };
    assert_eq!(
        once(&mut con, &keys, t, W, &tasks),
        [
            stored(9, t + 5),
            ScheduledOnce::Remembered,
            ScheduledOnce::Exists(TaskState::Pending {
                run_at_ms: t + 5,
                attempts: 0,
                version: 9
            }),
            stored(10, t + 3),
            ScheduledOnce::Remembered,
        ]
    );
    // A plain schedule ignores remembered ids: it always stores.
    let plain = schedule(&mut con, &keys, t, &[task("cancelled", When::At(t))]);
    assert!(!plain[0].replaced);
    assert!(matches!(
        state(&mut con, &keys, "cancelled"),
        TaskState::Pending { version: 11, .. }
    ));
}

/// Every create-only schedule naming an id, whatever it answers, remembers the id for its
/// window from then: a retry of a retry stays safe. A window of 0 remembers nothing.
#[test]
fn the_window_slides_with_every_call_naming_the_id_and_zero_remembers_nothing() {
    let (_s, mut con, keys) = setup("slide");
    acquired(&mut con, &keys);
    assert!(once1(&mut con, &keys, T0, "a").stored().is_some());
    run_and_ack(&mut con, &keys, T0, "a");
    let mut at = T0;
    for k in 1..=3 {
        at += W - 1;
        let got = once1(&mut con, &keys, at, "a");
        assert_eq!(
            got,
            ScheduledOnce::Remembered,
            "retry {k} at T0 + {}",
            at - T0
        );
    }
    assert!(once1(&mut con, &keys, at + W, "a").stored().is_some());

    let zero = |con: &mut Con, now| once(con, &keys, now, 0, &[task("z", When::At(now))])[0];
    assert!(zero(&mut con, T0).stored().is_some());
    run_and_ack(&mut con, &keys, T0, "z");
    assert!(
        zero(&mut con, T0 + 1).stored().is_some(),
        "window 0: stored again"
    );
    let z = redis::cmd("ZSCORE")
        .arg(&keys.0[7])
        .arg("z")
        .query::<Option<f64>>(&mut con)
        .unwrap();
    assert_eq!(z, None, "a window of 0 remembers nothing");
}

/// Remembered ids past their window are removed by later calls, at most `2 n + 10` a call of
/// `n` tasks, so a call's cost stays in proportion to its size.
#[test]
fn expired_remembered_ids_are_trimmed_a_bounded_number_per_call() {
    let (_s, mut con, keys) = setup("trim");
    let ids: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    let tasks: Vec<ScheduleTask> = ids.iter().map(|id| task(id, When::At(T0))).collect();
    once(&mut con, &keys, T0, W, &tasks);
    assert_eq!(remembered(&mut con, &keys), 50);
    // Within the window nothing is trimmed.
    once1(&mut con, &keys, T0 + W - 1, "x");
    assert_eq!(remembered(&mut con, &keys), 51);
    // Past it: 12 of the 50 go with a call of one task (which adds its own id).
    once1(&mut con, &keys, T0 + W, "y");
    assert_eq!(remembered(&mut con, &keys), 51 - 12 + 1);
    // A call of 3 tasks takes 16 more.
    let three = [
        task("p", When::At(T0)),
        task("q", When::At(T0)),
        task("r", When::At(T0)),
    ];
    once(&mut con, &keys, T0 + W, W, &three);
    assert_eq!(remembered(&mut con, &keys), 40 - 16 + 3);
    // An id whose window has passed is free again once its task is gone, trimmed or not.
    assert!(matches!(
        once1(&mut con, &keys, T0 + W, "t49"),
        ScheduledOnce::Exists(TaskState::Pending { .. })
    ));
    let cancel = Cancel {
        keys: &keys,
        ids: &["t0", "t49"],
    };
    assert_eq!(invoke(&mut con, &cancel).unwrap(), [true, true]);
    assert!(
        once1(&mut con, &keys, T0 + W, "t0").stored().is_some(),
        "expired"
    );
    // "t49" was named at T0 + W just now: remembered again.
    assert_eq!(
        once1(&mut con, &keys, T0 + W, "t49"),
        ScheduledOnce::Remembered
    );
}
