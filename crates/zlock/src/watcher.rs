//! Typed watchers and the connection state.
//!
//! Watches are registered in the session actor once the server accepts the request that
//! set them, and re-registered (SetWatches, relative to the last zxid seen) after every
//! reconnect, so an event that happened while disconnected still fires.
//!
//! Dropping a watcher forgets it: the session stops registering it after a reconnect
//! and, once no other watcher of the session needs the same watch (one data watch
//! serves every data and exists watcher of a path), removes it on the server
//! (removeWatches), so it is not fed for nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::session::{Forgotten, WatchKind};

/// Held by a watcher: tells its session, when dropped, that the watcher is gone.
#[derive(Debug)]
pub(crate) struct Forget {
    pub tx: mpsc::UnboundedSender<Forgotten>,
    pub kind: WatchKind,
    /// The server path (chroot included).
    pub path: String,
}

impl Drop for Forget {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        let _ = self.tx.send(Forgotten {
            kind: self.kind,
            path,
        });
    }
}

/// Connection state in Apache Curator's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// The first connection is up.
    Connected,
    /// The connection broke; the session may still be alive. Requests wait.
    Suspended,
    /// A connection resumed the same session.
    Reconnected,
    /// The session expired (or could not be resumed within its timeout). Final.
    Lost,
    /// The session was closed by [`Client::close`](crate::Client::close). Final.
    Closed,
}

/// The type of a watch event (ZooKeeper's `Watcher.Event.EventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
    DataWatchRemoved,
    ChildWatchRemoved,
    PersistentWatchRemoved,
    /// A code this client does not know (or -1, a state-only event).
    Other(i32),
}

impl EventType {
    pub fn from_i32(v: i32) -> EventType {
        match v {
            1 => EventType::NodeCreated,
            2 => EventType::NodeDeleted,
            3 => EventType::NodeDataChanged,
            4 => EventType::NodeChildrenChanged,
            5 => EventType::DataWatchRemoved,
            6 => EventType::ChildWatchRemoved,
            7 => EventType::PersistentWatchRemoved,
            o => EventType::Other(o),
        }
    }
}

/// A node event, its path relative to the client's chroot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    pub event_type: EventType,
    pub path: String,
}

/// A one-shot watch: a future resolving to the one event that triggers it.
///
/// Resolves to [`Error::SessionExpired`] if the session is lost first, or
/// [`Error::Closed`] if the client is closed. Cancellation safe: dropping it discards
/// the event and forgets the watch (see the module doc).
#[derive(Debug)]
pub struct OneshotWatcher {
    pub(crate) rx: oneshot::Receiver<Result<WatchedEvent>>,
    pub(crate) _forget: Forget,
}

impl Future for OneshotWatcher {
    type Output = Result<WatchedEvent>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

/// A persistent (optionally recursive) watch: every event on the path (and, if
/// recursive, below it; recursive watches get no NodeChildrenChanged).
///
/// [`PersistentWatcher::changed`] returns None once the session is lost or closed.
/// Dropping it removes the watch (see the module doc).
#[derive(Debug)]
pub struct PersistentWatcher {
    pub(crate) rx: mpsc::UnboundedReceiver<WatchedEvent>,
    pub(crate) _forget: Forget,
}

impl PersistentWatcher {
    /// The next event; None when the session has ended. Cancellation safe.
    pub async fn changed(&mut self) -> Option<WatchedEvent> {
        self.rx.recv().await
    }
}
