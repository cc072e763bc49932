//! TLS clients (feature `tls`): `rediss://` for one server (or a sentinel, or the primary it
//! names), and the seeds and settings of a Cluster reached over TLS. Without the feature every
//! TLS URL is refused, saying why.

use redis::cluster::ClusterClientBuilder;
use redis::{Client, RedisError};

use crate::error::Error;
use crate::{ClientCert, Config};

/// Why a TLS URL is refused without feature `tls`.
#[cfg(not(feature = "tls"))]
const NOT_BUILT: &str =
    "TLS is not built in: build tickwheel-redis with feature `tls` for rediss:// URLs";

/// A [`Config`]'s TLS settings, kept by a client that makes TLS clients later (the
/// sentinels' primary, found at each connection).
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) struct TlsFiles {
    ca: Option<Vec<u8>>,
    client_cert: Option<ClientCert>,
}

impl TlsFiles {
    pub(crate) fn of(cfg: &Config) -> TlsFiles {
        TlsFiles {
            ca: cfg.tls_ca.clone(),
            client_cert: cfg.tls_client_cert.clone(),
        }
    }
}

/// A client for the `rediss://` URL `url`, trusting `tls.ca` (PEM) if given, the system's
/// certificate authorities if not, and presenting `tls.client_cert` if given. A URL the
/// client refuses is `invalid(reason)`; a certificate, key or authority that does not parse,
/// [`Error::InvalidConfig`].
#[cfg(feature = "tls")]
pub(super) fn client(
    url: &str,
    tls: &TlsFiles,
    invalid: impl Fn(String) -> Error,
) -> Result<Client, Error> {
    use_ring();
    match certificates(tls)? {
        None => Client::open(url),
        Some(certs) => Client::build_with_tls(url, certs),
    }
    .map_err(|e| invalid(e.to_string()))
}

#[cfg(not(feature = "tls"))]
pub(super) fn client(
    _url: &str,
    _tls: &TlsFiles,
    invalid: impl Fn(String) -> Error,
) -> Result<Client, Error> {
    Err(invalid(NOT_BUILT.into()))
}

/// A client for `url`: over TLS with `tls` ([`client`]) if given, a plain one if not;
/// `invalid(reason)` when `url` is refused.
pub(super) fn open(
    url: &str,
    tls: Option<&TlsFiles>,
    invalid: impl Fn(String) -> Error,
) -> Result<Client, Error> {
    match tls {
        None => Client::open(url).map_err(|e| invalid(e.to_string())),
        Some(tls) => client(url, tls, invalid),
    }
}

/// `builder` made to reach every node of a Cluster over TLS, with the authorities and the
/// client certificate of `tls` as [`client`] takes them.
#[cfg(feature = "tls")]
pub(super) fn cluster(
    builder: ClusterClientBuilder,
    tls: &TlsFiles,
    _invalid: impl Fn(String) -> Error,
) -> Result<ClusterClientBuilder, Error> {
    use_ring();
    let builder = builder.tls(redis::TlsMode::Secure);
    Ok(match certificates(tls)? {
        Some(certs) => builder.certs(certs),
        None => builder,
    })
}

#[cfg(not(feature = "tls"))]
pub(super) fn cluster(
    _builder: ClusterClientBuilder,
    _tls: &TlsFiles,
    invalid: impl Fn(String) -> Error,
) -> Result<ClusterClientBuilder, Error> {
    Err(invalid(NOT_BUILT.into()))
}

/// What `redis` needs of the TLS settings `tls`, each checked first; `None` when neither an
/// authority nor a client certificate is given (the system's authorities, no certificate).
#[cfg(feature = "tls")]
fn certificates(tls: &TlsFiles) -> Result<Option<redis::TlsCertificates>, Error> {
    if let Some(ca) = &tls.ca {
        check_ca(ca)?;
    }
    if let Some(cert) = &tls.client_cert {
        check_client_cert(cert)?;
    }
    if tls.ca.is_none() && tls.client_cert.is_none() {
        return Ok(None);
    }
    Ok(Some(redis::TlsCertificates {
        client_tls: tls.client_cert.as_ref().map(|cert| redis::ClientTlsConfig {
            client_cert: cert.chain.clone(),
            client_key: cert.key.clone(),
        }),
        root_cert: tls.ca.clone(),
    }))
}

/// The certificates of the PEM text `pem`; `what` names it in the error.
#[cfg(feature = "tls")]
fn parse_certs(
    pem: &[u8],
    what: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidConfig(format!("{what}: {e}")))
}

/// Checks that `ca` holds at least one certificate that parses, so that a wrong file is a
/// configuration error at once, not a failed handshake later.
#[cfg(feature = "tls")]
fn check_ca(ca: &[u8]) -> Result<(), Error> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(parse_certs(ca, "tls_ca")?);
    if added == 0 {
        return Err(Error::InvalidConfig(
            "tls_ca: no certificate authority in it (expected PEM certificates)".into(),
        ));
    }
    Ok(())
}

/// Checks that `cert` holds a certificate and a private key that parse and belong together,
/// so that a wrong file is a configuration error at once, not a handshake the server ends.
#[cfg(feature = "tls")]
fn check_client_cert(cert: &ClientCert) -> Result<(), Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let bad = |m: String| Error::InvalidConfig(format!("tls_client_cert: {m}"));
    let chain = parse_certs(&cert.chain, "tls_client_cert")?;
    if chain.is_empty() {
        return Err(bad("no certificate in its chain (expected PEM)".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&cert.key)
        .map_err(|e| bad(format!("its key: {e} (expected a PEM private key)")))?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| bad(format!("its key: {e}")))?;
    match rustls::sign::CertifiedKey::new(chain, key).keys_match() {
        // `Unknown`: the key cannot tell its public half, so the handshake will show it.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(e) => Err(bad(format!("the key is not the certificate's ({e})"))),
    }
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
