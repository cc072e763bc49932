//! A worker's counters in the Prometheus text format (OpenMetrics), and a small HTTP endpoint
//! that serves them (feature `metrics`).
//!
//! [`encode`] renders a [`WorkerSnapshot`] with the `prometheus-client` crate: names under
//! `tickwheel_redis_`, counters ending in `_total`, durations in seconds. [`serve`] answers
//! `GET /metrics` from a thread of its own, reading the worker's [`WorkerStatus`] at each
//! scrape; bind it to loopback (`127.0.0.1:PORT`) unless the network may read it.
//!
//! | metric | type | what |
//! |---|---|---|
//! | `tickwheel_redis_deliveries_total` | counter | deliveries handed to the handler |
//! | `tickwheel_redis_redeliveries_total{cause}` | counter | deliveries of an attempt after the first, by [`Redelivery`](crate::Redelivery) cause |
//! | `tickwheel_redis_acks_total` | counter | acknowledgements Redis accepted |
//! | `tickwheel_redis_stale_acks_total` | counter | acknowledgements of a replaced delivery |
//! | `tickwheel_redis_retries_total` | counter | retries accepted: snoozes ([`Outcome::RetryAfter`](crate::Outcome::RetryAfter)) and failed attempts with attempts left |
//! | `tickwheel_redis_failed_attempts_total` | counter | failed attempts Redis recorded (handler errors and panics) |
//! | `tickwheel_redis_failed_total{reason}` | counter | tasks this worker moved to the failed set, by [`FailReason`](crate::FailReason) (`exhausted`, `non_retryable`) |
//! | `tickwheel_redis_claims_total` | counter | tasks claimed from Redis |
//! | `tickwheel_redis_lapsed_claims_total` | counter | claims not delivered: the lease was in doubt |
//! | `tickwheel_redis_fenced_total` | counter | calls refused: the shard's epoch moved on |
//! | `tickwheel_redis_shard_acquisitions_total` | counter | shards taken |
//! | `tickwheel_redis_shard_losses_total` | counter | shards lost or given up |
//! | `tickwheel_redis_redis_errors_total` | counter | Redis errors recovered from |
//! | `tickwheel_redis_bad_recurrences_total` | counter | runs whose recurrence cannot be evaluated here |
//! | `tickwheel_redis_delivery_lateness_seconds{delivery}` | histogram | how late deliveries reached the handler: `delivery="first"` past the run-at (or past the notice of a task stored after its run-at), `delivery="redelivery"` past the run-at or the claim that redelivered it ([`WorkerStats::lateness`](crate::WorkerStats::lateness)); buckets up to an hour |
//! | `tickwheel_redis_claims_in_hand` | gauge | tasks claimed, not yet delivered nor given up |
//! | `tickwheel_redis_shards_held` | gauge | shards whose lease the worker can still be sure of ([`WorkerSnapshot::shards_held`]): 0 once every lease ran out during an outage |
//! | `tickwheel_redis_shard_lease_remaining_seconds{shard}` | gauge | each lease's time left |
//! | `tickwheel_redis_shards_paused` | gauge | held shards that are paused ([`Producer::pause`](crate::Producer::pause)) |
//! | `tickwheel_redis_wheel_tasks` | gauge | tasks in the worker's wheel |
//! | `tickwheel_redis_held_outcomes` | gauge | outcomes waiting for Redis |
//! | `tickwheel_redis_connected` | gauge | 1 when the last step reached Redis |

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::{Lateness, WorkerSnapshot, WorkerStatus};

/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders a worker's snapshot in the OpenMetrics text format (see the module's table).
pub fn encode(s: &WorkerSnapshot) -> String {
    let mut r = Registry::with_prefix("tickwheel_redis");
    register_counters(&mut r, s);
    register_gauges(&mut r, s);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)
        .expect("formatting into a String cannot fail");
    out
}

/// The counters, and the lateness histogram.
fn register_counters(r: &mut Registry, s: &WorkerSnapshot) {
    let st = &s.stats;
    let counters: [(&str, &str, u64); 12] = [
        (
            "deliveries",
            "Deliveries handed to the handler",
            st.delivered,
        ),
        ("acks", "Acknowledgements Redis accepted", st.acked),
        (
            "stale_acks",
            "Acknowledgements of a delivery no longer current",
            st.stale_acks,
        ),
        (
            "retries",
            "Retries accepted: snoozes and failed attempts with attempts left",
            st.retried,
        ),
        ("claims", "Tasks claimed from Redis", st.claimed),
        (
            "failed_attempts",
            "Failed attempts Redis recorded (handler errors and panics)",
            st.failed_attempts,
        ),
        (
            "lapsed_claims",
            "Claims not delivered: the lease was in doubt",
            st.lapsed,
        ),
        (
            "fenced",
            "Calls refused because the shard's epoch moved on",
            st.fenced,
        ),
        ("shard_acquisitions", "Shards taken", st.acquired),
        ("shard_losses", "Shards lost or given up", st.dropped),
        (
            "redis_errors",
            "Redis errors recovered from",
            st.redis_errors,
        ),
        (
            "bad_recurrences",
            "Runs whose recurrence this worker cannot evaluate",
            st.bad_recurrences,
        ),
    ];
    for (name, help, v) in counters {
        r.register(name, help, ConstCounter::new(v));
    }
    let by_cause = st.redelivered_by.by_cause().map(|(c, n)| (c.as_str(), n));
    r.register(
        "redeliveries",
        "Deliveries of an attempt after the first, by cause",
        Labelled("cause", by_cause.to_vec()),
    );
    let by_reason = st.failed.by_reason().map(|(r, n)| (r.as_str(), n));
    r.register(
        "failed",
        "Tasks moved to the failed set, by reason",
        Labelled("reason", by_reason.to_vec()),
    );
    r.register_with_unit(
        "delivery_lateness",
        "How late deliveries reached the handler, by the Redis node's clock: first ones past \
         their run-at (or their notice, if stored after it), redeliveries past their run-at or \
         their new claim",
        Unit::Seconds,
        LatenessMetric([
            ("first", st.lateness),
            ("redelivery", st.redelivery_lateness),
        ]),
    );
}

/// The gauges: the worker's state now.
fn register_gauges(r: &mut Registry, s: &WorkerSnapshot) {
    let st = &s.stats;
    let in_hand = st.claimed.saturating_sub(st.delivered + st.lapsed);
    let paused = s.shards.iter().filter(|x| x.paused).count();
    let gauges: [(&str, &str, i64); 6] = [
        (
            "claims_in_hand",
            "Tasks claimed and not yet handed to the handler or given up",
            in_hand as i64,
        ),
        (
            "shards_held",
            "Shards whose lease this worker can still be sure of",
            s.shards_held() as i64,
        ),
        (
            "shards_paused",
            "Held shards that are paused: nothing is claimed from them",
            paused as i64,
        ),
        (
            "wheel_tasks",
            "Tasks in the worker's wheel",
            s.in_wheel as i64,
        ),
        (
            "held_outcomes",
            "Outcomes waiting for Redis",
            s.held_outcomes as i64,
        ),
        (
            "connected",
            "1 when the worker's last step reached Redis",
            i64::from(s.connected),
        ),
    ];
    for (name, help, v) in gauges {
        r.register(name, help, ConstGauge::new(v));
    }
    let leases = s
        .shards
        .iter()
        .map(|x| (x.shard, x.lease_left.as_secs_f64()));
    r.register_with_unit(
        "shard_lease_remaining",
        "Time left on each lease, by the worker's own reckoning",
        Unit::Seconds,
        LeaseGauges(leases.collect()),
    );
}

/// The lateness histograms, their buckets in seconds, one series per kind of delivery
/// (label `delivery`).
#[derive(Debug)]
struct LatenessMetric([(&'static str, Lateness); 2]);

impl EncodeMetric for LatenessMetric {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (kind, h) in &self.0 {
            let buckets: Vec<(f64, u64)> = Lateness::BOUNDS_MS
                .iter()
                .map(|&ms| ms as f64 / 1000.0)
                .chain([f64::INFINITY])
                .zip(h.counts)
                .collect();
            let none: Option<&HashMap<usize, Exemplar<NoLabelSet, f64>>> = None;
            let labels = [("delivery", *kind)];
            encoder.encode_family(&labels)?.encode_histogram(
                h.sum_ms as f64 / 1000.0,
                h.count(),
                &buckets,
                none,
            )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A counter with one series per value of a label (`cause`, `reason`).
#[derive(Debug)]
struct Labelled(&'static str, Vec<(&'static str, u64)>);

impl EncodeMetric for Labelled {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for &(value, n) in &self.1 {
            let labels = [(self.0, value)];
            encoder
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// One gauge per shard, labelled `shard`.
#[derive(Debug)]
struct LeaseGauges(Vec<(u32, f64)>);

impl EncodeMetric for LeaseGauges {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (shard, secs) in &self.0 {
            let labels = [("shard", shard.to_string())];
            encoder.encode_family(&labels)?.encode_gauge(secs)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// A running metrics endpoint; stopped (and its thread joined) on drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `GET /metrics` (the worker's snapshot, [`encode`]d at each request) on `addr`,
/// from a thread of its own; any other path is a 404. One request per connection.
pub fn serve(addr: impl ToSocketAddrs, status: WorkerStatus) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("tickwheel-redis-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(conn) = conn {
                    let _ = answer(conn, &status);
                }
            }
        })?;
    Ok(MetricsServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// Reads one request's head and answers it.
fn answer(mut conn: TcpStream, status: &WorkerStatus) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The rest of the head, up to the blank line (bounded).
    let mut header = String::new();
    for _ in 0..100 {
        header.clear();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (code, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, encode(&status.snapshot())),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "not found: try /metrics\n".into(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    write!(
        conn,
        "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}
