//! Each typed call against a real `redis-server`, on a manual clock: what it encodes is what
//! its script reads, and what it decodes is what its script answered.

use redis::Value;

use super::delivery::{Armed, DeliverReply};
use super::shard::AcquireReply;
use super::*;
use crate::connection::Con;
use crate::server::RedisServer;
use crate::task::TaskState;

const T0: u64 = 1_800_000_000_000;

fn setup(name: &str) -> (RedisServer, Con, ShardKeys) {
    let server = RedisServer::start().expect("redis-server");
    let client = redis::Client::open(server.url()).unwrap();
    let con = Con::single(client.get_connection().unwrap(), None);
    (server, con, ShardKeys::new(name, 0))
}

fn task<'a>(id: &'a str, when: When) -> ScheduleTask<'a> {
    ScheduleTask {
        id,
        when,
        payload: b"p",
        recurrence: String::new(),
        policy: String::new(),
    }
}

fn schedule(con: &mut Con, keys: &ShardKeys, now: u64, tasks: &[ScheduleTask]) -> Vec<Scheduled> {
    let call = Schedule {
        keys,
        now: Some(now),
        channel: "tw:{t}:wake",
        shard: 0,
        tasks,
    };
    invoke(con, &call).unwrap()
}

fn state(con: &mut Con, keys: &ShardKeys, id: &str) -> TaskState {
    invoke(con, &State { keys, id }).unwrap()
}

#[test]
fn schedule_returns_versions_run_ats_and_what_each_task_replaced() {
    let (_s, mut con, keys) = setup("sched");
    let first = schedule(&mut con, &keys, T0, &[task("a", When::At(T0 + 5))]);
    assert_eq!(
        first,
        [Scheduled {
            version: 1,
            run_at_ms: T0 + 5,
            replaced: false
        }]
    );
    // "a" replaces the stored one; "b" is new, then replaced within the call; "a" again
    // replaces the earlier task of the call. A delay is counted from the script's now.
    let tasks = [
        task("b", When::After(300)),
        task("a", When::At(T0 + 7)),
        task("b", When::After(2_500)),
        task("c", When::At(T0 + 9)),
        task("a", When::At(T0 + 8)),
    ];
    let got = schedule(&mut con, &keys, T0 + 1_000, &tasks);
    let want = [
        (2, T0 + 1_300, false),
        (3, T0 + 7, true),
        (4, T0 + 3_500, true),
        (5, T0 + 9, false),
        (6, T0 + 8, true),
    ];
    let got: Vec<(u64, u64, bool)> = got
        .iter()
        .map(|s| (s.version, s.run_at_ms, s.replaced))
        .collect();
    assert_eq!(got, want);
    for (id, version, run_at_ms) in [("a", 6, T0 + 8), ("b", 4, T0 + 3_500), ("c", 5, T0 + 9)] {
        let want = TaskState::Pending {
            run_at_ms,
            attempts: 0,
            version,
        };
        assert_eq!(state(&mut con, &keys, id), want, "{id}");
    }
}

#[test]
fn cancel_and_reschedule_take_many_ids_and_answer_each() {
    let (_s, mut con, keys) = setup("bulk");
    let tasks = [task("a", When::At(T0 + 10)), task("b", When::At(T0 + 20))];
    schedule(&mut con, &keys, T0, &tasks);
    let moves = [
        ("a", When::After(1_500)),
        ("zz", When::At(T0)),
        ("b", When::At(T0 + 30)),
        ("b", When::At(T0 + 40)),
    ];
    let call = Reschedule {
        keys: &keys,
        now: Some(T0 + 100),
        channel: "tw:{t}:wake",
        shard: 0,
        moves: &moves,
    };
    assert_eq!(invoke(&mut con, &call).unwrap(), [true, false, true, true]);
    let at = |s: TaskState| match s {
        TaskState::Pending { run_at_ms, .. } => run_at_ms,
        s => panic!("{s:?}"),
    };
    assert_eq!(at(state(&mut con, &keys, "a")), T0 + 1_600);
    assert_eq!(at(state(&mut con, &keys, "b")), T0 + 40);
    let ids = ["b", "nope", "a", "b"];
    let got = invoke(
        &mut con,
        &Cancel {
            keys: &keys,
            ids: &ids,
        },
    )
    .unwrap();
    assert_eq!(got, [true, false, true, false]);
    assert_eq!(state(&mut con, &keys, "a"), TaskState::Unknown);
}

#[test]
fn invoke_all_runs_calls_of_one_script_in_order_and_reloads_a_lost_script() {
    let (_s, mut con, keys) = setup("all");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let one = [task("x", When::At(T0))];
    let two = [task("y", When::At(T0)), task("x", When::At(T0 + 1))];
    let call = |tasks| Schedule {
        keys: &keys,
        now: Some(T0),
        channel: "c",
        shard: 0,
        tasks,
    };
    let got = invoke_all(&mut con, &[call(&one[..]), call(&two[..])]).unwrap();
    let versions: Vec<Vec<(u64, bool)>> = got
        .iter()
        .map(|r| r.iter().map(|s| (s.version, s.replaced)).collect())
        .collect();
    assert_eq!(versions, [vec![(1, false)], vec![(2, false), (3, true)]]);
}

#[test]
fn leases_are_taken_renewed_refused_and_released() {
    let (_s, mut con, keys) = setup("lease");
    let acquire = |worker, held_epoch| Acquire {
        keys: &keys,
        now: Some(T0),
        worker,
        lease_ms: 5_000,
        held_epoch,
    };
    let got = invoke(&mut con, &acquire("w1", 0)).unwrap();
    assert_eq!(
        got,
        AcquireReply {
            epoch: Some(1),
            now_ms: T0,
            paused: false
        }
    );
    assert_eq!(invoke(&mut con, &acquire("w1", 1)).unwrap().epoch, Some(1));
    assert_eq!(invoke(&mut con, &acquire("w2", 0)).unwrap().epoch, None);
    assert_eq!(invoke(&mut con, &acquire("w2", 1)).unwrap().epoch, None);
    let release = |worker, epoch| Release {
        keys: &keys,
        tenure: Tenure::new(epoch, worker),
    };
    assert!(!invoke(&mut con, &release("w2", 1)).unwrap());
    assert!(invoke(&mut con, &release("w1", 1)).unwrap());
    assert_eq!(invoke(&mut con, &acquire("w2", 0)).unwrap().epoch, Some(2));
    let beat = |worker, ttl_ms| Heartbeat {
        workers_key: "tw:{lease}:workers",
        now: Some(T0),
        worker,
        ttl_ms,
        cluster: false,
    };
    invoke(&mut con, &beat("w1", 1_000)).unwrap();
    // Several scripts in one pipeline, each reply decoded by its call.
    let (second, renew) = (beat("w2", 1_000), acquire("w2", 2));
    let mut pipe = redis::pipe();
    push(&mut pipe, &second);
    push(&mut pipe, &renew);
    let replies: Vec<Value> = query_pipe(&mut con, &pipe).unwrap();
    let mut replies = replies.into_iter();
    let got = next_reply(&second, &mut replies).unwrap();
    assert_eq!(next_reply(&renew, &mut replies).unwrap().epoch, Some(2));
    assert!(next_reply(&renew, &mut replies).is_err(), "no third reply");
    assert_eq!((got.live, got.now_ms, got.node.as_str()), (2, T0, ""));
    assert_eq!(got.now_us, (T0 * 1000) as i64);
    assert_eq!(invoke(&mut con, &beat("w2", 0)).unwrap().live, 1);
}

fn load(con: &mut Con, keys: &ShardKeys, epoch: u64, from: Option<&Resume>) -> LoadReply {
    let call = Load {
        keys,
        tenure: Tenure::new(epoch, "w"),
        from,
        to_ms: T0 + 10_000,
        limit: 2,
        in_flight: from.is_none(),
        ahead_ms: 700,
    };
    invoke(con, &call).unwrap()
}

fn deliver(con: &mut Con, keys: &ShardKeys, epoch: u64, ids: &[String]) -> DeliverReply {
    let call = Deliver {
        keys,
        now: Some(T0 + 100),
        tenure: Tenure::new(epoch, "w"),
        visibility_ms: 30_000,
        ahead_ms: 700,
        cluster: false,
        force: false,
        ids,
    };
    invoke(con, &call).unwrap()
}

#[test]
fn a_window_is_read_in_steps_and_its_tasks_claimed_settled_and_fenced() {
    let (_s, mut con, keys) = setup("deliver");
    let acquire = Acquire {
        keys: &keys,
        now: Some(T0),
        worker: "w",
        lease_ms: 5_000,
        held_epoch: 0,
    };
    let epoch = invoke(&mut con, &acquire).unwrap().epoch.unwrap();
    assert_eq!(epoch, 1);
    let tasks = [
        task("a", When::At(T0 + 500)),
        task("b", When::At(T0 + 5_000)),
        task("c", When::At(T0 + 600)),
    ];
    schedule(&mut con, &keys, T0, &tasks);
    let LoadReply::Loaded(w) = load(&mut con, &keys, epoch, None) else {
        panic!("fenced")
    };
    assert!(w.more && w.in_flight.is_empty());
    let pending: Vec<(&str, u64, u64)> = w
        .pending
        .iter()
        .map(|a| (a.id.as_str(), a.at_ms, a.version))
        .collect();
    assert_eq!(pending, [("a", T0 + 500, 1), ("c", T0 + 600, 3)]);
    let LoadReply::Loaded(w2) = load(&mut con, &keys, epoch, Some(&w.next)) else {
        panic!("fenced")
    };
    assert_eq!(w2.pending.len(), 1);
    assert_eq!((w2.pending[0].id.as_str(), w2.more), ("b", false));

    let ids = ["a", "b", "gone"].map(String::from);
    let r = deliver(&mut con, &keys, epoch, &ids);
    assert_eq!(
        (r.now_ms, r.now_us, r.node.as_str()),
        (T0 + 100, ((T0 + 100) * 1000) as i64, "")
    );
    let claims = r.claims.unwrap();
    let Claim::Claimed(a) = &claims[0] else {
        panic!("{claims:?}")
    };
    assert_eq!(
        (a.id.as_str(), a.version, a.attempt, a.due_ms),
        ("a", 1, 1, T0 + 500)
    );
    assert_eq!(
        (a.payload.as_slice(), a.recurrence.as_str()),
        (&b"p"[..], "")
    );
    assert_eq!(a.visible_at_ms, T0 + 500 + 30_000);
    assert_eq!(
        a.rearm_at_ms,
        a.visible_at_ms + 700,
        "armed a claim-ahead later"
    );
    let not_yet = Claim::NotYet {
        id: "b".into(),
        at_ms: T0 + 5_000,
        version: 2,
    };
    assert_eq!(claims[1..], [not_yet, Claim::Gone { id: "gone".into() }]);

    // A new tenure's first read reports the claim in flight, a claim-ahead after its deadline.
    let LoadReply::Loaded(w3) = load(&mut con, &keys, epoch, None) else {
        panic!("fenced")
    };
    assert_eq!(
        w3.in_flight,
        [Armed {
            id: "a".into(),
            at_ms: a.rearm_at_ms,
            version: 1
        }]
    );

    let retry = |after_ms, attempt| Retry {
        keys: &keys,
        now: Some(T0 + 200),
        tenure: Tenure::new(epoch, "w"),
        id: "a",
        version: 1,
        attempt,
        after_ms,
    };
    let undo = invoke(&mut con, &retry(None, 1)).unwrap();
    assert_eq!(
        undo,
        RetryReply::Requeued {
            run_at_ms: T0 + 500
        }
    );
    assert_eq!(
        invoke(&mut con, &retry(None, 1)).unwrap(),
        RetryReply::Stale
    );
    let claims = deliver(&mut con, &keys, epoch, &ids[..1]).claims.unwrap();
    assert!(matches!(&claims[0], Claim::Claimed(c) if c.attempt == 1));
    let later = invoke(&mut con, &retry(Some(300), 1)).unwrap();
    assert_eq!(
        later,
        RetryReply::Requeued {
            run_at_ms: T0 + 500
        }
    );
    deliver(&mut con, &keys, epoch, &ids[..1]);

    let item = |attempt| AckItem {
        id: "a",
        version: 1,
        attempt,
        next_run_ms: None,
    };
    let (first, second) = ([item(1)], [item(2)]);
    let ack = |epoch, attempt| Ack {
        keys: &keys,
        tenure: Tenure::new(epoch, "w"),
        channel: "c",
        shard: 0,
        acks: if attempt == 1 { &first } else { &second },
    };
    assert_eq!(
        invoke(&mut con, &ack(epoch + 1, 2)).unwrap(),
        None,
        "fenced"
    );
    assert_eq!(
        invoke(&mut con, &ack(epoch, 1)).unwrap(),
        Some(vec![false]),
        "stale"
    );
    assert_eq!(invoke(&mut con, &ack(epoch, 2)).unwrap(), Some(vec![true]));
    assert_eq!(state(&mut con, &keys, "a"), TaskState::Unknown);
    assert_eq!(load(&mut con, &keys, epoch + 1, None), LoadReply::Fenced);
    assert_eq!(deliver(&mut con, &keys, epoch + 1, &ids).claims, None);
    let gone = invoke(&mut con, &retry(Some(1), 2)).unwrap();
    assert_eq!(gone, RetryReply::Stale, "an acknowledged task is stale");
    let fenced = Retry {
        tenure: Tenure::new(epoch + 1, "w"),
        ..retry(Some(1), 2)
    };
    assert_eq!(invoke(&mut con, &fenced).unwrap(), RetryReply::Fenced);
}

#[test]
fn init_creates_a_namespace_once_and_probe_replies_decode() {
    let (_s, mut con, _) = setup("init");
    let init = |shards| Init {
        meta: "tw:{init}:meta",
        schema: 4,
        shards,
    };
    let want = (Some("4".to_string()), Some("8".to_string()));
    assert_eq!(invoke(&mut con, &init(8)).unwrap(), want);
    assert_eq!(
        invoke(&mut con, &init(16)).unwrap(),
        want,
        "kept as created"
    );
    let reply = Value::Array(vec![
        Value::BulkString(b"1800000000".to_vec()),
        Value::BulkString(b"123456".to_vec()),
        Value::BulkString(b"node-1".to_vec()),
    ]);
    let got = Probe::decode(reply).unwrap();
    assert_eq!(
        (got.now_us, got.node.as_str()),
        (1_800_000_000_123_456, "node-1")
    );
    assert!(Probe::decode(Value::Array(vec![])).is_err());
}

#[test]
fn malformed_replies_are_protocol_errors_naming_the_script() {
    let keys = ShardKeys::new("x", 0);
    let call = State {
        keys: &keys,
        id: "x",
    };
    let short = Value::Array(vec![Value::Int(1), Value::Int(5)]);
    match call.decode(short) {
        Err(crate::Error::Protocol(m)) => assert!(m.starts_with("STATE"), "{m}"),
        r => panic!("{r:?}"),
    }
    let ids = ["a", "b"];
    let cancel = Cancel {
        keys: &keys,
        ids: &ids,
    };
    assert!(cancel.decode(Value::Array(vec![Value::Int(1)])).is_err());
}

mod failure;
mod once;
mod retries;

/// A failover that loses a shard's acquisition lets the next one issue the same epoch to
/// another worker: worker `a` took epoch 1 on the old primary (the write lost), `b` takes
/// epoch 1 on the new one. The fence is the tenure (epoch and worker), so `a` can no longer
/// read, claim, acknowledge or requeue anything of `b`'s shard.
#[test]
fn an_epoch_issued_twice_after_a_lost_write_fences_the_other_worker() {
    let (_s, mut con, keys) = setup("twice");
    schedule(&mut con, &keys, T0, &[task("t", When::At(T0 + 50))]);
    let take = |worker| Acquire {
        keys: &keys,
        now: Some(T0),
        worker,
        lease_ms: 5_000,
        held_epoch: 0,
    };
    // `a`'s acquisition, then the failover that loses it: the state is as before.
    assert_eq!(invoke(&mut con, &take("a")).unwrap().epoch, Some(1));
    redis::cmd("DEL").arg(keys.state()).exec(&mut con).unwrap();
    assert_eq!(invoke(&mut con, &take("b")).unwrap().epoch, Some(1));
    let ids = ["t".to_string()];
    let a = Tenure {
        epoch: 1,
        worker: "a",
    };
    let b = Tenure {
        epoch: 1,
        worker: "b",
    };
    let claim = |tenure| Deliver {
        keys: &keys,
        now: Some(T0 + 100),
        tenure,
        visibility_ms: 30_000,
        ahead_ms: 700,
        cluster: false,
        force: false,
        ids: &ids,
    };
    let loaded = |tenure| Load {
        keys: &keys,
        tenure,
        from: None,
        to_ms: T0 + 10_000,
        limit: 10,
        in_flight: true,
        ahead_ms: 700,
    };
    assert_eq!(invoke(&mut con, &loaded(a)).unwrap(), LoadReply::Fenced);
    assert_eq!(invoke(&mut con, &claim(a)).unwrap().claims, None, "fenced");
    assert!(matches!(
        invoke(&mut con, &loaded(b)).unwrap(),
        LoadReply::Loaded(_)
    ));
    let got = invoke(&mut con, &claim(b)).unwrap();
    assert!(
        matches!(got.claims.as_deref(), Some([Claim::Claimed(_)])),
        "{got:?}"
    );
    let items = [AckItem {
        id: "t",
        version: 1,
        attempt: 1,
        next_run_ms: None,
    }];
    let ack = |tenure| Ack {
        keys: &keys,
        tenure,
        channel: "tw:{t}:wake",
        shard: 0,
        acks: &items,
    };
    let requeue = |tenure| Retry {
        keys: &keys,
        now: Some(T0 + 200),
        tenure,
        id: "t",
        version: 1,
        attempt: 1,
        after_ms: Some(10),
    };
    assert_eq!(invoke(&mut con, &requeue(a)).unwrap(), RetryReply::Fenced);
    assert_eq!(invoke(&mut con, &ack(a)).unwrap(), None, "fenced");
    assert!(matches!(
        state(&mut con, &keys, "t"),
        TaskState::InFlight { .. }
    ));
    assert_eq!(invoke(&mut con, &ack(b)).unwrap(), Some(vec![true]));
    // A released shard fences its last tenure too.
    let release = Release {
        keys: &keys,
        tenure: b,
    };
    assert!(invoke(&mut con, &release).unwrap());
    assert_eq!(invoke(&mut con, &loaded(b)).unwrap(), LoadReply::Fenced);
}
