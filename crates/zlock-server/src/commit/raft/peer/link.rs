//! The bytes between two members: plain TCP, or TLS with both sides' certificates
//! checked (ZooKeeper's `sslQuorum`). Everything above ([`super::Hello`], the frames)
//! is the same on both.
//!
//! [`Links`] is how this member secures its connections: how it dials ([`Links::dial`]:
//! TLS with `sslQuorum`, else plain) and what its quorum port takes
//! ([`Links::accept`]: TLS only, plain only, or both with `portUnification`, told apart
//! by the first byte as on the client port, see [`crate::net::tls`]). A connection
//! refused at the handshake, or of the kind the port does not take, is logged once per
//! peer address at warn, then at debug while it keeps trying ([`Refusals`]): a member
//! that cannot join retries every heartbeat, and its reason is one line, not a flood.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, TlsStream};

use crate::net::tls::{starts_tls, Port};
use crate::tls::reload::{Connector, Swap};

/// A connection to or from another member.
pub enum Link {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reading half of a [`Link`] ([`Link::into_split`]).
pub enum LinkRead {
    /// A plain link's halves are the socket's own (no lock between them).
    Plain(OwnedReadHalf),
    /// A TLS link's share one rustls state, behind tokio's split lock.
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The writing half of a [`Link`].
pub enum LinkWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl Link {
    pub fn into_split(self) -> (LinkRead, LinkWrite) {
        match self {
            Link::Plain(s) => {
                let (r, w) = s.into_split();
                (LinkRead::Plain(r), LinkWrite::Plain(w))
            }
            Link::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (LinkRead::Tls(r), LinkWrite::Tls(w))
            }
        }
    }
}

impl LinkRead {
    /// The link again, from both of its halves; `None` if they are not one link's.
    pub fn reunite(self, w: LinkWrite) -> Option<Link> {
        match (self, w) {
            (LinkRead::Plain(r), LinkWrite::Plain(w)) => r.reunite(w).ok().map(Link::Plain),
            (LinkRead::Tls(r), LinkWrite::Tls(w)) if r.is_pair_of(&w) => {
                Some(Link::Tls(Box::new(r.unsplit(w))))
            }
            _ => None,
        }
    }
}

macro_rules! delegate_read {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

macro_rules! delegate_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

delegate_read!(Link);
delegate_read!(LinkRead);
delegate_write!(Link);
delegate_write!(LinkWrite);

/// How this member's peer connections are secured. Plain both ways unless built from
/// the `ssl.quorum.*` settings ([`Links::tls`]).
#[derive(Clone)]
pub struct Links {
    /// `sslQuorum`: dial over TLS, checking the dialled member's certificate against the
    /// trust store (and its name with `ssl.quorum.hostnameVerification`).
    dial: Option<Connector>,
    /// What the quorum port takes.
    accept: Port,
    /// How long an accepted connection has to show what it speaks and to finish its
    /// handshake (`ssl.quorum.handshakeDetectionTimeoutMillis`).
    handshake: Duration,
    pub(super) refusals: Arc<Refusals>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let accept = match self.accept {
            Port::Plain => "plain",
            Port::Secure(_) => "tls",
            Port::Unified(_) => "tls or plain",
        };
        f.debug_struct("Links")
            .field("dial_tls", &self.dial.is_some())
            .field("accept", &accept)
            .finish()
    }
}

impl Default for Links {
    /// Plain TCP both ways (no `sslQuorum`, no `portUnification`).
    fn default() -> Self {
        Links {
            dial: None,
            accept: Port::Plain,
            handshake: Duration::from_secs(5),
            refusals: Arc::default(),
        }
    }
}

/// Whether the peer of `s` closed it without sending a byte (its end of stream is
/// there to read now; a silent but open connection is not).
async fn closed_silent(s: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    // A zero timeout still polls the peek once: an end of stream already received shows.
    matches!(
        tokio::time::timeout(Duration::ZERO, s.peek(&mut first)).await,
        Ok(Ok(0))
    )
}

/// Why a link could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("{addr} does not resolve")]
    Unresolved { addr: String },
    #[error("{host:?} (of {addr}) is not a name or address a certificate can be checked against")]
    Name { addr: String, host: String },
    #[error("TLS handshake with {addr} failed: {source}")]
    Handshake {
        addr: String,
        source: std::io::Error,
    },
}

impl Links {
    /// Links as `sslQuorum` (`ssl_quorum`) and `portUnification` (`unified`) say, with
    /// these rustls configurations (built from the quorum stores).
    pub fn tls(
        ssl_quorum: bool,
        unified: bool,
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
        handshake: Duration,
    ) -> Links {
        let acceptor = crate::tls::reload::acceptor(server);
        Links {
            dial: ssl_quorum.then(|| Swap::new(TlsConnector::from(client))),
            accept: match (ssl_quorum, unified) {
                (_, true) => Port::Unified(acceptor),
                (true, false) => Port::Secure(acceptor),
                (false, false) => Port::Plain,
            },
            handshake,
            refusals: Arc::default(),
        }
    }

    /// `sslQuorumReloadCertFiles`: the links made from now on use `cfg`'s quorum stores
    /// as they are now (both sides: the acceptor and the dialling connector); links up
    /// keep theirs. The port's kind (TLS, plain, both) does not change.
    pub fn reload(&self, cfg: &crate::config::TlsConfig) -> Result<(), crate::tls::TlsError> {
        let server = crate::tls::quorum::server_config(cfg)?;
        let client = crate::tls::quorum::client_config(cfg)?;
        if let Port::Secure(a) | Port::Unified(a) = &self.accept {
            a.replace(tokio_rustls::TlsAcceptor::from(server));
        }
        if let Some(d) = &self.dial {
            d.replace(TlsConnector::from(client));
        }
        Ok(())
    }

    /// Connects to the member at `addr` (`host:port`, its `server.N` line's), over TLS
    /// with `sslQuorum`. Unbounded in time: callers bound it.
    pub async fn dial(&self, addr: &str) -> Result<Link, LinkError> {
        let to: SocketAddr = tokio::net::lookup_host(addr)
            .await?
            .next()
            .ok_or_else(|| LinkError::Unresolved { addr: addr.into() })?;
        let s = TcpStream::connect(to).await?;
        let _ = s.set_nodelay(true);
        let Some(connector) = self.dial.as_ref().map(Swap::current) else {
            return Ok(Link::Plain(s));
        };
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned()).map_err(|_| LinkError::Name {
            addr: addr.into(),
            host: host.into(),
        })?;
        match connector.connect(name, s).await {
            Ok(t) => {
                self.refusals.cleared(addr);
                Ok(Link::Tls(Box::new(TlsStream::Client(t))))
            }
            Err(source) => {
                if gone(&source) {
                    tracing::debug!(peer = addr, error = %source, "a member went away mid-handshake");
                } else {
                    self.refusals
                        .refused(addr, &addr, "dialling a member", &source);
                }
                Err(LinkError::Handshake {
                    addr: addr.into(),
                    source,
                })
            }
        }
    }

    /// The link for a connection accepted on the quorum port from `addr`, or `None`
    /// when it is refused (closed): TLS on a plain-only port, plain text on a TLS-only
    /// one, or a failed handshake, each logged as [`Refusals`] says.
    pub async fn accept(&self, s: TcpStream, addr: SocketAddr) -> Option<Link> {
        let _ = s.set_nodelay(true);
        let peer = addr.ip().to_string();
        let acceptor = match &self.accept {
            Port::Plain => {
                if starts_tls(&s, self.handshake).await {
                    self.refusals.refused(
                        &peer,
                        &addr,
                        "accepting a member",
                        "it speaks TLS, and this member takes plain members only \
                         (sslQuorum=false, portUnification=false)",
                    );
                    return None;
                }
                return Some(Link::Plain(s));
            }
            Port::Secure(a) => {
                if !starts_tls(&s, self.handshake).await {
                    // Closed before saying anything: a dial given up (a member's RPC
                    // cancelled between its connect and its handshake), no plain member.
                    if closed_silent(&s).await {
                        tracing::debug!(peer = %addr, "a connection closed before its first byte");
                        return None;
                    }
                    self.refusals.refused(
                        &peer,
                        &addr,
                        "accepting a member",
                        "it does not speak TLS, and this member takes TLS members only \
                         (sslQuorum=true, portUnification=false)",
                    );
                    return None;
                }
                a
            }
            Port::Unified(a) => {
                if !starts_tls(&s, self.handshake).await {
                    return Some(Link::Plain(s));
                }
                a
            }
        };
        let acceptor = acceptor.current();
        let why = match tokio::time::timeout(self.handshake, acceptor.accept(s)).await {
            // Not cleared here: other members may connect from the same host (a
            // refused one's line stays quiet for its minute).
            Ok(Ok(t)) => return Some(Link::Tls(Box::new(TlsStream::Server(t)))),
            Ok(Err(e)) if gone(&e) => {
                tracing::debug!(peer = %addr, error = %e, "a member went away mid-handshake");
                return None;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("TLS handshake not done within {:?}", self.handshake),
        };
        self.refusals
            .refused(&peer, &addr, "accepting a member", &why);
        None
    }
}

/// Whether a handshake failed because the other side went away (a member stopping or
/// restarting), not because either side refused the other: no news for the operator.
fn gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        e.kind(),
        BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof
    )
}

/// The host of `host:port` (an IPv6 address without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// How long after a refusal logged at warn the same peer's refusals stay at debug.
const QUIET_FOR: Duration = Duration::from_secs(60);

/// The peers whose connections were refused, and when that was last logged at warn.
#[derive(Default)]
pub(super) struct Refusals(Mutex<HashMap<String, Instant>>);

impl Refusals {
    /// Logs a refused link with `peer`: at warn the first time and once a minute after
    /// for its `key` (the address dialled, or the host a connection came from: its
    /// source port changes every time), else at debug.
    fn refused(
        &self,
        key: &str,
        peer: &dyn std::fmt::Display,
        doing: &str,
        why: impl std::fmt::Display,
    ) {
        let now = Instant::now();
        let loud = {
            let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match seen.get(key) {
                Some(at) if now.duration_since(*at) < QUIET_FOR => false,
                _ => {
                    // Hosts that stopped trying are forgotten (a port open to the
                    // network may see many).
                    seen.retain(|_, at| now.duration_since(*at) < QUIET_FOR);
                    seen.insert(key.to_owned(), now);
                    true
                }
            }
        };
        if loud {
            tracing::warn!(
                %peer,
                error = %why,
                "refused the link with a peer while {doing} (its retries are logged at \
                 debug for a minute)"
            );
        } else {
            tracing::debug!(%peer, error = %why, "refused the link with a peer while {doing}");
        }
    }

    /// Whether no refusal for `key` was logged at warn in the last minute.
    #[cfg(test)]
    pub(super) fn is_quiet(&self, key: &str) -> bool {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(key).is_none_or(|at| at.elapsed() >= QUIET_FOR)
    }

    /// A link for `key` was set up: its next refusal is news again.
    fn cleared(&self, key: &str) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.is_empty() {
            seen.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("10.0.0.1:2888"), "10.0.0.1");
        assert_eq!(host_of("zk1.example:2888"), "zk1.example");
        assert_eq!(host_of("[::1]:2888"), "::1");
    }
}
