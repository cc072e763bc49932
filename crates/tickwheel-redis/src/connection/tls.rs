//! TLS clients (feature `tls`): `rediss://` for one server, and the seeds and settings of a
//! Cluster reached over TLS. Without the feature every TLS URL is refused, saying why.

use redis::cluster::ClusterClientBuilder;
use redis::{Client, RedisError};

use crate::error::Error;

/// Why a TLS URL is refused without feature `tls`.
#[cfg(not(feature = "tls"))]
const NOT_BUILT: &str =
    "TLS is not built in: build tickwheel-redis with feature `tls` for rediss:// URLs";

/// A client for the `rediss://` URL `url`, trusting `ca` (PEM) if given, the system's
/// certificate authorities if not. A URL the client refuses is `invalid(reason)`; a `ca`
/// that does not parse, [`Error::InvalidConfig`].
#[cfg(feature = "tls")]
pub(super) fn client(
    url: &str,
    ca: Option<&[u8]>,
    invalid: impl Fn(String) -> Error,
) -> Result<Client, Error> {
    use_ring();
    match ca {
        None => Client::open(url),
        Some(ca) => {
            check_ca(ca)?;
            Client::build_with_tls(url, certificates(ca))
        }
    }
    .map_err(|e| invalid(e.to_string()))
}

#[cfg(not(feature = "tls"))]
pub(super) fn client(
    _url: &str,
    _ca: Option<&[u8]>,
    invalid: impl Fn(String) -> Error,
) -> Result<Client, Error> {
    Err(invalid(NOT_BUILT.into()))
}

/// `builder` made to reach every node of a Cluster over TLS, trusting `ca` if given.
#[cfg(feature = "tls")]
pub(super) fn cluster(
    builder: ClusterClientBuilder,
    ca: Option<&[u8]>,
    _invalid: impl Fn(String) -> Error,
) -> Result<ClusterClientBuilder, Error> {
    use_ring();
    let builder = builder.tls(redis::TlsMode::Secure);
    Ok(match ca {
        Some(ca) => {
            check_ca(ca)?;
            builder.certs(certificates(ca))
        }
        None => builder,
    })
}

#[cfg(not(feature = "tls"))]
pub(super) fn cluster(
    _builder: ClusterClientBuilder,
    _ca: Option<&[u8]>,
    invalid: impl Fn(String) -> Error,
) -> Result<ClusterClientBuilder, Error> {
    Err(invalid(NOT_BUILT.into()))
}

#[cfg(feature = "tls")]
fn certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// Checks that `ca` holds at least one certificate that parses, so that a wrong file is a
/// configuration error at once, not a failed handshake later.
#[cfg(feature = "tls")]
fn check_ca(ca: &[u8]) -> Result<(), Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let certs = CertificateDer::pem_slice_iter(ca)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidConfig(format!("tls_ca: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::InvalidConfig(
            "tls_ca: no certificate authority in it (expected PEM certificates)".into(),
        ));
    }
    Ok(())
}

/// Makes ring rustls's cryptography for this process, unless the program chose one already
/// (its choice stands). rustls picks one by itself only when exactly one is compiled in, and
/// another crate of the program may compile in a second.
#[cfg(feature = "tls")]
fn use_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Whether `e` is a TLS handshake that failed (a certificate no trusted authority signed, a
/// name it does not cover, a protocol the server refuses): a matter of configuration, which
/// retrying does not mend, though `redis` reports it as an I/O error.
#[cfg(feature = "tls")]
pub(crate) fn handshake_failed(e: &RedisError) -> bool {
    use std::error::Error as StdError;
    use std::sync::Arc;
    // `redis` keeps an I/O error as an `Arc<dyn Error>`, which its `source` shows as is;
    // the `io::Error` in it holds the rustls error (an I/O error's own `source` skips it).
    let mut cause: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(c) = cause {
        let c = match c.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
            Some(shared) => &**shared as &(dyn StdError + 'static),
            None => c,
        };
        let held = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        if c.is::<rustls::Error>() || held.is_some_and(|h| h.is::<rustls::Error>()) {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(not(feature = "tls"))]
pub(crate) fn handshake_failed(_e: &RedisError) -> bool {
    false
}
