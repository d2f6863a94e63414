//! zlock's native lock for the recipes: the one place a recipe's [`LockRequest`] is
//! built, and one contender's request, RESUME after a lost reply, and wait for the
//! pushed grant.

use zlock_proto::lock_order::Mode;

use super::acquire::{Options, Wait};
use super::protected::{node_prefix, Pending};
use zlock_proto::records::LOCK_DELAY_SERVER_DEFAULT;

use crate::{lock_flags, lock_mode, Acl, Client, Error, LockRequest, NativeLock, Result};

/// The native lock request for a protected node `<path>/_c_<guid>-<marker>NNNNNNNNNN`
/// queued under `mode`, deleting `release` (a node of ours under `path`, "" for none)
/// in the same commit.
pub(crate) fn request(
    path: &str,
    guid: &str,
    marker: &str,
    mode: Mode,
    options: &Options,
    release: String,
) -> LockRequest {
    // Every option is looked at here: one added to `Options` does not compile until it
    // says what it does to the request.
    let Options {
        metrics: _,
        lock_delay,
    } = options;
    let (mode, leases) = match mode {
        Mode::Exclusive => (lock_mode::EXCLUSIVE, 1),
        Mode::Read => (lock_mode::READ, 1),
        Mode::Semaphore(n) => (lock_mode::SEMAPHORE, i32::try_from(n).unwrap_or(i32::MAX)),
    };
    LockRequest {
        path: path.to_owned(),
        prefix: node_prefix(guid, marker),
        data: Some(Vec::new()),
        acl: Acl::open_unsafe(),
        mode,
        leases,
        flags: 0,
        release,
        lock_delay_ms: lock_delay.map_or(LOCK_DELAY_SERVER_DEFAULT, |d| {
            i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
        }),
    }
}

/// One contender through zlock's native lock: sends `req` for `pending`'s node (TRY
/// when `wait` is [`Wait::No`]), asks again with RESUME after a lost reply (the server
/// finds the node by its GUID), then waits for the pushed grant as `wait` allows. The
/// node and its czxid once held (`pending` disarmed); `None` when busy or out of time
/// (the node removed).
pub(crate) async fn contend(
    client: &Client,
    pending: &mut Pending,
    mut req: LockRequest,
    wait: Wait,
) -> Result<Option<(String, i64)>> {
    if matches!(wait, Wait::No) {
        req.flags |= lock_flags::TRY;
    }
    let answer = loop {
        match client.lock_native(req.clone()).await {
            Ok(a) => break a,
            Err(Error::ConnectionLoss) => req.flags |= lock_flags::RESUME,
            Err(e) => return Err(e),
        }
    };
    let held = match answer {
        NativeLock::Granted { node, czxid } => (node, czxid),
        NativeLock::Busy => return Ok(None),
        NativeLock::Queued { node, grant, .. } => {
            pending.node = Some(node);
            let g = match wait {
                Wait::Until(d) => match tokio::time::timeout_at(d, grant).await {
                    Ok(r) => r?,
                    Err(_) => return pending.remove().await.map(|()| None),
                },
                Wait::No | Wait::Forever => grant.await?,
            };
            (g.node, g.czxid)
        }
    };
    pending.disarm();
    Ok(Some(held))
}
