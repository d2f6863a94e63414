//! The session actor: owns the socket, writes requests in call order, matches replies
//! (which a ZooKeeper server sends in request order), keeps the watch registry and
//! reconnects.
//!
//! # Reading while writing
//! One task reads and writes the socket: its loop writes the unwritten part of a batch
//! with `write` (cancel safe: a write that loses the race wrote nothing) in the same
//! `select!` as the read, so replies keep being read while a write waits for the server.
//! A server stops reading a connection whose unwritten replies pile up (ZooKeeper's
//! `globalOutstandingLimit`; zlock's 1000), so a client that stopped reading during a
//! blocked write would wait for it forever. New commands are taken from the
//! [`Inbox`] only once the previous batch is written, in call order; the batch's room in
//! the queue is given back then (see [`crate::queue`]).
//!
//! # Connection loss
//! When the connection breaks (EOF, I/O error, or nothing heard for 2/3 of the session
//! timeout) the actor fails every request already written with
//! [`Error::ConnectionLoss`] (it may or may not have been applied), publishes
//! [`ConnectionState::Suspended`], and tries the hosts round-robin with a short backoff
//! (20 ms doubling to 1 s), asking to resume the same session (id, password and the last
//! zxid seen). Requests made meanwhile stay queued and are sent once reconnected. On
//! success it re-sends the auth packets, then re-registers every watch with SetWatches
//! (or SetWatches2 when persistent watches exist) relative to the last zxid seen, so the
//! server fires at once whatever changed while we were away, and publishes
//! [`ConnectionState::Reconnected`].
//!
//! If the server answers the resume with a zero timeout (session expired), or no host
//! answers within the session timeout (the server will have expired it), the session
//! is lost: [`ConnectionState::Lost`], every queued and later request fails with
//! [`Error::SessionExpired`], one-shot watchers resolve with that error and persistent
//! watchers end. A new session is never opened silently.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zlock_proto::frame;
use zlock_proto::records::{
    lock_flags, AuthPacket, ConnectRequest, ConnectResponse, LockGrant, LockRequest, LockResponse,
    ReplyHeader, RequestHeader, SetWatches, SetWatches2, WatcherEvent, FEATURE_NATIVE_LOCK,
    XID_AUTH, XID_LOCK_GRANT, XID_NOTIFICATION, XID_PING, XID_SET_WATCHES,
};
use zlock_proto::records::{watcher_type, WatchesRequest};
use zlock_proto::{ErrorCode, OpCode, Reader, Record};

use crate::error::{Error, Result};
use crate::queue::Inbox;
use crate::watcher::{ConnectionState, EventType, WatchedEvent};

/// A reply: its header and the bytes after it.
pub(crate) type Reply = Result<(ReplyHeader, Vec<u8>)>;

/// Where a watch's events go besides the catch-all receiver.
pub(crate) enum Sink {
    None,
    Oneshot(oneshot::Sender<Result<WatchedEvent>>),
    Persistent(mpsc::UnboundedSender<WatchedEvent>),
    /// A native lock request: if the reply says queued, the grant goes here. The
    /// request as sent (server paths; filled in when it is queued) is kept to
    /// re-register the waiter after a reconnect.
    Grant(oneshot::Sender<Result<LockGrant>>, Option<LockRequest>),
}

impl Sink {
    /// Whether someone still listens: a dropped watcher's sink is closed. `None` (the
    /// session's catch-all event stream) always listens.
    fn is_live(&self) -> bool {
        match self {
            Sink::None => true,
            Sink::Oneshot(tx) => !tx.is_closed(),
            Sink::Persistent(tx) => !tx.is_closed(),
            Sink::Grant(tx, _) => !tx.is_closed(),
        }
    }
}

/// A watcher that was dropped: its kind and server path, sent to the actor so that
/// the watch is forgotten (and removed on the server once no other watcher of the
/// session needs it).
pub(crate) struct Forgotten {
    pub kind: WatchKind,
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchKind {
    /// exists with watch: a data watch if the node exists, else an exist watch.
    Exists,
    Data,
    Child,
    Persistent,
    PersistentRecursive,
    /// Not a watch: a native lock waiter (see [`Sink::Grant`]).
    LockGrant,
}

/// A queued native lock request waiting for its grant.
struct GrantWait {
    sink: oneshot::Sender<Result<LockGrant>>,
    req: LockRequest,
}

/// A watch a request registers once the server accepts it. `path` is the server path.
pub(crate) struct WatchReg {
    pub kind: WatchKind,
    pub path: String,
    pub sink: Sink,
}

pub(crate) enum Cmd {
    Request {
        op: OpCode,
        body: Vec<u8>,
        watch: Option<WatchReg>,
        done: oneshot::Sender<Reply>,
    },
    Auth {
        scheme: String,
        auth: Vec<u8>,
        done: oneshot::Sender<Reply>,
    },
    Close {
        done: oneshot::Sender<Reply>,
    },
}

pub(crate) struct Established {
    pub session_id: i64,
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    /// zlock feature bits the server offered (0 for Apache ZooKeeper).
    pub features: i32,
}

fn perr(e: impl std::fmt::Display) -> Error {
    Error::Protocol(e.to_string())
}

/// Connects to one host and performs the handshake (a fresh session when `session_id`
/// is 0).
pub(crate) async fn handshake(
    addr: &str,
    timeout_ms: i32,
    session_id: i64,
    passwd: &[u8],
    last_zxid: i64,
) -> Result<(TcpStream, BytesMut, Established)> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| Error::Connect(addr.to_owned(), e.to_string()))?;
    let _ = s.set_nodelay(true);
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: last_zxid,
        time_out: timeout_ms,
        session_id,
        passwd: if passwd.is_empty() {
            vec![0; 16]
        } else {
            passwd.to_vec()
        },
        read_only: Some(false),
        features: Some(FEATURE_NATIVE_LOCK),
    };
    let mut out = Vec::new();
    let at = frame::begin(&mut out);
    req.encode(&mut out);
    frame::finish(&mut out, at);
    // The server may close a connection it accepted before it reads a byte (ZooKeeper's
    // maxClientCnxns): an EOF or a reset from here on is that, any other error a
    // connection loss.
    let closed = |e: std::io::Error| match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            Error::HandshakeClosed(addr.to_owned())
        }
        _ => Error::ConnectionLoss,
    };
    s.write_all(&out).await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        if let Some((n, body)) = frame::parse(&buf, usize::MAX >> 1).map_err(perr)? {
            let resp = ConnectResponse::decode(&mut Reader::new(body)).map_err(perr)?;
            buf.advance(n);
            if resp.time_out <= 0 || resp.session_id == 0 {
                return Err(Error::SessionExpired);
            }
            return Ok((
                s,
                buf,
                Established {
                    session_id: resp.session_id,
                    timeout_ms: resp.time_out,
                    passwd: resp.passwd,
                    features: resp.features.unwrap_or(0),
                },
            ));
        }
        if s.read_buf(&mut buf).await.map_err(closed)? == 0 {
            return Err(Error::HandshakeClosed(addr.to_owned()));
        }
    }
}

/// The watch registry, keyed by server path.
#[derive(Default)]
struct Watches {
    data: HashMap<String, Vec<Sink>>,
    exist: HashMap<String, Vec<Sink>>,
    child: HashMap<String, Vec<Sink>>,
    persistent: HashMap<String, Vec<Sink>>,
    recursive: HashMap<String, Vec<Sink>>,
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
    fn register(&mut self, kind: WatchKind, path: String, sink: Sink) {
        let map = match kind {
            WatchKind::Exists => &mut self.exist,
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::PersistentRecursive => &mut self.recursive,
            WatchKind::LockGrant => return,
        };
        map.entry(path).or_default().push(sink);
    }

    /// Dispatches one event (server path) like ZooKeeper's ZKWatchManager.
    fn dispatch(&mut self, path: &str, ev: &WatchedEvent) {
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
    fn fail_all(&mut self, err: &Error) {
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
            WatchKind::LockGrant => return None,
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

    /// [`Watches::prune`] on every watch (before re-registering them after a
    /// reconnect): what no watcher needs any more, to remove on the server.
    fn prune_all(&mut self) -> Vec<(i32, String)> {
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
        gone.into_iter()
            .filter_map(|(kind, path)| self.prune(kind, &path).map(|ty| (ty, path)))
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }

    /// The SetWatches (or SetWatches2) request re-registering everything.
    fn set_watches(&self, relative_zxid: i64, out: &mut Vec<u8>) {
        let keys = |m: &HashMap<String, Vec<Sink>>| m.keys().cloned().collect::<Vec<_>>();
        let at = frame::begin(out);
        if self.persistent.is_empty() && self.recursive.is_empty() {
            RequestHeader {
                xid: XID_SET_WATCHES,
                op_type: OpCode::SetWatches.code(),
            }
            .encode(out);
            SetWatches {
                relative_zxid,
                data_watches: keys(&self.data),
                exist_watches: keys(&self.exist),
                child_watches: keys(&self.child),
            }
            .encode(out);
        } else {
            RequestHeader {
                xid: XID_SET_WATCHES,
                op_type: OpCode::SetWatches2.code(),
            }
            .encode(out);
            SetWatches2 {
                relative_zxid,
                data_watches: keys(&self.data),
                exist_watches: keys(&self.exist),
                child_watches: keys(&self.child),
                persistent_watches: keys(&self.persistent),
                persistent_recursive_watches: keys(&self.recursive),
            }
            .encode(out);
        }
        frame::finish(out, at);
    }
}

/// Strips the chroot from a server path.
pub(crate) fn strip_chroot(chroot: &str, path: &str) -> String {
    if chroot.is_empty() {
        return path.to_owned();
    }
    match path.strip_prefix(chroot) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => path.to_owned(),
    }
}

pub(crate) struct Actor {
    pub hosts: Vec<String>,
    pub next_host: usize,
    pub chroot: String,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub timeout_ms: i32,
    pub last_zxid: i64,
    pub cmds: Inbox,
    /// Watchers dropped by their owners.
    pub forgotten: mpsc::UnboundedReceiver<Forgotten>,
    pub events: mpsc::UnboundedSender<WatcherEvent>,
    pub state: watch::Sender<ConnectionState>,
    /// The server's feature bits, shared with the [`Client`](crate::Client) handles.
    pub features: Arc<AtomicI32>,
    auths: Vec<(String, Vec<u8>)>,
    watches: Watches,
    /// Watches no watcher needs any more, to remove on the server (RemoveWatches:
    /// watcher type, server path), sent on the current connection or the next.
    removals: Vec<(i32, String)>,
    /// Queued native lock requests by node (server path).
    grants: HashMap<String, GrantWait>,
    /// `grants` size at which given-up waits are next pruned.
    grants_prune_at: usize,
}

enum End {
    Closed,
    Broken,
}

type Pending = VecDeque<(i32, oneshot::Sender<Reply>, Option<WatchReg>)>;

impl Actor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        hosts: Vec<String>,
        next_host: usize,
        chroot: String,
        est: Established,
        cmds: Inbox,
        forgotten: mpsc::UnboundedReceiver<Forgotten>,
        events: mpsc::UnboundedSender<WatcherEvent>,
        state: watch::Sender<ConnectionState>,
        features: Arc<AtomicI32>,
    ) -> Actor {
        Actor {
            hosts,
            next_host,
            chroot,
            session_id: est.session_id,
            passwd: est.passwd,
            timeout_ms: est.timeout_ms,
            last_zxid: 0,
            cmds,
            forgotten,
            events,
            state,
            features,
            auths: Vec::new(),
            watches: Watches::default(),
            removals: Vec::new(),
            grants: HashMap::new(),
            grants_prune_at: 64,
        }
    }

    /// Runs the session until it is closed or lost.
    pub(crate) async fn run(mut self, mut stream: TcpStream, mut buf: BytesMut) {
        loop {
            match self.serve(stream, buf).await {
                End::Closed => {
                    self.watches.fail_all(&Error::Closed);
                    self.fail_grants(&Error::Closed);
                    let _ = self.state.send(ConnectionState::Closed);
                    return;
                }
                End::Broken => {
                    let _ = self.state.send(ConnectionState::Suspended);
                    match self.reconnect().await {
                        Some((s, b)) => {
                            stream = s;
                            buf = b;
                            let _ = self.state.send(ConnectionState::Reconnected);
                        }
                        None => break,
                    }
                }
            }
        }
        // Lost: answer everything with SessionExpired until every handle is gone.
        self.watches.fail_all(&Error::SessionExpired);
        self.fail_grants(&Error::SessionExpired);
        let _ = self.state.send(ConnectionState::Lost);
        while let Some(cmd) = self.cmds.recv().await {
            let done = match cmd {
                Cmd::Request { done, .. } | Cmd::Auth { done, .. } | Cmd::Close { done } => done,
            };
            let _ = done.send(Err(Error::SessionExpired));
            self.cmds.release();
        }
    }

    /// Tries the hosts round-robin until one resumes the session, the server says it
    /// expired, or the session timeout passes. None = lost.
    async fn reconnect(&mut self) -> Option<(TcpStream, BytesMut)> {
        let deadline = Instant::now() + Duration::from_millis(self.timeout_ms.max(1) as u64);
        let mut backoff = Duration::from_millis(20);
        let attempt_limit = Duration::from_millis(
            (self.timeout_ms as u64 / self.hosts.len().max(1) as u64).max(100),
        );
        loop {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    session = self.session_id,
                    "no host resumed the session in time"
                );
                return None;
            }
            let host = self.hosts[self.next_host % self.hosts.len()].clone();
            self.next_host = self.next_host.wrapping_add(1);
            let attempt = tokio::time::timeout(
                attempt_limit.min(deadline - now),
                handshake(
                    &host,
                    self.timeout_ms,
                    self.session_id,
                    &self.passwd,
                    self.last_zxid,
                ),
            )
            .await;
            match attempt {
                Ok(Ok((s, b, est))) => {
                    if est.session_id != self.session_id {
                        tracing::warn!("server answered with another session: treating as expired");
                        return None;
                    }
                    self.timeout_ms = est.timeout_ms;
                    self.features.store(est.features, Ordering::Relaxed);
                    return Some((s, b));
                }
                Ok(Err(Error::SessionExpired)) => {
                    tracing::warn!(session = self.session_id, host, "session expired");
                    return None;
                }
                Ok(Err(e)) => tracing::debug!(host, "reconnect failed: {e}"),
                Err(_) => tracing::debug!(host, "reconnect timed out"),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    fn fail_grants(&mut self, err: &Error) {
        for (_, w) in self.grants.drain() {
            let _ = w.sink.send(Err(err.clone()));
        }
    }

    /// A native lock reply: a queued waiter waits for its grant (or, for a re-sent
    /// request after a reconnect, is told it holds now).
    fn register_lock(&mut self, h: &ReplyHeader, body: &[u8], sink: Sink) {
        let Sink::Grant(tx, Some(req)) = sink else {
            return;
        };
        if h.err != 0 {
            let _ = tx.send(Err(Error::from_code(h.err)));
            return;
        }
        match LockResponse::decode(&mut Reader::new(body)) {
            Ok(r) if r.granted => {
                let _ = tx.send(Ok(LockGrant {
                    node: r.node,
                    czxid: r.czxid,
                }));
            }
            Ok(r) if !r.node.is_empty() => {
                // Waits given up (their GrantWaiter dropped) are pruned now and then,
                // not on every insert: a session may queue thousands of nodes.
                if self.grants.len() >= self.grants_prune_at {
                    self.grants.retain(|_, w| !w.sink.is_closed());
                    self.grants_prune_at = (2 * self.grants.len()).max(64);
                }
                self.grants.insert(r.node, GrantWait { sink: tx, req });
            }
            Ok(_) => {
                let _ = tx.send(Err(Error::Server(ErrorCode::NoNode)));
            }
            Err(e) => {
                let _ = tx.send(Err(perr(e)));
            }
        }
    }

    fn register(&mut self, h: &ReplyHeader, body: &[u8], reg: Option<WatchReg>) {
        let Some(WatchReg { kind, path, sink }) = reg else {
            return;
        };
        if kind == WatchKind::LockGrant {
            self.register_lock(h, body, sink);
            return;
        }
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
        self.watches.register(kind, path.clone(), sink);
        if closed {
            self.forget(kind, path);
        }
    }

    /// A watcher of `kind` on `path` was dropped: its sink goes, and the watch is
    /// removed on the server once no other watcher needs it.
    fn forget(&mut self, kind: WatchKind, path: String) {
        if let Some(ty) = self.watches.prune(kind, &path) {
            self.removals.push((ty, path));
        }
    }

    /// Serves one connection until it breaks or the session is closed.
    async fn serve(&mut self, stream: TcpStream, mut buf: BytesMut) -> End {
        let (mut rd, mut wr) = stream.into_split();
        let mut pending: Pending = VecDeque::new();
        // Auth packets awaiting their reply: the caller, and the credentials to keep
        // for later reconnects once the server accepts them.
        type AuthWait = (Option<oneshot::Sender<Reply>>, Option<(String, Vec<u8>)>);
        let mut auth_pending: VecDeque<AuthWait> = VecDeque::new();
        let mut next_xid: i32 = 1;
        let timeout = Duration::from_millis(self.timeout_ms.max(30) as u64);
        let ping_every = timeout / 3;
        let read_timeout = timeout * 2 / 3;
        let mut ping = tokio::time::interval(ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        // Frames to write; `written` of its bytes are on the socket. New commands are
        // taken only once it is all written (so it holds at most one batch, within the
        // queue's bound, plus pings).
        let mut out = Vec::with_capacity(64 * 1024);
        let mut written = 0;
        let mut closing = false;

        // Prime a resumed connection: auth first, then the watches (written by the
        // loop below before it takes any command).
        for (scheme, auth) in &self.auths {
            write_auth(&mut out, scheme, auth);
            auth_pending.push_back((None, None));
        }
        // Dropped watchers are not registered again; what the server may still hold
        // of them is removed below.
        let gone = self.watches.prune_all();
        self.removals.extend(gone);
        if !self.watches.is_empty() {
            self.watches.set_watches(self.last_zxid, &mut out);
        }
        // Native lock waiters: the grant may have been pushed while we were away, and
        // the server knows waiters by connection. Re-send each request with RESUME: it
        // finds the node and answers granted, or queued (registered again).
        // Their xids: if this connection breaks before they are answered, they go back
        // to `grants` (still waiting) to be re-sent on the next one.
        let mut resent: Vec<i32> = Vec::new();
        self.grants.retain(|_, w| !w.sink.is_closed());
        for (node, w) in self.grants.drain() {
            let mut req = w.req;
            req.flags |= lock_flags::RESUME;
            let xid = next_xid;
            next_xid = next_xid.wrapping_add(1).max(1);
            resent.push(xid);
            let at = frame::begin(&mut out);
            RequestHeader {
                xid,
                op_type: OpCode::Lock.code(),
            }
            .encode(&mut out);
            req.encode(&mut out);
            frame::finish(&mut out, at);
            let (done, _) = oneshot::channel();
            let sink = Sink::Grant(w.sink, Some(req));
            pending.push_back((
                xid,
                done,
                Some(WatchReg {
                    kind: WatchKind::LockGrant,
                    path: node,
                    sink,
                }),
            ));
        }

        let end = 'conn: loop {
            if !closing {
                for (watcher_type, path) in self.removals.drain(..) {
                    let xid = next_xid;
                    next_xid = next_xid.wrapping_add(1).max(1);
                    let at = frame::begin(&mut out);
                    RequestHeader {
                        xid,
                        op_type: OpCode::RemoveWatches.code(),
                    }
                    .encode(&mut out);
                    WatchesRequest { path, watcher_type }.encode(&mut out);
                    frame::finish(&mut out, at);
                    // Nobody waits for the answer (NOWATCHER if the server had none).
                    pending.push_back((xid, oneshot::channel().0, None));
                }
            }
            let unwritten = written < out.len();
            tokio::select! {
                Some(f) = self.forgotten.recv() => self.forget(f.kind, f.path),
                r = wr.write(&out[written..]), if unwritten => {
                    match r {
                        Ok(0) | Err(_) => break 'conn End::Broken,
                        Ok(n) => written += n,
                    }
                    if written == out.len() {
                        out.clear();
                        written = 0;
                        self.cmds.release();
                    }
                }
                cmd = self.cmds.recv(), if !closing && !unwritten => {
                    let Some(cmd) = cmd else { break 'conn End::Closed };
                    let mut cmd = Some(cmd);
                    // Take every queued command: one write for all of them.
                    while let Some(c) = cmd.take() {
                        match c {
                            Cmd::Request { op, body, watch, done } => {
                                let xid = next_xid;
                                next_xid = next_xid.wrapping_add(1).max(1);
                                let at = frame::begin(&mut out);
                                RequestHeader { xid, op_type: op.code() }.encode(&mut out);
                                out.extend_from_slice(&body);
                                frame::finish(&mut out, at);
                                pending.push_back((xid, done, watch));
                            }
                            Cmd::Auth { scheme, auth, done } => {
                                write_auth(&mut out, &scheme, &auth);
                                auth_pending.push_back((Some(done), Some((scheme, auth))));
                            }
                            Cmd::Close { done } => {
                                closing = true;
                                let xid = next_xid;
                                let at = frame::begin(&mut out);
                                RequestHeader { xid, op_type: OpCode::CloseSession.code() }
                                    .encode(&mut out);
                                frame::finish(&mut out, at);
                                pending.push_back((xid, done, None));
                            }
                        }
                        if closing { break; }
                        cmd = self.cmds.try_recv();
                    }
                    ping.reset();
                }
                _ = tokio::time::sleep_until(last_heard + read_timeout) => {
                    tracing::debug!("nothing heard for {read_timeout:?}: connection lost");
                    break 'conn End::Broken;
                }
                _ = ping.tick() => {
                    let at = frame::begin(&mut out);
                    RequestHeader { xid: XID_PING, op_type: OpCode::Ping.code() }.encode(&mut out);
                    frame::finish(&mut out, at);
                }
                r = rd.read_buf(&mut buf) => {
                    match r {
                        Ok(0) | Err(_) => break 'conn if closing { End::Closed } else { End::Broken },
                        Ok(_) => {}
                    }
                    last_heard = Instant::now();
                    loop {
                        let parsed = match frame::parse(&buf, usize::MAX >> 1) {
                            Ok(Some((n, body))) => {
                                let mut r = Reader::new(body);
                                let Ok(h) = ReplyHeader::decode(&mut r) else { break 'conn End::Broken };
                                Some((n, h, r.rest().to_vec()))
                            }
                            Ok(None) => None,
                            Err(_) => break 'conn End::Broken,
                        };
                        let Some((n, h, rest)) = parsed else { break };
                        buf.advance(n);
                        match h.xid {
                            XID_NOTIFICATION => {
                                if let Ok(ev) = WatcherEvent::decode(&mut Reader::new(&rest)) {
                                    self.notify(ev);
                                }
                            }
                            XID_LOCK_GRANT => {
                                self.last_zxid = self.last_zxid.max(h.zxid);
                                if let Ok(g) = LockGrant::decode(&mut Reader::new(&rest)) {
                                    if let Some(w) = self.grants.remove(&g.node) {
                                        let _ = w.sink.send(Ok(g));
                                    }
                                }
                            }
                            XID_PING | XID_SET_WATCHES => {}
                            XID_AUTH => {
                                if let Some((done, cred)) = auth_pending.pop_front() {
                                    if let (0, Some(c)) = (h.err, cred) {
                                        self.auths.push(c);
                                    }
                                    if let Some(done) = done {
                                        let _ = done.send(Ok((h, rest)));
                                    }
                                }
                            }
                            xid => {
                                if h.zxid > 0 {
                                    self.last_zxid = self.last_zxid.max(h.zxid);
                                }
                                match pending.pop_front() {
                                    Some((want, done, reg)) if want == xid => {
                                        self.register(&h, &rest, reg);
                                        let _ = done.send(Ok((h, rest)));
                                    }
                                    _ => break 'conn End::Broken,
                                }
                            }
                        }
                    }
                    if closing && pending.is_empty() { break 'conn End::Closed; }
                }
            }
        };
        for (xid, done, reg) in pending {
            match reg {
                Some(WatchReg {
                    kind: WatchKind::LockGrant,
                    path,
                    sink: Sink::Grant(sink, Some(req)),
                }) if resent.contains(&xid) => {
                    self.grants.insert(path, GrantWait { sink, req });
                }
                _ => {
                    let _ = done.send(Err(Error::ConnectionLoss));
                }
            }
        }
        for done in auth_pending.into_iter().filter_map(|(d, _)| d) {
            let _ = done.send(Err(Error::ConnectionLoss));
        }
        // The commands taken are answered (or will be re-sent from `grants`).
        self.cmds.release();
        end
    }

    fn notify(&mut self, mut ev: WatcherEvent) {
        let server_path = std::mem::take(&mut ev.path);
        ev.path = strip_chroot(&self.chroot, &server_path);
        let typed = WatchedEvent {
            event_type: EventType::from_i32(ev.event_type),
            path: ev.path.clone(),
        };
        self.watches.dispatch(&server_path, &typed);
        let _ = self.events.send(ev);
    }
}

fn write_auth(out: &mut Vec<u8>, scheme: &str, auth: &[u8]) {
    let at = frame::begin(out);
    RequestHeader {
        xid: XID_AUTH,
        op_type: OpCode::Auth.code(),
    }
    .encode(out);
    AuthPacket {
        auth_type: 0,
        scheme: scheme.to_owned(),
        auth: auth.to_vec(),
    }
    .encode(out);
    frame::finish(out, at);
}
