//! TLS on the client port (`secureClientPort`): the rustls server configuration built
//! from ZooKeeper's `ssl.*` keys ([`crate::config::TlsConfig`]), and the x509 identity
//! of a client that presented a certificate.
//!
//! Between members (`sslQuorum`): [`quorum`].
//!
//! rustls with the ring provider; no OpenSSL. What a connection does with it (the
//! handshake, then reads and writes through the connection's rustls state) is in
//! `crate::net::tls`. `throwaway` makes certificates for trying TLS locally and for
//! tests.

pub(crate) mod quorum;
pub(crate) mod reload;
mod stores;
mod subject;
pub mod throwaway;

pub use stores::StoreProblem;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::ring as provider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, SupportedCipherSuite};
use thiserror::Error;
use zlock_proto::records::Id;

use crate::config::{location_key, ClientAuth, Protocol, Store, StoreConfig, TlsConfig};

/// Why the client port's TLS cannot be set up; each names the key to look at.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("{key} is not set, and TLS needs it")]
    Missing { key: &'static str },
    #[error("{key}: cannot read {}: {source}", .path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{key}: {}: {problem}", .path.display())]
    Store {
        key: &'static str,
        path: PathBuf,
        problem: StoreProblem,
    },
    #[error("{key}: {source}")]
    Rustls {
        key: &'static str,
        source: rustls::Error,
    },
    #[error("ssl.trustStore.location: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// rustls's suite for an IANA name from [`crate::config::CIPHER_SUITES`].
fn suite(name: &str) -> Option<SupportedCipherSuite> {
    use provider::cipher_suite as s;
    Some(match name {
        "TLS_AES_128_GCM_SHA256" => s::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => s::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => s::TLS13_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => s::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => s::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => s::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            s::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// The rustls server configuration for `cfg`: reads the stores, so a missing file, a
/// wrong password or a key that does not match its certificate stops the start.
pub(crate) fn server_config(cfg: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    build(&Side {
        key: (Store::Key, &cfg.key_store),
        trust: (Store::Trust, &cfg.trust_store),
        client_auth: cfg.client_auth,
        protocols: &cfg.protocols,
        cipher_suites: &cfg.cipher_suites,
    })
}

/// The admin server's HTTPS, as ZooKeeper's `JettyAdminServer` sets it up: the
/// `ssl.quorum.*` stores, a client certificate asked for only with
/// `admin.needClientAuth` (then required), TLS 1.3 and 1.2 with rustls's suites.
pub(crate) fn admin_config(
    cfg: &TlsConfig,
    need_client_auth: bool,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    build(&Side {
        key: (Store::QuorumKey, &cfg.quorum_key_store),
        trust: (Store::QuorumTrust, &cfg.quorum_trust_store),
        client_auth: match need_client_auth {
            true => ClientAuth::Need,
            false => ClientAuth::None,
        },
        protocols: &[Protocol::Tls13, Protocol::Tls12],
        cipher_suites: &[],
    })
}

/// The metrics endpoint's HTTPS, as ZooKeeper 3.9's Prometheus provider sets up its
/// Jetty connector: the `metricsProvider.ssl.*` stores; a client certificate required
/// with `ssl.need.client.auth`, else asked for with `ssl.want.client.auth` (when there
/// is a trust store to check it against).
pub(crate) fn metrics_config(
    m: &crate::config::MetricsTls,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let client_auth = match (m.need_client_auth, m.want_client_auth) {
        (true, _) => ClientAuth::Need,
        (false, true) if m.trust_store.location.is_some() => ClientAuth::Want,
        _ => ClientAuth::None,
    };
    build(&Side {
        key: (Store::MetricsKey, &m.key_store),
        trust: (Store::MetricsTrust, &m.trust_store),
        client_auth,
        protocols: &m.protocols,
        cipher_suites: &m.cipher_suites,
    })
}

/// What one TLS listener is set up with.
struct Side<'a> {
    key: (Store, &'a StoreConfig),
    trust: (Store, &'a StoreConfig),
    client_auth: ClientAuth,
    protocols: &'a [Protocol],
    cipher_suites: &'a [String],
}

/// ring's provider with `cipher_suites` (names from [`crate::config::CIPHER_SUITES`]),
/// or all of its suites when none are given.
fn crypto(cipher_suites: &[String]) -> rustls::crypto::CryptoProvider {
    let mut crypto = provider::default_provider();
    if !cipher_suites.is_empty() {
        crypto.cipher_suites = cipher_suites.iter().filter_map(|n| suite(n)).collect();
    }
    crypto
}

/// rustls's versions for `protocols`.
fn versions(protocols: &[Protocol]) -> Vec<&'static rustls::SupportedProtocolVersion> {
    protocols
        .iter()
        .map(|p| match p {
            Protocol::Tls13 => &rustls::version::TLS13,
            Protocol::Tls12 => &rustls::version::TLS12,
        })
        .collect()
}

fn build(side: &Side<'_>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(crypto(side.cipher_suites)))
        .with_protocol_versions(&versions(side.protocols))
        .map_err(|source| TlsError::Rustls {
            key: "ssl.ciphersuites",
            source,
        })?;
    let builder = match side.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let mut roots = RootCertStore::empty();
            for c in stores::trusted(side.trust.0, side.trust.1)? {
                roots.add(c).map_err(|source| TlsError::Rustls {
                    key: location_key(side.trust.0),
                    source,
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(provider::default_provider()),
            );
            let verifier = match auth {
                ClientAuth::Want => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build()?)
        }
    };
    let id = stores::identity(side.key.0, side.key.1)?;
    let mut config = builder
        .with_single_cert(id.chain, id.key)
        .map_err(|source| TlsError::Rustls {
            key: location_key(side.key.0),
            source,
        })?;
    // A client speaks after the handshake; nothing here uses early data or ALPN.
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

/// The identities a client's certificate gives it, as ZooKeeper's
/// `X509AuthenticationProvider.handleAuthentication` adds them: `super:<subject>` when
/// the subject is `X509AuthenticationProvider.superUser`, then `x509:<subject>`. None
/// without a certificate (rustls verified any there is against the trust store).
pub(crate) fn x509_ids(conn: &rustls::ServerConnection, cfg: &TlsConfig) -> Vec<Id> {
    let Some(leaf) = conn.peer_certificates().and_then(|c| c.first()) else {
        return Vec::new();
    };
    let Some(name) = subject::subject_name(leaf) else {
        return Vec::new();
    };
    let mut ids = Vec::with_capacity(2);
    if cfg.x509_super_user.as_deref() == Some(name.as_str()) {
        ids.push(Id::new("super", &name));
    }
    ids.push(Id::new("x509", &name));
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configured_suite_name_maps_to_rustls() {
        for name in crate::config::CIPHER_SUITES {
            let s = suite(name).map(|s| s.suite());
            assert!(s.is_some(), "{name}");
        }
    }
}
