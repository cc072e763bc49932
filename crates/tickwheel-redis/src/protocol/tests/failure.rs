//! The failure scripts against a real `redis-server`, on a manual clock: FAIL's backoff
//! table and failed set, jitter and the cap, recurring runs, error logs, retention, pause,
//! and a re-sent claim.

use super::*;

/// A claim at `now` (no claim-ahead), forced or not.
pub(super) fn claim_at(
    con: &mut Con,
    keys: &ShardKeys,
    now: u64,
    ids: &[&str],
    force: bool,
) -> DeliverReply {
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    let call = Deliver {
        keys,
        now: Some(now),
        tenure: Tenure::new(1, "w"),
        visibility_ms: 30_000,
        ahead_ms: 0,
        cluster: false,
        force,
        ids: &ids,
    };
    invoke(con, &call).unwrap()
}

pub(super) fn claimed(r: &DeliverReply) -> Vec<(String, u64, u32)> {
    r.claims
        .as_ref()
        .expect("not fenced or paused")
        .iter()
        .filter_map(|c| match c {
            Claim::Claimed(c) => Some((c.id.clone(), c.version, c.attempt)),
            _ => None,
        })
        .collect()
}

/// A FAIL of (id, version, attempt) at `now`, the namespace's policy `policy`, keeping
/// `keep` failed tasks.
#[allow(clippy::too_many_arguments)]
pub(super) fn fail(
    con: &mut Con,
    keys: &ShardKeys,
    now: u64,
    (id, version, attempt): (&str, u64, u32),
    retry: RetryAsk,
    policy: &str,
    keep: u64,
    next_run_ms: u64,
) -> FailReply {
    let error = format!("error of {id} at {attempt}");
    let call = Fail {
        keys,
        now: Some(now),
        tenure: Tenure::new(1, "w"),
        channel: "tw:{t}:wake",
        shard: 0,
        id,
        version,
        attempt,
        error: &error,
        retry,
        policy,
        draw: 0,
        keep,
        keep_ms: 86_400_000,
        next_run_ms,
    };
    invoke(con, &call).unwrap()
}

pub(super) fn acquired(con: &mut Con, keys: &ShardKeys) {
    let acquire = Acquire {
        keys,
        now: Some(T0),
        worker: "w",
        lease_ms: 3_600_000,
        held_epoch: 0,
    };
    assert_eq!(invoke(con, &acquire).unwrap().epoch, Some(1));
}

pub(super) fn detail(con: &mut Con, keys: &ShardKeys, id: &str) -> TaskReply {
    let call = InspectTask {
        keys,
        id,
        preview: 16,
        failed_only: false,
    };
    invoke(con, &call).unwrap().expect("a task")
}

/// A task's life through failures, as a table: each failed attempt is recorded with its
/// error; the delays follow the policy (the task's own before the namespace's); the attempt
/// that reaches the maximum moves the task to the failed set; stale and fenced failures
/// change nothing.
#[test]
fn failed_attempts_back_off_by_the_policy_then_move_to_the_failed_set() {
    let (_s, mut con, keys) = setup("fail");
    acquired(&mut con, &keys);
    // The namespace's policy: 4 attempts, 1 s doubling, capped at 3 s, no jitter.
    let ns_policy = "4,1000,2,3000,0,0";
    schedule(&mut con, &keys, T0, &[task("a", When::At(T0))]);
    let mut now = T0;
    let mut table = Vec::new();
    for attempt in 1..=4 {
        let c = claimed(&claim_at(&mut con, &keys, now, &["a"], false));
        assert_eq!(c, [("a".to_string(), 1, attempt)]);
        let r = fail(
            &mut con,
            &keys,
            now + 10,
            ("a", 1, attempt),
            RetryAsk::Policy,
            ns_policy,
            100,
            0,
        );
        if let FailReply::Retrying { run_at_ms, .. } = r {
            assert!(
                matches!(state(&mut con, &keys, "a"), TaskState::Pending { run_at_ms: r, attempts, .. } if r == run_at_ms && attempts == attempt)
            );
            table.push((attempt, Some(run_at_ms - (now + 10)), r));
            now = run_at_ms;
        } else {
            table.push((attempt, None, r));
        }
    }
    let failed = FailReply::Failed {
        reason: crate::FailReason::Exhausted,
        failures: 4,
        next_run_ms: 0,
    };
    let retrying = |run_at_ms, failures| FailReply::Retrying {
        run_at_ms,
        failures,
    };
    assert_eq!(
        table,
        [
            (1, Some(1_000), retrying(T0 + 1_010, 1)),
            (2, Some(2_000), retrying(T0 + 3_020, 2)),
            (3, Some(3_000), retrying(T0 + 6_030, 3)),
            (4, None, failed),
        ]
    );
    let TaskState::Failed {
        failed_at_ms,
        attempts: 4,
        version: 1,
        reason,
    } = state(&mut con, &keys, "a")
    else {
        panic!("{:?}", state(&mut con, &keys, "a"))
    };
    assert_eq!(
        (failed_at_ms, reason),
        (T0 + 6_040, crate::FailReason::Exhausted)
    );
    let d = detail(&mut con, &keys, "a");
    assert_eq!(d.failed, Some((T0 + 6_040, crate::FailReason::Exhausted)));
    assert_eq!(d.log.failures, 4);
    let errors: Vec<(u32, &str)> = d
        .log
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(
        errors,
        [
            (1, "error of a at 1"),
            (2, "error of a at 2"),
            (3, "error of a at 3"),
            (4, "error of a at 4")
        ]
    );
    assert_eq!(d.log.first_failed_ms, T0 + 10);
    // Gone from the task hash: a claim finds nothing, a cancel does not touch it.
    assert_eq!(
        claim_at(&mut con, &keys, now + 100, &["a"], false)
            .claims
            .unwrap(),
        [Claim::Gone { id: "a".into() }]
    );
    assert_eq!(
        invoke(
            &mut con,
            &Cancel {
                keys: &keys,
                ids: &["a"]
            }
        )
        .unwrap(),
        [false]
    );

    // A task's own policy wins; a non-retryable failure goes at once; a fixed delay is kept.
    let own = ScheduleTask {
        policy: "2,50,1,50,0,0".into(),
        ..task("b", When::At(now))
    };
    schedule(&mut con, &keys, now, &[own, task("c", When::At(now))]);
    assert_eq!(
        claimed(&claim_at(&mut con, &keys, now, &["b", "c"], false)).len(),
        2
    );
    assert_eq!(
        fail(
            &mut con,
            &keys,
            now,
            ("b", 2, 1),
            RetryAsk::Policy,
            ns_policy,
            100,
            0
        ),
        retrying(now + 50, 1)
    );
    assert_eq!(
        fail(
            &mut con,
            &keys,
            now,
            ("c", 3, 1),
            RetryAsk::AfterMs(7),
            ns_policy,
            100,
            0
        ),
        retrying(now + 7, 1)
    );
    assert_eq!(
        claimed(&claim_at(&mut con, &keys, now + 50, &["b", "c"], false)).len(),
        2
    );
    assert_eq!(
        fail(
            &mut con,
            &keys,
            now + 50,
            ("b", 2, 2),
            RetryAsk::Policy,
            ns_policy,
            100,
            0
        ),
        FailReply::Failed {
            reason: crate::FailReason::Exhausted,
            failures: 2,
            next_run_ms: 0
        }
    );
    // Stale (another attempt) and fenced (another epoch) change nothing.
    assert_eq!(
        fail(
            &mut con,
            &keys,
            now + 50,
            ("c", 3, 1),
            RetryAsk::Never,
            ns_policy,
            100,
            0
        ),
        FailReply::Stale
    );
    let fenced = Fail {
        tenure: Tenure::new(9, "w"),
        keys: &keys,
        now: Some(now),
        channel: "c",
        shard: 0,
        id: "c",
        version: 3,
        attempt: 2,
        error: "e",
        retry: RetryAsk::Never,
        policy: ns_policy,
        draw: 0,
        keep: 100,
        keep_ms: 1_000,
        next_run_ms: 0,
    };
    assert_eq!(invoke(&mut con, &fenced).unwrap(), FailReply::Fenced);
    assert_eq!(
        fail(
            &mut con,
            &keys,
            now + 60,
            ("c", 3, 2),
            RetryAsk::Never,
            ns_policy,
            100,
            0
        ),
        FailReply::Failed {
            reason: crate::FailReason::NonRetryable,
            failures: 2,
            next_run_ms: 0
        }
    );
    let ins = InspectShard {
        keys: &keys,
        now: Some(now),
        scan: 10,
    };
    let shard = invoke(&mut con, &ins).unwrap();
    assert_eq!(
        (shard.tasks, shard.in_flight, shard.failed, shard.trimmed),
        (0, 0, 3, 0)
    );
}

/// Jitter takes up to its share off a delay; the cap holds for any failure count.
#[test]
fn jitter_shortens_and_the_cap_holds() {
    let (_s, mut con, keys) = setup("jitter");
    acquired(&mut con, &keys);
    schedule(&mut con, &keys, T0, &[task("j", When::At(T0))]);
    claim_at(&mut con, &keys, T0, &["j"], false);
    let call = |draw| Fail {
        keys: &keys,
        now: Some(T0),
        tenure: Tenure::new(1, "w"),
        channel: "c",
        shard: 0,
        id: "j",
        version: 1,
        attempt: 1,
        error: "e",
        retry: RetryAsk::Policy,
        policy: "0,10000,1000,10000,0.5,0",
        draw,
        keep: 10,
        keep_ms: 1_000,
        next_run_ms: 0,
    };
    let r = invoke(&mut con, &call(999_999)).unwrap();
    assert!(
        matches!(r, FailReply::Retrying { run_at_ms, failures: 1 } if run_at_ms == T0 + 5_000),
        "{r:?}"
    );
    // Unlimited attempts (max 0): still retrying after many failures, at the cap.
    for attempt in 2..=40 {
        claim_at(
            &mut con,
            &keys,
            T0 + 100_000 * u64::from(attempt),
            &["j"],
            false,
        );
        let r = invoke(
            &mut con,
            &Fail {
                attempt,
                now: Some(T0 + 100_000 * u64::from(attempt)),
                ..call(0)
            },
        )
        .unwrap();
        let FailReply::Retrying {
            run_at_ms,
            failures,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(
            (run_at_ms - (T0 + 100_000 * u64::from(attempt)), failures),
            (10_000, attempt)
        );
    }
}

/// A recurring run that fails for good goes to the failed set and the series goes on (a new
/// version at its next run, no errors), unless its policy stops the series.
#[test]
fn a_failed_recurring_run_keeps_its_series_unless_the_policy_stops_it() {
    let (_s, mut con, keys) = setup("failrec");
    acquired(&mut con, &keys);
    let rec = |id, pol: &str| ScheduleTask {
        recurrence: "every:1000".into(),
        policy: pol.into(),
        ..task(id, When::At(T0))
    };
    schedule(
        &mut con,
        &keys,
        T0,
        &[rec("goes-on", ""), rec("stops", "1,1000,1,1000,0,1")],
    );
    claim_at(&mut con, &keys, T0, &["goes-on", "stops"], false);
    let next = T0 + 60_000;
    let r = fail(
        &mut con,
        &keys,
        T0,
        ("goes-on", 1, 1),
        RetryAsk::Never,
        "3,1,1,1,0,0",
        10,
        next,
    );
    assert_eq!(
        r,
        FailReply::Failed {
            reason: crate::FailReason::NonRetryable,
            failures: 1,
            next_run_ms: next
        }
    );
    assert!(
        matches!(state(&mut con, &keys, "goes-on"), TaskState::Pending { run_at_ms, attempts: 0, version: 3 } if run_at_ms == next)
    );
    let live = detail(&mut con, &keys, "goes-on");
    assert_eq!(
        (live.failed, live.log.failures),
        (None, 0),
        "the live run answers first, without errors"
    );
    let r = fail(
        &mut con,
        &keys,
        T0,
        ("stops", 2, 1),
        RetryAsk::Policy,
        "3,1,1,1,0,0",
        10,
        next,
    );
    assert_eq!(
        r,
        FailReply::Failed {
            reason: crate::FailReason::Exhausted,
            failures: 1,
            next_run_ms: 0
        }
    );
    assert!(matches!(
        state(&mut con, &keys, "stops"),
        TaskState::Failed { .. }
    ));
    // An operator's retry of the run whose series goes on is refused: the series holds the id.
    let act = |con: &mut Con, act, ids: &[&str]| {
        invoke(
            con,
            &FailedActIds {
                keys: &keys,
                now: Some(T0 + 5),
                channel: "c",
                shard: 0,
                act,
                ids,
            },
        )
        .unwrap()
    };
    assert_eq!(
        act(&mut con, Act::Retry, &["goes-on", "stops", "never"]),
        [ActResult::Exists, ActResult::Done, ActResult::NotFailed]
    );
    // The retried task is pending now, with a new version, fresh attempts, and its history.
    assert!(
        matches!(state(&mut con, &keys, "stops"), TaskState::Pending { run_at_ms, attempts: 0, version: 4 } if run_at_ms == T0 + 5)
    );
    let d = detail(&mut con, &keys, "stops");
    assert_eq!((d.log.failures, d.log.errors.len()), (0, 1));
    assert_eq!(d.row.recurrence, "every:1000");
    assert_eq!(act(&mut con, Act::Discard, &["goes-on"]), [ActResult::Done]);
    assert!(
        matches!(state(&mut con, &keys, "goes-on"), TaskState::Pending { .. }),
        "the live series stays"
    );
}

/// Acknowledging, cancelling and replacing a task take its error log with it; the retention
/// bound trims the oldest failed task and counts it.
#[test]
fn error_logs_go_with_their_task_and_retention_trims_the_oldest() {
    let (_s, mut con, keys) = setup("logs");
    acquired(&mut con, &keys);
    let ids = ["ack", "cancel", "replace", "x", "y"];
    let tasks: Vec<ScheduleTask> = ids.iter().map(|id| task(id, When::At(T0))).collect();
    schedule(&mut con, &keys, T0, &tasks);
    claim_at(&mut con, &keys, T0, &ids, false);
    for (v, id) in ids.iter().enumerate() {
        let r = fail(
            &mut con,
            &keys,
            T0,
            (id, v as u64 + 1, 1),
            RetryAsk::AfterMs(0),
            "5,1,1,1,0,0",
            1,
            0,
        );
        assert!(matches!(r, FailReply::Retrying { .. }), "{r:?}");
    }
    let errors = |con: &mut Con, id| detail(con, &keys, id).log.failures;
    assert_eq!(errors(&mut con, "ack"), 1);
    claim_at(&mut con, &keys, T0 + 1, &["ack"], false);
    let item = AckItem {
        id: "ack",
        version: 1,
        attempt: 2,
        next_run_ms: None,
    };
    let ack = Ack {
        keys: &keys,
        tenure: Tenure::new(1, "w"),
        channel: "c",
        shard: 0,
        acks: &[item],
    };
    assert_eq!(invoke(&mut con, &ack).unwrap(), Some(vec![true]));
    invoke(
        &mut con,
        &Cancel {
            keys: &keys,
            ids: &["cancel"],
        },
    )
    .unwrap();
    schedule(&mut con, &keys, T0, &[task("replace", When::At(T0 + 10))]);
    assert_eq!(
        errors(&mut con, "replace"),
        0,
        "a new version starts without failures"
    );
    let left: Vec<String> = redis::cmd("HKEYS").arg(&keys.0[4]).query(&mut con).unwrap();
    assert_eq!(left.len(), 2, "{left:?}: only x and y keep their logs");
    // Keep 1: the second failure trims the first.
    claim_at(&mut con, &keys, T0 + 1, &["x", "y"], false);
    fail(
        &mut con,
        &keys,
        T0 + 2,
        ("x", 4, 2),
        RetryAsk::Never,
        "5,1,1,1,0,0",
        1,
        0,
    );
    fail(
        &mut con,
        &keys,
        T0 + 3,
        ("y", 5, 2),
        RetryAsk::Never,
        "5,1,1,1,0,0",
        1,
        0,
    );
    assert_eq!(state(&mut con, &keys, "x"), TaskState::Unknown);
    assert!(matches!(
        state(&mut con, &keys, "y"),
        TaskState::Failed { .. }
    ));
    let shard = invoke(
        &mut con,
        &InspectShard {
            keys: &keys,
            now: Some(T0),
            scan: 10,
        },
    )
    .unwrap();
    assert_eq!((shard.failed, shard.trimmed), (1, 1));
}
