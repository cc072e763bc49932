//! The handles of timers staged through a shard's inbox (every timer `schedule` makes),
//! checked against a `BTreeMap` reference model operation by operation, on a `ManualClock`
//! with one worker, so callbacks run in the order they were handed out, and with none (the
//! draining thread runs them, in the same order).
//!
//! The model keeps each pending timer under `(deadline tick, seq)`: `schedule` and
//! `schedule_detached` take a new seq, and so does a reset (a reset timer fires after the
//! timers already at its new tick). After every clock move and `settle`, the callbacks that
//! ran must be exactly the model's due timers, in model order; `cancel` must return `true`
//! exactly for a pending timer; `is_pending` and `deadline` must match the model whether the
//! timer is still in the inbox or already queued. Handles are picked from every handle ever
//! issued, so fired and cancelled (stale) handles, whose cells have since been reused, are
//! exercised as often as live ones.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tickwheel::service::TimerHandle;

mod virtual_time;
use virtual_time::{advance, manual, manual_with_workers};

#[derive(Clone, Debug)]
enum Op {
    /// `schedule` (with a handle) after this many ms.
    Schedule(u64),
    /// `schedule_detached` after this many ms.
    Detached(u64),
    /// `Duration::MAX`: never fires.
    Never,
    Cancel(usize),
    Reset(usize, u64),
    Pending(usize),
    Deadline(usize),
    /// Moves the clock this many ms (0 too: the timer thread then only queues the inbox)
    /// and settles.
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // At least a tick: a timer due at once may fire before the next `settle`, on its own.
    let delay = prop_oneof![1..4u64, 1..70u64, 4_000..5_000u64];
    prop_oneof![
        6 => delay.clone().prop_map(Op::Schedule),
        2 => delay.clone().prop_map(Op::Detached),
        1 => Just(Op::Never),
        3 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), delay).prop_map(|(i, d)| Op::Reset(i, d)),
        1 => any::<usize>().prop_map(Op::Pending),
        1 => any::<usize>().prop_map(Op::Deadline),
        3 => prop_oneof![0..3u64, 0..100u64].prop_map(Op::Advance),
    ]
}

/// Runs `ops` against a service with `workers` workers and the model; panics at the first
/// difference.
fn check(ops: &[Op], workers: usize) {
    let (clock, service) = manual_with_workers(workers);
    let ticks = *service.ticks();
    let ran = Arc::new(Mutex::new(Vec::<usize>::new()));
    // Pending timers: (tick, seq) -> id; and each id's current place.
    let mut model: BTreeMap<(u64, u64), usize> = BTreeMap::new();
    let mut place: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    let mut handles: Vec<(usize, TimerHandle)> = Vec::new();
    let mut seq = 0u64;
    let mut next_id = 0usize;
    let mut cancelled = 0u64;
    for op in ops {
        let now = service.now();
        let tick_of = |delay: Duration| ticks.delay_tick(now, delay);
        match *op {
            Op::Schedule(ms) | Op::Detached(ms) => {
                let (id, ran) = (next_id, ran.clone());
                next_id += 1;
                let delay = Duration::from_millis(ms);
                let callback = move || ran.lock().unwrap().push(id);
                if matches!(op, Op::Schedule(_)) {
                    handles.push((id, service.schedule(delay, callback)));
                } else {
                    service.schedule_detached(delay, callback);
                }
                seq += 1;
                model.insert((tick_of(delay), seq), id);
                place.insert(id, (tick_of(delay), seq));
            }
            Op::Never => {
                let (id, ran) = (next_id, ran.clone());
                next_id += 1;
                let handle = service.schedule(Duration::MAX, move || ran.lock().unwrap().push(id));
                handles.push((id, handle));
                seq += 1;
                model.insert((u64::MAX, seq), id);
                place.insert(id, (u64::MAX, seq));
            }
            Op::Cancel(i) if !handles.is_empty() => {
                let (id, handle) = &handles[i % handles.len()];
                let expected = place.remove(id).map(|at| model.remove(&at));
                assert_eq!(handle.cancel(), expected.is_some(), "cancel {id}");
                cancelled += u64::from(expected.is_some());
            }
            Op::Reset(i, ms) if !handles.is_empty() => {
                let (id, handle) = &handles[i % handles.len()];
                let delay = Duration::from_millis(ms);
                let pending = place.contains_key(id);
                assert_eq!(handle.reset(delay), pending, "reset {id}");
                if let Some(at) = place.remove(id) {
                    model.remove(&at);
                    seq += 1;
                    model.insert((tick_of(delay), seq), *id);
                    place.insert(*id, (tick_of(delay), seq));
                }
            }
            Op::Pending(i) if !handles.is_empty() => {
                let (id, handle) = &handles[i % handles.len()];
                assert_eq!(
                    handle.is_pending(),
                    place.contains_key(id),
                    "is_pending {id}"
                );
            }
            Op::Deadline(i) if !handles.is_empty() => {
                let (id, handle) = &handles[i % handles.len()];
                let expected = place.get(id).and_then(|&(tick, _)| ticks.instant_of(tick));
                assert_eq!(handle.deadline(), expected, "deadline {id}");
            }
            Op::Advance(ms) => {
                advance(&clock, &service, Duration::from_millis(ms));
                let now_tick = ticks.now_tick(service.now());
                let mut due = Vec::new();
                while let Some(entry) = model.first_entry() {
                    if entry.key().0 > now_tick {
                        break;
                    }
                    let id = entry.remove();
                    place.remove(&id);
                    due.push(id);
                }
                assert_eq!(
                    std::mem::take(&mut *ran.lock().unwrap()),
                    due,
                    "at tick {now_tick}"
                );
            }
            _ => {}
        }
    }
    let stats = service.stats();
    assert_eq!(stats.pending, model.len());
    assert_eq!(stats.scheduled, next_id as u64);
    assert_eq!(stats.cancelled, cancelled);
    service.shutdown();
    // Shutdown discards what is pending: every handle is then stale.
    assert!(handles.iter().all(|(_, h)| !h.is_pending() && !h.cancel()));
    assert!(ran.lock().unwrap().is_empty(), "a discarded timer ran");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn staged_handles_match_the_model(ops in proptest::collection::vec(op(), 1..300)) {
        check(&ops, 1);
    }

    #[test]
    fn staged_handles_match_the_model_with_no_workers(
        ops in proptest::collection::vec(op(), 1..300)
    ) {
        check(&ops, 0);
    }
}

/// Cells are reused once their timer fired or was cancelled: a handle from an earlier use
/// must stay stale, whatever the cell's timer now is.
#[test]
fn a_reused_cell_does_not_revive_an_old_handle() {
    let (clock, service) = manual();
    let old: Vec<TimerHandle> = (0..3_000)
        .map(|_| service.schedule(Duration::from_millis(1), || {}))
        .collect();
    assert!(old[0].cancel(), "cancelled while still in the inbox");
    advance(&clock, &service, Duration::from_millis(1));
    // The cells of the first round are free now; a second round takes them again.
    let new: Vec<TimerHandle> = (0..3_000)
        .map(|_| service.schedule(Duration::from_secs(5), || {}))
        .collect();
    assert!(old
        .iter()
        .all(|h| !h.is_pending() && !h.cancel() && h.deadline().is_none()));
    assert!(old.iter().all(|h| !h.reset(Duration::from_millis(1))));
    assert!(new.iter().all(TimerHandle::is_pending));
    assert_eq!(service.stats().pending, 3_000);
    assert!(new.iter().all(TimerHandle::cancel));
    assert_eq!(service.stats().pending, 0);
}
