//! The read-write lock: Curator's `InterProcessReadWriteLock` recipe.

use std::sync::Arc;

use zlock_proto::lock_order;

use super::acquire::{Lock, Options, Recipe, Wait};
use super::core::LockCore;
use super::guard::Guard;
use super::hold::Hold;
use super::metrics::LockMetrics;
use super::order::{first_holds, no_writer_before, Decision};
use crate::{Client, Result};

/// Curator's marker of a read node: `_c_<guid>-__READ__NNNNNNNNNN`.
const READ_NAME: &str = lock_order::READ_MARKER;
/// Curator's marker of a write node: `_c_<guid>-__WRIT__NNNNNNNNNN`.
const WRITE_NAME: &str = "__WRIT__";

/// A fair, distributed, reentrant read-write lock with the semantics and node names
/// of Apache Curator's `InterProcessReadWriteLock`, so Curator clients and zlock
/// clients on one path exclude each other.
///
/// # Algorithm
/// Readers and writers queue as ephemeral sequential nodes under the lock path:
/// `_c_<guid>-__WRIT__NNNNNNNNNN` and `_c_<guid>-__READ__NNNNNNNNNN`, sorted by the
/// sequence suffix.
/// - A writer holds when its node is first of all; a waiting writer watches its
///   immediate predecessor (of either kind).
/// - A reader holds when no write node precedes it; a waiting reader watches the last
///   write node before it. Any node that is not a read node counts as a write node
///   here (a Curator mutex node, kazoo's, a native one): the order and this rule are
///   [`zlock_proto::lock_order`]'s, which the zlock server's native lock shares. (Curator's reader watches the *first* one; both are
///   correct, watching the last one just wakes the reader once instead of once per
///   writer ahead. Which node a contender watches does not matter to the others, so
///   the two interoperate.)
///
/// So readers share, a writer excludes everyone, and the queue is fair: a writer
/// queued behind readers blocks the readers that come after it.
///
/// # Guarantees
/// - While every holder's session lives: a write holder excludes every other holder;
///   read holders exclude writers only.
/// - A crashed holder's node goes with its session.
/// - [`Guard::fencing_token`] is the node's creation zxid. Write tokens are
///   strictly increasing across write holders; a read token is greater than the token
///   of every write that finished before the read was queued.
/// - Reentrant per [`ReadWriteLock`] instance and side, as [`Mutex`](super::Mutex):
///   a second `read_lock().acquire()` on an instance that holds the read lock returns
///   at once with a guard on the same node (same for the write lock).
/// - Downgrade: an instance holding the write lock may take the read lock; the read
///   node is granted at once (Curator's rule). Release the write guard afterwards and
///   the instance keeps reading, ahead of writers that queued meanwhile.
/// - Upgrade is **not** supported (nor is it in Curator): asking for the write lock
///   while the same instance holds the read lock waits for that read node, i.e.
///   forever (`acquire_timeout` returns `None`). Release the read lock first.
///
/// # Connection loss and session expiry
/// As [`Mutex`](super::Mutex): a create whose reply is lost is found again by its
/// GUID; a waiter's watch survives a reconnect; a lost session fails the acquire with
/// [`Error::SessionExpired`](crate::Error::SessionExpired); a holder learns that its hold may be gone through
/// [`Guard::lost`].
///
/// # Cancellation safety
/// As [`Mutex`](super::Mutex): a dropped acquire removes its node (through a spawned
/// task), a timed-out `acquire_timeout` and a failed `try_acquire` remove theirs
/// before returning, and a dropped guard releases through a spawned task.
///
/// # Metrics
/// Both sides report to [`LockMetrics::global`] unless
/// [`ReadWriteLock::with_metrics`] says otherwise.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use std::time::Duration;
/// use zlock::{recipes::ReadWriteLock, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let lock = ReadWriteLock::new(zk.clone(), "/locks/catalog");
///
/// let read = lock.read_lock().acquire().await?; // shared with other readers
/// read.release().await?;
///
/// if let Some(write) = lock.write_lock().acquire_timeout(Duration::from_secs(2)).await? {
///     let _token = write.fencing_token(); // pass it to the protected resource
///     write.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct ReadWriteLock {
    read: ReadLock,
    write: WriteLock,
}

impl ReadWriteLock {
    /// A read-write lock on `lock_path` (its children are the contenders' nodes).
    pub fn new(client: Client, lock_path: &str) -> ReadWriteLock {
        let write = LockCore::new(client.clone(), lock_path, WRITE_NAME);
        let read = LockCore::new(client, lock_path, READ_NAME);
        ReadWriteLock {
            read: Lock {
                recipe: ReadSide {
                    core: read,
                    write: Arc::clone(&write),
                    options: Options::default(),
                },
            },
            write: Lock {
                recipe: WriteSide {
                    core: write,
                    options: Options::default(),
                },
            },
        }
    }

    /// Reports both sides' acquires and releases to `metrics` instead of the global
    /// sink.
    pub fn with_metrics(mut self, metrics: LockMetrics) -> ReadWriteLock {
        self.read.recipe.options.metrics = Some(metrics.clone());
        self.write.recipe.options.metrics = Some(metrics);
        self
    }

    /// Reports nowhere.
    pub fn without_metrics(mut self) -> ReadWriteLock {
        self.read.recipe.options.metrics = None;
        self.write.recipe.options.metrics = None;
        self
    }

    /// Asks both sides for a lock-delay, as [`Lock::with_lock_delay`]: a holder whose
    /// session ends without a release holds the whole lock path back for `delay`.
    pub fn with_lock_delay(mut self, delay: std::time::Duration) -> ReadWriteLock {
        self.read.recipe.options.lock_delay = Some(delay);
        self.write.recipe.options.lock_delay = Some(delay);
        self
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.write.recipe.core.path
    }

    /// The shared side: [`Lock::try_acquire`] takes it only if no writer holds or
    /// waits ahead now.
    pub fn read_lock(&self) -> &ReadLock {
        &self.read
    }

    /// The exclusive side: [`Lock::try_acquire`] takes it only if nobody holds or
    /// waits ahead now.
    pub fn write_lock(&self) -> &WriteLock {
        &self.write
    }
}

/// The shared side of a [`ReadWriteLock`].
pub type ReadLock = Lock<ReadSide>;

/// The exclusive side of a [`ReadWriteLock`].
pub type WriteLock = Lock<WriteSide>;

/// Proof of holding one side of a [`ReadWriteLock`]. Released by [`Guard::release`]
/// or on drop (the node is deleted when the last guard of that side of the owning
/// instance goes).
pub type ReadWriteGuard = Guard<Hold<ReadWriteLock>>;

/// The read side's recipe (see [`ReadWriteLock`]).
pub struct ReadSide {
    core: Arc<LockCore>,
    /// The same instance's write side: holding it grants the read lock at once.
    write: Arc<LockCore>,
    options: Options,
}

/// The write side's recipe (see [`ReadWriteLock`]).
pub struct WriteSide {
    core: Arc<LockCore>,
    options: Options,
}

impl Recipe for ReadSide {
    type Held = Hold<ReadWriteLock>;

    async fn contend(&self, wait: Wait) -> Result<Option<ReadWriteGuard>> {
        let write = &self.write;
        let rule = |sorted: &[String], idx: usize| {
            if write.holds.is_held() {
                return Decision::Hold; // downgrade
            }
            no_writer_before(sorted, idx)
        };
        // The server does not know our write node is ours: a downgrade keeps to the
        // recipe, whose rule does.
        let native_ok = !write.holds.is_held();
        self.core
            .acquire(wait, &rule, &self.options, native_ok)
            .await
    }
}

impl Recipe for WriteSide {
    type Held = Hold<ReadWriteLock>;

    async fn contend(&self, wait: Wait) -> Result<Option<ReadWriteGuard>> {
        self.core
            .acquire(wait, &first_holds, &self.options, true)
            .await
    }
}

impl ReadWriteGuard {
    /// Whether this is the write side's guard.
    pub fn is_write(&self) -> bool {
        self.node().contains(WRITE_NAME)
    }
}
