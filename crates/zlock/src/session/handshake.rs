//! The handshake: one TCP connection (and its TLS handshake, with TLS), a
//! ConnectRequest (fresh or resuming a session), its ConnectResponse.

use std::io::ErrorKind;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use zlock_proto::frame;
use zlock_proto::records::{ConnectRequest, ConnectResponse, FEATURE_NATIVE_LOCK};
use zlock_proto::{Reader, Record};

use super::Stream;
use crate::error::{Error, Result};
use crate::tls::{self, Tls};

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

/// Connects to one host (over TLS with `tls`) and performs the handshake (a fresh
/// session when `session_id` is 0). Returns the stream and what was read past the
/// response.
pub(crate) async fn handshake(
    addr: &str,
    tls: Option<&Tls>,
    timeout_ms: i32,
    session_id: i64,
    passwd: &[u8],
    last_zxid: i64,
) -> Result<(Stream, BytesMut, Established)> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| Error::Connect(addr.to_owned(), e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let ask = (timeout_ms, session_id, passwd, last_zxid);
    Ok(match tls {
        None => {
            let mut s = tcp;
            let (buf, est) = exchange(addr, &mut s, ask).await?;
            (Stream::Plain(s), buf, est)
        }
        Some(tls) => {
            let mut s = tls.connect(addr, tcp).await?;
            let (buf, est) = exchange(addr, &mut s, ask).await?;
            (Stream::Tls(Box::new(s)), buf, est)
        }
    })
}

/// The ConnectRequest and its response on a connected stream.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    addr: &str,
    s: &mut S,
    (timeout_ms, session_id, passwd, last_zxid): (i32, i64, &[u8], i64),
) -> Result<(BytesMut, Established)> {
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
    // connection loss. Over TLS 1.3 a server that refuses the client's certificate (or
    // its absence) says so with an alert after the client's handshake is done: here.
    let closed = |e: std::io::Error| match e.kind() {
        _ if tls::is_tls(&e) => tls::handshake_error(addr, e),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            Error::HandshakeClosed(addr.to_owned())
        }
        _ => Error::ConnectionLoss,
    };
    s.write_all(&out).await.map_err(closed)?;
    s.flush().await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        if let Some((n, body)) = frame::parse(&buf, usize::MAX >> 1).map_err(perr)? {
            let resp = ConnectResponse::decode(&mut Reader::new(body)).map_err(perr)?;
            buf.advance(n);
            if resp.time_out <= 0 || resp.session_id == 0 {
                return Err(Error::SessionExpired);
            }
            return Ok((
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
