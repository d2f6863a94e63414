//! One acquire API for every lock recipe: a recipe says how one contender gets its
//! guard within a [`Wait`]; [`Lock`] turns that into `acquire`, `try_acquire` and
//! `acquire_timeout`, and the builder methods shared by the recipes.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::{Guard, Held};
use super::metrics::LockMetrics;
use crate::{Error, Result};

/// How long an acquire may wait.
#[derive(Clone, Copy)]
pub enum Wait {
    /// Only what is free now (`try_acquire`).
    No,
    Forever,
    Until(Instant),
}

/// A lock recipe: how one acquire runs. Implemented by [`Mutex`](super::Mutex),
/// [`ReadLock`](super::ReadLock), [`WriteLock`](super::WriteLock),
/// [`Semaphore`](super::Semaphore) and [`NaiveLock`](super::NaiveLock) (through
/// [`Lock`]); not for implementing outside this crate.
pub trait Recipe: Send + Sync {
    /// What a guard of this recipe holds.
    type Held: Held;

    /// One acquire: the guard, or `None` when `wait` ran out (no node left behind).
    /// `Wait::Forever` ends with a guard or an error.
    fn contend(&self, wait: Wait)
        -> impl Future<Output = Result<Option<Guard<Self::Held>>>> + Send;
}

/// What a recipe's builder methods set, carried down to every acquire (and, on the
/// native path, to the request: [`super::native::request`]).
#[derive(Clone)]
pub struct Options {
    /// Where acquires and releases are counted (None: nowhere).
    pub(crate) metrics: Option<LockMetrics>,
    /// The lock-delay asked for (None: the server's default).
    pub(crate) lock_delay: Option<Duration>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            metrics: Some(LockMetrics::global().clone()),
            lock_delay: None,
        }
    }
}

/// A recipe whose [`Options`] its builder methods set.
pub trait Tunable: Recipe {
    #[doc(hidden)]
    fn options_mut(&mut self) -> &mut Options;
}

/// A lock recipe on one path; [`Mutex`](super::Mutex), [`ReadLock`](super::ReadLock),
/// [`WriteLock`](super::WriteLock), [`Semaphore`](super::Semaphore) and
/// [`NaiveLock`](super::NaiveLock) are its kinds.
#[derive(Clone)]
pub struct Lock<R> {
    pub(crate) recipe: R,
}

impl<R: Recipe> Lock<R> {
    /// Waits for the lock.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] / [`Error::Closed`] if the session ends while waiting;
    /// `Server(NoNode)` if this contender's node vanished; other server errors (e.g.
    /// `NoAuth`).
    ///
    /// # Cancellation safety
    /// Dropping the future removes whatever node it had made (through a spawned task).
    pub async fn acquire(&self) -> Result<Guard<R::Held>> {
        self.recipe
            .contend(Wait::Forever)
            .await?
            .ok_or_else(|| Error::Protocol("lock acquire ended without the lock".into()))
    }

    /// Takes the lock only if it is free now (or already held by this instance, for
    /// the reentrant recipes); otherwise removes its node and returns `None`.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<Guard<R::Held>>> {
        self.recipe.contend(Wait::No).await
    }

    /// Waits at most `timeout` for the lock; `None` (and no node left behind) if it
    /// did not come.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Guard<R::Held>>> {
        self.recipe
            .contend(Wait::Until(Instant::now() + timeout))
            .await
    }
}

impl<R: Tunable> Lock<R> {
    /// Reports acquires and releases to `metrics` instead of the global sink.
    pub fn with_metrics(mut self, metrics: LockMetrics) -> Self {
        self.recipe.options_mut().metrics = Some(metrics);
        self
    }

    /// Reports nowhere.
    pub fn without_metrics(mut self) -> Self {
        self.recipe.options_mut().metrics = None;
        self
    }

    /// Asks for a lock-delay (Chubby's): if this holder's session ends while it holds,
    /// without a release (it expired, or was closed), the server grants the lock to no
    /// one until `delay` has passed, so that a holder that was merely paused has time to
    /// see [`Guard::lost`] and stop before anyone else acts under the lock. A release
    /// hands over at once. Without this the server's default applies
    /// (`zlock.lockDelayMs`, 0 unless configured); `Duration::ZERO` asks for none.
    ///
    /// Only a zlock server's native lock holds a lock back: an acquire that would take
    /// the standard recipe (Apache ZooKeeper, [`LockPath::Recipe`](crate::LockPath),
    /// several semaphore leases at once) fails with [`Error::LockDelayUnsupported`]
    /// rather than lock without it. Standard-recipe contenders of other clients on the
    /// same path (Curator, kazoo) are not held back. At most 60 s
    /// ([`MAX_LOCK_DELAY_MS`](zlock_proto::records::MAX_LOCK_DELAY_MS)); more is
    /// refused by the server with `Server(BadArguments)`.
    pub fn with_lock_delay(mut self, delay: Duration) -> Self {
        self.recipe.options_mut().lock_delay = Some(delay);
        self
    }
}
