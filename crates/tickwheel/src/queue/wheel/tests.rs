//! The wheel's own tests: its placement, pacing and edge cases (the contract is checked
//! against a model in `tests/conformance.rs` and `tests/model.rs`).

use super::level::{index, parent, shift, start, STEPS, STEP_ITEMS};
use super::*;
use alloc::vec::Vec;

/// `64^level`, the first deadline (from `now = 0`) that needs `level` on a fresh wheel.
fn boundary(level: usize) -> Option<u64> {
    1u64.checked_shl(shift(level))
}

/// The level a timer's current item is on.
fn level_of_key<T>(wheel: &Wheel<T>, key: TimerKey) -> usize {
    let index = wheel.records.find(key).expect("live key");
    wheel.records.place(index).expect("live record").slot as usize / RING
}

#[test]
fn levels_cover_u64_exactly() {
    assert_eq!(LEVELS, 11);
    assert!(LEVELS as u32 * LEVEL_BITS >= u64::BITS);
    assert!((LEVELS as u32 - 1) * LEVEL_BITS < u64::BITS);
    assert_eq!(index(u64::MAX, LEVELS - 1), 15);
    assert_eq!(parent(u64::MAX, LEVELS - 1), 0);
    assert_eq!(parent(u64::MAX, LEVELS - 2), 15);
}

#[test]
fn start_and_index_are_inverse_at_every_level() {
    for level in 0..LEVELS {
        let slots = if level == LEVELS - 1 { 16 } else { RING as u64 };
        for slot in 0..slots {
            let first = start(slot, level);
            assert_eq!(first, slot << shift(level));
            assert_eq!(index(first, level), slot);
            if let Some(last) = first.checked_add((1u64 << shift(level)) - 1) {
                assert_eq!(index(last, level), slot, "last tick of the slot");
                assert_eq!(parent(last, level), slot >> LEVEL_BITS);
            }
        }
    }
    // Past the end of time `start` saturates instead of wrapping.
    assert_eq!(start(16, LEVELS - 1), u64::MAX);
    assert_eq!(start(1 << 58, 1), u64::MAX);
}

#[test]
fn placement_at_every_level_boundary() {
    // A fresh wheel holds one rotation a level: the classic rule.
    let mut wheel = Wheel::new();
    for level in 1..LEVELS {
        let b = boundary(level).unwrap();
        let below = wheel.insert(b - 1, ());
        let at = wheel.insert(b, ());
        assert_eq!(
            level_of_key(&wheel, below),
            level - 1,
            "just below 64^{level}"
        );
        assert_eq!(level_of_key(&wheel, at), level, "at 64^{level}");
    }
    let max = wheel.insert(u64::MAX, ());
    assert_eq!(level_of_key(&wheel, max), LEVELS - 1);

    // Once it has polled, each level has absorbed the next (empty) rotation: two.
    let mut wheel = Wheel::new();
    assert!(wheel.poll_expired(0).is_none());
    for level in 1..LEVELS {
        let Some(b) = boundary(level).and_then(|b| b.checked_mul(2)) else {
            continue;
        };
        let below = wheel.insert(b - 1, ());
        let at = wheel.insert(b, ());
        assert_eq!(
            level_of_key(&wheel, below),
            level - 1,
            "just below 2·64^{level}"
        );
        assert_eq!(level_of_key(&wheel, at), level, "at 2·64^{level}");
    }
}

#[test]
fn fires_exactly_at_each_level_boundary() {
    for level in 0..LEVELS {
        let Some(b) = boundary(level) else { continue };
        for deadline in [b - 1, b, b + 1, 2 * b - 1, 2 * b, 2 * b + 1]
            .into_iter()
            .filter(|&d| d > 0)
        {
            let mut wheel = Wheel::new();
            wheel.insert(deadline, ());
            assert!(wheel.next_expiration().unwrap() <= deadline);
            assert!(
                wheel.poll_expired(deadline - 1).is_none(),
                "early at {deadline}"
            );
            assert_eq!(wheel.now(), deadline - 1);
            assert!(wheel.poll_expired(deadline).is_some(), "missed {deadline}");
            assert!(wheel.is_empty());
        }
    }
}

#[test]
fn moving_down_keeps_insertion_order() {
    let mut wheel = Wheel::new();
    // Same deadline, inserted from different `now`s so they start on different levels.
    wheel.insert(5_000, 'a');
    assert!(wheel.poll_expired(4_900).is_none());
    wheel.insert(5_000, 'b');
    assert!(wheel.poll_expired(4_999).is_none());
    wheel.insert(5_000, 'c');
    wheel.insert(4_000, 'p'); // already past: due now, after nothing
    let fired: Vec<_> = wheel.drain_expired(5_000).map(|(_, v)| v).collect();
    assert_eq!(fired, ['p', 'a', 'b', 'c']);
}

/// A level-1 slot of 64 000 timers (a 64-tick stretch of a million timers a second at
/// 1 ms) is moved down over the polls of the rotation before it, in small steps, and
/// every timer still fires at its tick in insertion order — including timers inserted
/// into the slot while it was half moved.
#[test]
/// A driver that polls only every tenth tick still gets the slot moved before it is due:
/// each step takes in the steps it missed too, instead of leaving the rest to one move
/// of the whole remainder when the slot comes due (a stall of milliseconds at 10^5 items).
fn a_late_driver_still_gets_the_slot_moved_ahead_of_time() {
    const N: u64 = 64_000;
    let mut wheel = Wheel::new();
    assert!(wheel.poll_expired(0).is_none());
    let mut expected: Vec<(u64, u64)> = (0..N).map(|id| (128 + id * 7 % 64, id)).collect();
    for &(deadline, id) in &expected {
        wheel.insert(deadline, id);
    }
    let mut fired = Vec::new();
    for tick in (10..=200).step_by(10) {
        fired.extend(wheel.drain_expired(tick).map(|(_, id)| id));
        if tick == 120 {
            assert!(
                wheel.tiers.levels[0].absorbing.is_none(),
                "the slot due at 128 is moved by the last poll before it"
            );
            assert_eq!(wheel.tiers.levels[0].absorbed, 2);
        }
    }
    expected.sort_by_key(|&(deadline, _)| deadline); // stable: insertion order kept
    let ids: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(fired, ids);
    assert!(wheel.is_empty());
}

/// An upper-level slot is paced over the rotation before it is due, in steps of about
/// `STEP_ITEMS`, also for a driver that polls only when `next_expiration` asks: a level-2
/// slot of 100 000 timers (4096 ticks, as at a fine resolution) is not moved in 64
/// steps of a 64th each, nor all at once at the first step.
#[test]
fn an_upper_slot_is_paced_over_its_rotation_in_small_steps() {
    const N: u64 = 100_000;
    let mut wheel = Wheel::new();
    assert!(wheel.poll_expired(0).is_none());
    // Ticks 8192.. are level 2's slot 2, past level 1's two rotations.
    let expected: Vec<u64> = (0..N).map(|id| 8192 + id * 4093 % 4096).collect();
    for (id, &deadline) in expected.iter().enumerate() {
        let key = wheel.insert(deadline, id as u64);
        assert_eq!(level_of_key(&wheel, key), 2);
    }
    let (mut largest_step, mut polls_absorbing) = (0, 0);
    let mut fired = Vec::new();
    while let Some(at) = wheel.next_expiration() {
        let before = wheel.tiers.levels[1].absorbing;
        let len = wheel
            .tiers
            .source(1)
            .map_or(0, |number| wheel.tiers.slots[number].items.len());
        fired.extend(wheel.drain_expired(at).map(|(_, id)| (at, id)));
        // The items this poll moved: up to the new cursor, or to the end of the slot.
        let step = match (before, wheel.tiers.levels[1].absorbing) {
            (before, Some(after)) => after - before.unwrap_or(0),
            (Some(before), None) => len - before,
            (None, None) => 0,
        };
        largest_step = largest_step.max(step);
        polls_absorbing += usize::from(step > 0);
    }
    assert!(
        largest_step <= 2 * STEP_ITEMS + MIN_STEP,
        "a step moved {largest_step}"
    );
    assert!(polls_absorbing >= 64, "{polls_absorbing} steps");
    let mut order: Vec<(u64, u64)> = expected
        .iter()
        .enumerate()
        .map(|(id, &d)| (d, id as u64))
        .collect();
    order.sort();
    assert_eq!(
        fired, order,
        "every timer fires once, at its deadline, in order"
    );
}

#[test]
fn a_full_slot_moves_down_in_steps_ahead_of_time() {
    const N: u64 = 64_000;
    let mut wheel = Wheel::new();
    assert!(wheel.poll_expired(0).is_none()); // level 0 now reaches tick 127
    let mut expected: Vec<(u64, u64)> = Vec::new(); // (deadline, id)
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for id in 0..N {
        let deadline = 128 + next() % 64; // level 1, the slot after level 0's reach
        let key = wheel.insert(deadline, id);
        assert_eq!(level_of_key(&wheel, key), 1);
        expected.push((deadline, id));
    }
    let mut fired = Vec::new();
    let mut largest_step = 0;
    let mut extra = N;
    for tick in 1..=191 {
        let before = wheel.tiers.levels[0].absorbing.unwrap_or(0);
        fired.extend(wheel.drain_expired(tick).map(|(_, id)| (tick, id)));
        if let Some(after) = wheel.tiers.levels[0].absorbing {
            largest_step = largest_step.max(after - before);
            // Timers for the slot arrive while it is half moved: they go behind.
            let deadline = 128 + next() % 64;
            wheel.insert(deadline, extra);
            expected.push((deadline, extra));
            extra += 1;
        }
        if tick == 127 {
            assert!(
                wheel.tiers.levels[0].absorbing.is_none(),
                "moved before it is due"
            );
            assert_eq!(wheel.tiers.levels[0].absorbed, 2);
        }
    }
    assert!(extra > N, "the slot was moved in more than one step");
    let bound = (N as usize).div_ceil(STEPS as usize) * 2 + MIN_STEP;
    assert!(
        largest_step <= bound,
        "a step moved {largest_step} > {bound}"
    );
    expected.sort_by_key(|&(deadline, _)| deadline); // stable: insertion order kept
    assert_eq!(fired, expected);
    assert!(wheel.is_empty());
}

#[test]
fn next_expiration_asks_for_the_steps() {
    let mut wheel = Wheel::new();
    assert!(wheel.poll_expired(0).is_none());
    for id in 0..10_000u32 {
        wheel.insert(130 + u64::from(id % 50), id);
    }
    // Level 0 may take the slot in once the clock is in ticks 64..128.
    assert_eq!(wheel.next_expiration(), Some(64));
    assert!(wheel.poll_expired(64).is_none());
    assert!(
        wheel.tiers.levels[0].absorbing.is_some(),
        "one step, not all"
    );
    // The next step is due within a 64th of the time left, not at tick 128.
    assert_eq!(wheel.next_expiration(), Some(65));
    while wheel.tiers.levels[0].absorbing.is_some() {
        let tick = wheel.next_expiration().unwrap();
        assert!(tick < 128);
        assert!(wheel.poll_expired(tick).is_none());
    }
    assert_eq!(wheel.next_expiration(), Some(130));
}

/// Owned values through every path that moves or frees a record — insert, reset, remove,
/// a move down a level, compaction, firing, `shrink_to_fit` and dropping the wheel with
/// timers pending — small enough for Miri, which checks that each value is dropped once.
#[test]
fn owned_values_survive_every_path() {
    use alloc::string::{String, ToString};
    let mut wheel: Wheel<String> = Wheel::new();
    let keys: Vec<_> = (0..120u64)
        .map(|i| wheel.insert(i % 3 + 100, i.to_string()))
        .collect();
    // Resets leave stale items behind; removals leave tombstones; both get compacted.
    for (i, &key) in keys.iter().enumerate() {
        match i % 4 {
            0 => assert_eq!(wheel.remove(key), Some(i.to_string())),
            1 => assert!(wheel.reset(key, 70)),
            _ => {}
        }
    }
    for _ in 0..10 {
        for &key in keys.iter().skip(1).step_by(4) {
            assert!(wheel.reset(key, 70));
        }
    }
    let items: usize = wheel.tiers.slots.iter().map(|slot| slot.items.len()).sum();
    assert!(
        items < 120 + 10 * 30,
        "stale items were compacted away: {items}"
    );
    assert_eq!(wheel.remove(keys[0]), None);
    wheel.get_mut(keys[2]).unwrap().push('!');
    let fired: Vec<_> = wheel.drain_expired(70).map(|(_, v)| v).collect();
    assert_eq!(fired.len(), 30);
    assert_eq!(fired[0], "1");
    assert_eq!(wheel.deadline(keys[2]), Some(102));
    wheel.shrink_to_fit();
    assert_eq!(wheel.get_mut(keys[2]).map(|v| v.as_str()), Some("2!"));
    assert_eq!(wheel.get(keys[2]).map(String::as_str), Some("2!"));
    assert_eq!(wheel.get(keys[0]), None);
    assert_eq!(wheel.len(), 60);
    // The rest are dropped with the wheel.
}

#[test]
fn huge_gap_is_a_jump() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, "max");
    wheel.insert(1 << 62, "far");
    assert!(wheel.poll_expired(1 << 60).is_none());
    assert_eq!(wheel.now(), 1 << 60);
    assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("far"));
    assert_eq!(wheel.now(), 1 << 62);
    assert_eq!(wheel.poll_expired(u64::MAX).map(|(_, v)| v), Some("max"));
    assert_eq!(wheel.now(), u64::MAX);
    assert!(wheel.poll_expired(u64::MAX).is_none());
}

/// `next_expiration` passes over a slot whose only timer was removed while the departure is
/// not applied yet (`Tiers::first_live_slot`): a driver does not wake for it.
#[test]
fn next_expiration_skips_a_slot_left_only_by_a_pending_departure() {
    let mut wheel = Wheel::new();
    let early = wheel.insert(10, 1);
    let reset = wheel.insert(15, 2);
    wheel.insert(20, 3);
    assert_eq!(wheel.next_expiration(), Some(10));
    assert_eq!(wheel.remove(early), Some(1));
    assert!(wheel.reset(reset, 30));
    assert_eq!(wheel.tiers.departed.len(), 2, "not applied yet");
    assert_eq!(wheel.next_expiration(), Some(20));
    wheel.check_invariants();
}
