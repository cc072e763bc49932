//! [`Shared`]: the state of one service, and the timer thread's loop.
//!
//! # The timer thread
//!
//! It drains every shard whose published earliest tick is due, hands the callbacks to the
//! workers and runs internal notifications, then sleeps until the earliest tick over all
//! shards — `park_timeout` to that tick's start instant on a real clock, `park` with no timeout
//! on a virtual one (the clock's listener unparks it on every move). It is unparked early only
//! by an insert that lowers a shard's earliest tick below its sleep target (see
//! [`core`](super::core)), by a virtual clock moving, and by shutdown. Nothing pending means
//! `park()` forever: an idle service uses no CPU.
//!
//! # Deadline order across shards
//!
//! Drains are serialised by the `drain` lock (the timer thread and `settle` callers both
//! drain). One drain collects every due timer of every shard at one `now`, each shard's in
//! (deadline, insertion) order, then stable-sorts the lot by deadline tick (Rust's stable sort
//! merges those sorted runs in O(n log shards)); when only one shard is due, its chunks are
//! handed on as they come out, already in order, so workers start early. Callbacks are therefore handed out ordered by
//! (deadline tick, shard index, insertion order within the shard). A thread always schedules
//! into the same shard, so one thread's timers keep their schedule order at equal deadlines;
//! timers of *different* threads at the same tick have no defined order between them (there is
//! no global sequence counter — it would be one contended cache line on the hot path).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
use std::thread;
use std::time::Duration;

use super::core::{Core, AWAKE};
use super::shard::{Closed, Drained, Shard};
use super::sleeper::{Plan, Sleeper};
use super::worker::{Dispatch, PanicHandler, WorkerStats};
use crate::sync::{lock, Arc, Mutex};

pub(crate) struct Shared {
    pub(crate) core: Arc<Core>,
    /// A power of two of shards; a thread uses `shards[thread_index & mask]`.
    pub(crate) shards: Box<[Arc<Shard>]>,
    pub(crate) dispatch: Dispatch,
    /// Serialises drains; holds their scratch buffers.
    drain: Mutex<Drained>,
    pub(crate) worker_stats: Box<[WorkerStats]>,
    pub(crate) on_panic: Option<PanicHandler>,
    /// Internal notifications run on the timer thread.
    pub(crate) notified: StdAtomicU64,
    pub(crate) discarded: StdAtomicU64,
    pub(crate) stopping: AtomicBool,
    /// The clock moves only by jumps (it told us so when we subscribed).
    pub(crate) virtual_clock: bool,
}

impl Shared {
    pub(crate) fn new(
        core: Arc<Core>,
        shards: Box<[Arc<Shard>]>,
        workers: usize,
        on_panic: Option<PanicHandler>,
        virtual_clock: bool,
    ) -> Shared {
        Shared {
            core,
            shards,
            dispatch: Dispatch::new(workers),
            drain: Mutex::new(Drained::default()),
            worker_stats: (0..workers).map(|_| WorkerStats::default()).collect(),
            on_panic,
            notified: StdAtomicU64::new(0),
            discarded: StdAtomicU64::new(0),
            stopping: AtomicBool::new(false),
            virtual_clock,
        }
    }

    /// The earliest published tick over all shards.
    pub(crate) fn earliest(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.earliest())
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Takes every timer due at `now` out of every shard and hands it on; returns how many.
    ///
    /// When one shard is due (one producer thread, or one busy one), each chunk is handed to
    /// the workers as soon as it is out of the queue, so the first callbacks of a tick start
    /// while the rest are still being drained. Otherwise the shards' runs are merged first.
    pub(crate) fn drain_due(&self, now: u64) -> usize {
        let mut scratch = lock(&self.drain);
        let mut due = self.shards.iter().filter(|shard| shard.earliest() <= now);
        if let (Some(shard), None) = (due.next(), due.next()) {
            return shard.drain(now, &mut scratch, |chunk| self.hand_off(chunk));
        }
        let mut n = 0;
        for shard in self.shards.iter() {
            if shard.earliest() <= now {
                n += shard.drain(now, &mut scratch, |_| {});
            }
        }
        if n == 0 {
            return 0;
        }
        // Each shard's run is sorted; a stable sort merges the runs.
        scratch.jobs.sort_by_key(|job| job.deadline);
        self.hand_off(&mut scratch);
        n
    }

    /// Whether nothing is due at `now` and no callback is queued or running: `settle`'s test
    /// for being done.
    ///
    /// Checked under the drain lock: a drain in progress (the timer thread's, woken by a
    /// callback that scheduled a due timer) may hold timers that are out of the queue but not
    /// yet handed to the workers, so neither `earliest` nor the workers would show them.
    pub(crate) fn settled(&self, now: u64) -> bool {
        let _drains = lock(&self.drain);
        self.earliest() > now && self.dispatch.is_idle()
    }

    /// Runs the notifications and gives the callbacks of `drained` to the workers, in order.
    fn hand_off(&self, scratch: &mut Drained) {
        let inline = scratch.inline.len();
        for callback in scratch.inline.drain(..) {
            // A waker or an `expire` must not panic; should one anyway, the timer thread
            // survives it.
            let _ = catch_unwind(AssertUnwindSafe(|| callback.call()));
        }
        self.notified.fetch_add(inline as u64, StdOrdering::Relaxed);
        self.dispatch.push(&mut scratch.jobs);
    }

    /// Closes every shard and stops the workers, serialised with drains: a `settle` draining
    /// concurrently has either handed its callbacks over before (the workers run them before
    /// they exit) or finds the shards closed. Returns what was still pending.
    pub(crate) fn close(&self) -> Vec<Closed> {
        let _drains = lock(&self.drain);
        let pending = self.shards.iter().map(|shard| shard.close()).collect();
        self.dispatch.stop();
        pending
    }

    /// The timer thread's loop; returns at shutdown.
    pub(crate) fn run_driver(&self, busy_wait: Duration) {
        self.core.set_driver(thread::current());
        precise_sleeps();
        let mut sleeper = Sleeper::new(busy_wait);
        while !self.stopping.load(StdOrdering::Acquire) {
            let now = self.core.now_tick();
            self.drain_due(now);
            let next = self.earliest();
            if next <= now {
                continue;
            }
            self.core.set_sleeping_until(next);
            // Re-read after publishing the target: an insert that missed it is seen here.
            if self.earliest() >= next && !self.stopping.load(StdOrdering::Acquire) {
                self.sleep_towards(next, &mut sleeper);
            }
            self.core.set_sleeping_until(AWAKE);
        }
    }

    /// Sleeps until `tick` starts, or until unparked; with a [`Plan::SleepThenSpin`] the
    /// last stretch is spun (see [`sleeper`](super::sleeper)).
    fn sleep_towards(&self, tick: u64, sleeper: &mut Sleeper) {
        if self.virtual_clock {
            return thread::park();
        }
        let Some(at) = self.core.ticks.instant_of(tick) else {
            return thread::park();
        };
        let clock = &self.core.clock;
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
            if self.earliest() < tick || self.stopping.load(StdOrdering::Acquire) {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// Asks the kernel to end this thread's timed sleeps on time. Linux lets a thread's timed
/// sleep end up to its *timer slack* late (50 µs by default) to batch wakeups; the timer
/// thread sleeps to a tick's start and every microsecond it oversleeps is lateness for every
/// timer of that tick. Measured with 10^6 W4 tasks at 1 ms resolution: the first callback of
/// a tick started ~130 µs after the tick's start with the default slack, ~85 µs with 1 ns.
/// A failure (a seccomp filter, say) leaves the default: timers are then up to 50 µs later.
fn precise_sleeps() {
    // Miri cannot run `prctl`; its threads have no timer slack to set anyway.
    #[cfg(all(target_os = "linux", not(miri)))]
    let _ = rustix::thread::set_current_timer_slack(core::num::NonZeroU64::new(1));
}

/// `settle`'s done-check against a drain in progress, under loom with `--cfg loom`.
#[cfg(test)]
mod tests {
    // The clock is a trait object in std's `Arc` (loom's cannot coerce to `dyn`).
    use std::sync::Arc as StdArc;

    use super::*;
    use crate::service::flavor::QueueFlavor;
    use crate::service::shard::Callback;
    use crate::sync::{model, spawn};
    use crate::time::{ManualClock, Ticks};

    /// A timer due at tick 1 is drained by one thread (the timer thread's part) while another
    /// asks `settled` (`settle`'s part). No worker runs, so once handed over the callback stays
    /// in flight: in no interleaving may `settled` see the timer neither queued nor in flight.
    /// (The check runs on a spawned thread, not the model's main one: so placed, loom explores
    /// the interleavings; from the main thread it tried only one.)
    #[test]
    fn loom_settled_never_misses_a_drain_in_progress() {
        model(|| {
            let clock = ManualClock::new();
            let ticks = Ticks::new(clock.now(), Duration::from_millis(1));
            let core = Arc::new(Core::new(StdArc::new(clock), ticks, None));
            let shard = Arc::new(Shard::new(core.clone(), QueueFlavor::Wheel));
            if shard.insert(1, Callback::new(|| {})).is_err() {
                panic!("shard closed");
            }
            let shared = Arc::new(Shared::new(core, Box::new([shard]), 1, None, true));
            let drainer = {
                let shared = shared.clone();
                spawn(move || shared.drain_due(1))
            };
            let checker = {
                let shared = shared.clone();
                spawn(move || shared.settled(1))
            };
            assert!(!checker.join().unwrap());
            assert_eq!(drainer.join().unwrap(), 1);
            assert!(!shared.settled(1));
        });
    }
}
