//! Recurring tasks on virtual time against a real redis-server: a period delivered at exact
//! instants, a cron pattern across daylight-saving changes at the instants `Cron::next_after`
//! gives, cancel between and during runs, and a worker killed between a delivery and its
//! acknowledgement.

mod common;

use std::time::Duration;

use tickwheel::cron::jiff::Timestamp;
use tickwheel::cron::Cron;
use tickwheel_redis::{
    Config, Delivery, Error, ManualTime, Outcome, Producer, Recurrence, RunAt, TaskState,
    TimeSource, Worker,
};

const T0: u64 = 1_000_000;

/// (id, attempt, due) of every delivery of one tick, answered with `outcome`.
fn tick(w: &mut Worker, outcome: Outcome) -> Vec<(String, u32, u64)> {
    let mut got = Vec::new();
    w.tick(&mut |d: &Delivery| {
        got.push((d.id.clone(), d.attempt, d.due_ms));
        outcome.clone()
    })
    .unwrap();
    got
}

/// A deterministic step: reload the windows first (no notification in flight matters).
fn step(w: &mut Worker, outcome: Outcome) -> Vec<(String, u32, u64)> {
    w.reload_windows();
    tick(w, outcome)
}

fn config(s: &tickwheel_redis::server::RedisServer, ns: &str, start: u64) -> (Config, ManualTime) {
    let time = ManualTime::new(start);
    let mut cfg = Config::new(s.url(), ns);
    cfg.shards = 2;
    cfg.time = TimeSource::Manual(time.clone());
    (cfg, time)
}

#[test]
fn a_periodic_task_runs_at_exact_instants_re_armed_by_its_ack() {
    let s = common::server();
    let (cfg, time) = config(&s, "period", T0);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let every = Recurrence::Every(Duration::from_millis(250));
    assert!(
        !p.schedule_recurring("p", RunAt::AtMillis(T0 + 100), &every, b"tick")
            .unwrap()
            .replaced
    );
    assert!(step(&mut w, Outcome::Ack).is_empty());
    for k in 0..8u64 {
        let due = T0 + 100 + 250 * k;
        time.set_ms(due - 1);
        assert!(tick(&mut w, Outcome::Ack).is_empty(), "run {k}: not early");
        time.set_ms(due);
        // No reload: after the first run the next one reaches the wheel through the
        // notification the acknowledging script publishes.
        let mut d: Option<Delivery> = None;
        w.tick(&mut |x: &Delivery| {
            assert!(d.is_none(), "one delivery per run");
            d = Some(x.clone());
            Outcome::Ack
        })
        .unwrap();
        let d = d.unwrap_or_else(|| panic!("run {k} at {due} not delivered"));
        assert_eq!((d.id.as_str(), d.attempt, d.due_ms), ("p", 1, due));
        assert_eq!(d.payload, b"tick");
        assert_eq!(d.recurrence, Some(every.clone()));
        // The acknowledgement has re-armed the next run, with a new version.
        match p.state("p").unwrap() {
            TaskState::Pending {
                run_at_ms,
                attempts,
                version,
            } => {
                assert_eq!((run_at_ms, attempts), (due + 250, 0));
                assert!(version > d.version);
            }
            other => panic!("after run {k}: {other:?}"),
        }
        wait_for_wheel(&mut w, 1);
    }
    let st = w.stats();
    assert_eq!((st.delivered, st.acked, st.stale_acks), (8, 8, 0));
}

/// Waits (wall clock, for pub/sub) until the wheel holds `n` tasks; time does not move.
fn wait_for_wheel(w: &mut Worker, n: usize) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while w.in_wheel() != n {
        assert!(tick(w, Outcome::Ack).is_empty());
        assert!(
            std::time::Instant::now() < until,
            "{} in the wheel",
            w.in_wheel()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_cron_task_runs_at_the_instants_of_its_schedule_across_dst_changes() {
    let s = common::server();
    let ms = |t: &str| t.parse::<Timestamp>().unwrap().as_millisecond() as u64;
    // 02:30 every day in Paris: it does not exist on 2026-03-29 (clocks go 02:00 -> 03:00),
    // and occurs twice on 2026-10-25 (03:00 -> 02:00).
    let (pattern, zone) = ("30 2 * * *", "Europe/Paris");
    let cron = Cron::new(pattern, zone).unwrap();
    let rec = Recurrence::cron(pattern, zone).unwrap();
    for (from, runs) in [("2026-03-26T12:00:00Z", 5), ("2026-10-23T12:00:00Z", 4)] {
        let start = ms(from);
        let (cfg, time) = config(&s, &format!("cron{start}"), start);
        let mut p = Producer::connect(&cfg).unwrap();
        let mut w = Worker::connect(&cfg).unwrap();
        // The reference: Cron::next_after, one run after another.
        let mut want = Vec::new();
        let mut t = Timestamp::from_millisecond(start as i64).unwrap();
        for _ in 0..runs {
            t = cron.next_after(t).unwrap();
            want.push(t.as_millisecond() as u64);
        }
        let first = rec.next_after_ms(start).unwrap().unwrap();
        assert_eq!(first, want[0]);
        p.schedule_recurring("c", RunAt::AtMillis(first), &rec, b"")
            .unwrap();
        for &due in &want {
            time.set_ms(due - 1);
            assert!(step(&mut w, Outcome::Ack).is_empty(), "not before {due}");
            time.set_ms(due);
            assert_eq!(step(&mut w, Outcome::Ack), [("c".to_string(), 1, due)]);
        }
        assert!(matches!(p.state("c").unwrap(), TaskState::Pending { .. }));
        // The DST days are in the series: the gap's run right after the gap (03:00 CEST =
        // 01:00Z), the fold's once, in its first pass (02:30 CEST = 00:30Z).
        let dst = if from.starts_with("2026-03") {
            ms("2026-03-29T01:00:00Z")
        } else {
            ms("2026-10-25T00:30:00Z")
        };
        assert!(want.contains(&dst), "{want:?}");
        assert!(
            !want.contains(&ms("2026-10-25T01:30:00Z")),
            "no second pass"
        );
    }
}

#[test]
fn cancel_stops_the_series_between_runs_and_during_a_run() {
    let s = common::server();
    let (cfg, time) = config(&s, "cancel", T0);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let every = Recurrence::Every(Duration::from_millis(100));
    for id in ["between", "during"] {
        p.schedule_recurring(id, RunAt::AtMillis(T0 + 100), &every, b"")
            .unwrap();
    }
    time.set_ms(T0 + 100);
    assert_eq!(step(&mut w, Outcome::Ack).len(), 2);
    // Between runs: the next run is pending; cancel takes it away.
    assert!(p.cancel("between").unwrap());
    assert!(!p.cancel("between").unwrap(), "already stopped");
    time.set_ms(T0 + 200);
    // During a run: it is in flight (not acknowledged); cancel stops the series and the run
    // in hand can no longer be acknowledged nor delivered again.
    let mut held: Option<Delivery> = None;
    w.reload_windows();
    w.tick(&mut |d: &Delivery| {
        held = Some(d.clone());
        Outcome::Leave
    })
    .unwrap();
    assert_eq!(held.as_ref().map(|d| d.id.as_str()), Some("during"));
    assert!(matches!(
        p.state("during").unwrap(),
        TaskState::InFlight { .. }
    ));
    assert!(p.cancel("during").unwrap());
    assert_eq!(p.state("during").unwrap(), TaskState::Unknown);
    // Past every later run and the visibility timeout: nothing.
    for t in [300, 1_000, 40_000] {
        time.set_ms(T0 + t);
        assert!(step(&mut w, Outcome::Ack).is_empty(), "at +{t}");
    }
    assert!(p.is_empty().unwrap());
    // A one-shot task in flight is still settled by its handler, not by cancel.
    p.schedule("once", RunAt::AtMillis(T0 + 40_000), b"")
        .unwrap();
    assert_eq!(step(&mut w, Outcome::Leave).len(), 1);
    assert!(!p.cancel("once").unwrap());
}

#[test]
fn a_worker_killed_between_delivery_and_ack_redelivers_the_same_run() {
    let s = common::server();
    let (mut cfg, time) = config(&s, "killed", T0);
    cfg.lease = Duration::from_secs(2);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut a = Worker::connect(&cfg).unwrap();
    tick(&mut a, Outcome::Ack);
    let every = Recurrence::Every(Duration::from_secs(10));
    p.schedule_recurring("r", RunAt::AtMillis(T0 + 100), &every, b"")
        .unwrap();
    time.set_ms(T0 + 100);
    // A's handler ran, but A dies before its acknowledgement reaches Redis.
    assert_eq!(
        step(&mut a, Outcome::Leave),
        [("r".to_string(), 1, T0 + 100)]
    );
    drop(a);

    let mut b = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 100 + 2_500); // past A's lease: B takes the shards over
    assert_eq!(
        step(&mut b, Outcome::Ack),
        [("r".to_string(), 2, T0 + 100)],
        "the same run again (attempt 2), not the next one"
    );
    assert!(matches!(
        p.state("r").unwrap(),
        TaskState::Pending { run_at_ms, attempts: 0, .. } if run_at_ms == T0 + 10_100
    ));
    time.set_ms(T0 + 10_099);
    assert!(
        step(&mut b, Outcome::Ack).is_empty(),
        "the next run is not early"
    );
    time.set_ms(T0 + 10_100);
    assert_eq!(
        step(&mut b, Outcome::Ack),
        [("r".to_string(), 1, T0 + 10_100)],
        "the next run once, at its instant"
    );
    assert!(step(&mut b, Outcome::Ack).is_empty(), "not twice");
    time.set_ms(T0 + 20_100);
    assert_eq!(step(&mut b, Outcome::Ack).len(), 1);
}

#[test]
fn bad_recurrences_are_clear_errors() {
    let s = common::server();
    let (cfg, _) = config(&s, "badrec", T0);
    let mut p = Producer::connect(&cfg).unwrap();
    let bad = [
        Recurrence::Every(Duration::ZERO),
        Recurrence::Cron {
            pattern: "0 9 * * TUE".into(),
            zone: "Mars/Olympus".into(),
        },
        Recurrence::Cron {
            pattern: "61 * * * *".into(),
            zone: "UTC".into(),
        },
    ];
    for rec in &bad {
        let r = p.schedule_recurring("x", RunAt::AtMillis(T0), rec, b"");
        assert!(
            matches!(r, Err(Error::InvalidRecurrence(_))),
            "{rec:?}: {r:?}"
        );
    }
    assert!(p.is_empty().unwrap(), "nothing stored");
}

#[test]
fn schedule_many_stores_recurring_tasks_as_schedule_recurring_does() {
    let s = common::server();
    let (cfg, time) = config(&s, "bulk", T0);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let every = Recurrence::Every(Duration::from_millis(300));
    let tasks = [
        tickwheel_redis::Task {
            id: "once",
            run_at: RunAt::AtMillis(T0 + 100),
            payload: b"o",
            recurrence: None,
            retry: None,
        },
        tickwheel_redis::Task {
            id: "again",
            run_at: RunAt::AtMillis(T0 + 100),
            payload: b"a",
            recurrence: Some(&every),
            retry: None,
        },
    ];
    assert!(p.schedule_many(tasks).unwrap().iter().all(|s| !s.replaced));
    let mut runs = Vec::new();
    for due in [T0 + 100, T0 + 400, T0 + 700] {
        time.set_ms(due);
        let mut got = step(&mut w, Outcome::Ack);
        got.sort();
        runs.push(got);
    }
    assert_eq!(
        runs,
        [
            vec![("again".into(), 1, T0 + 100), ("once".into(), 1, T0 + 100)],
            vec![("again".to_string(), 1, T0 + 400)],
            vec![("again".to_string(), 1, T0 + 700)],
        ]
    );
    assert!(matches!(
        p.state("again").unwrap(),
        TaskState::Pending { run_at_ms, .. } if run_at_ms == T0 + 1000
    ));
    assert_eq!(p.state("once").unwrap(), TaskState::Unknown);

    // A recurrence that cannot be stored is refused before anything is sent.
    let bad = Recurrence::Every(Duration::ZERO);
    let r = p.schedule_many([tickwheel_redis::Task {
        id: "bad",
        run_at: RunAt::AtMillis(T0),
        payload: b"",
        recurrence: Some(&bad),
        retry: None,
    }]);
    assert!(matches!(r, Err(Error::InvalidRecurrence(_))), "{r:?}");
    assert_eq!(p.state("bad").unwrap(), TaskState::Unknown);
}
