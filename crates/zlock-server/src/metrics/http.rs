//! The HTTP endpoint: `GET /metrics` (and `HEAD`) in Prometheus text format 0.0.4, on
//! a tokio task of the server's runtime, apart from the client port.
//!
//! Anything else is answered cleanly and nothing a client sends can make it panic or
//! hold resources for long:
//! - another path: 404; another method: 405 with `Allow: GET, HEAD`;
//! - a request is HTTP/1 only (hyper's parser); its head is bounded by hyper's read
//!   buffer, set to [`MAX_HEAD`]: larger is answered 431, malformed 400, by hyper;
//!   a body is never read;
//! - a client slower than [`HEAD_TIMEOUT`] to send its request head is disconnected
//!   (hyper's header read timeout); any connection is asked to close after
//!   [`CONN_LIFETIME`] (keep-alive scrapers reconnect) and dropped [`GRACE`] later
//!   whatever it is doing, so a client that stops reading cannot hold a task;
//! - at most [`MAX_CONNS`] connections at once; others wait in the listen backlog.
//!
//! A scrape asks the sequencer for the core's facts (as `mntr` does) and gives up with
//! 503 after [`SCRAPE_PATIENCE`] (a stopping server, or one whose log is stuck).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;

use super::{Registry, UPKEEP};
use crate::pipeline::Item;
use crate::stats::Stats;

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
/// How long a scrape waits for the core's facts.
pub const SCRAPE_PATIENCE: Duration = Duration::from_secs(10);

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the endpoint reads.
pub(crate) struct Context {
    pub registry: Arc<Registry>,
    pub stats: Arc<Stats>,
    /// The sequencer's queue, for the core's facts.
    pub commit: mpsc::Sender<Item>,
}

/// Serves `listener` until `shutdown` turns true; also drains the summaries every
/// [`UPKEEP`].
pub(crate) async fn serve(
    listener: TcpListener,
    ctx: Context,
    mut shutdown: watch::Receiver<bool>,
) {
    let ctx = Arc::new(ctx);
    let permits = Arc::new(Semaphore::new(MAX_CONNS));
    let mut conns = JoinSet::new();
    let mut upkeep = tokio::time::interval(UPKEEP);
    loop {
        tokio::select! {
            _ = upkeep.tick() => ctx.registry.upkeep(),
            permit = permits.clone().acquire_owned() => {
                let Ok(permit) = permit else { break };
                let stream = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            tracing::warn!(error = %e, "metrics: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    _ = shutdown.changed() => break,
                };
                let ctx = ctx.clone();
                let stop = shutdown.clone();
                conns.spawn(async move {
                    connection(stream, ctx, stop).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// One HTTP/1 connection, bounded in time (see the module doc).
async fn connection(
    stream: tokio::net::TcpStream,
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT);
    let service = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(respond(req, &ctx).await) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "metrics: connection ended");
            }
            return;
        }
        _ = tokio::time::sleep(CONN_LIFETIME) => {}
        _ = shutdown.changed() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(GRACE, conn).await;
}

async fn respond(req: Request<Incoming>, ctx: &Context) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match scrape(ctx).await {
        Some(text) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT));
            r
        }
        None => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server did not answer (stopping?)\n",
        ),
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The exposition, or `None` if the core did not answer in time.
async fn scrape(ctx: &Context) -> Option<String> {
    let (tx, rx) = oneshot::channel();
    let asked = async {
        ctx.commit.send(Item::Scrape { done: tx }).await.ok()?;
        rx.await.ok()
    };
    let facts = tokio::time::timeout(SCRAPE_PATIENCE, asked).await.ok()??;
    let queued = ctx.commit.max_capacity() - ctx.commit.capacity();
    // O(znodes), on the copy taken under the lock, off every lock.
    let (facts, size) = tokio::task::spawn_blocking(move || {
        let size = facts.nodes.approximate_data_size();
        (facts, size)
    })
    .await
    .ok()?;
    Some(ctx.registry.render(&ctx.stats, &facts, size, queued))
}
