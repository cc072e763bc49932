//! The arming rules of [`TimerFd`], checked against the real kernel timer
//! (`timerfd_gettime`), on the `BTreeMap` model queue and the [`Heap`] (exact deadlines), and
//! on the [`Wheel`] and the [`HashedWheel`] (whose `next_expiration` may be a slot start
//! before the deadline).
//!
//! Deadlines are tens of seconds out on a 1 ms tick, so nothing fires while a test runs unless
//! the test waits for it; the only waits are for timers already due or a few ticks out, and
//! they assert hard bounds (never early), not timing tolerances.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rustix::time::{clock_gettime, timerfd_gettime, ClockId};

use super::timerfd::tick_offset;
use super::TimerFd;
use crate::queue::{HashedWheel, Heap, TimerQueue, Wheel};
use crate::sys::model::ModelQueue;
use crate::time::{Ticks, NEVER};

const TICK: Duration = Duration::from_millis(1);
const FAR: u64 = 60_000;

fn mono() -> Duration {
    Duration::try_from(clock_gettime(ClockId::Monotonic)).unwrap()
}

/// The absolute `CLOCK_MONOTONIC` time the kernel timer is set to, bracketed by the clock
/// reads around `timerfd_gettime`; `None` when it is disarmed (or has fired).
fn kernel_deadline(fd: impl AsFd) -> Option<(Duration, Duration)> {
    let before = mono();
    let spec = timerfd_gettime(fd).unwrap();
    let after = mono();
    let left = Duration::try_from(spec.it_value).unwrap();
    assert_eq!(
        spec.it_interval.tv_sec + spec.it_interval.tv_nsec,
        0,
        "one-shot"
    );
    (!left.is_zero()).then_some((before + left, after + left))
}

/// Checks the invariant: the fd is armed exactly at the queue's next expiration (start of that
/// tick on CLOCK_MONOTONIC), or disarmed when empty.
fn assert_armed<T, Q: TimerQueue<T>>(t: &TimerFd<T, Q>) {
    assert_eq!(t.armed_at(), t.queue().next_expiration());
    match (t.armed_at(), kernel_deadline(t)) {
        (None, None) => {}
        (Some(k), Some((lo, hi))) => {
            let want = t.origin_mono + tick_offset(t.ticks(), k);
            // The kernel reports remaining time at some instant between the two reads.
            assert!(
                lo <= want + Duration::from_micros(50),
                "kernel {lo:?} > tick {k} {want:?}"
            );
            assert!(
                want <= hi + Duration::from_micros(50),
                "kernel {hi:?} < tick {k} {want:?}"
            );
        }
        (want, got) => panic!("armed_at {want:?} but kernel timer {got:?}"),
    }
}

fn model() -> TimerFd<u32, ModelQueue<u32>> {
    TimerFd::with_queue(ModelQueue::default(), TICK).unwrap()
}

fn wheel() -> TimerFd<u32, Wheel<u32>> {
    TimerFd::new(TICK).unwrap()
}

fn heap() -> TimerFd<u32, Heap<u32>> {
    TimerFd::with_queue(Heap::new(), TICK).unwrap()
}

/// A hashed wheel whose one revolution (2^17 ticks, 131 s) spans every deadline here, so its
/// `next_expiration` is exact and nothing is armed a few hundred ticks out, where a stalled
/// test could see it fire. The default size is tested on its own below.
fn hashed() -> TimerFd<u32, HashedWheel<u32>> {
    TimerFd::with_queue(HashedWheel::with_slots(1 << 17), TICK).unwrap()
}

/// Runs a check on the model and on every queue flavor.
macro_rules! on_both {
    ($check:ident) => {
        $check(model());
        $check(wheel());
        $check(heap());
        $check(hashed());
    };
}

#[test]
fn empty_is_disarmed() {
    fn check<Q: TimerQueue<u32>>(t: TimerFd<u32, Q>) {
        assert_eq!(t.armed_at(), None);
        assert_armed(&t);
    }
    on_both!(check);
}

#[test]
fn insert_arms_and_earlier_insert_rearms() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        t.insert(FAR, 1);
        assert_armed(&t);
        let first = t.armed_at().unwrap();
        assert!(first <= FAR);
        t.insert(FAR / 2, 2);
        assert_armed(&t);
        assert!(t.armed_at().unwrap() <= FAR / 2);
        assert!(t.armed_at().unwrap() < first);
    }
    on_both!(check);
}

#[test]
fn later_insert_makes_no_syscall() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        t.insert(FAR, 1);
        let calls = t.settime_calls;
        assert_eq!(calls, 1);
        for i in 0..100 {
            t.insert(FAR + i, 2); // never earlier than what is armed
        }
        assert_eq!(t.settime_calls, calls);
        assert_armed(&t);
        t.insert(FAR / 4, 3); // earlier, in an earlier wheel slot too
        assert_eq!(t.settime_calls, calls + 1);
        assert_armed(&t);
    }
    on_both!(check);
}

#[test]
fn reset_earlier_and_later_move_the_arming() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        let a = t.insert(FAR, 1);
        let b = t.insert(FAR + 10_000, 2);
        assert!(t.reset(b, 20_000)); // b becomes the earliest
        assert_armed(&t);
        assert!(t.armed_at().unwrap() <= 20_000);
        assert!(t.reset(b, FAR + 30_000)); // the earliest moves later: a is next
        assert_armed(&t);
        assert!(t.armed_at().unwrap() > 20_000 && t.armed_at().unwrap() <= FAR);
        assert!(t.reset(a, FAR + 40_000)); // both later
        assert_armed(&t);
        assert!(t.armed_at().unwrap() > FAR);
    }
    on_both!(check);
}

/// A default-size (512-slot) hashed wheel bounds `next_expiration` below by a `floor` that
/// rises only at a revolution jump, so moving every timer later leaves the arming early (the
/// contract allows it: that drain yields nothing and re-arms). Still armed exactly at
/// `next_expiration`, and never after a deadline.
#[test]
fn reset_on_a_default_hashed_wheel_keeps_the_arming_a_lower_bound() {
    let mut t = TimerFd::with_queue(HashedWheel::new(), TICK).unwrap();
    let a = t.insert(FAR, 1);
    let b = t.insert(FAR + 10_000, 2);
    assert!(t.reset(b, 20_000)); // b becomes the earliest
    assert_armed(&t);
    assert!(t.armed_at().unwrap() <= 20_000);
    for (key, deadline) in [(b, FAR + 30_000), (a, FAR + 40_000)] {
        assert!(t.reset(key, deadline));
        assert_armed(&t);
        let earliest = t.deadline(a).unwrap().min(t.deadline(b).unwrap());
        assert!(t.armed_at().unwrap() <= earliest, "armed after a deadline");
    }
}

#[test]
fn exact_ticks_on_the_model() {
    let mut t = model();
    let a = t.insert(FAR, 1);
    let b = t.insert(FAR + 10_000, 2);
    assert!(t.reset(b, 20_000));
    assert_eq!(t.armed_at(), Some(20_000));
    assert!(t.reset(b, FAR + 30_000));
    assert_eq!(t.armed_at(), Some(FAR));
    assert_eq!(t.remove(a), Some(1));
    assert_eq!(t.armed_at(), Some(FAR + 30_000));
    assert_armed(&t);
}

#[test]
fn removing_the_last_disarms_and_stale_keys_change_nothing() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        let a = t.insert(FAR, 1);
        let b = t.insert(2 * FAR, 2);
        assert_eq!(t.remove(a), Some(1));
        assert_armed(&t);
        assert_eq!(t.remove(a), None);
        assert!(!t.reset(a, 5));
        assert_armed(&t);
        assert_eq!(t.remove(b), Some(2));
        assert_eq!(t.armed_at(), None);
        assert_armed(&t);
    }
    on_both!(check);
}

#[test]
fn never_deadline_is_armed_far_without_panic() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        let k = t.insert(u64::MAX, 1);
        assert!(t.armed_at().is_some());
        assert!(kernel_deadline(&t).is_some());
        let k2 = t.insert_after(Duration::MAX, 2);
        assert_eq!(t.deadline(k2), Some(u64::MAX));
        assert_eq!(t.remove(k), Some(1));
        assert_eq!(t.remove(k2), Some(2));
        assert_armed(&t);
    }
    on_both!(check);
}

/// Waits (bounded) until the fd is readable; `false` if it was not within `limit`.
fn wait_readable(t: &impl AsFd, limit: Duration) -> bool {
    let mut poll = Poll::new().unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&t.as_fd());
    let mut source = SourceFd(&raw);
    poll.registry()
        .register(&mut source, Token(0), Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(4);
    poll.poll(&mut events, Some(limit)).unwrap();
    !events.is_empty()
}

/// True if a non-blocking read finds an expiration (consumes it).
fn readable_now(t: &impl AsFd) -> bool {
    rustix::io::read(t, &mut [0u8; 8]).is_ok()
}

#[test]
fn drain_yields_due_timers_and_rearms() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        let far = t.insert(FAR, 1);
        t.insert(0, 2);
        t.insert(0, 3);
        assert_eq!(t.armed_at(), Some(0));
        assert!(
            wait_readable(&t, Duration::from_secs(5)),
            "a due timer makes the fd readable"
        );
        let fired: Vec<u32> = t.drain(t.now_tick()).map(|(_, v)| v).collect();
        assert_eq!(fired, [2, 3]);
        assert_armed(&t);
        assert!(t.armed_at().unwrap() > 0);
        assert!(!readable_now(&t), "the drain consumed the readiness");
        assert_eq!(t.remove(far), Some(1));
        assert_armed(&t);
    }
    on_both!(check);
}

#[test]
fn drain_before_anything_is_due_keeps_the_arming() {
    let mut t = model();
    t.insert(FAR, 1);
    assert_eq!(t.drain(t.now_tick()).count(), 0);
    assert_eq!(t.armed_at(), Some(FAR));
    assert_armed(&t);
}

#[test]
fn fd_never_fires_before_the_tick_boundary() {
    fn check<Q: TimerQueue<u32>>(mut t: TimerFd<u32, Q>) {
        let deadline = t.deadline_after(Duration::from_millis(3));
        let key = t.insert(deadline, 7);
        let mut fired = Vec::new();
        let start = Instant::now();
        while fired.is_empty() && start.elapsed() < Duration::from_secs(5) {
            if wait_readable(&t, Duration::from_secs(5)) {
                let now = t.now_tick();
                assert!(now >= t.armed_at().unwrap(), "woken before the armed tick");
                fired.extend(t.drain(now));
            }
        }
        assert_eq!(fired, [(key, 7)]);
        assert!(Instant::now() >= t.ticks().instant_of(deadline).unwrap());
        assert_eq!(t.armed_at(), None);
        assert_armed(&t);
    }
    on_both!(check);
}

#[test]
fn drain_with_a_stale_now_rearms_instead_of_losing_the_edge() {
    let mut t = model();
    t.insert(2, 1);
    assert!(wait_readable(&t, Duration::from_secs(5)));
    // Draining at an old tick yields nothing, but consumed the fd: it must be re-armed (and,
    // the tick being past, fire again) rather than leave an edge-triggered loop deaf.
    assert_eq!(t.drain(1).count(), 0);
    assert_eq!(t.armed_at(), Some(2)); // in the past: the kernel fires at once
    assert!(
        wait_readable(&t, Duration::from_secs(5)),
        "re-armed after the stale drain"
    );
    let fired: Vec<u32> = t.drain(t.now_tick()).map(|(_, v)| v).collect();
    assert_eq!(fired, [1]);
    assert_eq!(t.armed_at(), None);
}

#[test]
fn tick_offset_is_exact_and_saturates() {
    let origin = Instant::now();
    let t = Ticks::new(origin, Duration::from_micros(1_500));
    assert_eq!(tick_offset(&t, 3), Duration::from_micros(4_500));
    assert_eq!(origin + tick_offset(&t, 3), t.instant_of(3).unwrap());
    // The finest resolution is 1 µs: the largest tick is still exact.
    let fine = Ticks::new(origin, Duration::ZERO);
    assert_eq!(tick_offset(&fine, NEVER), Duration::from_micros(NEVER));
    // The coarsest is 1 s: NEVER seconds still fits a Duration, no overflow.
    let coarse = Ticks::new(origin, Duration::MAX);
    assert_eq!(tick_offset(&coarse, NEVER), Duration::from_secs(NEVER));
}
