//! The timer thread's loop.
//!
//! It drains every shard whose published earliest tick is due (see
//! [`ServiceState::drain_due`]), which hands the callbacks to the workers and runs the entries
//! that belong to the timer thread, then sleeps until the earliest tick over all shards —
//! `park_timeout` to that tick's start instant on a real clock (the last stretch possibly
//! spun, see [`sleeper`](super::sleeper)), `park` with no timeout on a virtual one (the
//! clock's listener unparks it on every move). It is unparked early only by an insert that
//! lowers a shard's earliest tick below its sleep target (see [`core`](super::core)), by a
//! virtual clock moving, and by shutdown. Nothing pending means `park()` forever: an idle
//! service uses no CPU.

use std::thread;
use std::time::Duration;

use super::core::AWAKE;
use super::sleeper::{Plan, Sleeper};
use super::state::ServiceState;

/// The timer thread's loop; returns at shutdown.
pub(crate) fn run(state: &ServiceState, busy_wait: Duration) {
    state.core.set_driver(thread::current());
    precise_sleeps();
    let mut sleeper = Sleeper::new(busy_wait);
    while !state.is_stopping() {
        let now = state.core.now_tick();
        state.drain_due(now);
        let next = state.earliest();
        if next <= now {
            continue;
        }
        state.core.set_sleeping_until(next);
        // Re-read after publishing the target: an insert that missed it is seen here.
        if state.earliest() >= next && !state.is_stopping() {
            sleep_towards(state, next, &mut sleeper);
        }
        state.core.set_sleeping_until(AWAKE);
    }
}

/// Sleeps until `tick` starts, or until unparked; with a [`Plan::SleepThenSpin`] the last
/// stretch is spun.
fn sleep_towards(state: &ServiceState, tick: u64, sleeper: &mut Sleeper) {
    if state.virtual_clock {
        return thread::park();
    }
    let Some(at) = state.core.ticks.instant_of(tick) else {
        return thread::park();
    };
    let clock = &state.core.clock;
    let now = clock.now();
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
