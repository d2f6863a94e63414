//! The recent hand-overs of every lock, for operators (the admin server's `locks` and
//! the dashboard): when the first contender of a lock's queue went (a release, its
//! session's end), who was first after it.
//!
//! A lock here is a path the native index follows, or the parent of a standard recipe's
//! contenders (Curator's, kazoo's, ZooKeeper's own `lock-`, see [`recipe_contender`]):
//! a service that locks with Curator never touches the native index, and its hand-overs
//! are the ones an operator looks for first. "First" is the queue order of
//! [`zlock_proto::lock_order`]; for a mutex that is the holder.
//!
//! Recorded at apply time, from the Txns, so every member records the same ones, at
//! the Txn's time and zxid. Member-local all the same: bounded to the last
//! [`HISTORY`], never logged and never snapshotted, so a restarted member shows only
//! what it applied since (the log suffix it replays included). A multi that fails
//! records nothing ([`State::multi`] drops what it noted).
//!
//! The cost, paid only when a contender's node is removed: on a followed path, a look
//! at the front of its queue (O(log n)); on a recipe's path, one pass over the parent's
//! children, which the recipe's own getChildren pays on every hand-over anyway.

use std::collections::VecDeque;
use std::sync::Arc;

use zlock_proto::lock_order;

use crate::path;
use crate::state::State;
use crate::tree::SessionId;

/// How many hand-overs a member keeps.
pub const HISTORY: usize = 100;

/// One hand-over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// The lock path.
    pub path: Arc<str>,
    /// The Txn that removed the first contender.
    pub zxid: i64,
    /// That Txn's time (ms since the epoch).
    pub time_ms: i64,
    /// The contender that went: its node's name and its ephemeral owner (0 for a
    /// persistent node).
    pub from: (Box<str>, SessionId),
    /// The contender first after it, if any (`None`: the lock is free).
    pub to: Option<(Box<str>, SessionId)>,
}

/// A hand-over seen while a Txn applies, before the Txn's time is known to it.
#[derive(Debug, Clone)]
struct Noted {
    path: Arc<str>,
    zxid: i64,
    from: (Box<str>, SessionId),
    to: Option<(Box<str>, SessionId)>,
}

/// The last [`HISTORY`] hand-overs, and those of the Txn being applied.
#[derive(Debug, Clone, Default)]
pub struct Handovers {
    recent: VecDeque<Handover>,
    noted: Vec<Noted>,
}

impl Handovers {
    /// Newest first.
    pub fn recent(&self) -> impl Iterator<Item = &Handover> {
        self.recent.iter().rev()
    }

    /// A position in the current Txn's notes, for [`Handovers::forget_since`].
    pub(crate) fn mark(&self) -> usize {
        self.noted.len()
    }

    /// Drops what was noted since `mark` (a multi that failed changed nothing).
    pub(crate) fn forget_since(&mut self, mark: usize) {
        self.noted.truncate(mark);
    }

    /// Keeps the current Txn's notes, at its time.
    pub(crate) fn settle(&mut self, time_ms: i64) {
        for n in self.noted.drain(..) {
            if self.recent.len() == HISTORY {
                self.recent.pop_front();
            }
            self.recent.push_back(Handover {
                path: n.path,
                zxid: n.zxid,
                time_ms,
                from: n.from,
                to: n.to,
            });
        }
    }
}

/// Is `name` a standard lock recipe's contender: a sequence number after one of the
/// recipes' lock names? Curator's `_c_<uuid>-lock-`, `-__READ__`, `-__WRIT__` and
/// `-lease-`, kazoo's `<uuid>__lock__` and `__rlock__`, and the plain `lock-` of
/// ZooKeeper's own recipe and the seeds'. Other ephemeral sequential nodes (a service
/// registry's instances, a leader latch's candidates) are no lock.
pub fn recipe_contender(name: &str) -> bool {
    let Some(seq) = lock_order::sequence(name) else {
        return false;
    };
    // The suffix as ZooKeeper writes it (`%010d`): ten characters, eleven for a counter
    // wrapped below -999,999,999.
    let digits = if seq >= -999_999_999 { 10 } else { 11 };
    let prefix = &name[..name.len().saturating_sub(digits)];
    [
        "lock-",
        "__lock__",
        "__rlock__",
        "__READ__",
        "__WRIT__",
        "-lease-",
    ]
    .iter()
    .any(|m| prefix.ends_with(m))
}

/// A name's place in its queue, without building a [`lock_order::QueueKey`].
fn order(name: &str) -> Option<(u32, &str)> {
    lock_order::sequence(name).map(|s| (s as u32, name))
}

impl State {
    /// Notes a hand-over if `p`, just removed from the tree (its ephemeral owner
    /// `owner`), was first in its lock's queue. The native index still holds it (it
    /// takes the Txn's changes after the Txn), so a followed path's queue shows it first.
    pub(crate) fn note_handover(&mut self, p: &str, owner: SessionId, zxid: i64) {
        let Some((lock, name)) = p.rsplit_once('/') else {
            return;
        };
        let lock = if lock.is_empty() { "/" } else { lock };
        let (lock, next) = if let Some((key, q)) = self.locks.queues.get_key_value(lock) {
            let mut front = q.entries.iter();
            match front.next() {
                Some((k, _)) if k.name() == name => {}
                _ => return,
            }
            let next = front.next().map(|(k, e)| (k.name().into(), e.owner));
            (key.clone(), next)
        } else {
            if owner == SessionId::NONE || !recipe_contender(name) {
                return;
            }
            let Some(mine) = order(name) else { return };
            let Some(parent) = self.tree.get(lock) else {
                return;
            };
            let mut first: Option<(u32, &str)> = None;
            for c in parent.children.iter() {
                if !recipe_contender(c) {
                    continue;
                }
                let Some(o) = order(c) else { continue };
                if o < mine {
                    return;
                }
                if first.is_none_or(|f| o < f) {
                    first = Some(o);
                }
            }
            let next = first.map(|(_, n)| {
                let owner = self
                    .tree
                    .get(&path::join(lock, n))
                    .map_or(SessionId::NONE, |c| c.kind.ephemeral_owner());
                (Box::<str>::from(n), owner)
            });
            (Arc::from(lock), next)
        };
        self.handovers.noted.push(Noted {
            path: lock,
            zxid,
            from: (name.into(), owner),
            to: next,
        });
    }
}
