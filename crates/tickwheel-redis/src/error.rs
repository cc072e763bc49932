//! What can go wrong, as one error type for the whole crate.

use std::fmt;
use std::time::Duration;

use crate::limits::MAX_ID_LEN;
#[allow(unused_imports)] // doc links
use crate::{Config, SCHEMA_VERSION};

/// What can go wrong. Every variant names its cause; none is a panic.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached or answered with an error.
    Redis(redis::RedisError),
    /// The URL given is not a Redis URL.
    InvalidUrl {
        /// The URL as given, its password (if any) replaced by `***`: an error is logged
        /// and shown, and a password must not be.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The namespace name is empty, longer than 64 bytes, or contains `{`, `}` or whitespace.
    InvalidNamespace(String),
    /// A task id is empty or longer than [`MAX_ID_LEN`] bytes.
    InvalidId {
        /// The id's length in bytes.
        len: usize,
    },
    /// A payload is larger than [`Config::max_payload`].
    PayloadTooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A run-at instant before the Unix epoch or at [`RunAt::MAX_MS`](crate::RunAt::MAX_MS)
    /// ms after it or later, or a delay of that many ms or more.
    InvalidRunAt,
    /// A configuration value is out of range (the message says which).
    InvalidConfig(String),
    /// A recurrence that cannot be stored or evaluated: a zero period, a cron pattern or time zone
    /// that does not parse, or one longer than [`MAX_RECURRENCE_LEN`](crate::MAX_RECURRENCE_LEN).
    InvalidRecurrence(String),
    /// The namespace was created by another, incompatible version of this crate (or its meta
    /// key holds something else).
    IncompatibleNamespace {
        /// The namespace.
        namespace: String,
        /// What the namespace's meta key holds.
        found: String,
        /// [`SCHEMA_VERSION`].
        expected: u32,
    },
    /// The namespace does not exist in this Redis (nothing was ever scheduled in it): the
    /// [`Inspector`](crate::Inspector) refuses it rather than create it.
    NoSuchNamespace(String),
    /// Redis answered in a shape this crate does not expect.
    Protocol(String),
    /// A worker's notification subscription did not come up within [`Config::io_timeout`].
    NoSubscription {
        /// How long the worker waited.
        waited: Duration,
    },
    /// A thread of a [`Worker`](crate::Worker), an [`AsyncProducer`](crate::AsyncProducer) or
    /// an [`AsyncInspector`](crate::AsyncInspector) could not be started.
    Thread {
        /// Which thread (`worker's clock`, `producer`, ...).
        thread: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// `redis-server` could not be started (the `server` module of feature `testing`).
    Server(String),
    /// A write was applied on the primary, but fewer replicas than
    /// [`Config::confirm_replicas`] confirmed it within [`Config::confirm_timeout`]
    /// (`WAIT`): it may be lost in a failover. The caller may retry (on the same client:
    /// its connection's next confirmation covers the earlier write too). A bulk call that
    /// returns it applied every item.
    NotConfirmed {
        /// How many replicas confirmed (on a Cluster: the fewest of the primaries written to).
        confirmed: u32,
        /// [`Config::confirm_replicas`].
        wanted: u32,
    },
    /// A bulk call ([`Producer::schedule_many`](crate::Producer::schedule_many),
    /// `cancel_many`, `reschedule_many`, `retry_failed`, `discard_failed`) failed after
    /// some of its items were, or may have been, applied: what each item got, in the order
    /// given, and the first error. A bulk call's other errors mean that no item was
    /// applied. Retry exactly the items that are [`Applied::No`]; an [`Applied::Unknown`]
    /// one should be looked up first ([`Producer::state`](crate::Producer::state)).
    Partial {
        /// For each item of the call, in the order given.
        applied: Vec<Applied>,
        /// The first error.
        source: Box<Error>,
    },
}

/// Whether an item of a failed bulk call was applied: see [`Error::Partial`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Applied {
    /// Applied (its script call ran to its end: a task stored, cancelled or moved); its
    /// reply is not returned.
    Yes,
    /// Not applied: its script call was never sent, or Redis refused it before running it
    /// (a Cluster's redirection that could not be followed, `NOSCRIPT`, `OOM`, `READONLY`,
    /// ...). Safe to send again.
    No,
    /// Sent, but no reply came (the connection failed), or its script failed while
    /// running: applied or not.
    Unknown,
}

impl Error {
    /// The items of a failed bulk call not applied, to call again with: their positions in
    /// the call. `None` when the error is not [`Error::Partial`] (then no item was applied).
    pub fn not_applied(&self) -> Option<Vec<usize>> {
        match self {
            Error::Partial { applied, .. } => Some(
                applied
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == Applied::No)
                    .map(|(i, _)| i)
                    .collect(),
            ),
            _ => None,
        }
    }
}

impl Error {
    /// [`Error::InvalidUrl`] for `url`, refused for `reason`, without the URL's password.
    pub(crate) fn invalid_url(url: &str, reason: String) -> Error {
        Error::InvalidUrl {
            url: url_without_password(url),
            reason,
        }
    }
}

/// `url` with its password replaced by `***`, as [`Error::InvalidUrl`] and [`Config`]'s
/// `Debug` show it: what lies between the user's `:` and the last `@` before the host part
/// (a password may contain `@`; in a Cluster URL the host part is a list). A URL without
/// `://`, or without credentials, comes back as it is.
pub fn url_without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::InvalidUrl { url, reason } => write!(f, "invalid Redis URL {url:?}: {reason}"),
            Error::InvalidNamespace(ns) => write!(
                f,
                "invalid namespace {ns:?}: 1 to 64 bytes, without '{{', '}}' or whitespace"
            ),
            Error::InvalidId { len } => {
                write!(
                    f,
                    "invalid task id of {len} bytes: ids are 1 to {MAX_ID_LEN} bytes"
                )
            }
            Error::PayloadTooLarge { len, max } => {
                write!(
                    f,
                    "payload of {len} bytes is larger than the limit of {max} bytes"
                )
            }
            Error::InvalidRunAt => {
                write!(
                    f,
                    "run-at out of range: instants from the Unix epoch to below 2^52 ms after \
                     it (the year 144 683), delays below 2^52 ms"
                )
            }
            Error::InvalidConfig(m) => write!(f, "invalid configuration: {m}"),
            Error::InvalidRecurrence(m) => write!(f, "invalid recurrence: {m}"),
            Error::IncompatibleNamespace {
                namespace,
                found,
                expected,
            } => write!(
                f,
                "namespace {namespace:?} holds schema {found}, this client uses schema \
                 {expected}: use another namespace, or drain and delete this one"
            ),
            Error::NoSuchNamespace(ns) => write!(
                f,
                "namespace {ns:?} does not exist on this Redis (nothing was ever scheduled in \
                 it; check the namespace and the database number)"
            ),
            Error::Protocol(m) => write!(f, "unexpected reply from Redis: {m}"),
            Error::NoSubscription { waited } => write!(
                f,
                "no notification subscription within {waited:?}: is pub/sub allowed for this user?"
            ),
            Error::Thread { thread, source } => {
                write!(f, "cannot start the {thread} thread: {source}")
            }
            Error::Server(m) => write!(f, "{m}"),
            Error::NotConfirmed { confirmed, wanted } => write!(
                f,
                "write applied on the primary but confirmed by {confirmed} of the {wanted} \
                 replicas wanted (WAIT timed out): it may be lost in a failover; retry"
            ),
            Error::Partial { applied, source } => {
                let n = |w: Applied| applied.iter().filter(|&&a| a == w).count();
                write!(
                    f,
                    "bulk call failed part way ({} of {} items applied, {} not, {} unknown): \
                     {source}",
                    n(Applied::Yes),
                    applied.len(),
                    n(Applied::No),
                    n(Applied::Unknown)
                )
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Thread { source, .. } => Some(source),
            Error::Partial { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Redis(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_url_and_a_config_show_no_password() {
        let cases = [
            ("redis://u:secret@h:99999/0", "redis://u:***@h:99999/0"),
            ("redis://:pw@h/", "redis://:***@h/"),
            ("redis://u:p@ss@h:1/", "redis://u:***@h:1/"),
            (
                "redis+cluster://:s3cret@a:1,b:2",
                "redis+cluster://:***@a:1,b:2",
            ),
            (
                "redis+sentinel://u:pw@s:26379/mymaster",
                "redis+sentinel://u:***@s:26379/mymaster",
            ),
            ("redis://h:1/a@b", "redis://h:1/a@b"),
            ("not a url", "not a url"),
        ];
        for (url, kept) in cases {
            let e = Error::invalid_url(url, "bad".into());
            assert!(
                matches!(&e, Error::InvalidUrl { url, .. } if url == kept),
                "{e:?}"
            );
            let cfg = crate::Config::new(url, "ns");
            for shown in [e.to_string(), format!("{e:?}"), format!("{cfg:?}")] {
                for secret in ["secret", ":pw@", "p@ss", "s3cret"] {
                    assert!(!shown.contains(secret), "{shown}");
                }
            }
        }
    }
}
