//! Delayed tasks on a [`TimerService`]: an online shop that cancels unpaid orders after a
//! while, sends reminders, and forgets both when the customer pays.
//!
//! ```text
//! cargo run -p tickwheel --example delayed_tasks
//! ```
//!
//! Delays are in milliseconds here so that the example finishes quickly; a real shop would
//! use minutes. `tickwheel demo` schedules millions of such tasks with a progress bar.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickwheel::{TimerHandle, TimerService};

/// What a task reports back to the main thread when it runs.
#[derive(Debug)]
enum Event {
    Remind(u32),
    CancelOrder(u32),
}

/// The timers pending for one order.
struct Order {
    remind: TimerHandle,
    cancel: TimerHandle,
}

fn main() -> std::io::Result<()> {
    let service = TimerService::builder()
        .resolution(Duration::from_millis(1))
        .worker_threads(2)
        .build()?;
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();

    // Every order gets a reminder after 100 ms and is cancelled after 200 ms unless paid.
    // A closure capturing a `Sender` and an id is stored inline: no allocation per task.
    let mut orders = HashMap::new();
    for id in 1..=5u32 {
        let (t1, t2) = (tx.clone(), tx.clone());
        let remind = service.schedule(Duration::from_millis(100), move || {
            let _ = t1.send(Event::Remind(id));
        });
        let cancel = service.schedule(Duration::from_millis(200), move || {
            let _ = t2.send(Event::CancelOrder(id));
        });
        orders.insert(id, Order { remind, cancel });
    }
    drop(tx);

    // Order 2 is paid at once: neither of its tasks will run.
    let paid = orders.remove(&2).expect("order 2 exists");
    assert!(paid.remind.cancel() && paid.cancel.cancel());

    // Order 4's customer asked for more time: push its cancellation back.
    assert!(orders[&4].cancel.reset(Duration::from_millis(300)));

    // Order 5 is paid after its reminder went out (`wait` returns once it has fired).
    orders[&5].remind.wait();
    let late_payer = orders.remove(&5).expect("order 5 exists");
    assert!(!late_payer.remind.cancel()); // too late: it fired
    assert!(late_payer.cancel.cancel()); // still pending: now it never runs

    // The receiver ends when every task that could still send has run (or was dropped).
    for event in rx {
        let at = start.elapsed().as_millis();
        match event {
            Event::Remind(id) => println!("{at:>4} ms  reminder sent for order {id}"),
            Event::CancelOrder(id) => {
                orders.remove(&id);
                println!("{at:>4} ms  order {id} cancelled, unpaid");
            }
        }
        if orders.is_empty() {
            break;
        }
    }

    let stats = service.stats();
    println!(
        "fired {}, cancelled {}, still pending {}",
        stats.fired, stats.cancelled, stats.pending
    );
    Ok(())
}
