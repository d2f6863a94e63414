//! The small HTTP/1 server under the metrics endpoint and the AdminServer: a tokio
//! task of the server's runtime, apart from the client port, that answers `GET`s from
//! a handler and that nothing a client sends can make panic or hold resources for
//! long:
//! - a request is HTTP/1 only (hyper's parser); its head is bounded by hyper's read
//!   buffer, set to [`MAX_HEAD`]: larger is answered 431, malformed 400, by hyper;
//!   a body is read only by the AdminServer's `restore` (at most
//!   `admin::restore::MAX_BODY`, and within the connection's lifetime below);
//! - a client slower than [`HEAD_TIMEOUT`] to send its request head is disconnected
//!   (hyper's header read timeout); any connection is asked to close after
//!   [`CONN_LIFETIME`] (keep-alive clients reconnect) and dropped [`GRACE`] later
//!   whatever it is doing, so a client that stops reading cannot hold a task;
//! - at most [`MAX_CONNS`] connections at once; others wait in the listen backlog.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// The largest request head read (hyper's minimum read buffer is 8 KiB).
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// After this, a connection is asked to close once its current request is answered.
pub const CONN_LIFETIME: Duration = Duration::from_secs(60);
/// ... and is dropped this much later whatever it is doing.
pub const GRACE: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const MAX_CONNS: usize = 16;

/// The address a request came from (a request extension): the `ip` identity of the
/// AdminServer's authentication.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub SocketAddr);

/// What a handler answers.
pub(crate) type Reply = Response<Full<Bytes>>;

/// HTTPS on an endpoint's port (the admin server's `admin.forceHttps` and
/// `admin.portUnification`).
#[derive(Clone)]
pub(crate) struct Https {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Plain HTTP too, told apart by the first byte (a TLS handshake record starts
    /// with 0x16, which no HTTP method does).
    pub unified: bool,
    /// For the x509 identity of a client's certificate (`X509AuthenticationProvider.superUser`).
    pub tls: Arc<crate::config::TlsConfig>,
}

/// The identities a client's certificate gives it on an HTTPS connection (a request
/// extension; empty over plain HTTP or without a certificate).
#[derive(Debug, Clone, Default)]
pub(crate) struct X509(pub Arc<[zlock_proto::records::Id]>);

/// Serves `listener` with `respond` until `shutdown` turns true. `what` names the
/// endpoint in logs.
pub(crate) async fn serve<F, Fut>(
    listener: TcpListener,
    what: &'static str,
    respond: F,
    https: Option<Https>,
    mut shutdown: watch::Receiver<bool>,
) where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let respond = Arc::new(respond);
    let permits = Arc::new(Semaphore::new(MAX_CONNS));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            permit = permits.clone().acquire_owned() => {
                let Ok(permit) = permit else { break };
                let stream = tokio::select! {
                    r = listener.accept() => match r {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            tracing::warn!(error = %e, "{what}: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    _ = shutdown.changed() => break,
                };
                let respond = respond.clone();
                let stop = shutdown.clone();
                let https = https.clone();
                conns.spawn(async move {
                    secured(stream, what, respond, https, stop).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// One connection, its TLS handshake first with `https` (within [`HEAD_TIMEOUT`]; a
/// failed one is dropped with a debug line).
async fn secured<F, Fut>(
    (stream, peer): (tokio::net::TcpStream, SocketAddr),
    what: &'static str,
    respond: Arc<F>,
    https: Option<Https>,
    shutdown: watch::Receiver<bool>,
) where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let Some(h) = https else {
        return connection(stream, (peer, X509::default()), what, respond, shutdown).await;
    };
    if h.unified {
        let mut first = [0u8; 1];
        match tokio::time::timeout(HEAD_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] != 0x16 => {
                return connection(stream, (peer, X509::default()), what, respond, shutdown).await;
            }
            Ok(Ok(1)) => {}
            _ => return,
        }
    }
    let tls = match tokio::time::timeout(HEAD_TIMEOUT, h.acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, %peer, "{what}: TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "{what}: TLS handshake timed out");
            return;
        }
    };
    let ids = X509(crate::tls::x509_ids(tls.get_ref().1, &h.tls).into());
    connection(tls, (peer, ids), what, respond, shutdown).await
}

/// One HTTP/1 connection, bounded in time (see the module doc). Each request carries
/// the client's address as a [`Peer`] extension, and its certificate's identities as an
/// [`X509`] one.
async fn connection<S, F, Fut>(
    stream: S,
    (peer, x509): (SocketAddr, X509),
    what: &'static str,
    respond: Arc<F>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT);
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        req.extensions_mut().insert(x509.clone());
        let answer = respond(req);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "{what}: connection ended");
            }
            return;
        }
        _ = tokio::time::sleep(CONN_LIFETIME) => {}
        _ = shutdown.changed() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(GRACE, conn).await;
}

/// A plain-text answer.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Reply {
    with_type(
        status,
        Bytes::from_static(text.as_bytes()),
        "text/plain; charset=utf-8",
    )
}

/// `body` with its content type.
pub(crate) fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Reply {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
