//! The DataTree: znodes by path, their Stat, children, and the indexes kept beside them
//! (ephemerals by session, containers, TTL nodes).
//!
//! The tree knows nothing of zxids or clocks: callers pass them in. Every mutation goes
//! through [`DataTree::insert`], [`DataTree::remove`] or [`DataTree::get_mut`], so the
//! indexes cannot drift from the nodes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use zlock_proto::records::{Acl, Stat};

mod nodes;

pub use self::nodes::Nodes;

pub use crate::ids::SessionId;

/// What kind of node this is; decides when it goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Persistent,
    /// Deleted when its owning session ends.
    Ephemeral(SessionId),
    /// Deleted once empty after having had a child.
    Container,
    /// Deleted once childless and unmodified for this many ms.
    Ttl(i64),
}

impl NodeKind {
    /// The owning session of an ephemeral node, 0 otherwise (Stat's ephemeralOwner).
    pub fn ephemeral_owner(self) -> SessionId {
        match self {
            NodeKind::Ephemeral(s) => s,
            _ => SessionId::NONE,
        }
    }
}

/// One znode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `None` when the client sent a null buffer (ZooKeeper returns null back).
    pub data: Option<Vec<u8>>,
    /// Shared between nodes with the same list, like ZooKeeper's ACL cache.
    pub acl: Arc<Vec<Acl>>,
    pub kind: NodeKind,
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    /// Children ever created under this node, ZooKeeper's internal count: it names
    /// sequential children and is not bumped by deletes. The Stat reports
    /// `2 * cversion - numChildren` (creates + deletes), as `DataNode.copyStat` does.
    pub cversion: i32,
    pub aversion: i32,
    pub pzxid: i64,
    /// Child names (not paths), ordered so replies and sequential scans are stable. A
    /// persistent set, as the map of znodes is: the first write to a parent after a
    /// snapshot image was taken copies the node, and a parent of 10,000 children would
    /// otherwise copy 10,000 names with it (measured: a million creates under 100
    /// parents, an image taken every 100,000, 3.2-4.1 s against 5.1-5.4 s, most of the
    /// difference in malloc).
    pub children: imbl::OrdSet<Box<str>>,
}

impl Node {
    pub fn new(
        data: Option<Vec<u8>>,
        acl: Arc<Vec<Acl>>,
        kind: NodeKind,
        zxid: i64,
        time: i64,
    ) -> Node {
        Node {
            data,
            acl,
            kind,
            czxid: zxid,
            mzxid: zxid,
            ctime: time,
            mtime: time,
            version: 0,
            cversion: 0,
            aversion: 0,
            pzxid: zxid,
            children: imbl::OrdSet::new(),
        }
    }

    /// Bytes of data (0 for null).
    pub fn data_len(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }

    /// The Stat a client sees. Containers and TTL nodes report ephemeralOwner 0, as
    /// ZooKeeper does (it keeps their type in that field internally).
    pub fn stat(&self) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self
                .cversion
                .wrapping_mul(2)
                .wrapping_sub(self.children.len() as i32),
            aversion: self.aversion,
            ephemeral_owner: self.kind.ephemeral_owner().0,
            data_length: self.data_len() as i32,
            num_children: self.children.len() as i32,
            pzxid: self.pzxid,
        }
    }
}

/// A count of the nodes under a path (getAllChildrenNumber) that can stop after some
/// look-ups and go on later, on the same [`Nodes`] or on a copy of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubtreeCount {
    /// Nodes whose children are still to count, each with the first child name not yet
    /// counted (`None`: from the first).
    stack: Vec<(String, Option<Box<str>>)>,
    /// Nodes counted so far.
    pub total: i64,
}

impl SubtreeCount {
    pub fn new(path: &str) -> SubtreeCount {
        SubtreeCount {
            stack: vec![(path.to_owned(), None)],
            total: 0,
        }
    }

    /// Goes on counting in `nodes`, looking up at most `budget` of them; true once
    /// every node under the path is counted.
    pub fn walk(&mut self, nodes: &Nodes, budget: usize) -> bool {
        let mut left = budget;
        let mut child = String::new();
        while let Some((p, from)) = self.stack.pop() {
            let Some(n) = nodes.get(&p) else { continue };
            let rest = match &from {
                Some(f) => n
                    .children
                    .range::<_, str>((Bound::Included(&**f), Bound::Unbounded)),
                None => n.children.range::<_, str>(..),
            };
            for c in rest {
                if left == 0 {
                    self.stack.push((p, Some(c.clone())));
                    return false;
                }
                left -= 1;
                self.total += 1;
                child.clear();
                child.push_str(&p);
                if p != "/" {
                    child.push('/');
                }
                child.push_str(c);
                // Only a child with children of its own goes on the stack: the leaves,
                // most of any big subtree, cost one look-up and no allocation.
                if nodes.get(&child).is_some_and(|n| !n.children.is_empty()) {
                    self.stack.push((child.clone(), None));
                }
            }
        }
        true
    }
}

/// All znodes plus the indexes derived from them.
///
/// Only the znodes ([`Nodes`]) are shared with copies taken for snapshots and long
/// reads; the indexes beside them are this tree's own (nothing outside the state reads
/// them).
#[derive(Debug, Clone, Default)]
pub struct DataTree {
    nodes: Nodes,
    ephemerals: HashMap<SessionId, BTreeSet<String>>,
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
    acl_cache: HashMap<Vec<Acl>, Arc<Vec<Acl>>>,
    /// Lock paths the native lock index follows (see [`crate::locks`]), and the changes
    /// to their children (or to themselves) since it last drained them.
    lock_paths: HashSet<Arc<str>>,
    lock_changes: Vec<LockChange>,
}

/// A position in the lock-change log (see [`DataTree::rollback_lock_changes`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockMark(usize);

/// A change under (or of) a followed lock path, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LockChange {
    /// A child was created (or replaced); `owner` is its ephemeral owner (0 for other
    /// nodes).
    Added {
        lock: Arc<str>,
        name: Box<str>,
        owner: SessionId,
    },
    /// A child was removed.
    Removed { lock: Arc<str>, name: Box<str> },
    /// The lock path itself was removed.
    Gone(Arc<str>),
}

impl DataTree {
    /// A tree holding `/`, `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`, as a
    /// fresh ZooKeeper 3.8 server has.
    pub fn new() -> DataTree {
        let mut t = DataTree::default();
        let open = t.intern_acl(Acl::open_unsafe());
        t.nodes.insert(
            "/",
            // ZooKeeper's built-in nodes hold empty (not null) data.
            Node::new(Some(Vec::new()), open.clone(), NodeKind::Persistent, 0, 0),
        );
        for p in ["/zookeeper", "/zookeeper/quota", "/zookeeper/config"] {
            t.insert(
                p,
                Node::new(Some(Vec::new()), open.clone(), NodeKind::Persistent, 0, 0),
            );
        }
        // ZooKeeper makes the config node read-only (ZOOKEEPER-2014) through
        // `setACL(READ_ACL_UNSAFE, -1)`, which leaves its aversion at -1.
        let read_only = t.intern_acl(vec![Acl {
            perms: zlock_proto::records::perms::READ,
            id: zlock_proto::records::Id::new("world", "anyone"),
        }]);
        if let Some(n) = t.get_mut("/zookeeper/config") {
            n.acl = read_only;
            n.aversion = -1;
        }
        t
    }

    /// An empty tree without even `/`, for loading snapshots.
    pub fn empty() -> DataTree {
        DataTree::default()
    }

    /// Shares identical ACL lists.
    pub fn intern_acl(&mut self, acl: Vec<Acl>) -> Arc<Vec<Acl>> {
        if let Some(a) = self.acl_cache.get(&acl) {
            return a.clone();
        }
        let a = Arc::new(acl.clone());
        self.acl_cache.insert(acl, a.clone());
        a
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The znodes, to copy in O(1) (see [`Nodes`]).
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// Mutable access for data, ACL and Stat changes. The node's kind and children must
    /// not be changed through this (use insert/remove). A znode shared with a copy of
    /// the tree is copied first.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.nodes.get_mut(path)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains(path)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Inserts (or replaces) `path`, linking it under its parent, which must exist
    /// (except for `/`). Parent Stat changes are the caller's business.
    pub fn insert(&mut self, path: &str, node: Node) {
        if path != "/" {
            let (parent, name) = split(path);
            if let Some(p) = self.nodes.get_mut(parent) {
                p.children.insert(name.into());
            }
            if let Some(lock) = self.lock_paths.get(parent) {
                self.lock_changes.push(LockChange::Added {
                    lock: lock.clone(),
                    name: name.into(),
                    owner: node.kind.ephemeral_owner(),
                });
            }
        }
        let kind = node.kind;
        if let Some(old) = self.nodes.insert(path, node) {
            self.index(path, old.kind, false);
        }
        self.index(path, kind, true);
    }

    /// Inserts `path` with its children already named (a node read from a snapshot
    /// that lists them), without linking it under its parent.
    pub(crate) fn insert_linked(&mut self, path: &str, node: Node) {
        let kind = node.kind;
        if let Some(old) = self.nodes.insert(path, node) {
            self.index(path, old.kind, false);
        }
        self.index(path, kind, true);
    }

    /// Removes `path` (which should have no children) and unlinks it from its parent.
    pub fn remove(&mut self, path: &str) -> Option<Node> {
        let node = self.nodes.remove(path)?;
        if path != "/" {
            let (parent, name) = split(path);
            if let Some(p) = self.nodes.get_mut(parent) {
                p.children.remove(name);
            }
            if let Some(lock) = self.lock_paths.get(parent) {
                self.lock_changes.push(LockChange::Removed {
                    lock: lock.clone(),
                    name: name.into(),
                });
            }
            if let Some(lock) = self.lock_paths.take(path) {
                self.lock_changes.push(LockChange::Gone(lock));
            }
        }
        self.index(path, node.kind, false);
        Some(node)
    }

    fn index(&mut self, path: &str, kind: NodeKind, add: bool) {
        match kind {
            NodeKind::Persistent => {}
            NodeKind::Ephemeral(s) => {
                if add {
                    self.ephemerals
                        .entry(s)
                        .or_default()
                        .insert(path.to_owned());
                } else if let Some(set) = self.ephemerals.get_mut(&s) {
                    set.remove(path);
                    if set.is_empty() {
                        self.ephemerals.remove(&s);
                    }
                }
            }
            NodeKind::Container => {
                if add {
                    self.containers.insert(path.to_owned());
                } else {
                    self.containers.remove(path);
                }
            }
            NodeKind::Ttl(_) => {
                if add {
                    self.ttls.insert(path.to_owned());
                } else {
                    self.ttls.remove(path);
                }
            }
        }
    }

    /// Starts reporting the changes to `lock`'s children (see [`crate::locks`]).
    pub(crate) fn follow_lock(&mut self, lock: Arc<str>) {
        self.lock_paths.insert(lock);
    }

    /// The changes under followed lock paths since the last call.
    pub(crate) fn take_lock_changes(&mut self) -> Vec<LockChange> {
        std::mem::take(&mut self.lock_changes)
    }

    /// The current end of the lock-change log, for [`DataTree::rollback_lock_changes`].
    pub(crate) fn lock_mark(&self) -> LockMark {
        LockMark(self.lock_changes.len())
    }

    /// Forgets the lock changes since `mark`, and follows again a lock path whose
    /// removal is among them. For a multi that was undone: its nodes are back as they
    /// were, so the index must see neither its changes nor the undo's. Replaying them
    /// instead would turn a restored node into a Removed and an Added, a fresh entry
    /// that has lost its native waiter (and a restored lock path into one no longer
    /// followed). Nothing may drain the log between the mark and this call.
    pub(crate) fn rollback_lock_changes(&mut self, mark: LockMark) {
        let start = mark.0.min(self.lock_changes.len());
        for c in self.lock_changes.drain(start..) {
            if let LockChange::Gone(lock) = c {
                self.lock_paths.insert(lock);
            }
        }
    }

    /// The ephemeral node paths a session owns, in path order.
    pub fn ephemerals_of(&self, session: SessionId) -> Vec<String> {
        self.ephemerals
            .get(&session)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Number of ephemeral nodes in the tree.
    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(|s| s.len()).sum()
    }

    /// Sessions owning at least one ephemeral node.
    pub fn ephemeral_sessions(&self) -> impl Iterator<Item = (&SessionId, &BTreeSet<String>)> {
        self.ephemerals.iter()
    }

    pub fn containers(&self) -> impl Iterator<Item = &String> {
        self.containers.iter()
    }

    pub fn ttl_nodes(&self) -> impl Iterator<Item = &String> {
        self.ttls.iter()
    }

    /// Every (path, node), unordered.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter()
    }

    /// Approximate bytes of node data (for `mntr`'s approximate_data_size).
    pub fn approximate_data_size(&self) -> u64 {
        self.nodes.approximate_data_size()
    }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_keeps_indexes() {
        let mut t = DataTree::new();
        let acl = t.intern_acl(Acl::open_unsafe());
        t.insert(
            "/a",
            Node::new(None, acl.clone(), NodeKind::Persistent, 1, 0),
        );
        t.insert(
            "/a/e",
            Node::new(None, acl.clone(), NodeKind::Ephemeral(SessionId(7)), 2, 0),
        );
        t.insert("/c", Node::new(None, acl, NodeKind::Container, 3, 0));
        assert_eq!(t.ephemerals_of(SessionId(7)), vec!["/a/e".to_string()]);
        assert_eq!(t.containers().count(), 1);
        assert!(t.get("/a").unwrap().children.contains("e"));
        t.remove("/a/e");
        assert!(t.ephemerals_of(SessionId(7)).is_empty());
        assert!(t.get("/a").unwrap().children.is_empty());
        assert_eq!(t.get("/").unwrap().stat().num_children, 3);
    }
}
