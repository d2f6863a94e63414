//! The HTTP endpoint: `GET /metrics` (and `HEAD`) in Prometheus text format 0.0.4, on
//! a tokio task of the server's runtime, apart from the client port.
//!
//! Another path is answered 404, another method 405 with `Allow: GET, HEAD`; how the
//! connections are bounded (request size, slow clients, how many at once) is
//! `crate::http`'s module doc.
//!
//! A scrape asks the sequencer for the core's facts (as `mntr` does) and gives up with
//! 503 after [`SCRAPE_PATIENCE`] (a stopping server, or one whose log is stuck).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW};
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Registry, UPKEEP};
use crate::http::{plain, with_type, Reply};
use crate::pipeline::Item;
use crate::stats::Stats;

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
    listeners: Vec<(TcpListener, Option<crate::http::Https>)>,
    ctx: Context,
    shutdown: watch::Receiver<bool>,
) {
    let ctx = Arc::new(ctx);
    let registry = ctx.registry.clone();
    let upkeep = async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            registry.upkeep();
        }
    };
    let respond = move |req| {
        let ctx = ctx.clone();
        async move { respond(req, &ctx).await }
    };
    // Each port (plain HTTP, HTTPS, or one for both) until shutdown.
    let ports = futures_util::future::join_all(listeners.into_iter().map(|(listener, https)| {
        crate::http::serve(
            listener,
            "metrics",
            respond.clone(),
            https,
            shutdown.clone(),
        )
    }));
    tokio::select! {
        _ = upkeep => {}
        _ = ports => {}
    }
}

async fn respond(req: Request<Incoming>, ctx: &Context) -> Reply {
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
        Some(text) => with_type(StatusCode::OK, Bytes::from(text), TEXT_FORMAT),
        None => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server did not answer (stopping?)\n",
        ),
    }
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
