//! Wall-clock time: the [`WallClock`] trait, the real [`SystemClock`] and the virtual
//! [`ManualWallClock`].
//!
//! See [`WallClock`] for the two timelines and how a step of the wall clock is noticed.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::{Clock, ManualClock};

/// A clock with a wall-clock reading that may be set (stepped) forward or back.
///
/// Its [`Clock::now`] is monotonic as every clock's; [`wall_now`](Self::wall_now) is civil
/// time and may jump. Implementations call the step listeners after every jump of the wall
/// clock relative to the monotonic one.
///
/// # Two timelines
///
/// Services count deadlines on a monotonic timeline (a [`Clock`]: it never goes back).
/// Calendar schedules name *wall-clock* times, and the wall clock can be set — by NTP, by an
/// administrator, by a VM resumed on another host — forward or back. A `WallClock` is both:
/// a monotonic [`Clock`] for the service and a [`wall_now`](WallClock::wall_now) reading for
/// the calendar, plus a way to hear about **steps** of the wall clock
/// ([`subscribe_steps`](WallClock::subscribe_steps)).
///
/// Users of wall time (recurring calendar series, `CronStream`) turn a wall-clock target `W`
/// into a monotonic deadline `now + (W − wall_now)`. After a step that conversion is stale:
/// on every step notification they convert again, so a clock set forward fires what is now
/// due and a clock set back fires nothing early. They also check `wall_now >= W` when their
/// timer fires, so a step that was not (yet) reported never makes them early either.
///
/// # How a step is noticed
///
/// * [`SystemClock`] on Linux: one process-wide thread blocks in `read` on a `timerfd`
///   armed on `CLOCK_REALTIME` with `TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET` at a far
///   future instant. The kernel cancels the timer — the `read` fails with `ECANCELED` —
///   whenever the realtime clock is set, and also on resume from suspend. The thread then
///   calls every listener and re-arms. No polling, no CPU while nothing happens.
/// * [`SystemClock`] elsewhere (or if the `timerfd` cannot be made): the same thread checks
///   every [`STEP_POLL`] whether `wall − monotonic` moved by more than [`STEP_THRESHOLD`],
///   and calls the listeners when it did. Smaller steps go unnoticed until the next check of a
///   target at fire time (never early, late by at most the step).
/// * [`ManualWallClock`]: [`set_wall`](ManualWallClock::set_wall) and friends call the
///   listeners synchronously, before they return.
///
/// The watcher thread is started by the first subscription and runs for the life of the
/// process (like the default timer service).
pub trait WallClock: Clock {
    /// The current wall-clock time.
    fn wall_now(&self) -> SystemTime;

    /// Asks the clock to call `listener` after every step of its wall-clock time (the wall
    /// clock was set, or the machine resumed). Listeners that have been dropped are forgotten.
    fn subscribe_steps(&self, listener: Weak<dyn Fn() + Send + Sync>);
}

/// How often the portable step check looks at the clocks.
pub const STEP_POLL: Duration = Duration::from_millis(500);

/// The smallest change of `wall − monotonic` the portable step check reports as a step (NTP
/// slewing moves it by at most 0.5 ms a second, far below this).
pub const STEP_THRESHOLD: Duration = Duration::from_millis(50);

/// A list of step listeners.
#[derive(Default)]
struct Listeners(Mutex<Vec<Weak<dyn Fn() + Send + Sync>>>);

impl Listeners {
    fn add(&self, listener: Weak<dyn Fn() + Send + Sync>) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|l| l.strong_count() > 0);
        all.push(listener);
    }

    /// Calls every live listener, outside the lock (a listener may subscribe or read clocks).
    fn notify(&self) {
        let live: Vec<_> = {
            let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            all.retain(|l| l.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        for listener in live {
            listener();
        }
    }
}

/// The real clocks: `Instant::now()` as the monotonic reading, `SystemTime::now()` as the
/// wall-clock one, with steps reported by a `timerfd` on Linux or a periodic check elsewhere
/// (see [how a step is noticed](WallClock#how-a-step-is-noticed)).
///
/// As a service's [`Clock`] it is the same as [`MonotonicClock`](super::MonotonicClock).
///
/// ```
/// use tickwheel::time::{SystemClock, WallClock};
///
/// let wall = SystemClock.wall_now();
/// assert!(wall > std::time::UNIX_EPOCH);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn as_wall_clock(&self) -> Option<Arc<dyn WallClock>> {
        Some(Arc::new(SystemClock))
    }
}

impl WallClock for SystemClock {
    fn wall_now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn subscribe_steps(&self, listener: Weak<dyn Fn() + Send + Sync>) {
        system_listeners().add(listener);
    }
}

/// The process-wide listeners of [`SystemClock`] steps; the first call starts the watcher.
fn system_listeners() -> &'static Listeners {
    static LISTENERS: OnceLock<Listeners> = OnceLock::new();
    static WATCHER: OnceLock<()> = OnceLock::new();
    let listeners = LISTENERS.get_or_init(Listeners::default);
    WATCHER.get_or_init(|| {
        // If the thread cannot be spawned, steps are still caught at fire time (never early).
        let _ = std::thread::Builder::new()
            .name("tickwheel-wall-steps".into())
            .spawn(move || watch_steps(listeners));
    });
    listeners
}

fn watch_steps(listeners: &'static Listeners) {
    #[cfg(target_os = "linux")]
    {
        // Returns only if the timerfd cannot be used; then poll.
        linux::watch(listeners);
    }
    poll_steps(listeners);
}

/// The portable step check: `wall − monotonic`, every [`STEP_POLL`].
fn poll_steps(listeners: &'static Listeners) {
    let base = Instant::now();
    let offset = || -> i128 {
        let wall = match SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        wall - base.elapsed().as_nanos() as i128
    };
    let mut last = offset();
    loop {
        std::thread::sleep(STEP_POLL);
        let now = offset();
        if (now - last).unsigned_abs() > STEP_THRESHOLD.as_nanos() {
            listeners.notify();
        }
        last = now;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use rustix::io::Errno;
    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };

    use super::Listeners;

    /// Blocks on a cancel-on-set `timerfd`, calling the listeners on every wall-clock step.
    /// Returns if the fd cannot be created or armed (the caller falls back to polling).
    pub(super) fn watch(listeners: &Listeners) {
        let Ok(fd) = timerfd_create(TimerfdClockId::Realtime, TimerfdFlags::CLOEXEC) else {
            return;
        };
        // Far in the future but well inside every time_t: year ~2255.
        let far = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: 9_000_000_000,
                tv_nsec: 0,
            },
        };
        let flags = TimerfdTimerFlags::ABSTIME | TimerfdTimerFlags::CANCEL_ON_SET;
        loop {
            if timerfd_settime(&fd, flags, &far).is_err() {
                return;
            }
            let mut count = [0u8; 8];
            match rustix::io::read(&fd, &mut count) {
                Err(Errno::CANCELED) => listeners.notify(),
                Err(Errno::INTR) | Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

/// `t + d`, or the last instant [`SystemTime`] can represent when that is past it (the
/// platform sets that bound; std names none).
fn saturating_add(t: SystemTime, d: Duration) -> SystemTime {
    saturating(t, d, SystemTime::checked_add)
}

/// `t - d`, or the first instant [`SystemTime`] can represent when that is before it.
fn saturating_sub(t: SystemTime, d: Duration) -> SystemTime {
    saturating(t, d, SystemTime::checked_sub)
}

/// Moves `t` by `d` with `step`, or as far as `step` goes: the step halves each time it
/// fails, so the bound is found to the nanosecond in a few hundred steps at most.
fn saturating(
    t: SystemTime,
    d: Duration,
    step: fn(&SystemTime, Duration) -> Option<SystemTime>,
) -> SystemTime {
    if let Some(moved) = step(&t, d) {
        return moved;
    }
    let (mut at, mut by) = (t, d / 2);
    while !by.is_zero() {
        match step(&at, by) {
            Some(moved) => at = moved,
            None => by /= 2,
        }
    }
    at
}

/// Virtual wall-clock time for tests: a [`ManualClock`] (the monotonic timeline, moved with
/// [`advance`](Self::advance)) plus a wall-clock reading that moves with it and can be **set**
/// to any time — forward or back — with [`set_wall`](Self::set_wall),
/// [`step_forward`](Self::step_forward), [`step_back`](Self::step_back) or, with the `cron`
/// feature, to a civil date-time in any zone with [`set_zoned`](Self::set_zoned). Setting the
/// wall clock calls the step listeners before returning; it does not move the monotonic
/// clock (as on a real machine, where setting the date does not move `CLOCK_MONOTONIC`).
///
/// Build the service on it (it is a virtual [`Clock`]: the service drains on every
/// `advance`) and give the same clock to the calendar schedules. Clones share one time.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use tickwheel::time::{ManualWallClock, WallClock};
///
/// let clock = ManualWallClock::starting_at(UNIX_EPOCH + Duration::from_secs(1_000_000));
/// clock.advance(Duration::from_secs(10));
/// assert_eq!(clock.wall_now(), UNIX_EPOCH + Duration::from_secs(1_000_010));
/// clock.step_back(Duration::from_secs(3600)); // someone set the clock back an hour
/// assert_eq!(clock.wall_now(), UNIX_EPOCH + Duration::from_secs(1_000_010 - 3600));
/// ```
#[derive(Clone)]
pub struct ManualWallClock {
    monotonic: ManualClock,
    inner: Arc<WallInner>,
}

struct WallInner {
    /// The wall-clock time when the monotonic clock had moved by the `Duration` (its
    /// `elapsed`): the wall clock reads that time plus what the monotonic clock moved since.
    mark: Mutex<(SystemTime, Duration)>,
    steps: Listeners,
}

impl ManualWallClock {
    /// A clock whose wall time reads `wall` (its monotonic time starts at the real current
    /// instant and then moves only when told).
    pub fn starting_at(wall: SystemTime) -> ManualWallClock {
        ManualWallClock {
            monotonic: ManualClock::new(),
            inner: Arc::new(WallInner {
                mark: Mutex::new((wall, Duration::ZERO)),
                steps: Listeners::default(),
            }),
        }
    }

    /// The monotonic half (a [`ManualClock`] sharing this clock's time).
    pub fn monotonic(&self) -> &ManualClock {
        &self.monotonic
    }

    /// Moves time forward by `by`: the monotonic and the wall clock both, with no step.
    /// Notifies subscribed services as [`ManualClock::advance`] does.
    pub fn advance(&self, by: Duration) {
        self.monotonic.advance(by);
    }

    /// Sets the wall clock to `to` (earlier or later than now), leaving the monotonic clock
    /// where it is, and calls the step listeners.
    pub fn set_wall(&self, to: SystemTime) {
        *self.inner.mark.lock().unwrap_or_else(|p| p.into_inner()) = (to, self.monotonic.elapsed());
        self.inner.steps.notify();
    }

    /// Sets the wall clock `by` ahead ([`set_wall`](Self::set_wall)), at most to the last
    /// instant [`SystemTime`] can represent.
    pub fn step_forward(&self, by: Duration) {
        self.set_wall(saturating_add(self.wall_now(), by));
    }

    /// Sets the wall clock `by` back ([`set_wall`](Self::set_wall)), at most to the first
    /// instant [`SystemTime`] can represent.
    pub fn step_back(&self, by: Duration) {
        self.set_wall(saturating_sub(self.wall_now(), by));
    }

    /// The current wall-clock time (also [`WallClock::wall_now`]). Moved past the last
    /// instant [`SystemTime`] can represent, it reads that instant.
    pub fn wall_now(&self) -> SystemTime {
        let (wall, at) = *self.inner.mark.lock().unwrap_or_else(|p| p.into_inner());
        saturating_add(wall, self.monotonic.elapsed().saturating_sub(at))
    }

    /// The current monotonic instant (also [`Clock::now`]).
    pub fn now(&self) -> Instant {
        self.monotonic.now()
    }
}

#[cfg(feature = "cron")]
impl ManualWallClock {
    /// A clock whose wall time reads the instant of `at`, for example
    /// `"2026-03-29T01:59:00[Europe/Paris]".parse()?`.
    ///
    /// ```
    /// use tickwheel::cron::jiff::Zoned;
    /// use tickwheel::time::ManualWallClock;
    ///
    /// let at: Zoned = "2026-03-29T01:59:00[Europe/Paris]".parse().unwrap();
    /// let clock = ManualWallClock::starting_at_zoned(&at);
    /// clock.advance(std::time::Duration::from_secs(60));
    /// let paris = at.time_zone();
    /// assert_eq!(clock.zoned(paris).to_string(), "2026-03-29T03:00:00+02:00[Europe/Paris]");
    /// ```
    pub fn starting_at_zoned(at: &jiff::Zoned) -> ManualWallClock {
        ManualWallClock::starting_at(SystemTime::from(at.timestamp()))
    }

    /// Sets the wall clock to the instant of `at` ([`set_wall`](Self::set_wall)).
    pub fn set_zoned(&self, at: &jiff::Zoned) {
        self.set_wall(SystemTime::from(at.timestamp()));
    }

    /// A clock whose wall time reads `at` (a jiff `Timestamp`, as [`Cron`](crate::cron::Cron)
    /// speaks it).
    pub fn starting_at_timestamp(at: jiff::Timestamp) -> ManualWallClock {
        ManualWallClock::starting_at(SystemTime::from(at))
    }

    /// The current wall-clock time as a jiff `Timestamp`, to ask a
    /// [`Cron`](crate::cron::Cron) about; `None` for a wall time beyond jiff's range
    /// (years -9999 to 9999).
    ///
    /// ```
    /// use tickwheel::cron::{jiff::Timestamp, Cron};
    /// use tickwheel::time::ManualWallClock;
    ///
    /// let at: Timestamp = "2026-03-20T00:00:00Z".parse().unwrap();
    /// let clock = ManualWallClock::starting_at_timestamp(at);
    /// let hourly = Cron::utc("0 * * * *").unwrap();
    /// let next = hourly.next_after(clock.timestamp().unwrap()).unwrap();
    /// assert_eq!(next.to_string(), "2026-03-20T01:00:00Z");
    /// ```
    pub fn timestamp(&self) -> Option<jiff::Timestamp> {
        jiff::Timestamp::try_from(self.wall_now()).ok()
    }

    /// The current wall-clock time in the zone `tz` (the Unix epoch for a wall time beyond
    /// jiff's range: see [`timestamp`](Self::timestamp)).
    pub fn zoned(&self, tz: &jiff::tz::TimeZone) -> jiff::Zoned {
        let ts = jiff::Timestamp::try_from(self.wall_now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        jiff::Zoned::new(ts, tz.clone())
    }
}

impl Clock for ManualWallClock {
    #[inline]
    fn now(&self) -> Instant {
        self.monotonic.now()
    }

    fn subscribe(&self, listener: Weak<dyn Fn() + Send + Sync>) -> bool {
        self.monotonic.subscribe(listener)
    }

    fn as_wall_clock(&self) -> Option<Arc<dyn WallClock>> {
        Some(Arc::new(self.clone()))
    }
}

impl WallClock for ManualWallClock {
    fn wall_now(&self) -> SystemTime {
        ManualWallClock::wall_now(self)
    }

    fn subscribe_steps(&self, listener: Weak<dyn Fn() + Send + Sync>) {
        self.inner.steps.add(listener);
    }
}

impl fmt::Debug for ManualWallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualWallClock")
            .field("wall", &self.wall_now())
            .field("monotonic", &self.monotonic)
            .finish()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod linux_tests {
    use rustix::io::Errno;
    use rustix::time::{
        timerfd_create, timerfd_gettime, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };

    /// The watcher's arming is accepted by the kernel and stays quiet while nobody sets the
    /// clock. (Setting the realtime clock to see `ECANCELED` would step the whole machine's
    /// clock, so the notification itself is not exercised here.)
    #[test]
    fn cancel_on_set_timer_arms_and_stays_quiet() {
        let fd = timerfd_create(
            TimerfdClockId::Realtime,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )
        .unwrap();
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let far = Itimerspec {
            it_interval: zero,
            it_value: Timespec {
                tv_sec: 9_000_000_000,
                tv_nsec: 0,
            },
        };
        let flags = TimerfdTimerFlags::ABSTIME | TimerfdTimerFlags::CANCEL_ON_SET;
        timerfd_settime(&fd, flags, &far).unwrap();
        let armed = timerfd_gettime(&fd).unwrap();
        assert!(armed.it_value.tv_sec > 0, "armed");
        let mut count = [0u8; 8];
        assert_eq!(rustix::io::read(&fd, &mut count), Err(Errno::AGAIN));
    }
}
