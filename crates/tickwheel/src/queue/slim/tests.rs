//! The slim wheel's own tests: its storage and what its contract adds (the rest is checked
//! against a model in `tests/conformance.rs` and `tests/model.rs`).

use super::store::{Hot, Item};
use super::*;
use crate::queue::free::MAX_GENERATION;
use crate::queue::wheel::tiers::COMPACT_RATIO;
use crate::queue::wheel::RING;
use alloc::vec::Vec;

#[test]
fn records_and_items_are_eight_bytes() {
    assert_eq!(core::mem::size_of::<Hot>(), 8);
    assert_eq!(
        core::mem::align_of::<Hot>(),
        8,
        "a record never straddles two lines"
    );
    assert_eq!(core::mem::size_of::<Item>(), 8);
}

#[test]
fn a_reset_at_the_last_generation_moves_the_timer_and_retires_the_record() {
    let mut wheel = SlimWheel::new();
    let first = wheel.insert(10, 'a');
    wheel.insert(10, 'b');
    *wheel.lean.store.generation_mut(first.index()) = MAX_GENERATION;
    let last = TimerKey::new(first.index(), MAX_GENERATION);
    let moved = wheel.reset(last, 10).expect("pending");
    assert_ne!(moved.index(), first.index(), "the spent record is left");
    assert_eq!(wheel.deadline(last), None);
    assert_eq!(wheel.reset(last, 20), None, "the old key stays stale");
    wheel.check_invariants();
    assert_eq!(wheel.deadline(moved), Some(10));
    // The retired record is never handed out again.
    let again: Vec<TimerKey> = (0..4).map(|i| wheel.insert(100 + i, 'x')).collect();
    assert!(again.iter().all(|key| key.index() != first.index()));
    let fired: Vec<_> = wheel.drain_expired(10).map(|(_, v)| v).collect();
    assert_eq!(
        fired,
        ['b', 'a'],
        "the reset still counts as a new insertion"
    );
    wheel.check_invariants();
}

#[test]
fn a_reset_bumps_the_generation_in_place() {
    let mut wheel = SlimWheel::new();
    let key = wheel.insert(5_000, 1u32);
    let reset = wheel.reset(key, 70).expect("pending");
    assert_eq!(reset.index(), key.index(), "same record");
    assert_eq!(reset.generation(), key.generation() + 1);
    assert_eq!(wheel.len(), 1);
    wheel.check_invariants();
}

#[test]
fn a_move_down_keeps_the_key() {
    let mut wheel = SlimWheel::new();
    let far = wheel.insert(300_000, 7u32);
    let level = |wheel: &SlimWheel<u32>| {
        let (_, slot) = wheel.lean.store.find(far).expect("live");
        slot as usize / RING
    };
    assert_eq!(level(&wheel), 3);
    let mut tick = 0;
    while level(&wheel) > 0 {
        tick += 16;
        assert!(tick < 300_000, "moved down before it is due");
        assert_eq!(wheel.poll_expired(tick), None);
        wheel.check_invariants();
    }
    assert_eq!(wheel.deadline(far), Some(300_000));
    assert_eq!(wheel.poll_expired(300_000), Some((far, 7)));
}

#[test]
fn cancels_and_resets_without_polls_stay_bounded() {
    // Resets between two slots and cancels, never polled: departures are applied in batches,
    // and compaction keeps each slot within its ratio (`check_invariants`, invariant 5).
    let mut wheel = SlimWheel::new();
    let mut keys: Vec<TimerKey> = (0..3_000u64)
        .map(|i| wheel.insert(100 + i % 2, i))
        .collect();
    for round in 0..20u64 {
        for key in keys.iter_mut() {
            *key = wheel.reset(*key, 100 + round % 2).expect("pending");
        }
        wheel.check_invariants();
    }
    for key in keys.drain(1_000..) {
        assert!(wheel.cancel(key));
    }
    wheel.check_invariants();
    let items = wheel.lean.items();
    assert!(
        items <= COMPACT_RATIO * 1_000 + 2 * 32 + 64,
        "{items} items for 1 000 timers"
    );
    assert_eq!(wheel.drain_expired(101).count(), 1_000);
    assert!(wheel.is_empty());
}

/// Values are owned: moved out once by `remove` and expiry, dropped in place once by `cancel`,
/// kept by a reset (also one that moves the timer to another record), dropped once with the
/// wheel, never read from a vacant record (Miri checks this test in CI).
#[test]
fn owned_values_survive_every_path() {
    use alloc::string::{String, ToString};
    let mut wheel: SlimWheel<String> = SlimWheel::new();
    let mut keys: Vec<_> = (0..120u64)
        .map(|i| wheel.insert(i % 3 + 100, i.to_string()))
        .collect();
    for (i, key) in keys.iter_mut().enumerate() {
        match i % 4 {
            0 => assert_eq!(wheel.remove(*key), Some(i.to_string())),
            1 => *key = wheel.reset(*key, 70).expect("pending"),
            2 => assert!(wheel.cancel(*key)),
            _ => {}
        }
    }
    for _ in 0..10 {
        for key in keys.iter_mut().skip(1).step_by(4) {
            *key = wheel.reset(*key, 70).expect("pending");
        }
    }
    // A reset at the last generation moves the value to another record.
    *wheel.lean.store.generation_mut(keys[5].index()) = MAX_GENERATION;
    let spent = TimerKey::new(keys[5].index(), MAX_GENERATION);
    keys[5] = wheel.reset(spent, 70).expect("pending");
    assert_eq!(wheel.remove(keys[0]), None);
    assert!(!wheel.cancel(keys[2]));
    wheel.get_mut(keys[3]).unwrap().push('!');
    let fired: Vec<_> = wheel.drain_expired(70).map(|(_, v)| v).collect();
    assert_eq!(fired.len(), 30);
    assert_eq!(fired[0], "1");
    assert_eq!(wheel.deadline(keys[3]), Some(100));
    wheel.shrink_to_fit();
    assert_eq!(wheel.get_mut(keys[3]).map(|v| v.as_str()), Some("3!"));
    assert_eq!(wheel.get(keys[3]).map(String::as_str), Some("3!"));
    assert_eq!(wheel.get(keys[2]), None);
    assert_eq!(wheel.len(), 30);
    wheel.check_invariants();
    // The rest are dropped with the wheel.
}

/// `next_expiration` passes over a slot whose only timer was cancelled while the departure
/// is not applied yet (`Tiers::first_live_slot`): a driver does not wake for it.
#[test]
fn next_expiration_skips_a_slot_left_only_by_a_pending_departure() {
    let mut wheel = SlimWheel::new();
    let early = wheel.insert(10, 1);
    let reset = wheel.insert(15, 2);
    wheel.insert(20, 3);
    assert_eq!(wheel.next_expiration(), Some(10));
    assert!(wheel.cancel(early));
    assert!(wheel.reset(reset, 30).is_some());
    assert_eq!(wheel.lean.tiers.departed.len(), 2, "not applied yet");
    assert_eq!(wheel.next_expiration(), Some(20));
    wheel.check_invariants();
}
