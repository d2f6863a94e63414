//! TLS between ensemble members: ZooKeeper's `sslQuorum`, `portUnification` and the
//! `ssl.quorum.*` keys (`zookeeperAdmin.md`, "Quorum TLS"), read as ZooKeeper reads
//! them. The stores (`ssl.quorum.keyStore.*`, `ssl.quorum.trustStore.*`) sit in
//! [`crate::config::TlsConfig`] beside the client port's, since the admin server's HTTPS reads them
//! too; the rest is here.
//!
//! Read and honoured: `sslQuorum` (a member dials the others over TLS, presenting its
//! key store, and checks theirs against its trust store; it takes only TLS members
//! unless `portUnification`), `portUnification` (the quorum port takes both, told
//! apart by their first byte, as `client.portUnification` on the client port),
//! `ssl.quorum.hostnameVerification` (default true: the certificate of the member
//! dialled must be valid for the host of its `server.N` line),
//! `ssl.quorum.protocol`, `ssl.quorum.enabledProtocols`, `ssl.quorum.ciphersuites`,
//! `ssl.quorum.handshakeDetectionTimeoutMillis` (as their client-port counterparts),
//! `ssl.quorum.clientAuth=need` (the only mode: a member without a certificate the
//! trust store vouches for is not one), `ssl.quorum.sslProvider`,
//! `sslQuorumReloadCertFiles` (the quorum stores read again when their files change,
//! see `crate::tls::reload`).
//!
//! Refused, naming the key: `ssl.quorum.clientHostnameVerification=true` (the accepting member checks the chain,
//! not the connecting member's address: ZooKeeper checks that too while
//! `hostnameVerification` is on, with reverse DNS; zlock looks nothing up, so a
//! certificate that names only a host name could not be matched to an address),
//! `ssl.quorum.allowReverseDnsLookup=true`, `ssl.quorum.crl=true`,
//! `ssl.quorum.ocsp=true`, `ssl.quorum.clientAuth` other than `need`, and any other
//! `ssl.quorum.*` key.

use super::tls_values::{
    boolean, check_suites, only_off, protocols, suites, Protocol, DEFAULT_HANDSHAKE_TIMEOUT_MS,
};
use super::TlsSetupError;

/// How members talk to each other. Plain TCP unless `sslQuorum` or `portUnification`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumTls {
    /// `sslQuorum`: this member dials the others over TLS (mutual: it presents
    /// `ssl.quorum.keyStore`, and a member it dials must present one its trust store
    /// vouches for), and, without `port_unification`, takes TLS members only.
    pub ssl_quorum: bool,
    /// `portUnification` (not `client.portUnification`): the quorum port takes both TLS
    /// and plain members, whatever `ssl_quorum` says; the step between the two in a
    /// rolling switch.
    pub port_unification: bool,
    /// `ssl.quorum.hostnameVerification`: the certificate of a member this one dials is
    /// checked against the host of that member's `server.N` line (a name against its
    /// DNS names, an address against its IP addresses). ZooKeeper's default, true.
    pub hostname_verification: bool,
    /// As [`crate::config::TlsConfig::protocols`], from the `ssl.quorum.` keys.
    pub protocols: Vec<Protocol>,
    /// `ssl.quorum.ciphersuites`; empty = rustls's defaults.
    pub cipher_suites: Vec<String>,
    /// `ssl.quorum.handshakeDetectionTimeoutMillis`: how long an accepted member has to
    /// say whether it speaks TLS and to finish its handshake.
    pub handshake_timeout_ms: u64,
    /// `sslQuorumReloadCertFiles`: the quorum stores are read again when their files
    /// change; links made from then on use them.
    pub reload_cert_files: bool,
    protocol: Option<Vec<Protocol>>,
    enabled_protocols: Option<Vec<Protocol>>,
}

impl Default for QuorumTls {
    fn default() -> Self {
        QuorumTls {
            ssl_quorum: false,
            port_unification: false,
            hostname_verification: true,
            protocols: vec![Protocol::Tls13, Protocol::Tls12],
            cipher_suites: Vec::new(),
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            reload_cert_files: false,
            protocol: None,
            enabled_protocols: None,
        }
    }
}

const NOT_READ: &str = "zlock does not implement this setting for the links between members \
     (it reads sslQuorum, portUnification, ssl.quorum.keyStore.*, ssl.quorum.trustStore.*, \
     ssl.quorum.hostnameVerification, ssl.quorum.protocol, ssl.quorum.enabledProtocols, \
     ssl.quorum.ciphersuites and ssl.quorum.handshakeDetectionTimeoutMillis); remove it \
     rather than have it ignored";

impl QuorumTls {
    /// Whether the quorum port needs TLS at all (its stores then too).
    pub fn enabled(&self) -> bool {
        self.ssl_quorum || self.port_unification
    }

    /// Applies `sslQuorum`, `portUnification`, `sslQuorumReloadCertFiles` or the
    /// `ssl.quorum.<field>` key (stores excepted): `None` when `key` is none of them.
    pub(super) fn apply(&mut self, key: &str, v: &str) -> Option<Result<(), String>> {
        let field = match key {
            "sslQuorum" => return Some(boolean(v).map(|b| self.ssl_quorum = b)),
            "portUnification" => return Some(boolean(v).map(|b| self.port_unification = b)),
            "sslQuorumReloadCertFiles" => {
                return Some(boolean(v).map(|b| self.reload_cert_files = b))
            }
            _ => key.strip_prefix("ssl.quorum.")?,
        };
        Some(match field {
            "hostnameVerification" => boolean(v).map(|b| self.hostname_verification = b),
            "protocol" => protocols(v).map(|p| self.protocol = Some(p)),
            "enabledProtocols" => protocols(v).map(|p| self.enabled_protocols = Some(p)),
            "ciphersuites" => suites(v).map(|s| self.cipher_suites = s),
            "handshakeDetectionTimeoutMillis" => match v.parse::<u64>() {
                Ok(ms) if ms >= 1 => {
                    self.handshake_timeout_ms = ms;
                    Ok(())
                }
                _ => Err("expected a whole number of ms, at least 1".into()),
            },
            "clientAuth" => match v.to_ascii_lowercase().as_str() {
                "need" => Ok(()),
                _ => Err(
                    "between members zlock always requires a certificate that the \
                          trust store vouches for: only need"
                        .into(),
                ),
            },
            "clientHostnameVerification" => only_off(
                v,
                "zlock checks a connecting member's certificate chain, not its address \
                 (set it to false)",
            ),
            "allowReverseDnsLookup" => only_off(v, "zlock never looks host names up for TLS"),
            "crl" => only_off(v, "zlock does not check certificate revocation lists yet"),
            "ocsp" => only_off(v, "zlock does not check OCSP yet"),
            "sslProvider" => match v.to_ascii_uppercase().as_str() {
                "JDK" | "OPENSSL" => Ok(()),
                _ => Err("expected JDK or OpenSSL".into()),
            },
            _ => Err(NOT_READ.into()),
        })
    }

    /// Settles the protocols (as the client port's are) and checks the suites.
    pub(super) fn finish(&mut self) -> Result<(), (&'static str, TlsSetupError)> {
        if let Some(p) = self
            .enabled_protocols
            .clone()
            .or_else(|| self.protocol.clone())
        {
            self.protocols = p;
        }
        check_suites(&self.protocols, &self.cipher_suites)
            .map_err(|p| ("ssl.quorum.ciphersuites", TlsSetupError::NoSuiteFor(p)))
    }
}
