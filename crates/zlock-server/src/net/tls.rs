//! A TLS connection's bytes: the handshake (in the connection's own task, bounded by
//! `ssl.handshakeDetectionTimeoutMillis`), then reads and writes through the
//! connection's rustls state on the same non-blocking socket calls as a plain one.
//!
//! After the handshake tokio-rustls gives back the socket and the rustls connection
//! (`into_inner`); from then on nothing of tokio-rustls is used. The rustls state sits
//! in one mutex ([`TlsState`]) that the reading task and every writer share:
//! - writing (`ConnOut::flush`, from whichever thread produced a reply): plaintext goes
//!   into rustls in queue order, and the records it makes go out with `try_write`; what
//!   the socket does not take stays queued inside rustls, in order, for the writer task;
//! - reading (`read_some`): ciphertext in with `try_read`, `process_new_packets`, and
//!   the plaintext drained into the connection's buffer; whatever rustls has to send
//!   meanwhile (an alert) goes out as far as the socket takes it.
//!
//! The bytes after the handshake (the shared rustls state, reads and writes) are
//! [`crate::conn::tls`]'s. The mutex is never held across an await, and is always taken after the queue's
//! lock, never before it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use zlock_proto::records::Id;

use crate::conn::tls::TlsState;
use crate::tls::reload::Acceptor;

/// What a client port does about TLS.
#[derive(Clone)]
pub(crate) enum Port {
    /// Plain text only.
    Plain,
    /// TLS only (`secureClientPort`).
    Secure(Acceptor),
    /// Both (`client.portUnification`): a connection whose first byte starts a TLS
    /// handshake record gets TLS, any other is plain. A ZooKeeper frame cannot start
    /// with that byte (0x16: a length of over 369 MB) nor can a four-letter word.
    Unified(Acceptor),
}

/// The first byte of a TLS handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

/// Whether the client starts a TLS handshake: its first byte, looked at (not read)
/// within `timeout`. A client that says nothing by then is taken as a plain one (whose
/// own silence is then bounded by the plain path).
pub(crate) async fn starts_tls(stream: &TcpStream, timeout: Duration) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(timeout, stream.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD
    )
}

/// A handshake done: the connection's state, and the identities its certificate gives.
pub(crate) struct Handshaken {
    pub stream: TcpStream,
    pub state: TlsState,
    pub ids: Vec<Id>,
}

/// Why a handshake did not finish; logged once by the caller.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    #[error("TLS handshake not done within {0:?}")]
    Timeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Failed(std::io::Error),
}

/// Runs the server side of the handshake on `stream`, for at most `timeout`.
pub(crate) async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
    cfg: &crate::config::TlsConfig,
) -> Result<Handshaken, HandshakeError> {
    let s = tokio::time::timeout(timeout, acceptor.accept(stream))
        .await
        .map_err(|_| HandshakeError::Timeout(timeout))?
        .map_err(HandshakeError::Failed)?;
    let (stream, mut conn) = s.into_inner();
    // Replies are bounded by the connection's outstanding-request budget, as on the
    // plain path; rustls must take all of them (its default stops at 64 KiB).
    conn.set_buffer_limit(None);
    let ids = crate::tls::x509_ids(&conn, cfg);
    Ok(Handshaken {
        stream,
        state: Arc::new(Mutex::new(conn)),
        ids,
    })
}

/// Logs a failed handshake: one line, at info (clients that cannot speak TLS to this
/// port are an operator's concern, not the server's).
pub(crate) fn log_failed(addr: SocketAddr, e: &HandshakeError) {
    tracing::info!(%addr, error = %e, "closing a connection on the secure client port");
}
