//! Bad input to the `tickwheel` binary: odd numbers, durations, names, ids, URLs and servers.
//! The rule: documented behaviour or a clear error, never a panic, a hang, a silent clamp or
//! an unescaped user string.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{Config, Inspector, Producer, RunAt};

struct Run {
    /// `None`: killed after the time limit.
    code: Option<i32>,
    out: String,
    err: String,
    took: Duration,
}

/// Runs the binary with `args`, killed after `limit`; never a panic.
fn run_os(args: Vec<OsString>, limit: Duration) -> Run {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickwheel"))
        .args(&args)
        .env("RUST_BACKTRACE", "0")
        .env_remove("TICKWHEEL_DASHBOARD_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tickwheel");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let r = Run {
        code,
        out: out.join().unwrap(),
        err: err.join().unwrap(),
        took: start.elapsed(),
    };
    assert!(
        r.code != Some(101) && !r.err.contains("panicked"),
        "tickwheel {args:?} panicked: {}",
        r.err
    );
    r
}

fn run(args: &[&str]) -> Run {
    run_os(
        args.iter().map(OsString::from).collect(),
        Duration::from_secs(30),
    )
}

/// `tickwheel tasks --redis URL --namespace NS --allow-writes ARGS...`.
fn tasks(url: &str, ns: &str, args: &[&str]) -> Run {
    let mut all = vec!["tasks", "--redis", url, "--namespace", ns, "--allow-writes"];
    all.extend_from_slice(args);
    run(&all)
}

/// Asserts exit status `code` and `says` in standard error.
fn expect(r: &Run, code: i32, says: &str, what: &str) {
    assert_eq!(r.code, Some(code), "{what}: {}{}", r.out, r.err);
    assert!(
        r.err.contains(says),
        "{what}: expected {says:?} in {:?}",
        r.err
    );
}

/// No raw control character (but `\n`) and no bidirectional control in `text`.
fn assert_clean(text: &str, what: &str) {
    let bad = text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    });
    assert!(bad.is_none(), "{what}: raw {bad:?} in {text:?}");
}

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot run the Redis tests: {e}"))
}

/// A port nothing listens on (just freed).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One RESP command on a raw connection; the first line of the reply.
fn resp(port: u16, args: &[&str]) -> String {
    let mut con = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    con.write_all(cmd.as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(con).read_line(&mut line).unwrap();
    line
}

/// A dashboard child process, killed on drop.
struct Dashboard {
    child: Child,
    addr: String,
}

impl Dashboard {
    fn start(args: &[&str]) -> Dashboard {
        Dashboard::spawn(
            Command::new(env!("CARGO_BIN_EXE_tickwheel"))
                .arg("dashboard")
                .args(args)
                .env_remove("TICKWHEEL_DASHBOARD_TOKEN"),
        )
    }

    /// Starts `cmd` (a `tickwheel dashboard` command line) and reads the address it serves
    /// at from its first line.
    fn spawn(cmd: &mut Command) -> Dashboard {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Dashboard { child, addr }
    }

    /// `GET path`: the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut con = TcpStream::connect(&self.addr).unwrap();
        con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            con,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut all = Vec::new();
        con.read_to_end(&mut all).unwrap();
        let text = String::from_utf8_lossy(&all).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, b)| b.to_string());
        (status, body)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- numbers, names, flags

#[test]
fn numeric_flags_at_zero_negative_huge_or_empty_are_rejected_with_the_range() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--n", "18446744073709551615"], "between 1 and"),
        (&["bench", "--n", "1e30"], "between 1 and"),
        (&["bench", "--n", "0"], "between 1 and"),
        (&["bench", "--n", ""], "is not a count"),
        (&["bench", "--n", "1,,2"], "is not a count"),
        (&["bench", "--n", "1.5e3"], "is not a count"),
        (&["bench", "--n", "1e-3"], "is not a count"),
        (&["bench", "--n=-1"], "is not a count"),
        (&["bench", "--w4-n", "1e30"], "between 1 and"),
        (&["bench", "--durable-n", "0"], "between 1 and"),
        (&["bench", "--w8-ops", "0"], "between 1 and"),
        (&["bench", "--w8-tasks", "1e30"], "between 1 and"),
        (&["bench", "--w8-max-delay-ms", "2"], "3..=60000"),
        (&["bench", "--w8-window-ms", "9"], "10..=600000"),
        (&["bench", "--seed", "18446744073709551616"], "too large"),
        (&["bench", "--seed=-1"], "--seed"),
        (&["bench", "--repeat", "1001"], "1..=1000"),
        (&["bench", "--durable-workers", "0"], "1..=64"),
        (&["bench", "--durable-workers", "65"], "1..=64"),
        (&["bench", "--durable-workers", ""], "--durable-workers"),
        (
            &["bench", "--durable-max-delay-ms", "3600001"],
            "0..=3600000",
        ),
        (&["demo", "--n", "0"], "between 1 and"),
        (&["demo", "--n", "abc"], "is not a count"),
        (&["demo", "--max-delay-ms", "60001"], "0..=60000"),
        (&["demo", "--tick-us", "0"], "1..=1000000"),
        (&["demo", "--wake-us", "1000001"], "0..=1000000"),
    ];
    for (args, says) in cases {
        let r = run(args);
        expect(&r, 2, says, &format!("{args:?}"));
        assert!(r.out.is_empty(), "{args:?} printed {:?}", r.out);
    }
}

#[test]
fn unknown_names_are_rejected_with_the_known_ones() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--workloads", "w0"], "possible values"),
        (&["bench", "--workloads", ""], "--workloads"),
        (&["bench", "--entrants", ""], "known: tickwheel-wheel"),
        (&["bench", "--entrants", "wheel"], "known: tickwheel-wheel"),
        (&["demo", "--entrant", "nope"], "unknown entrant `nope`"),
        (
            &["demo", "--entrant", "tickwheel-redis"],
            "not a real-time entrant",
        ),
        (
            &[
                "tasks",
                "--redis",
                "redis://h/",
                "--namespace",
                "n",
                "rm",
                "x",
            ],
            "unrecognized subcommand",
        ),
        (
            &[
                "tasks",
                "--redis",
                "redis://h/",
                "--namespace",
                "n",
                "ls",
                "--state",
                "done",
            ],
            "possible values",
        ),
    ];
    for (args, says) in cases {
        expect(&run(args), 2, says, &format!("{args:?}"));
    }
}

#[test]
fn malformed_durations_and_instants_are_rejected_before_connecting() {
    // Nothing listens there: every rejection below happens while parsing (status 2, at once).
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let cases: &[(&[&str], &str)] = &[
        (&["--connect-timeout", "5", "stats"], "is not a duration"),
        (&["--connect-timeout", "1x", "stats"], "is not a duration"),
        (&["--connect-timeout", "", "stats"], "is not a duration"),
        (&["--connect-timeout=-1s", "stats"], "must not be negative"),
        (&["--connect-timeout", "61m", "stats"], "at most 1h"),
        (&["upcoming", "--per", "5"], "is not a duration"),
        (&["upcoming", "--horizon", "1x"], "is not a duration"),
        (&["upcoming", "--per=-1s"], "must not be negative"),
        (&["reschedule", "t", "--in", "1x"], "is not a duration"),
        (&["reschedule", "t", "--in=-1s"], "must not be negative"),
        (
            &["reschedule", "t", "--at", "1969-12-31T23:59:59Z"],
            "before 1970",
        ),
        (
            &["reschedule", "t", "--at", "2026-11-26 09:00"],
            "not an RFC 3339",
        ),
        (
            &["ls", "--due-after", "9999999999999999h"],
            "neither an RFC 3339",
        ),
        (&["ls", "--due-before", ""], "neither an RFC 3339"),
        (&["ls", "--shard=-1"], "--shard"),
        (&["ls", "--shard", "4294967296"], "--shard"),
        (&["ls", "--limit", "0"], "--limit"),
        (&["ls", "--limit", "18446744073709551616"], "--limit"),
    ];
    for (args, says) in cases {
        let r = tasks(&url, "n", args);
        expect(&r, 2, says, &format!("{args:?}"));
        assert!(
            r.took < Duration::from_secs(5),
            "{args:?} took {:?}",
            r.took
        );
    }
}

#[test]
fn conflicting_flags_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123").unwrap();
    let url = "redis://127.0.0.1:1/";
    let r = tasks(
        url,
        "n",
        &[
            "reschedule",
            "t",
            "--at",
            "2030-01-01T00:00:00Z",
            "--in",
            "5m",
        ],
    );
    expect(&r, 2, "cannot be used with", "--at with --in");
    let r = tasks(url, "n", &["reschedule", "t"]);
    expect(&r, 2, "--at", "neither --at nor --in");
    let r = tasks(url, "n", &["ls", "--limit", "5", "--all"]);
    expect(&r, 2, "cannot be used with", "--limit with --all");
    let r = run(&[
        "dashboard",
        "--redis",
        url,
        "--namespace",
        "n",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    expect(
        &r,
        2,
        "--token-file is only for --allow-writes",
        "--token-file alone",
    );
}

#[test]
fn ids_empty_too_long_or_not_utf8_are_rejected() {
    let url = "redis://127.0.0.1:1/";
    let long = "x".repeat(1025);
    for args in [
        &["show", ""][..],
        &["show", &long],
        &["cancel", "ok", ""],
        &["reschedule", "", "--in", "1m"],
    ] {
        expect(
            &tasks(url, "n", args),
            2,
            "a task id is 1 to 1024 bytes",
            &format!("{args:?}"),
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let mut args: Vec<OsString> = ["tasks", "--redis", url, "--namespace", "n", "show"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push(OsString::from_vec(b"id\xff\xfe".to_vec()));
        let r = run_os(args, Duration::from_secs(10));
        expect(&r, 2, "invalid UTF-8", "non-UTF-8 id");
    }
}

// ---------------------------------------------------------------- hostile data on Redis

const HOSTILE: &[&str] = &[
    "<script>alert(1)</script>",
    "red\u{1b}[31mX\u{1b}[0m",
    "new\nline\r\nfake row",
    "q\"uo'te\\back",
    "tab\there",
    "bidi\u{202e}cba\u{2066}",
    "bell\u{7}del\u{7f}csi\u{9b}",
    "amp&<b>",
    "zero\u{200b}width",
];

#[test]
fn hostile_ids_are_escaped_in_tables_and_exact_in_valid_json() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "hostile")).unwrap();
    let long = "L".repeat(1024);
    let mut ids: Vec<String> = HOSTILE.iter().map(|s| s.to_string()).collect();
    ids.push(long.clone());
    for id in &ids {
        p.schedule(
            id,
            RunAt::After(Duration::from_secs(600)),
            b"\x1b[2J\x00\xff<script>",
        )
        .unwrap();
    }

    // ls: one row per task whatever the id holds, and no raw control character.
    let r = tasks(&url, "hostile", &["ls"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_clean(&r.out, "ls");
    assert_eq!(r.out.lines().count(), ids.len() + 2, "{}", r.out);
    assert!(r.out.contains("red\\u{1b}[31mX\\u{1b}[0m"), "{}", r.out);
    assert!(r.out.contains("new\\nline\\r\\nfake row"), "{}", r.out);
    assert!(r.out.contains(&long), "a 1024-byte id is shown whole");
    // ls --json: valid JSON, the ids exactly.
    let r = tasks(&url, "hostile", &["ls", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    // Valid JSON escapes C0 controls (ESC included); see the ignored
    // `json_output_escapes_c1_and_bidi_controls` for the rest.
    assert!(!r.out.chars().any(|c| c < ' ' && c != '\n'), "{}", r.out);
    let v: Value = serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out));
    let mut got: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want);

    for id in &ids {
        let r = tasks(&url, "hostile", &["show", id]);
        assert_eq!(r.code, Some(0), "show {id:?}: {}", r.err);
        assert_clean(&r.out, &format!("show {id:?}"));
        assert_eq!(
            r.out.lines().next().map(|l| l.starts_with("id ")),
            Some(true)
        );
        let r = tasks(&url, "hostile", &["show", id, "--json"]);
        let v: Value = serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out));
        assert_eq!(v["id"], id.as_str());
        assert_eq!(v["payload_preview_utf8"], Value::Null);
    }
    // Ids that are not there: the error and the tables escape them too.
    for id in HOSTILE {
        let missing = format!("{id}-missing");
        let r = tasks(&url, "hostile", &["show", &missing]);
        expect(&r, 1, "no task \"", &format!("show {missing:?}"));
        assert_clean(&r.err, "show's error");
        let r = tasks(&url, "hostile", &["cancel", &missing]);
        expect(&r, 1, "not cancelled", &format!("cancel {missing:?}"));
        assert_clean(&r.out, "cancel's table");
        let r = tasks(&url, "hostile", &["reschedule", &missing, "--in", "1m"]);
        expect(&r, 1, "not rescheduled", &format!("reschedule {missing:?}"));
        assert_clean(&r.out, "reschedule's line");
        assert_clean(&r.err, "reschedule's error");
        let r = tasks(&url, "hostile", &["cancel", &missing, "--json"]);
        let v: Value = serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out));
        assert_eq!(v[0]["id"], missing.as_str());
        assert_eq!(v[0]["cancelled"], false);
    }
    // A namespace name with an escape: quoted in the error, not written raw.
    let r = tasks(&url, "ns\u{1b}[31m", &["stats"]);
    expect(&r, 1, "does not exist", "odd namespace");
    assert_clean(&r.err, "namespace error");
}

#[test]
fn binary_payloads_show_escaped_with_hex_and_their_true_size() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "bin")).unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 256) as u8).collect();
    p.schedule("big", RunAt::After(Duration::from_secs(600)), &big)
        .unwrap();
    p.schedule("empty", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let r = tasks(&url, "bin", &["show", "big"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_clean(&r.out, "show big");
    assert!(r.out.contains("payload     100000 bytes"), "{}", r.out);
    assert!(r.out.contains("more bytes (escaped)"), "{}", r.out);
    assert!(r.out.contains("hex         000102030405"), "{}", r.out);
    let r = tasks(&url, "bin", &["show", "big", "--json"]);
    let v: Value = serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out));
    assert_eq!(v["payload_len"], 100_000);
    assert_eq!(v["payload_preview_complete"], false);
    assert_eq!(v["payload_preview_utf8"], Value::Null);
    assert!(v["payload_preview_hex"]
        .as_str()
        .unwrap()
        .starts_with("000102"));
    let r = tasks(&url, "bin", &["show", "empty"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(
        r.out.contains("payload     0 bytes") && !r.out.contains("preview"),
        "{}",
        r.out
    );
}

#[test]
fn empty_or_too_long_durations_are_documented_behaviour() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "up")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(30)), b"")
        .unwrap();
    let r = tasks(&url, "up", &["upcoming", "--horizon", "0s", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    let v: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(v["slots"].as_array().map(Vec::len), Some(0));
    // A connect timeout is at most an hour, as the dashboard's: refused while parsing.
    let r = tasks(&url, "up", &["--connect-timeout", "99999999999h", "stats"]);
    expect(&r, 2, "at most 1h", "--connect-timeout 99999999999h");
    // Durations too long for Redis: a message (after connecting) rather than an overflow.
    for args in [
        &["upcoming", "--per", "99999999999h"][..],
        &["upcoming", "--per", "1s", "--horizon", "99999999999h"],
    ] {
        expect(
            &tasks(&url, "up", args),
            1,
            "at most 100 years",
            &format!("{args:?}"),
        );
    }
    let r = tasks(&url, "up", &["reschedule", "t", "--in", "99999999999h"]);
    expect(&r, 1, "run-at out of range", "reschedule --in 99999999999h");
}

// ---------------------------------------------------------------- URLs and servers

#[test]
fn unreachable_malformed_and_wrong_password_urls_fail_fast_and_clearly() {
    let port = free_port();
    let r = tasks(
        &format!("redis://127.0.0.1:{port}/"),
        "n",
        &["--connect-timeout", "300ms", "stats"],
    );
    expect(
        &r,
        1,
        &format!("cannot reach Redis at redis://127.0.0.1:{port}/"),
        "unreachable",
    );
    assert!(r.took < Duration::from_secs(5), "took {:?}", r.took);
    let r = tasks(
        "redis://no-such-host.invalid/",
        "n",
        &["--connect-timeout", "0s", "stats"],
    );
    expect(&r, 1, "cannot reach Redis", "unknown host");
    for bad in [
        "",
        "redis://",
        "notaurl",
        "http://127.0.0.1:6379/",
        "redis://127.0.0.1:99999/",
        "redis://127.0.0.1:6379/abc",
        "redis+cluster://",
        "redis://:hunter2@[::1",
    ] {
        let r = tasks(bad, "n", &["stats"]);
        expect(&r, 1, "invalid Redis URL", bad);
        assert!(!r.err.contains("hunter2"), "{}", r.err);
        assert!(r.took < Duration::from_secs(5), "{bad}: took {:?}", r.took);
    }
    let r = run(&[
        "dashboard",
        "--redis",
        "redis://",
        "--namespace",
        "n",
        "--listen",
        "127.0.0.1:0",
        "--connect-timeout",
        "0s",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.err);

    // A Redis with a password: none, or a wrong one.
    let s = server();
    let mut p = Producer::connect(&Config::new(s.url(), "auth")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    drop(p);
    assert!(resp(s.port(), &["CONFIG", "SET", "requirepass", "s3cret-pw"]).starts_with("+OK"));
    let r = tasks(
        &format!("redis://127.0.0.1:{}/", s.port()),
        "auth",
        &["stats"],
    );
    expect(&r, 1, "Authentication required", "no password");
    for url in [
        format!("redis://:wrongpw@127.0.0.1:{}/", s.port()),
        format!("redis://default:wrongpw@127.0.0.1:{}/", s.port()),
    ] {
        let r = tasks(&url, "auth", &["stats"]);
        assert_eq!(r.code, Some(1), "{}", r.err);
        assert!(
            r.err.to_lowercase().contains("authentication failed"),
            "{}",
            r.err
        );
        assert!(!r.err.contains("wrongpw") && r.out.is_empty(), "{}", r.err);
        assert!(r.took < Duration::from_secs(5));
    }
    let r = tasks(
        &format!("redis://:s3cret-pw@127.0.0.1:{}/", s.port()),
        "auth",
        &["show", "t"],
    );
    assert_eq!(r.code, Some(0), "{}", r.err);
}

// ---------------------------------------------------------------- writes and the dashboard

#[test]
fn dashboard_is_loopback_by_default_and_refuses_bad_start_inputs() {
    let r = run(&["dashboard", "--help"]);
    assert_eq!(r.code, Some(0));
    assert!(r.out.contains("[default: 127.0.0.1:8080]"), "{}", r.out);
    let base = [
        "dashboard",
        "--redis",
        "redis://127.0.0.1:1/",
        "--namespace",
        "n",
    ];
    for (extra, says) in [
        (&["--listen", "localhost:0"][..], "invalid socket address"),
        (&["--listen", "127.0.0.1:70000"], "invalid socket address"),
        (&["--listen", ""], "invalid socket address"),
        (&["--connect-timeout", "nan"], "is not a duration"),
        (&["--connect-timeout", "inf"], "is not a duration"),
        (&["--connect-timeout", "1e30"], "is not a duration"),
        (&["--connect-timeout", "2"], "is not a duration"),
        (&["--connect-timeout=-1s"], "must not be negative"),
        (&["--connect-timeout", "61m"], "at most 1h"),
        (&["--allow-writes"], "needs a token"),
        (
            &["--allow-writes", "--token-file", "/"],
            "cannot read the token file",
        ),
        (&["--tls-ca", "/no/such/ca.crt"], "--tls-ca /no/such/ca.crt"),
        (&["--tls-key", "/no/such/key"], "--tls-cert"),
        (
            &["--tls-cert", "/no/such/crt", "--tls-key", "/no/such/key"],
            "--tls-cert /no/such/crt",
        ),
    ] {
        let r = run(&[&base[..], extra].concat());
        expect(&r, 2, says, &format!("{extra:?}"));
    }
    // A token of only whitespace is no token.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "   \n\t  \n").unwrap();
    let r = run(&[
        &base[..],
        &["--allow-writes", "--token-file", token.to_str().unwrap()],
    ]
    .concat());
    expect(&r, 2, "the token is 0 bytes long", "blank token");
}

#[test]
fn dashboard_escapes_hostile_ids_and_refuses_writes_without_the_flag() {
    let s = server();
    let url = s.url();
    let cfg = Config::new(&url, "dash");
    let mut p = Producer::connect(&cfg).unwrap();
    for id in HOSTILE {
        p.schedule(
            id,
            RunAt::After(Duration::from_secs(600)),
            b"<script>x</script>\x1b[2J",
        )
        .unwrap();
    }
    let d = Dashboard::start(&[
        "--redis",
        &url,
        "--namespace",
        "dash",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(d.addr.starts_with("127.0.0.1:"), "{}", d.addr);
    let enc = |s: &str| form_encode(s);
    for id in HOSTILE {
        let (status, body) = d.get(&format!("/task?id={}", enc(id)));
        assert_eq!(status, 200, "{id:?}: {body}");
        assert!(
            !body.contains("<script>"),
            "{id:?}: unescaped script in {body}"
        );
        assert!(!body.contains("<b>"), "{id:?}: unescaped tag");
        assert!(
            !body.contains('\u{1b}') && !body.contains('\u{202e}'),
            "{id:?}: raw control"
        );
    }
    let (status, body) = d.get("/task?id=");
    assert_eq!(status, 400, "{body}");
    let (status, _) = d.get(&format!("/task?id={}", "x".repeat(1025)));
    assert_eq!(status, 400);
    for h in ["0", "49", "-1", "abc", "99999999999"] {
        assert_eq!(d.get(&format!("/?hours={h}")).0, 400, "hours={h}");
    }
    // A write to a read-only dashboard: refused, and the task stays.
    let mut con = TcpStream::connect(&d.addr).unwrap();
    let body = "id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E&token=0123456789abcdef";
    write!(
        con,
        "POST /cancel HTTP/1.1\r\nHost: {0}\r\nOrigin: http://{0}\r\nContent-Type: \
         application/x-www-form-urlencoded\r\nContent-Length: {1}\r\nConnection: close\r\n\r\n{body}",
        d.addr,
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    con.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let mut ins = Inspector::connect(&cfg).unwrap();
    assert!(ins.show("<script>alert(1)</script>").unwrap().is_some());
}

/// `application/x-www-form-urlencoded` for a query value.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------- the audit's findings

/// `--per` is documented as whole seconds; 1500ms and 0s are silently made 2 s and 1 s.
#[test]
fn upcoming_per_that_is_not_whole_seconds_is_refused() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "per")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(30)), b"")
        .unwrap();
    for per in ["1500ms", "0s", "250ms"] {
        let r = tasks(&url, "per", &["upcoming", "--per", per, "--horizon", "10s"]);
        assert_eq!(r.code, Some(2), "--per {per}: {}{}", r.out, r.err);
        assert!(r.err.contains("--per"), "--per {per}: {}", r.err);
    }
}

/// `tasks` hides a password up to the first `@`; one that holds `@` leaks its tail.
#[test]
fn tasks_errors_hide_a_password_that_contains_an_at_sign() {
    let port = free_port();
    let url = format!("redis://user:hun@ter2@127.0.0.1:{port}/");
    let r = tasks(&url, "n", &["--connect-timeout", "0s", "stats"]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(r.err.contains("cannot reach Redis"), "{}", r.err);
    assert!(
        !r.err.contains("ter2") && !r.err.contains("hun@"),
        "{}",
        r.err
    );
}

/// `bench` echoes its command line, password included, on stdout and in results.json.
#[test]
fn bench_does_not_print_or_write_the_redis_password() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redis://:hunter2@127.0.0.1:{}/", free_port());
    let r = run(&[
        "bench",
        "--workloads",
        "w6",
        "--durable-n",
        "10",
        "--durable-max-delay-ms",
        "10",
        "--durable-workers",
        "1",
        "--redis",
        &url,
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(
        !r.out.contains("hunter2"),
        "stdout shows the password: {}",
        r.out
    );
    assert!(!r.err.contains("hunter2"), "{}", r.err);
    if let Ok(json) = std::fs::read_to_string(dir.path().join("results.json")) {
        assert!(!json.contains("hunter2"));
    }
}

/// A server that is not Redis: a garbled multi-line message that does not say where.
#[test]
fn a_server_that_is_not_redis_is_a_clear_one_line_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for con in listener.incoming().flatten() {
            let mut con = con;
            let mut buf = [0u8; 512];
            let _ = con.read(&mut buf);
            let _ = con.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let r = tasks(
        &format!("redis://127.0.0.1:{port}/"),
        "n",
        &["--connect-timeout", "0s", "stats"],
    );
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(
        r.err.contains(&format!("127.0.0.1:{port}")),
        "does not say which server: {}",
        r.err
    );
    assert_eq!(r.err.trim_end().lines().count(), 1, "{}", r.err);
    assert!(!r.err.contains("Unexpected `84`"), "{}", r.err);
}

/// A server that accepts and never answers: --connect-timeout 1s takes about 10 s and says
/// "Resource temporarily unavailable (os error 11)".
#[test]
fn a_silent_server_honours_the_connect_timeout_and_says_timed_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for con in listener.incoming().flatten() {
            held.push(con);
        }
    });
    let r = tasks(
        &format!("redis://127.0.0.1:{port}/"),
        "n",
        &["--connect-timeout", "1s", "stats"],
    );
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(
        r.took < Duration::from_secs(4),
        "took {:?}: {}",
        r.took,
        r.err
    );
    assert!(
        r.err.contains("timed out") || r.err.contains("timeout"),
        "{}",
        r.err
    );
}

/// `--full` silently overrides an explicit `--w4-n` with 6·10^6.
#[test]
fn bench_full_with_an_explicit_w4_n_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_os(
        [
            "bench",
            "--full",
            "--w4-n",
            "1000",
            "--w4-max-delay-ms",
            "10",
            "--workloads",
            "w4",
            "--entrants",
            "tickwheel-service-here",
            "--out",
            dir.path().to_str().unwrap(),
        ]
        .iter()
        .map(OsString::from)
        .collect(),
        Duration::from_secs(20),
    );
    assert_eq!(
        r.code,
        Some(2),
        "ran instead ({:?}): {}{}",
        r.took,
        r.out,
        r.err
    );
    assert!(
        r.err.contains("--w4-n") && r.err.contains("--full"),
        "{}",
        r.err
    );
}

/// The Redis URL is shown raw in the "cannot reach" messages of `tasks` and `dashboard`.
#[test]
fn control_characters_in_the_url_are_escaped_in_errors() {
    let port = free_port();
    let url = format!("redis://u\u{1b}[31mX@127.0.0.1:{port}/");
    let r = tasks(&url, "n", &["--connect-timeout", "0s", "stats"]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_clean(&r.err, "tasks");
    let r = run(&[
        "dashboard",
        "--redis",
        &url,
        "--namespace",
        "n",
        "--listen",
        "127.0.0.1:0",
        "--connect-timeout",
        "0s",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_clean(&r.err, "dashboard");
}

/// The dashboard decodes query and form fields lossily: `id=%FF` finds (and a write form
/// would cancel) the task whose id is U+FFFD, instead of a 400.
#[test]
fn dashboard_refuses_ids_that_are_not_utf8() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "lossy")).unwrap();
    p.schedule("\u{fffd}", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let d = Dashboard::start(&[
        "--redis",
        &url,
        "--namespace",
        "lossy",
        "--listen",
        "127.0.0.1:0",
    ]);
    let (status, body) = d.get("/task?id=%FF");
    assert_eq!(status, 400, "{body}");
}

/// A valid RFC 3339 instant past jiff's range is called "not an RFC 3339 instant".
#[test]
fn out_of_range_instants_say_out_of_range() {
    let url = "redis://127.0.0.1:1/";
    for args in [
        &["reschedule", "t", "--at", "9999-12-31T23:59:59Z"][..],
        &["ls", "--due-after", "9999-12-31T23:59:59Z"],
    ] {
        let r = tasks(url, "n", args);
        assert_eq!(r.code, Some(2), "{}", r.err);
        assert!(
            !r.err.contains("is not an RFC 3339") && !r.err.contains("neither an RFC 3339"),
            "{args:?}: {}",
            r.err
        );
        assert!(r.err.contains("range"), "{args:?}: {}", r.err);
    }
}

/// `tasks cancel` and `reschedule` write with no opt-in flag, unlike the README's "writes
/// need `--allow-writes` and a token" and the project's rule for writes.
#[test]
fn tasks_writes_need_an_explicit_flag() {
    let s = server();
    let url = s.url();
    let cfg = Config::new(&url, "w");
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("keep", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let r = run(&[
        "tasks",
        "--redis",
        &url,
        "--namespace",
        "w",
        "cancel",
        "keep",
    ]);
    assert!(r.err.contains("--allow-writes"), "{}", r.err);
    let mut ins = Inspector::connect(&cfg).unwrap();
    let still = ins.show("keep").unwrap().is_some();
    assert!(still, "cancelled without a write flag: {}", r.out);
    assert_eq!(r.code, Some(2), "{}", r.err);
}

/// `--json` escapes C0 controls (JSON must) but writes DEL, C1 controls (U+009B is CSI) and
/// bidirectional overrides raw, so `tickwheel tasks ls --json` on a terminal is not escaped
/// as the tables are.
#[test]
fn json_output_escapes_c1_and_bidi_controls() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "c1")).unwrap();
    let id = "csi\u{9b}31mdel\u{7f}bidi\u{202e}x";
    p.schedule(id, RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    for args in [
        &["ls", "--json"][..],
        &["show", id, "--json"],
        &["cancel", "nope\u{9b}2J", "--json"],
    ] {
        let r = tasks(&url, "c1", args);
        assert!(serde_json::from_str::<Value>(&r.out).is_ok(), "{}", r.out);
        assert_clean(&r.out, &format!("{args:?}"));
    }
}

// ---------------------------------------------------------------- the user trial's findings

impl Dashboard {
    /// `request` sent as is; the whole answer (headers and body) as text.
    fn raw(&self, request: &str) -> String {
        let mut con = TcpStream::connect(&self.addr).unwrap();
        con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        con.write_all(request.as_bytes()).unwrap();
        let mut all = Vec::new();
        con.read_to_end(&mut all).unwrap();
        String::from_utf8_lossy(&all).into_owned()
    }
}

/// A dashboard on a namespace holding one task, on a loopback port.
fn one_task_dashboard(s: &RedisServer, ns: &str) -> Dashboard {
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, ns)).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    Dashboard::start(&[
        "--redis",
        &url,
        "--namespace",
        ns,
        "--listen",
        "127.0.0.1:0",
    ])
}

/// 40 connections that never send a byte (more than there used to be slots): a real
/// request is still answered at once, and the idle ones are closed within seconds.
#[test]
fn dashboard_idle_connections_do_not_starve_a_real_request() {
    let s = server();
    let d = one_task_dashboard(&s, "idle");
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(&d.addr).unwrap())
        .collect();
    // One more that trickles a header a byte at a time.
    let mut slow = TcpStream::connect(&d.addr).unwrap();
    slow.write_all(b"GET / HT").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, body) = d.get("/");
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered in {:?}",
        started.elapsed()
    );
    // The idle connections are answered 408 and closed, well before the old 10 s.
    let started = Instant::now();
    for mut c in idle.into_iter().chain([slow]) {
        c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "idle connections held for {:?}",
        started.elapsed()
    );
}

/// `HEAD` answers as `GET` does, without a body; a `%` that does not start `%XX` is a 400,
/// not a literal `%`.
#[test]
fn dashboard_answers_head_and_refuses_malformed_percent_escapes() {
    let s = server();
    let d = one_task_dashboard(&s, "head");
    for path in ["/", "/task?id=t"] {
        let get = d.raw(&format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", d.addr));
        let head = d.raw(&format!("HEAD {path} HTTP/1.1\r\nHost: {}\r\n\r\n", d.addr));
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let (get_head, get_body) = get.split_once("\r\n\r\n").unwrap();
        let (head_head, head_body) = head.split_once("\r\n\r\n").unwrap();
        assert_eq!(head_body, "", "HEAD {path} sent a body");
        assert!(!get_body.is_empty());
        let length = |h: &str| {
            h.lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .map(str::to_string)
        };
        // The same length as the GET's (the task page has no clock on it that could change).
        if path != "/" {
            assert_eq!(length(head_head), length(get_head));
        }
        assert!(length(head_head).is_some_and(|l| l != "0"), "{head_head}");
    }
    for path in [
        "/task?id=%zz",
        "/task?id=50%",
        "/task?id=%4",
        "/?hours=%zz",
        "/%zz",
    ] {
        let (status, body) = d.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("percent-escape"), "{path}: {body}");
    }
    // `%25` is how a `%` is sent: a task id with a `%` is looked up, not refused.
    assert_eq!(d.get("/task?id=50%25").0, 404);
}

/// Listening on an address that is not loopback prints a warning on standard error, a
/// louder one with writes; loopback prints none.
#[test]
fn dashboard_warns_when_listening_beyond_loopback() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "wide")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let stderr_of = |listen: &str, writes: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickwheel"));
        cmd.args(["dashboard", "--redis", &url, "--namespace", "wide"])
            .args(["--listen", listen])
            .env_remove("TICKWHEEL_DASHBOARD_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if writes {
            cmd.arg("--allow-writes")
                .env("TICKWHEEL_DASHBOARD_TOKEN", "0123456789abcdef0123");
        }
        let mut child = cmd.spawn().unwrap();
        // Serving once the address line is out; the warning comes before it.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("http://"), "{line:?}");
        let _ = child.kill();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let _ = child.wait();
        err
    };
    let err = stderr_of("127.0.0.1:0", true);
    assert!(!err.contains("warning"), "{err}");
    let err = stderr_of("0.0.0.0:0", false);
    assert!(
        err.contains("warning") && err.contains("not a loopback address"),
        "{err}"
    );
    assert!(!err.contains("clear text"), "{err}");
    let err = stderr_of("0.0.0.0:0", true);
    assert!(
        err.contains("not a loopback address") && err.contains("token crosses the network"),
        "{err}"
    );
}

/// Redis wiped under a running dashboard: the pages say the namespace is gone (as `tickwheel
/// tasks` does), not "pending 0" as if all were well; once it is back, the pages are too.
#[test]
fn dashboard_says_when_the_namespace_is_gone() {
    let s = server();
    let d = one_task_dashboard(&s, "wiped");
    let (status, body) = d.get("/");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("namespace-gone"));
    assert_eq!(resp(s.port(), &["FLUSHALL"]), "+OK\r\n");
    for path in ["/", "/task?id=t"] {
        let (status, body) = d.get(path);
        assert_eq!(status, 503, "{path}: {body}");
        assert!(
            body.contains("id=\"namespace-gone\"") && body.contains("does not exist"),
            "{path}: {body}"
        );
        assert!(
            !body.contains("id=\"pending\""),
            "{path}: an empty overview"
        );
    }
    let r = tasks(&s.url(), "wiped", &["stats"]);
    expect(
        &r,
        1,
        "does not exist",
        "tasks stats on the wiped namespace",
    );
    // Back: scheduling creates the namespace again.
    let mut p = Producer::connect(&Config::new(s.url(), "wiped")).unwrap();
    p.schedule("t2", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let (status, body) = d.get("/");
    assert_eq!(status, 200, "{body}");
    assert_eq!(d.get("/task?id=t").0, 404);

    // A write through a dashboard that allows them, after another wipe: the same page, not
    // "the task is not pending".
    let token = "0123456789abcdef0123";
    let w = Dashboard::spawn(
        Command::new(env!("CARGO_BIN_EXE_tickwheel"))
            .args(["dashboard", "--redis", &s.url(), "--namespace", "wiped"])
            .args(["--listen", "127.0.0.1:0", "--allow-writes"])
            .env("TICKWHEEL_DASHBOARD_TOKEN", token),
    );
    assert_eq!(resp(s.port(), &["FLUSHALL"]), "+OK\r\n");
    let body = format!("id=t2&token={token}");
    let answer = w.raw(&format!(
        "POST /cancel HTTP/1.1\r\nHost: {0}\r\nOrigin: http://{0}\r\nContent-Length: \
         {1}\r\n\r\n{body}",
        w.addr,
        body.len()
    ));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("id=\"namespace-gone\""), "{answer}");
}

/// `reschedule` without a time names both ways to give one; an `ls` window that ends before
/// it starts is refused (it used to list nothing, as if nothing were due).
#[test]
fn tasks_reschedule_needs_at_or_in_and_a_window_must_not_be_inverted() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let r = tasks(&url, "n", &["reschedule", "t"]);
    expect(&r, 2, "required", "neither --at nor --in");
    assert!(
        r.err.contains("--at") && r.err.contains("--in"),
        "both ways named: {}",
        r.err
    );
    for (after, before) in [
        ("1h", "10m"),
        ("2030-01-01T00:00:00Z", "2029-12-31T23:59:59Z"),
        ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
    ] {
        let r = tasks(
            &url,
            "n",
            &["ls", "--due-after", after, "--due-before", before],
        );
        expect(
            &r,
            2,
            "is not before --due-before",
            &format!("{after}..{before}"),
        );
        assert!(r.took < Duration::from_secs(5), "not refused at once");
    }
}

/// With `--json`, an error is one JSON object on standard error (stdout stays the result's
/// alone), with the same message and the exit status; without it, an `error:` line.
#[test]
fn tasks_json_errors_are_a_json_object_on_stderr() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "j")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(600)), b"")
        .unwrap();
    let dead = format!("redis://127.0.0.1:{}/", free_port());
    let cases: &[(&str, &[&str], i32, &str)] = &[
        (&url, &["--json", "show", "no\u{1b}[2Jsuch"], 1, "no task"),
        (&url, &["--json", "cancel", "nope"], 1, "not cancelled"),
        (&dead, &["--json", "stats"], 1, "cannot reach Redis"),
        (
            &dead,
            &["--json", "ls", "--due-after", "1h", "--due-before", "1m"],
            2,
            "is not before",
        ),
        (
            &dead,
            &["--json", "--escaped", "show", "a\\q"],
            2,
            "unknown escape",
        ),
        // Usage errors found by the argument parser too.
        (
            &dead,
            &["--json", "reschedule", "t"],
            2,
            "<--at <RFC3339>|--in <DURATION>>",
        ),
        (&dead, &["--json", "ls", "--limit", "0"], 2, "--limit"),
        (&dead, &["--json", "--bogus", "stats"], 2, "'--bogus'"),
        (
            &dead,
            // (clap drops the escape sequence from its message; never raw, checked below)
            &["--json", "ls", "--due-after", "\u{1b}[2J"],
            2,
            "invalid value",
        ),
    ];
    for (url, args, code, says) in cases {
        let r = tasks(url, "j", args);
        assert_eq!(r.code, Some(*code), "{args:?}: {}", r.err);
        let v: Value = serde_json::from_str(r.err.trim())
            .unwrap_or_else(|e| panic!("{args:?}: stderr is not JSON ({e}): {:?}", r.err));
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{args:?}: {message}");
        assert_eq!(v["error"]["exit_status"], *code, "{args:?}");
        assert_clean(&r.err, "the JSON error");
        if *args != ["--json", "cancel", "nope"] {
            assert_eq!(r.out, "", "{args:?}: stdout");
        }
    }
    // Writes refused without --allow-writes: JSON too.
    let r = run(&[
        "tasks",
        "--redis",
        &url,
        "--namespace",
        "j",
        "--json",
        "cancel",
        "t",
    ]);
    assert_eq!(r.code, Some(2));
    let v: Value = serde_json::from_str(r.err.trim()).unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--allow-writes"));
    // Without --json: the line for people; help is still help.
    let r = tasks(&url, "j", &["show", "nope"]);
    assert!(r.err.starts_with("error: no task"), "{}", r.err);
    let r = tasks(&dead, "j", &["reschedule", "t"]);
    assert!(
        r.err.starts_with("error: the following required"),
        "{}",
        r.err
    );
    let r = run(&["tasks", "--json", "--help"]);
    assert_eq!(r.code, Some(0));
    assert!(r.out.contains("Usage: tickwheel tasks"), "{}", r.out);
}

/// Every id a table shows can be typed back with `--escaped`: its tab, newline, escape or
/// bidirectional control as the table prints it.
#[test]
fn tasks_escaped_reads_ids_as_the_tables_print_them() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "esc")).unwrap();
    // (the id, as the tables print it)
    let ids = [
        ("tab\there", r"tab\there"),
        ("new\nline\r\nfake row", r"new\nline\r\nfake row"),
        ("red\u{1b}[31mX\u{1b}[0m", r"red\u{1b}[31mX\u{1b}[0m"),
        ("bidi\u{202e}cba\u{2066}", r"bidi\u{202e}cba\u{2066}"),
        ("q\"uo'te\\back", r#"q"uo'te\\back"#),
        ("-dash", "-dash"),
    ];
    for (id, _) in ids {
        p.schedule(id, RunAt::After(Duration::from_secs(600)), b"x")
            .unwrap();
    }
    let listed = tasks(&url, "esc", &["ls"]);
    assert_eq!(listed.code, Some(0), "{}", listed.err);
    for (id, printed) in ids {
        assert!(
            listed.out.contains(printed),
            "{printed} not in {}",
            listed.out
        );
        // `--` so that an id starting with `-` is not taken for a flag.
        let r = tasks(&url, "esc", &["--escaped", "--json", "show", "--", printed]);
        assert_eq!(r.code, Some(0), "{printed}: {}", r.err);
        let v: Value = serde_json::from_str(&r.out).unwrap();
        assert_eq!(v["id"], id, "{printed}");
    }
    // Without --escaped the text is the id itself: no such task.
    let r = tasks(&url, "esc", &["show", r"tab\there"]);
    expect(&r, 1, "no task", "unescaped spelling");
    // Writes take the same spelling.
    let r = tasks(
        &url,
        "esc",
        &[
            "--escaped",
            "cancel",
            r"tab\there",
            r"new\nline\r\nfake row",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.err);
    let r = tasks(
        &url,
        "esc",
        &[
            "--escaped",
            "reschedule",
            r"bidi\u{202e}cba\u{2066}",
            "--in",
            "2h",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.err);
    let mut ins = Inspector::connect(&Config::new(&url, "esc")).unwrap();
    assert!(ins.show("tab\there").unwrap().is_none());
    assert!(ins.show("new\nline\r\nfake row").unwrap().is_none());
    // Escapes that stand for nothing an id holds are refused, before connecting.
    for bad in [r"a\q", r"a\", r"\xff", r"\u{110000}"] {
        let r = tasks(&url, "esc", &["--escaped", "show", bad]);
        expect(&r, 2, "error: id", bad);
        assert_clean(&r.err, bad);
    }
}

/// The pages show ids as `tickwheel tasks` prints them, so two ids never look alike (an
/// escape character and the text `\u{1b}`), and the search's "as shown" box reads that
/// spelling back.
#[test]
fn dashboard_shows_ids_as_the_tables_do_and_finds_them_as_shown() {
    let s = server();
    let url = s.url();
    let mut p = Producer::connect(&Config::new(&url, "shown")).unwrap();
    // (the id, as shown)
    let ids = [
        ("tab\there", r"tab\there"),
        ("esc\u{1b}[0m", r"esc\u{1b}[0m"),
        (r"esc\u{1b}[0m", r"esc\\u{1b}[0m"),
        ("new\nline", r"new\nline"),
    ];
    for (id, _) in ids {
        p.schedule(id, RunAt::After(Duration::from_secs(600)), b"x")
            .unwrap();
    }
    let d = Dashboard::start(&[
        "--redis",
        &url,
        "--namespace",
        "shown",
        "--listen",
        "127.0.0.1:0",
    ]);
    // The page's id cell (the ids here hold nothing HTML escapes).
    let id_cell = |body: &str| {
        body.split("id=\"task-id\">")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .unwrap_or_else(|| panic!("no task-id in {body}"))
            .to_string()
    };
    for (id, shown) in ids {
        let (status, body) = d.get(&format!("/task?id={}", form_encode(id)));
        assert_eq!(status, 200, "{id:?}: {body}");
        assert_eq!(id_cell(&body), shown, "{id:?}");
        let (status, found) = d.get(&format!("/task?id={}&escaped=1", form_encode(shown)));
        assert_eq!(status, 200, "{shown} as shown: {found}");
        assert_eq!(id_cell(&found), shown, "{shown}: another task");
    }
    let (status, body) = d.get(&format!("/task?id={}&escaped=1", form_encode(r"a\q")));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown escape"), "{body}");
}
