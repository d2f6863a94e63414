//! The native lock: one request creates a contender's ephemeral sequential node and says
//! whether it holds; a waiter is told in the commit that removes the last node blocking
//! it. No getChildren, no watch, one message per hand-over.
//!
//! The index follows each lock path that a native request has named: its entries in
//! queue order, which are readers, and which belong to a waiting native session. What
//! an entry is, its order and what blocks what are [`zlock_proto::lock_order`]'s rule,
//! the one the client's recipes use too: every sequential child counts, whoever
//! created it, so native contenders, Curator, kazoo and the zlock recipes share one
//! FIFO queue, and a contender holds when nothing before it blocks it.
//!
//! After each Txn the queues that lost a node are walked from the front only as far as
//! a grant is still possible: for an exclusive lock that is its first entry, so a
//! hand-over costs O(log n) and one pushed grant however long the queue is.
//!
//! The index is replicated state like everything in [`State`]: the followed lock paths
//! and their waiters (session, mode, node) are part of the snapshot ([`LockImage`],
//! see [`crate::snapshot`]) and the entries are rebuilt from the tree on decode, so a
//! server restarted from a snapshot and the log's suffix pushes the same grants as one
//! that applied the whole log. A grant pushed while its session has no connection is
//! lost with it; the client re-sends its request with [`lock_flags::RESUME`] on
//! reconnect, which finds its node and answers whether it holds.
//!
//! Lock-delay (Chubby's): a contender may ask that, if its session ends while it holds
//! (an expiry, or a close without a release), its lock path grant nothing more for a
//! while, so that a holder that was only paused has time to notice it lost the lock
//! before anyone else acts under it. The hold starts at the CloseSession Txn's time and
//! ends at the first Txn whose time reaches it (the server proposes one then, see
//! [`LockIndex::next_delay_end`]): decided by Txn times, never by a member's clock, so
//! every member grants at the same log position. A release (a delete of the holder's
//! node by its own session) hands over at once, as before. Only the native index is
//! held back: a standard-recipe contender (Curator, kazoo) on the same path acts on the
//! holder node's deletion as ZooKeeper's recipe does.
//!
//! A multi that fails leaves the index exactly as it was: its undo puts the nodes back,
//! and the tree forgets the lock changes of both the multi and the undo
//! ([`crate::tree::DataTree`]'s `rollback_lock_changes`), so a waiter whose node the
//! multi had deleted keeps waiting on the same entry.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use zlock_proto::lock_order::{is_reader, Mode, QueueKey};
use zlock_proto::records::{
    lock_flags, lock_mode, Acl, LockGrant, LockRequest, LockResponse, Stat,
    LOCK_DELAY_SERVER_DEFAULT, MAX_LOCK_DELAY_MS,
};
use zlock_proto::{ErrorCode, OpCode, Record};

mod handover;
mod image;
mod view;

pub use handover::{recipe_contender, Handover, Handovers, HISTORY};

pub(crate) use image::{mode_of_parts, mode_parts};
pub use image::{LockImage, PendingWaiter, RestoreError, SavedLock, SavedWaiter};
pub use view::{EntryView, LockView, Standing};

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
    mode: Mode,
}

/// One node under a lock path.
#[derive(Debug, Clone)]
struct Entry {
    read: bool,
    /// The ephemeral owner (0 for a persistent node).
    owner: SessionId,
    /// A native waiter not granted yet.
    waiter: Option<Waiter>,
    /// The lock-delay its native request asked for, ms (0: none).
    delay_ms: i64,
}

impl Entry {
    fn new(name: &str, owner: SessionId) -> Entry {
        Entry {
            read: is_reader(name),
            owner,
            waiter: None,
            delay_ms: 0,
        }
    }
}

/// Entries in queue order (see [`zlock_proto::lock_order`]).
type Key = QueueKey;

#[derive(Debug, Clone, Default)]
struct Queue {
    entries: BTreeMap<Key, Entry>,
    /// Entries that are not read nodes.
    writers: usize,
    /// The largest lease count a waiter of this queue asked for (1 for locks): past
    /// that many entries and a writer, nothing can be granted.
    max_leases: usize,
    /// A lock-delay runs until this Txn time (ms): nothing is granted before it.
    held_until: Option<i64>,
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
        if self.held_until.is_some() {
            return;
        }
        let mut writers_before = 0;
        for (before, (key, e)) in self.entries.iter_mut().enumerate() {
            if writers_before > 0 && before >= self.max_leases.max(1) {
                break;
            }
            if let Some(w) = &e.waiter {
                if w.mode.may_hold(before, writers_before) {
                    out.push((w.session, child_path(lock, key.name())));
                    e.waiter = None;
                }
            }
            writers_before += usize::from(!e.read);
        }
    }
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
    /// The lock-delays running: (end time, lock path), earliest first.
    holds: BTreeSet<(i64, Arc<str>)>,
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

    /// When the earliest running lock-delay ends (a Txn time, ms). Nothing is granted
    /// under it until a Txn with at least that time is applied: the member that
    /// proposes expiries proposes one then, so the waiters do not wait for other
    /// traffic.
    pub fn next_delay_end(&self) -> Option<i64> {
        self.holds.first().map(|(t, _)| *t)
    }

    /// Lock paths held back by a running lock-delay.
    pub fn delayed(&self) -> usize {
        self.holds.len()
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
                    let e = Entry::new(&name, owner);
                    let Some(key) = QueueKey::of(name) else {
                        continue;
                    };
                    if let Some(q) = self.locks.queues.get_mut(&lock) {
                        q.insert(key, e);
                    }
                }
                LockChange::Removed { lock, name } => {
                    let Some(key) = QueueKey::of(name) else {
                        continue;
                    };
                    if let Some(q) = self.locks.queues.get_mut(&lock) {
                        q.remove(&key);
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
        self.push_grants(granted);
    }

    /// Queues the grants for [`State::apply`] to take, each with its node's czxid.
    fn push_grants(&mut self, granted: Vec<(SessionId, String)>) {
        for (session, node) in granted {
            let czxid = self.tree.get(&node).map_or(0, |n| n.czxid);
            self.lock_grants.push((session, LockGrant { node, czxid }));
        }
    }

    /// Starts the lock-delays of the locks that `session`, ending at `time_ms`, holds
    /// through `nodes` (its ephemeral nodes, about to be removed) with a delay asked.
    pub(crate) fn hold_back_locks_of(
        &mut self,
        session: SessionId,
        time_ms: i64,
        nodes: &[String],
    ) {
        for node in nodes {
            let parent = path::parent(node);
            let Some((lock, _)) = self.locks.queues.get_key_value(parent) else {
                continue;
            };
            let lock = lock.clone();
            let name = &node[node.rfind('/').map_or(0, |i| i + 1)..];
            let Some(key) = QueueKey::of(name) else {
                continue;
            };
            let Some(q) = self.locks.queues.get_mut(&lock) else {
                continue;
            };
            // A native entry with no waiter is one that was granted: a holder.
            let delay = match q.entries.get(&key) {
                Some(e) if e.owner == session && e.delay_ms > 0 && e.waiter.is_none() => e.delay_ms,
                _ => continue,
            };
            let until = time_ms.saturating_add(delay);
            if let Some(old) = q.held_until {
                if old >= until {
                    continue;
                }
                self.locks.holds.remove(&(old, lock.clone()));
            }
            q.held_until = Some(until);
            self.locks.holds.insert((until, lock));
        }
    }

    /// Ends the lock-delays due at `time_ms` (a Txn's time) and grants what they held
    /// back. Called before every Txn is applied.
    pub(crate) fn end_lock_delays(&mut self, time_ms: i64) {
        let mut granted = Vec::new();
        while let Some((until, lock)) = self.locks.holds.first().cloned() {
            if until > time_ms {
                break;
            }
            self.locks.holds.pop_first();
            if let Some(q) = self.locks.queues.get_mut(&lock) {
                if q.held_until == Some(until) {
                    q.held_until = None;
                    q.settle(&lock, &mut granted);
                }
            }
        }
        self.push_grants(granted);
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
                let Some(key) = QueueKey::of(name.clone()) else {
                    continue;
                };
                let owner = self
                    .tree
                    .get(&child_path(lock, name))
                    .map_or(SessionId::NONE, |c| c.kind.ephemeral_owner());
                q.insert(key, Entry::new(name, owner));
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
        let mode = match r.mode {
            lock_mode::EXCLUSIVE | lock_mode::WRITE => Mode::Exclusive,
            lock_mode::READ => Mode::Read,
            lock_mode::SEMAPHORE if r.leases >= 1 => Mode::Semaphore(r.leases as usize),
            _ => return Err(ErrorCode::BadArguments),
        };
        // The proposer puts its default in place of LOCK_DELAY_SERVER_DEFAULT; a Txn
        // that still carries it (written by a caller with no server) asks for none.
        let delay_ms = match r.lock_delay_ms {
            LOCK_DELAY_SERVER_DEFAULT => 0,
            d if (0..=MAX_LOCK_DELAY_MS).contains(&d) => i64::from(d),
            _ => return Err(ErrorCode::BadArguments),
        };
        self.check_writable(cx, r)?;
        self.create_lock_path(cx, &r.path, trig)?;
        let lock = self.follow(&r.path);
        if !r.release.is_empty() {
            self.release_own(cx, &lock, &r.release, trig)?;
        }
        let waiter = Waiter {
            session: cx.session,
            mode,
        };

        if r.flags & lock_flags::RESUME != 0 {
            if let Some(resp) = self.resume(cx, &lock, r, &waiter, delay_ms, trig)? {
                return Ok(resp);
            }
        }
        if r.flags & lock_flags::TRY != 0 {
            let q = &self.locks.queues[&lock];
            let (n, w) = (q.entries.len(), q.writers);
            // A new node would come after every entry.
            if q.held_until.is_some() || !mode.may_hold(n, w) {
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
        // The name ZooKeeper's format gave it always has a sequence number.
        let Some(key) = QueueKey::of(name) else {
            return Err(ErrorCode::SystemError);
        };
        Ok(self.decide(&lock, key, waiter, delay_ms, node, &stat))
    }

    /// Answers whether the entry `key` holds; registers `waiter` on it if not. The
    /// entry keeps `delay_ms` as its lock-delay.
    fn decide(
        &mut self,
        lock: &Arc<str>,
        key: Key,
        waiter: Waiter,
        delay_ms: i64,
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
        let granted = q.held_until.is_none() && waiter.mode.may_hold(before, writers_before);
        if !granted {
            q.max_leases = q.max_leases.max(waiter.mode.leases());
        }
        if let Some(e) = q.entries.get_mut(&key) {
            e.delay_ms = delay_ms;
            e.waiter = (!granted).then_some(waiter);
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
        // `check_writable` has refused a node elsewhere or someone else's.
        debug_assert_eq!(path::parent(node), &**lock);
        if !self.tree.contains(node) {
            return Ok(());
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
        delay_ms: i64,
        trig: &mut Vec<Trigger>,
    ) -> Result<Option<LockResponse>, ErrorCode> {
        let q = &self.locks.queues[lock];
        let found = q
            .entries
            .iter()
            .find(|(key, e)| e.owner == cx.session && key.name().starts_with(&r.prefix))
            .map(|(k, _)| k.clone());
        let Some(key) = found else { return Ok(None) };
        let node = child_path(lock, key.name());
        let stat = self
            .tree
            .get(&node)
            .map(|n| n.stat())
            .ok_or(ErrorCode::NoNode)?;
        let resp = self.decide(lock, key, waiter.clone(), delay_ms, node.clone(), &stat);
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

    /// Refuses, before anything is written, what would make the request fail part-way
    /// (after the lock path's containers were made): a failed lock request changes
    /// nothing, as a failed ZooKeeper request changes nothing.
    fn check_writable(&self, cx: &Ctx<'_>, r: &LockRequest) -> Result<(), ErrorCode> {
        if !r.release.is_empty() {
            if path::parent(&r.release) != r.path {
                return Err(ErrorCode::BadArguments);
            }
            match self.tree.get(&r.release).map(|n| n.kind) {
                None => {}
                Some(NodeKind::Ephemeral(s)) if s == cx.session => {}
                Some(_) => return Err(ErrorCode::BadArguments),
            }
        }
        crate::acl::check_valid(&r.acl, cx.auth)?;
        // The deepest node that exists on the way gets the first new child: the lock
        // path's first missing container, or the contender itself.
        let mut at = r.path.as_str();
        while !self.tree.contains(at) && at != "/" {
            at = path::parent(at);
        }
        let node = self.tree.get(at).ok_or(ErrorCode::NoNode)?;
        crate::acl::check(&node.acl, zlock_proto::records::perms::CREATE, cx.auth)?;
        if matches!(node.kind, NodeKind::Ephemeral(_)) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        Ok(())
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
