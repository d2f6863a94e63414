//! The watch registry: one-shot data/exist and child watches, persistent and
//! persistent-recursive watches, kept per path and per session. In memory only: clients
//! re-register after a reconnect (SetWatches), so watches are never snapshotted.
//!
//! Which watches an event fires follows ZooKeeper's WatchManager: a data event
//! (NodeCreated, NodeDataChanged, NodeDeleted) fires the one-shot data watches of the
//! path, its persistent watches, and the recursive watches of the path and every
//! ancestor; NodeDeleted also fires the path's one-shot child watches; NodeChildrenChanged
//! fires the parent's one-shot child watches and persistent (not recursive) watches. A
//! session gets at most one event per trigger.

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use zlock_proto::records::{event_type, keeper_state, perms, Acl, Id, WatcherEvent};

use crate::path;
use crate::tree::SessionId;

/// The kind of a registered watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// One-shot, set by getData or exists.
    Data,
    /// One-shot, set by getChildren.
    Child,
    /// addWatch mode 0.
    Persistent,
    /// addWatch mode 1.
    Recursive,
}

const KINDS: [WatchKind; 4] = [
    WatchKind::Data,
    WatchKind::Child,
    WatchKind::Persistent,
    WatchKind::Recursive,
];

/// A change that fires watches: (path, event type, the ACL of the node it is about).
/// A session that may not READ that node gets no event (ZooKeeper's fix for
/// CVE-2024-23944, which Debian's 3.8.0 carries).
pub type Trigger = (String, i32, Option<Arc<Vec<Acl>>>);

/// An event for one session.
pub type Notification = (SessionId, WatcherEvent);

#[derive(Debug, Default, Clone)]
pub struct Watches {
    by_path: [HashMap<String, HashSet<SessionId>>; 4],
    by_session: HashMap<SessionId, HashSet<(WatchKind, String)>>,
    recursive_count: usize,
    /// Each watching session's identities as of its latest watch, for the READ check at
    /// delivery.
    auth: HashMap<SessionId, Vec<Id>>,
}

fn slot(k: WatchKind) -> usize {
    match k {
        WatchKind::Data => 0,
        WatchKind::Child => 1,
        WatchKind::Persistent => 2,
        WatchKind::Recursive => 3,
    }
}

impl Watches {
    pub fn add(&mut self, session: SessionId, path: &str, kind: WatchKind) {
        if self.by_path[slot(kind)]
            .entry(path.to_owned())
            .or_default()
            .insert(session)
        {
            if kind == WatchKind::Recursive {
                self.recursive_count += 1;
            }
            self.by_session
                .entry(session)
                .or_default()
                .insert((kind, path.to_owned()));
        }
    }

    /// Removes one watch; true if it was there.
    pub fn remove(&mut self, session: SessionId, path: &str, kind: WatchKind) -> bool {
        let map = &mut self.by_path[slot(kind)];
        let Some(set) = map.get_mut(path) else {
            return false;
        };
        if !set.remove(&session) {
            return false;
        }
        if set.is_empty() {
            map.remove(path);
        }
        if kind == WatchKind::Recursive {
            self.recursive_count -= 1;
        }
        if let Some(s) = self.by_session.get_mut(&session) {
            s.remove(&(kind, path.to_owned()));
            if s.is_empty() {
                self.by_session.remove(&session);
            }
        }
        true
    }

    pub fn contains(&self, session: SessionId, path: &str, kind: WatchKind) -> bool {
        self.by_path[slot(kind)]
            .get(path)
            .is_some_and(|s| s.contains(&session))
    }

    /// Records the identities a session's watches are delivered under.
    pub fn set_auth(&mut self, session: SessionId, auth: &[Id]) {
        match self.auth.get(&session) {
            Some(a) if a.as_slice() == auth => {}
            _ => {
                self.auth.insert(session, auth.to_vec());
            }
        }
    }

    /// Drops every watch of a session (on close or expiry).
    pub fn remove_session(&mut self, session: SessionId) {
        self.auth.remove(&session);
        if let Some(all) = self.by_session.remove(&session) {
            for (kind, p) in all {
                let map = &mut self.by_path[slot(kind)];
                if let Some(set) = map.get_mut(&p) {
                    set.remove(&session);
                    if set.is_empty() {
                        map.remove(&p);
                    }
                }
                if kind == WatchKind::Recursive {
                    self.recursive_count -= 1;
                }
            }
        }
    }

    /// Takes the one-shot watches of `kind` on `path`, removing them.
    fn take(&mut self, path: &str, kind: WatchKind, out: &mut Vec<SessionId>) {
        if let Some(set) = self.by_path[slot(kind)].remove(path) {
            for s in set {
                if let Some(w) = self.by_session.get_mut(&s) {
                    w.remove(&(kind, path.to_owned()));
                    if w.is_empty() {
                        self.by_session.remove(&s);
                    }
                }
                out.push(s);
            }
        }
    }

    fn peek(&self, path: &str, kind: WatchKind, out: &mut Vec<SessionId>) {
        if let Some(set) = self.by_path[slot(kind)].get(path) {
            out.extend(set.iter().copied());
        }
    }

    /// Fires the watches a change event on `path` triggers and returns the notifications.
    /// With `acl`, sessions that may not READ under it lose the watch but get no event.
    pub fn trigger(
        &mut self,
        path: &str,
        ty: i32,
        acl: Option<&[Acl]>,
        out: &mut Vec<Notification>,
    ) {
        let mut sessions = Vec::new();
        match ty {
            event_type::NODE_CHILDREN_CHANGED => {
                self.take(path, WatchKind::Child, &mut sessions);
                self.peek(path, WatchKind::Persistent, &mut sessions);
            }
            _ => {
                self.take(path, WatchKind::Data, &mut sessions);
                if ty == event_type::NODE_DELETED {
                    self.take(path, WatchKind::Child, &mut sessions);
                }
                self.peek(path, WatchKind::Persistent, &mut sessions);
                if self.recursive_count > 0 {
                    self.peek(path, WatchKind::Recursive, &mut sessions);
                    for a in path::ancestors(path) {
                        self.peek(a, WatchKind::Recursive, &mut sessions);
                    }
                }
            }
        }
        if sessions.is_empty() {
            return;
        }
        sessions.sort_unstable();
        sessions.dedup();
        for s in sessions {
            if let Some(acl) = acl {
                let auth = self.auth.get(&s).map(|a| a.as_slice()).unwrap_or(&[]);
                if crate::acl::check(acl, perms::READ, auth).is_err() {
                    continue;
                }
            }
            out.push((
                s,
                WatcherEvent {
                    event_type: ty,
                    state: keeper_state::SYNC_CONNECTED,
                    path: path.to_owned(),
                },
            ));
        }
    }

    /// No watch at all: a change needs no trigger (the common case on the write path).
    pub fn is_empty(&self) -> bool {
        self.by_session.is_empty()
    }

    /// Total watches registered (for `wchs` and `mntr`'s zk_watch_count).
    pub fn count(&self) -> usize {
        self.by_path
            .iter()
            .map(|m| m.values().map(|s| s.len()).sum::<usize>())
            .sum()
    }

    /// Number of distinct watched paths.
    pub fn path_count(&self) -> usize {
        let mut paths: HashSet<&String> = HashSet::new();
        for m in &self.by_path {
            paths.extend(m.keys());
        }
        paths.len()
    }

    /// Sessions with at least one watch.
    pub fn session_count(&self) -> usize {
        self.by_session.len()
    }

    /// The watches of one session as (kind, path), for `wchc`/`dump`-style listings.
    pub fn of_session(&self, session: SessionId) -> Vec<(WatchKind, String)> {
        let mut v: Vec<_> = self
            .by_session
            .get(&session)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.1.cmp(&b.1).then(slot(a.0).cmp(&slot(b.0))));
        v
    }

    /// Every watched path with its sessions, sorted by path.
    pub fn by_path(&self) -> Vec<(String, Vec<SessionId>)> {
        let mut m: HashMap<&String, HashSet<SessionId>> = HashMap::new();
        for k in KINDS {
            for (p, s) in &self.by_path[slot(k)] {
                m.entry(p).or_default().extend(s.iter().copied());
            }
        }
        let mut v: Vec<_> = m
            .into_iter()
            .map(|(p, s)| {
                let mut s: Vec<_> = s.into_iter().collect();
                s.sort_unstable();
                (p.clone(), s)
            })
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sessions (as numbers) a trigger notifies.
    fn fire(w: &mut Watches, path: &str, ty: i32) -> Vec<i64> {
        let mut out = Vec::new();
        w.trigger(path, ty, None, &mut out);
        out.into_iter().map(|(s, _)| s.0).collect()
    }

    #[test]
    fn one_shot_fires_once() {
        let mut w = Watches::default();
        w.add(SessionId(1), "/a", WatchKind::Data);
        assert_eq!(fire(&mut w, "/a", event_type::NODE_DATA_CHANGED), vec![1]);
        assert!(fire(&mut w, "/a", event_type::NODE_DATA_CHANGED).is_empty());
        assert_eq!(w.count(), 0);
    }

    #[test]
    fn persistent_and_recursive() {
        let mut w = Watches::default();
        w.add(SessionId(1), "/a", WatchKind::Persistent);
        w.add(SessionId(2), "/", WatchKind::Recursive);
        w.add(SessionId(3), "/a", WatchKind::Data);
        w.add(SessionId(3), "/a", WatchKind::Child);
        assert_eq!(fire(&mut w, "/a", event_type::NODE_DELETED), vec![1, 2, 3]);
        assert_eq!(fire(&mut w, "/a/b", event_type::NODE_CREATED), vec![2]);
        assert_eq!(
            fire(&mut w, "/a", event_type::NODE_CHILDREN_CHANGED),
            vec![1]
        );
        assert_eq!(
            fire(&mut w, "/a", event_type::NODE_DATA_CHANGED),
            vec![1, 2]
        );
        w.remove_session(SessionId(2));
        assert_eq!(fire(&mut w, "/a", event_type::NODE_DATA_CHANGED), vec![1]);
        assert_eq!(w.count(), 1);
    }
}
