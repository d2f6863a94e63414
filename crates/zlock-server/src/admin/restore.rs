//! ZooKeeper 3.9's `restore` command (alias `rest`): `POST <commandURL>/restore` with a
//! backup file (`zlock snapshot save`, the `snapshot` command) as the body, on a single
//! node: the server serves the backup's state instead of its own.
//!
//! As ZooKeeper 3.9 answers it (`Commands.RestoreCommand`): credentials always (ALL on
//! `/`: 401, 403); `admin.restore.enabled=false`, 503; more than one per
//! `admin.rateLimiterIntervalInMS`, 429 (`restore_rate_limited_count`); no body or a
//! body that is not a whole backup, 400; a failure, 500 (`restore_error_count`); done,
//! 200 with `last_zxid`. Where zlock differs: a member of an ensemble refuses it (400,
//! saying how: restoring one member in place would make it diverge from the others;
//! `zlock snapshot restore` on every member of a new ensemble restores an ensemble),
//! and what the restored server serves is `crate::restore`'s: no session (every client
//! connection is closed; a client that reconnects gets SessionExpired), the zxid moved
//! to the next epoch. The swap itself is `Core::restore`: after everything sequenced
//! before it is applied, the restored state is written as the snapshot of the current
//! log position (durably, older snapshots removed) and then served.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use tokio::sync::oneshot;

use super::context::{ask_within, json, Context};
use super::json::Fields;
use crate::http::Reply;
use crate::pipeline::Item;

/// The largest backup a request may carry.
pub const MAX_BODY: usize = 1 << 30;

/// How long the restore may take once the file is read (writing a large snapshot).
const PATIENCE: Duration = Duration::from_secs(600);

/// Answers `restore`; `out` holds the command's name.
pub(super) async fn answer(req: Request<Incoming>, ctx: &Context, mut out: Fields) -> Reply {
    let stats = &ctx.stats;
    let refuse = |mut out: Fields, status: StatusCode, why: &str| {
        out.insert("error".into(), why.into());
        json(status, out)
    };
    if !ctx.config.admin.restore_enabled {
        return refuse(
            out,
            StatusCode::SERVICE_UNAVAILABLE,
            "Restore command is disabled (admin.restore.enabled=false)",
        );
    }
    if ctx.config.ensemble.is_some() {
        return refuse(
            out,
            StatusCode::BAD_REQUEST,
            "a member of a running ensemble is not restored in place (it would diverge \
             from the others): restore every member of a new ensemble with `zlock snapshot \
             restore FILE --data-dir D --myid N --config zoo.cfg`, then start them",
        );
    }
    if !super::context::let_through(ctx, &ctx.last_restore) {
        stats.restores_rate_limited.fetch_add(1, Ordering::Relaxed);
        return refuse(
            out,
            StatusCode::TOO_MANY_REQUESTS,
            "Restore request was rate limited (admin.rateLimiterIntervalInMS)",
        );
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            stats.restore_errors.fetch_add(1, Ordering::Relaxed);
            return refuse(
                out,
                StatusCode::BAD_REQUEST,
                &format!("reading the backup from the request failed: {e}"),
            );
        }
    };
    if body.is_empty() {
        stats.restore_errors.fetch_add(1, Ordering::Relaxed);
        return refuse(
            out,
            StatusCode::BAD_REQUEST,
            "no backup in the request body (send the file as the POST body)",
        );
    }
    let config = zlock_core::Config {
        extended_types: ctx.config.extended_types,
    };
    let prepared =
        tokio::task::spawn_blocking(move || crate::restore::prepare(&body, config, None)).await;
    let p = match prepared {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            stats.restore_errors.fetch_add(1, Ordering::Relaxed);
            return refuse(
                out,
                StatusCode::BAD_REQUEST,
                &format!("the body is not a whole zlock backup: {e}"),
            );
        }
        Err(_) => {
            stats.restore_errors.fetch_add(1, Ordering::Relaxed);
            return refuse(
                out,
                StatusCode::INTERNAL_SERVER_ERROR,
                "decoding the backup failed",
            );
        }
    };
    let (tx, rx) = oneshot::channel();
    let item = Item::Restore {
        state: Box::new(p.state),
        done: tx,
    };
    match ask_within(ctx, item, rx, PATIENCE).await {
        Some(Ok(zxid)) => {
            tracing::warn!(from = %p.header.source, backup_zxid = %format_args!("0x{:x}", p.header.zxid), zxid = %format_args!("0x{zxid:x}"), "restored from a backup sent to the admin server");
            out.insert("error".into(), serde_json::Value::Null);
            out.insert("last_zxid".into(), zxid.into());
            json(StatusCode::OK, out)
        }
        Some(Err(why)) => {
            stats.restore_errors.fetch_add(1, Ordering::Relaxed);
            refuse(out, StatusCode::INTERNAL_SERVER_ERROR, &why)
        }
        None => {
            stats.restore_errors.fetch_add(1, Ordering::Relaxed);
            refuse(
                out,
                StatusCode::INTERNAL_SERVER_ERROR,
                "This ZooKeeper instance is not currently serving requests",
            )
        }
    }
}
