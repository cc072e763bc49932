//! The timer thread's loop.
//!
//! It drains every shard whose published earliest tick is due (see [`ServiceState::drain_due`]),
//! which hands the callbacks to the workers and runs the entries that belong to the timer thread,
//! then sleeps until the earliest tick over all shards — `park_timeout` to that tick's start
//! instant on a real clock (the last stretch possibly spun, see [`sleeper`](super::sleeper)),
//! `park` with no timeout on a virtual one (the clock's listener unparks it on every move). On a
//! real clock it wakes about once per [`wake_interval`](super::Builder::wake_interval) at most: a
//! tick that starts sooner after its last wake-up waits for the interval's end and runs together
//! with the ticks that started meanwhile (the pacing in [`sleeper`](super::sleeper)). It is
//! unparked early only by an insert that lowers a shard's earliest tick below its sleep target (see
//! [`core`](super::core)), by a virtual clock moving, and by shutdown. Nothing pending means
//! `park()` forever: an idle service uses no CPU.

use std::thread;
use std::time::Instant;

use super::core::AWAKE;
use super::sleeper::{Plan, SleepPolicy, Sleeper};
use super::state::ServiceState;

/// The timer thread's loop; returns at shutdown.
pub(crate) fn run(state: &ServiceState, policy: SleepPolicy) {
    state.core.set_driver(thread::current());
    precise_sleeps();
    let mut sleeper = Sleeper::new(policy.busy_wait);
    let clock = &state.core.clock;
    let paced = !state.virtual_clock && !policy.wake_interval.is_zero();
    while !state.is_stopping() {
        let woke = clock.now();
        let now = state.core.ticks.now_tick(woke);
        state.drain_due(now);
        let next = state.earliest();
        let paced_until = paced.then(|| sleeper.paced_until(woke, policy.wake_interval));
        if next <= now && paced_until.is_none_or(|until| clock.now() >= until) {
            continue;
        }
        state.core.set_sleeping_until(next);
        // Re-read after publishing the target: an insert that missed it is seen here.
        if state.earliest() >= next && !state.is_stopping() {
            sleep_towards(state, next, paced_until, &mut sleeper);
        }
        state.core.set_sleeping_until(AWAKE);
    }
}

/// Sleeps until `tick` starts and, if given, `paced_until` has passed, or until unparked;
/// with a [`Plan::SleepThenSpin`] towards a tick's start the last stretch is spun (never
/// towards the end of a pacing interval: it is no deadline).
fn sleep_towards(
    state: &ServiceState,
    tick: u64,
    paced_until: Option<Instant>,
    sleeper: &mut Sleeper,
) {
    if state.virtual_clock {
        return thread::park();
    }
    let Some(at) = state.core.ticks.instant_of(tick) else {
        return thread::park();
    };
    let clock = &state.core.clock;
    let now = clock.now();
    if let Some(until) = paced_until.filter(|&until| until > at) {
        if until > now {
            thread::park_timeout(until - now);
            sleeper.observe(until, clock.now());
        }
        return;
    }
    if at <= now {
        return;
    }
    let (nap, spin) = match sleeper.plan(at - now) {
        Plan::Sleep(nap) => (nap, false),
        Plan::SleepThenSpin(nap) => (nap, true),
    };
    let wake_at = now + nap;
    thread::park_timeout(nap);
    let woke = clock.now();
    sleeper.observe(wake_at, woke);
    if !spin || woke < wake_at {
        // Unparked early: a new earliest timer or shutdown; the loop looks again.
        return;
    }
    while clock.now() < at {
        if state.earliest() < tick || state.is_stopping() {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Asks the kernel to end this thread's timed sleeps on time. Linux lets a thread's timed
/// sleep end up to its *timer slack* late (50 µs by default) to batch wakeups; the timer
/// thread sleeps to a tick's start, and every microsecond it oversleeps is lateness for every
/// timer of that tick, so it asks for 1 ns. A failure (a seccomp filter, say) leaves the
/// default: timers are then up to 50 µs later.
fn precise_sleeps() {
    // Miri cannot run `prctl`; its threads have no timer slack to set anyway.
    #[cfg(all(target_os = "linux", not(miri)))]
    let _ = rustix::thread::set_current_timer_slack(core::num::NonZeroU64::new(1));
}
