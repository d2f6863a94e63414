//! A read-only view of the lock index for operators (the admin server's `locks`
//! command): every followed lock path, its entries in queue order, and who holds, who
//! waits. Nothing here changes the index.

use std::sync::Arc;

use zlock_proto::lock_order::Mode;

use super::LockIndex;
use crate::tree::SessionId;

/// Where an entry of a lock path's queue stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A native request of this session waits for its grant, in this mode.
    Waiting(Mode),
    /// Nothing before it blocks it (by the exclusive rule for a writer entry, the read
    /// rule for a read entry): it holds. A granted native entry is here, and so is a
    /// standard-recipe contender (Curator, kazoo) whose turn has come.
    Holds,
    /// Not a native waiter, and blocked by the exclusive or read rule: a
    /// standard-recipe contender that waits on its own watch, or a semaphore lease
    /// (the index keeps no mode once a native entry is granted, so a lease beyond the
    /// first is shown here although it holds).
    Queued,
}

/// One node under a followed lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryView {
    /// Its name under the lock path.
    pub name: Box<str>,
    /// Its ephemeral owner (0 for a persistent node).
    pub owner: SessionId,
    /// A read node (the read side of a read-write lock).
    pub read: bool,
    pub standing: Standing,
    /// The lock-delay its native request asked for, ms (0: none).
    pub delay_ms: i64,
}

/// One followed lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockView {
    pub path: Arc<str>,
    /// In queue order.
    pub entries: Vec<EntryView>,
    /// A running lock-delay grants nothing on this path until this Txn time, ms.
    pub held_until: Option<i64>,
}

impl LockIndex {
    /// Every followed lock path, sorted, with its entries in queue order.
    pub fn view(&self) -> Vec<LockView> {
        let mut v: Vec<LockView> = self
            .queues
            .iter()
            .map(|(path, q)| {
                let mut writers_before = 0;
                let entries = q
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(before, (key, e))| {
                        let standing = match &e.waiter {
                            Some(w) => Standing::Waiting(w.mode),
                            None => {
                                let rule = if e.read { Mode::Read } else { Mode::Exclusive };
                                if rule.may_hold(before, writers_before) {
                                    Standing::Holds
                                } else {
                                    Standing::Queued
                                }
                            }
                        };
                        writers_before += usize::from(!e.read);
                        EntryView {
                            name: key.name().into(),
                            owner: e.owner,
                            read: e.read,
                            standing,
                            delay_ms: e.delay_ms,
                        }
                    })
                    .collect();
                LockView {
                    path: path.clone(),
                    entries,
                    held_until: q.held_until,
                }
            })
            .collect();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }
}
