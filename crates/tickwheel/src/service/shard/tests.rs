//! The races that decide a timer's fate, under loom with `--cfg loom` (see [`crate::sync`]).

// The clock is a trait object in std's `Arc` (loom's cannot coerce to `dyn`).
use std::sync::Arc as StdArc;
use std::time::Duration;

#[cfg(not(loom))]
use super::inbox::FLUSH_CHUNK;
use super::*;
#[cfg(not(loom))]
use crate::sync::Mutex;
use crate::sync::{model, model_bounded, spawn, AtomicUsize, JoinHandle};
use crate::time::{ManualClock, Ticks};

fn shard() -> Arc<Shard> {
    let clock = ManualClock::new();
    let ticks = Ticks::new(clock.now(), Duration::from_millis(1));
    let core = Arc::new(Core::new(StdArc::new(clock), ticks, Some(8)));
    Arc::new(Shard::new(core, QueueFlavor::Wheel))
}

/// A callback that counts its runs in `ran`.
fn counter(ran: &Arc<AtomicUsize>) -> Callback {
    let ran = ran.clone();
    Callback::new(move || {
        ran.fetch_add(1, Ordering::SeqCst);
    })
}

/// Inserts a callback at `tick` that counts its runs in `ran`.
fn counting(shard: &Shard, tick: u64, ran: &Arc<AtomicUsize>) -> Target {
    shard
        .insert(tick, counter(ran))
        .map(Target::Key)
        .unwrap_or_else(|_| panic!("shard closed"))
}

/// Drains at `now` and runs what came out, as the timer thread and a worker would.
fn fire(shard: &Shard, now: u64) -> usize {
    let mut out = Drained::default();
    let n = shard.drain(now, &mut out, |_| {});
    for job in out.jobs {
        job.callback.call();
    }
    n
}

/// Runs `f` on `shard` in a spawned thread: one side of a race. Every side of a race
/// runs this way, none on the model's main thread (see [`crate::sync`]).
fn race<T: Send + 'static>(
    shard: &Arc<Shard>,
    f: impl FnOnce(&Shard) -> T + Send + 'static,
) -> JoinHandle<T> {
    let shard = shard.clone();
    spawn(move || f(&shard))
}

/// A timer made by `make` at tick 1 is cancelled while a drain fires tick 1: `cancel` is
/// `true` exactly when the callback never ran and never will, and only once.
fn cancel_vs_fire(make: fn(&Shard, u64, &Arc<AtomicUsize>) -> Target) {
    model(move || {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let target = make(&shard, 1, &ran);
        let firer = race(&shard, |shard| fire(shard, 1));
        let canceller = race(&shard, move |shard| shard.cancel(target).is_some());
        let cancelled = canceller.join().unwrap();
        let drained = firer.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
        assert_eq!(drained, usize::from(!cancelled));
        assert!(shard.cancel(target).is_none(), "a timer is decided once");
        assert!(!shard.is_pending(target));
        assert_eq!(fire(&shard, 100), 0);
    });
}

#[test]
fn loom_cancel_vs_fire_decides_exactly_once() {
    cancel_vs_fire(counting);
}

#[test]
fn loom_reset_vs_fire_runs_once() {
    model(|| {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let key = counting(&shard, 1, &ran);
        let firer = race(&shard, |shard| fire(shard, 1));
        let resetter = race(&shard, move |shard| shard.reset(key, 5));
        let moved = resetter.join().unwrap();
        firer.join().unwrap();
        // Reset won: nothing ran at tick 1. Fire won: the reset did nothing.
        assert_eq!(ran.load(Ordering::SeqCst), usize::from(!moved));
        assert_eq!(shard.earliest() <= 5, moved);
        fire(&shard, 5);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    });
}

/// Three threads race here, and loom's full search took five minutes of CI (every other
/// model finishes in seconds): it is bounded to five preemptions, 12 s, where loom advises
/// two or three.
#[test]
fn loom_wait_is_released_by_fire_or_cancel() {
    model_bounded(5, || {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let key = counting(&shard, 1, &ran);
        let waiter = race(&shard, move |shard| {
            if let Some(slot) = shard.register_waiter(key) {
                slot.block();
            }
            // Released only once the timer left the queue.
            assert!(shard.deadline(key).is_none());
        });
        let canceller = race(&shard, move |shard| shard.cancel(key).is_some());
        let firer = race(&shard, |shard| fire(shard, 1));
        firer.join().unwrap();
        let cancelled = canceller.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), usize::from(!cancelled));
    });
}

/// Counts the wake-ups of the wakers made from it (a std `Arc`, as `Waker`s require).
struct CountWake(AtomicUsize);

impl std::task::Wake for CountWake {
    fn wake(self: StdArc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn count_wake() -> StdArc<CountWake> {
    StdArc::new(CountWake(AtomicUsize::new(0)))
}

fn wakes(count: &StdArc<CountWake>) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// A `Sleep`'s timer: an entry whose callback wakes `count`'s waker.
fn waker_entry(shard: &Shard, tick: u64, count: &StdArc<CountWake>) -> Target {
    let waker = Waker::from(count.clone());
    shard
        .insert(tick, Callback::waker(waker))
        .map(Target::Key)
        .unwrap_or_else(|_| panic!("shard closed"))
}

/// Drains at `now` and runs the inline callbacks, as the timer thread does.
fn fire_inline(shard: &Shard, now: u64) -> usize {
    let mut out = Drained::default();
    let n = shard.drain(now, &mut out, |_| {});
    out.inline.into_iter().for_each(|job| job.callback.call());
    n
}

#[test]
fn loom_waker_swap_vs_fire_loses_no_wakeup() {
    model(|| {
        let shard = shard();
        let (first, second) = (count_wake(), count_wake());
        let key = waker_entry(&shard, 1, &first);
        let firer = race(&shard, |shard| fire_inline(shard, 1));
        // A `Sleep` polled again from another task brings `second`'s waker.
        let waker = Waker::from(second.clone());
        let swapper = race(&shard, move |shard| {
            shard.update_waker(key, &waker).is_some()
        });
        let swapped = swapper.join().unwrap();
        firer.join().unwrap();
        // Swapped first: the new task is woken. Fired first: the old one was, and the
        // poll sees its entry gone (and the clock past the deadline).
        assert_eq!(
            (wakes(&first), wakes(&second)),
            if swapped { (0, 1) } else { (1, 0) }
        );
        // Every waker was woken or dropped: only the test's references remain.
        assert_eq!(StdArc::strong_count(&first), 1);
        assert_eq!(StdArc::strong_count(&second), 1);
    });
}

#[test]
fn loom_drop_vs_wake_wakes_exactly_when_not_cancelled() {
    model(|| {
        let shard = shard();
        let count = count_wake();
        let key = waker_entry(&shard, 1, &count);
        let firer = race(&shard, |shard| fire_inline(shard, 1));
        // The `Sleep` is dropped: it cancels its entry if still queued.
        let dropper = race(&shard, move |shard| shard.cancel(key).is_some());
        let cancelled = dropper.join().unwrap();
        firer.join().unwrap();
        assert_eq!(wakes(&count), usize::from(!cancelled));
        // The waker was dropped once, by whichever side had the entry.
        assert_eq!(StdArc::strong_count(&count), 1);
    });
}

#[cfg(not(loom))]
#[test]
fn a_waker_is_woken_not_dropped_when_discarded() {
    let shard = shard();
    let count = count_wake();
    let key = waker_entry(&shard, 5, &count);
    let Closed::Callbacks(all) = shard.close() else {
        panic!("a shard with a waker entry must hand every callback back");
    };
    assert_eq!(all.len(), 1);
    all.into_iter().for_each(Callback::discard);
    assert_eq!(wakes(&count), 1);
    assert!(shard
        .update_waker(key, &Waker::from(count.clone()))
        .is_none());
}

#[cfg(not(loom))]
#[test]
fn close_discards_everything_and_refuses_inserts() {
    let shard = shard();
    let ran = Arc::new(AtomicUsize::new(0));
    let key = counting(&shard, 1, &ran);
    counting(&shard, NEVER, &ran);
    shard.check_invariants();
    assert_eq!(shard.close().len(), 2);
    shard.check_invariants();
    assert_eq!(shard.close().len(), 0, "closing twice finds nothing");
    assert!(shard.cancel(key).is_none());
    let refused = shard.insert(1, Callback::new(|| {}));
    assert!(refused.is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}
/// Stages a callback at `tick` that pushes `id` to `log` when run.
#[cfg(not(loom))]
fn staged(shard: &Shard, tick: u64, id: u32, log: &Arc<Mutex<Vec<u32>>>) -> usize {
    let log = log.clone();
    let callback = Callback::new(move || lock(&log).push(id));
    shard
        .stage(tick, callback)
        .unwrap_or_else(|_| panic!("shard closed"))
}

#[cfg(not(loom))]
#[test]
fn staged_timers_are_queued_due_first_in_order_and_stay_visible() {
    let shard = shard();
    let log = Arc::new(Mutex::new(Vec::new()));
    for (id, tick) in [(0, 5), (1, 1), (2, 5), (3, NEVER)] {
        assert_eq!(staged(&shard, tick, id, &log), id as usize + 1);
    }
    let handle_ran = Arc::new(AtomicUsize::new(0));
    assert_eq!(shard.earliest(), 1);
    shard.check_invariants();
    assert_eq!(fire(&shard, 1), 1);
    shard.check_invariants();
    assert_eq!(*lock(&log), [1]);
    // Ticks 5 are out of the inbox, not yet queued: `earliest` still covers them.
    assert!(shard.earliest() <= 5);
    assert_eq!(shard.counts().pending, 3);
    // A handle timer at tick 5 from the same thread comes after the staged ones.
    counting(&shard, 5, &handle_ran);
    assert_eq!(fire(&shard, 5), 3);
    shard.check_invariants();
    assert_eq!(*lock(&log), [1, 0, 2]);
    assert_eq!(handle_ran.load(Ordering::SeqCst), 1);
    let counts = shard.counts();
    assert_eq!((counts.pending, counts.scheduled), (1, 5));
    assert_eq!(shard.close().len(), 1, "the NEVER timer is discarded");
    assert!(shard.stage(1, Callback::new(|| {})).is_err());
}

/// `stage` counts the inbox's timers, so that the producer that stages the `HELP_AT`th knows
/// it (and queues them: `ServiceState::staged`); the end of a drain queues them all.
#[cfg(not(loom))]
#[test]
fn stage_counts_the_staged_timers() {
    let shard = shard();
    let counts: Vec<usize> = (0..HELP_AT)
        .map(|_| shard.stage(9, Callback::new(|| {})).unwrap_or(0))
        .collect();
    assert_eq!(counts, (1..=HELP_AT).collect::<Vec<_>>());
    shard.check_invariants();
    shard.flush_staged(|| false);
    shard.check_invariants();
    assert_eq!(shard.unqueued(), 0);
    assert_eq!(shard.counts().pending, HELP_AT);
    assert_eq!(shard.earliest(), 9);
}

/// The end of a drain takes the inbox once: what a producer stages while the staged timers
/// are queued (here, between two chunks) waits for the next drain, still published.
#[cfg(not(loom))]
#[test]
fn the_end_of_a_drain_takes_the_inbox_once() {
    let shard = shard();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..FLUSH_CHUNK + 6 {
        assert!(shard.stage(9, counter(&ran)).is_ok());
    }
    let staged_meanwhile = std::cell::Cell::new(false);
    shard.flush_staged(|| {
        if !staged_meanwhile.replace(true) {
            for _ in 0..3 {
                assert!(shard.stage(7, counter(&ran)).is_ok());
            }
        }
        false
    });
    shard.check_invariants();
    assert!(staged_meanwhile.get());
    assert_eq!(
        shard.staged(),
        3,
        "staged during the flush: left for the next drain"
    );
    assert_eq!(shard.counts().pending, FLUSH_CHUNK + 9);
    assert_eq!(shard.earliest(), 7);
    assert_eq!(fire(&shard, 9), FLUSH_CHUNK + 9);
    assert_eq!(ran.load(Ordering::SeqCst), FLUSH_CHUNK + 9);
}

#[cfg(not(loom))]
#[test]
fn a_producer_helping_queues_everything_in_order() {
    let shard = shard();
    let log = Arc::new(Mutex::new(Vec::new()));
    let n = FLUSH_CHUNK as u32 + 6;
    for id in 0..n {
        staged(&shard, 2 + u64::from(id % 2), id, &log);
    }
    // Queued in one take of the inbox, in staging order.
    shard.help_flush();
    shard.check_invariants();
    assert_eq!(shard.unqueued(), 0);
    assert_eq!(shard.counts().pending, n as usize);
    assert_eq!(fire(&shard, 3), n as usize);
    let evens = (0..n).filter(|id| id % 2 == 0);
    let expected: Vec<u32> = evens.chain((0..n).filter(|id| id % 2 == 1)).collect();
    assert_eq!(*lock(&log), expected);
}

/// A producer stages a timer due at tick 1 while the timer thread drains tick 1: the
/// timer runs once, either in that drain or, if it missed it, in the next one, which the
/// published `earliest` asks for.
#[test]
fn loom_stage_vs_drain_runs_once_and_is_never_lost() {
    model(|| {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let callback = counter(&ran);
            race(&shard, move |shard| {
                assert!(shard.stage(1, callback).is_ok());
            })
        };
        let firer = race(&shard, |shard| fire(shard, 1));
        producer.join().unwrap();
        let first = firer.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), first);
        if first == 0 {
            assert!(shard.earliest() <= 1, "a staged timer is visible");
            assert_eq!(fire(&shard, 1), 1);
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(fire(&shard, 100), 0);
    });
}

/// Stages a callback at `tick` with a cell (as `schedule` does) that counts its runs in
/// `ran`; returns its handle's target.
fn staged_with_cell(shard: &Shard, tick: u64, ran: &Arc<AtomicUsize>) -> Target {
    shard
        .stage_with_cell(tick, counter(ran))
        .map(|(_, cell)| Target::Cell(cell))
        .unwrap_or_else(|_| panic!("shard closed"))
}

/// A timer staged with a handle is cancelled while the timer thread drains its tick (and
/// so takes it out of the inbox): `true` exactly when its callback never runs.
#[test]
fn loom_cancel_of_a_staged_timer_vs_fire_decides_exactly_once() {
    cancel_vs_fire(staged_with_cell);
}

/// A timer cancelled while still in the inbox is never queued, and leaves no trace the
/// timer thread would wake for; its handle is stale at once.
#[cfg(not(loom))]
#[test]
fn a_cancel_in_the_inbox_leaves_nothing_behind() {
    let shard = shard();
    let ran = Arc::new(AtomicUsize::new(0));
    let target = staged_with_cell(&shard, 3, &ran);
    assert!(shard.cancel(target).is_some());
    shard.check_invariants();
    assert_eq!(shard.staged(), 0);
    // Its tick stays a lower bound until a drain finds nothing there (once, not forever).
    assert_eq!(shard.earliest(), 3);
    assert_eq!(fire(&shard, 3), 0);
    assert_eq!(
        shard.earliest(),
        NEVER,
        "the timer thread would spin on tick 3"
    );
    assert!(!shard.is_pending(target));
    assert!(shard.cancel(target).is_none());
    assert!(shard.deadline(target).is_none());
    let counts = shard.counts();
    assert_eq!(
        (counts.pending, counts.scheduled, counts.cancelled),
        (0, 1, 1)
    );
    // The cell is back in the pool: the next timer reuses it, the old handle stays stale.
    let again = staged_with_cell(&shard, 3, &ran);
    assert!(matches!((again, target), (Target::Cell(a), Target::Cell(t)) if a.index == t.index));
    shard.flush_staged(|| false);
    shard.check_invariants();
    assert!(shard.is_pending(again) && !shard.is_pending(target));
    assert_eq!(fire(&shard, 3), 1);
    shard.check_invariants();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// The high-water mark counts staged timers too, even those cancelled in the inbox
/// before the timer thread ever saw them.
#[cfg(not(loom))]
#[test]
fn the_high_water_mark_sees_timers_cancelled_in_the_inbox() {
    let shard = shard();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        staged_with_cell(&shard, 5, &ran);
    }
    shard.flush_staged(|| false);
    let late: Vec<Target> = (0..2).map(|_| staged_with_cell(&shard, 5, &ran)).collect();
    for target in late {
        assert!(shard.cancel(target).is_some());
    }
    let counts = shard.counts();
    assert_eq!((counts.pending, counts.high_water), (3, 5));
}

/// A producer stages a timer with a handle (its pool empty, so it reserves cells under
/// the queue lock first) and resets it while the timer thread drains: the timer runs
/// once, at tick 1 if the drain had it first and at tick 3 if the reset did.
#[test]
fn loom_stage_and_reset_vs_drain_runs_once() {
    model(|| {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let ran = ran.clone();
            race(&shard, move |shard| {
                let target = staged_with_cell(shard, 1, &ran);
                shard.reset(target, 3)
            })
        };
        let firer = race(&shard, |shard| fire(shard, 1));
        let moved = producer.join().unwrap();
        let first = firer.join().unwrap();
        assert_eq!(first, usize::from(!moved));
        assert_eq!(ran.load(Ordering::SeqCst), first);
        assert_eq!(fire(&shard, 2), 0, "never early");
        assert_eq!(fire(&shard, 3) + first, 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    });
}

/// A producer queuing its shard's staged timers itself (`help_flush`) while the timer
/// thread drains: the timer runs once, and none is left behind unqueued.
#[test]
fn loom_help_flush_vs_drain_runs_once() {
    model(|| {
        let shard = shard();
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let callback = counter(&ran);
            race(&shard, move |shard| {
                assert!(shard.stage(1, callback).is_ok());
                shard.help_flush();
            })
        };
        let firer = race(&shard, |shard| fire(shard, 1));
        producer.join().unwrap();
        let first = firer.join().unwrap();
        assert_eq!(shard.unqueued(), 0);
        assert_eq!(fire(&shard, 1) + first, 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    });
}

/// A stage racing shutdown's close is either refused (the caller drops it) or discarded
/// by the close: never both, never neither, never run.
#[test]
fn loom_stage_vs_close_is_refused_or_discarded() {
    model(|| {
        let shard = shard();
        let producer = race(&shard, |shard| shard.stage(1, Callback::new(|| {})).is_ok());
        let closer = race(&shard, |shard| shard.close().len());
        let staged = producer.join().unwrap();
        let discarded = closer.join().unwrap();
        assert_eq!(discarded, usize::from(staged));
        assert_eq!(fire(&shard, 100), 0);
    });
}

/// The timer thread decides how long to sleep from `earliest()`: while a flush moves a
/// staged timer from the inbox to the queue, no interleaving may show neither.
#[test]
fn loom_a_flush_never_hides_a_staged_timer() {
    model(|| {
        let shard = shard();
        assert!(shard.stage(3, Callback::new(|| {})).is_ok());
        let flusher = race(&shard, |shard| shard.flush_staged(|| false));
        let reader = race(&shard, Shard::earliest);
        assert!(reader.join().unwrap() <= 3);
        flusher.join().unwrap();
        assert_eq!(shard.earliest(), 3);
        assert_eq!((shard.staged(), shard.counts().pending), (0, 1));
    });
}

/// A cell freed at its last generation is retired, as the queues' entries are: its
/// generation never wraps round to one a stale handle still holds.
#[test]
fn a_cell_at_its_last_generation_is_retired() {
    let mut cells = Cells::default();
    cells.left(CellRef {
        index: 0,
        generation: u32::MAX - 1,
    });
    cells.left(CellRef {
        index: 1,
        generation: u32::MAX,
    });
    assert_eq!(
        cells.free,
        [CellRef {
            index: 0,
            generation: u32::MAX
        }]
    );
}
