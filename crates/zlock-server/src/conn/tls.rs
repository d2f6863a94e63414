//! A TLS connection's bytes after the handshake (`crate::net::tls` does the handshake):
//! reads and writes through the connection's rustls state, on the same non-blocking
//! socket calls as a plain connection. The rustls state sits in one mutex
//! ([`TlsState`]) that the reading task and every writer share: writing
//! (`ConnOut::flush`, from whichever thread produced a reply) puts plaintext into rustls
//! in queue order and sends the records it makes with `try_write`, what the socket does
//! not take staying queued inside rustls, in order, for the writer task; reading
//! ([`read_some`]) takes ciphertext in with `try_read`, processes it, and drains the
//! plaintext into the connection's buffer. The mutex is never held across an await,
//! and is always taken after the queue's lock, never before it.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::ServerConnection;
use tokio::net::TcpStream;

/// One TLS connection's rustls state, shared by its reader and its writers.
pub(crate) type TlsState = Arc<Mutex<ServerConnection>>;
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
