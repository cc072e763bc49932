//! The producer API and bad input, against a real redis-server.

mod common;

use common::{block_on, counting};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwheel_redis::{
    AsyncProducer, Config, Error, Producer, Recurrence, RunAt, Scheduled, Task, TaskState,
    SCHEMA_VERSION,
};

#[test]
fn schedule_replace_cancel_reschedule_state() {
    let s = common::server();
    let (cfg, _time) = common::manual(&s, "p", 4);
    let mut p = Producer::connect(&cfg).unwrap();
    assert_eq!(p.shards(), 4);

    let a1 = p.schedule("a", RunAt::AtMillis(2_000_000), b"one").unwrap();
    assert!(!a1.replaced);
    assert_eq!(a1.run_at_ms, 2_000_000);
    let TaskState::Pending {
        run_at_ms,
        attempts,
        version: v1,
    } = p.state("a").unwrap()
    else {
        panic!("a is pending")
    };
    assert_eq!((run_at_ms, attempts, v1), (2_000_000, 0, a1.version));

    // Same id: replaces (idempotent retries), with a new version, and says where a delay
    // put it.
    let a2 = p
        .schedule("a", RunAt::After(Duration::from_millis(500)), b"two")
        .unwrap();
    assert!(a2.replaced);
    let TaskState::Pending {
        run_at_ms,
        version: v2,
        ..
    } = p.state("a").unwrap()
    else {
        panic!("a is pending")
    };
    assert_eq!(
        run_at_ms, 1_000_500,
        "a delay counts from the namespace's clock"
    );
    assert!(v2 > v1);
    assert_eq!((a2.run_at_ms, a2.version), (run_at_ms, v2));
    assert_eq!(p.len().unwrap(), 1);

    assert!(p.reschedule("a", RunAt::AtMillis(3_000_000)).unwrap());
    assert!(matches!(
        p.state("a").unwrap(),
        TaskState::Pending {
            run_at_ms: 3_000_000,
            ..
        }
    ));
    assert!(!p.reschedule("unknown", RunAt::AtMillis(1)).unwrap());

    assert!(p.cancel("a").unwrap(), "a pending task cancels");
    assert!(!p.cancel("a").unwrap(), "a second cancel finds nothing");
    assert!(!p.cancel("never-scheduled").unwrap());
    assert_eq!(p.state("a").unwrap(), TaskState::Unknown);
    assert!(p.is_empty().unwrap());
}

#[test]
fn bulk_schedule_stores_every_task() {
    let s = common::server();
    let (mut cfg, _time) = common::manual(&s, "bulk", 8);
    cfg.batch = 7; // several script calls per shard
    let mut p = Producer::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
    let tasks = ids.iter().enumerate().map(|(i, id)| Task {
        id,
        run_at: RunAt::AtMillis(2_000_000 + i as u64),
        payload: id.as_bytes(),
        recurrence: None,
        retry: None,
    });
    let first = p.schedule_many(tasks.clone()).unwrap();
    assert_eq!(first.len(), 1000, "one per task, in the order given");
    for (i, s) in first.iter().enumerate() {
        assert_eq!((s.run_at_ms, s.replaced), (2_000_000 + i as u64, false));
    }
    assert_eq!(p.len().unwrap(), 1000);
    let again = p.schedule_many(tasks).unwrap();
    assert!(again.iter().all(|s| s.replaced), "a retried batch replaces");
    assert_eq!(p.len().unwrap(), 1000);
    for i in [0, 1, 500, 999] {
        let want = TaskState::Pending {
            run_at_ms: 2_000_000 + i as u64,
            attempts: 0,
            version: again[i].version,
        };
        assert_eq!(p.state(&ids[i]).unwrap(), want, "t{i}");
        assert!(again[i].version > first[i].version);
    }
    assert!(p.schedule_many(std::iter::empty()).unwrap().is_empty());
}

#[test]
fn bulk_cancel_and_reschedule_answer_each_id_in_the_order_given() {
    let s = common::server();
    let (mut cfg, _time) = common::manual(&s, "bulk-cr", 4);
    cfg.batch = 3; // several script calls per shard
    let mut p = Producer::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    p.schedule_many(
        ids.iter()
            .map(|id| Task::new(id, RunAt::AtMillis(2_000_000), b"")),
    )
    .unwrap();

    // Even ids move (t0 by a delay from the namespace's clock, at 1 000 000), an unknown id
    // does not, t2 moves twice (the last run-at holds).
    let mut moves: Vec<(String, RunAt)> = (0..40)
        .step_by(2)
        .map(|i| (ids[i].clone(), RunAt::AtMillis(3_000_000 + i as u64)))
        .collect();
    moves[0].1 = RunAt::After(Duration::from_millis(700));
    moves.insert(5, ("nope".into(), RunAt::AtMillis(1)));
    moves.push((ids[2].clone(), RunAt::AtMillis(4_000_000)));
    let moved = p.reschedule_many(moves.iter().cloned()).unwrap();
    let want: Vec<bool> = moves.iter().map(|(id, _)| id != "nope").collect();
    assert_eq!(moved, want);
    let run_at = |p: &mut Producer, id: &str| match p.state(id).unwrap() {
        TaskState::Pending { run_at_ms, .. } => run_at_ms,
        s => panic!("{id}: {s:?}"),
    };
    assert_eq!(run_at(&mut p, "t0"), 1_000_700);
    assert_eq!(run_at(&mut p, "t2"), 4_000_000);
    assert_eq!(run_at(&mut p, "t38"), 3_000_038);
    assert_eq!(run_at(&mut p, "t39"), 2_000_000, "odd ids stay");

    // Cancel the odd ids, an unknown one, and t1 twice: each answer in its place.
    let mut cancel: Vec<&str> = ids.iter().skip(1).step_by(2).map(|s| s.as_str()).collect();
    cancel.insert(3, "never");
    cancel.push("t1");
    let got = p.cancel_many(&cancel).unwrap();
    let want: Vec<bool> = (0..cancel.len())
        .map(|i| i != 3 && i + 1 != cancel.len())
        .collect();
    assert_eq!(got, want);
    assert_eq!(p.len().unwrap(), 20);
    assert_eq!(p.state("t1").unwrap(), TaskState::Unknown);
    assert!(p.cancel_many(Vec::<String>::new()).unwrap().is_empty());

    // Every id is checked before anything is sent.
    let bad = ["t0", "", "t2"];
    assert!(matches!(
        p.cancel_many(bad),
        Err(Error::InvalidId { len: 0 })
    ));
    let bad = [("t0", RunAt::AtMillis(1)), ("t2", RunAt::AtMillis(1 << 60))];
    assert!(matches!(p.reschedule_many(bad), Err(Error::InvalidRunAt)));
    assert_eq!(run_at(&mut p, "t0"), 1_000_700, "nothing was sent");
    assert_eq!(p.len().unwrap(), 20);
}

#[test]
fn task_new_and_recurring_store_what_the_struct_literal_stores() {
    let s = common::server();
    let (cfg, _time) = common::manual(&s, "ctor", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    let every = Recurrence::Every(Duration::from_secs(60));
    let built = [
        Task::new("once", RunAt::AtMillis(2_000_000), b"x"),
        Task::new("rec", RunAt::After(Duration::from_secs(1)), b"y").recurring(&every),
    ];
    let literal = Task {
        id: "rec",
        run_at: RunAt::After(Duration::from_secs(1)),
        payload: b"y",
        recurrence: Some(&every),
        retry: None,
    };
    assert_eq!(built[1].recurrence, literal.recurrence);
    assert_eq!(
        (built[1].id, built[1].run_at, built[1].payload),
        (literal.id, literal.run_at, literal.payload)
    );
    let stored = p.schedule_many(built).unwrap();
    assert_eq!(stored[1].run_at_ms, 1_001_000);
    let alone = p
        .schedule_recurring("rec", RunAt::After(Duration::from_secs(1)), &every, b"y")
        .unwrap();
    let want = Scheduled {
        version: alone.version,
        run_at_ms: 1_001_000,
        replaced: true,
    };
    assert_eq!(alone, want);
    assert!(alone.version > stored[1].version);
}

/// One script call larger than the script's slices (of 2000 command arguments): a bucket
/// with more ids than a slice, more buckets than a slice, ids given twice, delays, and the
/// same call again replacing every task into other buckets.
#[test]
fn a_large_bulk_call_spans_slices_and_buckets() {
    let s = common::server();
    let (mut cfg, _time) = common::manual(&s, "large", 1);
    cfg.batch = 10_000; // one script call
    let mut p = Producer::connect(&cfg).unwrap();
    let ids: Vec<String> = (0..6000).map(|i| format!("t{i}")).collect();
    // t0..t2999 in one bucket; t3000..t5999 over 2500 buckets, the last 500 by delay.
    let at = |i: usize, shift: u64| -> RunAt {
        if i < 3000 {
            RunAt::AtMillis(2_000_000 + shift + i as u64 % 1000)
        } else if i < 5500 {
            RunAt::AtMillis(3_000_000 + shift + (i as u64 - 3000) * 1000)
        } else {
            RunAt::After(Duration::from_millis(shift + (i as u64 - 5500) * 1000))
        }
    };
    let batch = |shift: u64| {
        let mut v: Vec<Task<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Task {
                id,
                run_at: at(i, shift),
                payload: id.as_bytes(),
                recurrence: None,
                retry: None,
            })
            .collect();
        // t1 again, last: its first task is replaced in the same call.
        v.push(Task {
            id: &ids[1],
            run_at: RunAt::AtMillis(9_000_000 + shift),
            payload: b"again",
            recurrence: None,
            retry: None,
        });
        v
    };
    let stored = p.schedule_many(batch(0)).unwrap();
    let replaced: Vec<usize> = (0..stored.len()).filter(|&i| stored[i].replaced).collect();
    assert_eq!(replaced, [6000], "the second t1");
    assert!(stored[6000].version > stored[1].version);
    assert_eq!(stored[5999].run_at_ms, 1_000_000 + 499 * 1000, "a delay");
    assert_eq!(p.len().unwrap(), 6000);
    common::check_layout(&s.url(), "large", 1);
    let stored = p.schedule_many(batch(500_000)).unwrap();
    assert!(
        stored.iter().all(|s| s.replaced),
        "every stored task, and the second t1"
    );
    assert_eq!(p.len().unwrap(), 6000);
    common::check_layout(&s.url(), "large", 1);
    for (id, run_at) in [
        ("t0", 2_500_000),
        ("t1", 9_500_000),
        ("t2999", 2_500_999),
        ("t3000", 3_500_000),
        ("t5499", 3_500_000 + 2499 * 1000),
        ("t5500", 1_000_000 + 500_000),
        ("t5999", 1_000_000 + 500_000 + 499 * 1000),
    ] {
        assert!(
            matches!(p.state(id).unwrap(), TaskState::Pending { run_at_ms, .. } if run_at_ms == run_at),
            "{id}: {:?}",
            p.state(id).unwrap()
        );
    }
    for id in &ids {
        assert!(p.cancel(id).unwrap(), "{id} was pending");
    }
    assert!(p.is_empty().unwrap());
    common::check_layout(&s.url(), "large", 1);
}

#[test]
fn wall_clock_run_at_rounds_up_to_the_millisecond() {
    let s = common::server();
    let mut p = Producer::connect(&Config::new(s.url(), "wall")).unwrap();
    let at = UNIX_EPOCH + Duration::from_micros(1_900_000_000_000_001);
    p.schedule("x", RunAt::At(at), b"").unwrap();
    assert!(matches!(
        p.state("x").unwrap(),
        TaskState::Pending {
            run_at_ms: 1_900_000_000_001,
            ..
        }
    ));
    let before = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
    assert!(matches!(
        p.schedule("y", RunAt::At(before), b""),
        Err(Error::InvalidRunAt)
    ));
}

#[test]
fn bad_input_gets_clear_errors() {
    let s = common::server();
    let mut cfg = Config::new(s.url(), "bad");
    cfg.max_payload = 1024;
    let mut p = Producer::connect(&cfg).unwrap();

    let big = vec![0u8; 1025];
    let e = p.schedule("x", RunAt::AtMillis(1), &big).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PayloadTooLarge {
                len: 1025,
                max: 1024
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("1025"));
    p.schedule("x", RunAt::AtMillis(1), &big[..1024]).unwrap();
    let bulk = [Task {
        id: "y",
        run_at: RunAt::AtMillis(1),
        payload: &big,
        recurrence: None,
        retry: None,
    }];
    assert!(matches!(
        p.schedule_many(bulk),
        Err(Error::PayloadTooLarge { .. })
    ));

    assert!(matches!(
        p.schedule("", RunAt::AtMillis(1), b""),
        Err(Error::InvalidId { len: 0 })
    ));
    let long = "i".repeat(tickwheel_redis::MAX_ID_LEN + 1);
    assert!(matches!(p.cancel(&long), Err(Error::InvalidId { .. })));
    assert!(matches!(p.state(""), Err(Error::InvalidId { .. })));
    assert!(matches!(
        p.schedule("z", RunAt::AtMillis(1 << 60), b""),
        Err(Error::InvalidRunAt)
    ));

    // Binary payloads and ids with the separators the value format uses.
    let payload: Vec<u8> = (0..=255).collect();
    p.schedule("a:b:c", RunAt::AtMillis(5), &payload).unwrap();
    assert!(matches!(
        p.state("a:b:c").unwrap(),
        TaskState::Pending { run_at_ms: 5, .. }
    ));

    for url in [
        "not a url",
        "http://127.0.0.1:6379/",
        "redis://127.0.0.1:notaport/",
        "",
    ] {
        let e = Producer::connect(&Config::new(url, "ns")).unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{url:?}: {e}");
    }
    for ns in ["", "a{b", "a b", &"n".repeat(65)] {
        let e = Producer::connect(&Config::new(s.url(), ns)).unwrap_err();
        assert!(matches!(e, Error::InvalidNamespace(_)), "{ns:?}: {e}");
    }
    let mut zero = Config::new(s.url(), "zero");
    zero.shards = 0;
    assert!(matches!(
        Producer::connect(&zero),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn a_namespace_of_another_schema_version_is_refused() {
    let s = common::server();
    let client = redis::Client::open(s.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("HSET")
        .arg("tw:{future}:meta")
        .arg("schema")
        .arg(SCHEMA_VERSION + 1)
        .arg("shards")
        .arg(16)
        .query::<()>(&mut con)
        .unwrap();
    let e = Producer::connect(&Config::new(s.url(), "future")).unwrap_err();
    assert!(matches!(e, Error::IncompatibleNamespace { .. }), "{e}");
    assert!(e.to_string().contains("schema"), "{e}");
    let e = tickwheel_redis::Worker::connect(&Config::new(s.url(), "future")).unwrap_err();
    assert!(matches!(e, Error::IncompatibleNamespace { .. }), "{e}");

    redis::cmd("SET")
        .arg("tw:{strange}:meta")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap();
    let e = Producer::connect(&Config::new(s.url(), "strange")).unwrap_err();
    assert!(matches!(e, Error::IncompatibleNamespace { .. }), "{e}");

    // An existing namespace keeps its shard count whatever a later client asks for.
    let mut a = Config::new(s.url(), "kept");
    a.shards = 3;
    Producer::connect(&a).unwrap();
    a.shards = 5;
    assert_eq!(Producer::connect(&a).unwrap().shards(), 3);
}

#[test]
fn redis_down_is_an_error_never_a_silent_loss_and_aof_keeps_what_was_stored() {
    let mut s = common::server();
    let mut p = Producer::connect(&Config::new(s.url(), "down")).unwrap();
    p.schedule("kept", RunAt::AtMillis(4_000_000_000_000), b"payload")
        .unwrap();
    s.kill();
    let e = p
        .schedule("lost?", RunAt::AtMillis(4_000_000_000_000), b"")
        .unwrap_err();
    assert!(matches!(e, Error::Redis(_)), "{e}");
    assert!(p.cancel("kept").is_err());
    s.restart().unwrap();
    // The producer reconnects on its own; the acknowledged task survived the SIGKILL.
    assert!(matches!(
        p.state("kept").unwrap(),
        TaskState::Pending {
            run_at_ms: 4_000_000_000_000,
            ..
        }
    ));
    assert_eq!(p.state("lost?").unwrap(), TaskState::Unknown);
    assert!(matches!(
        Producer::connect(&Config::new("redis://127.0.0.1:1/", "x")),
        Err(Error::Redis(_))
    ));
}

/// The `AsyncProducer`: each call runs on the producer's thread, in the order the calls were
/// made (from any clone, awaited or not), stores what the `Producer` stores, and a panic in
/// one is resumed where it is awaited while the thread goes on; the last clone dropped ends
/// the thread.
#[test]
fn an_async_producer_runs_the_producers_calls_on_its_thread_in_order() {
    let s = common::server();
    let (cfg, _time) = common::manual(&s, "async", 4);
    // What a multi-threaded executor's `spawn` asks of a future and what it holds.
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let connecting = AsyncProducer::connect(&cfg);
    send(&connecting);
    let p = block_on(connecting).unwrap();
    send_and_sync(&p);
    let call = p.schedule("a", RunAt::AtMillis(2_000_000), b"one");
    send_and_sync(&call);
    let stored = block_on(call).unwrap();
    let worker = tickwheel_redis::Worker::connect(&cfg).unwrap();
    send(&worker);
    drop(worker);
    assert!(!stored.replaced);
    let mut sync = Producer::connect(&cfg).unwrap();
    assert!(matches!(
        sync.state("a").unwrap(),
        TaskState::Pending { run_at_ms: 2_000_000, version, .. } if version == stored.version
    ));

    let ran_on = block_on(p.call(|_| std::thread::current().name().map(str::to_owned)));
    assert_eq!(ran_on.as_deref(), Some("tickwheel-redis-producer"));

    // Made in order from clones; every other one dropped unawaited; the rest awaited last
    // first: every call ran, in the order made.
    let order = Arc::new(Mutex::new(Vec::new()));
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let (order, q) = (Arc::clone(&order), p.clone());
            q.call(move |_| order.lock().unwrap().push(i))
        })
        .collect();
    let kept: Vec<_> = calls.into_iter().skip(1).step_by(2).collect();
    kept.into_iter().rev().for_each(block_on);
    assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
    drop(p.schedule("b", RunAt::AtMillis(2_000_000), b"two"));
    assert!(matches!(
        block_on(p.call(|p| p.state("b"))).unwrap(),
        TaskState::Pending { .. }
    ));

    let panicked = std::panic::catch_unwind(|| block_on(p.call(|_| panic!("boom in a call"))));
    let payload = panicked.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in a call"));
    assert_eq!(
        block_on(p.call(|p| p.len())).unwrap(),
        2,
        "the thread went on"
    );

    // The thread ends once the last clone is dropped: its thread-local guard is dropped then.
    struct Ended(mpsc::Sender<()>);
    impl Drop for Ended {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    thread_local! {
        static GUARD: std::cell::RefCell<Option<Ended>> = const { std::cell::RefCell::new(None) };
    }
    let (ended, thread_ended) = mpsc::channel();
    let q = p.clone();
    block_on(p.call(move |_| GUARD.with(|g| *g.borrow_mut() = Some(Ended(ended)))));
    drop(p);
    assert!(thread_ended.try_recv().is_err(), "a clone is still alive");
    drop(q);
    thread_ended
        .recv_timeout(Duration::from_secs(10))
        .expect("the thread ended after the last clone was dropped");

    let refused = block_on(AsyncProducer::connect(&Config::new("http://h/", "async")));
    assert!(
        matches!(refused, Err(Error::InvalidUrl { .. })),
        "{refused:?}"
    );
}

/// An `AsyncCall` is pending until its call has run, then wakes the waker of its last poll,
/// once, and answers.
#[test]
fn an_async_call_wakes_the_last_waker_once_its_call_has_run() {
    let s = common::server();
    let (cfg, _time) = common::manual(&s, "async-wake", 1);
    let p = AsyncProducer::new(Producer::connect(&cfg).unwrap()).unwrap();
    let (release, held) = mpsc::channel::<u32>();
    let mut call = p.call(move |_| held.recv().unwrap());
    let (first, first_waker) = counting();
    let (last, last_waker) = counting();
    for waker in [&first_waker, &last_waker, &last_waker] {
        let pending = Pin::new(&mut call).poll(&mut Context::from_waker(waker));
        assert!(pending.is_pending());
    }
    release.send(7).unwrap();
    let started = Instant::now();
    while last.woken.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "never woken");
        std::thread::yield_now();
    }
    let ready = Pin::new(&mut call).poll(&mut Context::from_waker(&last_waker));
    assert_eq!(ready, Poll::Ready(7));
    assert_eq!(last.woken.load(Ordering::SeqCst), 1);
    assert_eq!(
        first.woken.load(Ordering::SeqCst),
        0,
        "a replaced waker is not woken"
    );
}
