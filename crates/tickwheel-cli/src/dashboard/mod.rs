//! `tickwheel dashboard`: a web page on a `tickwheel-redis` namespace, for operators.
//!
//! Server-rendered HTML without JavaScript, served by a small HTTP/1.1 server on a std
//! [`TcpListener`] ([`http`]): one thread a connection (at most [`MAX_CONNECTIONS`]), one request a
//! connection, which must arrive whole within [`REQUEST_DEADLINE`] (so idle or trickling
//! connections are closed quickly and cannot hold every slot: a slowloris). Every read goes through
//! one [`Inspector`] (read-only scripts, each call bounded to [`tickwheel_redis::MAX_STEP`]
//! entries, so a page never holds Redis long enough to make a running worker late); the pages are
//! in [`overview`], [`task`] and [`failed`], their shared parts in [`page`].
//!
//! Read-only unless started with `--allow-writes` and a token (`--token-file` or
//! `TICKWHEEL_DASHBOARD_TOKEN`): then a task's page offers cancel and reschedule (retry and discard
//! for a failed task), the Failed view "Retry all shown" and "Discard all shown", and the overview
//! pause and resume: POST forms the operator fills in with the token. A write is refused (403)
//! without the flag, with a missing or wrong token (compared in constant time), or from another
//! site (the `Origin`, else the `Referer`, must be this server's own, and `Sec-Fetch-Site`, when
//! sent, `same-origin`). On a loopback address, requests must name a loopback host (no DNS
//! rebinding). Exit status: 1 when Redis cannot be read at start (unreachable, no such namespace,
//! another schema) or the address cannot be bound, 2 bad arguments.

mod chart;
mod failed;
mod http;
mod overview;
mod page;
mod task;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use clap::Args;
use tickwheel_redis::{Config, Error, Inspector, Producer};

use crate::tasks::escape::escape;

use http::{Request, Response};

/// The most connections open at once; more are answered 503 at once. Idle ones are closed
/// after [`REQUEST_DEADLINE`], so this many idle sockets hold the server for that long at
/// most, and fewer hold nobody up.
const MAX_CONNECTIONS: usize = 256;

/// The time a client has to send its whole request (headers and form), from its connection.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// The shortest token accepted.
const MIN_TOKEN_LEN: usize = 16;

/// The variable a token may come from instead of `--token-file`.
const TOKEN_ENV: &str = "TICKWHEEL_DASHBOARD_TOKEN";

/// `tickwheel dashboard`'s arguments.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The Redis URL (`redis://[user:password@]host[:port][/db]`,
    /// `redis+sentinel://host[:port][,host[:port]...]/<primary name>[/db]`, or
    /// `redis+cluster://host:port[,host:port...]`; over TLS `rediss://`,
    /// `rediss+sentinel://` and `rediss+cluster://`).
    #[arg(long, value_name = "URL")]
    redis: String,
    /// The namespace (as given to the producers and workers).
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// The address to serve on (loopback by default; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Offer the writes (cancel, reschedule, retry and discard failed tasks, pause and
    /// resume); needs a token (--token-file or
    /// TICKWHEEL_DASHBOARD_TOKEN), which each write must carry.
    #[arg(long)]
    allow_writes: bool,
    /// A file holding the write token (at least 16 characters; surrounding whitespace is
    /// ignored).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// How long to keep trying at start while Redis cannot be reached (e.g. 2s, 500ms; at
    /// most 1h), as `tickwheel tasks` takes it.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::tasks::parse_connect_timeout)]
    connect_timeout: Duration,
    #[command(flatten)]
    tls: crate::redis_url::TlsArgs,
}

/// What every request shares.
pub(crate) struct App {
    inspector: Mutex<Inspector>,
    /// To check the namespace still exists ([`App::namespace_gone`]): the Inspector's reads
    /// of a deleted namespace find empty shards, not an error.
    cfg: Config,
    /// `Some` with `--allow-writes`.
    writes: Option<Writes>,
    namespace: String,
    /// The Redis URL without its password.
    redis: String,
    listen: SocketAddr,
}

struct Writes {
    producer: Mutex<Producer>,
    token: Vec<u8>,
}

/// Runs `tickwheel dashboard` until killed.
pub fn run(args: DashboardArgs) -> ExitCode {
    let token = match read_token(&args) {
        Ok(t) => t,
        Err(message) => {
            eprintln!("tickwheel dashboard: {message}");
            return ExitCode::from(2);
        }
    };
    let redis = crate::redis_url::shown(&args.redis);
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!(
            "tickwheel dashboard: {what} namespace {:?} on {redis}: {e}",
            args.namespace
        );
        ExitCode::FAILURE
    };
    let cfg = crate::redis_url::config(
        &args.redis,
        &args.namespace,
        args.connect_timeout,
        &args.tls,
    );
    let cfg = match cfg {
        Ok(cfg) => cfg,
        Err(message) => {
            eprintln!("tickwheel dashboard: {message}");
            return ExitCode::from(2);
        }
    };
    let inspector = match Inspector::connect(&cfg) {
        Ok(i) => i,
        Err(e) => return fail("cannot read", &explain(&e)),
    };
    let writes = match token {
        Some(token) => match Producer::connect(&cfg) {
            Ok(p) => Some(Writes {
                producer: Mutex::new(p),
                token,
            }),
            Err(e) => return fail("cannot write to", &explain(&e)),
        },
        None => None,
    };
    let listener = match TcpListener::bind(args.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tickwheel dashboard: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let listen = listener.local_addr().unwrap_or(args.listen);
    if let Some(warning) = exposure_warning(listen, writes.is_some()) {
        eprintln!("tickwheel dashboard: warning: {warning}");
    }
    let mut check_cfg = cfg.clone();
    // Redis answered the page's reads just before: no need to wait long for it again.
    check_cfg.connect_timeout = Duration::from_secs(1);
    let app = Arc::new(App {
        inspector: Mutex::new(inspector),
        cfg: check_cfg,
        writes,
        namespace: args.namespace,
        redis,
        listen,
    });
    say!(
        "tickwheel dashboard: http://{listen}/ (namespace {:?}, {})",
        app.namespace,
        if app.writes.is_some() {
            "writes enabled with the token"
        } else {
            "read-only"
        }
    );
    serve(listener, app);
    ExitCode::SUCCESS
}

/// The token when writes are allowed; an error when the flag and the token disagree.
fn read_token(args: &DashboardArgs) -> Result<Option<Vec<u8>>, String> {
    let token = match (&args.token_file, std::env::var_os(TOKEN_ENV)) {
        (Some(path), _) => Some(
            std::fs::read(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?,
        ),
        (None, Some(v)) => Some(v.into_encoded_bytes()),
        (None, None) => None,
    };
    if !args.allow_writes {
        if args.token_file.is_some() {
            return Err("--token-file is only for --allow-writes".into());
        }
        return Ok(None);
    }
    let token = token
        .ok_or_else(|| format!("--allow-writes needs a token: --token-file FILE or {TOKEN_ENV}"))?;
    let token = token.trim_ascii().to_vec();
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "the token is {} bytes long: use at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 16`)",
            token.len()
        ));
    }
    Ok(Some(token))
}

/// What to tell the operator when `listen` is not a loopback address: anyone who can reach
/// it can read the namespace (plain HTTP, no login), and with writes the token travels in
/// clear text.
fn exposure_warning(listen: SocketAddr, writes: bool) -> Option<String> {
    if listen.ip().is_loopback() {
        return None;
    }
    let mut w = format!(
        "listening on {listen}, not a loopback address: anyone who can reach it can read \
         this namespace's tasks (plain HTTP, no login, no Host check)"
    );
    if writes {
        w.push_str(
            "; with --allow-writes, the write token crosses the network in clear text: \
             prefer 127.0.0.1 behind an SSH tunnel or a TLS proxy",
        );
    }
    Some(w)
}

/// An error with a hint for the usual causes at start.
fn explain(e: &Error) -> String {
    match e {
        Error::Redis(_) => format!(
            "{} (is Redis running there, and is the URL right?)",
            escape(&e.to_string())
        ),
        _ => escape(&e.to_string()),
    }
}

/// Accepts connections until the process ends.
fn serve(listener: TcpListener, app: Arc<App>) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // Out of file descriptors, say: wait a little rather than spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = page::error(503, "Too many connections: try again.").write_to(&mut stream);
            continue;
        }
        let (app2, active2) = (app.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("dashboard".into())
            .spawn(move || {
                handle(&app2, stream);
                active2.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Reads one request (within [`REQUEST_DEADLINE`]), answers it, closes the connection.
fn handle(app: &App, mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let read = http::read_request(&mut http::Deadline {
        stream: &stream,
        until: std::time::Instant::now() + REQUEST_DEADLINE,
    });
    let (method, response) = match read {
        Ok(request) => (request.method.clone(), respond(app, &request)),
        Err(http::BadRequest(why)) if why == http::TOO_SLOW => {
            (String::new(), page::error(408, &why))
        }
        Err(http::BadRequest(why)) => (String::new(), page::error(400, &why)),
    };
    let _ = response.write_for(&method, &mut stream);
}

/// Routes a request.
fn respond(app: &App, req: &Request) -> Response {
    if let Err(why) = check_host(app, req) {
        return page::error(403, &why);
    }
    // `HEAD` is answered as `GET` is, and written without the body.
    let method = match req.method.as_str() {
        "HEAD" => "GET",
        m => m,
    };
    match (method, req.path.as_str()) {
        ("GET", "/") => overview::overview(app, req),
        ("GET", "/task") => task::task(app, req),
        ("GET", "/failed") => failed::failed(app, req),
        ("POST", "/cancel" | "/reschedule" | "/retry" | "/discard") => task::write(app, req),
        ("POST", "/retry-failed" | "/discard-failed") => failed::bulk_write(app, req),
        ("POST", "/pause" | "/resume") => failed::pause_write(app, req),
        (
            "GET",
            "/cancel" | "/reschedule" | "/retry" | "/discard" | "/retry-failed" | "/discard-failed"
            | "/pause" | "/resume",
        ) => page::error(405, "Writes are POST forms."),
        ("GET", _) => page::error(404, "No such page."),
        _ => page::error(405, "Only GET, HEAD and POST are served."),
    }
}

/// On a loopback address, the `Host` must be a loopback name with our port: a page of
/// another site whose name resolves to 127.0.0.1 (DNS rebinding) cannot read this one.
fn check_host(app: &App, req: &Request) -> Result<(), String> {
    if !app.listen.ip().is_loopback() {
        return Ok(());
    }
    let host = req.header("host").unwrap_or("");
    let port = app.listen.port();
    let ok = ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|name| host == format!("{name}:{port}") || (port == 80 && host == *name));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "This dashboard answers only to a loopback host name (127.0.0.1:{port} or \
             localhost:{port}), not to Host {host:?}."
        ))
    }
}

/// Why a write is refused, or `Ok` for one that may go ahead (the token is checked by the
/// caller, with the form).
pub(crate) fn check_same_origin(req: &Request) -> Result<(), String> {
    let host = req.header("host").unwrap_or("");
    let ours = format!("http://{host}");
    if let Some(site) = req.header("sec-fetch-site") {
        if site != "same-origin" {
            return Err(format!("A cross-site request (Sec-Fetch-Site: {site})."));
        }
    }
    match (req.header("origin"), req.header("referer")) {
        (Some(origin), _) if origin == ours => Ok(()),
        (Some(origin), _) => Err(format!(
            "A request from another origin ({origin}, this is {ours})."
        )),
        (None, Some(referer)) if referer.starts_with(&format!("{ours}/")) => Ok(()),
        (None, _) => Err(
            "A write must come from this dashboard's own page (no Origin or \
                          Referer of this site)."
                .into(),
        ),
    }
}

/// Whether `given` is the token, in time independent of where they differ.
pub(crate) fn token_matches(app: &App, given: &[u8]) -> bool {
    let Some(w) = &app.writes else {
        return false;
    };
    let expected = &w.token;
    let mut diff = (expected.len() ^ given.len()) as u64;
    for i in 0..expected.len().max(given.len()) {
        let a = expected.get(i).copied().unwrap_or(0);
        let b = given.get(i).copied().unwrap_or(0xff);
        diff |= u64::from(std::hint::black_box(a ^ b));
    }
    std::hint::black_box(diff) == 0
}

impl App {
    /// The inspector (a panic elsewhere while holding it leaves it usable).
    fn inspector(&self) -> MutexGuard<'_, Inspector> {
        self.inspector.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A warning page when the namespace no longer exists (deleted, or Redis wiped or
    /// restarted empty since the dashboard started), else `None`. Reading a deleted
    /// namespace's shards finds them empty rather than failing, so a page would show an empty
    /// namespace as if all were well: this asks Redis, as `tickwheel tasks` does at start,
    /// whether the namespace is there (one connection and one read of its meta key). Another
    /// failure here is left to the page's own reads to report.
    pub(crate) fn namespace_gone(&self) -> Option<Response> {
        match Inspector::connect(&self.cfg) {
            Err(Error::NoSuchNamespace(_)) => Some(page::namespace_gone(self)),
            _ => None,
        }
    }

    fn producer(&self) -> Option<MutexGuard<'_, Producer>> {
        self.writes
            .as_ref()
            .map(|w| w.producer.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
