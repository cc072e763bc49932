//! `tickwheel dashboard` in a real headless Chromium (Debian's `chromium` package; `cargo
//! xtask test` installs it), driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`), against a private `redis-server` holding tasks and a worker
//! running in a thread. Without Chromium these tests fail, saying how to install it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tickwheel_redis::server::RedisServer;
use tickwheel_redis::{
    Config, Inspector, Outcome, Producer, Recurrence, RunAt, StopHandle, Task, TaskState, Worker,
};

const SCRIPT_ID: &str = "<script>alert(1)</script>";
const TOKEN: &str = "s3cret-token-0123456789";

/// An id with a tab, an escape sequence and a C1 control, and how the pages show it.
const CONTROL_ID: &str = "ctl\t\u{1b}[31m\u{9b}x";
const CONTROL_ID_SHOWN: &str = r"ctl\t\u{1b}[31m\u{9b}x";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------------------
// Chromium over the DevTools protocol, on file descriptors 3 (commands) and 4 (replies).

struct Browser {
    child: Child,
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    session: String,
    next: u64,
    alive: Arc<Mutex<bool>>,
    _profile: tempfile::TempDir,
}

/// How long a test may use its browser.
const BROWSER_LIFETIME: Duration = Duration::from_secs(180);

fn chromium_binary() -> String {
    let name = std::env::var("TICKWHEEL_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = Command::new(&name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "Chromium was not found ({name}): the dashboard tests need a real headless browser. \
         Install it (Debian/Ubuntu: `sudo apt-get install -y chromium`; `cargo xtask test` \
         does this when run as root) or set TICKWHEEL_CHROMIUM to its path."
    );
    name
}

impl Browser {
    fn start() -> Browser {
        let binary = chromium_binary();
        let profile = tempfile::tempdir().unwrap();
        let (their_in, to) = std::io::pipe().unwrap();
        let (from, their_out) = std::io::pipe().unwrap();
        let (fd_in, fd_out) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: between fork and exec the closure calls only async-signal-safe functions
        // (fcntl, dup2) on descriptors this process owns, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // Copies above 2 first, so that moving one onto 3 or 4 cannot close the other.
                let a = libc::fcntl(fd_in, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(fd_out, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        // A browser that hangs would hang the test: killed after BROWSER_LIFETIME, its pipe
        // closes and the waiting call fails.
        let (pid, alive) = (child.id() as libc::pid_t, Arc::new(Mutex::new(true)));
        let watched = alive.clone();
        std::thread::spawn(move || {
            std::thread::sleep(BROWSER_LIFETIME);
            let alive = watched.lock().unwrap_or_else(|p| p.into_inner());
            if *alive {
                // SAFETY: kill has no memory effects; the child is not reaped while `alive`
                // is true and locked (Drop clears it under the lock before waiting for the
                // child), so the pid is still our child's.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        drop::<(OwnedFd, OwnedFd)>((their_in.into(), their_out.into()));
        let mut b = Browser {
            child,
            to,
            from: BufReader::new(from),
            session: String::new(),
            next: 0,
            alive,
            _profile: profile,
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = b.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        // The dashboard's Content-Security-Policy forbids scripts and fetches; the tests
        // fetch, and escaping (not the policy) must keep user data from becoming markup.
        b.call("Page.setBypassCSP", json!({"enabled": true}));
        // Page events on: a JavaScript dialog (a script of user data that ran) fails the test.
        b.call("Page.enable", json!({}));
        b
    }

    /// Sends a command (to the page once attached) and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("chromium reads its pipe");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("chromium answers");
            assert!(n > 0, "chromium closed its DevTools pipe");
            buf.pop();
            let reply: Value = serde_json::from_slice(&buf).unwrap();
            assert!(
                reply["method"] != json!("Page.javascriptDialogOpening"),
                "a script ran in the page and opened a dialog: {}",
                reply["params"]
            );
            if reply["id"] == json!(id) {
                // A call that meets a navigation (the form submitted, the next page
                // loading): nothing to return; `load` polls again.
                let message = reply["error"]["message"].as_str().unwrap_or("");
                if message.contains("navigated or closed") {
                    return Value::Null;
                }
                assert!(
                    reply.get("error").is_none(),
                    "{method} failed: {}",
                    reply["error"]
                );
                return reply["result"].clone();
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    fn text(&mut self, expr: &str) -> String {
        match self.eval(expr) {
            Value::String(s) => s,
            other => panic!("{expr}: not a string but {other}"),
        }
    }

    /// Sets the fields of form `#form` (`(name, value)`: an input or a select), submits it,
    /// and waits for the page it loads.
    fn submit(&mut self, form: &str, fields: &[(&str, &str)]) {
        let mut script = String::new();
        for (name, value) in fields {
            script.push_str(&format!(
                "document.querySelector('#{form} [name={name}]').value = {}; ",
                json!(value)
            ));
        }
        script.push_str(&format!("document.getElementById('{form}').submit()"));
        self.load(|b| {
            b.eval(&script);
        });
    }

    /// Marks the current document, runs `action`, and waits until another document has
    /// loaded in its place.
    fn load(&mut self, action: impl FnOnce(&mut Browser)) {
        self.eval("window.__old = true");
        action(self);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.eval("window.__old !== true && document.readyState === 'complete'")
            != json!(true)
        {
            assert!(Instant::now() < deadline, "the page did not load");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn goto(&mut self, url: &str) {
        let url = url.to_string();
        self.load(|b| {
            b.call("Page.navigate", json!({"url": url}));
        });
    }

    /// The status of a request made by the page's own `fetch` (same origin).
    fn fetch_status(&mut self, path: &str, form: Option<&str>) -> u64 {
        let init = match form {
            Some(body) => format!(
                "{{method: 'POST', headers: {{'Content-Type': \
                 'application/x-www-form-urlencoded'}}, body: {}}}",
                json!(body)
            ),
            None => "{}".into(),
        };
        self.eval(&format!(
            "fetch({}, {init}).then(r => r.status)",
            json!(path)
        ))
        .as_u64()
        .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        *self.alive.lock().unwrap_or_else(|p| p.into_inner()) = false;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The dashboard process.

struct Dashboard {
    child: Child,
    url: String,
}

impl Dashboard {
    fn start(redis: &str, ns: &str, extra: &[&str], token: Option<&str>) -> Dashboard {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickwheel"));
        cmd.args(["dashboard", "--redis", redis, "--namespace", ns])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("TICKWHEEL_DASHBOARD_TOKEN")
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(t) = token {
            cmd.env("TICKWHEEL_DASHBOARD_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("the tickwheel binary runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .trim_end_matches('/')
            .to_string();
        Dashboard { child, url }
    }

    fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// A raw request, for what a browser would not send; returns the status code.
    fn raw(&self, request: &str) -> u16 {
        let mut s = TcpStream::connect(self.addr()).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status in {reply:?}"))
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn run_at(id: &str, cfg: &Config) -> Option<TaskState> {
    Inspector::connect(cfg)
        .unwrap()
        .show(id)
        .unwrap()
        .map(|d| d.info.state)
}

// ---------------------------------------------------------------------------------------

/// Tasks at known minutes from now, one recurring, one with a hostile id and payload that a
/// worker delivers twice and leaves in flight (attempt 2).
fn seed(server: &RedisServer, ns: &str) -> RunningWorker {
    let mut cfg = Config::new(server.url(), ns);
    cfg.shards = 4;
    let mut p = Producer::connect(&cfg).unwrap();
    let base = now_ms();
    let ids: Vec<String> = (0..30).map(|i| format!("order-{i}")).collect();
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // 10 tasks 5½ minutes ahead, 20 tasks 65½ minutes ahead.
        let min = if i < 10 { 5 } else { 65 };
        let at = base + min * 60_000 + 30_000;
        tasks.push(Task::new(id, RunAt::AtMillis(at), b"payload of an order"));
    }
    p.schedule_many(tasks).unwrap();
    let every = Recurrence::Every(Duration::from_secs(3600));
    p.schedule_recurring(
        "hourly-report",
        RunAt::AtMillis(base + 125 * 60_000 + 30_000),
        &every,
        b"\x00\x01binary\xff",
    )
    .unwrap();
    p.schedule(
        SCRIPT_ID,
        RunAt::After(Duration::ZERO),
        b"<img src=x onerror=alert(2)>",
    )
    .unwrap();
    // The worker retries the hostile task once, then leaves its second delivery in flight.
    let mut worker = Worker::connect(&cfg).unwrap();
    let stop = worker.stop_handle();
    let left = Arc::new(AtomicBool::new(false));
    let flag = left.clone();
    let thread = std::thread::spawn(move || {
        worker
            .run(|d| match d.attempt {
                1 => Outcome::RetryAfter(Duration::ZERO),
                _ => {
                    flag.store(true, Ordering::SeqCst);
                    Outcome::Leave
                }
            })
            .unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ins = Inspector::connect(&cfg).unwrap();
    loop {
        let s = ins.stats().unwrap();
        if left.load(Ordering::SeqCst) && s.in_flight() == 1 && s.unowned() == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not deliver twice"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    RunningWorker {
        stop,
        thread: Some(thread),
        cfg,
    }
}

/// A worker in a thread, stopped on drop.
struct RunningWorker {
    stop: StopHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    cfg: Config,
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn the_overview_shows_counts_chart_in_flight_and_search_finds_a_task() {
    let server = RedisServer::start().expect("redis-server");
    let worker = seed(&server, "dash");
    let cfg = worker.cfg.clone();
    // An id schedule_once remembers after its task was cancelled.
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule_once("once-gone", RunAt::After(Duration::from_secs(3600)), b"")
        .unwrap();
    assert!(p.cancel("once-gone").unwrap());
    let dash = Dashboard::start(&server.url(), "dash", &[], None);
    let mut b = Browser::start();
    b.goto(&format!("{}/", dash.url));
    assert_eq!(
        b.text("document.getElementById('remembered').textContent"),
        "1"
    );

    // Counts: 30 orders and the recurring task pending, the hostile task in flight.
    assert_eq!(
        b.text("document.getElementById('pending').textContent"),
        "31"
    );
    assert_eq!(
        b.text("document.getElementById('in-flight').textContent"),
        "1"
    );
    assert_eq!(
        b.text("document.getElementById('live-workers').textContent"),
        "1"
    );
    assert_eq!(
        b.text("document.getElementById('shards-unowned').textContent"),
        "0 of 4"
    );
    assert!(b
        .text("document.getElementById('not-available').textContent")
        .contains("lateness percentiles"));
    assert_eq!(
        b.eval("document.querySelectorAll('#shards tbody tr').length"),
        json!(4)
    );
    let owners = b.text(
        "[...document.querySelectorAll('#shards td.owner')].map(e => e.textContent).join(' ')",
    );
    assert!(!owners.contains('—'), "every shard owned: {owners}");

    // The chart: 10 tasks in minute 5, 20 in minute 65, the recurring one beyond 3 hours? No:
    // at minute 125, inside the default 3 h.
    let bars = b.eval(
        "[...document.querySelectorAll('svg#upcoming rect.bar')]\
         .map(r => [Number(r.dataset.minute), Number(r.dataset.count), \
         r.querySelector('title').textContent])",
    );
    let bars = bars.as_array().unwrap();
    let got: Vec<(u64, u64)> = bars
        .iter()
        .map(|b| (b[0].as_u64().unwrap(), b[1].as_u64().unwrap()))
        .collect();
    assert_eq!(got, vec![(5, 10), (65, 20), (125, 1)], "{bars:?}");
    assert!(bars[0][2].as_str().unwrap().ends_with("UTC: 10 tasks"));
    assert!(b
        .text("document.getElementById('upcoming-total').textContent")
        .starts_with("31 tasks due in the next 3 h"));
    // One hour: the later bars are out of range.
    b.goto(&format!("{}/?hours=1", dash.url));
    assert_eq!(
        b.eval("document.querySelectorAll('svg#upcoming rect.bar').length"),
        json!(1)
    );

    // The in-flight task, redelivered, its id shown as text and no element made of it.
    b.goto(&format!("{}/", dash.url));
    let row = b.eval(
        "[...document.querySelectorAll('#in-flight-tasks tbody td')].map(e => e.textContent)",
    );
    let row: Vec<&str> = row
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(row[0], SCRIPT_ID);
    assert_eq!(row[2], "2 redelivered");
    assert_eq!(b.eval("document.scripts.length"), json!(0));

    // Search by id through the form.
    b.load(|b| {
        b.eval(
            "document.querySelector('#search input[name=id]').value = 'order-12'; \
             document.getElementById('search').submit()",
        );
    });
    assert!(b.text("location.href").ends_with("/task?id=order-12"));
    assert_eq!(
        b.text("document.getElementById('task-id').textContent"),
        "order-12"
    );
    assert_eq!(
        b.text("document.getElementById('state').textContent"),
        "pending"
    );
    assert_eq!(
        b.text("document.getElementById('attempt').textContent"),
        "0"
    );
    assert_eq!(
        b.text("document.getElementById('payload-size').textContent"),
        "19 bytes"
    );
    assert_eq!(
        b.text("document.getElementById('payload').textContent"),
        "payload of an order"
    );
    let Some(TaskState::Pending {
        run_at_ms, version, ..
    }) = run_at("order-12", &cfg)
    else {
        panic!("order-12 is pending");
    };
    assert!(b
        .text("document.getElementById('run-at').textContent")
        .starts_with(&rfc3339_prefix(run_at_ms)));
    assert_eq!(
        b.text("document.getElementById('version').textContent"),
        version.to_string()
    );
    // Read-only: no forms but the search, and the page says why.
    assert_eq!(b.eval("document.forms.length"), json!(1));
    assert!(b.eval("!!document.getElementById('read-only')") == json!(true));

    // A binary payload as hex, the recurrence shown.
    b.goto(&format!("{}/task?id=hourly-report", dash.url));
    assert_eq!(
        b.text("document.getElementById('recurrence').textContent"),
        "every 1h"
    );
    assert_eq!(
        b.eval("document.getElementById('payload').dataset.kind"),
        json!("hex")
    );
    assert!(b
        .text("document.getElementById('payload').textContent")
        .starts_with("00000000  00 01 62 69 6e 61 72 79 ff"));

    // The hostile id and payload: text, not markup.
    b.goto(&format!("{}/task?id={}", dash.url, enc(SCRIPT_ID)));
    assert_eq!(
        b.text("document.getElementById('task-id').textContent"),
        SCRIPT_ID
    );
    assert_eq!(
        b.text("document.getElementById('state').textContent"),
        "in flight"
    );
    assert_eq!(
        b.text("document.getElementById('attempt').textContent"),
        "2 (redelivered)"
    );
    assert_eq!(
        b.text("document.getElementById('payload').textContent"),
        "<img src=x onerror=alert(2)>"
    );
    assert_eq!(b.eval("document.scripts.length"), json!(0));
    assert_eq!(b.eval("document.images.length"), json!(0));
    assert!(b.text("document.title").contains(SCRIPT_ID));

    // An unknown id: a page that says so; malformed requests: 400.
    b.goto(&format!("{}/task?id=no-such-task", dash.url));
    assert!(b.eval("!!document.getElementById('not-found')") == json!(true));
    assert!(b.eval("!!document.getElementById('remembered')") == json!(false));
    b.goto(&format!("{}/task?id=once-gone", dash.url));
    assert!(b.eval("!!document.getElementById('not-found')") == json!(true));
    assert!(b
        .text("document.getElementById('remembered').textContent")
        .contains("schedule_once of this id stores nothing until then"));
    assert_eq!(b.fetch_status("/task?id=no-such-task", None), 404);
    assert_eq!(b.fetch_status("/task?id=", None), 400);
    assert_eq!(b.fetch_status("/task", None), 400);
    assert_eq!(
        b.fetch_status(&format!("/task?id={}", "x".repeat(2000)), None),
        400
    );
    assert_eq!(b.fetch_status("/?hours=soon", None), 400);
    assert_eq!(b.fetch_status("/?hours=0", None), 400);
    assert_eq!(dash.raw("BLAH\r\n\r\n"), 400);

    // Writes refused without the flag, even with a token and from the page's own origin.
    b.goto(&format!("{}/", dash.url));
    let form = format!("id=order-3&token={TOKEN}");
    assert_eq!(b.fetch_status("/cancel", Some(&form)), 403);
    assert_eq!(
        b.fetch_status("/reschedule", Some(&format!("{form}&at=1h"))),
        403
    );
    assert!(run_at("order-3", &cfg).is_some(), "order-3 is still there");
}

/// `2026-11-26T01:02:03.004Z`'s first 19 characters, for ms since the epoch.
fn rfc3339_prefix(ms: u64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{}", ms / 1000), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn writes_need_the_flag_the_token_and_the_same_origin() {
    let mut server = RedisServer::start().expect("redis-server");
    let mut cfg = Config::new(server.url(), "w");
    cfg.shards = 2;
    let mut p = Producer::connect(&cfg).unwrap();
    for id in ["a-1", "a-2", SCRIPT_ID, CONTROL_ID] {
        p.schedule(id, RunAt::After(Duration::from_secs(3600)), b"x")
            .unwrap();
    }
    let dash = Dashboard::start(&server.url(), "w", &["--allow-writes"], Some(TOKEN));
    let mut b = Browser::start();

    // A wrong token through the form: 403, the task stays.
    b.goto(&format!("{}/task?id=a-1", dash.url));
    assert_eq!(b.eval("document.forms.length"), json!(3));
    b.submit("cancel", &[("token", "wrong-token-0123456789")]);
    assert!(b.text("document.title").starts_with("403"));
    assert!(run_at("a-1", &cfg).is_some());
    // No token at all.
    assert_eq!(b.fetch_status("/cancel", Some("id=a-1")), 403);
    assert!(run_at("a-1", &cfg).is_some());

    // The right token from another site, or from nowhere: 403.
    let post = |origin: &str| {
        let body = format!("id=a-1&token={TOKEN}");
        format!(
            "POST /cancel HTTP/1.1\r\nHost: {}\r\n{origin}Content-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            dash.addr(),
            body.len()
        )
    };
    assert_eq!(dash.raw(&post("Origin: http://evil.example\r\n")), 403);
    assert_eq!(dash.raw(&post("Referer: http://evil.example/\r\n")), 403);
    assert_eq!(dash.raw(&post("")), 403);
    assert_eq!(
        dash.raw(&post(&format!(
            "Origin: http://{}\r\nSec-Fetch-Site: cross-site\r\n",
            dash.addr()
        ))),
        403
    );
    // A host name that is not loopback (DNS rebinding): refused even for reading.
    assert_eq!(
        dash.raw("GET / HTTP/1.1\r\nHost: evil.example:80\r\n\r\n"),
        403
    );
    assert!(run_at("a-1", &cfg).is_some());

    // Reschedule with the token through the form; a malformed time is a 400.
    b.goto(&format!("{}/task?id=a-2", dash.url));
    b.submit("reschedule", &[("token", TOKEN), ("at", "tomorrow-ish")]);
    assert!(b.text("document.title").starts_with("400"));
    let before = now_ms();
    b.goto(&format!("{}/task?id=a-2", dash.url));
    b.submit("reschedule", &[("token", TOKEN), ("at", "2h")]);
    assert_eq!(b.text("document.title"), "rescheduled");
    let Some(TaskState::Pending { run_at_ms, .. }) = run_at("a-2", &cfg) else {
        panic!("a-2 is pending");
    };
    assert!(
        (before + 7_199_000..now_ms() + 7_201_000).contains(&run_at_ms),
        "{run_at_ms} vs {before}"
    );

    // Cancel with the token through the form: the task is gone (an id with control
    // characters too: the form carries it exactly, the page shows it escaped).
    for (id, shown) in [
        ("a-1", "a-1"),
        (SCRIPT_ID, SCRIPT_ID),
        (CONTROL_ID, CONTROL_ID_SHOWN),
    ] {
        b.goto(&format!("{}/task?id={}", dash.url, enc(id)));
        assert_eq!(b.eval("document.scripts.length"), json!(0));
        b.submit("cancel", &[("token", TOKEN)]);
        assert_eq!(b.text("document.title"), "cancelled");
        assert_eq!(
            b.text("document.getElementById('result').textContent"),
            format!("Task {shown} cancelled.")
        );
        assert_eq!(b.eval("document.scripts.length"), json!(0));
        assert!(run_at(id, &cfg).is_none(), "{id} is gone");
        b.goto(&format!("{}/task?id={}", dash.url, enc(id)));
        assert!(b.eval("!!document.getElementById('not-found')") == json!(true));
    }
    // Cancelling it again: nothing to cancel.
    assert_eq!(
        b.fetch_status("/cancel", Some(&format!("id=a-1&token={TOKEN}"))),
        409
    );

    // Redis gone: a 503 page, no crash; back: the pages again.
    let get = format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", dash.addr());
    server.kill();
    assert_eq!(dash.raw(&get), 503);
    server.restart().expect("redis-server restarts");
    assert_eq!(dash.raw(&get), 200);
}

#[test]
fn bad_start_inputs_are_a_message_and_a_non_zero_exit() {
    let run = |args: &[&str], token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickwheel"));
        cmd.arg("dashboard")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--connect-timeout", "300ms"])
            .env_remove("TICKWHEEL_DASHBOARD_TOKEN")
            .env("RUST_BACKTRACE", "0");
        if let Some(t) = token {
            cmd.env("TICKWHEEL_DASHBOARD_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        (out.status.code(), stderr)
    };
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, err) = run(
        &[
            "--redis",
            &format!("redis://127.0.0.1:{port}/"),
            "--namespace",
            "x",
        ],
        None,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot read namespace \"x\"") && err.contains("is Redis running"),
        "{err}"
    );

    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let (code, err) = run(&["--redis", &url, "--namespace", "nothing-here"], None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not exist"), "{err}");

    // A namespace whose meta key holds something else.
    let mut con = TcpStream::connect(format!("127.0.0.1:{}", server.port())).unwrap();
    con.write_all(b"*3\r\n$3\r\nSET\r\n$13\r\ntw:{odd}:meta\r\n$1\r\nx\r\n")
        .unwrap();
    let mut ok = [0u8; 5];
    con.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let (code, err) = run(&["--redis", &url, "--namespace", "odd"], None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("holds schema"), "{err}");

    // Writes without a token, or with a short one: bad arguments.
    let mut p = Producer::connect(&Config::new(url.clone(), "ok")).unwrap();
    p.schedule("t", RunAt::After(Duration::from_secs(60)), b"")
        .unwrap();
    let (code, err) = run(
        &["--redis", &url, "--namespace", "ok", "--allow-writes"],
        None,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs a token"), "{err}");
    let (code, err) = run(
        &["--redis", &url, "--namespace", "ok", "--allow-writes"],
        Some("short"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at least 16"), "{err}");
    let (code, err) = run(
        &[
            "--redis",
            &url,
            "--namespace",
            "ok",
            "--allow-writes",
            "--token-file",
            "/nonexistent/t",
        ],
        None,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot read the token file"), "{err}");
}

/// The scale figure: how long the overview takes with 10^6 pending tasks in 16 shards, and
/// whether loading it over and over makes a running worker late. A measurement, never a
/// pass/fail on speed: `cargo test --release -p tickwheel-cli --test dashboard -- --ignored
/// --nocapture` (`TICKWHEEL_DASHBOARD_SCALE_TASKS` to change the count).
#[test]
#[ignore = "a measurement (10^6 tasks): run with --ignored --nocapture, in release"]
fn overview_with_a_million_pending_tasks() {
    let n: u64 = std::env::var("TICKWHEEL_DASHBOARD_SCALE_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let server = RedisServer::start().expect("redis-server");
    let mut cfg = Config::new(server.url(), "scale");
    cfg.shards = 16;
    let mut p = Producer::connect(&cfg).unwrap();
    // Spread over the 6 hours from a minute ahead, so none is due while measuring.
    let base = now_ms() + 60_000;
    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let ids: Vec<String> = chunk.iter().map(|i| format!("task-{i}")).collect();
        let tasks = ids.iter().zip(chunk).map(|(id, &i)| {
            Task::new(
                id,
                RunAt::AtMillis(base + i * 6 * 3_600_000 / n),
                b"payload",
            )
        });
        p.schedule_many(tasks).unwrap();
    }
    println!("scheduled {n} tasks in {:?}", started.elapsed());
    // A stream of 100 tasks a second for 40 s, from 5 s on: delivered while measuring.
    let t0 = now_ms() + 5_000;
    let ids: Vec<String> = (0..4000).map(|k| format!("stream-{k}")).collect();
    p.schedule_many(
        ids.iter()
            .enumerate()
            .map(|(k, id)| Task::new(id, RunAt::AtMillis(t0 + k as u64 * 10), b"")),
    )
    .unwrap();
    let late = Arc::new(Mutex::new(Vec::new()));
    let record = late.clone();
    let mut worker = Worker::connect(&cfg).unwrap();
    let stop = worker.stop_handle();
    let thread = std::thread::spawn(move || {
        worker
            .run(|d| {
                let now = now_ms();
                record
                    .lock()
                    .unwrap()
                    .push((d.due_ms, now.saturating_sub(d.due_ms)));
                Outcome::Ack
            })
            .unwrap();
    });
    let _worker = RunningWorker {
        stop,
        thread: Some(thread),
        cfg: cfg.clone(),
    };
    let dash = Dashboard::start(&server.url(), "scale", &[], None);
    let get = || {
        let t = Instant::now();
        let status = dash.raw(&format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", dash.addr()));
        assert_eq!(status, 200);
        t.elapsed()
    };
    println!("first page (cold): {:?}", get());
    // Idle until t0 + 25 s, then load the page over and over until t0 + 45 s.
    while now_ms() < t0 + 25_000 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut times = Vec::new();
    while now_ms() < t0 + 45_000 {
        times.push(get());
    }
    std::thread::sleep(Duration::from_secs(2));
    times.sort();
    println!(
        "overview, {} loads back to back: median {:?}, max {:?}",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    let late = late.lock().unwrap().clone();
    for (name, from, to) in [
        ("idle", t0, t0 + 25_000),
        ("while loading", t0 + 25_000, t0 + 40_000),
    ] {
        let mut l: Vec<u64> = late
            .iter()
            .filter(|(due, _)| (from..to).contains(due))
            .map(|&(_, ms)| ms)
            .collect();
        l.sort_unstable();
        assert!(!l.is_empty(), "no deliveries {name}");
        println!(
            "worker lateness {name}: {} deliveries, p50 {} ms, p99 {} ms, p99.9 {} ms, max {} \
             ms, {} over 5 ms",
            l.len(),
            l[l.len() / 2],
            l[l.len() * 99 / 100],
            l[l.len() * 999 / 1000],
            l[l.len() - 1],
            l.iter().filter(|&&ms| ms > 5).count()
        );
    }
}

/// The README's screenshot: a namespace with a day's worth of traffic shape over the next
/// three hours, a worker, two stuck deliveries; `TICKWHEEL_DASHBOARD_SCREENSHOT=docs/dashboard.png
/// cargo test -p tickwheel-cli --test dashboard -- --ignored readme_screenshot`.
#[test]
#[ignore = "writes the README's screenshot: set TICKWHEEL_DASHBOARD_SCREENSHOT to a path"]
fn readme_screenshot() {
    let out = std::env::var("TICKWHEEL_DASHBOARD_SCREENSHOT")
        .expect("TICKWHEEL_DASHBOARD_SCREENSHOT: where to write the PNG");
    let out = std::path::absolute(out).unwrap();
    let server = RedisServer::start().expect("redis-server");
    let mut cfg = Config::new(server.url(), "orders");
    cfg.shards = 8;
    let mut p = Producer::connect(&cfg).unwrap();
    let base = now_ms() + 30_000;
    // A wave of reminders over the next three hours, and a burst at the top of an hour.
    let mut runs = Vec::new();
    for i in 0..6000u64 {
        let x = i as f64 / 6000.0;
        let at = base + (x * x * 3.0 * 3_600_000.0 * (1.0 + 0.3 * (x * 20.0).sin()) / 1.3) as u64;
        runs.push((format!("remind-order-{i}"), at));
    }
    let hour = (base / 3_600_000 + 1) * 3_600_000;
    runs.extend((0..800).map(|i| (format!("invoice-{i}"), hour + i * 50)));
    p.schedule_many(
        runs.iter()
            .map(|(id, at)| Task::new(id, RunAt::AtMillis(*at), b"{\"order\": 42}")),
    )
    .unwrap();
    for id in ["stuck-payment-7", "export-report-3"] {
        p.schedule(id, RunAt::After(Duration::ZERO), b"{\"amount\": 1999}")
            .unwrap();
    }
    let mut worker = Worker::connect(&cfg).unwrap();
    let stop = worker.stop_handle();
    let thread = std::thread::spawn(move || {
        worker
            .run(|d| match (d.id.as_str(), d.attempt) {
                ("stuck-payment-7", 1..=2) => Outcome::RetryAfter(Duration::ZERO),
                ("stuck-payment-7" | "export-report-3", _) => Outcome::Leave,
                _ => Outcome::Ack,
            })
            .unwrap();
    });
    let _worker = RunningWorker {
        stop,
        thread: Some(thread),
        cfg: cfg.clone(),
    };
    let mut ins = Inspector::connect(&cfg).unwrap();
    while ins.stats().unwrap().in_flight() < 2 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let dash = Dashboard::start(&server.url(), "orders", &[], None);
    let status = Command::new(chromium_binary())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--screenshot={}", out.display()))
        .args(["--window-size=1200,900", &format!("{}/", dash.url)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success() && out.exists(),
        "chromium wrote no screenshot"
    );
}

/// The in-flight list is ordered by visibility deadline across shards, as its heading says
/// (the Inspector lists shard by shard), and its heading counts the list it heads.
#[test]
fn in_flight_tasks_are_listed_by_visibility_deadline_across_shards() {
    let server = RedisServer::start().expect("redis-server");
    let mut cfg = Config::new(server.url(), "order");
    cfg.shards = 4;
    // Claimed at their run-at, so the deadlines follow the run-ats.
    cfg.claim_ahead = Duration::ZERO;
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule("far", RunAt::After(Duration::from_secs(3600)), b"")
        .unwrap();
    let ins = Inspector::connect(&cfg).unwrap();
    let in_shard = |prefix: &str, shard: u32| {
        (0..)
            .map(|i| format!("{prefix}-{i}"))
            .find(|id| ins.shard_of(id) == shard)
            .unwrap()
    };
    // Run-ats in the opposite order of the shards.
    let ids = [
        in_shard("first", 3),
        in_shard("second", 2),
        in_shard("third", 0),
    ];
    let base = now_ms() + 300;
    for (k, id) in ids.iter().enumerate() {
        p.schedule(id, RunAt::AtMillis(base + 400 * k as u64), b"")
            .unwrap();
    }
    let mut worker = Worker::connect(&cfg).unwrap();
    let stop = worker.stop_handle();
    let thread = std::thread::spawn(move || {
        worker.run(|_| Outcome::Leave).unwrap();
    });
    let _worker = RunningWorker {
        stop,
        thread: Some(thread),
        cfg: cfg.clone(),
    };
    let mut ins = Inspector::connect(&cfg).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ins.stats().unwrap().in_flight() < 3 {
        assert!(Instant::now() < deadline, "not all delivered");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The order the page must show, from the tasks' own deadlines; not the shards' order.
    let mut expected: Vec<(u64, String)> = ids
        .iter()
        .map(|id| match ins.show(id).unwrap().unwrap().info.state {
            TaskState::InFlight { visible_at_ms, .. } => (visible_at_ms, id.clone()),
            other => panic!("{id} is {other:?}"),
        })
        .collect();
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    assert_ne!(
        expected,
        [ids[2].clone(), ids[1].clone(), ids[0].clone()],
        "shard order"
    );

    let dash = Dashboard::start(&server.url(), "order", &[], None);
    let page = dash.get_body("/");
    let table = page
        .split("<table id=\"in-flight-tasks\">")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    let mut listed: Vec<(usize, &String)> = ids
        .iter()
        .map(|id| (table.find(&format!(">{id}</a>")).expect(id), id))
        .collect();
    listed.sort();
    let listed: Vec<&String> = listed.into_iter().map(|(_, id)| id).collect();
    assert_eq!(listed, expected.iter().collect::<Vec<_>>(), "{table}");
    assert!(
        page.contains("All 3 in-flight tasks, by visibility deadline"),
        "{page}"
    );
}

impl Dashboard {
    /// `GET path`'s body (status 200 asserted).
    fn get_body(&self, path: &str) -> String {
        let mut s = TcpStream::connect(self.addr()).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.addr()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 "), "{reply}");
        reply.split_once("\r\n\r\n").unwrap().1.to_string()
    }
}

// ---------------------------------------------------------------------------------------
// Failed tasks.

/// Makes failed tasks: schedules each `(id, error)` at `at_ms` on a manual clock starting
/// just before it, and steps a worker on that clock until each has failed for good
/// (`Outcome::non_retryable(error)`); failed-at times are real instants.
fn fail_tasks(url: &str, ns: &str, shards: u32, tasks: &[(&str, &str)]) {
    let at_ms = now_ms();
    let time = tickwheel_redis::ManualTime::new(at_ms - 1000);
    let mut cfg = Config::new(url, ns);
    cfg.shards = shards;
    cfg.time = tickwheel_redis::TimeSource::Manual(time.clone());
    let mut p = Producer::connect(&cfg).unwrap();
    p.schedule_many(
        tasks
            .iter()
            .map(|(id, _)| Task::new(id, RunAt::AtMillis(at_ms), b"payload")),
    )
    .unwrap();
    let mut w = Worker::connect(&cfg).unwrap();
    let mut handler = |d: &tickwheel_redis::Delivery| {
        let error = tasks.iter().find(|(id, _)| *id == d.id).unwrap().1;
        Outcome::non_retryable(error)
    };
    let mut ins = Inspector::connect(&cfg).unwrap();
    for step in 0..100 {
        time.set_ms(at_ms - 1000 + step * 50);
        w.reload_windows();
        w.tick(&mut handler).unwrap();
        if ins.stats().unwrap().failed() == tasks.len() as u64 {
            return;
        }
    }
    panic!("the tasks did not all fail");
}

const IMG_ID: &str = "<img src=x onerror=alert(1)>";
const IMG_ERROR: &str = "<img src=x onerror=alert(3)> \"quoted\" 'single' \u{1b}[31m\u{202e}end";
const IMG_ERROR_SHOWN: &str =
    r#"<img src=x onerror=alert(3)> "quoted" 'single' \u{1b}[31m\u{202e}end"#;
const BREAKOUT_ERROR: &str = "</code></td></tr></table><script>alert(4)</script>\"><b>x";

/// The failed tasks of the Failed view: (id, reason, attempts, last error) as shown.
fn failed_rows(b: &mut Browser) -> Vec<Vec<String>> {
    let rows = b.eval(
        "[...document.querySelectorAll('#failed-tasks tbody tr')].map(r => \
         [r.querySelector('td.id').textContent, r.querySelector('td.reason').textContent, \
          r.querySelector('td.attempts').textContent, r.querySelector('td.error').textContent, \
          String(r.cells.length)])",
    );
    let mut rows: Vec<Vec<String>> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    rows.sort();
    rows
}

fn is_failed(id: &str, cfg: &Config) -> bool {
    matches!(run_at(id, cfg), Some(TaskState::Failed { .. }))
}

#[test]
fn the_failed_view_shows_hostile_failures_as_text_and_its_forms_retry_and_discard() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    fail_tasks(
        &url,
        "f",
        2,
        &[
            ("job-1", "db down 1"),
            ("job-2", "db down 2"),
            (IMG_ID, IMG_ERROR),
            (CONTROL_ID, "tab\there\u{9b}"),
            (SCRIPT_ID, BREAKOUT_ERROR),
        ],
    );
    let mut cfg = Config::new(url.clone(), "f");
    cfg.shards = 2;
    let dash = Dashboard::start(&url, "f", &["--allow-writes"], Some(TOKEN));
    let mut b = Browser::start();

    // The overview counts them, per shard and in all; nothing is paused.
    b.goto(&format!("{}/", dash.url));
    assert_eq!(b.text("document.getElementById('failed').textContent"), "5");
    assert_eq!(
        b.text("document.getElementById('paused').textContent"),
        "0 of 2"
    );
    assert_eq!(
        b.eval("!!document.getElementById('paused-banner')"),
        json!(false)
    );
    let per_shard = b.eval(
        "[...document.querySelectorAll('#shards td.failed')]\
         .reduce((n, e) => n + Number(e.textContent), 0)",
    );
    assert_eq!(per_shard, json!(5));

    // The Failed view: every id and error as text, no element made of them, rows whole.
    b.load(|b| {
        b.eval("document.getElementById('failed-link').click()");
    });
    assert!(b.text("location.href").ends_with("/failed"));
    let mut want: Vec<Vec<String>> = [
        ("job-1", "db down 1"),
        ("job-2", "db down 2"),
        (IMG_ID, IMG_ERROR_SHOWN),
        (CONTROL_ID_SHOWN, r"tab\u{9}here\u{9b}"),
        (SCRIPT_ID, BREAKOUT_ERROR),
    ]
    .iter()
    .map(|(id, e)| {
        [*id, "non_retryable", "1", e, "6"]
            .map(String::from)
            .to_vec()
    })
    .collect();
    want.sort();
    assert_eq!(failed_rows(&mut b), want);
    assert_eq!(b.eval("document.scripts.length"), json!(0));
    assert_eq!(b.eval("document.images.length"), json!(0));
    assert_eq!(
        b.eval("document.querySelectorAll('#failed-tasks b').length"),
        json!(0)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('table').length"),
        json!(1)
    );
    // Each id links to its failed task's page.
    let hrefs = b.eval(
        "[...document.querySelectorAll('#failed-tasks td.id a')].map(a => a.getAttribute('href'))",
    );
    for id in ["job-1", IMG_ID, CONTROL_ID, SCRIPT_ID] {
        let href = format!("/task?id={}&failed=1", enc(id));
        assert!(
            hrefs.as_array().unwrap().contains(&json!(href)),
            "{href} in {hrefs}"
        );
    }
    assert!(b
        .text("document.getElementById('failed-heading').textContent")
        .starts_with("All 5 failed tasks"));

    // Filtered by error text through the form.
    b.load(|b| {
        b.eval(
            "document.querySelector('#failed-filter input[name=error]').value = 'db down'; \
             document.getElementById('failed-filter').submit()",
        );
    });
    assert!(b.text("location.href").ends_with("/failed?error=db+down"));
    let ids: Vec<String> = failed_rows(&mut b)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(ids, ["job-1", "job-2"]);
    // A filter that is markup stays text in the input.
    b.goto(&format!(
        "{}/failed?error={}",
        dash.url,
        enc(BREAKOUT_ERROR)
    ));
    assert_eq!(
        b.text("document.querySelector('#failed-filter input[name=error]').value"),
        BREAKOUT_ERROR
    );
    assert_eq!(failed_rows(&mut b).len(), 1);
    assert_eq!(b.eval("document.scripts.length"), json!(0));

    // The task page: the error log, and Retry and Discard (no cancel for a failed task).
    b.goto(&format!("{}/task?id={}", dash.url, enc(IMG_ID)));
    assert_eq!(
        b.text("document.getElementById('state').textContent"),
        "failed (non_retryable)"
    );
    let log =
        b.text("[...document.querySelectorAll('td#error')].map(e => e.textContent).join('|')");
    assert!(log.starts_with("attempt 1, "), "{log}");
    assert!(log.ends_with(&format!(": {IMG_ERROR_SHOWN}")), "{log}");
    assert_eq!(b.eval("document.images.length"), json!(0));
    assert_eq!(
        b.eval(
            "[!!document.getElementById('retry'), !!document.getElementById('discard'), \
                !!document.getElementById('cancel')]"
        ),
        json!([true, true, false])
    );

    // Refused: a wrong token through the form, no token, another origin.
    b.goto(&format!("{}/task?id=job-2", dash.url));
    b.submit("retry", &[("token", "wrong-token-0123456789")]);
    assert!(b.text("document.title").starts_with("403"));
    for (path, form) in [
        ("/retry", "id=job-2"),
        ("/discard", "id=job-2"),
        ("/retry-failed", "error=db"),
        ("/discard-failed", "error=db"),
        ("/pause", ""),
    ] {
        assert_eq!(
            b.fetch_status(path, Some(form)),
            403,
            "{path} without a token"
        );
    }
    let post = |path: &str, origin: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\n{origin}Content-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            dash.addr(),
            body.len()
        )
    };
    for path in [
        "/retry",
        "/discard",
        "/retry-failed",
        "/discard-failed",
        "/pause",
    ] {
        let body = format!("id=job-2&error=db&token={TOKEN}");
        for origin in [
            "Origin: http://evil.example\r\n".to_string(),
            "Referer: http://evil.example/\r\n".to_string(),
            String::new(),
            format!(
                "Origin: http://{}\r\nSec-Fetch-Site: cross-site\r\n",
                dash.addr()
            ),
        ] {
            assert_eq!(
                dash.raw(&post(path, &origin, &body)),
                403,
                "{path} {origin:?}"
            );
        }
    }
    assert_eq!(
        dash.raw(&format!(
            "GET /retry HTTP/1.1\r\nHost: {}\r\n\r\n",
            dash.addr()
        )),
        405
    );
    assert!(
        is_failed("job-2", &cfg) && is_failed("job-1", &cfg),
        "nothing changed"
    );
    let mut ins = Inspector::connect(&cfg).unwrap();
    assert_eq!(ins.stats().unwrap().failed(), 5);
    assert_eq!(ins.stats().unwrap().paused(), 0);

    // Retry with the token through the form: pending again.
    b.goto(&format!("{}/task?id=job-1", dash.url));
    b.submit("retry", &[("token", TOKEN)]);
    assert_eq!(b.text("document.title"), "retried");
    assert_eq!(
        b.text("document.getElementById('result').textContent"),
        "Task job-1 retried."
    );
    assert!(matches!(
        run_at("job-1", &cfg),
        Some(TaskState::Pending { .. })
    ));
    // Again: not failed any more.
    assert_eq!(
        b.fetch_status("/retry", Some(&format!("id=job-1&token={TOKEN}"))),
        409
    );
    // "Retry all shown" by a filter holding a tab: the form carries it exactly.
    b.goto(&format!("{}/failed?error={}", dash.url, enc("tab\there")));
    assert_eq!(failed_rows(&mut b).len(), 1);
    b.submit("retry-shown", &[("token", TOKEN)]);
    assert_eq!(
        b.text("document.getElementById('result').textContent"),
        "Examined 4, retried 1, live task exists 0."
    );
    assert!(matches!(
        run_at(CONTROL_ID, &cfg),
        Some(TaskState::Pending { .. })
    ));
    // Discard the hostile one through its form (the id travels as hex).
    b.goto(&format!("{}/task?id={}", dash.url, enc(IMG_ID)));
    b.submit("discard", &[("token", TOKEN)]);
    assert_eq!(b.text("document.title"), "discarded");
    assert_eq!(
        b.text("document.getElementById('result').textContent"),
        format!("Task {IMG_ID} discarded.")
    );
    assert_eq!(b.eval("document.images.length"), json!(0));
    assert!(run_at(IMG_ID, &cfg).is_none(), "discarded");

    // "Retry all shown" by the page's filter: job-2 only.
    b.goto(&format!("{}/failed?error=db+down", dash.url));
    assert_eq!(failed_rows(&mut b).len(), 1);
    b.submit("retry-shown", &[("token", TOKEN)]);
    assert_eq!(b.text("document.title"), "retried");
    assert_eq!(
        b.text("document.getElementById('result').textContent"),
        "Examined 2, retried 1, live task exists 0."
    );
    assert!(matches!(
        run_at("job-2", &cfg),
        Some(TaskState::Pending { .. })
    ));
    assert!(is_failed(SCRIPT_ID, &cfg), "not matched by the filter");
    // "Discard all shown", unfiltered: the last one.
    b.goto(&format!("{}/failed", dash.url));
    b.submit("discard-shown", &[("token", TOKEN)]);
    assert_eq!(
        b.text("document.getElementById('result').textContent"),
        "Examined 1, discarded 1, live task exists 0."
    );
    assert_eq!(ins.stats().unwrap().failed(), 0);

    // Pause shard 1 from the overview: the banner says so; resume every shard.
    b.goto(&format!("{}/", dash.url));
    b.submit("pause", &[("shard", "1"), ("token", TOKEN)]);
    assert_eq!(b.text("document.title"), "paused");
    let st = ins.stats().unwrap();
    assert_eq!(
        st.shards.iter().map(|s| s.paused).collect::<Vec<_>>(),
        [false, true]
    );
    b.goto(&format!("{}/", dash.url));
    assert!(b
        .text("document.getElementById('paused-banner').textContent")
        .starts_with("Paused: shard 1 of 2."));
    assert_eq!(
        b.text("document.getElementById('paused').textContent"),
        "1 of 2"
    );
    b.submit("resume", &[("token", TOKEN)]);
    assert_eq!(b.text("document.title"), "resumed");
    assert_eq!(ins.stats().unwrap().paused(), 0);
    b.goto(&format!("{}/", dash.url));
    assert_eq!(
        b.eval("!!document.getElementById('paused-banner')"),
        json!(false)
    );
}

/// Without `--allow-writes`: the Failed view and the task page list and show, offer no
/// write form, and every write is refused, with the token and from the page's own origin.
#[test]
fn failed_tasks_cannot_be_changed_without_the_flag() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    fail_tasks(&url, "ro", 2, &[("job-1", "boom"), (SCRIPT_ID, IMG_ERROR)]);
    let mut cfg = Config::new(url.clone(), "ro");
    cfg.shards = 2;
    let dash = Dashboard::start(&url, "ro", &[], None);
    let mut b = Browser::start();
    b.goto(&format!("{}/failed", dash.url));
    assert_eq!(failed_rows(&mut b).len(), 2);
    assert_eq!(
        b.eval("document.forms.length"),
        json!(2),
        "search and filter only"
    );
    assert_eq!(
        b.eval("!!document.getElementById('read-only')"),
        json!(true)
    );
    b.goto(&format!("{}/task?id=job-1", dash.url));
    assert_eq!(b.eval("document.forms.length"), json!(1));
    b.goto(&format!("{}/", dash.url));
    assert_eq!(b.eval("!!document.getElementById('pause')"), json!(false));
    for (path, form) in [
        ("/retry", format!("id=job-1&token={TOKEN}")),
        ("/discard", format!("id=job-1&token={TOKEN}")),
        ("/retry-failed", format!("token={TOKEN}")),
        ("/discard-failed", format!("token={TOKEN}")),
        ("/pause", format!("token={TOKEN}")),
        ("/resume", format!("token={TOKEN}")),
    ] {
        assert_eq!(b.fetch_status(path, Some(&form)), 403, "{path}");
    }
    let mut ins = Inspector::connect(&cfg).unwrap();
    let st = ins.stats().unwrap();
    assert_eq!((st.failed(), st.paused()), (2, 0));
    // A live task takes the failed one's id: the task page shows the live one, the Failed
    // view's link the failed one.
    Producer::connect(&cfg)
        .unwrap()
        .schedule("job-1", RunAt::After(Duration::from_secs(3600)), b"")
        .unwrap();
    b.goto(&format!("{}/task?id=job-1", dash.url));
    let state = "document.getElementById('state').textContent";
    assert_eq!(b.eval(state), json!("pending"));
    b.goto(&format!("{}/failed", dash.url));
    let href = b.eval("document.querySelector('td.id a[href*=\"job-1\"]').getAttribute('href')");
    assert_eq!(href, json!("/task?id=job-1&failed=1"));
    b.goto(&format!("{}/task?id=job-1&failed=1", dash.url));
    assert_eq!(b.eval(state), json!("failed (non_retryable)"));
}
