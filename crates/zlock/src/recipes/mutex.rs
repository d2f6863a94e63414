//! The fair lock: Curator's `InterProcessMutex` recipe.

use std::sync::Arc;

use super::acquire::{Lock, Options, Recipe, Tunable, Wait};
use super::core::LockCore;
use super::guard::{Guard, Held};
use super::hold::Hold;
use super::nodes::delete_node;
use super::order::first_holds;
use crate::{CheckVersionRequest, Client, DeleteRequest, Error, MultiOp, MultiResult, Result};

/// The part of a node name after which the sequence number follows (Curator's).
const LOCK_NAME: &str = "lock-";

/// A fair, distributed, reentrant lock with the semantics of Apache Curator's
/// `InterProcessMutex`, and node names Curator recognises, so Curator clients and
/// zlock clients contending on one path exclude each other.
///
/// # Algorithm
/// Each acquire creates an ephemeral sequential node
/// `<lock_path>/_c_<guid>-lock-NNNNNNNNNN` (parents are created as containers if
/// missing), lists the children and holds the lock if its node has the lowest sequence
/// number (the queue order of [`zlock_proto::lock_order`], shared with the server's
/// native lock: by the sequence suffix, ignoring the prefix). Otherwise it
/// watches only the node just before its own and re-checks when that one goes. A
/// release deletes one node and wakes exactly one waiter; waiters get the lock in the
/// order they queued (FIFO).
///
/// # Guarantees
/// - Mutual exclusion among all sessions using this recipe (or Curator's) on one path,
///   as long as each holder's session is alive.
/// - A holder that crashes releases when its session expires (its node is ephemeral).
/// - [`Guard::fencing_token`] is the lock node's creation zxid: strictly increasing
///   across all holders of the lock, so a protected resource can refuse a stale holder.
/// - Reentrant per `Mutex` instance: while one of its guards is alive, another acquire
///   on the same instance (from any task) returns at once with a new guard on the same
///   node; the node is deleted when the last guard is released. Two `Mutex` instances
///   on the same path (even in one process, with one [`Client`]) exclude each other.
///
/// # Connection loss and session expiry
/// - A create whose reply is lost (`ConnectionLoss`) is retried after looking for the
///   node by its GUID among the children, so no orphan node blocks everyone.
/// - While waiting, the predecessor's watch survives a reconnect (the client
///   re-registers it); a lost session fails the acquire with
///   [`Error::SessionExpired`].
/// - While holding, the lock is safe as long as the session lives. Use
///   [`Guard::lost`] to learn when it may not be: the connection has been
///   suspended longer than the safe window, or the session is lost.
///
/// # Cancellation safety
/// Dropping an `acquire` future (or an `acquire_timeout` that timed out) removes its
/// node: a cleanup task is spawned that deletes it, or, if the create was still in
/// flight, finds it by its GUID and deletes it. A timed-out `acquire_timeout` and a
/// failed `try_acquire` delete their node before returning. Dropping a
/// [`MutexGuard`] releases it through a spawned task; prefer [`Guard::release`]
/// to know when the lock is free.
///
/// # Metrics
/// Acquires and releases are counted on [`LockMetrics::global`](super::LockMetrics::global) unless
/// [`Lock::with_metrics`] or [`Lock::without_metrics`] says otherwise.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use std::time::Duration;
/// use zlock::{recipes::Mutex, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let lock = Mutex::new(zk.clone(), "/locks/orders");
/// let guard = lock.acquire().await?;
/// let token = guard.fencing_token(); // pass it to the protected resource
/// let lost = guard.lost();
/// tokio::select! {
///     () = async { /* critical section using `token` */ } => {}
///     state = lost => eprintln!("lock may be lost ({state:?}), stopping"),
/// }
/// guard.release().await?;
///
/// if let Some(g) = lock.acquire_timeout(Duration::from_secs(2)).await? {
///     g.release().await?;
/// }
/// # Ok(()) }
/// ```
pub type Mutex = Lock<Fair>;

/// Proof of holding a [`Mutex`]. Released by [`Guard::release`] or on drop (the
/// node is deleted when the last guard of the owning `Mutex` instance goes).
pub type MutexGuard = Guard<Hold<Fair>>;

/// The fair lock's recipe (see [`Mutex`]).
pub struct Fair {
    core: Arc<LockCore>,
    options: Options,
}

impl Recipe for Fair {
    type Held = Hold<Fair>;

    async fn contend(&self, wait: Wait) -> Result<Option<MutexGuard>> {
        self.core
            .acquire(wait, &first_holds, &self.options, true)
            .await
    }
}

impl Tunable for Fair {
    fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }
}

impl Lock<Fair> {
    /// A lock on `lock_path` (its children are the contenders' nodes).
    pub fn new(client: Client, lock_path: &str) -> Mutex {
        Lock {
            recipe: Fair {
                core: LockCore::new(client, lock_path, LOCK_NAME),
                options: Options::default(),
            },
        }
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.recipe.core.path
    }

    /// Releases `guard` and queues for the lock again: for a client that takes the lock
    /// in turns with others. If others wait, they go first (FIFO); alone, it holds again
    /// at once with a new node and a higher fencing token. On the native path this is
    /// one request: the server deletes the old node, grants the next waiter and creates
    /// the new node in one commit (one round trip, one fsync, where a release and an
    /// acquire take two of each). Elsewhere it is `release` then `acquire`.
    ///
    /// # Errors
    /// As [`Lock::acquire`]. `guard` must come from this `Mutex`.
    ///
    /// ```no_run
    /// # async fn demo(lock: zlock::Mutex) -> Result<(), zlock::Error> {
    /// let mut guard = lock.acquire().await?;
    /// for _job in 0..10 {
    ///     // ... one unit of work under the lock ...
    ///     guard = lock.reacquire(guard).await?; // let the others have a turn
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn reacquire(&self, guard: MutexGuard) -> Result<MutexGuard> {
        let fair = &self.recipe;
        fair.core
            .reacquire(guard, &first_holds, &fair.options)
            .await
    }
}

impl MutexGuard {
    /// Applies `ops` (a ZooKeeper multi) only while this lock is still held: the server
    /// checks in the same transaction that the lock node exists, so a holder whose
    /// session was lost (node gone, someone else may hold now) writes nothing. The
    /// results of `ops`.
    ///
    /// # Errors
    /// `Server(NoNode)` if the lock node is gone; otherwise the code of the op that
    /// failed (nothing was applied), or the client's errors.
    ///
    /// ```no_run
    /// # async fn demo(guard: &zlock::MutexGuard) -> Result<(), zlock::Error> {
    /// use zlock::{MultiOp, SetDataRequest};
    /// let set = MultiOp::SetData(SetDataRequest {
    ///     path: "/orders/next".into(),
    ///     data: Some(b"42".to_vec()),
    ///     version: -1,
    /// });
    /// guard.fenced(vec![set]).await?; // written only if we still hold the lock
    /// # Ok(()) }
    /// ```
    pub async fn fenced(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(MultiOp::Check(CheckVersionRequest {
            path: self.node().to_owned(),
            version: -1,
        }));
        all.extend(ops);
        let mut rs = multi_checked(&self.held.held_node().client, all).await?;
        rs.remove(0);
        Ok(rs)
    }

    /// Applies `ops` and releases the lock in one transaction (`[ops..., delete(lock
    /// node)]`): the write is fenced like [`MutexGuard::fenced`] and costs no extra round
    /// trip. On failure nothing of `ops` is applied and the lock is released anyway.
    /// While other guards of this `Mutex` instance share the hold, the lock stays held
    /// and this is [`MutexGuard::fenced`].
    ///
    /// # Errors
    /// As [`MutexGuard::fenced`].
    pub async fn release_with(mut self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        self.settle();
        let Some(node) = self.held.unhold() else {
            return self.fenced(ops).await;
        };
        let n = ops.len();
        let mut all = ops;
        all.push(MultiOp::Delete(DeleteRequest {
            path: node.clone(),
            version: -1,
        }));
        let client = &self.held.held_node().client;
        match multi_checked(client, all).await {
            Ok(mut rs) => {
                rs.truncate(n);
                Ok(rs)
            }
            Err(e) => {
                // Released whatever happened to the writes.
                delete_node(client, &node).await?;
                Err(e)
            }
        }
    }
}

/// A multi whose failure (the first op's error code, as ZooKeeper reports it) is an
/// `Err`.
async fn multi_checked(client: &Client, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
    let rs = client.multi(ops).await?;
    let failed = rs.iter().find_map(|r| match r {
        MultiResult::Error(code) if *code != 0 => Some(*code),
        _ => None,
    });
    match failed {
        Some(code) => Err(Error::from_code(code)),
        None => Ok(rs),
    }
}
