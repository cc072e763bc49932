//! `Producer::schedule_once` against a real redis-server: a table of what it answers for an
//! id in each state (virtual time, `Worker::tick`), a whole bulk call sent again, and the
//! failure of issue 35 replayed for real: a schedule whose reply is lost (a timeout while
//! Redis is busy, the call applied after it) and that is sent again after the task ran.
//! `schedule` sent again delivers the task twice; `schedule_once` once.

mod common;

use std::time::{Duration, Instant};

use tickwheel_redis::{
    Config, Delivery, Error, FailReason, Inspector, Outcome, Producer, RunAt, ScheduledOnce, Task,
    TaskState, Worker,
};

const T0: u64 = 1_000_000;
const WINDOW_MS: u64 = 10_000;

/// Ticks at `now` with `outcome` for every delivery; returns the ids delivered.
fn tick_at(
    w: &mut Worker,
    time: &tickwheel_redis::ManualTime,
    now: u64,
    outcome: impl Fn(&Delivery) -> Outcome,
) -> Vec<String> {
    time.set_ms(now);
    let mut ids = Vec::new();
    w.reload_windows();
    w.tick(&mut |d: &Delivery| {
        ids.push(d.id.clone());
        outcome(d)
    })
    .unwrap();
    ids
}

fn stored_at(a: ScheduledOnce) -> u64 {
    match a {
        ScheduledOnce::Stored(s) => {
            assert!(!s.replaced);
            s.run_at_ms
        }
        a => panic!("not stored: {a:?}"),
    }
}

/// The table: each id is brought to a state (by `schedule`, `schedule_once`, a worker's
/// outcome, `cancel`), then `schedule_once` of it at the time given answers as written.
#[test]
fn schedule_once_answers_by_the_ids_state_and_its_window() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "once", 4);
    cfg.claim_ahead = Duration::ZERO;
    cfg.idempotency_window = Duration::from_millis(WINDOW_MS);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let at = |ms| RunAt::AtMillis(ms);

    // Absent: stored.
    assert_eq!(
        stored_at(p.schedule_once("absent", at(T0 + 50), b"a").unwrap()),
        T0 + 50
    );
    // Pending, in flight, failed: stored by `schedule`, delivered with Leave (stays in
    // flight) or a non-retryable failure.
    p.schedule("pending", at(T0 + 60_000), b"").unwrap();
    p.schedule("in-flight", at(T0 + 10), b"").unwrap();
    p.schedule("failed", at(T0 + 10), b"").unwrap();
    // Acknowledged (within the window, and after it), cancelled: by `schedule_once`.
    for id in ["acked-within", "acked-after"] {
        stored_at(p.schedule_once(id, at(T0 + 10), b"").unwrap());
    }
    stored_at(p.schedule_once("cancelled", at(T0 + 20_000), b"").unwrap());
    assert!(p.cancel("cancelled").unwrap());
    let mut delivered = tick_at(&mut w, &time, T0 + 10, |d| match d.id.as_str() {
        "in-flight" => Outcome::Leave,
        "failed" => Outcome::non_retryable("for good"),
        _ => Outcome::Ack,
    });
    delivered.sort();
    assert_eq!(
        delivered,
        ["acked-after", "acked-within", "failed", "in-flight"]
    );
    let state = |p: &mut Producer, id: &str| p.state(id).unwrap();

    let pending = state(&mut p, "pending");
    let in_flight = state(&mut p, "in-flight");
    assert!(matches!(in_flight, TaskState::InFlight { attempt: 1, .. }));
    let failed = state(&mut p, "failed");
    assert!(matches!(
        failed,
        TaskState::Failed {
            reason: FailReason::NonRetryable,
            ..
        }
    ));
    let window_end = T0 + WINDOW_MS; // the acknowledged ids were named at T0
    let table = [
        ("pending", T0 + 100, ScheduledOnce::Exists(pending)),
        ("in-flight", T0 + 100, ScheduledOnce::Exists(in_flight)),
        ("failed", T0 + 100, ScheduledOnce::Exists(failed)),
        ("acked-within", window_end - 1, ScheduledOnce::Remembered),
        ("cancelled", window_end - 1, ScheduledOnce::Remembered),
    ];
    for (id, now, want) in table {
        time.set_ms(now);
        let got = p.schedule_once(id, at(now + 5), b"again").unwrap();
        assert_eq!(got, want, "{id} at T0 + {}", now - T0);
    }
    // Nothing of those was stored: the states are as they were, the cancelled task gone.
    assert_eq!(state(&mut p, "pending"), pending);
    assert_eq!(state(&mut p, "in-flight"), in_flight);
    assert_eq!(state(&mut p, "cancelled"), TaskState::Unknown);
    assert_eq!(state(&mut p, "acked-within"), TaskState::Unknown);
    // "absent" was stored at T0 (run-at T0 + 50) and delivered since: remembered within
    // the window (the tick above ran before its run-at; deliver it now).
    let d = tick_at(&mut w, &time, window_end - 1, |_| Outcome::Ack);
    assert_eq!(d, ["absent"]);
    time.set_ms(window_end - 1);
    assert_eq!(
        p.schedule_once("absent", at(T0 + 50), b"a").unwrap(),
        ScheduledOnce::Remembered
    );
    // After the window, an acknowledged id is free again: stored.
    time.set_ms(window_end);
    let again = p
        .schedule_once("acked-after", at(window_end + 5), b"")
        .unwrap();
    assert_eq!(stored_at(again), window_end + 5);

    // An id repeated in one bulk call: stored the first time, the task just stored after.
    let tasks = [
        Task::new("twice", at(window_end + 100), b"1"),
        Task::new("twice", at(window_end + 200), b"2"),
    ];
    let got = p.schedule_once_many(tasks).unwrap();
    let run_at = stored_at(got[0]);
    let ScheduledOnce::Stored(first) = got[0] else {
        unreachable!()
    };
    assert_eq!(
        got[1],
        ScheduledOnce::Exists(TaskState::Pending {
            run_at_ms: run_at,
            attempts: 0,
            version: first.version
        })
    );
    // Nothing delivered twice, nothing more delivered than the table says.
    let d = tick_at(&mut w, &time, window_end + 10_000, |_| Outcome::Ack);
    let mut d = d;
    d.sort();
    assert_eq!(d, ["acked-after", "twice"]);
    common::check_layout(&s.url(), "once", 4);
}

/// A whole bulk call sent again (as after an error that leaves its outcome unknown) stores
/// nothing twice, whatever ran in between; the same with `schedule_many` stores all again.
#[test]
fn a_bulk_call_sent_again_whole_stores_nothing_twice() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "bulk", 8);
    cfg.claim_ahead = Duration::ZERO;
    cfg.idempotency_window = Duration::from_millis(WINDOW_MS);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..40).map(|i| format!("b{i}")).collect();
    let tasks = |ids: &[String]| -> Vec<Task<'static>> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let id: &'static str = Box::leak(id.clone().into_boxed_str());
                Task::new(id, RunAt::AtMillis(T0 + (i as u64 % 2) * 5_000), b"")
            })
            .collect()
    };
    let first = p.schedule_once_many(tasks(&ids)).unwrap();
    assert!(first.iter().all(|a| a.stored().is_some()));
    // Half are due and delivered; then the whole call again.
    let d = tick_at(&mut w, &time, T0, |_| Outcome::Ack);
    assert_eq!(d.len(), 20);
    let again = p.schedule_once_many(tasks(&ids)).unwrap();
    for (i, a) in again.iter().enumerate() {
        match (i % 2, a) {
            (0, ScheduledOnce::Remembered) => {}
            (1, ScheduledOnce::Exists(TaskState::Pending { version, .. })) => {
                assert_eq!(Some(*version), first[i].stored().map(|s| s.version));
            }
            _ => panic!("task {i}: {a:?}"),
        }
    }
    let d = tick_at(&mut w, &time, T0 + 6_000, |_| Outcome::Ack);
    assert_eq!(d.len(), 20, "the other half, once");
    assert_eq!(
        tick_at(&mut w, &time, T0 + 9_000, |_| Outcome::Ack).len(),
        0
    );
    // The contrast: `schedule_many` sent again stores every task again.
    p.schedule_many(tasks(&ids)).unwrap();
    assert_eq!(
        tick_at(&mut w, &time, T0 + 9_001, |_| Outcome::Ack).len(),
        40
    );
}

/// Makes Redis busy for `ms` (a script that spins on `TIME`), on its own connection.
fn busy(url: &str, ms: u64) -> std::thread::JoinHandle<()> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let spin = r"
local t = redis.call('TIME')
local until_us = t[1] * 1000000 + t[2] + tonumber(ARGV[1]) * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us
return 1";
        let _: i64 = redis::Script::new(spin).arg(ms).invoke(&mut con).unwrap();
    })
}

/// Issue 35's failure, replayed: a schedule times out while Redis is busy (the caller cannot
/// know it was stored: Redis applies it once free), the task runs and is acknowledged, then
/// the caller sends the schedule again. With `schedule` the task is stored and delivered a
/// second time; with `schedule_once`, once. Real time: the timeout is real.
#[test]
fn a_schedule_once_sent_again_after_a_lost_reply_delivers_the_task_once() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "lost", 2);
    cfg.claim_ahead = Duration::ZERO;
    cfg.io_timeout = Duration::from_millis(300);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let mut deliveries = |once: bool, id: &str| -> usize {
        let send = |p: &mut Producer| -> Result<(), Error> {
            if once {
                p.schedule_once(id, RunAt::AtMillis(T0), b"").map(|_| ())
            } else {
                p.schedule(id, RunAt::AtMillis(T0), b"").map(|_| ())
            }
        };
        let spin = busy(&s.url(), 1_000);
        std::thread::sleep(Duration::from_millis(100)); // the spin runs
        let started = Instant::now();
        let e = send(&mut p).expect_err("the reply times out");
        assert!(matches!(e, Error::Redis(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "timed out, not refused"
        );
        spin.join().unwrap();
        // Applied once Redis was free: the reply was lost, the task stored.
        assert!(common::eventually(Duration::from_secs(2), || matches!(
            p.state(id),
            Ok(TaskState::Pending { .. })
        )));
        let mut n = tick_at(&mut w, &time, T0, |_| Outcome::Ack).len();
        assert_eq!(n, 1, "delivered and acknowledged");
        send(&mut p).expect("sent again");
        n += tick_at(&mut w, &time, T0 + 1, |_| Outcome::Ack).len();
        n
    };
    assert_eq!(deliveries(false, "plain"), 2, "schedule sent again: twice");
    assert_eq!(
        deliveries(true, "once"),
        1,
        "schedule_once sent again: once"
    );
}

#[test]
fn the_window_is_checked_and_a_recurring_task_can_be_scheduled_once() {
    let s = common::server();
    let (mut cfg, _time) = common::manual(&s, "cfg", 1);
    cfg.idempotency_window = Config::MAX_DURATION + Duration::from_secs(1);
    match Producer::connect(&cfg) {
        Err(Error::InvalidConfig(m)) => assert!(m.contains("idempotency_window"), "{m}"),
        r => panic!("{r:?}"),
    }
    cfg.idempotency_window = Duration::from_secs(60);
    let mut p = Producer::connect(&cfg).unwrap();
    let every = tickwheel_redis::Recurrence::Every(Duration::from_secs(60));
    let task = || Task::new("tick", RunAt::AtMillis(T0 + 60_000), b"").recurring(&every);
    assert!(p.schedule_once_many([task()]).unwrap()[0]
        .stored()
        .is_some());
    assert!(matches!(
        p.schedule_once_many([task()]).unwrap()[0],
        ScheduledOnce::Exists(TaskState::Pending { .. })
    ));
    assert!(p.cancel("tick").unwrap());
    assert_eq!(
        p.schedule_once_many([task()]).unwrap()[0],
        ScheduledOnce::Remembered,
        "a cancelled series is not brought back by a retry"
    );
    // Bad input is refused before anything is sent.
    assert!(matches!(
        p.schedule_once("", RunAt::AtMillis(T0), b""),
        Err(Error::InvalidId { len: 0 })
    ));
}

/// On a Redis Cluster the remembered ids sit with their shard (one hash slot): a bulk
/// create-only call spread over every node stores each task once, and answers each again.
#[test]
fn schedule_once_on_a_three_node_cluster() {
    let c = match tickwheel_redis::server::RedisCluster::start(3) {
        Ok(c) => c,
        Err(e) => panic!("cannot run the Redis Cluster test: {e}"),
    };
    let time = tickwheel_redis::ManualTime::new(T0);
    let mut cfg = Config::cluster(&c.seeds(), "clonce");
    cfg.shards = 12;
    cfg.claim_ahead = Duration::ZERO;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
    let tasks = || ids.iter().map(|id| Task::new(id, RunAt::AtMillis(T0), b""));
    let first = p.schedule_once_many(tasks()).unwrap();
    assert!(first.iter().all(|a| a.stored().is_some()));
    let mut delivered = 0;
    for _ in 0..5 {
        delivered += tick_at(&mut w, &time, T0, |_| Outcome::Ack).len();
    }
    assert_eq!(delivered, 60);
    let again = p.schedule_once_many(tasks()).unwrap();
    assert!(
        again.iter().all(|a| *a == ScheduledOnce::Remembered),
        "{again:?}"
    );
    assert_eq!(tick_at(&mut w, &time, T0 + 1, |_| Outcome::Ack).len(), 0);
}

/// The inspector shows what `schedule_once` remembers: until when an id's window runs
/// (sliding: a later `schedule_once` of it moves the end), and how many ids each shard
/// remembers; a plain `schedule` remembers nothing, and an ended window is not shown.
#[test]
fn the_inspector_shows_what_schedule_once_remembers() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "once-ins", 4);
    cfg.idempotency_window = Duration::from_millis(WINDOW_MS);
    let mut p = Producer::connect(&cfg).unwrap();
    let at = |ms| RunAt::AtMillis(ms);
    stored_at(p.schedule_once("a", at(T0 + 60_000), b"").unwrap());
    stored_at(p.schedule_once("c", at(T0 + 60_000), b"").unwrap());
    p.schedule("b", at(T0 + 60_000), b"").unwrap();
    let mut i = Inspector::connect(&cfg).unwrap();
    assert_eq!(i.remembered("a").unwrap(), Some(T0 + WINDOW_MS));
    assert_eq!(
        i.remembered("b").unwrap(),
        None,
        "schedule remembers nothing"
    );
    assert_eq!(i.remembered("never").unwrap(), None);
    assert!(matches!(i.remembered(""), Err(Error::InvalidId { .. })));
    assert_eq!(i.stats().unwrap().remembered(), 2);

    // The window slides: named again at T0 + 3 000 (it exists: nothing stored).
    time.set_ms(T0 + 3_000);
    assert!(matches!(
        p.schedule_once("a", at(T0 + 60_000), b"").unwrap(),
        ScheduledOnce::Exists(_)
    ));
    time.set_ms(T0 + WINDOW_MS - 1);
    assert_eq!(i.remembered("a").unwrap(), Some(T0 + 3_000 + WINDOW_MS));
    assert_eq!(i.remembered("c").unwrap(), Some(T0 + WINDOW_MS));
    // At its end a window is over: "c" is no longer remembered, "a" still is.
    time.set_ms(T0 + WINDOW_MS);
    assert_eq!(i.remembered("c").unwrap(), None);
    let stats = i.stats().unwrap();
    assert_eq!(stats.remembered(), 1);
    assert_eq!(
        stats.shards[i.shard_of("a") as usize].remembered,
        1,
        "counted in its own shard"
    );
}
