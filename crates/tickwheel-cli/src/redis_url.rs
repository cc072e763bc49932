//! A Redis URL as the CLI shows it: in error messages, the dashboard's log and the bench's
//! recorded command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tickwheel_redis::{url_without_password, ClientCert, Config};

use crate::tasks::escape::escape;

/// The TLS options of the commands that reach Redis (`tickwheel tasks`, the dashboard).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// For a rediss:// URL: trust the certificate authorities in FILE (PEM) instead of the
    /// system's.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// For a rediss:// URL: present the client certificate in FILE (PEM, then any
    /// intermediates) to a server that requires one (mutual TLS); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The configuration of the CLI's connections to `url`: trying for `connect_timeout` in all,
/// so no single attempt or reply waits longer either (the library's 5 s `io_timeout` would
/// otherwise hold a silent server for 5 s an attempt); with the files of `tls` for
/// `rediss://`. `Err` says which file cannot be read, and why.
pub fn config(
    url: &str,
    namespace: &str,
    connect_timeout: Duration,
    tls: &TlsArgs,
) -> Result<Config, String> {
    let mut cfg = Config::new(url, namespace);
    cfg.connect_timeout = connect_timeout;
    if !connect_timeout.is_zero() {
        cfg.io_timeout = cfg.io_timeout.min(connect_timeout);
    }
    let read = |flag: &str, path: &Path| {
        std::fs::read(path)
            .map_err(|e| format!("{flag} {}: {e}", escape(&path.display().to_string())))
    };
    if let Some(path) = &tls.tls_ca {
        cfg.tls_ca = Some(read("--tls-ca", path)?);
    }
    if let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) {
        cfg.tls_client_cert = Some(ClientCert {
            chain: read("--tls-cert", cert)?,
            key: read("--tls-key", key)?,
        });
    }
    Ok(cfg)
}

/// `url` without its password ([`url_without_password`]) and with control characters
/// escaped, so that neither a secret nor a terminal escape sequence reaches the screen or a
/// results file.
pub fn shown(url: &str) -> String {
    escape(&url_without_password(url))
}

/// A command line as recorded by `tickwheel bench`: the value of `--redis` (`--redis URL` or
/// `--redis=URL`) is [`shown`] without its password.
pub fn command_line(args: &[String]) -> String {
    let mut out = Vec::with_capacity(args.len());
    let mut url_next = false;
    for arg in args {
        let shown_arg = if url_next {
            shown(arg)
        } else if let Some(url) = arg.strip_prefix("--redis=") {
            format!("--redis={}", shown(url))
        } else {
            escape(arg)
        };
        url_next = arg == "--redis";
        out.push(shown_arg);
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show_and_controls_are_escaped() {
        assert_eq!(shown("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(shown("redis://u:hun@ter2@h:1/"), "redis://u:***@h:1/");
        assert_eq!(shown("redis://:pw@h/"), "redis://:***@h/");
        assert_eq!(shown("redis://h:1/"), "redis://h:1/");
        assert_eq!(
            shown("redis://h:1/a@b"),
            "redis://h:1/a@b",
            "an @ after the host"
        );
        assert_eq!(
            shown("redis://u\u{1b}[31mX@h/"),
            "redis://u\\u{1b}[31mX:***@h/"
        );
        assert_eq!(shown("no scheme\n"), "no scheme\\n");
        let args = [
            "tickwheel",
            "bench",
            "--redis",
            "redis://:pw@h/",
            "--redis=redis://:p@h/",
        ];
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            command_line(&args),
            "tickwheel bench --redis redis://:***@h/ --redis=redis://:***@h/"
        );
    }
}
