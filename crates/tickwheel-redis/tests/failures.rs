//! Tasks that fail, on virtual time against a real redis-server: retries by the policy (the
//! namespace's or the task's own), panics recorded as failed attempts, non-retryable
//! failures, the failed set with its errors, an operator's retry and discard, and pause.

mod common;

use std::cell::RefCell;
use std::time::Duration;

use tickwheel_redis::{
    Acted, Delivery, FailReason, FailedFilter, Inspector, Outcome, Producer, RetryPolicy, RunAt,
    Task, TaskState, Worker,
};

const T0: u64 = 1_000_000;

/// The handler's calls: (id, attempt, the clock when called).
type Calls = RefCell<Vec<(String, u32, u64)>>;

/// A step at `ms`: windows read again, then due tasks delivered.
fn step_at(
    w: &mut Worker,
    time: &tickwheel_redis::ManualTime,
    ms: u64,
    h: &mut dyn FnMut(&Delivery) -> Outcome,
) {
    time.set_ms(ms);
    w.reload_windows();
    w.tick(h).unwrap();
}

#[test]
fn failing_tasks_retry_by_their_policy_then_fail_with_their_errors() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "fails", 4);
    cfg.retry = RetryPolicy::fixed(3, Duration::from_millis(500));
    let mut p = Producer::connect(&cfg).unwrap();
    let own = RetryPolicy::fixed(2, Duration::from_millis(200));
    let at = RunAt::AtMillis(T0 + 100);
    p.schedule_many([
        Task::new("poison", at, b"1"),
        Task::new("panics", at, b"2").retry(own),
        Task::new("fatal", at, b"3"),
        Task::new("fine", at, b"4"),
    ])
    .unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let calls: Calls = RefCell::new(Vec::new());
    let healed = RefCell::new(false);
    let mut handler = |d: &Delivery| {
        let now = time.now_ms();
        calls.borrow_mut().push((d.id.clone(), d.attempt, now));
        match d.id.as_str() {
            "poison" if !*healed.borrow() => Outcome::fail(format!("boom {}", d.attempt)),
            "panics" => panic!("kaboom {}", d.attempt),
            "fatal" => Outcome::non_retryable("bad payload"),
            _ => Outcome::Ack,
        }
    };
    for ms in (0..=3000).step_by(50) {
        step_at(&mut w, &time, T0 + ms, &mut handler);
    }
    let mut by_task: Vec<(String, u32, u64)> = calls.borrow().clone();
    by_task.sort();
    assert_eq!(
        by_task,
        [
            ("fatal".into(), 1, T0 + 100),
            ("fine".into(), 1, T0 + 100),
            ("panics".into(), 1, T0 + 100),
            ("panics".into(), 2, T0 + 300),
            ("poison".into(), 1, T0 + 100),
            ("poison".into(), 2, T0 + 600),
            ("poison".into(), 3, T0 + 1100),
        ],
        "each failing task is called its maximum attempts, its policy's delay apart"
    );
    let st = w.stats();
    assert_eq!(st.failed_attempts, 6);
    assert_eq!((st.failed.exhausted, st.failed.non_retryable), (2, 1));
    assert_eq!(p.state("fine").unwrap(), TaskState::Unknown);
    for (id, reason) in [
        ("poison", FailReason::Exhausted),
        ("panics", FailReason::Exhausted),
        ("fatal", FailReason::NonRetryable),
    ] {
        match p.state(id).unwrap() {
            TaskState::Failed { reason: r, .. } => assert_eq!(r, reason, "{id}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    // The failed set, with every attempt's error.
    let mut ins = Inspector::connect(&cfg).unwrap();
    let failed = ins.failed(&FailedFilter::default()).unwrap();
    let mut seen: Vec<(String, Vec<String>)> = failed
        .iter()
        .map(|f| {
            (
                f.id.clone(),
                f.errors.errors.iter().map(|e| e.error.clone()).collect(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("fatal".into(), vec!["bad payload".to_string()]),
            (
                "panics".into(),
                vec!["panicked: kaboom 1".into(), "panicked: kaboom 2".into()]
            ),
            (
                "poison".into(),
                vec!["boom 1".into(), "boom 2".into(), "boom 3".into()]
            ),
        ]
    );
    assert_eq!(ins.stats().unwrap().failed(), 3);
    let only = FailedFilter {
        error_contains: Some("kaboom".into()),
        ..FailedFilter::default()
    };
    assert_eq!(ins.failed(&only).unwrap().len(), 1);

    // The operator retries one: it runs again, with fresh attempts, and now succeeds.
    *healed.borrow_mut() = true;
    assert_eq!(
        p.retry_failed(["poison", "nope"]).unwrap(),
        [Acted::Done, Acted::NotFailed]
    );
    calls.borrow_mut().clear();
    step_at(&mut w, &time, T0 + 3100, &mut handler);
    assert_eq!(*calls.borrow(), [("poison".to_string(), 1, T0 + 3100)]);
    assert_eq!(
        p.state("poison").unwrap(),
        TaskState::Unknown,
        "acknowledged"
    );
    // And discards the panicking one by its error text.
    let report = p.discard_failed_where(&only).unwrap();
    assert_eq!(
        (report.acted, report.examined),
        (1, 2),
        "both read, one matched"
    );
    assert_eq!(ins.stats().unwrap().failed(), 1);
    assert_eq!(p.discard_failed(["fatal"]).unwrap(), [Acted::Done]);
    assert_eq!(p.state("fatal").unwrap(), TaskState::Unknown);
    common::check_layout(&s.url(), "fails", 4);
}

#[test]
fn a_paused_namespace_delivers_nothing_then_everything_due_in_run_at_order() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "pause", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    // Insertion order is not run-at order.
    for (id, ms) in [("e", 500), ("c", 300), ("a", 100), ("d", 400), ("b", 200)] {
        p.schedule(id, RunAt::AtMillis(T0 + ms), b"").unwrap();
    }
    let mut w = Worker::connect(&cfg).unwrap();
    let calls: Calls = RefCell::new(Vec::new());
    let mut handler = |d: &Delivery| {
        calls
            .borrow_mut()
            .push((d.id.clone(), d.attempt, time.now_ms()));
        Outcome::Ack
    };
    // Claimed ahead (1 s) at T0, then paused before any is due.
    step_at(&mut w, &time, T0, &mut handler);
    assert_eq!(p.pause().unwrap(), 2);
    // The worker hears the pause (a notification) and puts its claims back.
    assert!(common::eventually(Duration::from_secs(5), || {
        w.tick(&mut handler).unwrap();
        w.status().snapshot().shards.iter().all(|s| s.paused)
    }));
    for ms in (0..=2000).step_by(100) {
        step_at(&mut w, &time, T0 + ms, &mut handler);
    }
    assert!(
        calls.borrow().is_empty(),
        "no handler runs while paused: {:?}",
        calls.borrow()
    );
    // Scheduling, cancelling and inspecting go on.
    p.schedule("f", RunAt::AtMillis(T0 + 600), b"").unwrap();
    assert!(p.cancel("d").unwrap());
    let stats = Inspector::connect(&cfg).unwrap().stats().unwrap();
    assert_eq!(
        (stats.paused(), stats.pending(), stats.in_flight()),
        (2, 5, 0)
    );
    assert_eq!(p.resume().unwrap(), 2);
    step_at(&mut w, &time, T0 + 2100, &mut handler);
    let order: Vec<(String, u32)> = calls.borrow().iter().map(|c| (c.0.clone(), c.1)).collect();
    let want: Vec<(String, u32)> = ["a", "b", "c", "e", "f"]
        .iter()
        .map(|s| (s.to_string(), 1))
        .collect();
    assert_eq!(
        order, want,
        "every task due meanwhile, in run-at order, each a first attempt"
    );
}

/// A recurring series whose run fails for good: the run goes to the failed set and the
/// series goes on at its next run (the default); with `stop_series_on_failure` it ends.
#[test]
fn a_failed_recurring_run_keeps_the_series_unless_its_policy_stops_it() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "failrec", 2);
    cfg.retry = RetryPolicy::fixed(2, Duration::from_millis(10));
    cfg.claim_ahead = Duration::ZERO; // the next run stays pending, to be looked at
    let mut p = Producer::connect(&cfg).unwrap();
    let every = tickwheel_redis::Recurrence::Every(Duration::from_millis(1000));
    let stop = RetryPolicy {
        stop_series_on_failure: true,
        ..RetryPolicy::no_retry()
    };
    let at = RunAt::AtMillis(T0 + 100);
    p.schedule_many([
        Task::new("goes-on", at, b"").recurring(&every),
        Task::new("stops", at, b"").recurring(&every).retry(stop),
    ])
    .unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let calls: Calls = RefCell::new(Vec::new());
    let mut handler = |d: &Delivery| {
        calls
            .borrow_mut()
            .push((d.id.clone(), d.attempt, time.now_ms()));
        if time.now_ms() < T0 + 1000 {
            Outcome::fail("the first run fails")
        } else {
            Outcome::Ack
        }
    };
    for ms in (0..=2200).step_by(10) {
        step_at(&mut w, &time, T0 + ms, &mut handler);
    }
    let mut got = calls.borrow().clone();
    got.sort();
    // The retried run was delivered at T0 + 110; the series keeps its phase (T0 + 100 and
    // every second on), as the docs of `RetryPolicy` say.
    assert_eq!(
        got,
        [
            ("goes-on".into(), 1, T0 + 100),
            ("goes-on".into(), 1, T0 + 1100),
            ("goes-on".into(), 1, T0 + 2100),
            ("goes-on".into(), 2, T0 + 110),
            ("stops".into(), 1, T0 + 100),
        ],
        "goes-on: two failed attempts, then its next runs; stops: one, and no more"
    );
    assert!(
        matches!(p.state("goes-on").unwrap(), TaskState::Pending { run_at_ms, .. } if run_at_ms == T0 + 3100)
    );
    assert!(matches!(
        p.state("stops").unwrap(),
        TaskState::Failed {
            reason: FailReason::Exhausted,
            ..
        }
    ));
    let failed = Inspector::connect(&cfg)
        .unwrap()
        .failed(&FailedFilter::default())
        .unwrap();
    let ids: Vec<&str> = failed.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}: both failed runs are kept");
}
