//! Client errors: one variant per ZooKeeper error code a server sends, plus the
//! client-local failures.

use thiserror::Error;
use zlock_proto::ErrorCode;

use crate::tls::TlsError;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with this ZooKeeper error code.
    #[error("server error: {0} ({code})", code = .0.code())]
    Server(ErrorCode),
    /// The connection broke; the request may or may not have been applied.
    #[error("connection lost")]
    ConnectionLoss,
    /// The server refused to resume the session (it expired).
    #[error("session expired")]
    SessionExpired,
    /// The client was closed.
    #[error("client closed")]
    Closed,
    /// The server sent something this client cannot decode.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connect string has no host or a malformed chroot.
    #[error("bad connect string: {0:?}")]
    BadConnectString(String),
    /// Could not connect to any host.
    #[error("cannot connect to {0}: {1}")]
    Connect(String, String),
    /// The server (this host) accepted the TCP connection and closed it before it
    /// answered the handshake. ZooKeeper does that when the client's address already has
    /// `maxClientCnxns` connections, when the server is not serving yet, or when the
    /// client has seen a later zxid than the server has.
    #[error(
        "cannot connect to {0}: the server closed the connection during the handshake; \
         too many connections from this address? (maxClientCnxns)"
    )]
    HandshakeClosed(String),
    /// The [`TlsOptions`](crate::TlsOptions) cannot be used: a file is unreadable or
    /// not what it should be (named in it). Nothing was connected.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The TLS handshake with this host failed: its certificate does not chain to the
    /// trusted CAs or is not for the name or address connected to, or the server
    /// refused the client (no certificate, or one it does not trust).
    #[error("TLS with {0} failed: {1}")]
    TlsHandshake(String, String),
    /// A lock recipe was asked for a lock-delay on an acquire that would take the
    /// standard recipe (the server offers no native lock, as Apache ZooKeeper;
    /// `LockPath::Recipe`; several semaphore leases at once): only a zlock server's
    /// native lock can hold a lock back, and locking without it would be silently
    /// weaker than asked.
    #[error(
        "lock-delay needs zlock's native lock path (the server does not offer it, or this \
         acquire takes the standard recipe)"
    )]
    LockDelayUnsupported,
}

impl Error {
    /// The ZooKeeper code of this error, if it has one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server(c) => Some(*c),
            Error::ConnectionLoss | Error::HandshakeClosed(_) => Some(ErrorCode::ConnectionLoss),
            Error::SessionExpired => Some(ErrorCode::SessionExpired),
            Error::LockDelayUnsupported => Some(ErrorCode::Unimplemented),
            _ => None,
        }
    }

    pub(crate) fn from_code(err: i32) -> Error {
        match ErrorCode::from_i32(err) {
            Some(c) => Error::Server(c),
            None => Error::Protocol(format!("unknown error code {err}")),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
