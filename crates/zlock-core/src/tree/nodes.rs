//! [`Nodes`]: every znode by path, in a persistent map that copies in O(1).

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;

use super::Node;

/// A znode with its path: the map's one allocation per znode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    path: Box<str>,
    node: Node,
}

/// Every znode by path, in a persistent B-tree (`imbl::OrdMap`) keyed by the path's
/// hash, so that a copy of it is O(1) whatever the tree's size. The copy and the original
/// share their structure; a change to either copies only the few map nodes on the
/// changed key's path, and the changed znode itself ([`super::DataTree::get_mut`] copies
/// a shared znode on write).
///
/// This is what lets the core hand out the tree as it is *now* without holding its lock
/// for the tree's size: the snapshot image ([`crate::snapshot::Image`]) and long reads
/// ([`crate::read::LongRead`]) take a copy under the lock and walk it outside, while the
/// live tree moves on.
///
/// **Layout, for memory.** The key is a 64-bit SipHash of the path (8 bytes, compared
/// without a pointer to follow), the value one pointer to a [`Znode`] (the path and the
/// node in one allocation, plus the path's own). At 1M znodes of 100 bytes as
/// `zlock bench load` lays them out, the tree takes 423 bytes a znode on the heap,
/// malloc's headers included (`examples/tree_memory.rs`), against 525 for the HAMT of
/// `(Arc<str>, Arc<Node>)` it replaces: a HAMT's leaves reserve their whole width, and
/// at that size only about one slot in five is used. A server holding them takes less
/// memory than it did with std's `HashMap` of znodes, before the tree was persistent
/// (`bench/load-1m.sh`, `bench/results/ab-2026-12-01-nodes.md`: 449-454 MB right after
/// a load of 1M, against 510-520 MB then; 444 MB after a restart, against 439 MB then
/// and 522 MB with the HAMT). A look-up hashes the path once, walks about five levels of
/// 8-byte keys and compares the one path it finds; with a million znodes spread over
/// memory, some 20% slower than the HAMT's, updates the same.
///
/// Two paths with the same 64-bit hash (at a million znodes, about one chance in 40
/// million that any two do): the first to arrive holds the hash in `by_hash`, the other
/// waits in `collided`, looked at only when it is not empty. A path is in `collided`
/// only while `by_hash` holds another path of its hash; removing that one moves a
/// waiting path up.
#[derive(Debug, Clone)]
pub struct Nodes {
    by_hash: imbl::OrdMap<u64, Arc<Znode>>,
    collided: imbl::OrdMap<Box<str>, Arc<Znode>>,
    /// SipHash with fixed keys: the map's order (a snapshot's) then depends on its
    /// content only, not on the process or the history (but for which of two colliding
    /// paths came first). Colliding paths cost a look-up in `collided` (a B-tree by
    /// path), so paths chosen to collide slow nothing down but their own.
    keys: BuildHasherDefault<DefaultHasher>,
    /// The bits of the hash kept: all of them, except in tests that want collisions.
    mask: u64,
}

impl Default for Nodes {
    fn default() -> Nodes {
        Nodes {
            by_hash: imbl::OrdMap::new(),
            collided: imbl::OrdMap::new(),
            keys: BuildHasherDefault::default(),
            mask: u64::MAX,
        }
    }
}

impl Nodes {
    /// An empty map that keeps only `mask`'s bits of each hash: for tests of colliding
    /// paths.
    #[cfg(test)]
    pub(crate) fn with_mask(mask: u64) -> Nodes {
        Nodes {
            mask,
            ..Nodes::default()
        }
    }

    fn hash(&self, path: &str) -> u64 {
        self.keys.hash_one(path) & self.mask
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        match self.by_hash.get(&self.hash(path)) {
            Some(z) if *z.path == *path => Some(&z.node),
            Some(_) if !self.collided.is_empty() => self.collided.get(path).map(|z| &z.node),
            _ => None,
        }
    }

    /// The node at `path`, copied first if a copy of the map shares it.
    pub(crate) fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        let h = self.hash(path);
        let z = match self.by_hash.get_mut(&h) {
            Some(z) if *z.path == *path => z,
            Some(_) => self.collided.get_mut(path)?,
            None => return None,
        };
        Some(&mut Arc::make_mut(z).node)
    }

    /// Inserts or replaces the node at `path`; the one replaced.
    pub(crate) fn insert(&mut self, path: &str, node: Node) -> Option<Node> {
        let h = self.hash(path);
        let z = Arc::new(Znode {
            path: path.into(),
            node,
        });
        let old = match self.by_hash.get(&h) {
            Some(held) if *held.path != *path => self.collided.insert(path.into(), z),
            // New, or the same path again (replaced).
            _ => self.by_hash.insert(h, z),
        };
        old.map(unwrap)
    }

    /// Removes the node at `path`.
    pub(crate) fn remove(&mut self, path: &str) -> Option<Node> {
        let h = self.hash(path);
        let z = match self.by_hash.get(&h) {
            Some(held) if *held.path == *path => {
                let z = self.by_hash.remove(&h)?;
                // A path of the same hash that waited takes its place.
                let waiting = self.collided.keys().find(|p| self.hash(p) == h).cloned();
                if let Some(p) = waiting {
                    if let Some(w) = self.collided.remove(&p) {
                        self.by_hash.insert(h, w);
                    }
                }
                z
            }
            Some(_) => self.collided.remove(path)?,
            None => return None,
        };
        Some(unwrap(z))
    }

    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    pub fn len(&self) -> usize {
        self.by_hash.len() + self.collided.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every (path, node), unordered.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.by_hash
            .values()
            .chain(self.collided.values())
            .map(|z| (&*z.path, &z.node))
    }

    /// Approximate bytes of paths and data (ZooKeeper's approximate_data_size). O(n):
    /// take it on a copy, off the core's lock.
    pub fn approximate_data_size(&self) -> u64 {
        self.iter()
            .map(|(k, n)| (k.len() + n.data_len()) as u64)
            .sum()
    }
}

/// The node out of a znode the map no longer holds (copied if a copy of the map does).
fn unwrap(z: Arc<Znode>) -> Node {
    match Arc::try_unwrap(z) {
        Ok(z) => z.node,
        Err(shared) => shared.node.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::tree::NodeKind;

    fn node(version: i32) -> Node {
        let mut n = Node::new(None, Arc::new(Vec::new()), NodeKind::Persistent, 1, 1);
        n.version = version;
        n
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, i32),
        Remove(u8),
        Bump(u8),
        Copy,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<i32>()).prop_map(|(p, v)| Op::Insert(p, v)),
            any::<u8>().prop_map(Op::Remove),
            any::<u8>().prop_map(Op::Bump),
            Just(Op::Copy),
        ]
    }

    proptest! {
        /// With only 2 bits of hash kept, most paths collide: the map still behaves
        /// as a map of paths, and a copy taken midway keeps what it saw.
        #[test]
        fn colliding_paths_behave_as_a_map(ops in prop::collection::vec(op(), 1..300), bits in 0u32..3) {
            let mask = (1u64 << bits) - 1;
            let mut nodes = Nodes::with_mask(mask);
            let mut model: HashMap<String, i32> = HashMap::new();
            let mut copies: Vec<(Nodes, HashMap<String, i32>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(p, v) => {
                        let path = format!("/p{}", p % 40);
                        let old = nodes.insert(&path, node(v)).map(|n| n.version);
                        prop_assert_eq!(old, model.insert(path, v));
                    }
                    Op::Remove(p) => {
                        let path = format!("/p{}", p % 40);
                        let old = nodes.remove(&path).map(|n| n.version);
                        prop_assert_eq!(old, model.remove(&path));
                    }
                    Op::Bump(p) => {
                        let path = format!("/p{}", p % 40);
                        let got = nodes.get_mut(&path).map(|n| {
                            n.version += 1;
                            n.version
                        });
                        let want = model.get_mut(&path).map(|v| {
                            *v += 1;
                            *v
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Copy => copies.push((nodes.clone(), model.clone())),
                }
                prop_assert_eq!(nodes.len(), model.len());
            }
            copies.push((nodes, model));
            for (nodes, model) in copies {
                let mut seen: HashMap<String, i32> = HashMap::new();
                for (p, n) in nodes.iter() {
                    prop_assert!(seen.insert(p.to_owned(), n.version).is_none(), "{} twice", p);
                }
                prop_assert_eq!(&seen, &model);
                for (p, v) in &model {
                    prop_assert_eq!(nodes.get(p).map(|n| n.version), Some(*v));
                    prop_assert!(nodes.contains(p));
                }
                prop_assert!(nodes.get("/absent").is_none());
            }
        }
    }
}
