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
//! - `httpsPort` (ZooKeeper 3.9's HTTPS connector) stops the start unless it is -1
//!   (off): zlock's endpoint has no HTTPS yet, and an operator who asks for it must not
//!   get plain HTTP unknowingly. The `ssl.*` keys of that connector mean nothing
//!   without it and are read and ignored.
//! - `exportJvmInfo` and the worker-pool keys are read and ignored: there is no JVM,
//!   and zlock's exposition has no worker pool (a summary's observation is a lock-free
//!   append, see `crate::metrics`).
//!
//! Off unless `className` (or the `--metrics-port` flag) turns it on, as in ZooKeeper.

use std::net::IpAddr;

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
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: false,
            http_host: IpAddr::from([127, 0, 0, 1]),
            http_port: 7000,
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
                self.http_port = value.parse().map_err(|_| "expected a port number")?;
            }
            "exportJvmInfo" | "numWorkerThreads" | "maxQueueSize" | "workerShutdownTimeoutMs" => {
                return Ok(Applied::NotApplicable)
            }
            // ZooKeeper 3.9's HTTPS connector: refused rather than ignored, so that asking
            // for HTTPS never gets plain HTTP unknowingly (-1 is ZooKeeper's "off").
            "httpsPort" => {
                return match value.trim() {
                    "-1" => Ok(Applied::NotApplicable),
                    _ => Err("zlock's metrics endpoint has no HTTPS yet: remove the key \
                              (the endpoint serves plain HTTP, on loopback unless httpHost \
                              says otherwise; the admin server has HTTPS)"
                        .into()),
                };
            }
            // Its stores, read by ZooKeeper only with httpsPort.
            k if k.starts_with("ssl.") => return Ok(Applied::NotApplicable),
            _ => return Ok(Applied::Unknown),
        }
        Ok(Applied::Set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_refused_unless_off() {
        let mut m = MetricsConfig::default();
        assert!(m
            .apply("httpsPort", "7443")
            .unwrap_err()
            .contains("no HTTPS"));
        assert_eq!(m.apply("httpsPort", "-1"), Ok(Applied::NotApplicable));
        assert_eq!(
            m.apply("ssl.keyStore.location", "/k.pem"),
            Ok(Applied::NotApplicable)
        );
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
