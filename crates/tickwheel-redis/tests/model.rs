//! Worker semantics on virtual time (a manual clock shared by producer, workers and the
//! scripts) against a real redis-server: a table of expected deliveries, fencing, takeover,
//! rebalancing, and a randomized comparison with a reference model.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;
use tickwheel_lab::SplitMix64;

use tickwheel_redis::{
    Config, Delivery, ManualTime, Outcome, Producer, RunAt, Task, TaskState, Worker,
};

const T0: u64 = 1_000_000;

/// One deterministic step: reload the windows (a notification may still be in flight) and
/// tick, answering every delivery with `outcome`. Returns (id, attempt, due, payload).
fn step(
    w: &mut Worker,
    outcome: impl Fn(&Delivery) -> Outcome,
) -> Vec<(String, u32, u64, Vec<u8>)> {
    w.reload_windows();
    let mut got = Vec::new();
    w.tick(&mut |d: &Delivery| {
        got.push((d.id.clone(), d.attempt, d.due_ms, d.payload.clone()));
        outcome(d)
    })
    .unwrap();
    got.sort();
    got
}

fn ids(v: &[(String, u32, u64, Vec<u8>)]) -> Vec<(&str, u32)> {
    v.iter().map(|(id, a, _, _)| (id.as_str(), *a)).collect()
}

fn at(time: &ManualTime, ms: u64) {
    time.set_ms(T0 + ms);
}

#[test]
fn table_of_durable_delivery_results() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "table", 2);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let ack = |_: &Delivery| Outcome::Ack;

    for (id, ms) in [
        ("a", 100),
        ("b", 200),
        ("c", 300),
        ("d", 400),
        ("e", 500),
        ("f", 600),
    ] {
        p.schedule(id, RunAt::AtMillis(T0 + ms), id.as_bytes())
            .unwrap();
    }
    assert!(p.cancel("b").unwrap(), "cancel of a pending task");
    assert!(p.reschedule("c", RunAt::AtMillis(T0 + 50)).unwrap());
    assert!(
        p.schedule("a", RunAt::AtMillis(T0 + 150), b"a2")
            .unwrap()
            .replaced,
        "replace"
    );

    // (time, expected deliveries as (id, attempt), outcome for them)
    at(&time, 49);
    assert_eq!(ids(&step(&mut w, ack)), [], "nothing before its run-at");
    at(&time, 50);
    let got = step(&mut w, ack);
    assert_eq!(ids(&got), [("c", 1)]);
    assert_eq!(got[0].2, T0 + 50, "the due time is the rescheduled one");
    at(&time, 149);
    assert_eq!(
        ids(&step(&mut w, ack)),
        [],
        "a was replaced by a later run-at"
    );
    at(&time, 150);
    let got = step(&mut w, ack);
    assert_eq!(ids(&got), [("a", 1)]);
    assert_eq!(got[0].3, b"a2", "the replacement's payload");
    assert_eq!(
        p.state("a").unwrap(),
        TaskState::Unknown,
        "acknowledged: gone"
    );
    assert!(!p.cancel("a").unwrap(), "cancel after delivery: false");
    at(&time, 200);
    assert_eq!(ids(&step(&mut w, ack)), [], "b was cancelled");

    at(&time, 400);
    assert_eq!(ids(&step(&mut w, |_| Outcome::Leave)), [("d", 1)]);
    assert!(matches!(
        p.state("d").unwrap(),
        TaskState::InFlight { attempt: 1, .. }
    ));
    assert!(
        !p.cancel("d").unwrap(),
        "cancel of an in-flight task: false (it was delivered)"
    );
    assert!(!p.reschedule("d", RunAt::AtMillis(T0)).unwrap());

    at(&time, 500);
    assert_eq!(
        ids(&step(&mut w, |_| Outcome::RetryAfter(
            Duration::from_millis(100)
        ))),
        [("e", 1)]
    );
    assert!(matches!(
        p.state("e").unwrap(),
        TaskState::Pending { attempts: 1, .. }
    ));
    at(&time, 599);
    assert_eq!(ids(&step(&mut w, ack)), []);
    at(&time, 600);
    assert_eq!(
        ids(&step(&mut w, ack)),
        [("e", 2), ("f", 1)],
        "retry keeps counting attempts"
    );

    // d was left unacknowledged: delivered again after the visibility timeout (30 s).
    at(&time, 400 + 29_999);
    assert_eq!(ids(&step(&mut w, ack)), []);
    at(&time, 400 + 30_000);
    assert_eq!(ids(&step(&mut w, ack)), [("d", 2)]);

    // Replacing an in-flight task: the old delivery can no longer be acknowledged, the new
    // task starts over at attempt 1.
    at(&time, 40_000);
    p.schedule("g", RunAt::AtMillis(T0 + 40_000), b"g1")
        .unwrap();
    assert_eq!(ids(&step(&mut w, |_| Outcome::Leave)), [("g", 1)]);
    assert!(
        p.schedule("g", RunAt::AtMillis(T0 + 40_010), b"g2")
            .unwrap()
            .replaced
    );
    assert!(matches!(
        p.state("g").unwrap(),
        TaskState::Pending { attempts: 0, .. }
    ));
    at(&time, 40_010);
    let got = step(&mut w, ack);
    assert_eq!(ids(&got), [("g", 1)]);
    assert_eq!(got[0].3, b"g2");

    assert!(
        p.is_empty().unwrap(),
        "everything delivered and acknowledged"
    );
    let st = w.stats();
    assert_eq!(
        (st.delivered, st.acked, st.retried, st.fenced),
        (9, 6, 1, 0)
    );
}

#[test]
fn a_worker_that_lost_its_lease_can_neither_ack_nor_claim() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "fence", 1);
    cfg.lease = Duration::from_secs(1);
    cfg.maintenance_interval = cfg.lease / 3;
    cfg.batch = 1;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut a = Worker::connect(&cfg).unwrap();
    let mut b = Worker::connect(&cfg).unwrap();
    a.tick(&mut |_| Outcome::Ack).unwrap();
    b.tick(&mut |_| Outcome::Ack).unwrap();
    assert_eq!((a.owned_shards(), b.owned_shards()), (vec![0], vec![]));

    p.schedule("x1", RunAt::AtMillis(T0 + 100), b"").unwrap();
    p.schedule("x2", RunAt::AtMillis(T0 + 100), b"").unwrap();
    p.schedule("y", RunAt::AtMillis(T0 + 100), b"").unwrap();
    at(&time, 100);
    a.reload_windows();
    let mut by_b = Vec::new();
    let mut by_a = Vec::new();
    // A stalls inside its first handler call, past its lease; B takes the shard over.
    a.tick(&mut |d: &Delivery| {
        by_a.push((d.id.clone(), d.attempt, d.epoch));
        if by_a.len() == 1 {
            time.advance(Duration::from_secs(2));
            b.tick(&mut |d: &Delivery| {
                by_b.push((d.id.clone(), d.attempt, d.epoch));
                Outcome::Ack
            })
            .unwrap();
            Outcome::Ack // too late: fenced
        } else {
            Outcome::Ack
        }
    })
    .unwrap();
    // A had claimed all three in one pipeline before it stalled, but checks its lease before
    // each delivery: after the stall it hands out nothing more (x2 and y lapse), and its
    // acknowledgement of x1 does not count.
    assert_eq!(by_a.len(), 1, "{by_a:?}");
    assert_eq!(a.stats().lapsed, 2, "{:?}", a.stats());
    let epoch_a = by_a[0].2;
    by_b.sort();
    // B delivered all three again, at once (no visibility timeout wait), as attempt 2.
    let want: Vec<(String, u32, u64)> = ["x1", "x2", "y"]
        .iter()
        .map(|id| (id.to_string(), 2, epoch_a + 1))
        .collect();
    assert_eq!(by_b, want);
    assert!(
        a.stats().fenced >= 1,
        "A's late ack was refused: {:?}",
        a.stats()
    );
    assert_eq!(a.stats().acked, 0);
    assert!(p.is_empty().unwrap());

    // A learns it lost the shard at its next renewal; B keeps it.
    a.tick(&mut |_| Outcome::Ack).unwrap();
    assert!(a.owned_shards().is_empty());
    assert_eq!(b.owned_shards(), vec![0]);
}

/// Moves shard 0 of namespace `ns` to a new epoch behind its owner's back, as another
/// worker's ACQUIRE does, and names `owner` as its owner when given.
fn take_shard_0(url: &str, ns: &str, owner: Option<&str>) {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let state = format!("tw:{{{ns}:0}}:state");
    redis::cmd("HINCRBY")
        .arg(&state)
        .arg("epoch")
        .arg(1)
        .query::<i64>(&mut con)
        .unwrap();
    if let Some(owner) = owner {
        redis::cmd("HSET")
            .arg(&state)
            .arg("owner")
            .arg(owner)
            .query::<i64>(&mut con)
            .unwrap();
    }
}

#[test]
fn a_stale_claim_or_retry_is_fenced_inside_the_script() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "fence2", 1);
    cfg.lease = Duration::from_secs(1);
    cfg.maintenance_interval = cfg.lease / 3;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut a = Worker::connect(&cfg).unwrap();
    a.tick(&mut |_| Outcome::Ack).unwrap(); // A takes the shard; its next renewal is 333 ms away
    p.schedule("x", RunAt::AtMillis(T0 + 100), b"").unwrap();
    p.schedule("r", RunAt::AtMillis(T0 + 50), b"").unwrap();

    // Another worker takes the shard over between A's renewals (as ACQUIRE does).
    let bump = || take_shard_0(&s.url(), "fence2", Some("other"));

    // A retry requested after the takeover is refused.
    at(&time, 50);
    a.reload_windows();
    let mut handled = 0;
    a.tick(&mut |_| {
        handled += 1;
        bump();
        Outcome::RetryAfter(Duration::from_millis(10))
    })
    .unwrap();
    assert_eq!(handled, 1);
    assert_eq!(
        (a.stats().retried, a.stats().fenced),
        (0, 1),
        "{:?}",
        a.stats()
    );
    assert!(
        a.owned_shards().is_empty(),
        "A forgets the shard it was fenced from"
    );
    assert!(matches!(
        p.state("r").unwrap(),
        TaskState::InFlight { attempt: 1, .. }
    ));

    // A claim with an old epoch is refused too: W believes it owns the shard (its next
    // renewal is 10 s away) when the epoch moves on.
    let (mut cfg, time) = common::manual(&s, "fence3", 1);
    cfg.lease = Duration::from_secs(60);
    // Claimed at its run-at: a task claimed ahead would be delivered under the lease the
    // worker still holds by its own reckoning (the bump below skips the lease's expiry).
    cfg.claim_ahead = Duration::ZERO;
    cfg.maintenance_interval = Duration::from_secs(10);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    p.schedule("z", RunAt::AtMillis(T0 + 1000), b"").unwrap();
    w.tick(&mut |_| Outcome::Ack).unwrap(); // takes the shard, loads z into its wheel
    assert_eq!(w.in_wheel(), 1);
    take_shard_0(&s.url(), "fence3", None);
    at(&time, 1000);
    w.tick(&mut |_| panic!("a fenced claim delivers nothing"))
        .unwrap();
    assert_eq!(
        (w.stats().delivered, w.stats().fenced),
        (0, 1),
        "{:?}",
        w.stats()
    );
    assert!(w.owned_shards().is_empty());
    assert!(matches!(
        p.state("z").unwrap(),
        TaskState::Pending { attempts: 0, .. }
    ));
}

#[test]
fn a_dead_workers_tasks_are_taken_over_after_its_lease() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "takeover", 4);
    cfg.lease = Duration::from_secs(2);
    cfg.claim_ahead = Duration::from_millis(500);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut a = Worker::connect(&cfg).unwrap();
    a.tick(&mut |_| Outcome::Ack).unwrap();
    assert_eq!(a.owned_shards().len(), 4);
    for i in 0..20 {
        p.schedule(&format!("t{i}"), RunAt::AtMillis(T0 + 100 + i * 100), b"")
            .unwrap();
    }
    at(&time, 1000);
    // In flight when A dies: the 10 it delivered and the 5 it claimed ahead (due by 1500).
    let first = step(&mut a, |_| Outcome::Leave);
    assert_eq!(first.len(), 10);
    drop(a); // dies: no release, no ack

    let mut b = Worker::connect(&cfg).unwrap();
    at(&time, 1000 + 1999);
    assert!(
        step(&mut b, |_| Outcome::Ack).is_empty(),
        "A's leases still hold"
    );
    at(&time, 1000 + 2000 + 500);
    let got = step(&mut b, |_| Outcome::Ack);
    // All 20 are due by now: A's 15 in-flight ones again (attempt 2, without waiting for the
    // 30 s visibility timeout), the 5 it had claimed ahead and never delivered among them,
    // and the 5 that were pending.
    assert_eq!(got.len(), 20);
    assert_eq!(got.iter().filter(|t| t.1 == 2).count(), 15);
    assert_eq!(b.owned_shards().len(), 4);
    assert!(p.is_empty().unwrap());
}

#[test]
fn workers_share_shards_fairly_and_hand_them_over_on_stop() {
    let s = common::server();
    let (cfg, time) = common::manual(&s, "fair", 4);
    let mut a = Worker::connect(&cfg).unwrap();
    let mut b = Worker::connect(&cfg).unwrap();
    let tick = |w: &mut Worker| w.tick(&mut |_| Outcome::Ack).unwrap();
    tick(&mut a);
    tick(&mut b);
    assert_eq!((a.owned_shards().len(), b.owned_shards().len()), (4, 0));
    time.advance(Duration::from_millis(600));
    tick(&mut a); // two live workers: A gives up two shards
    tick(&mut b);
    let (sa, sb) = (a.owned_shards(), b.owned_shards());
    assert_eq!((sa.len(), sb.len()), (2, 2));
    assert!(sa.iter().all(|s| !sb.contains(s)));
    a.shutdown(); // releases at once
    time.advance(Duration::from_millis(600));
    tick(&mut b);
    assert_eq!(b.owned_shards(), vec![0, 1, 2, 3]);
}

#[test]
fn random_operations_match_the_reference_model() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "model", 3);
    cfg.window = Duration::from_millis(700); // tasks cross window boundaries often
    cfg.claim_ahead = cfg.window / 2;
    let ahead = 250;
    cfg.claim_ahead = Duration::from_millis(ahead);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    // The model: id -> (run_at, payload) for pending tasks, and the tasks claimed ahead (run-at
    // within `ahead` of a step) and not delivered yet: (run_at, id, payload). A claimed task
    // is in flight: cancel and reschedule answer false, and replacing its id does not stop
    // its delivery (the new version is pending beside it).
    let mut model: BTreeMap<String, (u64, Vec<u8>)> = BTreeMap::new();
    let mut claimed: Vec<(u64, String, Vec<u8>)> = Vec::new();
    // Ids replaced since their claim: the stored task is the new version (or, cancelled, none).
    let mut superseded: std::collections::BTreeSet<String> = Default::default();
    let mut rng = SplitMix64::new(7);
    let mut now = T0;
    let mut delivered = 0;
    let mut delivered_claimed = 0;
    for round in 0..800 {
        let id = format!("k{}", rng.below(30));
        let in_flight = claimed.iter().any(|c| c.1 == id);
        match rng.below(10) {
            0..=3 => {
                let run_at = now + rng.below(2000);
                let payload = format!("{id}@{round}").into_bytes();
                let stored = p.schedule(&id, RunAt::AtMillis(run_at), &payload);
                let replaced = stored.unwrap().replaced;
                if in_flight {
                    superseded.insert(id.clone());
                }
                let was = model.insert(id, (run_at, payload)).is_some();
                assert_eq!(replaced, was || in_flight, "round {round}");
            }
            4 => assert_eq!(p.cancel(&id).unwrap(), model.remove(&id).is_some()),
            5 => {
                let run_at = now + rng.below(2000);
                let moved = p.reschedule(&id, RunAt::AtMillis(run_at)).unwrap();
                assert_eq!(moved, model.contains_key(&id));
                if let Some(t) = model.get_mut(&id) {
                    t.0 = run_at;
                }
            }
            _ => {
                now += rng.below(300);
                time.set_ms(now);
                let got = step(&mut w, |_| Outcome::Ack);
                // Delivered from claims of earlier steps.
                delivered_claimed += claimed.iter().filter(|(at, _, _)| *at <= now).count();
                // Claimed now: every pending task due within the horizon.
                let take: Vec<String> = model
                    .iter()
                    .filter(|(_, (at, _))| *at <= now + ahead)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in take {
                    superseded.remove(&id);
                    let (at, pl) = model.remove(&id).unwrap();
                    claimed.push((at, id, pl));
                }
                // Delivered now: every claimed task due.
                let mut want: Vec<(String, u32, u64, Vec<u8>)> = claimed
                    .iter()
                    .filter(|(at, _, _)| *at <= now)
                    .map(|(at, id, pl)| (id.clone(), 1, *at, pl.clone()))
                    .collect();
                want.sort();
                claimed.retain(|(at, _, _)| *at > now);
                superseded.retain(|id| claimed.iter().any(|c| c.1 == *id));
                assert_eq!(got, want, "at {now} (round {round})");
                delivered += got.len();
            }
        }
        if let Some((id, (at, _))) = model.iter().next() {
            assert!(
                matches!(p.state(id).unwrap(), TaskState::Pending { run_at_ms, .. } if run_at_ms == *at)
            );
        }
        common::check_layout(&s.url(), "model", 3);
        // The latest claim of an id is what Redis holds in flight (earlier ones were replaced).
        let latest: BTreeMap<&String, u64> = claimed.iter().map(|(at, id, _)| (id, *at)).collect();
        for (id, at) in latest {
            if !model.contains_key(id) && !superseded.contains(id) {
                assert!(
                    matches!(p.state(id).unwrap(), TaskState::InFlight { due_ms, .. } if due_ms == at),
                    "{id} claimed ahead is in flight"
                );
            }
        }
    }
    assert!(delivered > 100, "the run exercised deliveries: {delivered}");
    assert!(
        delivered_claimed > 10,
        "and claims ahead: {delivered_claimed}"
    );
    let stored: std::collections::BTreeSet<&String> =
        model.keys().chain(claimed.iter().map(|c| &c.1)).collect();
    assert_eq!(p.len().unwrap(), stored.len() as u64);
}

/// A tick without reloading the windows: tasks scheduled into a loaded window reach the wheel
/// only through their notification.
fn tick_only(w: &mut Worker) -> Vec<(String, u32, u64, Vec<u8>)> {
    let mut got = Vec::new();
    w.tick(&mut |d: &Delivery| {
        got.push((d.id.clone(), d.attempt, d.due_ms, d.payload.clone()));
        Outcome::Ack
    })
    .unwrap();
    got.sort();
    got
}

/// Waits (wall clock, for pub/sub) until `w`'s wheel holds `n` tasks; time does not move.
fn wait_for_wheel(w: &mut Worker, n: usize, what: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert!(tick_only(w).is_empty(), "{what}: nothing is due yet");
        if w.in_wheel() == n {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "{what}: {} tasks in the wheel, want {n}",
            w.in_wheel()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_batch_behaves_exactly_as_the_same_schedules_one_by_one() {
    let s = common::server();
    let window = 1000;
    let mk = |ns: &str| {
        let (mut cfg, time) = common::manual(&s, ns, 3);
        cfg.window = Duration::from_millis(window);
        // Claims at the run-at: the replaced tasks are delivered in their new versions only.
        cfg.claim_ahead = Duration::ZERO;
        let p = Producer::connect(&cfg).unwrap();
        let w = Worker::connect(&cfg).unwrap();
        (p, w, time)
    };
    let (mut p1, mut w1, t1) = mk("one");
    let (mut pn, mut wn, tn) = mk("many");
    let set = |ms: u64| {
        t1.set_ms(T0 + ms);
        tn.set_ms(T0 + ms);
    };
    // The reference model: id -> (run_at, payload, attempt of its next delivery).
    let mut model: BTreeMap<String, (u64, Vec<u8>, u32)> = BTreeMap::new();

    // Before: k0..k9, k0 due at once and left in flight, the others inside and beyond the
    // window; both workers load their windows.
    for i in 0..10u64 {
        let (id, at) = (format!("k{i}"), if i == 0 { T0 } else { T0 + 150 * i });
        for p in [&mut p1, &mut pn] {
            p.schedule(&id, RunAt::AtMillis(at), b"old").unwrap();
        }
        model.insert(id, (at, b"old".to_vec(), 1));
    }
    for w in [&mut w1, &mut wn] {
        assert_eq!(ids(&step(w, |_| Outcome::Leave)), [("k0", 1)]);
    }
    // A window ends at the end of the 1 s time bucket holding now + window.
    let horizon = (T0 + window) / 1000 * 1000 + 999;
    // What the wheels hold: the loaded window (a replaced task keeps its entry until the claim
    // script answers "not yet"), then every id the notifications name.
    let mut wheel: std::collections::BTreeSet<String> = model
        .iter()
        .filter(|(_, (at, _, _))| *at <= horizon)
        .map(|(id, _)| id.clone())
        .collect();

    // The batch: new ids inside and beyond the loaded window, replaced pending ids, the
    // in-flight k0 replaced, one id given twice, a delay relative to the (manual) clock.
    let mut batch: Vec<(String, RunAt, Vec<u8>)> = Vec::new();
    for i in 0..24u64 {
        let at = T0 + 37 + 97 * i; // 2.3 windows
        batch.push((
            format!("n{i}"),
            RunAt::AtMillis(at),
            format!("n{i}").into_bytes(),
        ));
    }
    for i in (0..10u64).step_by(2) {
        let at = T0 + 2200 - 210 * i;
        batch.push((format!("k{i}"), RunAt::AtMillis(at), b"new".to_vec()));
    }
    batch.push(("n3".into(), RunAt::AtMillis(T0 + 5), b"n3 again".to_vec()));
    batch.push((
        "d".into(),
        RunAt::After(Duration::from_millis(420)),
        b"d".to_vec(),
    ));
    let mut replaced_one = 0;
    for (id, run_at, payload) in &batch {
        replaced_one += usize::from(p1.schedule(id, *run_at, payload).unwrap().replaced);
        let at = match run_at {
            RunAt::AtMillis(ms) => *ms,
            _ => T0 + 420,
        };
        model.insert(id.clone(), (at, payload.clone(), 1));
    }
    let replaced_many = pn
        .schedule_many(batch.iter().map(|(id, run_at, payload)| Task {
            id,
            run_at: *run_at,
            payload,
            recurrence: None,
            retry: None,
        }))
        .unwrap();
    let replaced_many = replaced_many.iter().filter(|s| s.replaced).count();
    assert_eq!(replaced_many, replaced_one);
    assert_eq!(replaced_one, 5 + 1, "k0, k2, .., k8 and the second n3");
    for id in model.keys() {
        assert_eq!(
            pn.state(id).unwrap(),
            p1.state(id).unwrap(),
            "state of {id}"
        );
    }
    common::check_layout(&s.url(), "one", 3);
    common::check_layout(&s.url(), "many", 3);

    // Notifications: every id at or before the horizon (the window's end) reaches the wheel
    // without a reload.
    wheel.extend(
        model
            .iter()
            .filter(|(_, (at, _, _))| *at <= horizon)
            .map(|(id, _)| id.clone()),
    );
    assert_eq!(wheel.len(), 32, "k0..k9 loaded, n0..n20 and d notified");
    wait_for_wheel(&mut w1, wheel.len(), "one by one");
    wait_for_wheel(&mut wn, wheel.len(), "batch");

    // Deliveries step by step (no reloads): the same for both, and as the model says.
    let mut now = 0;
    let mut delivered = 0;
    while now < 3000 {
        now += 61;
        set(now);
        let want: Vec<(String, u32, u64, Vec<u8>)> = model
            .iter()
            .filter(|(_, (at, _, _))| *at <= T0 + now)
            .map(|(id, (at, pl, a))| (id.clone(), *a, *at, pl.clone()))
            .collect();
        model.retain(|_, (at, _, _)| *at > T0 + now);
        assert_eq!(tick_only(&mut w1), want, "one by one at +{now}");
        assert_eq!(tick_only(&mut wn), want, "batch at +{now}");
        delivered += want.len();
    }
    assert!(model.is_empty());
    assert_eq!(delivered, 10 + 24 + 1);
    assert!(p1.is_empty().unwrap() && pn.is_empty().unwrap());
    common::check_layout(&s.url(), "one", 3);
    common::check_layout(&s.url(), "many", 3);
}

#[test]
fn config_is_shared_by_clone() {
    let c = Config::new("redis://127.0.0.1:1/", "x");
    assert_eq!(c.clone().namespace, "x");
}

#[test]
fn a_window_read_in_steps_misses_nothing_scheduled_between_them() {
    let s = common::server();
    let (mut cfg, time) = common::manual(&s, "steps", 1);
    cfg.window_limit = 1; // 100 list entries a read, the least a read takes
    cfg.claim_ahead = Duration::ZERO;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let mut want = Vec::new();
    let mut add = |p: &mut Producer, id: String, at: u64| {
        p.schedule(&id, RunAt::AtMillis(at), id.as_bytes()).unwrap();
        want.push((id, 1, at, Vec::new()));
    };
    // 250 tasks in one 1 s bucket, 50 in the next: the first read stops inside the bucket.
    for i in 0..250 {
        add(&mut p, format!("a{i}"), T0 + 500 + i % 7);
    }
    for i in 0..50 {
        add(&mut p, format!("b{i}"), T0 + 1500);
    }
    tick_only(&mut w);
    assert_eq!(w.in_wheel(), 100, "one limited read");
    // Scheduled into the bucket being read (past the horizon: no notification), and a
    // replacement of a task already read: both are appended at the bucket's tail.
    add(&mut p, "late".into(), T0 + 600);
    p.schedule("a0", RunAt::AtMillis(T0 + 700), b"a0 again")
        .unwrap();
    want.retain(|t| t.0 != "a0");
    want.push(("a0".into(), 1, T0 + 700, Vec::new()));
    for _ in 0..10 {
        tick_only(&mut w);
    }
    assert_eq!(w.in_wheel(), 301, "every task read, each once");
    common::check_layout(&s.url(), "steps", 1);
    time.set_ms(T0 + 1500);
    let got: Vec<(String, u32, u64, Vec<u8>)> = tick_only(&mut w)
        .into_iter()
        .map(|(id, a, at, _)| (id, a, at, Vec::new()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    assert!(p.is_empty().unwrap());
    common::check_layout(&s.url(), "steps", 1);
}
