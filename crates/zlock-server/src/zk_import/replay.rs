//! Replaying ZooKeeper's transactions onto the state a snapshot gave, with ZooKeeper's
//! own rules (`FileTxnSnapLog.processTransaction`, `DataTree.processTxn`, `createNode`,
//! `deleteNode`, `setCversionPzxid`, release 3.8).
//!
//! Why not zlock's own apply: a ZooKeeper transaction is an outcome already decided
//! (the new version, the parent's new cversion), not a request to validate; and the
//! snapshot is fuzzy, so a transaction may meet a tree that already holds its effect.
//! ZooKeeper makes the replay idempotent in these ways, all kept here:
//! - a create whose node exists changes nothing but the node's ACL (set to the
//!   create's); a plain `create` then raises the parent's cversion and pzxid to the
//!   logged ones if they are higher;
//! - a create raises the parent's cversion (and sets its pzxid) only if the logged
//!   cversion is higher than the parent's;
//! - a delete raises the parent's pzxid only if the zxid is higher, and a missing node
//!   is no error;
//! - setData and setACL write the logged version, not an increment;
//! - a multi with an ErrorTxn among its ops changes nothing.

use zlock_core::tree::Node;
use zlock_core::{SessionId, State};
use zlock_proto::records::Acl;

use super::snap::{imported_session, kind_of, well_formed};
use super::txn::{Header, ZkTxn};

/// The state being rebuilt and what the replay learned beside it.
pub(crate) struct Replay<'a> {
    pub state: &'a mut State,
    /// The highest zxid applied (ZooKeeper's lastProcessedZxid).
    pub last_zxid: i64,
    /// The latest transaction time seen, ms.
    pub max_time: i64,
    pub applied: u64,
}

/// A change that did not apply (ZooKeeper logs these at debug level and goes on).
#[derive(Debug, PartialEq, Eq)]
enum Missed {
    NoNode,
    NodeExists,
}

impl Replay<'_> {
    /// Applies one logged transaction.
    pub fn apply(&mut self, h: &Header, txn: &ZkTxn) {
        match txn {
            ZkTxn::CreateSession { timeout_ms } => {
                self.state.sessions.insert(
                    SessionId(h.client_id),
                    imported_session(h.client_id, *timeout_ms),
                );
            }
            ZkTxn::CloseSession { paths } => {
                self.state.sessions.remove(&SessionId(h.client_id));
                self.close_session(h, paths.as_deref());
            }
            ZkTxn::Multi(ops) => {
                if !ops
                    .iter()
                    .any(|t| matches!(t, ZkTxn::NoChange { error: true }))
                {
                    for t in ops {
                        let _ = self.one(h, t);
                    }
                }
            }
            t => {
                let _ = self.one(h, t);
            }
        }
        self.last_zxid = self.last_zxid.max(h.zxid);
        self.max_time = self.max_time.max(h.time);
        self.applied += 1;
    }

    /// What ZooKeeper does once its log is replayed (`ZooKeeperServer.loadData`):
    /// ephemeral nodes whose session is not among the sessions are deleted, at the last
    /// zxid. Returns how many went.
    pub fn drop_orphan_ephemerals(&mut self) -> usize {
        let orphans: Vec<SessionId> = self
            .state
            .tree
            .ephemeral_sessions()
            .map(|(s, _)| *s)
            .filter(|s| !self.state.sessions.contains_key(s))
            .collect();
        let mut dropped = 0;
        for s in orphans {
            for p in self.state.tree.ephemerals_of(s) {
                if self.delete(&p, self.last_zxid).is_ok() {
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// `killSession`: the paths the log lists, then whatever else the session owns.
    fn close_session(&mut self, h: &Header, paths: Option<&[String]>) {
        let session = SessionId(h.client_id);
        let mut owned = self.state.tree.ephemerals_of(session);
        for p in paths.unwrap_or_default() {
            let _ = self.delete(p, h.zxid);
            owned.retain(|o| o != p);
        }
        for p in owned {
            let _ = self.delete(&p, h.zxid);
        }
    }

    /// One transaction or one op of a multi.
    fn one(&mut self, h: &Header, txn: &ZkTxn) -> Result<(), Missed> {
        match txn {
            ZkTxn::Create {
                path,
                data,
                acl,
                owner,
                parent_cversion,
                plain,
            } => {
                let created = self.create(path, data, acl, *owner, *parent_cversion, h);
                if created == Err(Missed::NodeExists) && *plain {
                    self.raise_cversion(path, *parent_cversion, h.zxid)?;
                }
                created
            }
            ZkTxn::Delete { path } => self.delete(path, h.zxid),
            ZkTxn::SetData {
                path,
                data,
                version,
            } => {
                let n = self.state.tree.get_mut(path).ok_or(Missed::NoNode)?;
                n.data = data.clone();
                n.mtime = h.time;
                n.mzxid = h.zxid;
                n.version = *version;
                Ok(())
            }
            ZkTxn::SetAcl { path, acl, version } => {
                let acl = self.state.tree.intern_acl(acl.clone());
                let n = self.state.tree.get_mut(path).ok_or(Missed::NoNode)?;
                n.acl = acl;
                n.aversion = *version;
                Ok(())
            }
            ZkTxn::NoChange { .. } | ZkTxn::CreateSession { .. } => Ok(()),
            ZkTxn::CloseSession { .. } | ZkTxn::Multi(_) => Ok(()),
        }
    }

    fn create(
        &mut self,
        path: &str,
        data: &Option<Vec<u8>>,
        acl: &[Acl],
        owner: i64,
        parent_cversion: i32,
        h: &Header,
    ) -> Result<(), Missed> {
        let parent = parent_of(path).ok_or(Missed::NoNode)?;
        // ZooKeeper validates paths before it logs them; a path it could not have
        // logged creates nothing here either.
        if !well_formed(path) || !self.state.tree.contains(parent) {
            return Err(Missed::NoNode);
        }
        let acl = self.state.tree.intern_acl(acl.to_vec());
        if let Some(existing) = self.state.tree.get_mut(path) {
            existing.acl = acl;
            return Err(Missed::NodeExists);
        }
        if let Some(p) = self.state.tree.get_mut(parent) {
            let cversion = match parent_cversion {
                -1 => p.cversion.wrapping_add(1),
                c => c,
            };
            if cversion > p.cversion {
                p.cversion = cversion;
                p.pzxid = h.zxid;
            }
        }
        let node = Node::new(data.clone(), acl, kind_of(owner), h.zxid, h.time);
        self.state.tree.insert(path, node);
        Ok(())
    }

    /// `setCversionPzxid` on the parent of `path`.
    fn raise_cversion(&mut self, path: &str, cversion: i32, zxid: i64) -> Result<(), Missed> {
        let parent = parent_of(path).ok_or(Missed::NoNode)?;
        let p = self.state.tree.get_mut(parent).ok_or(Missed::NoNode)?;
        let cversion = match cversion {
            -1 => p.cversion.wrapping_add(1),
            c => c,
        };
        if cversion > p.cversion {
            p.cversion = cversion;
            p.pzxid = zxid;
        }
        Ok(())
    }

    fn delete(&mut self, path: &str, zxid: i64) -> Result<(), Missed> {
        let parent = parent_of(path).ok_or(Missed::NoNode)?;
        let p = self.state.tree.get_mut(parent).ok_or(Missed::NoNode)?;
        if zxid > p.pzxid {
            p.pzxid = zxid;
        }
        if !self.state.tree.contains(path) {
            return Err(Missed::NoNode);
        }
        // A node whose children a fuzzy snapshot caught, deleted by the log: ZooKeeper
        // unlinks the node and its children become unreachable, gone from its next
        // snapshot; here they go now.
        let mut stack = vec![path.to_owned()];
        let mut order = Vec::new();
        while let Some(p) = stack.pop() {
            if let Some(n) = self.state.tree.get(&p) {
                for c in &n.children {
                    stack.push(zlock_core::path::join(&p, c));
                }
            }
            order.push(p);
        }
        for p in order.iter().rev() {
            self.state.tree.remove(p);
        }
        Ok(())
    }
}

/// The parent of an absolute path, as ZooKeeper cuts it at the last '/'; None for a
/// path with no '/' or for the root.
fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(i) if i > 0 => Some(&path[..i]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_core::Config;

    fn header(zxid: i64, kind: i32) -> Header {
        Header {
            client_id: 7,
            zxid,
            time: 1000 + zxid,
            kind,
        }
    }

    fn create(path: &str, parent_cversion: i32) -> ZkTxn {
        ZkTxn::Create {
            path: path.into(),
            data: Some(b"x".to_vec()),
            acl: Acl::open_unsafe(),
            owner: 0,
            parent_cversion,
            plain: true,
        }
    }

    /// A fuzzy snapshot already holding a create and a later delete's effect: the
    /// replay ends where the whole log would.
    #[test]
    fn replay_over_a_fuzzy_snapshot_is_idempotent() {
        let mut whole = State::new(Config::default());
        let mut r = Replay {
            state: &mut whole,
            last_zxid: 0,
            max_time: 0,
            applied: 0,
        };
        let log = [
            (header(1, 1), create("/a", 1)),
            (header(2, 1), create("/a/b", 1)),
            (
                header(3, 2),
                ZkTxn::Delete {
                    path: "/a/b".into(),
                },
            ),
            (header(4, 1), create("/a/c", 2)),
        ];
        for (h, t) in &log {
            r.apply(h, t);
        }
        // The "snapshot" caught /a, /a/c and the cversion of the last create, but the
        // log replays from zxid 2.
        let mut fuzzy = whole.clone();
        let mut r = Replay {
            state: &mut fuzzy,
            last_zxid: 0,
            max_time: 0,
            applied: 0,
        };
        for (h, t) in &log[1..] {
            r.apply(h, t);
        }
        for p in ["/a", "/a/c"] {
            assert_eq!(
                fuzzy.tree.get(p).map(|n| n.stat()),
                whole.tree.get(p).map(|n| n.stat())
            );
        }
        assert!(fuzzy.tree.get("/a/b").is_none());
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/"), None);
    }
}
