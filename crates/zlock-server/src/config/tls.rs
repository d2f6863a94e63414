//! TLS on the client port: ZooKeeper's `secureClientPort` and `ssl.*` keys (see
//! `zookeeperAdmin.md`, "Encryption, Authentication, Authorization Options"), read as
//! ZooKeeper reads them, and what zlock refuses. Between members (`sslQuorum`,
//! `portUnification`, `ssl.quorum.*`): [`super::quorum_tls`], dispatched from here.
//!
//! Read and honoured: `secureClientPort`, `secureClientPortAddress`,
//! `client.portUnification` (the plain client port also takes TLS clients, told apart
//! by their first byte), `client.certReload` (the stores read again when their files
//! change),
//! `ssl.keyStore.{location,password,passwordPath,type}`,
//! `ssl.trustStore.{location,password,passwordPath,type}` (types PEM and PKCS12, or
//! inferred from the file name as ZooKeeper does: `.pem`, `.p12`/`.pfx`, `.jks`),
//! the same under `ssl.quorum.` (the members' own stores, and the admin server's HTTPS),
//! `ssl.clientAuth` (none | want | need; ZooKeeper's default is need),
//! `ssl.protocol`, `ssl.enabledProtocols` (TLSv1.2, TLSv1.3), `ssl.ciphersuites` (the
//! IANA names Java uses, for the suites rustls has), `ssl.handshakeDetectionTimeoutMillis`
//! (how long a handshake may take), `X509AuthenticationProvider.superUser`,
//! `ssl.authProvider` (`x509`) and `authProvider.N` naming ZooKeeper's own providers.
//! `serverCnxnFactory` is accepted whatever it names: ZooKeeper needs Netty's for TLS,
//! zlock has one connection layer.
//!
//! Refused, stopping the start with the key named: every other TLS key
//! (the `ssl.quorum.*` keys
//! [`super::quorum_tls`] lists as refused, `ssl.crl=true`, `ssl.ocsp=true`,
//! `ssl.context.supplier.class`, ...),
//! a JKS or BCFKS store, a cipher suite rustls lacks, a protocol older than TLSv1.2,
//! and `sslQuorum=true` or `portUnification=true` without both quorum stores.
//! Before this, such keys were logged and ignored, so an operator who asked for TLS got
//! plain text silently. A key may be written with ZooKeeper's `zookeeper.` system
//! property prefix, as `DigestAuthenticationProvider.superDigest` may.

use std::net::IpAddr;
use std::path::PathBuf;

use thiserror::Error;

use super::quorum_tls::QuorumTls;
use super::tls_values::{
    boolean, check_suites, only_off, protocols, suites, Protocol, DEFAULT_HANDSHAKE_TIMEOUT_MS,
};

/// The classes ZooKeeper's `authProvider.N` may name that zlock has built in.
const KNOWN_PROVIDERS: [&str; 3] = [
    "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    "org.apache.zookeeper.server.auth.DigestAuthenticationProvider",
    "org.apache.zookeeper.server.auth.IPAuthenticationProvider",
];

/// The client port's TLS settings. Off unless `secureClientPort` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// `secureClientPort`: where TLS clients connect. With `clientPort` too, both are
    /// served (ZooKeeper's mixed mode).
    pub secure_client_port: Option<u16>,
    /// `client.portUnification`: the plain client port also serves TLS clients (a
    /// connection whose first byte starts a TLS record), with the same settings.
    pub port_unification: bool,
    /// `client.certReload`: the key and trust stores are read again when their files
    /// change (see `crate::tls::reload`).
    pub cert_reload: bool,
    /// `secureClientPort` without `clientPort` (in zoo.cfg or on a member's `server.N`
    /// line): the secure port is the only client port, as in ZooKeeper; no plain port
    /// opens (see `ServerConfig::client_listen_addr`).
    pub tls_only: bool,
    /// `secureClientPortAddress`; when absent, `clientPortAddress` (zlock's loopback
    /// default unless set; ZooKeeper binds every interface then).
    pub secure_client_port_address: Option<IpAddr>,
    /// `ssl.keyStore.*`: the server's certificate chain and private key.
    pub key_store: StoreConfig,
    /// `ssl.trustStore.*`: the CAs a client's certificate must chain to.
    pub trust_store: StoreConfig,
    /// `ssl.quorum.keyStore.*`: the members' own certificate and key, presented to each
    /// other with `sslQuorum` (both ways), and the admin server's HTTPS, as in
    /// ZooKeeper.
    pub quorum_key_store: StoreConfig,
    /// `ssl.quorum.trustStore.*`: the CAs another member's certificate must chain to,
    /// and an admin client's (`admin.needClientAuth`).
    pub quorum_trust_store: StoreConfig,
    /// `sslQuorum`, `portUnification` and the other `ssl.quorum.*` keys.
    pub quorum: QuorumTls,
    /// `ssl.clientAuth`.
    pub client_auth: ClientAuth,
    /// The protocol versions offered: `ssl.enabledProtocols`, else `ssl.protocol`'s
    /// (as ZooKeeper: with no `enabledProtocols`, only the context's protocol is
    /// enabled), else both TLSv1.3 and TLSv1.2 (ZooKeeper 3.8's Java client offers
    /// TLSv1.2 only, 3.9's TLSv1.3 too).
    pub protocols: Vec<Protocol>,
    /// `ssl.ciphersuites`, names from [`CIPHER_SUITES`]; empty = rustls's defaults.
    pub cipher_suites: Vec<String>,
    /// `ssl.handshakeDetectionTimeoutMillis`: a handshake not done by then is dropped.
    pub handshake_timeout_ms: u64,
    /// `X509AuthenticationProvider.superUser`: the subject (RFC 2253, as Java's
    /// `X500Principal.getName()`) whose certificate makes a session `super`.
    pub x509_super_user: Option<String>,
    /// `ssl.protocol` as read, until [`TlsConfig::finish`] settles `protocols`.
    protocol: Option<Vec<Protocol>>,
    /// `ssl.enabledProtocols` as read.
    enabled_protocols: Option<Vec<Protocol>>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            secure_client_port: None,
            secure_client_port_address: None,
            port_unification: false,
            cert_reload: false,
            tls_only: false,
            key_store: StoreConfig::default(),
            trust_store: StoreConfig::default(),
            quorum_key_store: StoreConfig::default(),
            quorum_trust_store: StoreConfig::default(),
            quorum: QuorumTls::default(),
            client_auth: ClientAuth::Need,
            protocols: vec![Protocol::Tls13, Protocol::Tls12],
            cipher_suites: Vec::new(),
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            x509_super_user: None,
            protocol: None,
            enabled_protocols: None,
        }
    }
}

/// A key store or trust store (`ssl.keyStore.*`, `ssl.trustStore.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// `.location`.
    pub location: Option<PathBuf>,
    /// `.password`.
    pub password: Option<String>,
    /// `.passwordPath`: a file holding the password (one trailing newline dropped).
    pub password_path: Option<PathBuf>,
    /// `.type`, if given (else inferred from `location`, see [`StoreConfig::kind`]).
    pub store_type: Option<StoreType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    Pem,
    Pkcs12,
}

/// Which store a key belongs to, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Key,
    Trust,
    /// `ssl.quorum.keyStore` (the members' own, and the admin server's HTTPS).
    QuorumKey,
    /// `ssl.quorum.trustStore`.
    QuorumTrust,
    /// `metricsProvider.ssl.keyStore` (the metrics endpoint's HTTPS).
    MetricsKey,
    /// `metricsProvider.ssl.trustStore`.
    MetricsTrust,
}

impl Store {
    /// `ssl.keyStore` or `ssl.trustStore`.
    pub fn prefix(self) -> &'static str {
        match self {
            Store::Key => "ssl.keyStore",
            Store::Trust => "ssl.trustStore",
            Store::QuorumKey => "ssl.quorum.keyStore",
            Store::QuorumTrust => "ssl.quorum.trustStore",
            Store::MetricsKey => "metricsProvider.ssl.keyStore",
            Store::MetricsTrust => "metricsProvider.ssl.trustStore",
        }
    }

    /// Its `.passwordPath` key.
    pub fn password_path_key(self) -> &'static str {
        match self {
            Store::Key => "ssl.keyStore.passwordPath",
            Store::Trust => "ssl.trustStore.passwordPath",
            Store::QuorumKey => "ssl.quorum.keyStore.passwordPath",
            Store::QuorumTrust => "ssl.quorum.trustStore.passwordPath",
            Store::MetricsKey => "metricsProvider.ssl.keyStore.passwordPath",
            Store::MetricsTrust => "metricsProvider.ssl.trustStore.passwordPath",
        }
    }
}

impl StoreConfig {
    /// The store's type: `.type`, else from the file name as ZooKeeper's
    /// `KeyStoreFileType.fromFilename` (`.pem`, `.p12`, `.pfx`; `.jks` is refused).
    /// `Err` is why, for the `.location` key.
    pub fn kind(&self) -> Result<StoreType, StoreTypeError> {
        if let Some(t) = self.store_type {
            return Ok(t);
        }
        let Some(path) = &self.location else {
            return Err(StoreTypeError::NoLocation);
        };
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "pem" => Ok(StoreType::Pem),
            "p12" | "pfx" => Ok(StoreType::Pkcs12),
            "jks" => Err(StoreTypeError::Jks),
            "bcfks" => Err(StoreTypeError::Bcfks),
            _ => Err(StoreTypeError::Unknown(path.clone())),
        }
    }

    /// The password: `.password`, else the contents of `.passwordPath`, else none.
    pub fn password(&self) -> std::io::Result<Option<String>> {
        if let Some(p) = &self.password {
            return Ok(Some(p.clone()));
        }
        let Some(path) = &self.password_path else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)?;
        let text = text
            .strip_suffix("\r\n")
            .or_else(|| text.strip_suffix('\n'))
            .unwrap_or(&text);
        Ok(Some(text.to_owned()))
    }

    pub(super) fn apply(&mut self, field: &str, v: &str) -> Result<(), String> {
        match field {
            "location" => self.location = Some(PathBuf::from(v)),
            "password" => self.password = Some(v.to_owned()),
            "passwordPath" => self.password_path = Some(PathBuf::from(v)),
            "type" => {
                self.store_type = match v.to_ascii_uppercase().as_str() {
                    "PEM" => Some(StoreType::Pem),
                    "PKCS12" => Some(StoreType::Pkcs12),
                    "JKS" => return Err(StoreTypeError::Jks.to_string()),
                    _ => {
                        return Err(
                            "expected PEM or PKCS12 (JKS: convert it, BCFKS is not read)".into(),
                        )
                    }
                }
            }
            _ => return Err(unimplemented_key()),
        }
        Ok(())
    }
}

/// Why a store's type is not one zlock reads.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreTypeError {
    #[error(
        "zlock does not read JKS stores: convert the store to PKCS12 with `keytool \
         -importkeystore -srckeystore store.jks -srcstoretype JKS -destkeystore store.p12 \
         -deststoretype PKCS12` and point the key at store.p12"
    )]
    Jks,
    #[error("BCFKS stores are not read by zlock; use PEM or PKCS12")]
    Bcfks,
    #[error("no location")]
    NoLocation,
    #[error(
        "cannot tell the store type from the file name {}: give the type (PEM or \
         PKCS12) in the .type key, or name the file .pem, .p12 or .pfx",
        .0.display()
    )]
    Unknown(PathBuf),
}

/// A TLS setting that several keys make together and that zlock cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TlsSetupError {
    #[error(transparent)]
    StoreType(#[from] StoreTypeError),
    #[error("TLS needs the server's certificate and key")]
    NoKeyStore,
    #[error(
        "with ssl.clientAuth want or need (need is the default), client certificates \
         are checked against this store (zlock has no default trust store, unlike the JVM)"
    )]
    NoTrustStore,
    #[error(
        "the members present this to each other (sslQuorum, portUnification): both \
         quorum stores are needed"
    )]
    NoQuorumStore,
    #[error("no suite given for {0:?}, which is enabled")]
    NoSuiteFor(Protocol),
}

fn unimplemented_key() -> String {
    "zlock does not implement this TLS setting (its client port TLS reads \
     secureClientPort, ssl.keyStore.*, ssl.trustStore.*, ssl.clientAuth, ssl.protocol, \
     ssl.enabledProtocols, ssl.ciphersuites and ssl.handshakeDetectionTimeoutMillis); \
     remove it rather than have it ignored"
        .into()
}

/// `ssl.clientAuth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No certificate asked for.
    None,
    /// Asked for; a client without one is served (and has no x509 identity).
    Want,
    /// Required, and it must chain to the trust store.
    Need,
}

impl TlsConfig {
    /// Whether TLS is on: `secureClientPort` is set, or the plain port takes TLS too.
    pub fn enabled(&self) -> bool {
        self.secure_client_port.is_some() || self.port_unification
    }

    /// Applies `key` if it is a TLS key (after a `zookeeper.` prefix): `None` when it is
    /// not one, else `Err` with the reason its value (or the key itself) is refused.
    pub(crate) fn apply(&mut self, key: &str, v: &str) -> Option<Result<(), String>> {
        let k = key.strip_prefix("zookeeper.").unwrap_or(key);
        Some(match k {
            "secureClientPort" => v
                .parse()
                .map(|p| self.secure_client_port = Some(p))
                .map_err(|_| "expected a port number".into()),
            "secureClientPortAddress" => v
                .parse()
                .map(|a| self.secure_client_port_address = Some(a))
                .map_err(|_| "expected an IP address".into()),
            "serverCnxnFactory" => Ok(()),
            "client.portUnification" => boolean(v).map(|b| self.port_unification = b),
            "client.certReload" => boolean(v).map(|b| self.cert_reload = b),
            "X509AuthenticationProvider.superUser" => {
                self.x509_super_user = Some(v.to_owned());
                Ok(())
            }
            "ssl.authProvider" => match v {
                "x509" => Ok(()),
                _ => Err(
                    "zlock has ZooKeeper's X509AuthenticationProvider only: expected x509".into(),
                ),
            },
            _ if k.starts_with("authProvider.") => {
                if KNOWN_PROVIDERS.contains(&v) {
                    Ok(())
                } else {
                    Err(format!(
                        "zlock cannot load authentication providers: its own are {}",
                        KNOWN_PROVIDERS.join(", ")
                    ))
                }
            }
            "ssl.clientAuth" => match v.to_ascii_lowercase().as_str() {
                "none" => Ok(ClientAuth::None),
                "want" => Ok(ClientAuth::Want),
                "need" => Ok(ClientAuth::Need),
                _ => Err("expected none, want or need".into()),
            }
            .map(|a| self.client_auth = a),
            "ssl.protocol" => protocols(v).map(|p| self.protocol = Some(p)),
            "ssl.enabledProtocols" => protocols(v).map(|p| self.enabled_protocols = Some(p)),
            "ssl.ciphersuites" => suites(v).map(|s| self.cipher_suites = s),
            "ssl.handshakeDetectionTimeoutMillis" => match v.parse::<u64>() {
                Ok(ms) if ms >= 1 => {
                    self.handshake_timeout_ms = ms;
                    Ok(())
                }
                _ => Err("expected a whole number of ms, at least 1".into()),
            },
            // On the server's client port ZooKeeper never checks a client's host name
            // (ClientX509Util), so this key changes nothing there.
            "ssl.hostnameVerification" => boolean(v).map(|_| ()),
            "ssl.clientHostnameVerification" => {
                only_off(v, "zlock does not check a client certificate's host name")
            }
            "ssl.allowReverseDnsLookup" => only_off(v, "zlock never looks host names up for TLS"),
            "ssl.crl" => only_off(v, "zlock does not check certificate revocation lists yet"),
            "ssl.ocsp" => only_off(v, "zlock does not check OCSP yet"),
            // Which Java TLS implementation to use: zlock has rustls, whatever it says.
            "ssl.sslProvider" => match v.to_ascii_uppercase().as_str() {
                "JDK" | "OPENSSL" => Ok(()),
                _ => Err("expected JDK or OpenSSL".into()),
            },
            _ => {
                if let Some(field) = k.strip_prefix("ssl.keyStore.") {
                    self.key_store.apply(field, v)
                } else if let Some(field) = k.strip_prefix("ssl.trustStore.") {
                    self.trust_store.apply(field, v)
                } else if let Some(field) = k.strip_prefix("ssl.quorum.keyStore.") {
                    self.quorum_key_store.apply(field, v)
                } else if let Some(field) = k.strip_prefix("ssl.quorum.trustStore.") {
                    self.quorum_trust_store.apply(field, v)
                } else if let Some(applied) = self.quorum.apply(k, v) {
                    applied
                } else if k.starts_with("ssl.") {
                    Err(unimplemented_key())
                } else {
                    return None;
                }
            }
        })
    }

    /// Settles what depends on several keys once a file is read: the protocols, and
    /// that TLS has the stores it needs. `Err` is the key to change, and why.
    pub(crate) fn finish(&mut self) -> Result<(), (&'static str, TlsSetupError)> {
        if let Some(p) = self
            .enabled_protocols
            .clone()
            .or_else(|| self.protocol.clone())
        {
            self.protocols = p;
        }
        self.quorum.finish()?;
        if self.quorum.enabled() {
            for (store, cfg) in [
                (Store::QuorumKey, &self.quorum_key_store),
                (Store::QuorumTrust, &self.quorum_trust_store),
            ] {
                let Some(_) = cfg.location else {
                    return Err((location_key(store), TlsSetupError::NoQuorumStore));
                };
                cfg.kind().map_err(|e| (location_key(store), e.into()))?;
            }
        }
        if !self.enabled() {
            return Ok(());
        }
        for (store, cfg) in [
            (Store::Key, &self.key_store),
            (Store::Trust, &self.trust_store),
        ] {
            if cfg.location.is_some() {
                cfg.kind().map_err(|e| (location_key(store), e.into()))?;
            }
        }
        if self.key_store.location.is_none() {
            return Err(("ssl.keyStore.location", TlsSetupError::NoKeyStore));
        }
        if self.client_auth != ClientAuth::None && self.trust_store.location.is_none() {
            return Err(("ssl.trustStore.location", TlsSetupError::NoTrustStore));
        }
        check_suites(&self.protocols, &self.cipher_suites)
            .map_err(|p| ("ssl.ciphersuites", TlsSetupError::NoSuiteFor(p)))?;
        Ok(())
    }
}

/// The `.location` key of `store`.
pub fn location_key(store: Store) -> &'static str {
    match store {
        Store::Key => "ssl.keyStore.location",
        Store::Trust => "ssl.trustStore.location",
        Store::QuorumKey => "ssl.quorum.keyStore.location",
        Store::QuorumTrust => "ssl.quorum.trustStore.location",
        Store::MetricsKey => "metricsProvider.ssl.keyStore.location",
        Store::MetricsTrust => "metricsProvider.ssl.trustStore.location",
    }
}
