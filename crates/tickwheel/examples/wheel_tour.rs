//! A tour of the hierarchical [`Wheel`]: connection idle timeouts refreshed by traffic, a
//! retransmit timer with backoff, far and "never" deadlines, and expiry in (deadline,
//! insertion) order.
//!
//! ```text
//! cargo run --release -p tickwheel --example wheel_tour
//! ```
//!
//! One tick is one millisecond here; the wheel itself only counts ticks.

use tickwheel::queue::wheel::{LEVELS, LEVEL_BITS};
use tickwheel::{TimerKey, TimerQueue, Wheel};

#[derive(Debug)]
enum Timer {
    Idle { conn: u32 },
    Retransmit { conn: u32, attempt: u32 },
    Report,
}

fn main() {
    let mut wheel: Wheel<Timer> = Wheel::new();
    println!(
        "a Wheel has {LEVELS} levels of {} slots: every u64 tick is reachable, none clamped",
        1u32 << LEVEL_BITS
    );

    // Three connections, each with a 30 s idle timeout.
    let idle: Vec<TimerKey> = (0..3)
        .map(|conn| wheel.insert(30_000, Timer::Idle { conn }))
        .collect();
    wheel.insert(
        200,
        Timer::Retransmit {
            conn: 1,
            attempt: 1,
        },
    );
    wheel.insert(86_400_000, Timer::Report); // a day away: a higher level, same O(1)
    let never = wheel.insert(u64::MAX, Timer::Report); // stored; fires only at u64::MAX
    println!(
        "{} timers pending; next_expiration() = {:?}, a lower bound: the start of the \
         level-1 slot that holds tick 200",
        wheel.len(),
        wheel.next_expiration()
    );

    // Advance one tick at a time, as a driver would. Traffic on connection 0 every 10 s
    // refreshes its idle timer (reset is O(1)).
    let mut now = 0;
    while now < 40_000 {
        now += 1;
        // `poll_expired` rather than `drain_expired`: the loop inserts while it drains.
        while let Some((key, timer)) = wheel.poll_expired(now) {
            match timer {
                Timer::Idle { conn } => {
                    println!("tick {now:>6}: conn {conn} idle for 30 s, close it ({key:?})")
                }
                Timer::Retransmit { conn, attempt } => {
                    println!("tick {now:>6}: retransmit #{attempt} on conn {conn}");
                    if attempt < 3 {
                        let at = now + 200 * (1 << attempt); // exponential backoff
                        let next = Timer::Retransmit {
                            conn,
                            attempt: attempt + 1,
                        };
                        wheel.insert(at, next);
                    }
                }
                Timer::Report => println!("tick {now:>6}: report"),
            }
        }
        if now % 10_000 == 0 && now <= 30_000 {
            assert!(wheel.reset(idle[0], now + 30_000));
            let moved = wheel.deadline(idle[0]);
            println!("tick {now:>6}: traffic on conn 0, its idle timeout moves to {moved:?}");
        }
    }

    // Connection 0 closes normally: its timer is removed and its key is stale from now on.
    let removed = wheel.remove(idle[0]);
    println!("tick {now:>6}: conn 0 closed normally, removed {removed:?}");
    assert!(wheel.remove(idle[0]).is_none() && !wheel.reset(idle[0], 0));

    // A jump across almost the whole u64 range costs a handful of bitmap scans.
    let far = u64::MAX - 1;
    for (_, timer) in wheel.drain_expired(far) {
        println!("jumped to tick {far}: fired {timer:?}");
    }
    let left = wheel.deadline(never);
    println!(
        "still pending: {} (the u64::MAX timer, deadline {left:?})",
        wheel.len()
    );
}
