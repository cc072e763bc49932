//! `Deadlines<K>` on a `ManualClock`: start/finish/restart, the exact finish-vs-expiry rule
//! under a concurrent race, the receiver's blocking, non-blocking and async forms, and drop /
//! shutdown behaviour.

use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use tickwheel::{Deadlines, Expired};

mod virtual_time;
use virtual_time::{advance, manual, manual_with};

const MS: Duration = Duration::from_millis(1);

fn drain<K>(rx: &mut Expired<K>) -> Vec<K> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[test]
fn send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Deadlines<String>>();
    check::<Expired<String>>();
}

#[test]
fn finish_in_time_sends_nothing_expiry_sends_once() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u32>();
    assert!(deadlines.start(1, 10 * MS));
    assert!(deadlines.start(2, 10 * MS));
    assert!(deadlines.start(3, 20 * MS));
    assert_eq!(deadlines.len(), 3);
    advance(&clock, &service, 9 * MS);
    assert!(deadlines.finish(&1));
    assert!(!deadlines.finish(&1), "finished once");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "never early");
    advance(&clock, &service, MS);
    assert_eq!(drain(&mut rx), [2]);
    assert!(!deadlines.finish(&2), "its message was sent");
    assert!(deadlines.is_live(&3));
    advance(&clock, &service, 10 * MS);
    assert_eq!(drain(&mut rx), [3]);
    assert!(deadlines.is_empty());
    assert_eq!(service.stats().pending, 0);
}

#[test]
fn duplicate_start_replaces_the_old_timeout() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<&str>();
    assert!(deadlines.start("job", 10 * MS));
    assert!(!deadlines.start("job", 30 * MS), "was live: replaced");
    advance(&clock, &service, 20 * MS);
    assert!(drain(&mut rx).is_empty(), "the old timeout sends nothing");
    advance(&clock, &service, 10 * MS);
    assert_eq!(drain(&mut rx), ["job"]);
    assert_eq!(service.stats().pending, 0);
}

#[test]
fn restart_moves_live_ids_only() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u8>();
    deadlines.start(7, 10 * MS);
    advance(&clock, &service, 5 * MS);
    assert!(deadlines.restart(&7, 10 * MS)); // now due at 15
    advance(&clock, &service, 9 * MS);
    assert!(drain(&mut rx).is_empty());
    advance(&clock, &service, MS);
    assert_eq!(drain(&mut rx), [7]);
    assert!(!deadlines.restart(&7, 10 * MS), "expired: not resurrected");
    assert!(!deadlines.restart(&8, 10 * MS), "never started");
    advance(&clock, &service, 50 * MS);
    assert!(drain(&mut rx).is_empty());
    assert!(!deadlines.is_live(&7));
}

#[test]
fn duration_max_never_expires() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u8>();
    deadlines.start(1, Duration::MAX);
    advance(&clock, &service, Duration::from_secs(1 << 40));
    assert!(drain(&mut rx).is_empty());
    assert!(deadlines.finish(&1));
}

/// Many ids race their expiry against `finish` and `restart` from another thread while the
/// clock moves: for every id, exactly one of "finish returned true" and "a message was
/// received" holds, and no id is received twice.
#[test]
fn finish_vs_expiry_is_exact_under_races() {
    const IDS: u64 = 2_000;
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u64>();
    let deadlines = Arc::new(deadlines);
    for id in 0..IDS {
        deadlines.start(id, Duration::from_millis(1 + id % 50));
    }
    let barrier = Arc::new(Barrier::new(2));
    let finisher = {
        let (deadlines, barrier) = (deadlines.clone(), barrier.clone());
        thread::spawn(move || {
            barrier.wait();
            let mut finished = vec![false; IDS as usize];
            for id in (0..IDS).rev() {
                if id % 3 == 0 {
                    deadlines.restart(&id, 10 * MS);
                }
                finished[id as usize] = deadlines.finish(&id);
            }
            finished
        })
    };
    barrier.wait();
    for _ in 0..60 {
        advance(&clock, &service, MS);
    }
    let finished = finisher.join().unwrap();
    advance(&clock, &service, 100 * MS);
    let mut received = vec![0u32; IDS as usize];
    for id in drain(&mut rx) {
        received[id as usize] += 1;
    }
    for id in 0..IDS as usize {
        assert_eq!(
            u32::from(!finished[id]),
            received[id],
            "id {id}: finish {} vs {} messages",
            finished[id],
            received[id]
        );
    }
    assert!(deadlines.is_empty());
    assert_eq!(service.stats().pending, 0);
}

#[test]
fn async_next_under_an_executor() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u32>();
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut pool = LocalPool::new();
    {
        let got = got.clone();
        pool.spawner()
            .spawn_local(async move {
                while let Some(id) = rx.next().await {
                    got.lock().unwrap().push(id);
                }
                got.lock().unwrap().push(u32::MAX); // disconnected
            })
            .unwrap();
    }
    deadlines.start(1, 5 * MS);
    deadlines.start(2, 10 * MS);
    pool.run_until_stalled();
    assert!(got.lock().unwrap().is_empty());
    advance(&clock, &service, 5 * MS);
    pool.run_until_stalled();
    assert_eq!(*got.lock().unwrap(), [1]);
    advance(&clock, &service, 5 * MS);
    drop(deadlines);
    pool.run_until_stalled();
    assert_eq!(*got.lock().unwrap(), [1, 2, u32::MAX]);
}

#[test]
fn blocking_recv_is_released_by_an_expiry_and_by_drop() {
    let (clock, service) = manual();
    let service = Arc::new(service);
    let (deadlines, mut rx) = service.deadlines::<u32>();
    deadlines.start(9, 10 * MS);
    let mover = {
        let service = service.clone();
        thread::spawn(move || advance(&clock, &service, 10 * MS))
    };
    assert_eq!(rx.recv(), Ok(9));
    mover.join().unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout)
    );
    deadlines.start(10, 10 * MS);
    let dropper = thread::spawn(move || drop(deadlines));
    assert!(
        rx.recv().is_err(),
        "disconnected: the pending id was cancelled"
    );
    dropper.join().unwrap();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(service.stats().pending, 0);
}

#[test]
fn shutdown_discards_live_ids_which_then_finish_true() {
    let (clock, service) = manual();
    let (deadlines, mut rx) = service.deadlines::<u32>();
    deadlines.start(1, 10 * MS);
    service.shutdown();
    clock.advance(20 * MS);
    assert!(drain(&mut rx).is_empty());
    assert!(deadlines.finish(&1), "no message was or will be sent");
    deadlines.start(2, MS); // after shutdown: never sends, no panic
    assert!(deadlines.is_live(&2));
}

#[test]
fn default_service_and_a_dropped_receiver() {
    let (deadlines, rx) = Deadlines::<u64>::new();
    drop(rx);
    deadlines.start(1, Duration::ZERO); // expires at the next tick; nobody receives it
    deadlines.start(2, Duration::from_secs(3600));
    assert!(deadlines.finish(&2));
}

/// Expired ids come out in deadline order even when their timers were started from different
/// threads (so sit in different shards of the service) and fall due in one drain: four
/// threads start interleaved deadlines (thread `j` the ones at `4k + j + 1` ms), the clock
/// jumps past all of them, and the receiver must see them sorted by deadline, not grouped by
/// thread. Each thread runs alone, one after the other, so the four take consecutive
/// shard indices and never all share one shard.
#[test]
fn expiries_from_different_shards_are_merged_by_deadline() {
    const PER_THREAD: u32 = 50;
    let (clock, service) = manual_with(tickwheel::TimerService::builder().shards(4));
    let (deadlines, mut rx) = service.deadlines::<u32>();
    let deadlines = Arc::new(deadlines);
    let timeout_ms = |id: u32| 4 * (id % 1000) + id / 1000 + 1;
    for j in 0..4 {
        let deadlines = deadlines.clone();
        thread::spawn(move || {
            for k in 0..PER_THREAD {
                let id = 1000 * j + k;
                assert!(deadlines.start(id, timeout_ms(id) * MS));
            }
        })
        .join()
        .unwrap();
    }
    advance(&clock, &service, 4 * PER_THREAD * MS);
    let got = drain(&mut rx);
    let deadlines_seen: Vec<u32> = got.iter().map(|&id| timeout_ms(id)).collect();
    let expected: Vec<u32> = (1..=4 * PER_THREAD).collect();
    assert_eq!(
        deadlines_seen, expected,
        "expired ids (as deadlines in ms), in arrival order"
    );
}
