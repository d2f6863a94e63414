//! The fair lock: Curator's `InterProcessMutex` recipe.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::driver::{first_holds, Hold, LockCore, Wait};
use super::metrics::LockMetrics;
use crate::{Client, ConnectionState, Error, MultiOp, MultiResult, Result};

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
/// - [`MutexGuard::fencing_token`] is the lock node's creation zxid: strictly increasing
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
///   [`MutexGuard::lost`] to learn when it may not be: the connection has been
///   suspended longer than the safe window, or the session is lost.
///
/// # Cancellation safety
/// Dropping an `acquire` future (or an `acquire_timeout` that timed out) removes its
/// node: a cleanup task is spawned that deletes it, or, if the create was still in
/// flight, finds it by its GUID and deletes it. A timed-out `acquire_timeout` and a
/// failed `try_acquire` delete their node before returning. Dropping a
/// [`MutexGuard`] releases it through a spawned task; prefer [`MutexGuard::release`]
/// to know when the lock is free.
///
/// # Metrics
/// Acquires and releases are counted on [`LockMetrics::global`] unless
/// [`Mutex::with_metrics`] or [`Mutex::without_metrics`] says otherwise.
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
pub struct Mutex {
    core: Arc<LockCore>,
    metrics: Option<LockMetrics>,
}

impl Mutex {
    /// A lock on `lock_path` (its children are the contenders' nodes).
    pub fn new(client: Client, lock_path: &str) -> Mutex {
        Mutex {
            core: LockCore::new(client, lock_path, LOCK_NAME),
            metrics: Some(LockMetrics::global().clone()),
        }
    }

    /// Reports acquires and releases to `metrics` instead of the global sink.
    pub fn with_metrics(mut self, metrics: LockMetrics) -> Mutex {
        self.metrics = Some(metrics);
        self
    }

    /// Reports nowhere.
    pub fn without_metrics(mut self) -> Mutex {
        self.metrics = None;
        self
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.core.path
    }

    /// Waits for the lock.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] / [`Error::Closed`] if the session ends while waiting;
    /// `Server(NoNode)` if this contender's node vanished; other server errors (e.g.
    /// `NoAuth`).
    pub async fn acquire(&self) -> Result<MutexGuard> {
        match self.acquire_inner(Wait::Forever).await? {
            Some(g) => Ok(g),
            None => Err(Error::Protocol(
                "lock acquire ended without the lock".into(),
            )),
        }
    }

    /// Takes the lock only if it is free now (or already held by this instance);
    /// otherwise removes its node and returns `None`.
    ///
    /// # Errors
    /// As [`Mutex::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        self.acquire_inner(Wait::No).await
    }

    /// Waits at most `timeout` for the lock; `None` (and no node left behind) if it
    /// did not come.
    ///
    /// # Errors
    /// As [`Mutex::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        self.acquire_inner(Wait::Until(Instant::now() + timeout))
            .await
    }

    /// Releases `guard` and queues for the lock again: for a client that takes the lock
    /// in turns with others. If others wait, they go first (FIFO); alone, it holds again
    /// at once with a new node and a higher fencing token. On the native path this is
    /// one request: the server deletes the old node, grants the next waiter and creates
    /// the new node in one commit (one round trip, one fsync, where a release and an
    /// acquire take two of each). Elsewhere it is `release` then `acquire`.
    ///
    /// # Errors
    /// As [`Mutex::acquire`]. `guard` must come from this `Mutex`.
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
        let hold = self
            .core
            .reacquire(guard.hold, &first_holds, self.metrics.as_ref())
            .await?;
        Ok(MutexGuard { hold })
    }

    pub(crate) async fn acquire_inner(&self, wait: Wait) -> Result<Option<MutexGuard>> {
        let hold = self
            .core
            .acquire(wait, &first_holds, self.metrics.as_ref())
            .await?;
        Ok(hold.map(|hold| MutexGuard { hold }))
    }
}

/// Proof of holding a [`Mutex`]. Released by [`MutexGuard::release`] or on drop (the
/// node is deleted when the last guard of the owning `Mutex` instance goes).
#[must_use = "dropping the guard releases the lock"]
pub struct MutexGuard {
    hold: Hold,
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("node", &self.hold.node())
            .field("fencing_token", &self.hold.fencing_token())
            .finish()
    }
}

impl MutexGuard {
    /// The lock node's creation zxid: strictly increasing across all holders of the
    /// lock. Reentrant guards of one hold share it.
    pub fn fencing_token(&self) -> i64 {
        self.hold.fencing_token()
    }

    /// The path of the lock node held.
    pub fn node(&self) -> &str {
        self.hold.node()
    }

    /// Resolves when the lock may be lost: the connection has stayed Suspended for
    /// the safe window (a third of the session timeout), or the session is Lost or
    /// the client Closed. Returns that state. A holder should stop its critical
    /// section when it fires. Cancellation safe; independent of the guard's lifetime.
    pub fn lost(&self) -> impl Future<Output = ConnectionState> + Send + 'static {
        self.hold.lost()
    }

    /// As [`MutexGuard::lost`] with a chosen window (`Duration::ZERO`: fire as soon as
    /// the connection is suspended, the most conservative choice).
    pub fn lost_after(
        &self,
        window: Duration,
    ) -> impl Future<Output = ConnectionState> + Send + 'static {
        self.hold.lost_after(window)
    }

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
        self.hold.fenced(ops).await
    }

    /// Applies `ops` and releases the lock in one transaction (`[ops..., delete(lock
    /// node)]`): the write is fenced like [`MutexGuard::fenced`] and costs no extra round
    /// trip. On failure nothing of `ops` is applied and the lock is released anyway.
    /// While other guards of this `Mutex` instance share the hold, the lock stays held
    /// and this is [`MutexGuard::fenced`].
    ///
    /// # Errors
    /// As [`MutexGuard::fenced`].
    pub async fn release_with(self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        self.hold.release_with(ops).await
    }

    /// Releases this guard; the node is deleted (and awaited) when it was the last
    /// guard of the hold.
    ///
    /// # Errors
    /// The delete's error other than `NoNode` (e.g. [`Error::SessionExpired`], in which
    /// case the node is gone with the session anyway).
    pub async fn release(self) -> Result<()> {
        self.hold.release().await
    }
}
