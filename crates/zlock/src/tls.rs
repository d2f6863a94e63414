//! TLS to a server's secure client port (ZooKeeper's `secureClientPort`, or a plain port
//! with `client.portUnification`): the CAs the client trusts, and an optional client
//! certificate that the server maps to an `x509:<subject>` identity.
//!
//! rustls on ring through tokio-rustls, as the server uses; no OpenSSL. The files (PEM
//! or PKCS12) are read as the server reads its own (`zlock_keystore`), once, when the
//! client is made ([`TlsOptions`] stays paths so that it can be cloned, printed and
//! built from flags), so an unreadable or invalid file fails
//! [`crate::ClientBuilder::connect`] before any connection, naming the file. The
//! server's name or IP address, from the host in the connect string, is checked
//! against its certificate on every connection, reconnects to other members included
//! (as the ZooKeeper Java client's `zookeeper.ssl.hostnameVerification`, on by
//! default).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::RootCertStore;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};

/// How to reach a server over TLS: the trusted CAs (PEM files of certificates, or
/// PKCS12 trust stores), and a client certificate with its key for x509 authentication
/// (PEM files, or a PKCS12 key store).
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use zlock::{Client, TlsOptions};
/// let tls = TlsOptions::new("ca.pem").client_cert("alice.crt", "alice.key");
/// let (zk, _events) = Client::builder("zk1.example:2281,zk2.example:2281")
///     .session_timeout_ms(10_000)
///     .tls(tls)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM files whose certificates are the trusted roots (at least one).
    pub ca: Vec<PathBuf>,
    /// The client's certificate chain (PEM, leaf first). Without it the client presents
    /// no certificate: a server with `ssl.clientAuth=need` (ZooKeeper's default) refuses
    /// the connection.
    pub cert: Option<PathBuf>,
    /// The client's private key (PEM: PKCS#8, PKCS#1 or SEC1, or an encrypted PKCS#8
    /// key with [`TlsOptions::key_password`]). None with a `cert`: the key is read from
    /// the certificate's file, as ZooKeeper's PEM key store holds the chain and the key
    /// in one file.
    pub key: Option<PathBuf>,
    /// The password of an encrypted PEM key (`ENCRYPTED PRIVATE KEY`, PBES2, as
    /// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it); zkCli's
    /// `zookeeper.ssl.keyStore.password` for a PEM key store.
    pub key_password: Option<String>,
    /// PKCS12 trust stores: their certificates marked trusted (as keytool makes them)
    /// are trusted roots too.
    pub ca_pkcs12: Vec<Pkcs12Store>,
    /// A PKCS12 key store whose first private key entry is the client's certificate
    /// chain and key (instead of `cert` and `key`, not with them).
    pub client_pkcs12: Option<Pkcs12Store>,
}

/// A PKCS12 store and its password (which `Debug` does not print).
#[derive(Clone, PartialEq, Eq)]
pub struct Pkcs12Store {
    pub path: PathBuf,
    pub password: String,
}

impl std::fmt::Debug for Pkcs12Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkcs12Store")
            .field("path", &self.path)
            .field("password", &"(hidden)")
            .finish()
    }
}

impl TlsOptions {
    /// Trusts the certificates of the PEM file `ca`.
    pub fn new(ca: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions {
            ca: vec![ca.into()],
            ..TlsOptions::default()
        }
    }

    /// Trusts the certificates marked trusted in a PKCS12 store.
    pub fn add_ca_pkcs12(mut self, path: impl Into<PathBuf>, password: &str) -> TlsOptions {
        self.ca_pkcs12.push(Pkcs12Store {
            path: path.into(),
            password: password.to_owned(),
        });
        self
    }

    /// Presents the first private key entry of a PKCS12 store: its chain and key.
    pub fn client_pkcs12(mut self, path: impl Into<PathBuf>, password: &str) -> TlsOptions {
        self.client_pkcs12 = Some(Pkcs12Store {
            path: path.into(),
            password: password.to_owned(),
        });
        self
    }

    /// Trusts the certificates of one more PEM file.
    pub fn add_ca(mut self, ca: impl Into<PathBuf>) -> TlsOptions {
        self.ca.push(ca.into());
        self
    }

    /// Presents the certificate `cert` with the private key `key` (both PEM; the same
    /// file for both is fine).
    /// The password of the client's encrypted PEM key.
    pub fn key_password(mut self, password: &str) -> TlsOptions {
        self.key_password = Some(password.to_owned());
        self
    }

    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsOptions {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// Reads the files into a connector (once per client).
    pub(crate) fn connector(&self) -> Result<Tls, TlsError> {
        if self.ca.is_empty() && self.ca_pkcs12.is_empty() {
            return Err(TlsError::NoCa);
        }
        let mut roots = RootCertStore::empty();
        let mut trusted = Vec::new();
        for path in &self.ca {
            let certs = zlock_keystore::pem_certificates(&read(path)?);
            trusted.push((path, certs));
        }
        for store in &self.ca_pkcs12 {
            let certs = zlock_keystore::pkcs12_trusted(&read(&store.path)?, &store.password);
            trusted.push((&store.path, certs));
        }
        for (path, certs) in trusted {
            for c in certs.map_err(|e| TlsError::invalid(path, e))? {
                roots.add(c).map_err(|e| TlsError::invalid(path, e))?;
            }
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_root_certificates(roots);
        let config = match (&self.cert, &self.key, &self.client_pkcs12) {
            (None, None, None) => builder.with_no_client_auth(),
            (None, Some(key), _) => return Err(TlsError::KeyWithoutCert(key.clone())),
            (Some(cert), _, Some(_)) => return Err(TlsError::TwoClientCertificates(cert.clone())),
            (None, None, Some(store)) => {
                let bytes = read(&store.path)?;
                let id = zlock_keystore::pkcs12_identity(&bytes, &store.password)
                    .map_err(|e| TlsError::invalid(&store.path, e))?;
                builder
                    .with_client_auth_cert(id.chain, id.key)
                    .map_err(|e| TlsError::invalid(&store.path, e))?
            }
            (Some(cert), key, None) => {
                let chain = zlock_keystore::pem_certificates(&read(cert)?)
                    .map_err(|e| TlsError::invalid(cert, e))?;
                let key_path = key.as_ref().unwrap_or(cert);
                let key =
                    zlock_keystore::pem_key_with(&read(key_path)?, self.key_password.as_deref())
                        .map_err(|e| TlsError::invalid(key_path, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsError::invalid(key_path, e))?
            }
        };
        Ok(Tls(TlsConnector::from(Arc::new(config))))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Why [`TlsOptions`] cannot be used; each names its file. (Strings, not the I/O and
/// rustls errors, so that [`Error`] stays `Clone` and comparable.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("TLS: no CA given (the certificates the server's must chain to)")]
    NoCa,
    #[error("TLS: cannot read {}: {reason}", .path.display())]
    Read { path: PathBuf, reason: String },
    #[error("TLS: {}: {reason}", .path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("TLS: a client key ({}) without its certificate", .0.display())]
    KeyWithoutCert(PathBuf),
    #[error(
        "TLS: two client certificates, a PEM one ({}) and a PKCS12 store: give one",
        .0.display()
    )]
    TwoClientCertificates(PathBuf),
    /// rustls refused its own configuration (the ring provider's protocol versions).
    #[error("TLS: {0}")]
    Setup(String),
}

impl TlsError {
    fn invalid(path: &Path, reason: impl std::fmt::Display) -> TlsError {
        TlsError::Invalid {
            path: path.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// The files read into a rustls client configuration, shared by every connection of a
/// session.
#[derive(Clone)]
pub(crate) struct Tls(TlsConnector);

impl Tls {
    /// The TLS handshake on `tcp` to `addr` (`host:port`, the host checked against the
    /// server's certificate: a name against its DNS names, an IP address against its IP
    /// addresses).
    pub(crate) async fn connect(&self, addr: &str, tcp: TcpStream) -> Result<TlsStream<TcpStream>> {
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| Error::TlsHandshake(addr.to_owned(), format!("{host:?}: {e}")))?;
        self.0
            .connect(name, tcp)
            .await
            .map_err(|e| handshake_error(addr, e))
    }
}

/// `host` of `host:port` and of `[v6]:port`.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// An I/O error from a TLS stream: a TLS failure (an untrusted or misnamed certificate,
/// an alert from the server: say, it wanted a client certificate) as
/// [`Error::TlsHandshake`], anything else a connection loss.
pub(crate) fn handshake_error(addr: &str, e: std::io::Error) -> Error {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(tls) => Error::TlsHandshake(addr.to_owned(), tls.to_string()),
        None => Error::Connect(addr.to_owned(), e.to_string()),
    }
}

/// Whether `e` came from TLS (see [`handshake_error`]).
pub(crate) fn is_tls(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("localhost:2281"), "localhost");
        assert_eq!(host_of("127.0.0.1:2281"), "127.0.0.1");
        assert_eq!(host_of("[::1]:2281"), "::1");
    }

    #[test]
    fn unusable_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let absent = dir.join("absent.pem");
        let e = TlsOptions::new(&absent).connector().err().unwrap();
        assert!(
            matches!(&e, TlsError::Read { path, .. } if *path == absent),
            "{e}"
        );
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = TlsOptions::new(&empty).connector().err().unwrap();
        assert!(e.to_string().contains("empty.pem"), "{e}");
        assert!(matches!(e, TlsError::Invalid { .. }), "{e}");
        let e = TlsOptions::default().connector().err().unwrap();
        assert_eq!(e, TlsError::NoCa);
    }
}
