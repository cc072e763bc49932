//! Recurring callbacks: [`TimerService::schedule_recurring`] runs a callback on a
//! [`Recurrence`] — fixed rate, fixed delay or (feature `cron`) a calendar — until its
//! [`RecurringHandle`] cancels the series.
//!
//! The rules are documented on [`Recurrence`].

use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc as StdArc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::callback::Callback;
use super::core::AtCap;
use super::state::ServiceState;
use super::{TimerHandle, TimerService};
use crate::sync::Arc;
#[cfg(feature = "cron")]
use crate::time::WallClock;
use crate::time::{MissedTickBehavior, NEVER};

/// When a recurring series runs: a period (fixed rate or fixed delay) or a calendar, and what
/// to do about missed runs and overlap.
///
/// # Rules
///
/// * **One timer at a time.** A series keeps one one-shot timer in the service's queues, for
///   its next run. When it fires, a worker runs the callback and then arms the next timer.
/// * **No overlap** (default): a series' runs never overlap. The next run is computed when
///   the current one returns, so a callback slower than its period delays the next start;
///   what happens to the runs it missed is the [`MissedTickBehavior`], with the same
///   formulas as [`Interval`](crate::future::Interval):
///   `Burst` (default for periods) starts the missed runs back to back until caught up,
///   `Delay` restarts the period from the late run's end, `Skip` (default for calendars) goes
///   on with the next run of the original schedule still ahead.
///   With [`Recurrence::allow_overlap`] a fixed-rate or calendar series arms its next timer
///   when a run *starts*, so runs may overlap on different workers.
/// * **Fixed rate** ([`Recurrence::every`]): runs at `start + k·period` (the first at
///   `start`, by default one period from now). **Fixed delay** ([`Recurrence::fixed_delay`]):
///   each run starts `period` after the previous one *returned*.
/// * **Calendar** ([`Recurrence::cron`], feature `cron`): runs at the fire instants of a
///   [`Cron`](crate::cron::Cron), read on a [`WallClock`]: the one [`Recurrence::wall_clock`]
///   names, else the service's own clock when it is one (a
///   [`ManualWallClock`](crate::time::ManualWallClock), see
///   [`Clock::as_wall_clock`](crate::time::Clock::as_wall_clock)), else
///   [`SystemClock`](crate::time::SystemClock). The first run is the first fire instant after now,
///   or at or after [`Recurrence::starting_at`] when that is later. A wall-clock target `W` is
///   turned into a deadline `now + (W − wall_now)` on the service's clock. The series listens for
///   steps of the wall clock and converts again on each one, so a clock set forward runs what is
///   now due (then follows the missed-run policy) and a clock set back runs nothing early; when its
///   timer fires it checks `wall_now >= W` again and waits for the rest if not. Runs the series
///   already made are never repeated after a step back: it goes on from the last target it ran. The
///   wall clock must advance with the service's clock (give a
///   [`ManualWallClock`](crate::time::ManualWallClock) to both in tests).
/// * **Cancel** ([`RecurringHandle::cancel`]) returns `true` exactly when this call ended a
///   live series: no run starts after it returns. A run already started finishes (and arms
///   nothing). A run and a cancel are ordered by the series' lock: the run starts only if
///   the series is still live when its timer is taken. Dropping the handle does **not**
///   cancel.
/// * **Panics** in the callback are caught, the series goes on, and the panic is passed on
///   to the worker, which counts it in [`Stats::panicked`](super::Stats::panicked).
/// * **Shutdown** discards the pending timer: the series ends.
/// * A zero period is one tick of the service's resolution. A period so long that a run's
///   instant is not representable (`Duration::MAX`), or lies past the service's tick range
///   (beyond `u64::MAX` ticks from its start), ends the series instead of running it.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::service::Recurrence;
/// use tickwheel::MissedTickBehavior;
///
/// let every_second = Recurrence::every(Duration::from_secs(1))
///     .missed_tick_behavior(MissedTickBehavior::Skip);
/// let after_each = Recurrence::fixed_delay(Duration::from_millis(250));
/// # let _ = (every_second, after_each);
/// ```
#[derive(Clone, Debug)]
pub struct Recurrence {
    kind: Kind,
    missed: Option<MissedTickBehavior>,
    overlap: bool,
}

#[derive(Clone, Debug)]
enum Kind {
    Rate {
        period: Duration,
        start: Option<Instant>,
    },
    Delay {
        period: Duration,
        start: Option<Instant>,
    },
    #[cfg(feature = "cron")]
    Calendar {
        cron: Box<crate::cron::Cron>,
        /// `None`: the service's wall clock (see [`Recurrence::cron`]).
        clock: Option<StdArc<dyn WallClock>>,
        start: Option<Instant>,
    },
}

impl Recurrence {
    /// Fixed rate: runs at `start + k·period`, the first run one period from now (see
    /// [`starting_at`](Self::starting_at)).
    pub fn every(period: Duration) -> Recurrence {
        Recurrence {
            kind: Kind::Rate {
                period,
                start: None,
            },
            missed: None,
            overlap: false,
        }
    }

    /// Fixed delay: each run starts `period` after the previous one returned; the first one
    /// period from now (see [`starting_at`](Self::starting_at)).
    pub fn fixed_delay(period: Duration) -> Recurrence {
        Recurrence {
            kind: Kind::Delay {
                period,
                start: None,
            },
            missed: None,
            overlap: false,
        }
    }

    /// Runs at the fire instants of `cron`, read on the service's clock when it is a wall clock (a
    /// [`ManualWallClock`](crate::time::ManualWallClock): see
    /// [`Clock::as_wall_clock`](crate::time::Clock::as_wall_clock)), otherwise on the
    /// [`SystemClock`](crate::time::SystemClock); [`wall_clock`](Self::wall_clock) names another.
    /// Missed runs are skipped by default.
    #[cfg(feature = "cron")]
    pub fn cron(cron: crate::cron::Cron) -> Recurrence {
        Recurrence {
            kind: Kind::Calendar {
                cron: Box::new(cron),
                clock: None,
                start: None,
            },
            missed: None,
            overlap: false,
        }
    }

    /// The first run of a periodic schedule is at `start` (at once if it has passed); that of
    /// a calendar is its first fire instant at or after `start` (after now if `start` has
    /// passed), `start` read on the service's clock and carried over to the wall clock.
    pub fn starting_at(mut self, at: Instant) -> Recurrence {
        match &mut self.kind {
            Kind::Rate { start, .. } | Kind::Delay { start, .. } => *start = Some(at),
            #[cfg(feature = "cron")]
            Kind::Calendar { start, .. } => *start = Some(at),
        }
        self
    }

    /// The wall clock a calendar schedule reads (default: the service's own clock when it is a wall
    /// clock, otherwise [`SystemClock`](crate::time::SystemClock); see [`cron`](Self::cron)). No
    /// effect on a periodic schedule.
    #[cfg(feature = "cron")]
    pub fn wall_clock(mut self, wall: impl WallClock) -> Recurrence {
        if let Kind::Calendar { clock, .. } = &mut self.kind {
            *clock = Some(StdArc::new(wall));
        }
        self
    }

    /// What to do about runs missed because a run (or the machine) was late: default `Burst`
    /// for periodic schedules (as [`Interval`](crate::future::Interval)), `Skip` for
    /// calendars (`Delay` behaves as `Skip` on a calendar). No effect on fixed delay.
    pub fn missed_tick_behavior(mut self, behavior: MissedTickBehavior) -> Recurrence {
        self.missed = Some(behavior);
        self
    }

    /// Lets runs of a fixed-rate or calendar series overlap: the next timer is armed when a
    /// run starts rather than when it returns (default `false`). No effect on fixed delay.
    pub fn allow_overlap(mut self, allow: bool) -> Recurrence {
        self.overlap = allow;
        self
    }
}

/// Starts a recurring series on `service`: the body of [`TimerService::schedule_recurring`].
pub(super) fn start<F>(service: &TimerService, recurrence: Recurrence, f: F) -> RecurringHandle
where
    F: Fn() + Send + Sync + 'static,
{
    let resolution = service.resolution();
    let now = service.now();
    let (plan, first, missed) = match recurrence.kind {
        Kind::Rate { period, start } => (
            Plan::Rate(nonzero(period, resolution)),
            first_at(start, now, nonzero(period, resolution)),
            recurrence.missed.unwrap_or(MissedTickBehavior::Burst),
        ),
        Kind::Delay { period, start } => (
            Plan::Delay(nonzero(period, resolution)),
            first_at(start, now, nonzero(period, resolution)),
            MissedTickBehavior::Delay,
        ),
        #[cfg(feature = "cron")]
        Kind::Calendar { cron, clock, start } => {
            let clock = clock.unwrap_or_else(|| service.state.core.wall_clock());
            let first = calendar_start(&cron, clock.wall_now(), now, start);
            (
                Plan::Calendar(cron, clock),
                first.map_or(Target::Never, Target::Wall),
                recurrence.missed.unwrap_or(MissedTickBehavior::Skip),
            )
        }
    };
    let series = StdArc::new(Series {
        state: service.state.clone(),
        f: Box::new(f),
        plan,
        missed,
        overlap: recurrence.overlap,
        status: AtomicU8::new(LIVE),
        generation: AtomicU64::new(0),
        inner: Mutex::new(Inner {
            timer: None,
            next: Target::Never,
            running: 0,
            runs: 0,
        }),
        step_listener: Mutex::new(None),
    });
    #[cfg(feature = "cron")]
    if let Plan::Calendar(_, clock) = &series.plan {
        let weak = StdArc::downgrade(&series);
        let listener: StdArc<dyn Fn() + Send + Sync> = StdArc::new(move || {
            if let Some(series) = weak.upgrade() {
                series.wall_clock_stepped();
            }
        });
        clock.subscribe_steps(StdArc::downgrade(&listener));
        *series.lock_step_listener() = Some(listener);
    }
    {
        let mut inner = series.lock();
        series.arm(&mut inner, first);
    }
    RecurringHandle { series }
}

/// The first run of a calendar series read at wall time `wall_now` (the service's clock
/// reading `now`): the first fire instant after `wall_now`, or at or after `start` carried
/// over to the wall clock when `start` is later than `now`.
#[cfg(feature = "cron")]
fn calendar_start(
    cron: &crate::cron::Cron,
    wall_now: SystemTime,
    now: Instant,
    start: Option<Instant>,
) -> Option<SystemTime> {
    let from = start
        .filter(|&start| start > now)
        .and_then(|start| wall_now.checked_add(start - now))
        // At or after: a fire instant exactly at `start` is the first run.
        .and_then(|from| from.checked_sub(Duration::from_nanos(1)));
    cron.next_after_system(from.unwrap_or(wall_now))
}

/// The first run of a periodic series: `start`, or one period from `now` (`Never` when that
/// is not representable, as for `Duration::MAX`).
fn first_at(start: Option<Instant>, now: Instant, period: Duration) -> Target {
    match start.or_else(|| now.checked_add(period)) {
        Some(at) => Target::At(at),
        None => Target::Never,
    }
}

fn nonzero(period: Duration, resolution: Duration) -> Duration {
    if period.is_zero() {
        resolution
    } else {
        period
    }
}

/// The handle of a recurring series: cancel it, see its next run. Dropping it does not cancel
/// the series.
pub struct RecurringHandle {
    series: StdArc<Series>,
}

impl RecurringHandle {
    /// Ends the series. Returns `true` exactly when this call ended a live series: no run
    /// starts after it returns (a run already started finishes). `false` if it had already
    /// ended (cancelled, discarded by shutdown, or a calendar with no further run).
    pub fn cancel(&self) -> bool {
        let timer = {
            let mut inner = self.series.lock();
            if self
                .series
                .status
                .compare_exchange(LIVE, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return false;
            }
            inner.next = Target::Never;
            inner.timer.take()
        };
        // Outside the series lock: dropping the timer's closure touches the series.
        if let Some(timer) = timer {
            timer.cancel();
        }
        self.series.lock_step_listener().take();
        true
    }

    /// Whether the series may still run (not cancelled or ended).
    pub fn is_active(&self) -> bool {
        self.series.status.load(Ordering::Acquire) == LIVE
    }

    /// When the next run is due on the service's clock: `None` once the series has ended,
    /// and while a run is in progress whose successor is computed when it returns (no
    /// overlap).
    pub fn next_run(&self) -> Option<Instant> {
        let inner = self.series.lock();
        if !self.is_active() {
            return None;
        }
        inner.timer.as_ref()?.deadline()
    }

    /// The wall-clock time of the next run of a calendar series (`None` for a periodic one,
    /// and when [`next_run`](Self::next_run) is `None`).
    pub fn next_run_wall(&self) -> Option<SystemTime> {
        let inner = self.series.lock();
        if !self.is_active() || inner.timer.is_none() {
            return None;
        }
        match inner.next {
            Target::Wall(w) => Some(w),
            _ => None,
        }
    }

    /// Runs that have returned so far (including ones that panicked).
    pub fn runs(&self) -> u64 {
        self.series.lock().runs
    }

    /// Whether a run is in progress.
    pub fn is_running(&self) -> bool {
        self.series.lock().running > 0
    }
}

impl fmt::Debug for RecurringHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecurringHandle")
            .field("active", &self.is_active())
            .field("next_run", &self.next_run())
            .field("runs", &self.runs())
            .finish()
    }
}

const LIVE: u8 = 0;
const CANCELLED: u8 = 1;
/// Discarded by shutdown, or a calendar with no further run.
const ENDED: u8 = 2;

enum Plan {
    Rate(Duration),
    Delay(Duration),
    #[cfg(feature = "cron")]
    Calendar(Box<crate::cron::Cron>, StdArc<dyn WallClock>),
}

/// What the next run is due at.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// An instant of the service's clock.
    At(Instant),
    /// A wall-clock time (calendar series).
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    Wall(SystemTime),
    /// No further run.
    Never,
}

struct Series {
    state: Arc<ServiceState>,
    f: Box<dyn Fn() + Send + Sync>,
    plan: Plan,
    missed: MissedTickBehavior,
    overlap: bool,
    /// `LIVE`, `CANCELLED` or `ENDED`; leaves `LIVE` once, under `inner`'s lock (or, for a
    /// discarded timer, by a compare-exchange that cannot race a newer arm: see `Fire`).
    status: AtomicU8,
    /// Bumped by every arm; a fired timer of an older generation does nothing.
    generation: AtomicU64,
    inner: Mutex<Inner>,
    /// Keeps the wall-clock step listener alive (the clock holds it weakly).
    step_listener: Mutex<Option<StdArc<dyn Fn() + Send + Sync>>>,
}

struct Inner {
    /// The pending timer of the next run, if armed.
    timer: Option<TimerHandle>,
    /// What the pending timer (or the run in progress) is for.
    next: Target,
    running: usize,
    runs: u64,
}

/// A series' pending timer: runs the series, or ends it if dropped without running (the
/// service discarded it at shutdown, or refused it).
struct Fire {
    series: StdArc<Series>,
    generation: u64,
    ran: bool,
}

impl Drop for Fire {
    fn drop(&mut self) {
        if !self.ran && self.series.generation.load(Ordering::Acquire) == self.generation {
            // The current timer is gone without running: nothing will arm another one. (A
            // cancelled series is already CANCELLED; this changes only a LIVE one.)
            let _ = self.series.status.compare_exchange(
                LIVE,
                ENDED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

impl Series {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_step_listener(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<StdArc<dyn Fn() + Send + Sync>>> {
        self.step_listener.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the next timer is armed when a run starts (overlap allowed, not fixed delay)
    /// rather than when it returns.
    fn arms_at_start(&self) -> bool {
        self.overlap && !matches!(self.plan, Plan::Delay(_))
    }

    fn is_live(&self) -> bool {
        self.status.load(Ordering::Acquire) == LIVE
    }

    /// The deadline on the service's clock for `target`; `None` for `Never` and for an
    /// instant past the tick range, which would never come.
    fn deadline_of(&self, target: Target) -> Option<Instant> {
        let at = match target {
            Target::At(at) => at,
            Target::Wall(wall) => self.wall_deadline(wall),
            Target::Never => return None,
        };
        (self.state.core.ticks.deadline_tick(at) != NEVER).then_some(at)
    }

    /// `now + (wall − wall_now)`, at the earliest now.
    #[cfg_attr(not(feature = "cron"), allow(unused_variables))]
    fn wall_deadline(&self, wall: SystemTime) -> Instant {
        let now = self.state.core.clock.now();
        #[cfg(feature = "cron")]
        if let Plan::Calendar(_, clock) = &self.plan {
            let ahead = wall.duration_since(clock.wall_now()).unwrap_or_default();
            return now.checked_add(ahead).unwrap_or(now);
        }
        now
    }

    /// Queues the timer of the run due at `target` (holding the series lock); ends the series
    /// when that run never comes (`Never`, or past the tick range).
    fn arm(self: &StdArc<Self>, inner: &mut Inner, target: Target) {
        inner.next = target;
        let Some(deadline) = self.deadline_of(target) else {
            inner.timer = None;
            let _ = self
                .status
                .compare_exchange(LIVE, ENDED, Ordering::AcqRel, Ordering::Acquire);
            return;
        };
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut fire = Fire {
            series: self.clone(),
            generation,
            ran: false,
        };
        let tick = self.state.core.ticks.deadline_tick(deadline);
        // After shutdown the closure is dropped unrun: `Fire::drop` ends the series (it takes
        // no lock, so dropping it here under the series lock is fine).
        let callback = Callback::new(move || {
            fire.ran = true;
            Series::fire(&fire.series, fire.generation);
        });
        inner.timer = self
            .state
            .schedule_callback(tick, callback, AtCap::Admit)
            .ok();
    }

    /// A timer of generation `generation` fired (on a worker).
    fn fire(self: &StdArc<Self>, generation: u64) {
        let scheduled = {
            let mut inner = self.lock();
            if !self.is_live() || self.generation.load(Ordering::Acquire) != generation {
                return;
            }
            inner.timer = None;
            let scheduled = inner.next;
            if let Target::Wall(wall) = scheduled {
                if self.wall_deadline(wall) > self.state.core.clock.now() {
                    // The wall clock was set back since the timer was armed: not due yet.
                    self.arm(&mut inner, scheduled);
                    return;
                }
            }
            inner.running += 1;
            if self.arms_at_start() {
                let next = self.next_target(scheduled);
                self.arm(&mut inner, next);
            }
            scheduled
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| (self.f)()));
        {
            let mut inner = self.lock();
            inner.running -= 1;
            inner.runs += 1;
            if self.is_live() && !self.arms_at_start() {
                let next = self.next_target(scheduled);
                self.arm(&mut inner, next);
            }
        }
        if let Err(panic) = outcome {
            resume_unwind(panic); // the worker counts it
        }
    }

    /// The run after the one due at `scheduled`, computed now.
    fn next_target(&self, scheduled: Target) -> Target {
        let now = self.state.core.clock.now();
        match (&self.plan, scheduled) {
            (Plan::Delay(period), _) => now.checked_add(*period).map_or(Target::Never, Target::At),
            (Plan::Rate(period), Target::At(at)) => {
                let next = match at.checked_add(*period) {
                    None => None,
                    Some(regular) if now < regular => Some(regular),
                    Some(regular) => match self.missed {
                        MissedTickBehavior::Burst => Some(regular),
                        MissedTickBehavior::Delay => now.checked_add(*period),
                        MissedTickBehavior::Skip => {
                            let behind = now.saturating_duration_since(at).as_nanos();
                            let rem = behind % period.as_nanos().max(1);
                            let rem = Duration::from_nanos(u64::try_from(rem).unwrap_or(0));
                            now.checked_add(period.saturating_sub(rem))
                        }
                    },
                };
                next.map_or(Target::Never, Target::At)
            }
            #[cfg(feature = "cron")]
            (Plan::Calendar(cron, clock), Target::Wall(wall)) => {
                let wall_now = clock.wall_now();
                let regular = cron.next_after_system(wall);
                let next = match (regular, self.missed) {
                    (Some(r), _) if r > wall_now => Some(r),
                    (Some(r), MissedTickBehavior::Burst) => Some(r),
                    (Some(_), _) => cron.next_after_system(wall_now),
                    (None, _) => None,
                };
                next.map_or(Target::Never, Target::Wall)
            }
            _ => Target::Never,
        }
    }

    /// The wall clock was set: move a pending calendar timer to the new conversion.
    #[cfg(feature = "cron")]
    fn wall_clock_stepped(self: &StdArc<Self>) {
        let inner = self.lock();
        if !self.is_live() {
            return;
        }
        if let (Some(timer), Target::Wall(wall)) = (&inner.timer, inner.next) {
            // `false`: it fired meanwhile; the run re-checks the wall clock itself.
            timer.reset_at(self.wall_deadline(wall));
        }
    }
}
