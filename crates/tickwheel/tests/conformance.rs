//! The queue conformance suite: every case is written once, generic over a [`Flavor`], and
//! instantiated for each queue (`Wheel`, `Heap`, `HashedWheel` with 512, 8 and 1 slots, and
//! `SlimWheel` behind the `Rekeyed` adapter) by [`suite!`] at the bottom. The cases pin down
//! the contract in `tickwheel::queue`; what the `SlimWheel`'s contract changes (a reset
//! returns a new key) has its own cases in [`slim_contract`].

mod common;

use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;

use common::{
    Flavor, Hashed1, Hashed512, Hashed8, HeapFlavor, SlimFlavor, SplitMix64, WheelFlavor,
};
use tickwheel::{TimerKey, TimerQueue};

/// Polls once at `t` and returns the value; the queue's invariants are checked before and
/// after.
fn poll<T, Q: TimerQueue<T>>(q: &mut Q, t: u64) -> Option<T> {
    q.check_invariants();
    let fired = q.poll_expired(t).map(|(_, v)| v);
    q.check_invariants();
    fired
}

/// Drains everything due at `t` and returns the values in firing order; the queue's
/// invariants are checked before and after.
fn drain<T, Q: TimerQueue<T>>(q: &mut Q, t: u64) -> Vec<T> {
    q.check_invariants();
    let fired = q.drain_expired(t).map(|(_, v)| v).collect();
    q.check_invariants();
    fired
}

fn empty_queue_is_quiet<F: Flavor>() {
    let mut q = F::make::<u32>();
    assert_eq!((q.len(), q.is_empty(), q.now()), (0, true, 0));
    assert_eq!(q.next_expiration(), None);
    assert_eq!(q.timeout_until_next(0), None);
    assert_eq!(poll(&mut q, 1_000), None);
    assert_eq!(q.now(), 1_000);
    assert_eq!(poll(&mut q, u64::MAX), None);
    assert_eq!(q.now(), u64::MAX);
}

fn start_tick_is_now<F: Flavor>() {
    let mut q = F::make_at::<u32>(5_000);
    assert_eq!(q.now(), 5_000);
    let key = q.insert(10, 1);
    assert_eq!(q.deadline(key), Some(5_000));
    assert_eq!(poll(&mut q, 4_999), None, "behind the start tick");
    assert_eq!(poll(&mut q, 5_000), Some(1));
}

fn fires_in_deadline_order_and_now_follows<F: Flavor>() {
    let mut q = F::make();
    let deadlines = [70u64, 3, 4_096, 64, 63, 65, 1, 200_000, 4_095, 262_144, 5];
    for &d in &deadlines {
        q.insert(d, d);
    }
    let mut sorted = deadlines.to_vec();
    sorted.sort_unstable();
    for &d in &sorted {
        assert_eq!(poll(&mut q, 1 << 20), Some(d));
        assert_eq!(q.now(), d, "now is the deadline of the timer just returned");
    }
    assert_eq!(poll(&mut q, 1 << 20), None);
    assert_eq!(q.now(), 1 << 20);
    assert!(q.is_empty());
}

fn ties_fire_in_insertion_order<F: Flavor>() {
    let mut q = F::make();
    for i in 0..40u32 {
        // Three deadlines, interleaved, including one beyond the first wheel level.
        q.insert([300u64, 10, 5_000][i as usize % 3], i);
    }
    let fired = drain(&mut q, 10_000);
    let mut expected: Vec<u32> = Vec::new();
    for rem in [1, 0, 2] {
        expected.extend((0..40).filter(|i| i % 3 == rem));
    }
    assert_eq!(fired, expected);
}

fn reset_is_a_new_insertion<F: Flavor>() {
    let mut q = F::make();
    let a = q.insert(100, 'a');
    q.insert(100, 'b');
    let c = q.insert(50, 'c');
    q.insert(100, 'd');
    assert!(q.reset(a, 100), "same deadline: a goes behind b and d");
    assert!(q.reset(c, 100));
    assert_eq!(q.deadline(a), Some(100));
    assert_eq!(drain(&mut q, 100), ['b', 'd', 'a', 'c']);

    let e = q.insert(500, 'e');
    q.insert(300, 'f');
    assert!(q.reset(e, 200), "earlier");
    let g = q.insert(250, 'g');
    assert!(q.reset(g, 1 << 40), "much later");
    assert_eq!(drain(&mut q, 1 << 39), ['e', 'f']);
    assert_eq!(drain(&mut q, 1 << 40), ['g']);
}

fn past_deadlines_fire_at_next_poll<F: Flavor>() {
    let mut q = F::make_at(1_000);
    q.insert(1_000, "due");
    let past = q.insert(3, "past");
    let zero = q.insert(0, "zero");
    assert_eq!(q.deadline(past), Some(1_000));
    assert_eq!(q.deadline(zero), Some(1_000));
    assert_eq!(q.next_expiration(), Some(1_000));
    assert_eq!(q.timeout_until_next(1_000), Some(0));
    assert_eq!(drain(&mut q, 1_000), ["due", "past", "zero"]);

    // A reset into the past fires at now, behind what is already due there.
    let later = q.insert(2_000, "later");
    q.insert(1_000, "now");
    assert!(q.reset(later, 1));
    assert_eq!(q.deadline(later), Some(1_000));
    assert_eq!(drain(&mut q, 1_000), ["now", "later"]);
}

fn never_early<F: Flavor>() {
    let mut q = F::make();
    for d in [1u64, 63, 64, 65, 4_095, 4_096, 4_097, 1 << 30] {
        q.insert(d, d);
        assert_eq!(poll(&mut q, d - 1), None, "{d} fired early");
        assert_eq!(q.now(), d - 1);
        assert_eq!(poll(&mut q, d), Some(d));
    }
}

fn u64_max_is_stored_and_fires_only_at_max<F: Flavor>() {
    let mut q = F::make();
    let max = q.insert(u64::MAX, "max");
    q.insert(u64::MAX - 1, "max-1");
    assert_eq!(q.deadline(max), Some(u64::MAX));
    assert!(q.next_expiration().is_some_and(|t| t < u64::MAX));
    assert_eq!(drain(&mut q, u64::MAX - 2), Vec::<&str>::new());
    assert_eq!(drain(&mut q, u64::MAX - 1), ["max-1"]);
    assert_eq!(q.len(), 1);
    assert_eq!(drain(&mut q, u64::MAX), ["max"]);
    // At the end of time every deadline is now.
    let late = q.insert(5, "late");
    assert_eq!(q.deadline(late), Some(u64::MAX));
    assert!(q.reset(late, u64::MAX));
    assert_eq!(drain(&mut q, u64::MAX), ["late"]);
    assert_eq!(q.now(), u64::MAX);
}

fn stale_keys_touch_nothing<F: Flavor>() {
    let mut q = F::make();
    let fired = q.insert(5, 1);
    let removed = q.insert(50, 2);
    let live = q.insert(60, 3);
    assert_eq!(poll(&mut q, 10), Some(1));
    assert_eq!(q.remove(removed), Some(2));
    // The freed storage is reused by new timers; the old keys must not reach them.
    let fresh: Vec<TimerKey> = (0..4).map(|i| q.insert(70 + i, 10 + i as u32)).collect();
    for stale in [fired, removed] {
        assert!(!fresh.contains(&stale));
        assert_eq!(q.remove(stale), None);
        assert!(!q.reset(stale, 1_000));
        assert_eq!(q.deadline(stale), None);
        assert_eq!(q.get(stale), None);
        assert_eq!(q.get_mut(stale), None);
    }
    assert_eq!(q.len(), 5);
    assert_eq!(q.deadline(live), Some(60));
    assert_eq!(drain(&mut q, 100), [3, 10, 11, 12, 13]);
    assert_eq!(q.remove(live), None, "fired keys are stale");
}

fn get_mut_changes_the_value_in_place<F: Flavor>() {
    let mut q = F::make();
    let a = q.insert(5, 1);
    let b = q.insert(5, 2);
    *q.get_mut(a).unwrap() = 10;
    assert_eq!(q.get(a), Some(&10));
    assert_eq!(q.get_mut(b).copied(), Some(2));
    // Changing a value moves nothing: same deadline, same place in the firing order.
    assert_eq!(q.deadline(a), Some(5));
    assert_eq!(drain(&mut q, 5), [10, 2]);
    assert_eq!(q.get(a), None, "fired keys are stale");
    assert_eq!(q.get_mut(a), None, "fired keys are stale");
}

fn keys_are_never_reissued<F: Flavor>() {
    let mut q = F::make();
    let mut seen = HashSet::new();
    for round in 0..50u64 {
        let keys: Vec<_> = (0..20).map(|i| q.insert(round + i % 3, ())).collect();
        for key in &keys {
            assert!(seen.insert(*key), "key {key:?} issued twice");
        }
        for key in keys.iter().step_by(2) {
            q.remove(*key);
        }
        q.drain_expired(round + 5).for_each(drop);
        if round % 10 == 9 {
            q.shrink_to_fit();
        }
    }
    assert!(q.is_empty());
}

fn poll_behind_now_changes_nothing<F: Flavor>() {
    let mut q = F::make();
    assert_eq!(poll(&mut q, 100), None);
    let key = q.insert(150, 'x');
    q.insert(100, 'y');
    assert_eq!(poll(&mut q, 99), None, "behind now: not even the due timer");
    assert_eq!(q.now(), 100);
    assert_eq!(q.len(), 2);
    assert_eq!(q.deadline(key), Some(150));
    assert_eq!(poll(&mut q, 100), Some('y'));
    assert_eq!(poll(&mut q, 0), None);
    assert_eq!((q.now(), q.len()), (100, 1));
    assert_eq!(drain(&mut q, 150), ['x']);
}

fn huge_jumps_return_promptly<F: Flavor>() {
    let mut q = F::make();
    q.insert(u64::MAX, "max");
    q.insert(1 << 61, "2^61");
    q.insert(3, "near");
    assert_eq!(drain(&mut q, 1 << 60), ["near"]);
    assert_eq!(q.now(), 1 << 60);
    q.insert((1 << 60) + 1, "next");
    assert_eq!(drain(&mut q, (1 << 61) - 1), ["next"]);
    assert_eq!(drain(&mut q, u64::MAX - 1), ["2^61"]);
    assert_eq!(drain(&mut q, u64::MAX), ["max"]);

    // Timers spread over the whole range, drained by jumps alone.
    let mut q = F::make();
    for k in (0..64).rev() {
        q.insert(1 << k, k);
    }
    assert_eq!(drain(&mut q, u64::MAX), (0..64).collect::<Vec<_>>());
}

fn far_timer_after_a_cancelled_near_one<F: Flavor>() {
    // Regression (HashedWheel): a minimum search, then a near timer that lowers the floor and
    // is cancelled, must not leave the wheel visiting one slot per revolution up to 2^60.
    let mut q = F::make();
    q.insert(1 << 60, "far");
    q.insert(10, "first");
    assert_eq!(drain(&mut q, 5_000), ["first"]);
    let near = q.insert(5_005, "near");
    assert_eq!(q.remove(near), Some("near"));
    assert_eq!(poll(&mut q, (1 << 60) - 1), None);
    assert_eq!(poll(&mut q, 1 << 60), Some("far"));
}

fn inserting_from_inside_a_drain<F: Flavor>() {
    let mut q = F::make();
    q.insert(10, "a");
    q.insert(10, "b");
    q.insert(30, "c");
    let mut fired = Vec::new();
    while let Some((_, v)) = q.poll_expired(40) {
        fired.push(v);
        match v {
            "a" => {
                q.insert(0, "a-past"); // due now (10), behind "b"
                q.insert(20, "a-20");
                q.insert(41, "a-41");
            }
            "a-20" => {
                q.insert(30, "late-30"); // behind "c"
                q.insert(20, "now-20");
            }
            _ => {}
        }
    }
    assert_eq!(
        fired,
        ["a", "b", "a-past", "a-20", "now-20", "c", "late-30"]
    );
    assert_eq!((q.now(), q.len()), (40, 1));
}

fn dropping_a_drain_early_keeps_the_rest<F: Flavor>() {
    let mut q = F::make();
    for i in 0..5 {
        q.insert(10 + i, i);
    }
    assert_eq!(q.drain_expired(100).take(2).count(), 2);
    assert_eq!(q.now(), 11);
    assert_eq!(q.len(), 3);
    q.insert(11, 9);
    assert_eq!(drain(&mut q, 100), [9, 2, 3, 4]);
}

fn next_expiration_is_a_lower_bound<F: Flavor>() {
    let mut q = F::make();
    let mut rng = SplitMix64::new(42);
    let mut deadlines = Vec::new();
    for i in 0..300 {
        let d = match i % 3 {
            0 => rng.in_range(0..=200),
            1 => rng.in_range(0..=1 << 20),
            _ => rng.in_range(0..=u64::MAX),
        };
        q.insert(d, d);
        deadlines.push(d);
    }
    deadlines.sort_unstable();
    for &d in &deadlines {
        // A driver that polls at next_expiration reaches every timer, never too late.
        loop {
            let next = q.next_expiration().expect("non-empty");
            assert!(
                next <= d,
                "next_expiration {next} after the earliest deadline {d}"
            );
            assert_eq!(
                q.timeout_until_next(q.now()),
                Some(next.saturating_sub(q.now()))
            );
            if let Some(v) = poll(&mut q, next) {
                assert_eq!(v, d);
                break;
            }
        }
    }
    assert_eq!(q.next_expiration(), None);
}

fn shrink_keeps_live_keys_and_stale_keys_stale<F: Flavor>() {
    let mut q = F::make();
    let keys: Vec<_> = (0..1_000u64).map(|i| q.insert(i * 7 % 500, i)).collect();
    for key in &keys[10..] {
        q.remove(*key);
    }
    q.shrink_to_fit();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(q.deadline(*key).is_some(), i < 10);
    }
    // New timers reuse storage without reviving old keys.
    let fresh: Vec<_> = (0..1_000u64)
        .map(|i| q.insert(1_000 + i, 5_000 + i))
        .collect();
    for key in &keys[10..] {
        assert!(!fresh.contains(key));
        assert_eq!(q.remove(*key), None);
    }
    assert!(q.reset(keys[3], 2_000));
    let fired = drain(&mut q, u64::MAX);
    let mut expected: Vec<u64> = (0..10).filter(|&i| i != 3).collect();
    expected.sort_by_key(|i| i * 7 % 500);
    expected.extend(5_000..6_000);
    expected.push(3);
    assert_eq!(fired, expected);
    q.shrink_to_fit();
    assert!(q.is_empty());
}

/// A value that counts how many of its kind are alive.
struct Counted(Rc<Cell<usize>>);

impl Counted {
    fn new(alive: &Rc<Cell<usize>>) -> Counted {
        alive.set(alive.get() + 1);
        Counted(alive.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

fn values_are_dropped_exactly_once<F: Flavor>() {
    let alive = Rc::new(Cell::new(0));
    let mut q = F::make();
    let keys: Vec<_> = (0..100u64)
        .map(|i| q.insert(i % 40, Counted::new(&alive)))
        .collect();
    for key in keys.iter().step_by(3) {
        drop(q.remove(*key));
    }
    assert_eq!(alive.get(), 66);
    let due = (0..100).filter(|i| i % 3 != 0 && i % 40 <= 19).count();
    assert_eq!(q.drain_expired(19).count(), due);
    assert_eq!(
        alive.get(),
        66 - due,
        "fired values went to the caller and were dropped"
    );
    q.shrink_to_fit();
    assert_eq!(alive.get(), 66 - due);
    drop(q);
    assert_eq!(
        alive.get(),
        0,
        "dropping the queue drops the pending values"
    );
}

fn clear_drops_every_timer_and_keeps_the_clock<F: Flavor>() {
    let alive = Rc::new(Cell::new(0));
    let mut q = F::make_at(1_000);
    // Near, far and due timers, some removed and some reset first, so that the records
    // cleared are a mix of live, freed and moved ones.
    let keys: Vec<_> = (0..300u64)
        .map(|i| q.insert(1_000 + (i * 7_919) % 100_000, Counted::new(&alive)))
        .collect();
    for key in keys.iter().step_by(5) {
        drop(q.remove(*key));
    }
    for key in keys.iter().skip(1).step_by(7) {
        q.reset(*key, 5_000);
    }
    // Those due by 60 000 fire (the resets' included), to leave freed records behind.
    let due = (0..300u64)
        .filter(|i| i % 5 != 0)
        .filter(|i| i % 7 == 1 || 1_000 + (i * 7_919) % 100_000 <= 60_000)
        .count();
    assert_eq!(q.drain_expired(60_000).count(), due);
    assert_eq!(alive.get(), q.len());
    assert_eq!(q.len(), 240 - due, "300 inserted, 60 removed");
    q.clear();
    q.check_invariants();
    assert_eq!(alive.get(), 0, "every pending value dropped, once");
    assert_eq!((q.len(), q.next_expiration(), q.now()), (0, None, 60_000));
    for &key in &keys {
        assert_eq!(q.deadline(key), None, "{key:?} stale after clear");
        assert!(!q.reset(key, 70_000));
        assert!(q.remove(key).is_none());
    }
    // The queue works on from where it was; old keys never come back.
    let fresh: Vec<_> = (0..300u64)
        .map(|i| q.insert(60_000 + i % 50, Counted::new(&alive)))
        .collect();
    assert!(fresh.iter().all(|key| !keys.contains(key)));
    assert_eq!(q.drain_expired(60_049).count(), 300);
    assert_eq!(alive.get(), 0);
    q.clear();
    assert!(q.is_empty());
}

fn matches_a_sort_on_random_input<F: Flavor>() {
    let mut rng = SplitMix64::new(7);
    let mut q = F::make();
    let mut expected = Vec::new();
    for i in 0..2_000u64 {
        let d = rng.in_range(0..=70_000);
        q.insert(d, i);
        expected.push((d, i));
    }
    expected.sort_unstable();
    let mut fired = Vec::new();
    let mut t = 0;
    while !q.is_empty() {
        t += rng.in_range(0..=300);
        while let Some((key, i)) = q.poll_expired(t) {
            assert_eq!(q.deadline(key), None);
            fired.push((q.now(), i));
        }
    }
    assert_eq!(fired, expected);
}

/// Inserts `n` timers with deadlines in `base..base + span`, values their insertion index.
fn fill<F: Flavor>(
    q: &mut F::Q<u64>,
    rng: &mut SplitMix64,
    n: u64,
    base: u64,
    span: u64,
) -> Vec<(TimerKey, u64, u64)> {
    (0..n)
        .map(|i| {
            let d = base + rng.in_range(0..=span - 1);
            (q.insert(d, i), d, i)
        })
        .collect()
}

/// Drains everything and checks it against `live` (key, deadline, value), sorted by
/// (deadline, insertion).
fn drains_exactly<F: Flavor>(q: &mut F::Q<u64>, mut live: Vec<(TimerKey, u64, u64)>) {
    live.sort_by_key(|&(_, d, _)| d); // stable: insertion order among equal deadlines
    let expected: Vec<(u64, u64)> = live.iter().map(|&(_, d, v)| (d, v)).collect();
    let mut fired = Vec::new();
    while let Some((_, v)) = q.poll_expired(u64::MAX) {
        fired.push((q.now(), v));
    }
    assert_eq!(fired, expected);
    assert!(q.is_empty());
}

/// Cancels nine timers in ten, in random order, from slots of every size: compaction runs
/// many times over, and what is left fires in order.
fn cancel_storm_keeps_the_rest_in_order<F: Flavor>() {
    let mut rng = SplitMix64::new(11);
    let mut q = F::make();
    // Few deadlines (big slots) and many (small ones), at several levels.
    let mut timers = fill::<F>(&mut q, &mut rng, 6_000, 1, 40);
    timers.extend(fill::<F>(&mut q, &mut rng, 6_000, 100, 5_000));
    timers.extend(fill::<F>(&mut q, &mut rng, 3_000, 300_000, 64));
    for i in (1..timers.len()).rev() {
        let j = rng.in_range(0..=i as u64) as usize;
        timers.swap(i, j);
    }
    let keep = timers.split_off(timers.len() / 10 * 9);
    for &(key, _, v) in &timers {
        assert_eq!(q.remove(key), Some(v));
        assert_eq!(q.remove(key), None, "removed twice");
    }
    assert_eq!(q.len(), keep.len());
    for &(key, d, _) in &keep {
        assert_eq!(q.deadline(key), Some(d));
    }
    let mut keep = keep;
    keep.sort_by_key(|&(_, _, v)| v); // insertion order
    drains_exactly::<F>(&mut q, keep);
}

/// Cancels timers and inserts new ones into the freed storage, round after round: old keys
/// stay stale, new timers fire in order, and reused storage mixes with live timers in the
/// same slots.
fn cancel_then_reuse<F: Flavor>() {
    let mut rng = SplitMix64::new(12);
    let mut q = F::make();
    let mut live = fill::<F>(&mut q, &mut rng, 3_000, 1, 2_000);
    let mut stale = Vec::new();
    let mut next_value = 3_000;
    for _ in 0..10 {
        for _ in 0..1_500 {
            let (key, _, v) = live.swap_remove(rng.in_range(0..=live.len() as u64 - 1) as usize);
            assert_eq!(q.remove(key), Some(v));
            stale.push(key);
        }
        for _ in 0..1_500 {
            let d = rng.in_range(1..=2_000);
            live.push((q.insert(d, next_value), d, next_value));
            next_value += 1;
        }
        for &key in &stale {
            assert_eq!(q.deadline(key), None);
            assert!(!q.reset(key, 5));
        }
    }
    for &key in &stale {
        assert_eq!(q.remove(key), None);
    }
    live.sort_by_key(|&(_, _, v)| v);
    drains_exactly::<F>(&mut q, live);
}

/// Removes and resets timers of a slot while the wheel is moving it down a level in paced
/// steps (compaction of a half-moved slot), and inserts more into it meanwhile.
fn compaction_during_absorption<F: Flavor>() {
    let mut rng = SplitMix64::new(13);
    let mut q = F::make();
    assert_eq!(poll(&mut q, 0), None);
    // 20 000 timers in one level-1 slot (ticks 128..192), moved down over ticks 64..128.
    let mut live = fill::<F>(&mut q, &mut rng, 20_000, 128, 64);
    for (tick, value) in (1..128).zip(20_000..) {
        assert_eq!(
            drain(&mut q, tick),
            Vec::<u64>::new(),
            "nothing due before 128"
        );
        // Remove a few hundred at random: the half-moved slot compacts.
        for _ in 0..300.min(live.len() - 1) {
            let (key, _, v) = live.swap_remove(rng.in_range(0..=live.len() as u64 - 1) as usize);
            assert_eq!(q.remove(key), Some(v));
        }
        // Reset some within the slot: each goes behind the rest at its new deadline.
        for _ in 0..20 {
            let at = rng.in_range(0..=live.len() as u64 - 1) as usize;
            let d = 128 + rng.in_range(0..=63);
            assert!(q.reset(live[at].0, d));
            let (key, _, v) = live.remove(at);
            live.push((key, d, v));
        }
        let d = 128 + rng.in_range(0..=63);
        live.push((q.insert(d, value), d, value));
    }
    // `live` is in insertion order already: resets were moved to the back.
    drains_exactly::<F>(&mut q, live);
}

/// Resets a set of timers over and over without ever polling: stale items must not pile up,
/// so every timer still fires once, in order, after a million resets.
fn reset_storm_fires_each_timer_once<F: Flavor>() {
    let mut rng = SplitMix64::new(14);
    let mut q = F::make();
    let mut live = fill::<F>(&mut q, &mut rng, 1_000, 1, 500);
    for _ in 0..200_000 {
        let at = rng.in_range(0..=live.len() as u64 - 1) as usize;
        let d = rng.in_range(1..=500);
        assert!(q.reset(live[at].0, d));
        let (key, _, v) = live.remove(at);
        live.push((key, d, v));
    }
    drains_exactly::<F>(&mut q, live);
}

/// Instantiates every case above for each flavor: `mod <flavor> { #[test] fn <case>() }`.
macro_rules! suite {
    ($($flavor:ident: $ty:ty),* $(,)?) => {$(
        mod $flavor {
            suite!(@cases $ty;
                empty_queue_is_quiet,
                start_tick_is_now,
                fires_in_deadline_order_and_now_follows,
                ties_fire_in_insertion_order,
                reset_is_a_new_insertion,
                past_deadlines_fire_at_next_poll,
                never_early,
                u64_max_is_stored_and_fires_only_at_max,
                stale_keys_touch_nothing,
                get_mut_changes_the_value_in_place,
                keys_are_never_reissued,
                poll_behind_now_changes_nothing,
                huge_jumps_return_promptly,
                far_timer_after_a_cancelled_near_one,
                inserting_from_inside_a_drain,
                dropping_a_drain_early_keeps_the_rest,
                next_expiration_is_a_lower_bound,
                shrink_keeps_live_keys_and_stale_keys_stale,
                values_are_dropped_exactly_once,
                clear_drops_every_timer_and_keeps_the_clock,
                matches_a_sort_on_random_input,
                cancel_storm_keeps_the_rest_in_order,
                cancel_then_reuse,
                compaction_during_absorption,
                reset_storm_fires_each_timer_once,
            );
        }
    )*};
    (@cases $ty:ty; $($case:ident),* $(,)?) => {$(
        #[test]
        fn $case() {
            super::$case::<$ty>();
        }
    )*};
}

suite!(
    wheel: super::WheelFlavor,
    heap: super::HeapFlavor,
    hashed: super::Hashed512,
    hashed_8_slots: super::Hashed8,
    hashed_1_slot: super::Hashed1,
    slim: super::SlimFlavor,
);

/// Memory after cancels and resets, for each queue type (`allocated_bytes` is not part of the
/// trait): storage freed by cancels is reused rather than grown, stale items left by resets do
/// not pile up, and `shrink_to_fit` returns what the live timers do not need.
macro_rules! memory_bounds {
    ($($name:ident: $make:expr),* $(,)?) => {$(
        mod $name {
            use super::SplitMix64;
            use tickwheel::TimerQueue;

            /// The bytes the same `n` timers need in a fresh queue, shrunk.
            fn need(n: u64) -> usize {
                let mut q = $make;
                for i in 0..n {
                    q.insert(1 + i % 500, i);
                }
                q.shrink_to_fit();
                q.allocated_bytes()
            }

            #[test]
            fn cancel_and_refill_rounds_do_not_grow() {
                let mut rng = SplitMix64::new(21);
                let mut q = $make;
                let mut keys: Vec<_> = (0..20_000u64).map(|i| q.insert(1 + i % 500, i)).collect();
                let full = q.allocated_bytes();
                for round in 0..20u64 {
                    for _ in 0..10_000 {
                        let key = keys.swap_remove(rng.in_range(0..=keys.len() as u64 - 1) as usize);
                        assert!(q.remove(key).is_some());
                    }
                    for i in 0..10_000u64 {
                        keys.push(q.insert(1 + rng.in_range(0..=499), round * 10_000 + i));
                    }
                    assert!(
                        q.allocated_bytes() <= full * 2,
                        "round {round}: {} bytes, {full} when first filled",
                        q.allocated_bytes()
                    );
                }
            }

            #[test]
            fn reset_storm_stays_within_twice_the_need() {
                let mut rng = SplitMix64::new(22);
                let mut q = $make;
                let keys: Vec<_> = (0..20_000u64).map(|i| q.insert(1 + i % 500, i)).collect();
                for _ in 0..400_000 {
                    let key = keys[rng.in_range(0..=keys.len() as u64 - 1) as usize];
                    assert!(q.reset(key, 1 + rng.in_range(0..=499)));
                }
                let need = need(20_000);
                assert!(
                    q.allocated_bytes() <= 2 * need,
                    "{} bytes after resets, {need} needed",
                    q.allocated_bytes()
                );
                q.shrink_to_fit();
                assert!(q.allocated_bytes() <= need + need / 4, "shrunk: {}", q.allocated_bytes());
            }

            #[test]
            fn shrink_after_cancelling_the_newest_returns_the_rest() {
                let mut q = $make;
                let keys: Vec<_> = (0..50_000u64).map(|i| q.insert(1 + i % 500, i)).collect();
                for &key in keys[5_000..].iter().rev() {
                    assert!(q.remove(key).is_some());
                }
                q.shrink_to_fit();
                let need = need(5_000);
                assert!(
                    q.allocated_bytes() <= 2 * need,
                    "{} bytes for 5 000 timers after shrink, {need} needed",
                    q.allocated_bytes()
                );
                assert_eq!(q.len(), 5_000);
            }
        }
    )*};
}

memory_bounds!(
    wheel_memory: tickwheel::Wheel::<u64>::new(),
    heap_memory: tickwheel::Heap::<u64>::new(),
    hashed_memory: tickwheel::HashedWheel::<u64>::new(),
    slim_memory: crate::common::Rekeyed::new(tickwheel::SlimWheel::<u64>::new()),
);

/// What the `SlimWheel`'s contract says differently from `TimerQueue`'s, on the wheel itself
/// (no adapter): a reset returns a new key and stales the old one, keys from resets are
/// never reissued either, and `cancel` is `remove` without the value.
mod slim_contract {
    use super::{Counted, SplitMix64};
    use std::cell::Cell;
    use std::collections::HashSet;
    use std::rc::Rc;
    use tickwheel::{SlimWheel, TimerKey};

    fn drain<T>(q: &mut SlimWheel<T>, t: u64) -> Vec<T> {
        q.check_invariants();
        let fired = q.drain_expired(t).map(|(_, v)| v).collect();
        q.check_invariants();
        fired
    }

    #[test]
    fn reset_returns_a_new_key_and_the_old_one_is_stale() {
        let mut q = SlimWheel::new();
        let a = q.insert(100, 'a');
        q.insert(100, 'b');
        let c = q.insert(50, 'c');
        let a2 = q.reset(a, 100).expect("pending");
        let c2 = q.reset(c, 100).expect("pending");
        assert!(a2 != a && c2 != c);
        for stale in [a, c] {
            assert_eq!(q.deadline(stale), None);
            assert_eq!(q.get_mut(stale), None);
            assert_eq!(q.reset(stale, 10), None, "a stale key resets nothing");
            assert_eq!(q.remove(stale), None);
            assert!(!q.cancel(stale));
        }
        assert_eq!(q.len(), 3, "stale keys touched nothing");
        assert_eq!(q.deadline(a2), Some(100));
        *q.get_mut(c2).unwrap() = 'C';
        // Each reset is a new insertion: behind b.
        let fired: Vec<_> = q.drain_expired(100).collect();
        assert_eq!(fired, [(q_key(&fired, 'b'), 'b'), (a2, 'a'), (c2, 'C')]);
        assert_eq!(q.reset(a2, 500), None, "fired keys are stale");
    }

    /// The key that fired with `value` (the one `insert` gave, for a timer never reset).
    fn q_key(fired: &[(TimerKey, char)], value: char) -> TimerKey {
        fired.iter().find(|(_, v)| *v == value).expect("fired").0
    }

    #[test]
    fn poll_returns_the_key_of_the_last_reset() {
        let mut q = SlimWheel::with_start(1_000);
        let key = q.insert(5_000, 1u32);
        let later = q.reset(key, 2_000).unwrap();
        let past = q.reset(later, 3).unwrap();
        assert_eq!(
            q.deadline(past),
            Some(1_000),
            "a reset into the past is due now"
        );
        assert_eq!(q.poll_expired(1_000), Some((past, 1)));
        assert!(q.is_empty());
    }

    #[test]
    fn keys_from_inserts_and_resets_are_never_reissued() {
        let mut rng = SplitMix64::new(31);
        let mut q = SlimWheel::new();
        let mut seen = HashSet::new();
        let mut live: Vec<TimerKey> = Vec::new();
        for round in 0..200u64 {
            for _ in 0..50 {
                let key = q.insert(round + rng.in_range(1..=300), ());
                assert!(seen.insert(key), "insert reissued {key:?}");
                live.push(key);
            }
            for _ in 0..100 {
                let at = rng.in_range(0..=live.len() as u64 - 1) as usize;
                match q.reset(live[at], round + rng.in_range(0..=300)) {
                    Some(key) => {
                        assert!(seen.insert(key), "reset reissued {key:?}");
                        live[at] = key;
                    }
                    None => {
                        live.swap_remove(at);
                    }
                }
            }
            for _ in 0..10 {
                let at = rng.in_range(0..=live.len() as u64 - 1) as usize;
                q.cancel(live.swap_remove(at));
            }
            q.drain_expired(round).for_each(drop);
            if round % 50 == 49 {
                q.shrink_to_fit();
            }
            q.check_invariants();
        }
    }

    #[test]
    fn cancel_drops_the_value_once_and_remove_hands_it_back() {
        let alive = Rc::new(Cell::new(0));
        let mut q = SlimWheel::new();
        let keys: Vec<_> = (0..90u64)
            .map(|i| q.insert(i % 30, Counted::new(&alive)))
            .collect();
        for key in keys.iter().step_by(3) {
            assert!(q.cancel(*key));
            assert!(!q.cancel(*key), "a second cancel finds nothing");
        }
        assert_eq!(alive.get(), 60, "cancel drops the value at once");
        let taken = q.remove(keys[1]).expect("pending");
        assert_eq!(alive.get(), 60, "remove hands the value back");
        drop(taken);
        let reset = q.reset(keys[2], 1_000).expect("pending");
        assert_eq!(alive.get(), 59, "a reset keeps the value");
        assert_eq!(drain(&mut q, 29).len(), 58);
        assert_eq!(alive.get(), 1);
        assert!(q.get_mut(reset).is_some());
        drop(q);
        assert_eq!(alive.get(), 0, "dropping the wheel drops what is pending");
    }
}
