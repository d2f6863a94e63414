//! Lock recipes built on [`Client`](crate::Client).
//!
//! - [`Mutex`]: the fair lock (Curator's `InterProcessMutex`): one ephemeral sequential
//!   node per contender, each waiter watches only its predecessor, FIFO hand-over,
//!   reentrant per `Mutex` instance, fencing tokens, a "lock may be lost" future.
//! - [`ReadWriteLock`]: Curator's `InterProcessReadWriteLock`: shared readers, an
//!   exclusive writer, one fair queue for both, reentrant per instance, downgrade.
//! - [`Semaphore`]: Curator's `InterProcessSemaphoreV2`: at most `max_leases`
//!   [`Lease`]s at once, acquirers serialised by an internal [`Mutex`].
//! - [`LeaderLatch`]: Curator's `LeaderLatch`: exactly one leader among the started
//!   latches, leadership as a `watch` stream.
//! - [`NaiveLock`]: every contender races to create one ephemeral node; kept for
//!   comparison (herd effect, no fairness).
//! - [`LockMetrics`]: client-side counters and a wait-time histogram, fed by
//!   `Mutex`, `ReadWriteLock` and `Semaphore` (to [`LockMetrics::global`] by
//!   default).
//!
//! The sequential-node recipes share one driver (`driver.rs`): protected creates
//! (`_c_<guid>-`) found again by GUID after a lost reply, cleanup of a cancelled or
//! timed-out acquire's node, the per-instance reentrant hold, and the `lost()` future.
//!
//! Against a zlock server the client takes zlock's native lock path
//! ([`Client::lock_native`](crate::Client::lock_native)) for `Mutex`, `ReadWriteLock`
//! and single `Semaphore` leases: the same nodes, made and granted in one round trip,
//! the grant pushed by the server (no listing, no watch). Against Apache ZooKeeper, or
//! with [`LockPath::Recipe`](crate::LockPath::Recipe), the recipes above run as
//! described. Both kinds of contender share one queue.

mod driver;
mod leader_latch;
mod metrics;
mod mutex;
mod naive;
mod rwlock;
mod semaphore;

pub use leader_latch::LeaderLatch;
pub use metrics::{LockMetrics, LockMetricsSnapshot};
pub use mutex::{Mutex, MutexGuard};
pub use naive::{NaiveGuard, NaiveLock};
pub use rwlock::{ReadLock, ReadWriteGuard, ReadWriteLock, WriteLock};
pub use semaphore::{Lease, Semaphore};

use std::time::Duration;

use crate::{Client, ConnectionState, CreateMode, Error, ErrorCode, Result};

/// Creates every missing ancestor of `node` (not `node` itself) as a container, as
/// Curator's `creatingParentContainersIfNeeded` does. The server may reap an empty
/// ancestor container between two steps (`NoNode`): then it starts again from the top.
pub(crate) async fn create_parents(client: &Client, node: &str) -> Result<()> {
    let Some(end) = node.rfind('/') else {
        return Ok(());
    };
    const ATTEMPTS: usize = 100;
    'again: for _ in 0..ATTEMPTS {
        let mut cur = String::new();
        for seg in node[..end].split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            loop {
                match client.create(&cur, b"", CreateMode::Container).await {
                    Ok(_) | Err(Error::Server(ErrorCode::NodeExists)) => break,
                    Err(Error::ConnectionLoss) => continue,
                    Err(Error::Server(ErrorCode::NoNode)) => continue 'again,
                    Err(e) => return Err(e),
                }
            }
        }
        return Ok(());
    }
    Err(Error::Server(ErrorCode::NoNode))
}

/// Deletes `path`, retrying on connection loss; a missing node is success.
pub(crate) async fn delete_node(client: &Client, path: &str) -> Result<()> {
    loop {
        match client.delete(path, -1).await {
            Ok(()) | Err(Error::Server(ErrorCode::NoNode)) => return Ok(()),
            Err(Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Releases `path` without waiting: the delete is queued at once, so it goes before
/// anything this client sends next (a drop followed by a new acquire travels in the same
/// write, and the acquire does not queue behind the old node). A task on the current
/// tokio runtime, if there is one, retries it after a connection loss.
pub(crate) fn spawn_delete(client: Client, path: String) {
    let req = zlock_proto::Request::Delete(zlock_proto::records::DeleteRequest {
        path: path.clone(),
        version: -1,
    });
    let first = client.send(&req);
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let r = match first.await {
            Ok((h, _)) if h.err == 0 || h.err == ErrorCode::NoNode.code() => Ok(()),
            Ok((h, _)) => Err(Error::from_code(h.err)),
            Err(Error::ConnectionLoss) => delete_node(&client, &path).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            tracing::debug!("releasing {path}: {e}");
        }
    });
}

/// Resolves when the session behind `client` may no longer hold what it created:
/// the connection has stayed [`ConnectionState::Suspended`] for `window`, or the
/// state is [`ConnectionState::Lost`] or [`ConnectionState::Closed`]. Returns that state.
pub(crate) async fn session_in_doubt(client: Client, window: Duration) -> ConnectionState {
    let mut state = client.state_stream();
    loop {
        let now = *state.borrow_and_update();
        match now {
            ConnectionState::Lost | ConnectionState::Closed => return now,
            ConnectionState::Suspended => {
                tokio::select! {
                    () = tokio::time::sleep(window) => return now,
                    r = state.changed() => if r.is_err() { return ConnectionState::Closed },
                }
            }
            ConnectionState::Connected | ConnectionState::Reconnected => {
                if state.changed().await.is_err() {
                    return ConnectionState::Closed;
                }
            }
        }
    }
}

/// The default safe window: a third of the negotiated session timeout. A suspension
/// is usually noticed some time after the server last heard from us, so past this the
/// server may be close to expiring the session.
pub(crate) fn default_window(client: &Client) -> Duration {
    let ms = u64::try_from(client.session_timeout_ms()).unwrap_or(0) / 3;
    Duration::from_millis(ms)
}
