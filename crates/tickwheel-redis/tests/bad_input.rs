//! Bad input to the public API: each probe asserts the documented behaviour (or a clear
//! error): never a panic, a lost or doubled task, or a silent clamp.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, UNIX_EPOCH};

use tickwheel_redis::{
    Config, Delivery, Error, Inspector, Outcome, Producer, Recurrence, RunAt, Task, TaskState,
    Worker, DEFAULT_MAX_PAYLOAD, MAX_ID_LEN, MAX_RECURRENCE_LEN,
};

const T0: u64 = 1_000_000;
/// The first run-at beyond what a millisecond score holds exactly.
const LIMIT: u64 = RunAt::MAX_MS;

/// Durations past `Config::MAX_DURATION`: one that `as u64` milliseconds would wrap to 1 s,
/// and the largest.
const HUGE: [Duration; 2] = [
    Duration::from_millis(u64::MAX).saturating_add(Duration::from_millis(1001)),
    Duration::MAX,
];

/// Asserts `r` is `InvalidConfig` naming `field`.
fn refused<T>(r: Result<T, Error>, field: &str) {
    match r {
        Err(Error::InvalidConfig(m)) => assert!(m.contains(field), "{field}: {m}"),
        Err(e) => panic!("{field}: {e}"),
        Ok(_) => panic!("{field}: accepted"),
    }
}

/// (id, payload, attempt, due) of every delivery of one deterministic step.
fn step(w: &mut Worker, outcome: Outcome) -> Vec<(String, Vec<u8>, u32, u64)> {
    w.reload_windows();
    let mut got = Vec::new();
    w.tick(&mut |d: &Delivery| {
        got.push((d.id.clone(), d.payload.clone(), d.attempt, d.due_ms));
        outcome.clone()
    })
    .unwrap();
    got.sort();
    got
}

fn pending_at(p: &mut Producer, id: &str) -> u64 {
    match p.state(id).unwrap() {
        TaskState::Pending { run_at_ms, .. } => run_at_ms,
        s => panic!("{id:?}: {s:?}"),
    }
}

fn odd_ids() -> Vec<String> {
    vec![
        "a:b:c".into(),
        ":".into(),
        "{".into(),
        "}".into(),
        "{bad:0}".into(),
        "tw:{bad:0}:tasks".into(),
        "line\nbreak\r\n".into(),
        "nul\0byte\0".into(),
        "\0".into(),
        "日本語-ü-🦀".into(),
        " ".into(),
        "1:2:3:4:5:".into(),
        "x".repeat(MAX_ID_LEN),
        "é".repeat(MAX_ID_LEN / 2), // 1024 bytes, 512 chars
    ]
}

#[test]
fn odd_ids_and_payloads_round_trip_through_store_state_and_delivery() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "bad", 4);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let ids = odd_ids();
    for id in &ids {
        let st = p
            .schedule(id, RunAt::AtMillis(T0 + 100), id.as_bytes())
            .unwrap();
        assert!(!st.replaced, "{id:?}");
        assert_eq!(pending_at(&mut p, id), T0 + 100, "{id:?}");
    }
    assert_eq!(p.len().unwrap(), ids.len() as u64, "no two ids collide");
    time.set_ms(T0 + 100);
    let got = step(&mut w, Outcome::Ack);
    let mut want: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), id.as_bytes().to_vec(), 1, T0 + 100))
        .collect();
    want.sort();
    assert_eq!(got, want, "each delivered once, id and payload intact");
    assert!(step(&mut w, Outcome::Ack).is_empty(), "not twice");
    for id in &ids {
        assert_eq!(p.state(id).unwrap(), TaskState::Unknown, "{id:?}");
    }
    assert!(p.is_empty().unwrap());
    common::check_layout(&s.url(), "bad", 4);
}

#[test]
fn odd_ids_scheduled_inside_a_loaded_window_are_announced_and_delivered() {
    // The notification path: `version:run_at:id length:id` with ids holding ':' and bytes
    // that are not ASCII.
    let s = common::server();
    let (cfg, time) = common::manual(&s, "note", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    assert!(step(&mut w, Outcome::Ack).is_empty()); // takes the shards, loads the windows
    let ids = odd_ids();
    for id in &ids {
        p.schedule(id, RunAt::AtMillis(T0 + 500), b"n").unwrap();
    }
    let mut nothing = |_: &Delivery| Outcome::Ack;
    assert!(
        common::eventually(Duration::from_secs(5), || {
            w.tick(&mut nothing).unwrap();
            w.in_wheel() == ids.len()
        }),
        "every notice reached the wheel: {} of {}",
        w.in_wheel(),
        ids.len()
    );
    time.set_ms(T0 + 500);
    let mut got = Vec::new();
    w.tick(&mut |d: &Delivery| {
        got.push(d.id.clone());
        Outcome::Ack
    })
    .unwrap();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn ids_too_long_or_empty_are_refused_by_every_call_and_nothing_is_stored() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "ids", 4);
    let mut p = Producer::connect(&cfg).unwrap();
    let mib = "x".repeat(1 << 20);
    let over = "é".repeat(MAX_ID_LEN / 2) + "x"; // 1025 bytes, 513 chars
    for (id, len) in [
        (mib.as_str(), 1 << 20),
        (over.as_str(), MAX_ID_LEN + 1),
        ("", 0),
    ] {
        let is_bad = |e: Error| match e {
            Error::InvalidId { len: l } if l == len => {
                assert!(e.to_string().contains(&len.to_string()), "{e}");
            }
            e => panic!("{len}: {e:?}"),
        };
        is_bad(p.schedule(id, RunAt::AtMillis(T0), b"").unwrap_err());
        let every = Recurrence::Every(Duration::from_secs(1));
        is_bad(
            p.schedule_recurring(id, RunAt::AtMillis(T0), &every, b"")
                .unwrap_err(),
        );
        is_bad(
            p.schedule_many([Task::new(id, RunAt::AtMillis(T0), b"")])
                .unwrap_err(),
        );
        is_bad(p.cancel(id).unwrap_err());
        is_bad(p.cancel_many([id]).unwrap_err());
        is_bad(p.reschedule(id, RunAt::AtMillis(T0)).unwrap_err());
        is_bad(p.reschedule_many([(id, RunAt::AtMillis(T0))]).unwrap_err());
        is_bad(p.state(id).unwrap_err());
    }
    assert!(p.is_empty().unwrap());
}

#[test]
fn payloads_empty_binary_and_large_are_stored_or_refused_as_documented() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "pay", 2);
    cfg.max_payload = 8 << 20;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let binary: Vec<u8> = [0xff, 0xfe, 0x00, 0xc3, 0x28, b':', b'\n', 0x80].repeat(3);
    let large: Vec<u8> = (0..(6 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let exact = vec![0xa5u8; 8 << 20];
    p.schedule("empty", RunAt::AtMillis(T0 + 10), b"").unwrap();
    p.schedule("binary", RunAt::AtMillis(T0 + 10), &binary)
        .unwrap();
    p.schedule("large", RunAt::AtMillis(T0 + 10), &large)
        .unwrap();
    p.schedule("exact", RunAt::AtMillis(T0 + 10), &exact)
        .unwrap();
    let e = p
        .schedule("over", RunAt::AtMillis(T0 + 10), &vec![0u8; (8 << 20) + 1])
        .unwrap_err();
    assert!(
        matches!(e, Error::PayloadTooLarge { len, max } if len == (8 << 20) + 1 && max == 8 << 20),
        "{e:?}"
    );
    time.set_ms(T0 + 10);
    let got = step(&mut w, Outcome::Ack);
    let want = vec![
        ("binary".to_string(), binary, 1, T0 + 10),
        ("empty".to_string(), Vec::new(), 1, T0 + 10),
        ("exact".to_string(), exact, 1, T0 + 10),
        ("large".to_string(), large.clone(), 1, T0 + 10),
    ];
    assert!(got == want, "payloads delivered byte for byte");

    // The default limit is 1 MiB; a limit of 0 accepts the empty payload only.
    let (cfg, _) = common::manual(&s, "pay-default", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    let e = p.schedule("l", RunAt::AtMillis(T0), &large).unwrap_err();
    assert!(
        matches!(e, Error::PayloadTooLarge { len, max } if len == large.len() && max == DEFAULT_MAX_PAYLOAD),
        "{e:?}"
    );
    let (mut cfg, _) = common::manual(&s, "pay-zero", 2);
    cfg.max_payload = 0;
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("e", RunAt::AtMillis(T0), b"").unwrap();
    assert!(matches!(
        p.schedule("one", RunAt::AtMillis(T0), b"1"),
        Err(Error::PayloadTooLarge { len: 1, max: 0 })
    ));
    assert_eq!(p.len().unwrap(), 1);
}

#[test]
fn run_at_limits_are_exact_and_out_of_range_values_are_refused() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "runat", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();

    // The epoch itself: a task long overdue, delivered at once.
    assert_eq!(
        p.schedule("zero", RunAt::AtMillis(0), b"")
            .unwrap()
            .run_at_ms,
        0
    );
    assert_eq!(
        p.schedule("epoch", RunAt::At(UNIX_EPOCH), b"")
            .unwrap()
            .run_at_ms,
        0
    );
    // The last instant a score holds exactly is stored as given.
    let last = p.schedule("last", RunAt::AtMillis(LIMIT - 1), b"").unwrap();
    assert_eq!(last.run_at_ms, LIMIT - 1);
    assert_eq!(pending_at(&mut p, "last"), LIMIT - 1);
    let wall = UNIX_EPOCH + Duration::from_millis(LIMIT - 1);
    assert_eq!(
        p.schedule("wall", RunAt::At(wall), b"").unwrap().run_at_ms,
        LIMIT - 1
    );
    // A delay rounds up to the millisecond (never early).
    let tiny = p
        .schedule("tiny", RunAt::After(Duration::from_nanos(1)), b"")
        .unwrap();
    assert_eq!(tiny.run_at_ms, T0 + 1);
    let zero_delay = p
        .schedule("now", RunAt::After(Duration::ZERO), b"")
        .unwrap();
    assert_eq!(zero_delay.run_at_ms, T0);

    // Beyond: refused, nothing stored, the stored task untouched.
    let beyond = [
        RunAt::AtMillis(LIMIT),
        RunAt::AtMillis(u64::MAX),
        RunAt::At(UNIX_EPOCH + Duration::from_millis(LIMIT)),
        RunAt::At(UNIX_EPOCH + Duration::from_millis(LIMIT - 1) + Duration::from_nanos(1)),
        RunAt::After(Duration::from_millis(LIMIT)),
        RunAt::After(Duration::from_millis(u64::MAX)),
        RunAt::After(Duration::MAX),
    ];
    for r in beyond {
        assert!(
            matches!(p.schedule("x", r, b""), Err(Error::InvalidRunAt)),
            "{r:?}"
        );
        assert!(
            matches!(p.reschedule("zero", r), Err(Error::InvalidRunAt)),
            "{r:?}"
        );
        let every = Recurrence::Every(Duration::from_secs(1));
        assert!(matches!(
            p.schedule_recurring("x", r, &every, b""),
            Err(Error::InvalidRunAt)
        ));
    }
    assert_eq!(p.state("x").unwrap(), TaskState::Unknown);
    assert_eq!(pending_at(&mut p, "zero"), 0);

    let got: Vec<String> = step(&mut w, Outcome::Ack)
        .into_iter()
        .map(|d| d.0)
        .collect();
    assert_eq!(got, ["epoch", "now", "zero"], "overdue tasks go at once");
    time.set_ms(T0 + 1);
    let got: Vec<String> = step(&mut w, Outcome::Ack)
        .into_iter()
        .map(|d| d.0)
        .collect();
    assert_eq!(got, ["tiny"]);
    assert_eq!(pending_at(&mut p, "last"), LIMIT - 1, "far future: waits");
    common::check_layout(&s.url(), "runat", 2);
}

#[test]
fn a_bulk_call_with_one_bad_item_is_refused_before_anything_is_sent() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "bulk-bad", 4);
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("keep", RunAt::AtMillis(T0 + 5), b"old").unwrap();
    let big = vec![0u8; DEFAULT_MAX_PAYLOAD + 1];
    let zero = Recurrence::Every(Duration::ZERO);
    let good = |id| Task::new(id, RunAt::AtMillis(T0 + 7), b"new");
    type Case<'a> = (Task<'a>, fn(&Error) -> bool);
    let cases: [Case; 4] = [
        (good(""), |e| matches!(e, Error::InvalidId { len: 0 })),
        (Task::new("b", RunAt::AtMillis(u64::MAX), b""), |e| {
            matches!(e, Error::InvalidRunAt)
        }),
        (Task::new("b", RunAt::AtMillis(T0), &big), |e| {
            matches!(e, Error::PayloadTooLarge { .. })
        }),
        (good("b").recurring(&zero), |e| {
            matches!(e, Error::InvalidRecurrence(_))
        }),
    ];
    for (bad, want) in cases {
        // The bad task last: every good one before it would go first if sent early.
        let tasks = [good("a1"), good("a2"), good("keep"), good("a3"), bad];
        let e = p.schedule_many(tasks).unwrap_err();
        assert!(want(&e), "{e:?}");
        assert_eq!(p.len().unwrap(), 1, "{e}: nothing stored");
        assert_eq!(pending_at(&mut p, "keep"), T0 + 5, "{e}: nothing replaced");
    }
    // cancel_many and reschedule_many: a bad id last.
    assert!(matches!(
        p.cancel_many(["keep", "a1", &"x".repeat(MAX_ID_LEN + 1)]),
        Err(Error::InvalidId { .. })
    ));
    assert_eq!(pending_at(&mut p, "keep"), T0 + 5, "not cancelled");
    assert!(matches!(
        p.reschedule_many([("keep", RunAt::AtMillis(T0 + 9)), ("", RunAt::AtMillis(T0))]),
        Err(Error::InvalidId { len: 0 })
    ));
    assert!(matches!(
        p.reschedule_many([
            ("keep", RunAt::AtMillis(T0 + 9)),
            ("keep", RunAt::After(Duration::MAX))
        ]),
        Err(Error::InvalidRunAt)
    ));
    assert_eq!(pending_at(&mut p, "keep"), T0 + 5, "not moved");
}

#[test]
fn bulk_calls_with_empty_lists_duplicates_and_unknown_ids() {
    let s = common::server();
    let (mut cfg, _) = common::manual(&s, "bulk-dup", 3);
    cfg.batch = 1; // one script call per task
    let mut p = Producer::connect(&cfg).unwrap();
    assert!(p.schedule_many(Vec::<Task>::new()).unwrap().is_empty());
    assert!(p.cancel_many(Vec::<&str>::new()).unwrap().is_empty());
    assert!(p
        .reschedule_many(Vec::<(&str, RunAt)>::new())
        .unwrap()
        .is_empty());

    // An id given twice in one schedule_many: the later replaces the earlier.
    let got = p
        .schedule_many([
            Task::new("d", RunAt::AtMillis(T0 + 1), b"first"),
            Task::new("e", RunAt::AtMillis(T0 + 2), b""),
            Task::new("d", RunAt::AtMillis(T0 + 3), b"second"),
        ])
        .unwrap();
    assert_eq!(
        got.iter().map(|s| s.replaced).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert!(got[2].version > got[0].version);
    assert_eq!(p.len().unwrap(), 2, "one task per id");
    assert!(matches!(
        p.state("d").unwrap(),
        TaskState::Pending { run_at_ms, version, .. } if run_at_ms == T0 + 3 && version == got[2].version
    ));

    // Unknown ids: false everywhere, and nothing is created.
    assert_eq!(
        p.cancel_many(["nope", "nope", "d", "d"]).unwrap(),
        [false, false, true, false]
    );
    assert_eq!(
        p.reschedule_many([("nope", RunAt::AtMillis(1)), ("e", RunAt::AtMillis(T0 + 8))])
            .unwrap(),
        [false, true]
    );
    assert!(!p.reschedule("d", RunAt::AtMillis(1)).unwrap(), "cancelled");
    assert_eq!(p.state("nope").unwrap(), TaskState::Unknown);
    assert_eq!(p.len().unwrap(), 1);
    common::check_layout(&s.url(), "bulk-dup", 3);
}

#[test]
fn recurrences_at_their_limits() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "rec", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    // Periods: 1 ms to 2^52 - 1 ms.
    for ok in [Duration::from_millis(1), Duration::from_millis(LIMIT - 1)] {
        let r = Recurrence::Every(ok);
        p.schedule_recurring("ok", RunAt::AtMillis(T0), &r, b"")
            .unwrap();
        let next = T0 + ok.as_millis() as u64;
        // A run past the last run-at a task can have never comes: the series ends there.
        let want = (next < LIMIT).then_some(next);
        assert_eq!(r.next_after_ms(T0).unwrap(), want, "{ok:?}");
    }
    let longest = Recurrence::Every(Duration::from_millis(LIMIT - 1));
    assert_eq!(longest.next_after_ms(0).unwrap(), Some(LIMIT - 1));
    for bad in [
        Duration::ZERO,
        Duration::from_millis(LIMIT),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ] {
        let r = Recurrence::Every(bad);
        let e = p
            .schedule_recurring("bad", RunAt::AtMillis(T0), &r, b"")
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidRecurrence(m) if m.contains("period")),
            "{bad:?}: {e:?}"
        );
        assert!(matches!(
            r.next_after_ms(T0),
            Err(Error::InvalidRecurrence(_))
        ));
    }
    // Time zones that do not name one.
    for zone in [
        "",
        " UTC",
        "UTC\n",
        "Europe/Paris ",
        "Mars/Olympus",
        "../../../../etc/passwd",
        "/etc/localtime",
        "Europe/../UTC",
        "utc\0",
    ] {
        let r = Recurrence::cron("0 9 * * *", zone);
        assert!(
            matches!(&r, Err(Error::InvalidRecurrence(_))),
            "{zone:?}: {r:?}"
        );
        let raw = Recurrence::Cron {
            pattern: "0 9 * * *".into(),
            zone: zone.into(),
        };
        assert!(matches!(
            p.schedule_recurring("z", RunAt::AtMillis(T0), &raw, b""),
            Err(Error::InvalidRecurrence(_))
        ));
    }
    for pattern in [
        "",
        "* * *",
        "0 9 * * * * * *",
        "60 * * * *",
        "0 24 * * *",
        "\0",
    ] {
        let r = Recurrence::cron(pattern, "UTC");
        assert!(
            matches!(&r, Err(Error::InvalidRecurrence(_))),
            "{pattern:?}: {r:?}"
        );
    }
    assert_eq!(p.state("bad").unwrap(), TaskState::Unknown);
    assert_eq!(p.state("z").unwrap(), TaskState::Unknown);
}

#[test]
fn a_cron_pattern_that_never_fires_is_refused() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "never", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    // February 30th parses but names no instant: refused, by `cron` and by the producer
    // given the raw enum.
    let r = Recurrence::cron("0 0 30 2 *", "UTC");
    assert!(
        matches!(&r, Err(Error::InvalidRecurrence(m)) if !m.is_empty()),
        "{r:?}"
    );
    let raw = Recurrence::Cron {
        pattern: "0 0 30 2 *".into(),
        zone: "UTC".into(),
    };
    assert!(matches!(
        raw.next_after_ms(T0),
        Err(Error::InvalidRecurrence(_))
    ));
    let r = p.schedule_recurring("f", RunAt::AtMillis(T0 + 10), &raw, b"f");
    assert!(matches!(r, Err(Error::InvalidRecurrence(_))), "{r:?}");
    assert!(p.is_empty().unwrap());
}

#[test]
fn namespaces_with_odd_characters() {
    let s = common::server();
    let bad = [
        "".to_string(),
        "{".into(),
        "}".into(),
        "a}b".into(),
        "a\nb".into(),
        "tab\t".into(),
        "nbsp\u{a0}".into(),
        "日".repeat(22), // 66 bytes
    ];
    for ns in &bad {
        let cfg = Config::new(s.url(), ns.as_str());
        for e in [
            Producer::connect(&cfg).unwrap_err(),
            Worker::connect(&cfg).unwrap_err(),
            Inspector::connect(&cfg).unwrap_err(),
        ] {
            assert!(
                matches!(&e, Error::InvalidNamespace(n) if n == ns),
                "{ns:?}: {e:?}"
            );
        }
    }
    // ':' and glob characters are allowed, and namespaces that share a prefix with another
    // one's shard tags stay apart.
    let names = [
        "x",
        "x:0",
        "x:1",
        "x:0:0",
        "*",
        "x?",
        "[x]",
        "日本",
        &"n".repeat(64),
    ];
    let mut producers: Vec<Producer> = names
        .iter()
        .map(|ns| {
            let (cfg, _) = common::manual(&s, ns, 2);
            Producer::connect(&cfg).unwrap()
        })
        .collect();
    for (k, p) in producers.iter_mut().enumerate() {
        for i in 0..=k {
            p.schedule(
                &format!("t{i}"),
                RunAt::AtMillis(T0 + 1),
                names[k].as_bytes(),
            )
            .unwrap();
        }
    }
    for (k, ns) in names.iter().enumerate() {
        let (cfg, time) = common::manual(&s, ns, 2);
        time.set_ms(T0 + 1);
        assert_eq!(producers[k].len().unwrap(), k as u64 + 1, "{ns}");
        let mut w = Worker::connect(&cfg).unwrap();
        let got = step(&mut w, Outcome::Ack);
        assert_eq!(got.len(), k + 1, "{ns}");
        assert!(got.iter().all(|d| d.1 == ns.as_bytes()), "{ns}: {got:?}");
        drop(w);
        common::check_layout(&s.url(), ns, 2);
    }
}

#[test]
fn config_values_out_of_range_are_refused_by_name() {
    let s = common::server();
    type Change = fn(&mut Config);
    let table: [(&str, Change, &str); 8] = [
        ("batch 0", |c| c.batch = 0, "batch"),
        ("window_limit 0", |c| c.window_limit = 0, "window_limit"),
        ("lease 0", |c| c.lease = Duration::ZERO, "lease"),
        (
            "visibility_timeout 0",
            |c| c.visibility_timeout = Duration::ZERO,
            "visibility_timeout",
        ),
        (
            "io_timeout 0",
            |c| c.io_timeout = Duration::ZERO,
            "io_timeout",
        ),
        ("shards 16385", |c| c.shards = 16385, "shards"),
        ("shards u32::MAX", |c| c.shards = u32::MAX, "shards"),
        (
            "max_payload 64 MiB + 1",
            |c| c.max_payload = (64 << 20) + 1,
            "max_payload",
        ),
    ];
    for (what, change, field) in table {
        let mut cfg = Config::new(s.url(), "cfg");
        change(&mut cfg);
        for e in [
            Producer::connect(&cfg).unwrap_err(),
            Worker::connect(&cfg).unwrap_err(),
        ] {
            assert!(
                matches!(&e, Error::InvalidConfig(m) if m.contains(field)),
                "{what}: {e:?}"
            );
        }
    }
    // The largest accepted values work.
    let mut cfg = Config::new(s.url(), "cfg-max");
    cfg.shards = 16384;
    cfg.max_payload = 64 << 20;
    cfg.batch = usize::MAX;
    cfg.window_limit = usize::MAX;
    cfg.connect_timeout = Duration::ZERO;
    let mut p = Producer::connect(&cfg).unwrap();
    assert_eq!(p.shards(), 16384);
    p.schedule("a", RunAt::AtMillis(T0), b"").unwrap();
    assert_eq!(p.len().unwrap(), 1);
}

#[test]
fn a_handler_that_panics_in_run_fails_the_attempt_with_its_message() {
    // Documented (`Worker::run`): a panic is a failed attempt, its message the error; `run`
    // goes on, and the retry policy decides.
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "panic", 1);
    cfg.retry = tickwheel_redis::RetryPolicy::fixed(2, Duration::from_millis(1));
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("boom", RunAt::AtMillis(T0 + 10), b"").unwrap();
    time.set_ms(T0 + 10);
    let mut w = Worker::connect(&cfg).unwrap();
    let stop = w.stop_handle();
    let run = std::thread::spawn(move || {
        w.run(|_d: &Delivery| -> Outcome { panic!("handler panicked") })
    });
    let failed = common::eventually(Duration::from_secs(10), || {
        time.advance(Duration::from_millis(1));
        matches!(
            p.state("boom").unwrap(),
            TaskState::Failed { attempts: 2, .. }
        )
    });
    assert!(failed, "{:?}", p.state("boom").unwrap());
    stop.stop();
    assert!(run.join().expect("run itself does not panic").is_ok());
    let mut ins = tickwheel_redis::Inspector::connect(&cfg).unwrap();
    let errors = ins.show("boom").unwrap().unwrap().errors;
    let texts: Vec<&str> = errors.errors.iter().map(|e| e.error.as_str()).collect();
    assert_eq!(texts, ["panicked: handler panicked"; 2]);
}

#[test]
fn a_handler_that_panics_in_tick_fails_the_attempt_and_the_worker_goes_on() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "panic-tick", 1);
    cfg.retry = tickwheel_redis::RetryPolicy::fixed(3, Duration::from_millis(100));
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("boom", RunAt::AtMillis(T0 + 10), b"").unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 10);
    w.reload_windows();
    let r = catch_unwind(AssertUnwindSafe(|| {
        w.tick(&mut |_d: &Delivery| -> Outcome { panic!("handler panicked") })
    }));
    assert!(matches!(r, Ok(Ok(1))), "caught: {:?}", r.map(|r| r.is_ok()));
    assert!(matches!(
        p.state("boom").unwrap(),
        TaskState::Pending { run_at_ms, attempts: 1, .. } if run_at_ms == T0 + 110
    ));
    // Retried after the policy's delay, not the visibility timeout.
    time.set_ms(T0 + 110);
    let got = step(&mut w, Outcome::Ack);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].2, 2, "attempt 2");
    assert_eq!(p.state("boom").unwrap(), TaskState::Unknown);
}

// ---------------------------------------------------------------------------------------
// Defects: each asserts the correct behaviour and is ignored until it is fixed.

/// `Ok` or a clear `InvalidConfig`; never a panic.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let m = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            panic!("{what}: panicked: {m}")
        }
    }
}

#[test]
fn durations_past_max_duration_are_refused_by_name_before_connecting() {
    let s = common::server();
    type Set = fn(&mut Config, Duration);
    let set: [(&str, Set); 7] = [
        ("lease", |c, d| c.lease = d),
        ("visibility_timeout", |c, d| c.visibility_timeout = d),
        ("window", |c, d| c.window = d),
        ("claim_ahead", |c, d| c.claim_ahead = d),
        ("maintenance_interval", |c, d| c.maintenance_interval = d),
        ("io_timeout", |c, d| c.io_timeout = d),
        ("connect_timeout", |c, d| c.connect_timeout = d),
    ];
    for (field, set) in set {
        for d in HUGE {
            let mut cfg = Config::new(s.url(), "huge");
            set(&mut cfg, d);
            refused(no_panic("Producer", || Producer::connect(&cfg)), field);
            refused(no_panic("Worker", || Worker::connect(&cfg)), field);
            refused(no_panic("Inspector", || Inspector::connect(&cfg)), field);
        }
    }
}

#[test]
fn a_lease_of_max_duration_works_and_is_shown_whole() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "lease", 1);
    cfg.lease = Config::MAX_DURATION;
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("a", RunAt::AtMillis(T0 + 10), b"").unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 10);
    assert_eq!(step(&mut w, Outcome::Ack).len(), 1);
    let stats = Inspector::connect(&cfg).unwrap().stats().unwrap();
    let left = stats.shards[0].lease_left.unwrap();
    assert!(
        left > Config::MAX_DURATION - Duration::from_secs(60),
        "{left:?}"
    );
}

#[test]
fn a_visibility_timeout_of_max_duration_keeps_the_task_in_flight() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "vis", 1);
    cfg.visibility_timeout = Config::MAX_DURATION;
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("a", RunAt::AtMillis(T0 + 10), b"").unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 10);
    assert_eq!(step(&mut w, Outcome::Leave).len(), 1);
    time.advance(Duration::from_secs(3600));
    assert_eq!(step(&mut w, Outcome::Leave), []);
    assert!(matches!(p.state("a"), Ok(TaskState::InFlight { .. })));
}

#[test]
fn a_huge_retry_delay_does_not_wrap() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "retry", 1);
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("a", RunAt::AtMillis(T0 + 10), b"").unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 10);
    assert_eq!(step(&mut w, Outcome::RetryAfter(HUGE[0])).len(), 1);
    time.advance(Duration::from_secs(2));
    let again = step(&mut w, Outcome::Ack);
    assert!(
        again.is_empty(),
        "retried after ~584 million years, delivered 2 s later: {again:?}"
    );
    // As documented: it waits RunAt::MAX_MS - 1 ms from the retry.
    assert!(
        matches!(p.state("a"), Ok(TaskState::Pending { run_at_ms, .. })
            if run_at_ms == T0 + 10 + LIMIT - 1),
        "{:?}",
        p.state("a")
    );
    // A retry delay rounds up to whole milliseconds: never early.
    p.schedule("b", RunAt::AtMillis(T0 + 2_010), b"").unwrap();
    assert_eq!(
        step(&mut w, Outcome::RetryAfter(Duration::from_micros(1_500))).len(),
        1
    );
    assert!(
        matches!(p.state("b"), Ok(TaskState::Pending { run_at_ms, .. })
        if run_at_ms == T0 + 2_010 + 2)
    );
}

#[test]
fn retry_after_duration_max_is_not_a_protocol_error() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "retry-max", 1);
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("a", RunAt::AtMillis(T0 + 10), b"").unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    time.set_ms(T0 + 10);
    w.reload_windows();
    let first = w.tick(&mut |_| Outcome::RetryAfter(Duration::MAX));
    let second = w.tick(&mut |_| Outcome::Ack);
    let st = p.state("a");
    time.advance(Duration::from_secs(3600));
    let later = step(&mut w, Outcome::Ack);
    assert!(
        first.is_ok()
            && second.is_ok()
            && matches!(st, Ok(TaskState::Pending { .. }))
            && later.is_empty(),
        "tick {first:?}, then {second:?}, state {st:?}, an hour later {later:?}"
    );
}

#[test]
fn upcoming_with_a_huge_slot_width_does_not_panic() {
    let s = common::server();
    let cfg = Config::new(s.url(), "up");
    Producer::connect(&cfg)
        .unwrap()
        .schedule("a", RunAt::After(Duration::from_secs(5)), b"")
        .unwrap();
    let mut ins = Inspector::connect(&cfg).unwrap();
    for per in [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 1000 + 1),
        Duration::from_millis(u64::MAX),
    ] {
        let r = no_panic("upcoming", || ins.upcoming(per, Duration::from_secs(60)));
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{per:?}: {r:?}");
    }
    // At the limit: one slot, the task in it.
    let one = ins.upcoming(Config::MAX_DURATION, Duration::from_secs(60));
    assert_eq!(one.unwrap().counts.iter().sum::<u64>(), 1);
    let r = no_panic("upcoming", || {
        ins.upcoming(Duration::from_secs(1), Duration::MAX)
    });
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
}

#[test]
fn recurrence_cron_refuses_what_cannot_be_stored() {
    // A valid pattern of more than MAX_RECURRENCE_LEN bytes: a long minute list.
    let minutes = vec!["0"; 300].join(",");
    let pattern = format!("{minutes} 9 * * *");
    assert!(pattern.len() > MAX_RECURRENCE_LEN);
    let r = Recurrence::cron(&pattern, "UTC");
    assert!(matches!(r, Err(Error::InvalidRecurrence(_))), "{r:?}");
}

#[test]
fn a_period_finer_than_a_millisecond_rounds_up_as_documented() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "period", 1);
    let mut p = Producer::connect(&cfg).unwrap();
    let r = Recurrence::Every(Duration::from_micros(1500));
    assert_eq!(r.next_after_ms(T0).unwrap(), Some(T0 + 2));
    p.schedule_recurring("p", RunAt::AtMillis(T0), &r, b"")
        .unwrap();
    let ins = Inspector::connect(&cfg)
        .unwrap()
        .show("p")
        .unwrap()
        .unwrap();
    assert_eq!(
        ins.recurrence,
        Some(Recurrence::Every(Duration::from_millis(2)))
    );
}

#[test]
fn invalid_run_at_says_what_is_wrong() {
    let s = common::server();
    let (cfg, _) = common::manual(&s, "msg", 1);
    let mut p = Producer::connect(&cfg).unwrap();
    let e = p.schedule("x", RunAt::AtMillis(u64::MAX), b"").unwrap_err();
    let m = e.to_string();
    assert!(
        !m.contains("before the Unix epoch")
            && (m.contains("2^52") || m.contains(&LIMIT.to_string())),
        "{m}"
    );
}

#[test]
fn manual_time_advances_by_whole_milliseconds_and_stops_at_the_end() {
    let t = tickwheel_redis::ManualTime::new(u64::MAX - 5);
    t.advance(Duration::from_micros(2_500));
    assert_eq!(t.now_ms(), u64::MAX - 3);
    t.advance(Duration::MAX);
    assert_eq!(t.now_ms(), u64::MAX, "no wrap to the past");
    t.advance(Duration::from_millis(1));
    assert_eq!(t.now_ms(), u64::MAX);
}
