//! The native lock: one request creates a contender's ephemeral sequential node and says
//! whether it holds; a waiter is told in the commit that removes the last node blocking
//! it. No getChildren, no watch, one message per hand-over.
//!
//! The index follows each lock path that a native request has named: its children by
//! sequence number (the 10-digit suffix, as Curator sorts them), which are read nodes
//! (`__READ__` in the name), and which belong to a waiting native session. Every node
//! under the path counts, whoever created it, so native contenders, Curator, kazoo and
//! the zlock recipes share one FIFO queue and one rule: a contender holds when nothing
//! before it blocks it ([`may_hold`]).
//!
//! After each Txn the queues that lost a node are walked from the front only as far as
//! a grant is still possible: for an exclusive lock that is its first entry, so a
//! hand-over costs O(log n) and one pushed grant however long the queue is.
//!
//! The index and the waiters are derived from the log like everything in [`State`], but
//! are not snapshotted: after a restart or a reconnect a waiter re-sends its request
//! with [`lock_flags::RESUME`], which finds its node again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use zlock_proto::records::{
    lock_flags, lock_mode, Acl, LockGrant, LockRequest, LockResponse, Stat,
};
use zlock_proto::{ErrorCode, OpCode, Record};

use crate::path;
use crate::state::{Reply, State};
use crate::tree::{LockChange, NodeKind, SessionId};
use crate::watches::Trigger;
use crate::write::{CreateArgs, Ctx};

/// A grant to push: the waiting session and what it now holds.
pub type Grant = (SessionId, LockGrant);

/// A session waiting for its node to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiter {
    session: SessionId,
    mode: i32,
    leases: usize,
}

/// One node under a lock path.
#[derive(Debug, Clone)]
struct Entry {
    read: bool,
    /// The ephemeral owner (0 for a persistent node).
    owner: SessionId,
    /// A native waiter not granted yet.
    waiter: Option<Waiter>,
}

impl Entry {
    fn new(name: &str, owner: SessionId) -> Entry {
        Entry {
            read: is_read(name),
            owner,
            waiter: None,
        }
    }
}

/// Entries are ordered by sequence number, then name (two nodes can only share a
/// number if one was created with a literal suffix).
type Key = (i64, Box<str>);

#[derive(Debug, Clone, Default)]
struct Queue {
    entries: BTreeMap<Key, Entry>,
    /// Entries that are not read nodes.
    writers: usize,
    /// The largest lease count a waiter of this queue asked for (1 for locks): past
    /// that many entries and a writer, nothing can be granted.
    max_leases: usize,
}

impl Queue {
    fn insert(&mut self, key: Key, entry: Entry) {
        let writer = !entry.read;
        if let Some(old) = self.entries.insert(key, entry) {
            if !old.read {
                self.writers -= 1;
            }
        }
        if writer {
            self.writers += 1;
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.entries.remove(key) {
            if !old.read {
                self.writers -= 1;
            }
        }
    }

    /// How many entries, and how many writers, come before `key`.
    fn before(&self, key: &Key) -> (usize, usize) {
        if self.entries.keys().next_back() == Some(key) {
            let me_writer = self.entries.get(key).is_some_and(|e| !e.read);
            return (
                self.entries.len() - 1,
                self.writers - usize::from(me_writer),
            );
        }
        let mut n = 0;
        let mut w = 0;
        for e in self.entries.range(..key.clone()).map(|(_, e)| e) {
            n += 1;
            w += usize::from(!e.read);
        }
        (n, w)
    }

    /// Grants every waiter that nothing blocks any more, walking from the front only
    /// while a grant is still possible.
    fn settle(&mut self, lock: &str, out: &mut Vec<(SessionId, String)>) {
        let mut writers_before = 0;
        for (before, ((_, name), e)) in self.entries.iter_mut().enumerate() {
            if writers_before > 0 && before >= self.max_leases.max(1) {
                break;
            }
            if let Some(w) = &e.waiter {
                if may_hold(w.mode, w.leases, before, writers_before) {
                    out.push((w.session, child_path(lock, name)));
                    e.waiter = None;
                }
            }
            writers_before += usize::from(!e.read);
        }
    }
}

/// Does a contender with `mode` hold, given the entries before it?
fn may_hold(mode: i32, leases: usize, before: usize, writers_before: usize) -> bool {
    match mode {
        lock_mode::READ => writers_before == 0,
        lock_mode::SEMAPHORE => before < leases,
        _ => before == 0,
    }
}

/// The sequence number of a contender's node: its last ten characters, as ZooKeeper
/// formats them (`%010d`, so a wrapped counter gives a negative number).
pub(crate) fn sequence(name: &str) -> Option<i64> {
    let tail = name.get(name.len().checked_sub(10)?..)?;
    tail.parse::<i32>().ok().map(i64::from)
}

fn is_read(name: &str) -> bool {
    name.contains("__READ__")
}

fn child_path(lock: &str, name: &str) -> String {
    if lock == "/" {
        format!("/{name}")
    } else {
        format!("{lock}/{name}")
    }
}

/// The queues of the lock paths native requests have named.
#[derive(Debug, Clone, Default)]
pub struct LockIndex {
    queues: HashMap<Arc<str>, Queue>,
}

impl LockIndex {
    /// Native waiters not granted yet, over all locks (for `mntr`).
    pub fn waiting(&self) -> usize {
        self.queues
            .values()
            .flat_map(|q| q.entries.values())
            .filter(|e| e.waiter.is_some())
            .count()
    }

    /// Lock paths followed.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

impl State {
    /// Folds the tree's changes under followed lock paths into the index, then queues
    /// the grants they unblocked (taken by [`State::apply`]). Called after every Txn.
    pub(crate) fn settle_locks(&mut self) {
        let changes = self.tree.take_lock_changes();
        if changes.is_empty() {
            return;
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        for c in changes {
            match c {
                LockChange::Added { lock, name, owner } => {
                    let Some(seq) = sequence(&name) else { continue };
                    if let Some(q) = self.locks.queues.get_mut(&lock) {
                        let e = Entry::new(&name, owner);
                        q.insert((seq, name), e);
                    }
                }
                LockChange::Removed { lock, name } => {
                    let Some(seq) = sequence(&name) else { continue };
                    if let Some(q) = self.locks.queues.get_mut(&lock) {
                        q.remove(&(seq, name));
                        if !touched.contains(&lock) {
                            touched.push(lock);
                        }
                    }
                }
                LockChange::Gone(lock) => {
                    self.locks.queues.remove(&lock);
                    touched.retain(|l| *l != lock);
                }
            }
        }
        let mut granted = Vec::new();
        for lock in touched {
            if let Some(q) = self.locks.queues.get_mut(&lock) {
                q.settle(&lock, &mut granted);
            }
        }
        for (session, node) in granted {
            let czxid = self.tree.get(&node).map_or(0, |n| n.czxid);
            self.lock_grants.push((session, LockGrant { node, czxid }));
        }
    }

    /// Starts following `lock`: its current children become the queue.
    fn follow(&mut self, lock: &str) -> Arc<str> {
        if let Some((k, _)) = self.locks.queues.get_key_value(lock) {
            return k.clone();
        }
        let key: Arc<str> = Arc::from(lock);
        let mut q = Queue {
            max_leases: 1,
            ..Queue::default()
        };
        if let Some(n) = self.tree.get(lock) {
            for name in &n.children {
                let Some(seq) = sequence(name) else { continue };
                let owner = self
                    .tree
                    .get(&child_path(lock, name))
                    .map_or(0, |c| c.kind.ephemeral_owner());
                q.insert((seq, name.clone()), Entry::new(name, owner));
            }
        }
        self.tree.follow_lock(key.clone());
        self.locks.queues.insert(key.clone(), q);
        key
    }

    /// The native lock request (see [`LockRequest`]).
    pub(crate) fn lock(&mut self, cx: &Ctx<'_>, r: &LockRequest, trig: &mut Vec<Trigger>) -> Reply {
        match self.lock_inner(cx, r, trig) {
            Ok(resp) => Reply::ok(resp.to_bytes()),
            Err(e) => Reply::error(e),
        }
    }

    fn lock_inner(
        &mut self,
        cx: &Ctx<'_>,
        r: &LockRequest,
        trig: &mut Vec<Trigger>,
    ) -> Result<LockResponse, ErrorCode> {
        path::validate(&r.path, false).map_err(|_| ErrorCode::BadArguments)?;
        if r.prefix.contains('/') || r.prefix.contains('\0') {
            return Err(ErrorCode::BadArguments);
        }
        let leases = match r.mode {
            lock_mode::EXCLUSIVE | lock_mode::READ | lock_mode::WRITE => 1,
            lock_mode::SEMAPHORE if r.leases >= 1 => r.leases as usize,
            _ => return Err(ErrorCode::BadArguments),
        };
        self.create_lock_path(cx, &r.path, trig)?;
        let lock = self.follow(&r.path);
        if !r.release.is_empty() {
            self.release_own(cx, &lock, &r.release, trig)?;
        }
        let waiter = Waiter {
            session: cx.session,
            mode: r.mode,
            leases,
        };

        if r.flags & lock_flags::RESUME != 0 {
            if let Some(resp) = self.resume(cx, &lock, r, &waiter, trig)? {
                return Ok(resp);
            }
        }
        if r.flags & lock_flags::TRY != 0 {
            let q = &self.locks.queues[&lock];
            let (n, w) = (q.entries.len(), q.writers);
            // A new node would come after every entry.
            if !may_hold(r.mode, leases, n, w) {
                return Ok(LockResponse {
                    node: String::new(),
                    czxid: 0,
                    granted: false,
                });
            }
        }
        let node_path = child_path(&lock, &r.prefix);
        let args = CreateArgs {
            path: &node_path,
            data: &r.data,
            acl: &r.acl,
            flags: 3, // EPHEMERAL_SEQUENTIAL
        };
        let (node, stat) = self.create(cx, OpCode::Create2, &args, -1, &mut None, trig)?;
        self.settle_locks();
        let name = &node[node.rfind('/').map_or(0, |i| i + 1)..];
        let Some(seq) = sequence(name) else {
            return Err(ErrorCode::SystemError);
        };
        let key = (seq, name.into());
        Ok(self.decide(&lock, key, waiter, node, &stat))
    }

    /// Answers whether the entry `key` holds; registers `waiter` on it if not.
    fn decide(
        &mut self,
        lock: &Arc<str>,
        key: Key,
        waiter: Waiter,
        node: String,
        stat: &Stat,
    ) -> LockResponse {
        let Some(q) = self.locks.queues.get_mut(lock) else {
            // Followed just before this call: cannot happen.
            return LockResponse {
                node,
                czxid: stat.czxid,
                granted: false,
            };
        };
        let (before, writers_before) = q.before(&key);
        let granted = may_hold(waiter.mode, waiter.leases, before, writers_before);
        if !granted {
            q.max_leases = q.max_leases.max(waiter.leases);
            if let Some(e) = q.entries.get_mut(&key) {
                e.waiter = Some(waiter);
            }
        }
        LockResponse {
            node,
            czxid: stat.czxid,
            granted,
        }
    }

    /// Deletes `node`, a node of this session directly under `lock` (gone already is
    /// fine), and grants what that unblocks, before the request's own node is made.
    fn release_own(
        &mut self,
        cx: &Ctx<'_>,
        lock: &Arc<str>,
        node: &str,
        trig: &mut Vec<Trigger>,
    ) -> Result<(), ErrorCode> {
        if path::parent(node) != &**lock {
            return Err(ErrorCode::BadArguments);
        }
        match self.tree.get(node).map(|n| n.kind) {
            None => return Ok(()),
            Some(NodeKind::Ephemeral(s)) if s == cx.session => {}
            Some(_) => return Err(ErrorCode::BadArguments),
        }
        self.delete(cx, node, -1, &mut None, trig)?;
        self.settle_locks();
        Ok(())
    }

    /// Finds this session's node with the request's prefix, if any, and answers for it.
    fn resume(
        &mut self,
        cx: &Ctx<'_>,
        lock: &Arc<str>,
        r: &LockRequest,
        waiter: &Waiter,
        trig: &mut Vec<Trigger>,
    ) -> Result<Option<LockResponse>, ErrorCode> {
        let q = &self.locks.queues[lock];
        let found = q
            .entries
            .iter()
            .find(|((_, name), e)| e.owner == cx.session && name.starts_with(&r.prefix))
            .map(|(k, _)| k.clone());
        let Some(key) = found else { return Ok(None) };
        let node = child_path(lock, &key.1);
        let stat = self
            .tree
            .get(&node)
            .map(|n| n.stat())
            .ok_or(ErrorCode::NoNode)?;
        let resp = self.decide(lock, key, waiter.clone(), node.clone(), &stat);
        if !resp.granted && r.flags & lock_flags::TRY != 0 {
            // A try that does not hold leaves nothing behind.
            self.delete(cx, &node, -1, &mut None, trig)?;
            self.settle_locks();
            return Ok(Some(LockResponse {
                node: String::new(),
                czxid: 0,
                granted: false,
            }));
        }
        Ok(Some(resp))
    }

    /// Creates the lock path and its missing ancestors as containers, as Curator's
    /// `creatingParentContainersIfNeeded` does (open ACL, empty data).
    fn create_lock_path(
        &mut self,
        cx: &Ctx<'_>,
        lock: &str,
        trig: &mut Vec<Trigger>,
    ) -> Result<(), ErrorCode> {
        if self.tree.contains(lock) {
            return Ok(());
        }
        let open = Acl::open_unsafe();
        let empty = Some(Vec::new());
        let mut cur = String::new();
        for seg in lock.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            if self.tree.contains(&cur) {
                continue;
            }
            let args = CreateArgs {
                path: &cur,
                data: &empty,
                acl: &open,
                flags: 0,
            };
            self.create(cx, OpCode::CreateContainer, &args, -1, &mut None, trig)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers() {
        assert_eq!(sequence("_c_x-lock-0000000007"), Some(7));
        assert_eq!(sequence("lock--000000001"), Some(-1));
        assert_eq!(sequence("lock-abc"), None);
        assert_eq!(sequence("0000000012"), Some(12));
        assert_eq!(sequence("é000000012"), None);
    }

    #[test]
    fn who_may_hold() {
        assert!(may_hold(lock_mode::EXCLUSIVE, 1, 0, 0));
        assert!(!may_hold(lock_mode::EXCLUSIVE, 1, 1, 0));
        assert!(may_hold(lock_mode::READ, 1, 3, 0));
        assert!(!may_hold(lock_mode::READ, 1, 3, 1));
        assert!(!may_hold(lock_mode::WRITE, 1, 3, 0));
        assert!(may_hold(lock_mode::SEMAPHORE, 3, 2, 2));
        assert!(!may_hold(lock_mode::SEMAPHORE, 3, 3, 0));
    }
}
