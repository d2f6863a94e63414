//! The `metricsProvider.*` keys: Prometheus metrics over HTTP, enabled as in ZooKeeper
//! 3.6+ (see `crate::metrics` for what is exported).
//!
//! ZooKeeper hands every key that starts with `metricsProvider.` (prefix removed) to
//! the class `metricsProvider.className` names; its Prometheus provider reads
//! `httpHost` (default 0.0.0.0), `httpPort` (default 7000), `exportJvmInfo` and three
//! keys that tune its Java worker pool (`numWorkerThreads`, `maxQueueSize`,
//! `workerShutdownTimeoutMs`). zlock reads the same keys:
//!
//! - `className`: the Prometheus provider's class name, as written in ZooKeeper's
//!   docs, or zlock's short name `prometheus`, turns the endpoint on. ZooKeeper's own
//!   default and null providers (`...impl.DefaultMetricsProvider`,
//!   `...impl.NullMetricsProvider`) serve no endpoint in ZooKeeper, so they mean off
//!   here too. Any other class is a configuration error: zlock cannot load Java
//!   classes, and a scraper pointed at a server that silently exports nothing would
//!   only notice from missing data.
//! - `httpHost`: an IP address. Default **127.0.0.1**, not ZooKeeper's 0.0.0.0: like
//!   `clientPortAddress` (see [`crate::ServerConfig::client_port_address`]), nothing of
//!   zlock is reachable from the network until an operator says so. The metrics are
//!   read-only, but they still tell anyone who asks how many znodes, sessions and
//!   connections the server has. A ZooKeeper `zoo.cfg` moved over unchanged thus
//!   serves loopback only; `metricsProvider.httpHost=0.0.0.0` restores ZooKeeper's
//!   behaviour (and Prometheus's `up == 0` tells at once if it was forgotten).
//! - `httpPort`: default 7000. 0 picks a free port (tests).
//! - `httpsPort` (ZooKeeper 3.9's HTTPS connector): `/metrics` over HTTPS there too,
//!   with the connector's keys: `ssl.keyStore.location` / `.password` / `.type` (required),
//!   `ssl.trustStore.location` / `.password` / `.type`, `ssl.need.client.auth` and
//!   `ssl.want.client.auth` (both default **true**, ZooKeeper's "secure default": a
//!   scraper must show a certificate the trust store signed), `ssl.enabledProtocols`,
//!   `ssl.ciphersuites`. As in ZooKeeper: `httpsPort` equal to `httpPort` is one port
//!   serving both (told apart by the first byte); `httpsPort` alone serves HTTPS only
//!   (`httpPort` unset, or -1). One difference: ZooKeeper 3.9 given two different ports
//!   keeps only the HTTPS connector (its code replaces one by the other); zlock serves
//!   both, as the keys say. Any other `ssl.*` key is refused, naming it.
//! - `exportJvmInfo` and the worker-pool keys are read and ignored: there is no JVM,
//!   and zlock's exposition has no worker pool (a summary's observation is a lock-free
//!   append, see `crate::metrics`).
//!
//! Off unless `className` (or the `--metrics-port` flag) turns it on, as in ZooKeeper.

use std::net::IpAddr;

use super::tls::{StoreConfig, TlsSetupError};
use super::tls_values::{boolean, check_suites, protocols, suites, Protocol};

/// The Prometheus provider's class name in ZooKeeper 3.6+.
pub const PROMETHEUS_CLASS: &str =
    "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider";

/// zlock's short name for the same.
pub const PROMETHEUS_SHORT: &str = "prometheus";

/// ZooKeeper's providers that serve no HTTP endpoint (its default, and the null one).
const NO_ENDPOINT: [&str; 2] = [
    "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider",
    "org.apache.zookeeper.metrics.impl.NullMetricsProvider",
];

/// The Prometheus endpoint's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Serve `GET /metrics`: `metricsProvider.className` names the Prometheus provider.
    pub enabled: bool,
    /// `metricsProvider.httpHost`. Default 127.0.0.1 (see the module doc).
    pub http_host: IpAddr,
    /// `metricsProvider.httpPort`. Default 7000, as in ZooKeeper.
    pub http_port: u16,
    /// Plain HTTP is served on `http_port`: false with `httpPort=-1`, or with
    /// `httpsPort` and no `httpPort` (see [`MetricsConfig::finish`]).
    pub plain_http: bool,
    /// `metricsProvider.httpsPort`: HTTPS there (with `http_port`, one port for both).
    pub https_port: Option<u16>,
    /// The HTTPS connector's `ssl.*` keys.
    pub tls: MetricsTls,
    /// `httpPort` was written (not the default).
    http_port_given: bool,
}

/// The metrics endpoint's HTTPS (`metricsProvider.ssl.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsTls {
    pub key_store: StoreConfig,
    pub trust_store: StoreConfig,
    /// `ssl.need.client.auth`: default true, as ZooKeeper's.
    pub need_client_auth: bool,
    /// `ssl.want.client.auth`: default true, as ZooKeeper's.
    pub want_client_auth: bool,
    /// `ssl.enabledProtocols`; default TLSv1.3 and TLSv1.2.
    pub protocols: Vec<Protocol>,
    /// `ssl.ciphersuites`; empty: rustls's.
    pub cipher_suites: Vec<String>,
}

impl Default for MetricsTls {
    fn default() -> Self {
        MetricsTls {
            key_store: StoreConfig::default(),
            trust_store: StoreConfig::default(),
            need_client_auth: true,
            want_client_auth: true,
            protocols: vec![Protocol::Tls13, Protocol::Tls12],
            cipher_suites: Vec::new(),
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: false,
            http_host: IpAddr::from([127, 0, 0, 1]),
            http_port: 7000,
            plain_http: true,
            https_port: None,
            tls: MetricsTls::default(),
            http_port_given: false,
        }
    }
}

/// What a `metricsProvider.*` key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    Set,
    /// Read, and means nothing here (JVM and Java worker-pool settings).
    NotApplicable,
    /// Not a key ZooKeeper's Prometheus provider reads.
    Unknown,
}

impl MetricsConfig {
    /// Applies one key, `metricsProvider.` removed. `Err` is the reason a value is bad.
    pub(crate) fn apply(&mut self, key: &str, value: &str) -> Result<Applied, String> {
        match key {
            "className" => {
                self.enabled = match value {
                    PROMETHEUS_CLASS | PROMETHEUS_SHORT => true,
                    v if NO_ENDPOINT.contains(&v) => false,
                    _ => {
                        return Err(format!(
                            "zlock serves Prometheus metrics only: expected \
                             {PROMETHEUS_CLASS} (or {PROMETHEUS_SHORT})"
                        ))
                    }
                };
            }
            "httpHost" => {
                self.http_host = value
                    .parse()
                    .map_err(|_| "expected an IP address (0.0.0.0 for every interface)")?;
            }
            "httpPort" => {
                self.http_port_given = true;
                match value.trim() {
                    "-1" => self.plain_http = false,
                    v => {
                        self.http_port = v.parse().map_err(|_| "expected a port number")?;
                        self.plain_http = true;
                    }
                }
            }
            "exportJvmInfo" | "numWorkerThreads" | "maxQueueSize" | "workerShutdownTimeoutMs" => {
                return Ok(Applied::NotApplicable)
            }
            // ZooKeeper 3.9's HTTPS connector (-1 is its "off").
            "httpsPort" => {
                self.https_port = match value.trim() {
                    "-1" => None,
                    v => Some(v.parse().map_err(|_| "expected a port number, or -1")?),
                };
            }
            "ssl.need.client.auth" => self.tls.need_client_auth = boolean(value)?,
            "ssl.want.client.auth" => self.tls.want_client_auth = boolean(value)?,
            "ssl.enabledProtocols" => self.tls.protocols = protocols(value)?,
            "ssl.ciphersuites" => self.tls.cipher_suites = suites(value)?,
            k => {
                let store = |k: &str, prefix: &str| k.strip_prefix(prefix).map(str::to_owned);
                // ZooKeeper's connector reads location, password and type only.
                let field_ok = |f: &str| matches!(f, "location" | "password" | "type");
                if let Some(f) = store(k, "ssl.keyStore.").filter(|f| field_ok(f)) {
                    self.tls.key_store.apply(&f, value)?;
                } else if let Some(f) = store(k, "ssl.trustStore.").filter(|f| field_ok(f)) {
                    self.tls.trust_store.apply(&f, value)?;
                } else if k.starts_with("ssl.") {
                    return Err("not a key of the metrics endpoint's HTTPS (it reads \
                                ssl.keyStore.{location,password,type}, \
                                ssl.trustStore.{location,password,type}, \
                                ssl.need.client.auth, ssl.want.client.auth, \
                                ssl.enabledProtocols, ssl.ciphersuites)"
                        .into());
                } else {
                    return Ok(Applied::Unknown);
                }
            }
        }
        Ok(Applied::Set)
    }

    /// Settles what the keys mean together, once all are read: `httpsPort` without
    /// `httpPort` serves HTTPS only; HTTPS needs a key store, and a trust store when it
    /// needs client certificates. `Err`: (key, why).
    pub(crate) fn finish(&mut self) -> Result<(), (&'static str, String)> {
        if self.https_port.is_none() {
            return Ok(());
        }
        if !self.http_port_given {
            self.plain_http = false;
        }
        if self.tls.key_store.location.is_none() {
            return Err((
                "metricsProvider.httpsPort",
                "HTTPS needs metricsProvider.ssl.keyStore.location".into(),
            ));
        }
        if self.tls.need_client_auth && self.tls.trust_store.location.is_none() {
            return Err((
                "metricsProvider.ssl.need.client.auth",
                "true (the default) needs metricsProvider.ssl.trustStore.location, or set \
                 it false"
                    .into(),
            ));
        }
        // As on the client port and the quorum: every enabled protocol needs a suite.
        check_suites(&self.tls.protocols, &self.tls.cipher_suites).map_err(|p| {
            (
                "metricsProvider.ssl.ciphersuites",
                TlsSetupError::NoSuiteFor(p).to_string(),
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enabled_protocol_needs_a_suite() {
        let https = || {
            let mut m = MetricsConfig::default();
            m.apply("httpsPort", "7443").unwrap();
            m.apply("ssl.keyStore.location", "/k.pem").unwrap();
            m.apply("ssl.need.client.auth", "false").unwrap();
            m
        };
        // TLSv1.3 and TLSv1.2 enabled (the default), a TLSv1.3 suite only.
        let mut m = https();
        m.apply("ssl.ciphersuites", "TLS_AES_128_GCM_SHA256")
            .unwrap();
        let (key, why) = m.finish().unwrap_err();
        assert_eq!(key, "metricsProvider.ssl.ciphersuites");
        assert!(why.contains("Tls12"), "{why}");
        // With TLSv1.3 alone it is enough; a TLSv1.2 suite for both is too.
        let mut m = https();
        m.apply("ssl.enabledProtocols", "TLSv1.3").unwrap();
        m.apply("ssl.ciphersuites", "TLS_AES_128_GCM_SHA256")
            .unwrap();
        m.finish().unwrap();
        let mut m = https();
        m.apply(
            "ssl.ciphersuites",
            "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        )
        .unwrap();
        m.finish().unwrap();
    }

    #[test]
    fn https_keys_as_zookeeper_39_reads_them() {
        let mut m = MetricsConfig::default();
        assert_eq!(m.apply("httpsPort", "-1"), Ok(Applied::Set));
        assert_eq!(m.https_port, None);
        m.finish().unwrap();
        assert!(m.plain_http, "no HTTPS: plain as before");

        // httpsPort alone: HTTPS only, a client certificate needed by default.
        let mut m = MetricsConfig::default();
        m.apply("httpsPort", "7443").unwrap();
        m.apply("ssl.keyStore.location", "/k.pem").unwrap();
        assert!(m.finish().unwrap_err().0.contains("need.client.auth"));
        m.apply("ssl.trustStore.location", "/ca.p12").unwrap();
        m.apply("ssl.trustStore.password", "pw").unwrap();
        m.apply("ssl.trustStore.type", "PKCS12").unwrap();
        m.apply("ssl.enabledProtocols", "TLSv1.3").unwrap();
        m.apply("ssl.ciphersuites", "TLS_AES_128_GCM_SHA256")
            .unwrap();
        m.finish().unwrap();
        assert_eq!(m.https_port, Some(7443));
        assert!(!m.plain_http, "httpsPort without httpPort: HTTPS only");
        assert!(m.tls.need_client_auth && m.tls.want_client_auth);
        assert_eq!(m.tls.protocols, [Protocol::Tls13]);

        // Both, one port; client certificates off.
        let mut m = MetricsConfig::default();
        m.apply("httpPort", "7000").unwrap();
        m.apply("httpsPort", "7000").unwrap();
        m.apply("ssl.need.client.auth", "false").unwrap();
        assert_eq!(m.finish().unwrap_err().0, "metricsProvider.httpsPort");
        m.apply("ssl.keyStore.location", "/k.pem").unwrap();
        m.finish().unwrap();
        assert!(m.plain_http && m.https_port == Some(7000));

        let mut m = MetricsConfig::default();
        m.apply("httpPort", "-1").unwrap();
        assert!(!m.plain_http);
        assert!(m.apply("ssl.keyStore.passwordPath", "/p").is_err());
        assert!(m.apply("ssl.crl", "true").is_err());
        assert!(m.apply("ssl.keyStore.type", "JKS").is_err());
        assert!(m.apply("ssl.need.client.auth", "maybe").is_err());
        assert!(m.apply("httpsPort", "x").is_err());
    }

    #[test]
    fn class_names() {
        let mut m = MetricsConfig::default();
        assert!(!m.enabled, "off unless configured, as in ZooKeeper");
        assert_eq!(m.apply("className", PROMETHEUS_CLASS), Ok(Applied::Set));
        assert!(m.enabled);
        m.apply(
            "className",
            "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider",
        )
        .unwrap();
        assert!(!m.enabled);
        m.apply("className", "prometheus").unwrap();
        assert!(m.enabled);
        assert!(m.apply("className", "com.example.Mine").is_err());
    }

    #[test]
    fn host_and_port() {
        let mut m = MetricsConfig::default();
        assert_eq!(m.http_port, 7000);
        assert_eq!(m.http_host, IpAddr::from([127, 0, 0, 1]));
        m.apply("httpHost", "0.0.0.0").unwrap();
        m.apply("httpPort", "7001").unwrap();
        assert_eq!((m.http_host, m.http_port), (IpAddr::from([0; 4]), 7001));
        assert!(m.apply("httpHost", "zk1.example").is_err());
        assert!(m.apply("httpPort", "70000").is_err());
        assert_eq!(m.apply("exportJvmInfo", "true"), Ok(Applied::NotApplicable));
        assert_eq!(m.apply("nope", "1"), Ok(Applied::Unknown));
    }
}
