//! Failovers under Redis Sentinel (issue #35): a primary with a replica and three sentinels
//! on loopback ports (`server::RedisSentinel`), clients connected by a
//! `redis+sentinel://` URL. Producers, workers and inspectors follow the new primary (a
//! reconnect that asks the sentinels again, a `READONLY` reply from the demoted primary);
//! leases and epochs stay fenced across the promotion; and the figures of a failover under
//! load (lost, early, duplicates, lateness) are measured and printed.

#[path = "common/load.rs"]
mod load;
#[path = "common/partition.rs"]
mod partition;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use load::Load;
use partition::Partition;
use tickwheel_redis::server::{Promotion, RedisSentinel};
use tickwheel_redis::{
    Config, Delivery, Error, Inspector, Outcome, Producer, RunAt, Task, TaskState, Worker,
    SENTINEL_SCHEME,
};

/// How long after the new primary is ready every call must succeed.
const FOLLOW: Duration = Duration::from_secs(1);

/// The tests run one at a time: each starts its own processes, and the timings they assert
/// (a second to follow) should not depend on how many others share the machine's cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn sentinel(sentinels: usize) -> RedisSentinel {
    sentinel_with(1, sentinels)
}

/// A primary with `replicas` replicas: two for a run with a replica confirming each write,
/// so that the new primary has one left after a promotion.
fn sentinel_with(replicas: usize, sentinels: usize) -> RedisSentinel {
    match RedisSentinel::start(replicas, sentinels) {
        Ok(s) => s,
        Err(e) => panic!("cannot run the Redis Sentinel tests: {e}"),
    }
}

fn config(s: &RedisSentinel, ns: &str) -> Config {
    let mut cfg = Config::new(s.url(), ns);
    cfg.shards = 16;
    // A stalled primary is given up after this: calls under way when it stops fail then.
    cfg.io_timeout = Duration::from_secs(1);
    cfg
}

/// The load of the failover tests: 10^4 tasks (`TICKWHEEL_FAILOVER_TASKS`) from 2
/// producers over 8 s, run-ats 4 to 7 s ahead, 3 workers; the fault 3 s in.
fn failover_load() -> Load {
    Load {
        tasks: Load::tasks_from_env(10_000),
        producers: 2,
        workers: 3,
        schedule_for: Duration::from_secs(8),
        ahead_ms: (4_000, 7_000),
        fault_at: Duration::from_secs(3),
    }
}

/// Asserts that every task lost was stored between a second before the fault and a second
/// after the new primary was ready: taken by the old primary before its clients' next look
/// at the sentinels moved them.
fn assert_lost_only_around_the_switch(f: &load::Figures, run: &load::Run) {
    let window = run.fault_ms.saturating_sub(1_000)..run.ready_ms + 1_000;
    let outside: Vec<&String> = f
        .lost
        .iter()
        .filter(|id| !window.contains(&run.stored[*id].1))
        .collect();
    assert!(outside.is_empty(), "lost outside the switch: {outside:?}");
}

/// Runs `f`, which must succeed within [`FOLLOW`] of `ready`.
fn within<T>(what: &str, ready: Instant, f: impl FnOnce() -> Result<T, Error>) -> T {
    let r = f();
    let late = ready.elapsed();
    match r {
        Ok(v) => {
            eprintln!("{what}: answered {late:?} after the new primary was ready");
            assert!(late <= FOLLOW, "{what}: answered {late:?} after ready");
            v
        }
        Err(e) => panic!("{what}, {late:?} after the new primary was ready: {e}"),
    }
}

/// The primary is SIGKILLed while two producers schedule and three workers deliver: the
/// sentinels promote the replica, and every client follows it. With a replica confirming
/// each write (the default here: `TICKWHEEL_FAILOVER_CONFIRM=0` measures the loss without),
/// nothing a producer was told is stored is lost.
#[test]
fn a_killed_primary_is_followed_under_load() {
    let _one = one_at_a_time();
    let mut s = sentinel_with(2, 3);
    let mut cfg = config(&s, "kill");
    let confirm = load::confirm(&mut cfg);
    let load = failover_load();
    let mut p = Producer::connect(&cfg).unwrap();
    let far = 4_000_000_000_000;
    p.schedule("far", RunAt::AtMillis(far), b"x").unwrap();
    let mut inspector = Inspector::connect(&cfg).unwrap();
    assert!(inspector.show("far").unwrap().is_some());
    // Replicated before the kill.
    s.wait_replicas(Duration::from_secs(5)).unwrap();

    let mut old_new = None;
    let run = load::run(&cfg, &load, || {
        let (old, new, ready) = s.promote(Promotion::Kill, Duration::from_secs(30)).unwrap();
        old_new = Some((old, new));
        ready
    });
    let f = load::report(&format!("killed primary, {confirm} confirming"), &run);
    let (old, new) = old_new.unwrap();
    assert_ne!(old, new);
    load::judged_with_logs(s.nodes().iter().chain(s.sentinels()), || {
        f.assert_target(confirm, FOLLOW)
    });
    // The operator tools, connected before the kill, follow too.
    let stats = inspector.stats().unwrap();
    assert_eq!(stats.in_flight(), 0, "{stats:?}");
    assert_eq!(stats.pending(), 1, "{stats:?}");
    assert!(inspector.show("far").unwrap().is_some());
    assert!(matches!(p.state("far").unwrap(), TaskState::Pending { .. }));
}

/// `SENTINEL FAILOVER` under load: the replica is promoted while the old primary stays up,
/// taking writes from whoever still reaches it, until a sentinel tells it to replicate the
/// new one (and it drops what it took meanwhile). The sentinels name the new primary about
/// a second after its promotion, and clients ask them at most a second apart whether their
/// primary moved: what is stored on the old primary in between is lost (counted and
/// printed), and tasks claimed there are claimed again on the new one (duplicates). A
/// replica confirming each write (`Config::confirm_replicas`, the default here) does not
/// close that window: the old primary's other replica confirms until it is moved.
/// `TICKWHEEL_FAILOVER_CONFIRM=2` (every replica confirming) closes it and loses nothing,
/// but then this test's 1 s follow assertion fails: writes fail until the demoted primary
/// rejoins as a replica (the last failed call 9.3 s after the new primary was ready).
#[test]
fn a_sentinel_failover_under_load() {
    let _one = one_at_a_time();
    let s = sentinel_with(2, 3);
    let mut cfg = config(&s, "fo-load");
    let confirm = load::confirm(&mut cfg);
    let load = failover_load();
    let run = load::run(&cfg, &load, || {
        s.failover(Duration::from_secs(30)).unwrap().2
    });
    let f = load::report(&format!("SENTINEL FAILOVER, {confirm} confirming"), &run);
    load::judged_with_logs(s.nodes().iter().chain(s.sentinels()), || {
        f.assert_followed(FOLLOW)
    });
    // Even with a replica confirming each write: the old primary keeps its other replica
    // until a sentinel moves it to the new primary, and that replica confirms what the old
    // primary takes meanwhile, then drops it when it resynchronizes (reported above).
    assert_lost_only_around_the_switch(&f, &run);
}

/// A partition cuts the primary off from the sentinels and from its replicas while the
/// clients still reach it: the sentinels promote a replica, the old primary goes on
/// answering the clients on its side until they move (they ask the sentinels every second),
/// and when the partition heals a sentinel tells it to replicate the new primary, dropping
/// what it took meanwhile. With a replica confirming each write (the default here) the old
/// primary can confirm nothing once its replicas are cut off, so nothing a producer was told
/// is stored is lost; `TICKWHEEL_FAILOVER_CONFIRM=0` measures what it takes, and loses,
/// until its clients move. The sentinels reach the primary through one proxy (their
/// connections say `CLIENT SETNAME sentinel-…` first), the replicas through another; the
/// clients are given the sentinels' address, the first proxy, whose other connections stay.
#[test]
fn a_partitioned_primary_keeps_its_clients_and_loses_nothing_confirmed() {
    let _one = one_at_a_time();
    let mut proxies = Vec::new();
    let s = RedisSentinel::start_behind(2, 3, |port| {
        let sentinels = Partition::start(port, |first| first.windows(9).any(|w| w == b"sentinel-"));
        let replicas = Partition::start(port, |_| true);
        let ports = (sentinels.port, replicas.port);
        proxies.extend([sentinels, replicas]);
        ports
    })
    .unwrap_or_else(|e| panic!("cannot run the Redis Sentinel tests: {e}"));
    let mut cfg = config(&s, "partition");
    let confirm = load::confirm(&mut cfg);
    let load = failover_load();
    let old = s.primary().unwrap();
    let mut healed = None;
    let run = load::run(&cfg, &load, || {
        proxies.iter().for_each(Partition::cut);
        let (_, ready) = s.wait_new_primary(old, Duration::from_secs(30)).unwrap();
        // The old primary still answers as one: the clients on its side can still write.
        assert!(
            s.is_primary(old),
            "the partitioned primary stopped answering as a primary"
        );
        std::thread::sleep(Duration::from_secs(2));
        proxies.iter().for_each(Partition::heal);
        healed = Some(Instant::now());
        ready
    });
    let f = load::report(&format!("partitioned primary, {confirm} confirming"), &run);
    load::judged_with_logs(s.nodes().iter().chain(s.sentinels()), || {
        if confirm > 0 {
            f.assert_target(confirm, FOLLOW);
        } else {
            // Lost: what the old primary took from the cut until its clients moved.
            f.assert_followed(FOLLOW);
            assert_lost_only_around_the_switch(&f, &run);
        }
    });
    // Healed, the old primary is told to replicate the new one: no second primary stays.
    // (When a sentinel next polls it: 10 and 21 s after the heal in two runs.)
    partition::wait_demoted(healed.unwrap(), || s.is_primary(old));
}

/// `SENTINEL FAILOVER` (the old primary stays up, and is told to replicate the new one):
/// clients connected before it get `READONLY` from the demoted primary, and each call must
/// still succeed within a second of the new primary being ready.
#[test]
fn every_call_follows_a_sentinel_failover() {
    let _one = one_at_a_time();
    let s = sentinel(3);
    let cfg = config(&s, "graceful");
    let mut p = Producer::connect(&cfg).unwrap();
    let mut i = Inspector::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let stop = w.stop_handle();
    let (tx, got) = mpsc::channel::<(String, u64)>();
    let worker = std::thread::spawn(move || {
        w.run(|d: &Delivery| {
            let _ = tx.send((d.id.clone(), load::now_ms()));
            Outcome::Ack
        })
        .unwrap();
        w.stats()
    });
    let before: Vec<String> = (0..50).map(|i| format!("b{i}")).collect();
    let later = load::now_ms() + 60_000;
    p.schedule_many(
        before
            .iter()
            .map(|id| Task::new(id, RunAt::AtMillis(later), b"")),
    )
    .unwrap();
    s.wait_replicas(Duration::from_secs(5)).unwrap();

    let (old, new, ready) = s.failover(Duration::from_secs(30)).unwrap();
    assert_ne!(old, new);
    eprintln!("failover: node {old} -> node {new}, and {old} replicates {new}");
    // Single calls first: the producer's connection still reaches the demoted primary.
    let due = load::now_ms() + 1_500;
    within("schedule", ready, || {
        p.schedule("a0", RunAt::AtMillis(due), b"")
    });
    let after: Vec<String> = (1..50).map(|i| format!("a{i}")).collect();
    within("schedule_many", ready, || {
        p.schedule_many(
            after
                .iter()
                .map(|id| Task::new(id, RunAt::AtMillis(due), b"")),
        )
    });
    assert_eq!(within("len", ready, || p.len()), 100);
    let cancelled = within("cancel_many", ready, || p.cancel_many(&before[..10]));
    assert!(cancelled.iter().all(|&c| c), "{cancelled:?}");
    assert_eq!(
        within("Inspector::stats", ready, || i.stats()).pending(),
        90
    );
    assert!(within("Inspector::show", ready, || i.show("b20")).is_some());

    // The worker follows: the tasks stored after the failover are delivered on time.
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 50 && Instant::now() < deadline {
        if let Ok((id, at)) = got.recv_timeout(Duration::from_millis(100)) {
            assert!(
                seen.insert(id.clone(), at).is_none(),
                "{id} delivered twice"
            );
        }
    }
    stop.stop();
    let stats = worker.join().unwrap();
    assert_eq!(seen.len(), 50, "delivered after the failover: {seen:?}");
    let late = seen
        .values()
        .map(|&at| at.saturating_sub(due))
        .max()
        .unwrap();
    eprintln!("worker after the failover: {stats:?}; latest delivery {late} ms after run-at");
    assert!(seen.values().all(|&at| at >= due), "never early");
    assert!(late < 1_000, "delivered {late} ms late");
    // Every write went to the new primary: none is lost when the old one, demoted, drops
    // its data to replicate the new one (a sentinel tells it to when it next sees it: up to
    // 10 s on; meanwhile it takes writes from clients that do not ask the sentinels).
    let t = Instant::now();
    s.wait_replicas(Duration::from_secs(30)).unwrap();
    eprintln!(
        "the old primary rejoined as a replica {:?} later",
        t.elapsed()
    );
    assert_eq!(p.len().unwrap(), 40, "the b* tasks not cancelled");
    assert!(matches!(p.state("b20").unwrap(), TaskState::Pending { .. }));
}

/// A worker still talking to the old primary cannot acknowledge. The worker claims a task
/// and is handed it; while its handler runs, the primary stalls (SIGSTOP) and the replica
/// is promoted; the old primary comes back and rejoins as a replica; a second worker takes
/// the shards on the new primary (a new epoch) and is handed the task again once its
/// visibility timeout runs out. While the second worker's handler runs, the first one's
/// handler returns: its acknowledgement, sent on its old connection, would be refused
/// (`READONLY`); the worker notices the failover, reconnects through the sentinels, and its
/// acknowledgement is refused by the new primary (fenced: its epoch is not the shard's).
/// The second worker's acknowledgement is accepted: the task is acknowledged once.
#[test]
fn a_worker_on_the_old_primary_cannot_acknowledge() {
    let _one = one_at_a_time();
    let mut s = sentinel(1);
    let mut cfg = config(&s, "fence");
    cfg.shards = 2;
    cfg.lease = Duration::from_secs(2);
    cfg.visibility_timeout = Duration::from_secs(3);
    cfg.claim_ahead = Duration::ZERO;
    let mut p = Producer::connect(&cfg).unwrap();
    let mut w1 = Worker::connect(&cfg).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while w1.owned_shards().len() < 2 && Instant::now() < deadline {
        w1.tick(&mut |_| Outcome::Ack).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(w1.owned_shards().len(), 2);
    p.schedule("x", RunAt::After(Duration::ZERO), b"").unwrap();

    // Each handler holds its delivery until the test lets it go.
    let (entered, in_handler) = mpsc::channel::<Delivery>();
    let (release, released) = mpsc::channel::<()>();
    let (w1_done, w1_answered) = mpsc::channel::<()>();
    let s = &mut s;
    let cfg_ref = &cfg;
    let (old, new, first, second, w2_stats) = std::thread::scope(|scope| {
        let failover = scope.spawn(move || {
            let first = in_handler.recv_timeout(Duration::from_secs(10)).unwrap();
            let (old, new, _) = s.promote(Promotion::Stop, Duration::from_secs(30)).unwrap();
            // The old primary comes back, and the sentinel makes it a replica.
            s.resume(old).unwrap();
            let until = Instant::now() + Duration::from_secs(30);
            while s.is_primary(old) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(!s.is_primary(old), "the old primary rejoined as a replica");
            // A second worker, through the sentinels: the new primary.
            let mut w2 = Worker::connect(cfg_ref).unwrap();
            let mut second = None;
            let until = Instant::now() + Duration::from_secs(20);
            while second.is_none() && Instant::now() < until {
                w2.tick(&mut |d: &Delivery| {
                    second = Some(d.clone());
                    // The first worker acknowledges while this delivery is in flight.
                    release.send(()).unwrap();
                    w1_answered.recv().unwrap();
                    Outcome::Ack
                })
                .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
            let second = second.expect("the second worker is handed the task again");
            (old, new, first, second, w2.stats())
        });
        let mut n = 0;
        let until = Instant::now() + Duration::from_secs(5);
        let mut first = Ok(0);
        while n == 0 && Instant::now() < until {
            first = w1.tick(&mut |d: &Delivery| {
                n += 1;
                entered.send(d.clone()).unwrap();
                released.recv().unwrap();
                Outcome::Ack
            });
            if n == 0 {
                first.as_ref().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert_eq!(n, 1);
        // The worker asks the sentinels (at most a second apart) whether its primary
        // moved: it did, so the step ends on that error, the acknowledgement held for the
        // next one. Had the worker not asked yet, its acknowledgement would have gone on
        // the old connection, and been refused as a write to a replica.
        match &first {
            Err(Error::Redis(r)) if r.is_io_error() => {
                eprintln!("the worker noticed the failover: {r}")
            }
            Err(Error::Redis(r)) if r.code() == Some("READONLY") => {
                eprintln!("the acknowledgement went to the demoted primary: READONLY")
            }
            r => panic!("{r:?}"),
        }
        // The next steps reach the new primary, and send the acknowledgement there.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            let r = w1.tick(&mut |d: &Delivery| panic!("delivered again: {d:?}"));
            let st = w1.stats();
            if r.is_ok() && st.acked + st.stale_acks + st.fenced > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let stats = w1.stats();
        eprintln!(
            "the first worker after the failover ({:?}): {stats:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < FOLLOW, "{:?}", t.elapsed());
        assert_eq!(stats.acked, 0, "the old worker acknowledged: {stats:?}");
        assert!(stats.fenced + stats.stale_acks > 0, "{stats:?}");
        w1_done.send(()).unwrap();
        failover.join().unwrap()
    });
    eprintln!("node {old} stalled, node {new} promoted; node {old} rejoined as a replica");
    assert_eq!((first.id.as_str(), second.id.as_str()), ("x", "x"));
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
    assert_eq!(w2_stats.acked, 1, "{w2_stats:?}");
    assert_eq!(p.state("x").unwrap(), TaskState::Unknown);
}

/// A set-up is ready only once its replicas take writes: a write made the moment
/// `RedisSentinel::start` returns, the primary stopped right after, is on the replica. (A
/// replica's link reads `up` before its primary streams to it: the tests that stalled the
/// primary at once lost every write, now and then, when only the link was awaited.)
#[test]
fn a_write_made_at_once_reaches_the_replica() {
    let _one = one_at_a_time();
    for round in 0..10 {
        let s = sentinel(1);
        let con = |i: usize| {
            let url = s.nodes()[i].url();
            redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap()
        };
        let key = format!("k{round}");
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(1)
            .query(&mut con(0))
            .unwrap();
        s.nodes()[0].pause(true).unwrap();
        let mut replica = con(1);
        let t = Instant::now();
        let mut got: Option<String> = None;
        while got.is_none() && t.elapsed() < Duration::from_secs(3) {
            got = redis::cmd("GET").arg(&key).query(&mut replica).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            got.as_deref(),
            Some("1"),
            "round {round}: lost on the replica"
        );
        s.nodes()[0].pause(false).unwrap();
    }
}

/// A malformed URL is a clear error at once; a primary name no sentinel knows is a clear
/// error at once, not a wait for `connect_timeout`; sentinels that cannot be reached are an
/// I/O error once `connect_timeout` has passed.
#[test]
fn sentinel_urls_and_names_are_checked() {
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel:///main",
        "redis+sentinel://127.0.0.1:26379,/main",
        "redis+sentinel://127.0.0.1:26379/main/notadb",
        "redis+sentinel://127.0.0.1:notaport/main",
    ] {
        let e = Producer::connect(&Config::new(url, "bad")).unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e}");
    }
    let _one = one_at_a_time();
    let s = sentinel(1);
    let port = s.sentinels()[0].port();
    let mut cfg = Config::new(format!("redis+sentinel://127.0.0.1:{port}/nope"), "ns");
    let t = Instant::now();
    let e = Producer::connect(&cfg).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(e.to_string().contains("no sentinel knows a primary"), "{e}");
    // The port of a stopped sentinel: nothing answers.
    cfg.url = "redis+sentinel://127.0.0.1:1/tickwheel".into();
    cfg.connect_timeout = Duration::from_millis(300);
    let e = Producer::connect(&cfg).unwrap_err();
    assert!(matches!(&e, Error::Redis(r) if r.is_io_error()), "{e}");
    // The right name, and a database: connects.
    cfg.url = format!("{}/3", s.url());
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("a", RunAt::After(Duration::from_secs(60)), b"")
        .unwrap();
    let mut con = redis::Client::open(format!("{}3", s.nodes()[0].url()).as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let n: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert!(n > 0, "the tasks are in database 3");

    // A primary (and replica) that want a password, which the sentinels are given: the URL's
    // credentials are the primary's. Without them, or with wrong ones, connecting fails at
    // once and says why; no error shows the password.
    const PASSWORD: &str = "s3cret-pw";
    let query = |url: String, args: &[&str]| {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut cmd = redis::cmd(args[0]);
        args[1..].iter().for_each(|a| {
            cmd.arg(*a);
        });
        cmd.query::<redis::Value>(&mut con).unwrap();
    };
    let name = RedisSentinel::NAME;
    query(
        s.sentinels()[0].url(),
        &["SENTINEL", "SET", name, "auth-pass", PASSWORD],
    );
    for node in s.nodes() {
        query(node.url(), &["CONFIG", "SET", "masterauth", PASSWORD]);
        query(node.url(), &["CONFIG", "SET", "requirepass", PASSWORD]);
    }
    let hosts = s.url();
    let hosts = hosts.strip_prefix(SENTINEL_SCHEME).unwrap();
    // Connecting with `auth` before the sentinels fails at once, saying `why`, and no error
    // shows the wrong password.
    let base = cfg.clone();
    let refused = |auth: &str, why: &str| {
        let mut cfg = base.clone();
        cfg.url = format!("{SENTINEL_SCHEME}{auth}{hosts}");
        cfg.connect_timeout = Duration::from_secs(10);
        let t = Instant::now();
        let e = Producer::connect(&cfg).unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{auth:?}: {:?} {shown}",
            t.elapsed()
        );
        assert!(shown.contains(why), "{auth:?}: {shown}");
        assert!(!shown.contains("wrong-pw"), "{shown}");
    };
    refused("", "Authentication required");
    refused(":wrong-pw@", "Password authentication failed");
    refused("default:wrong-pw@", "Password authentication failed");
    cfg.url = format!("{SENTINEL_SCHEME}:{PASSWORD}@{hosts}");
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("b", RunAt::After(Duration::from_secs(60)), b"")
        .unwrap();
    assert!(matches!(p.state("b").unwrap(), TaskState::Pending { .. }));

    // The sentinel wants the password too (`ACL SETUSER`: a sentinel has no `CONFIG SET`), as
    // deployments that give the sentinels the data nodes' password have it: the URL's
    // credentials are tried on it once it answers `NOAUTH`; without them, or with wrong ones,
    // connecting fails at once.
    let pass = format!(">{PASSWORD}");
    query(
        s.sentinels()[0].url(),
        &["ACL", "SETUSER", "default", "resetpass", &pass],
    );
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("c", RunAt::After(Duration::from_secs(60)), b"")
        .unwrap();
    assert!(matches!(p.state("c").unwrap(), TaskState::Pending { .. }));
    refused("", "Authentication required");
    refused(":wrong-pw@", "Password authentication failed");
}

/// A sentinel that stops answering (SIGSTOP: connections accepted, never answered) costs a
/// client its timeout once: the sentinel that answered is asked first from then on, for
/// connections and for the once-a-second check whether the primary moved.
#[test]
fn a_stalled_sentinel_costs_its_timeout_once() {
    let _one = one_at_a_time();
    let s = sentinel(3);
    s.sentinels()[0].pause(true).unwrap();
    let cfg = config(&s, "stalled");
    let t = Instant::now();
    let mut p = Producer::connect(&cfg).unwrap();
    eprintln!(
        "connected in {:?} with the first sentinel stalled",
        t.elapsed()
    );
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while Instant::now() < until {
        let t = Instant::now();
        p.schedule(&format!("t{n}"), RunAt::After(Duration::from_secs(60)), b"")
            .unwrap();
        slowest = slowest.max(t.elapsed());
        n += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    s.sentinels()[0].pause(false).unwrap();
    eprintln!("{n} calls over 3 s (a check a second), the slowest {slowest:?}");
    assert!(slowest < Duration::from_millis(150), "{slowest:?}");
}
