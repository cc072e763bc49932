//! A task's life against a model: on a real redis-server, a manual clock and `Worker::tick`, a
//! seeded random sequence of operations (schedule with or without its own retry policy, one-shot or
//! recurring every 300 or 700 ms, replacing or create-only (`schedule_once`, answered by the id's
//! state and its idempotency window), cancel, reschedule, run now, advance the clock and tick with
//! a handler whose outcome is drawn per call: ack, fail, fail with its own delay, non-retryable,
//! retry after, panic, leave; pause, resume, retry failed, discard failed) is checked after every
//! step against a `BTreeMap` model of each id: its live task (pending with run-at, attempts,
//! failures and errors; or in flight until its visibility timeout), its failed record (reason,
//! failures, errors), or nothing. A recurring task is re-armed at its next run of its phase after
//! an ack, and after a run that failed for good unless its policy stops the series; a failed record
//! and the live series then share the id (a retry of the record is refused).
//!
//! Every handler call is checked as it is made: never before its run-at (or, in flight,
//! before its visibility timeout ends), never while its shard is paused (the whole namespace
//! or one shard, `Producer::pause_shards`), never once its
//! policy's attempts have failed, with the attempt the model expects; and every task the
//! model says is due is called. After every step each id's `Producer::state`, its live error
//! log (`Inspector::show`) and the failed set (`Inspector::failed`: reason, failure count,
//! every error text) must be the model's, and the storage layout sound.
//!
//! The model works because `claim_ahead` is zero: a tick claims exactly what is due at its
//! instant, so between steps a task is in flight only when its handler said `Leave`.
//! `TICKWHEEL_REDIS_LIFE_SEED` and `TICKWHEEL_REDIS_LIFE_STEPS` vary the run (default seed
//! 11 and 3 others, 500 steps each).

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use tickwheel_lab::SplitMix64;
use tickwheel_redis::{
    Acted, Delivery, FailReason, FailedFilter, Inspector, Outcome, Producer, Recurrence,
    RetryPolicy, RunAt, ScheduledOnce, Task, TaskState, Worker, ERRORS_KEPT,
};

const T0: u64 = 1_000_000;
const IDS: u64 = 10;
const VISIBILITY_MS: u64 = 700;
/// The idempotency window of `schedule_once`.
const ONCE_MS: u64 = 5_000;

/// A live task as the model holds it.
#[derive(Clone, Debug)]
struct Live {
    run_at: u64,
    /// Handler calls since it was stored (what `Delivery::attempt` counts).
    attempts: u32,
    /// Failed attempts counted against its policy.
    failures: u32,
    /// The errors kept, oldest first.
    errors: Vec<String>,
    policy: RetryPolicy,
    /// In flight (the handler said `Leave`): deliverable again from this instant.
    visible_at: Option<u64>,
    /// A recurring task's period, ms.
    every: Option<u64>,
    /// A recurring run being retried: the due its series keeps the phase of (see
    /// `anchored` in prelude.lua).
    phase: Option<u64>,
}

impl Live {
    fn new(run_at: u64, policy: RetryPolicy, every: Option<u64>, errors: Vec<String>) -> Live {
        Live {
            run_at,
            attempts: 0,
            failures: 0,
            errors,
            policy,
            visible_at: None,
            every,
            phase: None,
        }
    }

    /// Moves the run to `at` for a retry (after a failure or a snooze): a recurring run
    /// keeps its series' phase.
    fn retry_at(&mut self, at: u64) {
        if self.every.is_some() && self.phase.is_none() {
            self.phase = Some(self.run_at);
        }
        self.run_at = at;
    }

    /// A recurring task's next run after a delivery at `now` (see `Rule::next_after`): the
    /// first run of its phase after both its run-at and now.
    fn next_run(&self, now: u64) -> Option<u64> {
        let p = self.every?;
        let due = self.run_at;
        let phase = self.phase.unwrap_or(due).min(due);
        Some(phase + ((now.max(due) - phase) / p + 1) * p)
    }
}

/// A failed task's record.
#[derive(Clone, Debug)]
struct Failed {
    reason: FailReason,
    failures: u32,
    /// The attempt that failed.
    attempt: u32,
    errors: Vec<String>,
    policy: RetryPolicy,
    every: Option<u64>,
    /// The phase its run kept (its due, or the due it was retrying).
    phase: u64,
}

#[derive(Clone, Debug, Default)]
struct Entry {
    live: Option<Live>,
    failed: Option<Failed>,
    /// Until when `schedule_once` remembers the id (the last one naming it, plus the
    /// window); 0: never named.
    remembered_until: u64,
}

/// What the handler did with one delivery.
#[derive(Clone, Debug)]
enum Did {
    Ack,
    Fail(Option<u64>),
    Fatal,
    After(u64),
    Panic,
    Leave,
}

fn push_error(errors: &mut Vec<String>, e: String) {
    errors.push(e);
    if errors.len() > ERRORS_KEPT {
        errors.remove(0);
    }
}

/// The namespace's policy: 3 attempts, 100 ms doubling to 400 ms, no jitter.
fn ns_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_delay: Duration::from_millis(100),
        factor: 2.0,
        max_delay: Duration::from_millis(400),
        jitter: 0.0,
        stop_series_on_failure: false,
    }
}

/// A task's own policy, drawn.
fn own_policy(rng: &mut SplitMix64) -> RetryPolicy {
    match rng.below(3) {
        0 => RetryPolicy::no_retry(),
        1 => RetryPolicy {
            stop_series_on_failure: rng.below(2) == 0,
            ..RetryPolicy::fixed(2, Duration::from_millis(150))
        },
        _ => RetryPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(30),
            factor: 3.0,
            max_delay: Duration::from_millis(500),
            jitter: 0.0,
            stop_series_on_failure: false,
        },
    }
}

#[test]
fn a_tasks_life_matches_the_model() {
    // Panics drawn for the handler are expected: the default hook reports every other.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>();
        if !msg.is_some_and(|m| m.starts_with("life-model panic")) {
            default(info);
        }
    }));
    let steps = std::env::var("TICKWHEEL_REDIS_LIFE_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let seeds: Vec<u64> = match std::env::var("TICKWHEEL_REDIS_LIFE_SEED") {
        Ok(v) => vec![v.parse().expect("a seed")],
        Err(_) => vec![11, 12, 13, 14],
    };
    let s = common::server();
    for seed in seeds {
        run(&s, seed, steps);
    }
}

/// The figures of one run, to show it exercised what it claims to.
#[derive(Debug, Default)]
struct Figures {
    calls: usize,
    by_outcome: BTreeMap<&'static str, usize>,
    failed: [usize; 2],
    retried: usize,
    /// Retries refused: a live task has the id (scheduled again, or the series goes on).
    live_exists: usize,
    discarded: usize,
    /// Recurring tasks scheduled, and their runs re-armed (after an ack or a failed run).
    recurring: usize,
    rearmed: usize,
    /// Calls of tasks left in flight (`Leave`), after their visibility timeout.
    redelivered: usize,
    paused_steps: usize,
    /// `schedule_once` answers: stored, exists, remembered.
    once: [usize; 3],
}

fn run(s: &tickwheel_redis::server::RedisServer, seed: u64, steps: usize) {
    let ns = format!("life{seed}");
    let shards = 2;
    let (mut cfg, time) = common::manual(s, &ns, shards);
    cfg.claim_ahead = Duration::ZERO;
    cfg.visibility_timeout = Duration::from_millis(VISIBILITY_MS);
    cfg.retry = ns_policy();
    cfg.idempotency_window = Duration::from_millis(ONCE_MS);
    let mut p = Producer::connect(&cfg).unwrap();
    let mut ins = Inspector::connect(&cfg).unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut model: BTreeMap<String, Entry> = (0..IDS)
        .map(|i| (format!("t{i}"), Entry::default()))
        .collect();
    // Each id's shard, learnt by storing it once (the model pauses shards one by one too).
    let shard_of: BTreeMap<String, u32> = model
        .keys()
        .map(|id| {
            p.schedule(id, RunAt::AtMillis(T0 + 3_600_000), b"")
                .unwrap();
            let shard = ins.show(id).unwrap().expect("just stored").info.shard;
            assert!(p.cancel(id).unwrap());
            (id.clone(), shard)
        })
        .collect();
    let mut paused = vec![false; shards as usize];
    let mut now = T0;
    let mut fig = Figures::default();
    for step in 0..steps {
        let id = format!("t{}", rng.below(IDS));
        let what = rng.below(100);
        let ctx = format!("seed {seed}, step {step}, {id}, at {}", now - T0);
        let e = model.get_mut(&id).unwrap();
        match what {
            0..=24 => {
                let run_at = now + rng.below(1200);
                let own = (rng.below(5) < 2).then(|| own_policy(&mut rng));
                let every = (rng.below(8) == 0).then(|| [300, 700][rng.below(2) as usize]);
                let rec = every.map(|ms| Recurrence::Every(Duration::from_millis(ms)));
                let mut task = Task::new(&id, RunAt::AtMillis(run_at), b"x");
                if let Some(o) = own {
                    task = task.retry(o);
                }
                if let Some(r) = &rec {
                    task = task.recurring(r);
                    fig.recurring += 1;
                }
                let live = Live::new(run_at, own.unwrap_or(ns_policy()), every, Vec::new());
                if rng.below(3) == 0 {
                    // Create-only: stored only when no task has the id and no
                    // `schedule_once` named it within the window; every call naming it
                    // remembers it for the window from now.
                    let got = p.schedule_once_many([task]).unwrap()[0];
                    let want = match (&e.live, &e.failed) {
                        (Some(l), _) if l.visible_at.is_some() => "in flight",
                        (Some(_), _) => "pending",
                        (None, Some(_)) => "failed",
                        (None, None) if e.remembered_until > now => "remembered",
                        (None, None) => "stored",
                    };
                    let answered = match got {
                        ScheduledOnce::Stored(_) => "stored",
                        ScheduledOnce::Exists(TaskState::Pending { .. }) => "pending",
                        ScheduledOnce::Exists(TaskState::InFlight { .. }) => "in flight",
                        ScheduledOnce::Exists(TaskState::Failed { .. }) => "failed",
                        ScheduledOnce::Exists(TaskState::Unknown) => "unknown",
                        ScheduledOnce::Remembered => "remembered",
                    };
                    assert_eq!(answered, want, "{ctx}: schedule_once");
                    let k = match want {
                        "stored" => 0,
                        "remembered" => 2,
                        _ => 1,
                    };
                    fig.once[k] += 1;
                    if want == "stored" {
                        e.live = Some(live);
                    }
                    e.remembered_until = e.remembered_until.max(now + ONCE_MS);
                } else {
                    let replaced = p.schedule_many([task]).unwrap()[0].replaced;
                    assert_eq!(replaced, e.live.is_some(), "{ctx}: schedule replaced");
                    e.live = Some(live);
                }
            }
            25..=31 => {
                // A pending task, or a recurring one in flight (the series stops).
                let gone = e
                    .live
                    .as_ref()
                    .is_some_and(|l| l.visible_at.is_none() || l.every.is_some());
                assert_eq!(p.cancel(&id).unwrap(), gone, "{ctx}: cancel");
                if gone {
                    e.live = None;
                }
            }
            32..=43 => {
                // 32 ..= 38 reschedule, 39 ..= 43 run now.
                let to = if what <= 38 {
                    now + rng.below(1200)
                } else {
                    now
                };
                let moved = if what <= 38 {
                    p.reschedule(&id, RunAt::AtMillis(to)).unwrap()
                } else {
                    p.run_now(&id).unwrap()
                };
                let pending = e.live.as_mut().filter(|l| l.visible_at.is_none());
                assert_eq!(moved, pending.is_some(), "{ctx}: reschedule / run now");
                if let Some(l) = pending {
                    // Moved by the user: the new run-at is the series' phase.
                    l.run_at = to;
                    l.phase = None;
                }
            }
            44..=50 => {
                // 44 pause all, 45 pause one shard, 46 ..= 48 resume all, 49 ..= 50 resume
                // one shard (the id's).
                let pause = what <= 45;
                let one = what == 45 || what >= 49;
                let which: Vec<u32> = if one {
                    vec![shard_of[&id]]
                } else {
                    (0..shards).collect()
                };
                let changed = if one {
                    p.pause_shards(&which, pause).unwrap()
                } else if pause {
                    p.pause().unwrap()
                } else {
                    p.resume().unwrap()
                };
                let want = which
                    .iter()
                    .filter(|&&s| paused[s as usize] != pause)
                    .count();
                assert_eq!(changed as usize, want, "{ctx}: pause {pause} of {which:?}");
                for s in which {
                    paused[s as usize] = pause;
                }
            }
            51..=57 => {
                let acted = p.retry_failed([&id]).unwrap()[0];
                let want = match (&e.failed, &e.live) {
                    (None, _) => Acted::NotFailed,
                    (Some(_), Some(_)) => {
                        fig.live_exists += 1;
                        Acted::LiveTaskExists
                    }
                    (Some(f), None) => {
                        let mut l = Live::new(now, f.policy, f.every, f.errors.clone());
                        l.phase = f.every.map(|_| f.phase);
                        e.live = Some(l);
                        e.failed = None;
                        fig.retried += 1;
                        Acted::Done
                    }
                };
                assert_eq!(acted, want, "{ctx}: retry_failed");
            }
            58..=61 => {
                let acted = p.discard_failed([&id]).unwrap()[0];
                let want = if e.failed.take().is_some() {
                    fig.discarded += 1;
                    Acted::Done
                } else {
                    Acted::NotFailed
                };
                assert_eq!(acted, want, "{ctx}: discard_failed");
            }
            _ => {
                now += rng.below(400);
                time.set_ms(now);
                if paused.contains(&true) {
                    fig.paused_steps += 1;
                }
                let paused_ids = |id: &str| paused[shard_of[id] as usize];
                tick(
                    &mut w,
                    &mut model,
                    &mut rng,
                    now,
                    &paused_ids,
                    &ctx,
                    &mut fig,
                );
            }
        }
        check(&mut p, &mut ins, &model, &ctx);
        common::check_layout(&s.url(), &ns, shards);
    }
    // The end: resume, leave time to every retry, and everything is acknowledged or failed.
    p.resume().unwrap();
    for k in 0..40 {
        now += 300;
        time.set_ms(now);
        let ctx = format!("seed {seed}, drain {k}, at {}", now - T0);
        tick(
            &mut w,
            &mut model,
            &mut rng,
            now,
            &|_| false,
            &ctx,
            &mut fig,
        );
        check(&mut p, &mut ins, &model, &ctx);
        for (id, e) in &model {
            let stuck = e.live.as_ref().and_then(|l| l.visible_at);
            assert!(
                stuck.is_none_or(|v| v + 3000 > now),
                "{ctx}: {id} left in flight, visible again at {}, never delivered again",
                stuck.unwrap_or(0) - T0
            );
        }
    }
    eprintln!("life model, seed {seed}, {steps} steps: {fig:?}");
    assert!(fig.calls > 100, "the run exercised the handler: {fig:?}");
    assert!(
        fig.failed[0] > 3
            && fig.failed[1] > 3
            && fig.retried > 0
            && fig.paused_steps > 3
            && fig.rearmed > 3,
        "and failures, retries, pauses and series: {fig:?}"
    );
    assert!(
        fig.once.iter().all(|&n| n > 0),
        "and every answer of schedule_once: {fig:?}"
    );
}

/// Advances to `now` and ticks: the handler draws an outcome per call, each call checked
/// against the model and applied to it; then every task the model says is due must have been
/// called.
fn tick(
    w: &mut Worker,
    model: &mut BTreeMap<String, Entry>,
    rng: &mut SplitMix64,
    now: u64,
    paused: &dyn Fn(&str) -> bool,
    ctx: &str,
    fig: &mut Figures,
) {
    let calls: RefCell<Vec<(String, u32, Did)>> = RefCell::new(Vec::new());
    let rng = RefCell::new(rng);
    w.reload_windows();
    w.tick(&mut |d: &Delivery| {
        let mut rng = rng.borrow_mut();
        let (did, outcome) = match rng.below(100) {
            0..=29 => (Did::Ack, Outcome::Ack),
            30..=49 => (
                Did::Fail(None),
                Outcome::fail(format!("fail {} {}", d.id, d.attempt)),
            ),
            50..=54 => {
                let ms = 1 + rng.below(300);
                (
                    Did::Fail(Some(ms)),
                    Outcome::Failed {
                        error: format!("fail {} {}", d.id, d.attempt),
                        retry_in: Some(Duration::from_millis(ms)),
                    },
                )
            }
            55..=61 => (
                Did::Fatal,
                Outcome::non_retryable(format!("fatal {} {}", d.id, d.attempt)),
            ),
            62..=73 => {
                let ms = 1 + rng.below(300);
                (
                    Did::After(ms),
                    Outcome::RetryAfter(Duration::from_millis(ms)),
                )
            }
            74..=93 => (Did::Panic, Outcome::Ack),
            _ => (Did::Leave, Outcome::Leave),
        };
        calls
            .borrow_mut()
            .push((d.id.clone(), d.attempt, did.clone()));
        if let Did::Panic = did {
            panic!("life-model panic {} {}", d.id, d.attempt);
        }
        outcome
    })
    .unwrap();
    let calls = calls.into_inner();
    let mut called = std::collections::BTreeSet::new();
    for (id, attempt, did) in calls {
        let ctx = format!("{ctx}: call of {id} attempt {attempt} ({did:?})");
        assert!(!paused(&id), "{ctx}: a call while its shard is paused");
        assert!(called.insert(id.clone()), "{ctx}: called twice in one tick");
        let e = model.get_mut(&id).expect("a known id");
        let l = e
            .live
            .as_mut()
            .unwrap_or_else(|| panic!("{ctx}: no live task"));
        match l.visible_at {
            Some(v) => {
                assert!(v <= now, "{ctx}: in flight until {}", v - T0);
                fig.redelivered += 1;
            }
            None => assert!(l.run_at <= now, "{ctx}: early, run-at {}", l.run_at - T0),
        }
        let max = l.policy.max_attempts;
        assert!(
            max == 0 || l.failures < max,
            "{ctx}: called after {} failed attempts of {max}",
            l.failures
        );
        assert_eq!(attempt, l.attempts + 1, "{ctx}: the attempt");
        l.attempts = attempt;
        l.visible_at = None;
        fig.calls += 1;
        let (name, error) = match &did {
            Did::Ack => ("ack", None),
            Did::Fail(_) => ("fail", Some(format!("fail {id} {attempt}"))),
            Did::Fatal => ("non_retryable", Some(format!("fatal {id} {attempt}"))),
            Did::After(_) => ("retry_after", None),
            Did::Panic => (
                "panic",
                Some(format!("panicked: life-model panic {id} {attempt}")),
            ),
            Did::Leave => ("leave", None),
        };
        *fig.by_outcome.entry(name).or_default() += 1;
        let next = l.next_run(now);
        match did {
            Did::Ack => {
                e.live = next.map(|at| Live::new(at, l.policy, l.every, Vec::new()));
                fig.rearmed += usize::from(next.is_some());
            }
            Did::After(ms) => l.retry_at(now + ms),
            Did::Leave => l.visible_at = Some(now + VISIBILITY_MS),
            Did::Fail(_) | Did::Fatal | Did::Panic => {
                l.failures += 1;
                push_error(&mut l.errors, error.unwrap());
                let fatal = matches!(did, Did::Fatal);
                if !fatal && (max == 0 || l.failures < max) {
                    l.retry_at(
                        now + match did {
                            Did::Fail(Some(ms)) => ms,
                            _ => l.policy.delay_after(l.failures).as_millis() as u64,
                        },
                    );
                } else {
                    let reason = if fatal {
                        FailReason::NonRetryable
                    } else {
                        FailReason::Exhausted
                    };
                    fig.failed[usize::from(fatal)] += 1;
                    e.failed = Some(Failed {
                        reason,
                        failures: l.failures,
                        attempt,
                        errors: l.errors.clone(),
                        policy: l.policy,
                        every: l.every,
                        phase: l.phase.unwrap_or(l.run_at),
                    });
                    // A failed run of a series: the series goes on at its next run, unless
                    // its policy stops it.
                    let goes_on = next.filter(|_| !l.policy.stop_series_on_failure);
                    e.live = goes_on.map(|at| Live::new(at, l.policy, l.every, Vec::new()));
                    fig.rearmed += usize::from(goes_on.is_some());
                }
            }
        }
    }
    for (id, e) in model.iter() {
        if paused(id) {
            continue;
        }
        if let Some(l) = &e.live {
            // Due: pending at or before now (a task in flight comes back by the worker's
            // recovery scan, at a time the model does not pin down).
            if l.visible_at.is_none() && l.run_at <= now && !called.contains(id) {
                panic!("{ctx}: {id} due at {} and not called", l.run_at - T0);
            }
        }
    }
}

/// Each id's state, live error log and the failed set, against the model.
fn check(p: &mut Producer, ins: &mut Inspector, model: &BTreeMap<String, Entry>, ctx: &str) {
    for (id, e) in model {
        let state = p.state(id).unwrap();
        match (&e.live, &e.failed) {
            (Some(l), _) => {
                match (l.visible_at, state) {
                    (
                        None,
                        TaskState::Pending {
                            run_at_ms,
                            attempts,
                            ..
                        },
                    ) => assert_eq!(
                        (run_at_ms, attempts),
                        (l.run_at, l.attempts),
                        "{ctx}: {id} pending (run-at, attempts)"
                    ),
                    (
                        Some(v),
                        TaskState::InFlight {
                            attempt,
                            visible_at_ms,
                            ..
                        },
                    ) => assert_eq!(
                        (attempt, visible_at_ms),
                        (l.attempts, v),
                        "{ctx}: {id} in flight"
                    ),
                    (_, other) => panic!("{ctx}: {id} is {other:?}, the model has {l:?}"),
                }
                let shown = ins.show(id).unwrap().expect("a live task is shown");
                let errors: Vec<&str> = shown
                    .errors
                    .errors
                    .iter()
                    .map(|e| e.error.as_str())
                    .collect();
                assert_eq!(
                    (shown.errors.failures, errors),
                    (l.failures, l.errors.iter().map(String::as_str).collect()),
                    "{ctx}: {id}'s error log"
                );
            }
            (None, Some(f)) => match state {
                TaskState::Failed {
                    reason, attempts, ..
                } => assert_eq!(
                    (reason, attempts),
                    (f.reason, f.attempt),
                    "{ctx}: {id} failed"
                ),
                other => panic!("{ctx}: {id} is {other:?}, the model has {f:?}"),
            },
            (None, None) => assert_eq!(state, TaskState::Unknown, "{ctx}: {id} gone"),
        }
    }
    let mut got: Vec<(String, FailReason, u32, Vec<String>)> = ins
        .failed(&FailedFilter::default())
        .unwrap()
        .into_iter()
        .map(|f| {
            let errors = f.errors.errors.into_iter().map(|e| e.error).collect();
            (f.id, f.reason, f.errors.failures, errors)
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let want: Vec<(String, FailReason, u32, Vec<String>)> = model
        .iter()
        .filter_map(|(id, e)| {
            let f = e.failed.as_ref()?;
            Some((id.clone(), f.reason, f.failures, f.errors.clone()))
        })
        .collect();
    assert_eq!(got, want, "{ctx}: the failed set");
}
