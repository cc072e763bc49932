//! The id wheel's own tests: its ids, growth and generations, and what its contract adds to
//! the `SlimWheel`'s (the rest is checked against a model in `tests/model.rs`).

use super::*;
use crate::queue::free::MAX_GENERATION;
use crate::queue::wheel::RING;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

#[test]
fn ids_past_the_limit_are_refused_and_allocate_nothing() {
    let mut wheel = IdWheel::new(100);
    let refused = wheel.insert(100, 5, 'a').unwrap_err();
    assert_eq!(
        (refused.id(), refused.id_limit(), refused.into_value()),
        (100, 100, 'a')
    );
    assert!(wheel.insert(u32::MAX, 5, 'b').is_err());
    assert_eq!(wheel.id_capacity(), 0, "a refused id allocates nothing");
    assert!(wheel.is_empty());
    assert!(!wheel.reset(u32::MAX, 9));
    assert!(!wheel.cancel(u32::MAX));
    assert_eq!(wheel.remove(1_000), None);
    assert_eq!(wheel.deadline(u32::MAX), None);
    assert_eq!(wheel.get_mut(u32::MAX), None);
    assert!(!wheel.contains(100));
    wheel.raise_id_limit(200);
    assert_eq!(wheel.insert(150, 5, 'c'), Ok(None));
    wheel.raise_id_limit(10);
    assert_eq!(wheel.id_limit(), 200, "a lower limit changes nothing");
    assert!(wheel.id_capacity() <= 200);
    wheel.check_invariants();
}

#[test]
fn the_records_grow_by_doubling_up_to_the_limit() {
    let mut wheel = IdWheel::new(1_000);
    wheel.insert(0, 5, 0u32).unwrap();
    assert_eq!(wheel.id_capacity(), 16);
    wheel.insert(16, 5, 0).unwrap();
    assert_eq!(wheel.id_capacity(), 32);
    wheel.insert(600, 5, 0).unwrap();
    assert_eq!(wheel.id_capacity(), 601);
    wheel.insert(601, 5, 0).unwrap();
    assert_eq!(wheel.id_capacity(), 1_000, "never past the limit");
    wheel.reserve_ids(u32::MAX);
    assert_eq!(wheel.id_capacity(), 1_000);
    // Shrinking drops the idle ids above the largest pending one.
    for id in [16, 600, 601] {
        assert!(wheel.cancel(id));
    }
    wheel.shrink_to_fit();
    assert_eq!(wheel.id_capacity(), 1);
    wheel.check_invariants();
    let mut wheel: IdWheel<u32> = IdWheel::new(50);
    wheel.reserve_ids(40);
    assert_eq!(wheel.id_capacity(), 40);
}

#[test]
fn insert_on_a_pending_id_replaces_it_as_a_new_insertion() {
    let mut wheel = IdWheel::new(10);
    assert_eq!(wheel.insert(1, 10, "a"), Ok(None));
    assert_eq!(wheel.insert(2, 10, "b"), Ok(None));
    assert_eq!(wheel.insert(1, 10, "c"), Ok(Some("a")));
    assert_eq!(wheel.len(), 2);
    wheel.check_invariants();
    let fired: Vec<_> = wheel.drain_expired(10).collect();
    assert_eq!(fired, [(2, "b"), (1, "c")], "the replacement goes behind 2");
    assert!(wheel.is_empty());
    assert_eq!(wheel.insert(1, 20, "d"), Ok(None), "a fired id is idle");
}

#[test]
fn a_move_down_keeps_the_id() {
    let mut wheel = IdWheel::new(4);
    wheel.insert(3, 300_000, 7u32).unwrap();
    // The levels the timer is on, polled every 1 000 ticks until just before it is due.
    let mut levels = alloc::vec![wheel.lean.store.slot_of(3).unwrap() as usize / RING];
    for tick in (1_000..300_000).step_by(1_000).chain([299_999]) {
        assert_eq!(wheel.poll_expired(tick), None, "early at {tick}");
        levels.push(wheel.lean.store.slot_of(3).expect("pending") as usize / RING);
    }
    levels.dedup();
    assert_eq!(levels, [3, 2, 1, 0], "moved down a level at a time");
    wheel.check_invariants();
    assert_eq!(wheel.poll_expired(300_000), Some((3, 7)));
}

/// Moves the pending timer on `id` to the last generation in place, as if 2^32 resets had
/// passed without a compaction: its current item (the one in its slot with its generation)
/// gets the last generation too, and every stale item of it stays where it is.
fn spend<T>(wheel: &mut IdWheel<T>, id: u32) {
    let slot = wheel.lean.store.slot_of(id).expect("pending") as usize;
    let generation = core::mem::replace(wheel.lean.store.generation_mut(id), MAX_GENERATION);
    let items = &mut wheel.lean.tiers.slots[slot].items;
    let current = items
        .iter_mut()
        .find(|item| item.index == id && item.generation == generation)
        .expect("the current item");
    current.generation = MAX_GENERATION;
    wheel.check_invariants();
}

/// The restart of a spent generation (`restart_generation`): from the last generation, a
/// reset, an insert that replaces and an insert on an idle id each restart it, and no item
/// left behind by earlier generations fires or is lost, checked against a plain model.
#[test]
fn a_spent_generation_restarts_and_nothing_fires_twice_or_is_lost() {
    let mut wheel = IdWheel::with_start(8, 1_000);
    // (effective deadline, insertion) -> id, and id -> its entry.
    let mut order = BTreeMap::new();
    let mut timers = BTreeMap::new();
    let mut seq = 0u64;
    let mut set = |order: &mut BTreeMap<(u64, u64), u32>,
                   timers: &mut BTreeMap<u32, (u64, u64)>,
                   id: u32,
                   deadline: u64| {
        seq += 1;
        if let Some(old) = timers.insert(id, (deadline, seq)) {
            order.remove(&old);
        }
        order.insert((deadline, seq), id);
    };
    // Id 7 shares id 5's first slot, so that the slot stays and keeps 5's first item.
    let first = |id: u32| {
        if id == 7 {
            1_005
        } else {
            1_000 + u64::from(id)
        }
    };
    for id in 0..8 {
        wheel.insert(id, first(id), id).unwrap();
        set(&mut order, &mut timers, id, first(id));
    }
    // Stale items of id 5 in several slots, at several levels, then its generation aged.
    for deadline in [1_000, 5_000, 1_000, 300_000, 1_001] {
        assert!(wheel.reset(5, deadline));
        set(&mut order, &mut timers, 5, deadline);
    }
    let generation = |wheel: &mut IdWheel<u32>, id: u32| *wheel.lean.store.generation_mut(id);
    spend(&mut wheel, 5);
    // Back to its first slot, where its first item (generation 1) still lies: a restart that
    // left it would make it current again.
    assert!(wheel.reset(5, 1_005), "a reset at the last generation");
    set(&mut order, &mut timers, 5, 1_005);
    assert_eq!(generation(&mut wheel, 5), 1, "restarted");
    wheel.check_invariants();
    assert!(wheel.cancel(6));
    let entry = timers.remove(&6).unwrap();
    order.remove(&entry);
    assert!(!wheel.age_generation_for_tests(5, 2), "pending: refused");
    assert!(wheel.age_generation_for_tests(6, 1));
    assert_eq!(generation(&mut wheel, 6), MAX_GENERATION - 1);
    // Id 6 (idle): an insert at the last generation but one, then one at the last.
    wheel.insert(6, 1_000, 60).unwrap();
    set(&mut order, &mut timers, 6, 1_000);
    assert_eq!(generation(&mut wheel, 6), MAX_GENERATION);
    assert_eq!(
        wheel.insert(6, 1_002, 61),
        Ok(Some(60)),
        "replaces at the last generation"
    );
    set(&mut order, &mut timers, 6, 1_002);
    assert_eq!(generation(&mut wheel, 6), 1, "restarted");
    // Every generation of id 6 again, cheaply: items of the restarted record's generations
    // 1.. are still around only if the restart left them.
    for deadline in [1_003, 1_000, 1_006] {
        assert!(wheel.reset(6, deadline));
        set(&mut order, &mut timers, 6, deadline);
        wheel.check_invariants();
    }
    let fired: Vec<u32> = wheel.drain_expired(u64::MAX).map(|(id, _)| id).collect();
    let expected: Vec<u32> = order.values().copied().collect();
    assert_eq!(fired, expected, "each pending timer exactly once, in order");
    assert!(wheel.is_empty());
    wheel.check_invariants();
}

/// Values are owned: moved out once by `remove`, a replacing insert and expiry, dropped in
/// place once by `cancel`, kept by a reset (also one that restarts a spent generation),
/// dropped once with the wheel, never read from an idle record. Counted with `Rc`s (Miri
/// checks this test: `queue::id::tests::owned_values`).
#[test]
fn owned_values() {
    use alloc::rc::Rc;
    use alloc::string::{String, ToString};
    let token = Rc::new(());
    let value = |i: u32| (i.to_string(), Rc::clone(&token));
    let mut wheel: IdWheel<(String, Rc<()>)> = IdWheel::new(200);
    for id in 0..120 {
        assert!(wheel
            .insert(id, u64::from(id % 3) + 100, value(id))
            .unwrap()
            .is_none());
    }
    assert_eq!(Rc::strong_count(&token), 121);
    for id in 0..120 {
        match id % 5 {
            0 => assert_eq!(wheel.remove(id).map(|v| v.0), Some(id.to_string())),
            1 => assert!(wheel.reset(id, 70)),
            2 => assert!(wheel.cancel(id)),
            3 => assert_eq!(
                wheel
                    .insert(id, 80, value(id + 1_000))
                    .unwrap()
                    .map(|v| v.0),
                Some(id.to_string())
            ),
            _ => {}
        }
    }
    assert_eq!(Rc::strong_count(&token), 1 + 72);
    let refused = wheel.insert(500, 1, value(500)).unwrap_err();
    drop(refused);
    assert_eq!(
        Rc::strong_count(&token),
        1 + 72,
        "a refused value comes back, once"
    );
    // A reset at the last generation restarts it, keeping the value.
    spend(&mut wheel, 1);
    assert!(wheel.reset(1, 70));
    assert!(wheel.age_generation_for_tests(2, 0));
    assert!(wheel.insert(2, 70, value(2)).unwrap().is_none());
    assert_eq!(Rc::strong_count(&token), 1 + 73);
    assert_eq!(wheel.remove(0), None);
    assert!(!wheel.cancel(7));
    wheel.get_mut(4).unwrap().0.push('!');
    let fired: Vec<_> = wheel.drain_expired(70).map(|(id, v)| (id, v.0)).collect();
    assert_eq!(fired.len(), 25);
    assert_eq!(fired[0], (6, "6".to_string()), "1 went behind: reset again");
    assert_eq!(fired[23..], [(1, "1".to_string()), (2, "2".to_string())]);
    assert_eq!(Rc::strong_count(&token), 1 + 73 - 25);
    wheel.shrink_to_fit();
    assert_eq!(wheel.get_mut(4).map(|v| v.0.as_str()), Some("4!"));
    assert_eq!(wheel.get(4).map(|v| v.0.as_str()), Some("4!"));
    assert_eq!(wheel.get(7).map(|v| v.0.as_str()), None);
    assert_eq!(wheel.len(), 48);
    wheel.check_invariants();
    drop(wheel);
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "the rest dropped with the wheel, once each"
    );
}

#[test]
fn cancels_and_resets_without_polls_stay_bounded() {
    // Resets between two slots and cancels, never polled: departures are applied in batches
    // and compaction keeps each slot within its ratio. Smaller under Miri, which runs the
    // whole module.
    let n: u32 = if cfg!(miri) { 600 } else { 3_000 };
    let mut wheel = IdWheel::new(n);
    for id in 0..n {
        wheel.insert(id, 100 + u64::from(id % 2), id).unwrap();
    }
    for round in 0..20u64 {
        for id in 0..n {
            assert!(wheel.reset(id, 100 + round % 2));
        }
        wheel.check_invariants();
    }
    let live = n / 3;
    for id in live..n {
        assert!(wheel.cancel(id));
    }
    wheel.check_invariants();
    let items = wheel.lean.items();
    let bound = 3 * live as usize + 2 * 32 + 64;
    assert!(items <= bound, "{items} items for {live} timers");
    assert_eq!(wheel.drain_expired(101).count(), live as usize);
    assert!(wheel.is_empty());
}
