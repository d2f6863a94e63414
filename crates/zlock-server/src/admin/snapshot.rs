//! ZooKeeper 3.9's `snapshot` command (alias `snap`): `GET
//! <commandURL>/snapshot[?streaming=false]` answers a backup of this server's state
//! (`crate::backup`), taken in commit order while it serves.
//!
//! As ZooKeeper 3.9 answers it (`Commands.SnapshotCommand`): credentials always (ALL on
//! `/`, see `super::auth`: 401, 403); `admin.snapshot.enabled=false`, 503; more than one
//! per `admin.rateLimiterIntervalInMS`, 429 (counted in `snapshot_rate_limited_count`);
//! a failure, 500 (counted in `snapshot_error_count`). A success is 200 with the headers
//! `last_zxid` (`0x` and the zxid in hex) and `snapshot_size` (bytes), and the file as
//! the body unless `streaming` is other than `true` (Java's `parseBoolean`: any case).
//! Where zlock differs: a refusal's `error` field says why (ZooKeeper's is null), and the
//! file is zlock's backup format, not ZooKeeper's snapshot (`zlock snapshot status`
//! reads it).
//!
//! What it costs the server: the image is taken under the core's lock in O(1) (the tree
//! and the sessions are persistent maps, only the lock waiters are copied), then encoded
//! on a blocking thread while writes go on. The encoded file is held in memory while it
//! is sent.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_DISPOSITION};
use hyper::{Request, StatusCode};
use tokio::sync::oneshot;

use super::context::{ask, json, Context};
use super::json::Fields;
use crate::http::{with_type, Reply};
use crate::pipeline::Item;
use crate::ServerConfig;

/// ZooKeeper's response header names.
const LAST_ZXID: HeaderName = HeaderName::from_static("last_zxid");
const SNAPSHOT_SIZE: HeaderName = HeaderName::from_static("snapshot_size");

/// Answers `snapshot`; `out` holds the command's name.
pub(super) async fn answer(req: &Request<Incoming>, ctx: &Context, out: Fields) -> Reply {
    let refuse = |mut out: Fields, status: StatusCode, why: &str| {
        out.insert("error".into(), why.into());
        json(status, out)
    };
    if !ctx.config.admin.snapshot_enabled {
        return refuse(
            out,
            StatusCode::SERVICE_UNAVAILABLE,
            "Snapshot command is disabled (admin.snapshot.enabled=false)",
        );
    }
    if !super::context::let_through(ctx, &ctx.last_snapshot) {
        ctx.stats
            .snapshots_rate_limited
            .fetch_add(1, Ordering::Relaxed);
        return refuse(
            out,
            StatusCode::TOO_MANY_REQUESTS,
            "Snapshot request was rate limited (admin.rateLimiterIntervalInMS)",
        );
    }
    let (tx, rx) = oneshot::channel();
    let Some(image) = ask(ctx, Item::Image { done: tx }, rx).await else {
        ctx.stats.snapshot_errors.fetch_add(1, Ordering::Relaxed);
        return refuse(
            out,
            StatusCode::INTERNAL_SERVER_ERROR,
            "This ZooKeeper instance is not currently serving requests",
        );
    };
    let source = source(&ctx.config);
    let Ok((header, file)) =
        tokio::task::spawn_blocking(move || crate::backup::to_vec(&image, &source)).await
    else {
        ctx.stats.snapshot_errors.fetch_add(1, Ordering::Relaxed);
        return refuse(
            out,
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the snapshot failed",
        );
    };
    tracing::info!(zxid = %format_args!("0x{:x}", header.zxid), bytes = file.len(), nodes = header.nodes, "snapshot taken for the admin server");
    let size = file.len();
    let body = match streaming(req) {
        true => Bytes::from(file),
        false => Bytes::new(),
    };
    let mut r = with_type(StatusCode::OK, body, "application/octet-stream");
    let h = r.headers_mut();
    let zxid = format!("0x{:x}", header.zxid);
    if let Ok(v) = HeaderValue::from_str(&zxid) {
        h.insert(LAST_ZXID, v);
    }
    h.insert(SNAPSHOT_SIZE, HeaderValue::from(size));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"zlock-{zxid}.snapshot\""))
    {
        h.insert(CONTENT_DISPOSITION, v);
    }
    r
}

/// `?streaming=...`: true unless given and not `true` in any case (Java's
/// `Boolean.parseBoolean`, as ZooKeeper reads it).
fn streaming(req: &Request<Incoming>) -> bool {
    req.uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('='))
        .rfind(|(k, _)| *k == "streaming")
        .is_none_or(|(_, v)| v.eq_ignore_ascii_case("true"))
}

/// Which server and ensemble a backup comes from, for its header.
fn source(cfg: &ServerConfig) -> String {
    match &cfg.ensemble {
        None => format!("standalone server, dataDir {}", cfg.data_dir.display()),
        Some(e) => format!("member {} of ensemble {}", e.me, e.member_lines()),
    }
}
