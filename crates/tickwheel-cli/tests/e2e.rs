//! End to end: the real `tickwheel` binary on tiny inputs, every entrant, every output file,
//! verification on; and bad arguments rejected with a message, never a panic.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn tickwheel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickwheel"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the tickwheel binary runs")
}

/// Runs `tickwheel` with `args`, demands success, and returns its stdout; `what` and both
/// outputs go into the failure message.
fn tickwheel_ok(args: &[&str], what: &str) -> String {
    let run = tickwheel(args);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "{what} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

const QUEUES: [&str; 10] = [
    "tickwheel-wheel",
    "tickwheel-slim",
    "tickwheel-id",
    "tickwheel-hashed",
    "tickwheel-heap",
    "std-binaryheap",
    "priority-queue",
    "btreemap",
    "tokio-delayqueue",
    "hhwt",
];
/// W8's entrants; the last, a floor with no timer, has no sleeping tasks.
const FUTURES: [&str; 5] = [
    "tickwheel-futures",
    "tickwheel-service-futures",
    "tokio-time",
    "async-io",
    "no-timer",
];
const SERVICES: [&str; 11] = [
    "tickwheel-service",
    "tickwheel-service-handle",
    "tickwheel-service-here",
    "tokio-sleep",
    "delayqueue-channel",
    "binaryheap-thread",
    "bucket-floor",
    "floor-workers",
    "floor-closures",
    "floor-indexed",
    "floor-direct",
];

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("results.json written");
    serde_json::from_str(&text).expect("results.json is JSON")
}

#[test]
fn whole_bench_on_tiny_n_writes_every_output_for_every_entrant() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let args = [
        "bench",
        "--n",
        "300,1000",
        "--repeat",
        "1",
        "--w4-n",
        "300",
        "--w4-max-delay-ms",
        "20",
        "--w4-tick-us",
        "10",
        "--w4-wake-us",
        "40",
        "--w8-ops",
        "300",
        "--w8-tasks",
        "50",
        "--w8-max-delay-ms",
        "15",
        "--w8-window-ms",
        "60",
        "--out",
        out.to_str().unwrap(),
    ];
    let stdout = tickwheel_ok(&args, "bench");
    for file in [
        "results.csv",
        "results.json",
        "w1-ns-per-timer.svg",
        "w2-ns-per-timer.svg",
        "w3-ns-per-timer.svg",
        "w5-ns-per-op.svg",
        "w7-ns-per-op.svg",
        "w4-lateness-cdf.svg",
    ] {
        let path = out.join(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 100, "{file} missing or empty");
    }
    let svg = std::fs::read_to_string(out.join("w2-ns-per-timer.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("tickwheel-wheel"));
    assert!(stdout.contains("every timer fired exactly once, never early"));
    assert!(stdout.contains("W5 churn") && stdout.contains("priority-queue"));
    assert!(stdout.contains("W7 steady state"));
    assert!(stdout.contains("command: ") && stdout.contains("machine: "));
    assert!(stdout.contains("resolution: tickwheel entrants 10µs; peers their own"));
    assert!(stdout.contains("aft p50 ms") && stdout.contains("tickwheel-service-handle"));

    let json = read_json(&out.join("results.json"));
    assert!(json["command_line"]
        .as_str()
        .unwrap()
        .contains("--w4-n 300"));
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    let results = json["queues"].as_array().unwrap();
    for workload in ["W1", "W2", "W3", "W5", "W7"] {
        for entrant in QUEUES {
            for n in [300, 1000] {
                let found = results
                    .iter()
                    .find(|r| r["workload"] == workload && r["entrant"] == entrant && r["n"] == n);
                let r = found.unwrap_or_else(|| panic!("{workload} {entrant} N={n} missing"));
                assert_eq!(r["verified"], true);
                assert!(r["ns_per_op"].as_f64().unwrap() > 0.0);
                assert!(r["ops"].as_u64().unwrap() >= n);
                if workload == "W5" || workload == "W7" {
                    let heap = r["peak_heap_bytes"].as_u64().unwrap();
                    assert!(heap >= 4 * n, "{entrant}: {heap} heap bytes for {n} timers");
                }
                if workload != "W1" {
                    assert!(
                        r["max_late_ticks"].is_u64(),
                        "{workload} {entrant} not checked"
                    );
                }
            }
        }
    }
    assert!(
        json["notes"].to_string().contains("wake_interval 40µs"),
        "notes: {}",
        json["notes"]
    );
    let w4 = json["services"].as_array().unwrap();
    for entrant in SERVICES {
        let r = w4.iter().find(|r| r["entrant"] == entrant);
        let r = r.unwrap_or_else(|| panic!("W4 {entrant} missing; notes: {}", json["notes"]));
        assert_eq!(r["n"], 300);
        assert_eq!(r["verified"], true);
        let tasks: u64 = r["lateness_histogram_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["tasks"].as_u64().unwrap())
            .sum();
        assert_eq!(tasks, 300, "{entrant}: every task is in the histogram once");
        let after = r["after_producer_tasks"].as_u64().unwrap();
        assert!(
            after <= 300,
            "{entrant}: {after} tasks due after the producer"
        );
        assert!(r["after_producer_lateness_ns"]["p99"].is_u64());
        let tickwheel = entrant.starts_with("tickwheel");
        let resolution = if tickwheel {
            Value::from(10_000)
        } else {
            Value::Null
        };
        assert_eq!(r["tickwheel_resolution_ns"], resolution, "{entrant}");
    }
    assert!(
        stdout.contains("W8 futures in a 2-worker tokio runtime"),
        "{stdout}"
    );
    assert!(
        stdout.contains("sleepers: 50 tasks, sleeps 5..=15 ms"),
        "{stdout}"
    );
    let w8 = json["futures"].as_array().unwrap();
    for entrant in FUTURES {
        let r = w8.iter().find(|r| r["entrant"] == entrant);
        let r = r.unwrap_or_else(|| panic!("W8 {entrant} missing"));
        assert_eq!(r["verified"], true);
        assert_eq!(r["ops_per_worker"], 300);
        for part in [
            "timeout_ready_ns",
            "timeout_pending_once_ns",
            "reset_per_message_ns",
        ] {
            assert!(r[part].as_f64().unwrap() > 0.0, "{entrant} {part}");
        }
        let sleepers = &r["sleepers"];
        if entrant == "no-timer" {
            assert!(sleepers.is_null());
        } else {
            assert_eq!(sleepers["tasks"], 50, "{entrant}");
            assert!(sleepers["wakes"].as_u64().unwrap() > 0, "{entrant}");
            assert!(sleepers["lateness_ns"]["p99"].is_u64(), "{entrant}");
        }
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(
        csv.contains("\nW8,tokio-time reset-per-message,false,600,1,,600,"),
        "{csv}"
    );
    assert!(
        csv.contains("\nW8,tickwheel-futures sleepers,true,50,1,"),
        "{csv}"
    );
    // W8: three rows an entrant, and a fourth for each that sleeps.
    assert_eq!(
        csv.lines().count(),
        1 + 5 * QUEUES.len() * 2 + SERVICES.len() + 4 * FUTURES.len() - 1
    );
}

fn assert_rejected(args: &[&str], expect_in_message: &str) {
    let run = tickwheel(args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{args:?} was accepted");
    assert!(
        stderr.contains(expect_in_message),
        "{args:?}: stderr lacks `{expect_in_message}`:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
}

/// `bench` runs each queue entrant in `tickwheel queue-worker`, a process of its own: the
/// worker generates the seeded input, runs it once untimed with its checks, times the
/// repeats asked for and prints one sample; an entrant or workload of another family is
/// refused with a message.
#[test]
fn a_queue_entrant_runs_in_a_worker_process_of_its_own() {
    let sample = |entrant: &str| {
        let args = [
            "queue-worker",
            "--entrant",
            entrant,
            "--workload",
            "w2",
            "--n",
            "500",
            "--seed",
            "3",
            "--repeat",
            "3",
        ];
        let out = tickwheel_ok(&args, entrant);
        let json: Value = serde_json::from_str(out.trim()).expect("one JSON sample");
        assert_eq!(json["ops"], 500, "{entrant}: {json}");
        let runs = json["runs_ns"].as_array().expect("runs_ns");
        assert_eq!(runs.len(), 3, "the warm-up is not timed: {json}");
        assert!(
            runs.iter().all(|ns| ns.as_u64() > Some(0)),
            "{entrant}: {json}"
        );
        assert!(
            json["peak_heap_bytes"].as_u64() > Some(0),
            "{entrant}: {json}"
        );
        json["max_late_ticks"].clone()
    };
    assert_eq!(sample("tickwheel-wheel"), 0, "fired on its tick");
    assert_eq!(sample("std-binaryheap"), 0, "fired on its tick");
    fn worker<'a>(entrant: &'a str, workload: &'a str) -> Vec<&'a str> {
        let args = ["queue-worker", "--entrant", entrant, "--workload", workload];
        [&args[..], &["--n", "10", "--seed", "1", "--repeat", "1"]].concat()
    }
    assert_rejected(&worker("tokio-sleep", "w1"), "is not a queue entrant");
    assert_rejected(&worker("std-binaryheap", "w4"), "is not a queue workload");
}

#[test]
fn bad_arguments_get_a_clear_message_and_nonzero_exit() {
    assert_rejected(&["bench", "--n", "0"], "count must be between 1");
    assert_rejected(&["bench", "--n", "ten"], "is not a count");
    assert_rejected(&["bench", "--n", "1e40"], "count must be between 1");
    assert_rejected(&["bench", "--entrants", "nope"], "unknown entrant `nope`");
    assert_rejected(&["bench", "--workloads", "w9"], "invalid value 'w9'");
    assert_rejected(&["bench", "--repeat", "0"], "--repeat");
    assert_rejected(&["bench", "--w4-max-delay-ms=-1"], "--w4-max-delay-ms");
    assert_rejected(
        &["bench", "--w4-max-delay-ms", "999999"],
        "not in 0..=60000",
    );
    assert_rejected(&["bench", "--w4-tick-us", "0"], "--w4-tick-us");
    assert_rejected(&["bench", "--w4-wake-us", "2000000"], "--w4-wake-us");
    assert_rejected(&["frobnicate"], "unrecognized subcommand");
    assert_rejected(
        &["demo", "--entrant", "btreemap", "--n", "10"],
        "not a real-time entrant",
    );
}

#[test]
fn unwritable_output_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let out = file.join("sub");
    let args = [
        "bench",
        "--n",
        "10",
        "--workloads",
        "w1",
        "--out",
        out.to_str().unwrap(),
    ];
    let run = tickwheel(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot create"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn nothing_to_run_is_an_error_not_an_empty_report() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "--workloads",
        "w1",
        "--entrants",
        "tokio-sleep",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    let run = tickwheel(&args);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("nothing to run"));
}

#[test]
fn demo_runs_a_small_batch_on_the_service_and_on_a_peer() {
    let small = ["demo", "--n", "500", "--max-delay-ms", "10"];
    // The default entrant is the no-worker service; the pool's is checked here.
    let pool = [
        "--entrant",
        "tickwheel-service",
        "--tick-us",
        "10",
        "--wake-us",
        "40",
    ];
    for extra in [&[][..], &["--entrant", "binaryheap-thread"][..], &pool[..]] {
        let stdout = tickwheel_ok(&[&small[..], extra].concat(), &format!("demo {extra:?}"));
        assert!(stdout.contains("every task ran exactly once, none early"));
        assert!(stdout.contains("lateness: p50"));
        assert!(stdout.contains("lateness histogram:"));
        // The service's set-up is printed for tickwheel entrants only.
        match extra.len() {
            0 => assert!(
                stdout.contains("on tickwheel-service-here") && stdout.contains("resolution 1ms\n"),
                "{stdout}"
            ),
            2 => assert!(!stdout.contains("resolution"), "{stdout}"),
            _ => assert!(
                stdout.contains("resolution 10µs, wake_interval 40µs\n"),
                "{stdout}"
            ),
        }
    }
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickwheel"))
        .args(["bench", "--n", "100", "--repeat", "1", "--workloads", "w1"])
        .args(["--out", dir.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Like `tickwheel bench | head -1`: read one line, then close the pipe.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.starts_with("tickwheel bench"));
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.status.success(), "{stderr}");
}

/// W6 runs against a redis-server it starts itself; without one installed it fails with a
/// message saying how to install it (never a silent skip).
#[test]
fn durable_workload_runs_on_its_own_redis_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w6");
    let args = [
        "bench",
        "--workloads",
        "w6",
        "--durable-n",
        "500",
        "--durable-max-delay-ms",
        "200",
        "--durable-workers",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    let stdout = tickwheel_ok(&args, "W6 (is redis-server installed?)");
    assert!(stdout.contains("W6 durable tasks on Redis"), "{stdout}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(csv.contains("W6,tickwheel-redis x1,true,500,"), "{csv}");
    assert!(csv.contains("W6,polled-zset x1,false,500,"), "{csv}");
    let json = read_json(&out.join("results.json"));
    assert_eq!(json["durable"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["durable"][0]["delivered"], 500);

    let missing = Command::new(env!("CARGO_BIN_EXE_tickwheel"))
        .args(args)
        .env("TICKWHEEL_REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("apt-get install -y redis-server"),
        "{stderr}"
    );
}
