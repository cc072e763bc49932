//! A `TimerService` with no workers (`worker_threads(0)`): the thread that takes due timers
//! out of the queue runs them — the timer thread, or a thread inside `settle`. On a
//! `ManualClock`: where callbacks run, one deadline order for callbacks and the entries that
//! always run on the timer thread (a `Sleep`'s waker), `settle` and `shutdown` called from a
//! callback, panics, and the counters.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::Duration;

use tickwheel::{ManualClock, TimerService};

mod virtual_time;
use virtual_time::{advance, manual_with, manual_with_workers};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Entries that ran: (deadline in ms, name of the thread it ran on).
type Log = Arc<Mutex<Vec<(u64, String)>>>;

fn record(log: &Log, ms: u64) {
    let name = thread::current().name().unwrap_or("").to_string();
    log.lock().unwrap().push((ms, name));
}

/// A waker that files its deadline in the log when woken: a `Sleep` polled with it makes an
/// entry that runs on the timer thread even when the service has workers.
struct Filer {
    log: Log,
    ms: u64,
}

impl Wake for Filer {
    fn wake(self: Arc<Self>) {
        record(&self.log, self.ms);
    }
}

fn service_with_shards(shards: usize) -> (ManualClock, TimerService) {
    manual_with(
        TimerService::builder()
            .worker_threads(0)
            .shards(shards)
            .thread_name("here"),
    )
}

/// Four threads (four shards) each schedule callbacks and `Sleep`s at deadlines that
/// interleave with every other thread's; one clock move makes all of them due at once. They
/// must run in one deadline order, both kinds merged, and only on the timer thread or on the
/// thread in `settle`: there is no worker.
#[test]
fn callbacks_and_wakers_of_every_shard_run_in_one_deadline_order_on_the_draining_thread() {
    const PER_THREAD: u64 = 25;
    let (clock, service) = service_with_shards(4);
    let service = Arc::new(service);
    let log: Log = Arc::default();
    // Thread j's k-th pair: a callback at 8k + 2j + 1 ms, a `Sleep` at 8k + 2j + 2 ms. A
    // dropped `Sleep` cancels its timer, so the sleeps are kept until the clock has moved.
    let mut sleeps = Vec::new();
    for j in 0..4u64 {
        let (service, log) = (service.clone(), log.clone());
        let made = thread::spawn(move || {
            let mut sleeps = Vec::new();
            for k in 0..PER_THREAD {
                let at = 8 * k + 2 * j + 1;
                let l = log.clone();
                service.schedule(ms(at), move || record(&l, at));
                let mut sleep = Box::pin(service.sleep(ms(at + 1)).into_owned());
                let filer = Arc::new(Filer {
                    log: log.clone(),
                    ms: at + 1,
                });
                let waker = Waker::from(filer);
                let polled = sleep.as_mut().poll(&mut Context::from_waker(&waker));
                assert!(polled.is_pending());
                sleeps.push(sleep);
            }
            sleeps
        });
        sleeps.extend(made.join().unwrap());
    }
    advance(&clock, &service, ms(8 * PER_THREAD));
    let ran = log.lock().unwrap().clone();
    let order: Vec<u64> = ran.iter().map(|(ms, _)| *ms).collect();
    assert_eq!(order, (1..=8 * PER_THREAD).collect::<Vec<_>>());
    let main = thread::current().name().unwrap_or("").to_string();
    for (ms, name) in &ran {
        assert!(
            name == "here-timer" || *name == main,
            "the entry due at {ms} ms ran on {name:?}"
        );
    }
    let stats = service.stats();
    assert_eq!(stats.fired, 8 * PER_THREAD);
    assert_eq!(stats.pending, 0);
}

/// A callback may call `settle` (it drains but does not wait for itself) and `shutdown`
/// (which cannot join the thread the callback runs on, and needs no lock the drain holds).
/// Shutdown discards what is still pending; the callbacks already taken out still run.
#[test]
fn a_callback_can_settle_and_shut_the_service_down() {
    let (clock, service) = manual_with_workers(0);
    let service = Arc::new(service);
    let log: Log = Arc::default();
    {
        let (s, l) = (service.clone(), log.clone());
        service.schedule(MS, move || {
            let l2 = l.clone();
            // Already due: the `settle` below runs it before returning.
            s.schedule(Duration::ZERO, move || record(&l2, 0));
            s.settle();
            record(&l, 1);
        });
    }
    {
        let (s, l) = (service.clone(), log.clone());
        service.schedule(2 * MS, move || {
            s.shutdown();
            record(&l, 2);
        });
    }
    let l = log.clone();
    service.schedule(2 * MS, move || record(&l, 22));
    let l = log.clone();
    let late = service.schedule(10 * MS, move || record(&l, 10));
    advance(&clock, &service, 5 * MS);
    let order: Vec<u64> = log.lock().unwrap().iter().map(|(ms, _)| *ms).collect();
    assert_eq!(order, [0, 1, 2, 22]);
    assert!(!late.is_pending());
    let stats = service.stats();
    assert_eq!((stats.fired, stats.discarded, stats.pending), (4, 1, 0));
    advance(&clock, &service, 10 * MS);
    assert_eq!(log.lock().unwrap().len(), 4, "a discarded timer ran");
}

/// A panicking callback is caught, counted and handed to the panic handler; the thread that
/// ran it goes on with the next one, and later ticks still fire.
#[test]
fn a_panicking_callback_does_not_stop_the_timer_thread() {
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let (clock, service) = manual_with(TimerService::builder().worker_threads(0).on_panic(
        move |_| {
            h.fetch_add(1, Ordering::SeqCst);
        },
    ));
    let log: Log = Arc::default();
    service.schedule(MS, || panic!("a callback panics (expected in this test)"));
    for at in [1, 2, 3] {
        let l = log.clone();
        service.schedule(ms(at), move || record(&l, at));
    }
    advance(&clock, &service, MS);
    advance(&clock, &service, 2 * MS);
    let order: Vec<u64> = log.lock().unwrap().iter().map(|(ms, _)| *ms).collect();
    assert_eq!(order, [1, 2, 3]);
    let stats = service.stats();
    assert_eq!((stats.fired, stats.panicked), (4, 1));
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    assert_eq!(stats.lateness.count(), 4);
    assert!(format!("{service:?}").contains("workers: 0"));
}
