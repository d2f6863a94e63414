//! Connect strings (`host:port,host:port[/chroot]`), as ZooKeeper's clients take them,
//! and the options of a connection ([`ClientBuilder`]).

use tokio::sync::mpsc;
use zlock_proto::records::WatcherEvent;

use crate::error::{Error, Result};
use crate::tls::TlsOptions;
use crate::Client;

/// How to connect: the connect string, the session timeout asked for, TLS. Made by
/// [`Client::builder`]; [`Client::connect`] is the builder with its defaults.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    pub(crate) connect_string: String,
    pub(crate) timeout_ms: i32,
    pub(crate) tls: Option<TlsOptions>,
}

impl ClientBuilder {
    /// Defaults: a 30 s session timeout (ZooKeeper's `zkCli` asks for that), plain TCP.
    pub fn new(connect_string: &str) -> ClientBuilder {
        ClientBuilder {
            connect_string: connect_string.to_owned(),
            timeout_ms: 30_000,
            tls: None,
        }
    }

    /// The session timeout to ask for (the server bounds it by its min/max).
    pub fn session_timeout_ms(mut self, timeout_ms: i32) -> ClientBuilder {
        self.timeout_ms = timeout_ms;
        self
    }

    /// Every connection of the session over TLS (the hosts' secure client ports);
    /// `None` for plain TCP.
    pub fn tls(mut self, tls: impl Into<Option<TlsOptions>>) -> ClientBuilder {
        self.tls = tls.into();
        self
    }

    /// Opens a new session; see [`Client::connect`].
    ///
    /// # Errors
    /// Those of [`Client::connect`], and with TLS: [`Error::Tls`] when a file cannot be
    /// read or is not what it should be (before any connection), [`Error::TlsHandshake`]
    /// when a server's certificate is not trusted or not for its host, or the server
    /// refuses the client's.
    pub async fn connect(&self) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        Client::open(self, 0, &[]).await
    }

    /// Resumes a session; see [`Client::resume`].
    pub async fn resume(
        &self,
        session_id: i64,
        passwd: &[u8],
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        Client::open(self, session_id, passwd).await
    }
}

/// Splits a connect string `h1:2181,h2:2181/app` into hosts and chroot ("" for none).
pub(crate) fn parse_connect_string(s: &str) -> Result<(Vec<String>, String)> {
    let (hosts, chroot) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.contains(':') {
                h.to_owned()
            } else {
                format!("{h}:2181")
            }
        })
        .collect();
    if hosts.is_empty() {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot.contains("//") {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    Ok((hosts, chroot.to_owned()))
}

/// `connect` with its hosts starting from the `n`-th (`b:2,c:3,a:1` for 1), the chroot
/// kept: the client tries the hosts in order, so a program that opens many sessions
/// (a benchmark, a pool) spreads them over an ensemble's members this way. One host:
/// unchanged.
pub fn rotate_hosts(connect: &str, n: usize) -> String {
    let (hosts, chroot) = connect.split_at(connect.find('/').unwrap_or(connect.len()));
    let hosts: Vec<&str> = hosts.split(',').collect();
    let k = n % hosts.len();
    [&hosts[k..], &hosts[..k]].concat().join(",") + chroot
}

#[cfg(test)]
mod tests {
    use super::{parse_connect_string, rotate_hosts};

    #[test]
    fn sessions_start_on_successive_hosts() {
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 0), "a:1,b:2,c:3");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 1), "b:2,c:3,a:1");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 5), "c:3,a:1,b:2");
        assert_eq!(rotate_hosts("a:1", 7), "a:1");
        assert_eq!(rotate_hosts("a:1,b:2/app/x", 1), "b:2,a:1/app/x");
        assert_eq!(rotate_hosts("a:1/app", 1), "a:1/app");
    }

    #[test]
    fn connect_strings() {
        let (h, c) = parse_connect_string("a:1,b:2/app/x").unwrap();
        assert_eq!(h, vec!["a:1", "b:2"]);
        assert_eq!(c, "/app/x");
        let (h, c) = parse_connect_string("a").unwrap();
        assert_eq!(h, vec!["a:2181"]);
        assert_eq!(c, "");
        assert_eq!(parse_connect_string("a:1/").unwrap().1, "");
        assert!(parse_connect_string("/app").is_err());
    }
}
