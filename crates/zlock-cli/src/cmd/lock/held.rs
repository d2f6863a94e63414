//! What `zlock lock` holds while the command runs: the exclusive lock, the read side
//! of the read-write lock, or one lease of a semaphore, behind one type.
//!
//! # Exclusive and shared on one path
//! The exclusive mode is `recipes::Mutex` (node `_c_<guid>-lock-N`), the shared mode
//! the read side of `recipes::ReadWriteLock` (`_c_<guid>-__READ__N`). Both are
//! sequential children of the same lock path, so they stand in one queue
//! ([`zlock_proto::lock_order`], applied alike by the recipes and by the server's
//! native lock): a reader is blocked by any earlier node that is not a read node (a
//! mutex node counts as a writer), and a mutex node by any earlier node at all. So a
//! plain `zlock lock` already excludes `--shared` holders and the other way round,
//! and the write side of the read-write lock is not needed; the Mutex keeps its node
//! names, which Curator's `InterProcessMutex` on the same path recognises
//! (`tests/it/lock_cli.rs` checks the exclusion both ways).
//!
//! A semaphore keeps its nodes under `<path>/leases` (and `<path>/locks`), so it is
//! its own queue: it does not exclude, nor is excluded by, the other two modes on the
//! same path.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use zlock::recipes::{Lease, Mutex, MutexGuard, ReadWriteGuard, ReadWriteLock, Semaphore};
use zlock::{Client, ConnectionState};

/// Which lock `zlock lock` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `recipes::Mutex` (the default).
    Exclusive,
    /// The read side of `recipes::ReadWriteLock` (`--shared`).
    Shared,
    /// One lease of `recipes::Semaphore` with this many leases (`--semaphore N`).
    Semaphore(usize),
}

/// How long to wait for the lock.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// `--no-wait`: take it only if it is free now.
    No,
    /// `--timeout`.
    Within(Duration),
    Forever,
}

/// A held lock of any [`Kind`].
pub enum Held {
    Exclusive(MutexGuard),
    Shared(ReadWriteGuard),
    Lease(Lease),
}

/// A boxed `lost()` future: the three kinds' futures are of different types.
pub type Lost = Pin<Box<dyn Future<Output = ConnectionState> + Send + 'static>>;

impl Held {
    /// The node held (the lease node for a semaphore).
    pub fn node(&self) -> &str {
        match self {
            Held::Exclusive(g) => g.node(),
            Held::Shared(g) => g.node(),
            Held::Lease(l) => l.node(),
        }
    }

    /// The node's czxid: the fencing token for the exclusive lock; for the shared and
    /// semaphore modes it grows as well, but several holders exist at once.
    pub fn fencing_token(&self) -> i64 {
        match self {
            Held::Exclusive(g) => g.fencing_token(),
            Held::Shared(g) => g.fencing_token(),
            Held::Lease(l) => l.fencing_token(),
        }
    }

    /// Resolves when the hold may be lost: the session is lost, or the connection has
    /// been suspended for a third of the session timeout (the recipes' safe window).
    pub fn lost(&self) -> Lost {
        match self {
            Held::Exclusive(g) => Box::pin(g.lost()),
            Held::Shared(g) => Box::pin(g.lost()),
            Held::Lease(l) => Box::pin(l.lost()),
        }
    }

    /// Deletes the node (awaited).
    ///
    /// # Errors
    /// The delete's error other than `NoNode`.
    pub async fn release(self) -> zlock::Result<()> {
        match self {
            Held::Exclusive(g) => g.release().await,
            Held::Shared(g) => g.release().await,
            Held::Lease(l) => l.release().await,
        }
    }
}

/// Takes the lock of `kind` on `path`, with `lock_delay` asked for if given; `None`
/// when `wait` ran out (or, for [`Wait::No`], the lock is busy), with no node left
/// behind.
///
/// # Errors
/// The recipe's errors (session lost while waiting, server errors,
/// `LockDelayUnsupported` for a lock-delay the server cannot keep).
///
/// # Cancellation safety
/// As the recipes': a dropped acquire removes its node through a spawned task. The
/// caller closes the session afterwards anyway, which removes it for certain.
pub async fn acquire(
    client: &Client,
    path: &str,
    kind: Kind,
    wait: Wait,
    lock_delay: Option<Duration>,
) -> zlock::Result<Option<Held>> {
    match kind {
        Kind::Exclusive => {
            let mut m = Mutex::new(client.clone(), path);
            if let Some(d) = lock_delay {
                m = m.with_lock_delay(d);
            }
            let g = match wait {
                Wait::No => m.try_acquire().await?,
                Wait::Within(d) => m.acquire_timeout(d).await?,
                Wait::Forever => Some(m.acquire().await?),
            };
            Ok(g.map(Held::Exclusive))
        }
        Kind::Shared => {
            let mut rw = ReadWriteLock::new(client.clone(), path);
            if let Some(d) = lock_delay {
                rw = rw.with_lock_delay(d);
            }
            let r = rw.read_lock();
            let g = match wait {
                Wait::No => r.try_acquire().await?,
                Wait::Within(d) => r.acquire_timeout(d).await?,
                Wait::Forever => Some(r.acquire().await?),
            };
            Ok(g.map(Held::Shared))
        }
        Kind::Semaphore(n) => {
            let mut s = Semaphore::new(client.clone(), path, n);
            if let Some(d) = lock_delay {
                s = s.with_lock_delay(d);
            }
            let lease = match wait {
                Wait::No => s.try_acquire().await?,
                Wait::Within(d) => s.acquire_timeout(d).await?,
                Wait::Forever => Some(s.acquire().await?),
            };
            Ok(lease.map(Held::Lease))
        }
    }
}
