//! The naive lock: one ephemeral node that everyone races to create.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{create_parents, default_window, session_in_doubt};
use crate::{Client, ConnectionState, CreateMode, Error, ErrorCode, Result};

/// The simplest ZooKeeper lock: every contender tries to create the same ephemeral
/// node `<lock_path>/lock`; the one that succeeds holds the lock, the others set an
/// exists watch on it and all retry when it is deleted.
///
/// Kept for comparison and teaching. Prefer [`Mutex`](super::Mutex):
/// - **Herd effect**: each release wakes *every* waiter (one watch notification per
///   waiter), and all of them send a create at once, of which one succeeds; with `n`
///   waiters a release costs `n` notifications and `n` creates instead of one.
/// - **Unfair**: the winner of each race is arbitrary, so a waiter can starve.
/// - **Not reentrant**: a second acquire by the holder waits for itself (use
///   `try_acquire` or `Mutex` instead).
///
/// Guarantees: mutual exclusion while the holder's session lives; a crashed holder's
/// node goes with its session. A create whose reply was lost is recognised by the
/// node's ephemeral owner being this session. A lost session fails a waiting acquire
/// with [`Error::SessionExpired`]. Cancellation: a dropped acquire that had already
/// created the node spawns its deletion; a guard dropped releases through a spawned
/// task.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use zlock::{recipes::NaiveLock, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let lock = NaiveLock::new(zk, "/locks/naive");
/// let guard = lock.acquire().await?;
/// // critical section
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NaiveLock {
    client: Client,
    node: String,
}

impl NaiveLock {
    /// A lock whose node is `<lock_path>/lock`.
    pub fn new(client: Client, lock_path: &str) -> NaiveLock {
        let node = format!("{}/lock", lock_path.trim_end_matches('/'));
        NaiveLock { client, node }
    }

    /// Waits for the lock.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] / [`Error::Closed`] if the session ends while waiting;
    /// other server errors.
    pub async fn acquire(&self) -> Result<NaiveGuard> {
        match self.acquire_inner(Wait::Forever).await? {
            Some(g) => Ok(g),
            None => Err(Error::Protocol(
                "lock acquire ended without the lock".into(),
            )),
        }
    }

    /// Takes the lock if nobody holds it now.
    ///
    /// # Errors
    /// As [`NaiveLock::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<NaiveGuard>> {
        self.acquire_inner(Wait::No).await
    }

    /// Waits at most `timeout` for the lock.
    ///
    /// # Errors
    /// As [`NaiveLock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<NaiveGuard>> {
        self.acquire_inner(Wait::Until(Instant::now() + timeout))
            .await
    }

    async fn acquire_inner(&self, wait: Wait) -> Result<Option<NaiveGuard>> {
        let client = &self.client;
        let mut pending = PendingCreate {
            client: client.clone(),
            node: self.node.clone(),
            armed: true,
        };
        loop {
            let created = match client.create(&self.node, b"", CreateMode::Ephemeral).await {
                Ok((_, stat)) => Some(stat.czxid),
                Err(Error::Server(ErrorCode::NoNode)) => {
                    create_parents(client, &self.node).await?;
                    continue;
                }
                Err(Error::Server(ErrorCode::NodeExists)) => None,
                Err(Error::ConnectionLoss) => None, // ours or not: the exists below tells
                Err(e) => return Err(e),
            };
            if let Some(czxid) = created {
                pending.armed = false;
                return Ok(Some(NaiveGuard {
                    client: client.clone(),
                    node: self.node.clone(),
                    czxid,
                    released: false,
                }));
            }
            let (stat, watcher) = match client.exists_watch(&self.node).await {
                Ok(r) => r,
                Err(Error::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            };
            let Some(stat) = stat else {
                continue;
            };
            if stat.ephemeral_owner == client.session_id() {
                // Our create went through but its reply was lost.
                pending.armed = false;
                return Ok(Some(NaiveGuard {
                    client: client.clone(),
                    node: self.node.clone(),
                    czxid: stat.czxid,
                    released: false,
                }));
            }
            match wait {
                Wait::No => {
                    pending.armed = false;
                    return Ok(None);
                }
                Wait::Until(d) => match tokio::time::timeout_at(d, watcher).await {
                    Ok(r) => {
                        r?;
                    }
                    Err(_) => {
                        pending.armed = false;
                        return Ok(None);
                    }
                },
                Wait::Forever => {
                    watcher.await?;
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Wait {
    No,
    Forever,
    Until(Instant),
}

/// While an acquire is unsettled, dropping it removes the node if this session owns it.
struct PendingCreate {
    client: Client,
    node: String,
    armed: bool,
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let node = std::mem::take(&mut self.node);
        rt.spawn(async move {
            if let Ok(Some(stat)) = client.exists(&node, false).await {
                if stat.ephemeral_owner == client.session_id() {
                    let _ = client.delete(&node, stat.version).await;
                }
            }
        });
    }
}

/// Proof of holding a [`NaiveLock`]; released by [`NaiveGuard::release`] or on drop.
#[must_use = "dropping the guard releases the lock"]
pub struct NaiveGuard {
    client: Client,
    node: String,
    czxid: i64,
    released: bool,
}

impl std::fmt::Debug for NaiveGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaiveGuard")
            .field("node", &self.node)
            .field("fencing_token", &self.czxid)
            .finish()
    }
}

impl NaiveGuard {
    /// The lock node's creation zxid (strictly increasing across holders).
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// As [`MutexGuard::lost`](super::MutexGuard::lost).
    pub fn lost(&self) -> impl Future<Output = ConnectionState> + Send + 'static {
        let client = self.client.clone();
        let window = default_window(&client);
        session_in_doubt(client, window)
    }

    /// Deletes the lock node.
    ///
    /// # Errors
    /// The delete's error other than `NoNode`.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        release_own(&self.client, &self.node, self.czxid).await
    }
}

impl Drop for NaiveGuard {
    fn drop(&mut self) {
        if !self.released {
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let client = self.client.clone();
            let node = std::mem::take(&mut self.node);
            let czxid = self.czxid;
            rt.spawn(async move {
                let _ = release_own(&client, &node, czxid).await;
            });
        }
    }
}

/// Deletes the lock node only if it is still the one this holder created (the same
/// name is reused by every holder, so a blind delete could remove a successor's).
async fn release_own(client: &Client, node: &str, czxid: i64) -> Result<()> {
    loop {
        match client.exists(node, false).await {
            Ok(Some(stat)) if stat.czxid == czxid => {
                match client.delete(node, stat.version).await {
                    Ok(()) | Err(Error::Server(ErrorCode::NoNode | ErrorCode::BadVersion)) => {
                        return Ok(())
                    }
                    Err(Error::ConnectionLoss) => continue,
                    Err(e) => return Err(e),
                }
            }
            Ok(_) => return Ok(()),
            Err(Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        }
    }
}
