//! The service on the real clock: behaviour only (never early, exactly once), no timing
//! tolerances — speed and lateness are measured in `benches/service.rs` and by
//! `tickwheel bench --workloads w4` and `tickwheel demo`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::service::{QueueFlavor, TimerService};

#[test]
fn callbacks_fire_on_the_real_clock_never_early() {
    let service = TimerService::builder()
        .resolution(Duration::from_micros(100))
        .worker_threads(2)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let mut deadlines = Vec::new();
    for i in 0..200u64 {
        let delay = Duration::from_micros(i * 37 % 5_000);
        let due = Instant::now() + delay;
        deadlines.push(due);
        let tx = tx.clone();
        service.schedule(delay, move || tx.send((i, Instant::now())).unwrap());
    }
    drop(tx);
    let mut seen = [false; 200];
    for (i, at) in rx.iter().take(200) {
        assert!(at >= deadlines[i as usize], "timer {i} fired early");
        assert!(
            !std::mem::replace(&mut seen[i as usize], true),
            "timer {i} fired twice"
        );
    }
    assert!(seen.iter().all(|s| *s));
}

#[test]
fn wait_blocks_until_the_deadline() {
    let service = TimerService::new().unwrap();
    let start = Instant::now();
    let handle = service.schedule(Duration::from_millis(3), || {});
    handle.wait();
    assert!(start.elapsed() >= Duration::from_millis(3));
    assert!(!handle.is_pending());
}

#[test]
fn a_new_earliest_timer_wakes_the_sleeping_timer_thread() {
    let service = TimerService::new().unwrap();
    let far = service.schedule(Duration::from_secs(3600), || {});
    // Give the timer thread time to go to sleep towards the far deadline (no correctness
    // depends on this; it only makes the wake-up path the one exercised).
    thread::sleep(Duration::from_millis(2));
    let (tx, rx) = mpsc::channel();
    service.schedule(Duration::from_millis(1), move || tx.send(()).unwrap());
    rx.recv().unwrap();
    assert!(far.cancel());
}

#[test]
fn schedule_and_cancel_race_from_many_threads() {
    let service = Arc::new(
        TimerService::builder()
            .queue(QueueFlavor::Wheel)
            .resolution(Duration::from_micros(10))
            .build()
            .unwrap(),
    );
    let ran = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (service, ran, cancelled) = (service.clone(), ran.clone(), cancelled.clone());
            thread::spawn(move || {
                for i in 0..5_000u64 {
                    let r = ran.clone();
                    let h =
                        service.schedule(Duration::from_micros((i * 13 + t) % 300), move || {
                            r.fetch_add(1, Ordering::SeqCst);
                        });
                    if i % 2 == 0 && h.cancel() {
                        cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Everything not cancelled is due within 300 µs; settle waits until it has run.
    thread::sleep(Duration::from_millis(1));
    service.settle();
    let (ran, cancelled) = (ran.load(Ordering::SeqCst), cancelled.load(Ordering::SeqCst));
    assert_eq!(
        ran + cancelled,
        20_000,
        "every timer ran or was cancelled, exactly once"
    );
    let stats = service.stats();
    assert_eq!(stats.fired as usize, ran);
    assert_eq!(stats.cancelled as usize, cancelled);
}

/// The timer thread asks for 1 ns of timer slack, so its sleeps to a tick's start are not
/// stretched by the kernel's default 50 µs (`driver.rs`, `precise_sleeps`).
#[cfg(target_os = "linux")]
#[test]
fn the_timer_thread_sleeps_with_minimal_timer_slack() {
    let service = TimerService::builder()
        .thread_name("slackprobe")
        .worker_threads(1)
        .build()
        .unwrap();
    // Once a timer has fired, the timer thread is past its setup.
    service.schedule(Duration::ZERO, || {}).wait();
    // Thread names are cut to 15 bytes in `comm`.
    let timer_tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|task| task.unwrap().path())
        .find(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim() == "slackprobe-time")
        })
        .and_then(|task| Some(task.file_name()?.to_str()?.to_owned()))
        .expect("the timer thread is running");
    let slack = std::fs::read_to_string(format!("/proc/{timer_tid}/timerslack_ns")).unwrap();
    assert_eq!(slack.trim(), "1");
    // It is the timer thread's own setting; the thread that built the service keeps its own.
    assert_ne!(
        std::fs::read_to_string("/proc/self/timerslack_ns")
            .unwrap()
            .trim(),
        "1"
    );
    service.shutdown();
}
