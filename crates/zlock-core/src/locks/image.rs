//! The replicated part of the lock index, as a snapshot keeps it: the followed lock
//! paths, their native waiters, and their lock-delays (the delay each entry asked for,
//! and the hold running on a path). The entries themselves are the lock paths' children,
//! which the snapshot's tree holds already, so restoring follows each path again
//! (rebuilding its queue from the tree) and puts each waiter back on its entry.

use std::sync::Arc;

use zlock_proto::lock_order::{Mode, QueueKey};

use super::{child_path, LockIndex, Waiter};
use crate::state::State;
use crate::tree::SessionId;

/// A native waiter not granted yet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PendingWaiter {
    /// The full path of its node.
    pub node: String,
    pub session: SessionId,
    pub mode: Mode,
}

/// One waiter in a [`LockImage`]: the name of its node under the lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedWaiter {
    pub name: Box<str>,
    pub session: SessionId,
    pub mode: Mode,
}

/// One followed lock path in a [`LockImage`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedLock {
    pub path: Arc<str>,
    /// Its native waiters, in queue order.
    pub waiters: Vec<SavedWaiter>,
    /// The Txn time a running lock-delay ends at, if one runs.
    pub held_until: Option<i64>,
    /// The entries that asked for a lock-delay: (node name, ms), in queue order.
    pub delays: Vec<(Box<str>, i64)>,
}

/// The followed lock paths, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockImage {
    pub locks: Vec<SavedLock>,
}

/// Why a [`LockImage`] does not fit the tree it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreError {
    /// A followed lock path that is not in the tree.
    NoLockPath(String),
    /// A waiter or a lock-delay whose node is not an entry of its lock path.
    NoEntry(String),
}

/// The byte [`Mode`] is written as in a snapshot, and the lease count it carries.
pub fn mode_parts(mode: Mode) -> (u8, usize) {
    match mode {
        Mode::Exclusive => (0, 1),
        Mode::Read => (1, 1),
        Mode::Semaphore(n) => (2, n),
    }
}

/// The inverse of [`mode_parts`]; `None` for an unknown byte or no leases.
pub fn mode_of_parts(kind: u8, leases: usize) -> Option<Mode> {
    match (kind, leases) {
        (0, _) => Some(Mode::Exclusive),
        (1, _) => Some(Mode::Read),
        (2, n) if n >= 1 => Some(Mode::Semaphore(n)),
        _ => None,
    }
}

impl LockIndex {
    /// What a snapshot keeps of the index.
    pub fn image(&self) -> LockImage {
        let mut locks: Vec<SavedLock> = self
            .queues
            .iter()
            .map(|(lock, q)| {
                let waiters = q
                    .entries
                    .iter()
                    .filter_map(|(key, e)| {
                        e.waiter.as_ref().map(|w| SavedWaiter {
                            name: key.name().into(),
                            session: w.session,
                            mode: w.mode,
                        })
                    })
                    .collect();
                let delays = q
                    .entries
                    .iter()
                    .filter(|(_, e)| e.delay_ms > 0)
                    .map(|(key, e)| (key.name().into(), e.delay_ms))
                    .collect();
                SavedLock {
                    path: lock.clone(),
                    waiters,
                    held_until: q.held_until,
                    delays,
                }
            })
            .collect();
        locks.sort_by(|a, b| a.path.cmp(&b.path));
        LockImage { locks }
    }

    /// Every native waiter not granted yet, sorted.
    pub fn pending(&self) -> Vec<PendingWaiter> {
        let mut v: Vec<PendingWaiter> = self
            .queues
            .iter()
            .flat_map(|(lock, q)| {
                q.entries.iter().filter_map(move |(key, e)| {
                    e.waiter.as_ref().map(|w| PendingWaiter {
                        node: child_path(lock, key.name()),
                        session: w.session,
                        mode: w.mode,
                    })
                })
            })
            .collect();
        v.sort();
        v
    }
}

impl State {
    /// Follows the lock paths of `image` again and puts its waiters back, on a state
    /// whose tree is already loaded and whose index is empty.
    pub(crate) fn restore_locks(&mut self, image: LockImage) -> Result<(), RestoreError> {
        for saved in image.locks {
            let SavedLock {
                path: lock,
                waiters,
                held_until,
                delays,
            } = saved;
            if !self.tree.contains(&lock) {
                return Err(RestoreError::NoLockPath(lock.to_string()));
            }
            let lock = self.follow(&lock);
            let Some(q) = self.locks.queues.get_mut(&lock) else {
                return Err(RestoreError::NoLockPath(lock.to_string()));
            };
            for w in waiters {
                let entry = QueueKey::of(w.name.clone()).and_then(|k| q.entries.get_mut(&k));
                let Some(e) = entry else {
                    return Err(RestoreError::NoEntry(child_path(&lock, &w.name)));
                };
                // Only a bound on how far a settle walks: any value covering every
                // waiter's leases gives the same grants.
                q.max_leases = q.max_leases.max(w.mode.leases());
                e.waiter = Some(Waiter {
                    session: w.session,
                    mode: w.mode,
                });
            }
            for (name, delay_ms) in delays {
                let entry = QueueKey::of(name.clone()).and_then(|k| q.entries.get_mut(&k));
                let Some(e) = entry else {
                    return Err(RestoreError::NoEntry(child_path(&lock, &name)));
                };
                e.delay_ms = delay_ms;
            }
            if let Some(until) = held_until {
                q.held_until = Some(until);
                self.locks.holds.insert((until, lock.clone()));
            }
        }
        Ok(())
    }
}
