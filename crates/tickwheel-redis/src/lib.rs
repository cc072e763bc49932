//! Durable delayed tasks on Redis, delivered by workers that keep the next window of their
//! tasks in an exact in-memory [`tickwheel::Wheel`].
//!
//! A [`Producer`] stores tasks (an id, a run-at instant, payload bytes) in Redis; any number of
//! [`Worker`]s, in any number of processes on any machines, share them and deliver each one to
//! a handler at its run-at instant.
//!
//! ```no_run
//! use std::time::Duration;
//! use tickwheel_redis::{Config, Outcome, Producer, RunAt, Worker};
//!
//! # fn main() -> Result<(), tickwheel_redis::Error> {
//! let config = Config::new("redis://127.0.0.1:6379/", "orders");
//!
//! // Producer: Ok means the task is stored (and, with `appendfsync always`, on disk).
//! let mut producer = Producer::connect(&config)?;
//! producer.schedule("cancel-order-42", RunAt::After(Duration::from_secs(1800)), b"order 42")?;
//! producer.reschedule("cancel-order-42", RunAt::After(Duration::from_secs(3600)))?;
//! assert!(producer.cancel("cancel-order-42")?); // true: it will not be delivered
//!
//! // Worker: runs until its stop handle is used; the handler's Outcome::Ack removes the task.
//! let mut worker = Worker::connect(&config)?;
//! worker.run(|task| {
//!     println!("{} due at {:?}, attempt {}", task.id, task.due(), task.attempt);
//!     Outcome::Ack
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Stored means stored.** [`Producer::schedule`] returns `Ok` only after Redis has applied
//!   the change; with `appendonly yes` and `appendfsync always` Redis writes and fsyncs its
//!   append-only file before it replies, so a task acknowledged as stored survives a Redis
//!   restart or crash. (`appendfsync everysec` may lose the last second of writes on a power
//!   loss or kernel crash; a plain process crash loses nothing either way.) When Redis cannot
//!   be reached the call returns an error: never a silent loss. Replicas get writes
//!   asynchronously, so a failover may lose what the primary acknowledged, unless
//!   [`Config::confirm_replicas`] asks for replicas to confirm every write (`WAIT`): then a
//!   call returns `Ok` only once they have it, or [`Error::NotConfirmed`] (applied on the
//!   primary, may be lost in a failover: retry).
//! - **Never early.** A task is claimed by a script that compares its run-at with the Redis
//!   server's clock (`TIME`), the one clock every producer and worker shares: at most
//!   [`Config::claim_ahead`] (1 s by default) before its run-at. The worker then hands it to
//!   the handler at its run-at by its estimate of the server's clock, which never runs ahead
//!   of it (see *Clock* below).
//! - **At least once.** A claimed task stays in Redis, in the in-flight set, until the handler
//!   acknowledges it. If the worker dies or stalls, the task is delivered again: by the same
//!   worker after the visibility timeout, or at once by the worker that takes the shard over.
//!   Duplicates happen only for tasks that were in flight at such a failure; every delivery
//!   carries the id, due time, attempt and version a handler needs to de-duplicate.
//!   [`Delivery::attempt`] counts handler calls: a claim sent again after a lost reply is the
//!   same attempt.
//! - **Fenced.** A worker that lost a shard (it stalled past its lease and another took over)
//!   can neither claim nor acknowledge that shard's tasks: every claim and acknowledgement
//!   checks the shard's epoch inside the same script. Nor does it deliver what it claimed
//!   ahead: before each delivery it checks that its lease still holds, counting the lease
//!   from the moment it *sent* the renewal (Redis extends it later than that), less a
//!   twentieth for clock-rate differences.
//! - **Errors that say what was stored, and a schedule safe to send again.** Scheduling an existing
//!   id replaces that task (a new version, delivered again even if the old one ran), so a producer
//!   retries only what a failed call did not store: a bulk call that stored part of its tasks says
//!   which ([`Error::Partial`]), and a single call is in doubt only after a broken connection (see
//!   [`Producer`], *What an error says*). [`Producer::schedule_once`] stores a task only when no
//!   task has its id and no `schedule_once` named the id within [`Config::idempotency_window`]:
//!   sent again after any error within that window, it never stores a task that already ran.
//!   [`Producer::cancel`] returns `true` exactly when the task was pending and will not be
//!   delivered. A task claimed ahead of its run-at is in flight: it will be delivered, so `cancel`
//!   answers `false` during the last [`Config::claim_ahead`] before its run-at, and replacing it
//!   then leaves the claimed delivery in place (both versions are delivered; handlers tell them
//!   apart by version).
//!
//! # Recurring tasks
//!
//! [`Producer::schedule_recurring`] stores a task with a [`Recurrence`]: a fixed period, or a
//! cron pattern in an IANA time zone (evaluated by [`tickwheel::cron::Cron`], with its
//! daylight-saving policy). Each run is delivered like a one-shot task, carrying
//! [`Delivery::recurrence`]. The worker computes the next run when the handler acknowledges,
//! and the script that acknowledges the run re-arms the task at it in the same atomic step,
//! and only if the run is still the current one (same shard epoch, version and attempt): a
//! crash falls either before the acknowledgement (the same run is delivered again) or after
//! the re-arm, never between, so no run is skipped or doubled by a crash. The next run is the
//! schedule's first instant after both the run's due time and the moment it was claimed (runs
//! missed while nothing delivered are not replayed one by one; a period keeps its phase).
//! [`Producer::cancel`] stops the series, pending or in flight.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use tickwheel_redis::{Config, Producer, Recurrence, RunAt};
//! # fn main() -> Result<(), tickwheel_redis::Error> {
//! # let mut producer = Producer::connect(&Config::new("redis://127.0.0.1:6379/", "orders"))?;
//! let report = Recurrence::cron("0 9 * * MON-FRI", "Europe/Paris")?;
//! let now_ms = 1_800_000_000_000; // ms since the Unix epoch
//! let first = report.next_after_ms(now_ms)?.expect("the pattern fires again");
//! producer.schedule_recurring("daily-report", RunAt::AtMillis(first), &report, b"")?;
//! let every = Recurrence::Every(Duration::from_secs(60));
//! producer.schedule_recurring("heartbeat", RunAt::After(Duration::from_secs(60)), &every, b"")?;
//! # Ok(())
//! # }
//! ```
//!
//! # Failures
//!
//! A handler answers [`Outcome::fail`] when an attempt failed (the task is retried after the
//! [`RetryPolicy`]'s backoff), [`Outcome::non_retryable`] when no retry can succeed, or
//! panics (caught: a failed attempt whose message is the error). Each failure is recorded
//! with the task ([`ErrorLog`]: the count, the first failure, the last [`ERRORS_KEPT`]
//! errors); once the policy's `max_attempts` attempts have failed, or at once for a
//! non-retryable failure, the task moves to its shard's *failed set*, kept within
//! [`Config::failed_retention`], where [`Inspector::failed`] lists it and an operator
//! retries or discards it ([`Producer::retry_failed`], [`Producer::discard_failed_where`]).
//! The namespace's policy is [`Config::retry`]; a task may carry its own ([`Task::retry`]).
//! A recurring series goes on after a failed run unless its policy says
//! [`stop_series_on_failure`](RetryPolicy::stop_series_on_failure).
//!
//! ```no_run
//! # use std::time::Duration;
//! use tickwheel_redis::{Config, FailedFilter, Inspector, Outcome, Producer, RetryPolicy, Worker};
//! # fn main() -> Result<(), tickwheel_redis::Error> {
//! let mut config = Config::new("redis://127.0.0.1:6379/", "orders");
//! config.retry = RetryPolicy::fixed(5, Duration::from_secs(30));
//! let mut worker = Worker::connect(&config)?;
//! worker.run(|task| match std::str::from_utf8(&task.payload) {
//!     Ok(order) => Outcome::fail(format!("payment service down for {order}")),
//!     Err(_) => Outcome::non_retryable("the payload is not UTF-8"),
//! })?;
//! // Later, once the payment service is back:
//! let mut inspector = Inspector::connect(&config)?;
//! for failed in inspector.failed(&FailedFilter::default())? {
//!     println!("{}: {:?}", failed.id, failed.errors.errors.last());
//! }
//! let retry = FailedFilter { error_contains: Some("payment".into()), ..FailedFilter::default() };
//! let report = Producer::connect(&config)?.retry_failed_where(&retry)?;
//! println!("retried {} of {}", report.acted, report.examined);
//! # Ok(())
//! # }
//! ```
//!
//! [`Producer::pause`] stops every claim of a namespace (scheduling, cancelling and
//! inspection go on) until [`Producer::resume`]; what fell due meanwhile is then delivered
//! in run-at order.
//!
//! # From async code
//!
//! Every call blocks until Redis answers (a round trip; a connect timeout when Redis is
//! away). An [`AsyncProducer`] runs a [`Producer`] on a thread of its own and hands async
//! code a future per call ([`AsyncCall`]), woken on any executor; calls run in the order
//! they were made. An [`AsyncInspector`] does the same for an [`Inspector`] (an operator's
//! API in an async web server). A [`Worker`] is a thread of its own anyway: start it with
//! `std::thread::spawn` (or `spawn_blocking`), and let its handler hand work to the
//! executor through a channel if it must.
//!
//! # Design
//!
//! **Shards.** A namespace holds a fixed number of shards (chosen when the namespace is created and
//! stored in it); a task lives in shard `fnv1a64(id) % shards`. A shard's keys share the hash tag
//! `{namespace:shard}`: a hash of tasks (id → `version:attempt:due:recurrence length:` then the
//! recurrence and the payload), a sorted set of in-flight ids scored by visibility deadline, a
//! state hash (lease owner, epoch, expiry, horizon, version counter, and a count of pending tasks
//! per time bucket), and the time index of pending tasks: one list of ids per 1 s bucket of run-ats
//! (ms since the Unix epoch), and a small sorted set of the buckets that hold any; the failed set
//! and its records; and the ids [`Producer::schedule_once`] remembers (a sorted set, id → end of
//! its window). Every change is one Lua script over one shard's keys.
//!
//! *Why time buckets instead of a sorted set of tasks?* Memory. A sorted set entry costs
//! about 100 bytes (a skiplist node, a dictionary entry, the id again); an id in a bucket list
//! costs its length plus two bytes, packed in the list's blocks. A task is then its hash entry
//! and its list entry: about 175 bytes for a 64-byte payload and an 11-byte id, where the
//! sorted set layout took 265. A window read takes whole buckets in order, so nothing is lost
//! for want of an order inside a bucket; a list entry whose task has since left the bucket
//! stays until the bucket's count of pending tasks reaches zero and the whole list goes. The
//! price: a bucket carries its own key, index entry and count (about 390 bytes), so tasks
//! spread thinly over time cost more than with a sorted set: at one task a second over 16
//! shards, 562 bytes a task against 266 (`cargo run --release -p tickwheel-lab --example
//! memory_layout` measures both cases).
//!
//! *Why hash-tagged shards?* A Redis Cluster places keys by the hash of their `{tag}`, so one
//! shard's keys sit on one node (a script may touch them together) and many shards spread over
//! the nodes. Shards also let many workers share the load without contending for one key.
//!
//! **Leases with fencing tokens.** Workers register with a heartbeat and each takes a fair share
//! (`ceil(shards / live workers)`) of the shards through leases that it renews. Taking a shard
//! increments its epoch. Every claim, acknowledgement, retry and window load passes the epoch
//! its worker holds, and the script refuses it when the shard's epoch has moved on.
//!
//! *Why leases with fencing tokens?* A lease alone cannot stop a worker that was paused (a GC
//! pause, SIGSTOP, a slow disk) past its lease: when it resumes it still believes it owns the
//! shard. The epoch makes that belief harmless: the check runs inside Redis, atomically with the
//! change, so a stale worker's late claims and acknowledgements are rejected no matter what it
//! believes. The new owner re-delivers the previous owner's in-flight tasks at once, since their
//! acknowledgements can no longer succeed.
//!
//! **A window in a wheel.** The owner of a shard loads the pending tasks due within the next
//! window (10 s by default, to the end of the 1 s time bucket holding its end) into a
//! [`tickwheel::Wheel`] with millisecond ticks, and sleeps until
//! the wheel's next deadline. The same script that reads the window records its end (the
//! shard's horizon); a schedule at or before the horizon publishes a notification on the
//! namespace's channel, so the owner adds it to its wheel at once. The window is topped up
//! once a quarter of it has passed, [`Config::window_limit`] tasks a step between deliveries.
//! Cancels and reschedules need no message: when the wheel fires, the claim script finds the
//! task gone or not yet due and says so.
//!
//! **Claims ahead, on their own thread.** [`Worker::run`] runs two threads: an I/O thread
//! that renews leases, reads windows, claims tasks [`Config::claim_ahead`] before their
//! run-at and sends acknowledgements, and the calling thread, which holds the claimed tasks
//! and calls the handler for each at its run-at. Under `appendfsync always` every write round
//! trip waits for an fsync, which can take hundreds of milliseconds while producers write
//! heavily; claiming ahead puts those waits before the run-at instead of after it. A claim
//! whose reply is lost (the connection or the server died on the way back) may have been
//! applied: the worker sends it again once Redis answers, forced to take the task even in
//! flight (under the same shard epoch, only this worker can have claimed it), so the task is
//! delivered at its run-at rather than after the visibility timeout. The script sees that
//! the task is in flight before its visibility deadline under the same epoch, so the claim
//! sent again is the same attempt, not a second one.
//!
//! **Round trips.** A wake-up claims everything due within the horizon, on all the worker's
//! shards, in one pipeline that also carries the acknowledgements received so far (an
//! acknowledgement waits at most 20 ms for a claim to carry it); claims go before window
//! reads. Renewals and window reads are pipelined likewise. A separate connection reads the
//! server's clock (`TIME`; on a Cluster, each primary's) every 100 ms.
//!
//! *Why a window in a wheel instead of polling?* A poller (a sorted set read every second, as
//! Sidekiq, rq-scheduler and BullMQ's delayed sets do) delivers up to its poll interval late, and
//! polling faster costs Redis round trips whether or not anything is due. The wheel wakes the
//! worker at the due millisecond, and Redis is read once per window, not once per tick.
//!
//! **Clock.** Scripts read the Redis server's clock. Workers estimate it from the replies they
//! get, so they wake at the right local instant; if one wakes early the claim script answers
//! "not yet" and the task is re-armed. Each estimate is a lower bound (the server's reading
//! less the local instant its reply arrived, the tightest recent one, sliding back 1 ms a
//! second between readings), so it never runs ahead. On a Redis Cluster every node has a
//! clock of its own and the worker keeps one estimate per node: each claim reply names its
//! node (`CLUSTER MYID`), the clock connection reads every primary, and a task claimed ahead
//! is delivered when the estimate of *the node that claimed it* reaches its run-at, wherever
//! its shard moves afterwards. [`TimeSource::Manual`] replaces the server clock with a
//! value the caller sets, for tests on virtual time.
//!
//! **Limits.** Ids are 1 to [`MAX_ID_LEN`] bytes; payloads at most [`Config::max_payload`] bytes
//! (default [`DEFAULT_MAX_PAYLOAD`]); namespaces 1 to 64 bytes without `{`, `}` or whitespace.
//! A namespace records the schema version of its layout, and a client of another version gets
//! [`Error::IncompatibleNamespace`] instead of misreading it.
//!
//! **Tools** (not part of the library's API). Feature `testing`: the `server` module starts
//! a private `redis-server`, Redis Cluster, or primary with replicas under Redis Sentinel
//! (tests, benchmarks, demos; failovers), and the `bench`
//! module is the durable workload beside a polled sorted set (`tickwheel bench --durable`).
//! Feature `metrics`: the `metrics` module renders a worker's
//! [`status`](Worker::status) in the Prometheus text format and serves it over HTTP.
//! Feature `worker-bin`: the `tickwheel-redis-worker` binary, a worker process that logs its
//! deliveries (crash tests, demos), serves its metrics (`--metrics PORT`) and releases its
//! shards on SIGTERM.
//!
//! **Redis Cluster.** A URL `redis+cluster://[user:password@]host:port[,host:port...]`
//! ([`CLUSTER_SCHEME`], or [`Config::cluster`] from a list of seed nodes; the credentials,
//! given once, are every node's) makes producers and workers Cluster clients: they learn the
//! slot map from the seeds, send each script call to the node of its shard's slot and follow
//! `MOVED`/`ASK` redirections. Each script touches one shard's keys
//! (one slot), and the namespace's own keys (schema version, worker registry, notification
//! channel) share the tag `{namespace}`, so they sit on one node. A pipeline is split by node
//! (one round trip per node involved) and its replies keep their order. Notifications are a
//! plain `PUBLISH`, which a Cluster forwards to every node, so a worker subscribes on any
//! reachable seed node. Shards, not tasks, are placed on nodes: give a namespace several
//! shards per node so its load spreads (the shard count is fixed when it is created).
//! Workers read each node's id with `CLUSTER MYID` (in their claim scripts and clock probes,
//! see *Clock*), so a Cluster whose ACLs or configuration refuse that command cannot serve
//! them: their claims fail and are retried.
//!
//! **Redis Sentinel.** A URL `redis+sentinel://host[:port][,host[:port]...]/<primary
//! name>[/db]` ([`SENTINEL_SCHEME`]; see [`Config::url`]) names the sentinels and the
//! primary they watch. Every connection asks the sentinels where the primary is and checks
//! (`ROLE`) that it is one; every owner of a connection asks again, at most once a second,
//! whether the primary moved, and reconnects when it did (a demoted primary goes on taking
//! writes, and losing them, until a sentinel makes it a replica). A `READONLY` reply drops
//! the connection on any URL. What the old primary took and had not replicated is lost with
//! a failover: docs/operations.md says what that costs.
//!
//! **TLS** (feature `tls`). `rediss://` reaches one server over TLS and `rediss+cluster://`
//! ([`CLUSTER_TLS_SCHEME`]) every node of a Cluster, trusting the system's certificate
//! authorities or those of [`Config::tls_ca`], and presenting [`Config::tls_client_cert`] to
//! a server that requires a client certificate; every connection (the worker's subscription
//! and clock probes included) is then a TLS one. A certificate no trusted authority signed
//! fails the connect at once, saying so, rather than being retried as an unreachable server.
//! `rediss+sentinel://` ([`SENTINEL_TLS_SCHEME`]) reaches the sentinels and the primary they
//! name over TLS. The first TLS client made installs ring as the process's
//! rustls cryptography provider, unless the program installed one before.

mod async_client;
mod config;
mod connection;
mod error;
mod failure;
mod inspect;
mod limits;
#[cfg(feature = "metrics")]
pub mod metrics;
mod namespace;
mod producer;
mod protocol;
mod recurrence;
#[cfg(feature = "testing")]
pub mod server;
mod task;
mod worker;

#[cfg(feature = "testing")]
pub mod bench;

pub use async_client::{AsyncCall, AsyncInspector, AsyncProducer};
pub use config::{
    ClientCert, Config, ManualTime, TimeSource, CLUSTER_SCHEME, CLUSTER_TLS_SCHEME,
    SENTINEL_SCHEME, SENTINEL_TLS_SCHEME,
};
pub use error::{url_without_password, Applied, Error};
pub use failure::{
    AttemptError, ErrorLog, FailReason, FailedCounts, Retention, RetryPolicy, ERRORS_KEPT,
    MAX_ERROR_LEN,
};
pub use inspect::{
    FailedFilter, FailedTask, Inspector, ListFilter, LiveWorker, Scan, ShardStats, StateFilter,
    Stats, TaskDetail, TaskInfo, Upcoming, MAX_SLOTS, MAX_STEP, PREVIEW_BYTES,
};
pub use limits::{DEFAULT_MAX_PAYLOAD, MAX_ID_LEN, SCHEMA_VERSION};
pub use producer::{Acted, BulkReport, Producer};
pub use protocol::{Scheduled, ScheduledOnce};
pub use recurrence::{Recurrence, MAX_RECURRENCE_LEN};
pub use task::{RunAt, Task, TaskState};
pub use worker::{
    Delivery, Lateness, Outcome, Redelivery, RedeliveryCounts, ShardLoss, ShardStatus, StopHandle,
    Worker, WorkerEvent, WorkerSnapshot, WorkerStats, WorkerStatus,
};
