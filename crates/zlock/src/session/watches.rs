//! The watch registry, keyed by server path: who listens to which watch, what fires on
//! an event, what is re-registered after a reconnect (SetWatches) and what is removed on
//! the server once its watchers are dropped (RemoveWatches).

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};
use zlock_proto::records::{
    watcher_type, ReplyHeader, SetWatches, SetWatches2, WatchesRequest, XID_SET_WATCHES,
};
use zlock_proto::{ErrorCode, OpCode, Record};

use super::connection::{write_request, Xids};
use super::Pending;
use crate::error::{Error, Result};
use crate::watcher::{EventType, WatchedEvent};

/// Where a watch's events go besides the catch-all receiver.
pub(crate) enum Sink {
    None,
    Oneshot(oneshot::Sender<Result<WatchedEvent>>),
    Persistent(mpsc::UnboundedSender<WatchedEvent>),
}

impl Sink {
    /// Whether someone still listens: a dropped watcher's sink is closed. `None` (the
    /// session's catch-all event stream) always listens.
    fn is_live(&self) -> bool {
        match self {
            Sink::None => true,
            Sink::Oneshot(tx) => !tx.is_closed(),
            Sink::Persistent(tx) => !tx.is_closed(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchKind {
    /// exists with watch: a data watch if the node exists, else an exist watch.
    Exists,
    Data,
    Child,
    Persistent,
    PersistentRecursive,
}

/// A watch a request registers once the server accepts it. `path` is the server path.
pub(crate) struct WatchReg {
    pub kind: WatchKind,
    pub path: String,
    pub sink: Sink,
}

/// A watcher that was dropped: its kind and server path, sent to the actor so that
/// the watch is forgotten (and removed on the server once no other watcher of the
/// session needs it).
pub(crate) struct Forgotten {
    pub kind: WatchKind,
    pub path: String,
}

#[derive(Default)]
pub(super) struct Watches {
    data: HashMap<String, Vec<Sink>>,
    exist: HashMap<String, Vec<Sink>>,
    child: HashMap<String, Vec<Sink>>,
    persistent: HashMap<String, Vec<Sink>>,
    recursive: HashMap<String, Vec<Sink>>,
    /// Watches no watcher needs any more, to remove on the server (RemoveWatches:
    /// watcher type, server path), sent on the current connection or the next.
    removals: Vec<(i32, String)>,
}

fn fire_oneshots(map: &mut HashMap<String, Vec<Sink>>, path: &str, ev: &WatchedEvent) {
    for s in map.remove(path).unwrap_or_default() {
        if let Sink::Oneshot(tx) = s {
            let _ = tx.send(Ok(ev.clone()));
        }
    }
}

fn feed(map: &HashMap<String, Vec<Sink>>, path: &str, ev: &WatchedEvent) {
    for s in map.get(path).into_iter().flatten() {
        if let Sink::Persistent(tx) = s {
            let _ = tx.send(ev.clone());
        }
    }
}

impl Watches {
    /// The server answered the request that set `reg`: the watch is registered if the
    /// server has it now (an exists on a missing node sets an exist watch).
    pub(super) fn accepted(&mut self, h: &ReplyHeader, reg: WatchReg) {
        let WatchReg { kind, path, sink } = reg;
        let no_node = h.err == ErrorCode::NoNode.code();
        let kind = match (kind, h.err == 0) {
            (WatchKind::Exists, true) => WatchKind::Data,
            (WatchKind::Exists, false) if no_node => WatchKind::Exists,
            (k, true) => k,
            _ => return,
        };
        // Its watcher may have been dropped before the server's answer (its Forgotten
        // came first and found nothing): the server has the watch now.
        let closed = !sink.is_live();
        self.map(kind).entry(path.clone()).or_default().push(sink);
        if closed {
            self.forget(kind, path);
        }
    }

    fn map(&mut self, kind: WatchKind) -> &mut HashMap<String, Vec<Sink>> {
        match kind {
            WatchKind::Exists => &mut self.exist,
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::PersistentRecursive => &mut self.recursive,
        }
    }

    /// A watcher of `kind` on `path` was dropped: its sink goes, and the watch is
    /// removed on the server once no other watcher needs it.
    pub(super) fn forget(&mut self, kind: WatchKind, path: String) {
        if let Some(ty) = self.prune(kind, &path) {
            let persistent =
                ty == watcher_type::PERSISTENT || ty == watcher_type::PERSISTENT_RECURSIVE;
            let ty = if persistent && !self.any_on(&path) {
                // Apache ZooKeeper before 3.9 knows no watcher type for persistent
                // watches (ZOOKEEPER-4472) and removes them only with ANY, which takes
                // every watch of the session on the path: safe when none is left. (With
                // another watch left there, ZooKeeper 3.8 refuses the exact type and
                // keeps sending the events, which this client then drops.)
                watcher_type::ANY
            } else {
                ty
            };
            self.removals.push((ty, path));
        }
    }

    /// Does any watcher of the session still watch `path` itself, of any kind?
    fn any_on(&self, path: &str) -> bool {
        [
            &self.data,
            &self.exist,
            &self.child,
            &self.persistent,
            &self.recursive,
        ]
        .iter()
        .any(|m| {
            m.get(path)
                .is_some_and(|sinks| sinks.iter().any(Sink::is_live))
        })
    }

    /// Dispatches one event (server path) like ZooKeeper's ZKWatchManager.
    pub(super) fn dispatch(&mut self, path: &str, ev: &WatchedEvent) {
        match ev.event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                fire_oneshots(&mut self.data, path, ev);
                fire_oneshots(&mut self.exist, path, ev);
            }
            EventType::NodeDeleted => {
                fire_oneshots(&mut self.data, path, ev);
                fire_oneshots(&mut self.exist, path, ev);
                fire_oneshots(&mut self.child, path, ev);
            }
            EventType::NodeChildrenChanged => fire_oneshots(&mut self.child, path, ev),
            _ => {}
        }
        feed(&self.persistent, path, ev);
        if ev.event_type != EventType::NodeChildrenChanged {
            let mut p = path;
            loop {
                feed(&self.recursive, p, ev);
                if p == "/" {
                    break;
                }
                p = match p.rfind('/') {
                    Some(0) | None => "/",
                    Some(i) => &p[..i],
                };
            }
        }
    }

    /// Ends every watcher: one-shots get `err`, persistent streams close.
    pub(super) fn fail_all(&mut self, err: &Error) {
        for map in [
            &mut self.data,
            &mut self.exist,
            &mut self.child,
            &mut self.persistent,
            &mut self.recursive,
        ] {
            for (_, sinks) in map.drain() {
                for s in sinks {
                    if let Sink::Oneshot(tx) = s {
                        let _ = tx.send(Err(err.clone()));
                    }
                }
            }
        }
    }

    /// Drops the closed sinks of the watch `kind` on `path`. Returns the server's
    /// watcher type to remove when no live sink is left for what the server keeps: one
    /// data watch serves both data and exist watchers, as in ZooKeeper.
    fn prune(&mut self, kind: WatchKind, path: &str) -> Option<i32> {
        let (maps, ty): (Vec<&mut HashMap<String, Vec<Sink>>>, i32) = match kind {
            WatchKind::Exists | WatchKind::Data => {
                (vec![&mut self.data, &mut self.exist], watcher_type::DATA)
            }
            WatchKind::Child => (vec![&mut self.child], watcher_type::CHILDREN),
            WatchKind::Persistent => (vec![&mut self.persistent], watcher_type::PERSISTENT),
            WatchKind::PersistentRecursive => (
                vec![&mut self.recursive],
                watcher_type::PERSISTENT_RECURSIVE,
            ),
        };
        let mut had = false;
        let mut live = false;
        for map in maps {
            if let Some(sinks) = map.get_mut(path) {
                had = true;
                sinks.retain(Sink::is_live);
                if sinks.is_empty() {
                    map.remove(path);
                } else {
                    live = true;
                }
            }
        }
        (had && !live).then_some(ty)
    }

    /// Prepares a new connection: what dropped watchers left is pruned (queued for
    /// removal on the server) and every other watch is re-registered with one
    /// SetWatches (or SetWatches2 when persistent watches exist) relative to
    /// `relative_zxid`, so the server fires at once whatever changed while we were away.
    pub(super) fn resend(&mut self, relative_zxid: i64, out: &mut Vec<u8>) {
        let mut gone = Vec::new();
        for (kind, map) in [
            (WatchKind::Data, &self.data),
            (WatchKind::Exists, &self.exist),
            (WatchKind::Child, &self.child),
            (WatchKind::Persistent, &self.persistent),
            (WatchKind::PersistentRecursive, &self.recursive),
        ] {
            for (path, sinks) in map {
                if !sinks.iter().all(Sink::is_live) {
                    gone.push((kind, path.clone()));
                }
            }
        }
        for (kind, path) in gone {
            self.forget(kind, path);
        }
        if !self.is_empty() {
            self.set_watches(relative_zxid, out);
        }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }

    fn set_watches(&self, relative_zxid: i64, out: &mut Vec<u8>) {
        let keys = |m: &HashMap<String, Vec<Sink>>| m.keys().cloned().collect::<Vec<_>>();
        if self.persistent.is_empty() && self.recursive.is_empty() {
            let req = SetWatches {
                relative_zxid,
                data_watches: keys(&self.data),
                exist_watches: keys(&self.exist),
                child_watches: keys(&self.child),
            };
            write_request(out, XID_SET_WATCHES, OpCode::SetWatches, |o| req.encode(o));
        } else {
            let req = SetWatches2 {
                relative_zxid,
                data_watches: keys(&self.data),
                exist_watches: keys(&self.exist),
                child_watches: keys(&self.child),
                persistent_watches: keys(&self.persistent),
                persistent_recursive_watches: keys(&self.recursive),
            };
            write_request(out, XID_SET_WATCHES, OpCode::SetWatches2, |o| req.encode(o));
        }
    }

    /// Writes a RemoveWatches for every watch forgotten since the last call. Nobody
    /// waits for their answers (NOWATCHER if the server had none).
    pub(super) fn write_removals(
        &mut self,
        out: &mut Vec<u8>,
        xids: &mut Xids,
        pending: &mut Pending,
    ) {
        for (watcher_type, path) in self.removals.drain(..) {
            let xid = xids.next();
            let req = WatchesRequest { path, watcher_type };
            write_request(out, xid, OpCode::RemoveWatches, |o| req.encode(o));
            pending.push_back((xid, oneshot::channel().0, super::OnReply::Nothing));
        }
    }
}
