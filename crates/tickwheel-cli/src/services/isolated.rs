//! Runs each service entrant in a fresh child process (`tickwheel service-worker`, a hidden
//! subcommand, through [`crate::child`]), so its peak memory and CPU time are its own: in one
//! process, an entrant would reuse pages an earlier one freed to the allocator and show no
//! memory growth.
//!
//! The child regenerates the same delays from the seed, runs [`super::run`], draws its
//! progress bar on the inherited stderr and prints one JSON sample on stdout.

use super::report::{Lateness, ServiceSample};
use super::{ServiceEntrant, TickwheelSetup};
use crate::error::Result;
use serde_json::Value;
use std::time::Duration;

/// Runs W4 for `entrant` in a child process and returns its sample; `setup` is how the
/// tickwheel entrants are built.
pub fn run_isolated(
    entrant: ServiceEntrant,
    seed: u64,
    n: usize,
    max_delay_ms: u64,
    setup: TickwheelSetup,
) -> Result<ServiceSample> {
    let args = [
        "service-worker".to_owned(),
        "--entrant".to_owned(),
        entrant.name().to_owned(),
        "--n".to_owned(),
        n.to_string(),
        "--seed".to_owned(),
        seed.to_string(),
        "--max-delay-ms".to_owned(),
        max_delay_ms.to_string(),
        "--tick-us".to_owned(),
        setup.tick.as_micros().to_string(),
        "--wake-us".to_owned(),
        setup.wake_interval.as_micros().to_string(),
    ];
    crate::child::run("W4", entrant.name(), &args, |json| from_json(entrant, json))
}

fn pairs(value: &Value) -> Option<Vec<(f64, f64)>> {
    value
        .as_array()?
        .iter()
        .map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
        .collect()
}

/// Reads back what [`ServiceSample::to_json`] wrote.
fn lateness(v: &Value) -> Option<Lateness> {
    Some(Lateness {
        p50: v["p50"].as_u64()?,
        p99: v["p99"].as_u64()?,
        p999: v["p999"].as_u64()?,
        max: v["max"].as_u64()?,
    })
}

fn from_json(entrant: ServiceEntrant, v: &Value) -> Option<ServiceSample> {
    let histogram = v["lateness_histogram_ms"]
        .as_array()?
        .iter()
        .map(|b| {
            let bound = b["le_ms"].as_f64().unwrap_or(f64::INFINITY);
            Some((bound, b["tasks"].as_u64()? as usize))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ServiceSample {
        entrant,
        n: v["n"].as_u64()? as usize,
        max_delay_ms: v["max_delay_ms"].as_u64()?,
        schedule: Duration::from_secs_f64(v["schedule_s"].as_f64()?),
        schedule_cpu: v["schedule_thread_cpu_s"]
            .as_f64()
            .map(Duration::from_secs_f64),
        schedule_others_cpu: v["schedule_others_cpu_s"]
            .as_f64()
            .map(Duration::from_secs_f64),
        wall: Duration::from_secs_f64(v["wall_s"].as_f64()?),
        cpu: v["cpu_s"].as_f64().map(Duration::from_secs_f64),
        peak_rss: v["peak_rss_growth_bytes"].as_u64(),
        tick: v["tickwheel_resolution_ns"]
            .as_u64()
            .map(Duration::from_nanos),
        lateness: lateness(&v["lateness_ns"])?,
        after_producer_n: v["after_producer_tasks"].as_u64()? as usize,
        after_producer: lateness(&v["after_producer_lateness_ns"])?,
        cdf: pairs(&v["lateness_cdf_ms"])?,
        histogram,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_survives_the_trip_through_json() {
        let sample = ServiceSample {
            entrant: ServiceEntrant::HeapThread,
            n: 3,
            max_delay_ms: 7,
            schedule: Duration::from_micros(5),
            schedule_cpu: Some(Duration::from_micros(4)),
            schedule_others_cpu: Some(Duration::from_micros(6)),
            wall: Duration::from_millis(8),
            cpu: Some(Duration::from_millis(2)),
            peak_rss: None,
            tick: Some(Duration::from_micros(10)),
            lateness: Lateness {
                p50: 1,
                p99: 2,
                p999: 3,
                max: 4,
            },
            after_producer_n: 2,
            after_producer: Lateness {
                p50: 5,
                p99: 6,
                p999: 7,
                max: 8,
            },
            cdf: vec![(0.0, 0.5), (0.1, 1.0)],
            histogram: vec![(1.0, 2), (f64::INFINITY, 1)],
        };
        let back = from_json(ServiceEntrant::HeapThread, &sample.to_json()).unwrap();
        assert_eq!(back.n, 3);
        assert_eq!(back.max_delay_ms, 7);
        assert_eq!(back.wall, sample.wall);
        assert_eq!(back.cpu, sample.cpu);
        assert_eq!(back.schedule_cpu, sample.schedule_cpu);
        assert_eq!(back.schedule_others_cpu, sample.schedule_others_cpu);
        assert_eq!(back.peak_rss, None);
        assert_eq!(back.lateness.max, 4);
        assert_eq!(back.tick, sample.tick);
        assert_eq!(back.after_producer_n, 2);
        assert_eq!(back.after_producer.p99, 6);
        assert_eq!(back.cdf, sample.cdf);
        assert_eq!(back.histogram, sample.histogram);
    }
}
