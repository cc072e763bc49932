//! Runs each service entrant in a fresh child process (`tickwheel service-worker`, a hidden
//! subcommand), so its peak memory and CPU time are its own: in one process, an entrant
//! would reuse pages an earlier one freed to the allocator and show no memory growth.
//!
//! The child regenerates the same delays from the seed, runs [`super::run`], draws its
//! progress bar on the inherited stderr and prints one JSON sample on stdout.

use super::report::{Lateness, ServiceSample};
use super::{ServiceEntrant, TickwheelSetup};
use crate::error::{Error, Result};
use serde_json::Value;
use std::process::{Command, Stdio};
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
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find own executable", e))?;
    let output = Command::new(exe)
        .args(["service-worker", "--entrant", entrant.name()])
        .args(["--n", &n.to_string(), "--seed", &seed.to_string()])
        .args(["--max-delay-ms", &max_delay_ms.to_string()])
        .args(["--tick-us", &setup.tick.as_micros().to_string()])
        .args(["--wake-us", &setup.wake_interval.as_micros().to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::io("cannot start the W4 worker", e))?;
    if !output.status.success() {
        return Err(Error::Worker {
            entrant: entrant.name(),
            problem: format!("failed ({}); its message is above", output.status),
        });
    }
    let json: Value = serde_json::from_slice(&output.stdout).map_err(|e| Error::Worker {
        entrant: entrant.name(),
        problem: format!("printed no sample: {e}"),
    })?;
    from_json(entrant, &json).ok_or_else(|| Error::Worker {
        entrant: entrant.name(),
        problem: "printed a malformed sample".to_owned(),
    })
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
        assert_eq!(back.peak_rss, None);
        assert_eq!(back.lateness.max, 4);
        assert_eq!(back.tick, sample.tick);
        assert_eq!(back.after_producer_n, 2);
        assert_eq!(back.after_producer.p99, 6);
        assert_eq!(back.cdf, sample.cdf);
        assert_eq!(back.histogram, sample.histogram);
    }
}
