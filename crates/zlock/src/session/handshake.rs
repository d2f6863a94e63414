//! The handshake: one TCP connection, a ConnectRequest (fresh or resuming a session),
//! its ConnectResponse.

use std::io::ErrorKind;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zlock_proto::frame;
use zlock_proto::records::{ConnectRequest, ConnectResponse, FEATURE_NATIVE_LOCK};
use zlock_proto::{Reader, Record};

use crate::error::{Error, Result};

/// What the server answered the handshake with.
pub(crate) struct Established {
    pub session_id: i64,
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    /// zlock feature bits the server offered (0 for Apache ZooKeeper).
    pub features: i32,
}

pub(crate) fn perr(e: impl std::fmt::Display) -> Error {
    Error::Protocol(e.to_string())
}

/// Connects to one host and performs the handshake (a fresh session when `session_id`
/// is 0). Returns the stream and what was read past the response.
pub(crate) async fn handshake(
    addr: &str,
    timeout_ms: i32,
    session_id: i64,
    passwd: &[u8],
    last_zxid: i64,
) -> Result<(TcpStream, BytesMut, Established)> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| Error::Connect(addr.to_owned(), e.to_string()))?;
    let _ = s.set_nodelay(true);
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: last_zxid,
        time_out: timeout_ms,
        session_id,
        passwd: if passwd.is_empty() {
            vec![0; 16]
        } else {
            passwd.to_vec()
        },
        read_only: Some(false),
        features: Some(FEATURE_NATIVE_LOCK),
    };
    let mut out = Vec::new();
    let at = frame::begin(&mut out);
    req.encode(&mut out);
    frame::finish(&mut out, at);
    // The server may close a connection it accepted before it reads a byte (ZooKeeper's
    // maxClientCnxns): an EOF or a reset from here on is that, any other error a
    // connection loss.
    let closed = |e: std::io::Error| match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            Error::HandshakeClosed(addr.to_owned())
        }
        _ => Error::ConnectionLoss,
    };
    s.write_all(&out).await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        if let Some((n, body)) = frame::parse(&buf, usize::MAX >> 1).map_err(perr)? {
            let resp = ConnectResponse::decode(&mut Reader::new(body)).map_err(perr)?;
            buf.advance(n);
            if resp.time_out <= 0 || resp.session_id == 0 {
                return Err(Error::SessionExpired);
            }
            return Ok((
                s,
                buf,
                Established {
                    session_id: resp.session_id,
                    timeout_ms: resp.time_out,
                    passwd: resp.passwd,
                    features: resp.features.unwrap_or(0),
                },
            ));
        }
        if s.read_buf(&mut buf).await.map_err(closed)? == 0 {
            return Err(Error::HandshakeClosed(addr.to_owned()));
        }
    }
}
