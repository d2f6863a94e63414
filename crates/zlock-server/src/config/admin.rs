//! The `admin.*` keys: ZooKeeper's AdminServer, its commands as JSON over HTTP (see
//! `crate::admin::http` for what is served).
//!
//! ZooKeeper (`zookeeperAdmin.md`, "The AdminServer") reads `admin.enableServer`
//! (default true), `admin.serverAddress` (default 0.0.0.0), `admin.serverPort` (default
//! 8080), `admin.commandURL` (default `/commands`) and `admin.idleTimeout` (ms), plus
//! TLS settings (`admin.portUnification`, `admin.forceHttps`, `admin.needClientAuth`).
//! zlock reads the same keys, with two defaults of its own:
//!
//! - `enableServer`: default **false**. ZooKeeper's 8080 is the port every Java
//!   servlet container, HTTP proxy and development server reaches for first; a server
//!   that starts an HTTP listener there unasked either fails to start (ZooKeeper logs
//!   and carries on without it, which hides the collision) or, worse, answers where
//!   another service was expected. Like the metrics endpoint, it is on when an
//!   operator asks: `admin.enableServer=true` or `zlock server --admin-port N`.
//! - `serverAddress`: default **127.0.0.1**, not 0.0.0.0, as for `clientPortAddress`
//!   and `metricsProvider.httpHost`: the commands tell anyone who asks the sessions,
//!   client addresses, watched paths and lock holders. `0.0.0.0` restores ZooKeeper's.
//! - `serverPort`: 8080, as in ZooKeeper, once enabled. 0 picks a free port (tests).
//! - `commandURL`: `/commands`, as in ZooKeeper.
//! - `zlock.adminAuthRequired` (zlock's own key, default false): ZooKeeper 3.9 asks
//!   for credentials (an `Authorization` header whose identity has ALL on `/`) only
//!   before a snapshot or a restore; with this key true, zlock asks them also before
//!   every command that shows sessions, client addresses, watched paths or lock
//!   holders, or that resets counters, and before the lock dashboard (see
//!   `crate::admin::auth`). False keeps ZooKeeper's behaviour, so that tools written
//!   against ZooKeeper's AdminServer keep working.
//! - `snapshot.enabled` and `rateLimiterIntervalInMS` guard the `snapshot` command as in
//!   ZooKeeper 3.9 (503 when off; one per interval, else 429). The interval is in ms,
//!   as ZooKeeper documents it (its 3.9 source builds the snapshot's limiter in
//!   microseconds, so there the 5 minutes are in fact 0.3 s).
//! - `idleTimeout` is read and ignored: zlock's endpoint bounds every connection's time
//!   itself (see `crate::http`).
//! - HTTPS as ZooKeeper's Jetty serves it: `forceHttps=true`, HTTPS only;
//!   `portUnification=true`, HTTPS and plain HTTP on the one port; with the
//!   `ssl.quorum.keyStore.*` store (and `ssl.quorum.trustStore.*` with
//!   `needClientAuth=true`, which requires a client certificate and lets it authenticate
//!   as `x509`). A missing store stops the start.

use std::net::IpAddr;

use super::metrics::Applied;

/// The AdminServer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `admin.enableServer`. Default false (see the module doc).
    pub enabled: bool,
    /// `admin.serverAddress`. Default 127.0.0.1 (see the module doc).
    pub server_address: IpAddr,
    /// `admin.serverPort`. Default 8080, as in ZooKeeper.
    pub server_port: u16,
    /// `admin.commandURL`: where the commands are listed; `<it>/<name>` runs one.
    /// Starts with `/`, no trailing `/`.
    pub command_url: String,
    /// `zlock.adminAuthRequired`: the commands that show sessions, clients, watches or
    /// lock holders ask for credentials (see the module doc).
    pub auth_required: bool,
    /// `admin.snapshot.enabled` (ZooKeeper 3.9; default true): the `snapshot` command
    /// is served (else 503).
    pub snapshot_enabled: bool,
    /// `admin.restore.enabled` (ZooKeeper 3.9; default true): the `restore` command is
    /// served (else 503).
    pub restore_enabled: bool,
    /// `admin.rateLimiterIntervalInMS` (ZooKeeper 3.9; default 300,000, 5 minutes, as
    /// documented): at most one `snapshot` per interval (else 429).
    pub rate_limit_ms: u64,
    /// `admin.portUnification`: the port serves HTTPS and plain HTTP both (told apart
    /// by a connection's first byte).
    pub port_unification: bool,
    /// `admin.forceHttps`: the port serves HTTPS only.
    pub force_https: bool,
    /// `admin.needClientAuth`: an HTTPS client must present a certificate that chains to
    /// `ssl.quorum.trustStore` (and may then authenticate as `x509`).
    pub need_client_auth: bool,
}

impl AdminConfig {
    /// Whether the admin port serves HTTPS (alone, or beside plain HTTP).
    pub fn https(&self) -> bool {
        self.force_https || self.port_unification
    }
}

fn flag(value: &str) -> Result<bool, String> {
    value.parse().map_err(|_| "expected true or false".into())
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: false,
            server_address: IpAddr::from([127, 0, 0, 1]),
            server_port: 8080,
            command_url: "/commands".into(),
            auth_required: false,
            snapshot_enabled: true,
            restore_enabled: true,
            rate_limit_ms: 300_000,
            port_unification: false,
            force_https: false,
            need_client_auth: false,
        }
    }
}

impl AdminConfig {
    /// Applies one key, `admin.` removed. `Err` is the reason a value is bad.
    pub(crate) fn apply(&mut self, key: &str, value: &str) -> Result<Applied, String> {
        match key {
            "enableServer" => {
                self.enabled = value.parse().map_err(|_| "expected true or false")?;
            }
            "serverAddress" => {
                self.server_address = value
                    .parse()
                    .map_err(|_| "expected an IP address (0.0.0.0 for every interface)")?;
            }
            "serverPort" => {
                self.server_port = value.parse().map_err(|_| "expected a port number")?;
            }
            "commandURL" => self.command_url = command_url(value)?,
            "idleTimeout" => return Ok(Applied::NotApplicable),
            "snapshot.enabled" => {
                self.snapshot_enabled = value.parse().map_err(|_| "expected true or false")?;
            }
            "restore.enabled" => {
                self.restore_enabled = value.parse().map_err(|_| "expected true or false")?;
            }
            "rateLimiterIntervalInMS" => {
                self.rate_limit_ms = value
                    .parse()
                    .map_err(|_| "expected a whole number of ms (0: no limit)")?;
            }
            // Jetty's TLS, with the `ssl.quorum.*` stores as in ZooKeeper.
            "portUnification" => self.port_unification = flag(value)?,
            "forceHttps" => self.force_https = flag(value)?,
            "needClientAuth" => self.need_client_auth = flag(value)?,
            _ => return Ok(Applied::Unknown),
        }
        Ok(Applied::Set)
    }
}

/// `/commands`, `/commands/` and `commands` all mean `/commands`.
fn command_url(v: &str) -> Result<String, String> {
    let trimmed = v.trim_matches('/');
    if trimmed.is_empty() {
        return Err("expected a path such as /commands".into());
    }
    if trimmed.contains(['?', '#', ' ']) {
        return Err("expected a plain path, without ?, # or spaces".into());
    }
    Ok(format!("/{trimmed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_keys() {
        let mut a = AdminConfig::default();
        assert!(!a.enabled, "off unless asked (see the module doc)");
        assert_eq!(a.server_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!((a.server_port, a.command_url.as_str()), (8080, "/commands"));
        assert_eq!(a.apply("enableServer", "true"), Ok(Applied::Set));
        assert!(a.enabled);
        a.apply("serverAddress", "0.0.0.0").unwrap();
        a.apply("serverPort", "9090").unwrap();
        a.apply("commandURL", "/admin/cmds/").unwrap();
        assert_eq!(a.server_address, IpAddr::from([0; 4]));
        assert_eq!(
            (a.server_port, a.command_url.as_str()),
            (9090, "/admin/cmds")
        );
        assert!(a.apply("enableServer", "yes").is_err());
        assert!(a.apply("serverPort", "65536").is_err());
        assert!(a.apply("serverAddress", "localhost").is_err());
        assert!(a.apply("commandURL", "/").is_err());
        assert!(a.apply("commandURL", "/c?x").is_err());
        assert_eq!(a.apply("idleTimeout", "30000"), Ok(Applied::NotApplicable));
        assert_eq!(a.apply("nope", "1"), Ok(Applied::Unknown));
    }
}
