//! The naive lock: one ephemeral node that everyone races to create.

use super::acquire::{Lock, Recipe, Wait};
use super::guard::{Guard, Held, HeldNode};
use super::nodes::create_parents;
use crate::{Client, CreateMode, Error, ErrorCode, Result};

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
pub type NaiveLock = Lock<Naive>;

/// Proof of holding a [`NaiveLock`]; released by [`Guard::release`] or on drop.
pub type NaiveGuard = Guard<NaiveNode>;

/// The naive lock's recipe (see [`NaiveLock`]).
#[derive(Clone)]
pub struct Naive {
    client: Client,
    node: String,
}

impl Lock<Naive> {
    /// A lock whose node is `<lock_path>/lock`.
    pub fn new(client: Client, lock_path: &str) -> NaiveLock {
        let node = format!("{}/lock", lock_path.trim_end_matches('/'));
        Lock {
            recipe: Naive { client, node },
        }
    }
}

impl Recipe for Naive {
    type Held = NaiveNode;

    async fn contend(&self, wait: Wait) -> Result<Option<NaiveGuard>> {
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
                return Ok(Some(self.guard(czxid)));
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
                return Ok(Some(self.guard(stat.czxid)));
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

impl Naive {
    fn guard(&self, czxid: i64) -> NaiveGuard {
        let node = HeldNode {
            client: self.client.clone(),
            path: self.node.clone(),
            czxid,
        };
        Guard::new(NaiveNode(node), None)
    }
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

/// What a [`NaiveGuard`] holds: the lock node as this holder created it.
pub struct NaiveNode(HeldNode);

impl Held for NaiveNode {
    fn held_node(&self) -> &HeldNode {
        &self.0
    }

    async fn release(&mut self) -> Result<()> {
        let HeldNode {
            client,
            path,
            czxid,
        } = &self.0;
        release_own(client, path, *czxid).await
    }

    fn release_on_drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.0.client.clone();
        let node = std::mem::take(&mut self.0.path);
        let czxid = self.0.czxid;
        rt.spawn(async move {
            let _ = release_own(&client, &node, czxid).await;
        });
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
