//! The window read on virtual time against a real redis-server: a worker reads its shards'
//! windows in steps of at most `window_limit` tasks, resuming where the last step stopped.
//! Whatever happens to a time bucket between two steps (emptied, deleted, filled again,
//! replaced in another order), no pending task may be skipped: each is delivered at its
//! run-at. The workers here never reload their windows by hand: a skipped task would stay
//! pending for ever in a calm namespace.
//!
//! The randomized test drives interleavings of schedule, `schedule_many`, cancel, reschedule
//! and window steps, and checks every step against a model of what must be delivered when.

mod common;

use std::collections::BTreeMap;

use tickwheel_lab::SplitMix64;
use tickwheel_redis::{Delivery, ManualTime, Outcome, Producer, RunAt, Task, Worker};

const T0: u64 = 1_000_000;

/// `ticks` ticks at virtual time `T0 + ms`, acknowledging everything; returns the ids
/// delivered with their due times, sorted. A tick reads at most `window_limit` entries of a
/// window (`run` reads on at once, a tick at a time).
fn ticks_at(w: &mut Worker, time: &ManualTime, ms: u64, ticks: u32) -> Vec<(String, u64)> {
    time.set_ms(T0 + ms);
    let mut got = Vec::new();
    for _ in 0..ticks {
        w.tick(&mut |d: &Delivery| {
            got.push((d.id.clone(), d.due_ms));
            Outcome::Ack
        })
        .unwrap();
    }
    got.sort();
    got
}

/// Ticks at `T0 + ms` until the worker has read all it can (enough ticks for the windows
/// of these tests).
fn tick_at(w: &mut Worker, time: &ManualTime, ms: u64) -> Vec<(String, u64)> {
    ticks_at(w, time, ms, 12)
}

fn task<'a>(id: &'a str, ms: u64) -> Task<'a> {
    Task {
        id,
        run_at: RunAt::AtMillis(T0 + ms),
        payload: b"",
        recurrence: None,
        retry: None,
    }
}

/// Ticks from `from` to `to` ms in `step` ms steps; returns every delivery as (id, due, at).
fn run_until(
    w: &mut Worker,
    time: &ManualTime,
    from: u64,
    to: u64,
    step: u64,
) -> Vec<(String, u64, u64)> {
    let mut all = Vec::new();
    let mut ms = from;
    while ms <= to {
        for (id, due) in tick_at(w, time, ms) {
            all.push((id, due, T0 + ms));
        }
        ms += step;
    }
    all
}

/// A worker on one shard that reads 100 tasks a step (the smallest step it takes).
fn small_steps(
    s: &tickwheel_redis::server::RedisServer,
    ns: &str,
) -> (Producer, Worker, ManualTime) {
    let (mut cfg, time) = common::manual(s, ns, 1);
    cfg.window_limit = 100;
    cfg.batch = 1_000; // one script call stores (or replaces) all 300
    let p = Producer::connect(&cfg).unwrap();
    let w = Worker::connect(&cfg).unwrap();
    (p, w, time)
}

/// 300 tasks in one bucket, of which one window step (one tick) read the first 100.
fn read_in_part(
    s: &tickwheel_redis::server::RedisServer,
    ns: &str,
) -> (Producer, Worker, ManualTime, Vec<String>) {
    let (mut p, mut w, time) = small_steps(s, ns);
    let ids: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
    p.schedule_many(ids.iter().map(|id| task(id, 5_000)))
        .unwrap();
    assert!(ticks_at(&mut w, &time, 0, 1).is_empty());
    (p, w, time, ids)
}

#[test]
fn a_bucket_emptied_and_filled_again_between_two_steps_loses_nothing() {
    let s = common::server();
    let (mut p, mut w, time, ids) = read_in_part(&s, "emptied");
    for id in &ids {
        assert!(p.cancel(id).unwrap());
    }
    p.schedule_many([task("new", 5_500)]).unwrap();
    let got = run_until(&mut w, &time, 100, 20_000, 100);
    assert_eq!(got, [("new".to_string(), T0 + 5_500, T0 + 5_500)]);
    assert_eq!(p.len().unwrap(), 0, "nothing stays pending");
}

#[test]
fn a_bucket_replaced_in_another_order_between_two_steps_loses_nothing() {
    let s = common::server();
    let (mut p, mut w, time, ids) = read_in_part(&s, "reversed");
    p.schedule_many(ids.iter().rev().map(|id| task(id, 5_000)))
        .unwrap();
    let got = run_until(&mut w, &time, 100, 20_000, 100);
    assert_eq!(got.len(), 300, "every task is delivered once");
    assert!(got
        .iter()
        .all(|(_, due, at)| *due == T0 + 5_000 && at == due));
    assert_eq!(p.len().unwrap(), 0, "nothing stays pending");
}

/// The model: id -> the run-at in force (ms after T0); a task leaves it when delivered or
/// cancelled. Tasks are never claimed ahead of the step they are due in, so a cancel or a
/// reschedule of a task due later than the current time always succeeds.
#[derive(Default)]
struct Model {
    pending: BTreeMap<String, u64>,
}

impl Model {
    /// The deliveries a tick at `now` must make: every pending task due at or before it.
    fn due(&mut self, now: u64) -> Vec<(String, u64)> {
        let due: Vec<(String, u64)> = self
            .pending
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(id, &at)| (id.clone(), T0 + at))
            .collect();
        for (id, _) in &due {
            self.pending.remove(id);
        }
        due
    }
}

/// Random interleavings of schedule, `schedule_many` (with repeated ids and reversed orders),
/// cancel, reschedule and window steps on few buckets, checked tick by tick: each task is
/// delivered at the run-at in force, never early, never twice, none stranded.
#[test]
fn window_steps_deliver_what_the_model_says_under_random_interleavings() {
    let s = common::server();
    let seeds = std::env::var("TICKWHEEL_REDIS_WINDOW_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6u64);
    for seed in 0..seeds {
        let ns = format!("window-{seed}");
        let (mut cfg, time) = common::manual(&s, &ns, 1 + (seed % 2) as u32);
        cfg.window_limit = 100;
        cfg.batch = 1_000;
        cfg.claim_ahead = std::time::Duration::ZERO;
        // A short window: most tasks land past the horizon, so they are read in steps, not
        // announced by notifications.
        cfg.window = std::time::Duration::from_secs(2);
        let mut p = Producer::connect(&cfg).unwrap();
        let mut w = Worker::connect(&cfg).unwrap();
        let mut rng = SplitMix64::new(seed);
        let mut model = Model::default();
        let mut now = 0u64;
        for round in 0..40 {
            random_changes(&mut p, &mut model, &mut rng, now);
            now += 1 + rng.below(400);
            // One or two ticks: a window read may stop inside a bucket, and the next round's
            // changes then hit a bucket between two steps of its read. Deliveries may lag
            // (the read is not done) but are never early, twice or cancelled.
            let ticks = 1 + rng.below(2) as u32;
            for (id, due) in ticks_at(&mut w, &time, now, ticks) {
                let at = model.pending.remove(&id);
                let ctx = format!("seed {seed}, round {round}, at {now} ms: {id}");
                assert_eq!(
                    at.map(|a| T0 + a),
                    Some(due),
                    "{ctx}: pending with this due"
                );
                assert!(due <= T0 + now, "{ctx}: early");
            }
        }
        // Read everything now: what is due is delivered at once.
        let got = tick_at(&mut w, &time, now);
        let mut want = model.due(now);
        want.sort();
        assert_eq!(got, want, "seed {seed}, catching up at {now} ms");
        // Everything left is delivered once its time comes, and nothing else.
        let last = model.pending.values().copied().max().unwrap_or(now);
        while now < last + 1_000 {
            now += 250;
            let got = tick_at(&mut w, &time, now);
            let mut want = model.due(now);
            want.sort();
            assert_eq!(got, want, "seed {seed}, draining, at {now} ms");
        }
        assert_eq!(p.len().unwrap(), 0, "seed {seed}: nothing stranded");
        common::check_layout(&s.url(), &ns, cfg.shards);
    }
}

/// A few random producer calls at virtual time `now`, mirrored in the model. Run-ats fall in
/// a handful of buckets a few seconds ahead, so buckets are emptied and refilled often.
fn random_changes(p: &mut Producer, model: &mut Model, rng: &mut SplitMix64, now: u64) {
    let future = |rng: &mut SplitMix64| now + 2_000 + rng.below(2) * 1_000 + rng.below(1_000);
    for _ in 0..rng.below(4) {
        match rng.below(5) {
            0 | 1 => {
                // A batch over a few ids, some repeated, in a random order.
                let n = 100 + rng.below(400) as usize;
                let batch: Vec<(String, u64)> = (0..n)
                    .map(|_| (format!("t{}", rng.below(400)), future(rng)))
                    .collect();
                p.schedule_many(batch.iter().map(|(id, at)| task(id, *at)))
                    .unwrap();
                for (id, at) in batch {
                    model.pending.insert(id, at);
                }
            }
            2 if rng.below(2) == 0 => {
                // Empty one bucket (cancel all it holds), then fill it again, maybe with the
                // same ids in reverse order.
                // The first bucket around the window's end: the likeliest to be read over
                // several steps right now.
                let Some(bucket) = model
                    .pending
                    .values()
                    .map(|at| (T0 + at) / 1_000)
                    .filter(|b| b * 1_000 >= T0 + now + 1_000)
                    .min()
                else {
                    continue;
                };
                let ids: Vec<String> = model
                    .pending
                    .iter()
                    .filter(|(_, &a)| (T0 + a) / 1_000 == bucket)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in &ids {
                    assert!(p.cancel(id).unwrap(), "cancel {id}");
                    model.pending.remove(id);
                }
                let back = bucket * 1_000 - T0 + rng.below(1_000);
                // The same ids in reverse order, or as many new ones (never read before: a
                // skipped one would never be delivered).
                let refill: Vec<String> = match rng.below(2) {
                    0 => ids.iter().rev().cloned().collect(),
                    _ => (0..ids.len())
                        .map(|_| format!("n{}", rng.below(1 << 40)))
                        .collect(),
                };
                let at = back.max(now + 1);
                p.schedule_many(refill.iter().map(|id| task(id, at)))
                    .unwrap();
                for id in refill {
                    model.pending.insert(id, at);
                }
            }
            2 => {
                // Cancel a run of ids: often empties a bucket.
                let from = rng.below(400);
                for i in from..(from + 100).min(400) {
                    let id = format!("t{i}");
                    let want = model.pending.remove(&id).is_some();
                    assert_eq!(p.cancel(&id).unwrap(), want, "cancel {id}");
                }
            }
            3 => {
                for _ in 0..20 {
                    let id = format!("t{}", rng.below(400));
                    let at = future(rng);
                    let want = model.pending.contains_key(&id);
                    assert_eq!(p.reschedule(&id, RunAt::AtMillis(T0 + at)).unwrap(), want);
                    if want {
                        model.pending.insert(id, at);
                    }
                }
            }
            _ => {
                let id = format!("t{}", rng.below(400));
                let at = future(rng);
                p.schedule(&id, RunAt::AtMillis(T0 + at), b"").unwrap();
                model.pending.insert(id, at);
            }
        }
    }
}
