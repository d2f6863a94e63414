//! What every AdminServer command is answered with: the endpoint's context, the
//! sequencer asked for the core's facts, a command's JSON reply. Below the commands
//! (`http` routes them; `snapshot` and `restore` answer their own), so that none of
//! them imports another.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::json::Fields;
use crate::http::{with_type, Reply};
use crate::pipeline::Item;
use crate::ServerConfig;

/// How long a command waits for the core.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What the endpoint reads.
pub(crate) struct Context {
    pub config: Arc<ServerConfig>,
    /// The sequencer's queue, for the core's facts.
    pub commit: mpsc::Sender<Item>,
    /// In an ensemble: whether this member is in touch with a quorum. One that is not
    /// (or that a `reconfig` removed) serves nobody, and the commands that read the core
    /// answer ZooKeeper's "not currently serving" error, as the four-letter words do.
    pub quorum: Option<watch::Receiver<crate::ensemble::Touch>>,
    /// The server's counters (`snapshot_error_count`, ...).
    pub stats: Arc<crate::stats::Stats>,
    /// When the last `snapshot` was let through (`admin.rateLimiterIntervalInMS`).
    pub last_snapshot: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the last `restore` was let through (the same interval).
    pub last_restore: std::sync::Mutex<Option<std::time::Instant>>,
}

/// A command's answer as JSON.
pub(crate) fn json(status: StatusCode, answer: Fields) -> Reply {
    let body = serde_json::to_vec_pretty(&Value::Object(answer)).unwrap_or_default();
    with_type(status, Bytes::from(body), "application/json")
}

/// Sends `item` to the sequencer and waits for its answer, at most [`PATIENCE`].
pub(super) async fn ask<T>(ctx: &Context, item: Item, rx: oneshot::Receiver<T>) -> Option<T> {
    ask_within(ctx, item, rx, PATIENCE).await
}

/// [`ask`], waiting at most `patience`.
pub(super) async fn ask_within<T>(
    ctx: &Context,
    item: Item,
    rx: oneshot::Receiver<T>,
    patience: Duration,
) -> Option<T> {
    let asked = async {
        ctx.commit.send(item).await.ok()?;
        rx.await.ok()
    };
    tokio::time::timeout(patience, asked).await.ok()?
}

/// One per `admin.rateLimiterIntervalInMS` since `last` (0: no limit); records this one
/// when it is let through.
pub(crate) fn let_through(ctx: &Context, last: &std::sync::Mutex<Option<Instant>>) -> bool {
    let interval = Duration::from_millis(ctx.config.admin.rate_limit_ms);
    let mut last = last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < interval) {
        return false;
    }
    *last = Some(now);
    true
}
