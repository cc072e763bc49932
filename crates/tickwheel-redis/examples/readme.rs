//! The README's producer and worker, run against a private redis-server this example starts
//! (so it needs `redis-server` installed, nothing else).
//!
//! `cargo run -p tickwheel-redis --example readme`

use std::time::Duration;

use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Outcome, Producer, RunAt, Worker};

fn main() -> Result<(), tickwheel_redis::Error> {
    let server = RedisServer::start()?;
    let url = server.url();

    // --- the README's code, with `url` in place of "redis://127.0.0.1:6379/" ---
    let config = Config::new(url.as_str(), "orders");

    // Producer: `Ok` means stored (and, with `appendfsync always`, on disk).
    let mut producer = Producer::connect(&config)?;
    producer.schedule(
        "cancel-order-42",
        RunAt::After(Duration::from_millis(300)),
        b"order 42",
    )?;
    producer.schedule(
        "remind-7",
        RunAt::After(Duration::from_secs(3600)),
        b"reminder",
    )?;
    producer.reschedule("remind-7", RunAt::After(Duration::from_millis(100)))?;
    producer.schedule("retry-9", RunAt::After(Duration::from_secs(60)), b"retry")?;
    assert!(producer.cancel("retry-9")?); // true: it will not be delivered

    // Worker: any number of them, in any processes; each task reaches one handler at its
    // run-at instant (at least once: de-duplicate on id + version + attempt if it matters).
    let mut worker = Worker::connect(&config)?;
    let stop = worker.stop_handle();
    let mut delivered = 0;
    worker.run(|task| {
        println!(
            "{} due at {:?}, attempt {}",
            task.id,
            task.due(),
            task.attempt
        );
        delivered += 1;
        if delivered == 2 {
            stop.stop(); // an example stops after its two tasks; a service runs on
        }
        Outcome::Ack
    })?;
    // --- end ---

    assert!(producer.is_empty()?);
    Ok(())
}
