//! [`CronStream`]: the fire instants of a calendar schedule as an async stream, built on
//! [`Sleep`].

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use super::Sleep;
use crate::cron::Cron;
use crate::service::{ServiceRef, TimerService};
use crate::time::WallClock;

/// The fire instants of a [`Cron`] schedule, yielded as they come (as wall-clock
/// [`SystemTime`]s), under any executor. Made by [`cron_stream`] (on the default service) or
/// [`TimerService::cron_stream`] (on any service).
///
/// The wall clock it reads is the service's: its own clock when that is a wall clock (a
/// [`ManualWallClock`](crate::time::ManualWallClock) in tests), otherwise the
/// [`SystemClock`](crate::time::SystemClock), as for a
/// [`Recurrence::cron`](crate::service::Recurrence::cron) series.
///
/// * Each item is yielded once the wall clock reads at or after it — never early. The wait is
///   a [`Sleep`] on the service's clock until `now + (target − wall_now)`; a step of the wall
///   clock wakes the stream, which converts again (forward: due now; back: waits longer).
/// * A consumer that falls behind gets the late item once, then the next one still ahead
///   (missed items are skipped, as a calendar series with `MissedTickBehavior::Skip`).
/// * [`next`](Self::next) gives `None` once the schedule has no further run.
/// * `Send + Sync + Unpin`; dropping it cancels its timer.
///
/// ```
/// use std::task::{Context, Poll, Waker};
/// use std::time::Duration;
/// use tickwheel::cron::{jiff::{Timestamp, Zoned}, Cron};
/// use tickwheel::time::ManualWallClock;
/// use tickwheel::TimerService;
///
/// let start: Zoned = "2026-03-24T08:59:00[Europe/Paris]".parse().unwrap();
/// let clock = ManualWallClock::starting_at_zoned(&start);
/// let service = TimerService::builder().clock(clock.clone()).build().unwrap();
/// let tuesdays = Cron::new("0 9 * * TUE", "Europe/Paris").unwrap();
/// let mut stream = service.cron_stream(tuesdays);
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(stream.poll_next(&mut cx).is_pending());
/// clock.advance(Duration::from_secs(60));
/// service.settle();
/// let Poll::Ready(Some(at)) = stream.poll_next(&mut cx) else { panic!() };
/// assert_eq!(Timestamp::try_from(at).unwrap().to_string(), "2026-03-24T08:00:00Z");
/// ```
pub struct CronStream {
    cron: Cron,
    clock: Arc<dyn WallClock>,
    /// The wall-clock time of the next item; `None`: the schedule is over.
    target: Option<SystemTime>,
    sleep: Sleep<'static>,
    steps: Arc<StepSignal>,
    /// Keeps the step listener alive (the clock holds it weakly).
    _listener: Arc<dyn Fn() + Send + Sync>,
}

/// Set by a wall-clock step; wakes the last task that polled.
#[derive(Default)]
struct StepSignal {
    stepped: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl CronStream {
    pub(crate) fn new(service: ServiceRef, cron: Cron) -> CronStream {
        let clock = service.wall_clock();
        let steps = Arc::new(StepSignal::default());
        let weak: Weak<StepSignal> = Arc::downgrade(&steps);
        let listener: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(signal) = weak.upgrade() {
                signal.stepped.store(true, Ordering::Release);
                let waker = signal
                    .waker
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        });
        clock.subscribe_steps(Arc::downgrade(&listener));
        let target = cron.next_after_system(clock.wall_now());
        let mut stream = CronStream {
            cron,
            clock,
            target,
            sleep: Sleep::until(service, None),
            steps,
            _listener: listener,
        };
        stream.convert();
        stream
    }

    /// The schedule.
    pub fn cron(&self) -> &Cron {
        &self.cron
    }

    /// The wall-clock time of the next item (`None`: there is none).
    pub fn next_target(&self) -> Option<SystemTime> {
        self.target
    }

    /// Completes with the next fire instant, or `None` once the schedule has no further run.
    pub async fn next(&mut self) -> Option<SystemTime> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next fire instant: `Ready(Some(at))` once the wall clock reads at or after
    /// it, `Ready(None)` when the schedule is over, `Pending` with `cx`'s waker registered.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<SystemTime>> {
        loop {
            let Some(target) = self.target else {
                return Poll::Ready(None);
            };
            let wall_now = self.clock.wall_now();
            if wall_now >= target {
                let regular = self.cron.next_after_system(target);
                self.target = match regular {
                    Some(next) if next > wall_now => Some(next),
                    Some(_) => self.cron.next_after_system(wall_now),
                    None => None,
                };
                self.convert();
                return Poll::Ready(Some(target));
            }
            // Register for steps before looking at the flag, so none is missed.
            *self.steps.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            if self.steps.stepped.swap(false, Ordering::AcqRel) {
                self.convert();
            }
            if Pin::new(&mut self.sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The sleep is over: the wall clock normally shows the target now. If it was set
            // back meanwhile, convert again and wait on.
            if self.clock.wall_now() < target {
                self.convert();
            }
        }
    }

    /// Points the sleep at the current conversion of the target.
    fn convert(&mut self) {
        let deadline = self.target.map(|target| {
            let now = self.sleep.now();
            let ahead = target
                .duration_since(self.clock.wall_now())
                .unwrap_or_default();
            now.checked_add(ahead).unwrap_or(now)
        });
        self.sleep.reset_to(deadline);
    }
}

impl fmt::Debug for CronStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronStream")
            .field("cron", &self.cron)
            .field("next_target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A [`CronStream`] of `cron` on the default service, read on the
/// [`SystemClock`](crate::time::SystemClock): `cron_stream(Cron::new("0 9 * * TUE",
/// "Europe/Paris")?)`.
pub fn cron_stream(cron: Cron) -> CronStream {
    CronStream::new(TimerService::default_service().static_ref(), cron)
}
