//! `CronStream` on virtual wall time: items across a DST gap, never early, a wall-clock step
//! wakes the task, a clock set back waits longer, a clock set forward yields the late item
//! once and skips the rest.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, SystemTime};

use tickwheel::cron::Cron;
use tickwheel::future::CronStream;
use tickwheel::time::ManualWallClock;
use tickwheel::TimerService;

mod virtual_time;
use virtual_time::{manual_wall, wall, wall_text as text};

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Rig {
    clock: ManualWallClock,
    service: TimerService,
    wakes: Arc<CountingWaker>,
    waker: Waker,
}

fn rig(start: &str) -> Rig {
    let (clock, service) = manual_wall(start);
    let wakes = Arc::new(CountingWaker::default());
    let waker = Waker::from(wakes.clone());
    Rig {
        clock,
        service,
        wakes,
        waker,
    }
}

impl Rig {
    fn poll(&self, stream: &mut CronStream) -> Poll<Option<String>> {
        let mut cx = Context::from_waker(&self.waker);
        stream.poll_next(&mut cx).map(|o| o.map(text))
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
        self.service.settle();
    }
}

#[test]
fn items_come_at_their_instants_across_the_gap_and_never_early() {
    let rig = rig("2026-03-28T12:00:00Z");
    let cron = Cron::new("30 2 * * *", "Europe/Paris").unwrap();
    let mut stream = rig.service.cron_stream(cron);
    assert_eq!(stream.next_target(), Some(wall("2026-03-29T01:00:00Z")));
    let mut got = Vec::new();
    for _ in 0..(40 * 60) {
        // One minute at a time for 40 hours; a poll after each.
        match rig.poll(&mut stream) {
            Poll::Ready(Some(at)) => {
                assert_eq!(text(rig.clock.wall_now()), at, "yielded exactly on time");
                got.push(at);
            }
            Poll::Ready(None) => panic!("the schedule does not end"),
            Poll::Pending => {}
        }
        rig.advance(Duration::from_secs(60));
    }
    assert_eq!(got, ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]);
}

#[test]
fn the_timer_wakes_the_task_at_the_target() {
    let rig = rig("2026-05-10T10:59:00Z");
    let mut stream = rig.service.cron_stream(Cron::utc("0 * * * *").unwrap());
    assert!(rig.poll(&mut stream).is_pending());
    rig.advance(Duration::from_secs(59));
    assert_eq!(rig.wakes.0.load(Ordering::SeqCst), 0, "not woken early");
    assert!(rig.poll(&mut stream).is_pending());
    rig.advance(Duration::from_secs(1));
    assert!(
        rig.wakes.0.load(Ordering::SeqCst) >= 1,
        "woken at the target"
    );
    assert_eq!(
        rig.poll(&mut stream),
        Poll::Ready(Some("2026-05-10T11:00:00Z".into()))
    );
}

#[test]
fn a_clock_set_back_waits_longer() {
    let rig = rig("2026-05-10T10:30:00Z");
    let mut stream = rig.service.cron_stream(Cron::utc("0 * * * *").unwrap());
    assert!(rig.poll(&mut stream).is_pending());
    rig.clock.step_back(Duration::from_secs(3600)); // wall 09:30
    assert!(
        rig.wakes.0.load(Ordering::SeqCst) >= 1,
        "a step wakes the task"
    );
    assert!(rig.poll(&mut stream).is_pending());
    rig.advance(Duration::from_secs(1800)); // 10:00, where the old deadline was
    assert!(rig.poll(&mut stream).is_pending(), "nothing early");
    rig.advance(Duration::from_secs(3599)); // 10:59:59
    assert!(rig.poll(&mut stream).is_pending(), "nothing early");
    rig.advance(Duration::from_secs(1));
    assert_eq!(
        rig.poll(&mut stream),
        Poll::Ready(Some("2026-05-10T11:00:00Z".into()))
    );
}

#[test]
fn a_clock_set_forward_yields_the_late_item_once_then_skips() {
    let rig = rig("2026-05-10T10:30:00Z");
    let mut stream = rig.service.cron_stream(Cron::utc("0 * * * *").unwrap());
    assert!(rig.poll(&mut stream).is_pending());
    let before = rig.wakes.0.load(Ordering::SeqCst);
    rig.clock.step_forward(Duration::from_secs(86_400)); // 2026-05-11T10:30
    assert!(
        rig.wakes.0.load(Ordering::SeqCst) > before,
        "a step wakes the task"
    );
    assert_eq!(
        rig.poll(&mut stream),
        Poll::Ready(Some("2026-05-10T11:00:00Z".into()))
    );
    assert_eq!(stream.next_target(), Some(wall("2026-05-11T11:00:00Z")));
    assert!(rig.poll(&mut stream).is_pending());
}

#[test]
fn a_schedule_that_ends_ends_the_stream() {
    let rig = rig("2026-12-31T23:59:59Z");
    let mut stream = rig
        .service
        .cron_stream(Cron::utc("0 0 0 1 1 * 2027").unwrap());
    rig.advance(Duration::from_secs(1));
    let item = futures::executor::block_on(stream.next());
    assert_eq!(item.map(text).as_deref(), Some("2027-01-01T00:00:00Z"));
    assert_eq!(futures::executor::block_on(stream.next()), None);
}

#[test]
fn the_free_function_reads_the_system_clock() {
    let before = SystemTime::now();
    let stream = tickwheel::future::cron_stream(Cron::utc("* * * * *").unwrap());
    let next = stream.next_target().expect("every minute has a next run");
    assert!(next > before, "{next:?} is not after {before:?}");
    assert!(next <= SystemTime::now() + Duration::from_secs(60));
}
