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
//! - reading ([`read_some`]): ciphertext in with `try_read`, `process_new_packets`, and
//!   the plaintext drained into the connection's buffer; whatever rustls has to send
//!   meanwhile (an alert) goes out as far as the socket takes it.
//!
//! The mutex is never held across an await, and is always taken after the queue's
//! lock, never before it.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::ServerConnection;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use zlock_proto::records::Id;

/// What a client port does about TLS.
#[derive(Clone)]
pub(crate) enum Port {
    /// Plain text only.
    Plain,
    /// TLS only (`secureClientPort`).
    Secure(TlsAcceptor),
    /// Both (`client.portUnification`): a connection whose first byte starts a TLS
    /// handshake record gets TLS, any other is plain. A ZooKeeper frame cannot start
    /// with that byte (0x16: a length of over 369 MB) nor can a four-letter word.
    Unified(TlsAcceptor),
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

/// One TLS connection's rustls state, shared by its reader and its writers.
pub(crate) type TlsState = Arc<Mutex<ServerConnection>>;

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

pub(crate) fn lock(tls: &TlsState) -> MutexGuard<'_, ServerConnection> {
    // A panic with the lock held leaves at worst this connection's TLS state broken,
    // and its next read or write then fails.
    tls.lock().unwrap_or_else(|p| p.into_inner())
}

/// The socket's non-blocking calls as `Read` and `Write`, for rustls.
struct NonBlocking<'a>(&'a TcpStream);

impl Read for NonBlocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for NonBlocking<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes what rustls has to send, as far as the socket takes it now. `Ok(true)`: all
/// of it; `Ok(false)`: the rest waits in rustls, in order.
pub(crate) fn send_pending(
    conn: &mut ServerConnection,
    stream: &TcpStream,
) -> std::io::Result<bool> {
    while conn.wants_write() {
        match conn.write_tls(&mut NonBlocking(stream)) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes everything rustls has to send, waiting for the socket.
pub(crate) async fn drain(tls: &TlsState, stream: &TcpStream) -> std::io::Result<()> {
    loop {
        if send_pending(&mut lock(tls), stream)? {
            return Ok(());
        }
        stream.writable().await?;
    }
}

/// Sends `bytes`, then close_notify, waiting for the socket: a four-letter word's
/// answer.
pub(crate) async fn write_all_and_close(
    tls: &TlsState,
    stream: &TcpStream,
    bytes: &[u8],
) -> std::io::Result<()> {
    {
        let mut c = lock(tls);
        c.writer().write_all(bytes)?;
        c.send_close_notify();
    }
    drain(tls, stream).await
}

/// Reads plaintext into `buf`, waiting until some is there; 0 at the end of the
/// stream (close_notify, or the socket closed). A TLS error (a bad record) is an error
/// after rustls's alert is sent as far as the socket takes it.
pub(crate) async fn read_some(
    tls: &TlsState,
    stream: &TcpStream,
    buf: &mut bytes::BytesMut,
) -> std::io::Result<usize> {
    loop {
        {
            let mut c = lock(tls);
            // Plaintext rustls already holds (it may have come with the handshake).
            if let Some(r) = plaintext(&mut c, buf) {
                return r;
            }
        }
        stream.readable().await?;
        let mut c = lock(tls);
        match c.read_tls(&mut NonBlocking(stream)) {
            Ok(0) => return Ok(0),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let processed = c.process_new_packets();
        // An alert for a bad record, or a reply to a key update.
        let sent = send_pending(&mut c, stream);
        if let Err(e) = processed {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
        sent?;
    }
}

/// What plaintext rustls holds, appended to `buf`: `None` when there is none yet.
fn plaintext(
    c: &mut ServerConnection,
    buf: &mut bytes::BytesMut,
) -> Option<std::io::Result<usize>> {
    const CHUNK: usize = 16 * 1024;
    let start = buf.len();
    buf.resize(start + CHUNK, 0);
    let r = c.reader().read(&mut buf[start..]);
    match r {
        Ok(n) => {
            buf.truncate(start + n);
            Some(Ok(n))
        }
        Err(e) => {
            buf.truncate(start);
            match e.kind() {
                std::io::ErrorKind::WouldBlock => None,
                // The peer closed the socket without close_notify.
                std::io::ErrorKind::UnexpectedEof => Some(Ok(0)),
                _ => Some(Err(e)),
            }
        }
    }
}
