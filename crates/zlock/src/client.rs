//! The client handle: cheap to clone, requests queued in call order.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use zlock_proto::records::{
    add_watch_mode, Acl, AddWatchRequest, Create2Response, CreateRequest, CreateResponse,
    DeleteRequest, GetAclResponse, GetChildren2Response, GetChildrenResponse, GetDataResponse,
    LockGrant, LockRequest, LockResponse, MultiOp, MultiResult, PathRequest, PathWatchRequest,
    SetDataRequest, Stat, StatResponse, WatcherEvent, FEATURE_NATIVE_LOCK,
};
use zlock_proto::{ErrorCode, OpCode, Reader, Record, Request};

use crate::chroot::{chroot_request, prefix, strip_chroot};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::session::{self, Actor, Cmd, Forgotten, GrantWait, OnReply, Sink, WatchKind, WatchReg};
use crate::watcher::Forget;
use crate::watcher::{ConnectionState, OneshotWatcher, PersistentWatcher};

/// How a node is created (ZooKeeper's CreateMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
    Container,
}

impl CreateMode {
    pub fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
            CreateMode::EphemeralSequential => 3,
            CreateMode::Container => 4,
        }
    }
}

/// A session. Clone it freely: clones share the session.
///
/// Requests are sent in the order the methods are *called* (not polled), and a
/// ZooKeeper server answers a session's requests in order.
///
/// # Connection loss
/// See the crate docs: in-flight requests fail with [`Error::ConnectionLoss`], requests
/// made while disconnected wait for the session to resume, and an expired session makes
/// every call fail with [`Error::SessionExpired`]; the client never opens a new session
/// by itself.
///
/// # Backpressure
/// A session keeps at most 4 MiB of requests queued and not yet written to the socket
/// (each request counts its encoded body plus 64 bytes, so at most ~65,000 tiny ones).
/// Past that a request waits in line, in call order, until earlier ones are written;
/// its future simply takes longer. While it waits it is held by its future only, so
/// callers cannot pile up unbounded memory inside the client. The connection reads
/// replies while it writes, so any number of requests may be in flight.
///
/// # Cancellation safety
/// [`Client::send`] queues its request when called; the `async fn`s queue theirs when
/// first polled. Dropping the future afterwards does not withdraw the request, it only
/// discards the reply (and, for the `*_watch` methods, the watcher); except that a
/// request still waiting in line for room (see Backpressure) is withdrawn.
#[derive(Clone)]
pub struct Client {
    queue: Queue,
    session_id: i64,
    timeout_ms: i32,
    passwd: Arc<[u8]>,
    chroot: Arc<str>,
    state: watch::Receiver<ConnectionState>,
    /// The server's zlock feature bits (0 for Apache ZooKeeper), kept by the actor.
    features: Arc<AtomicI32>,
    lock_path: LockPath,
    /// Where dropped watchers tell the actor they are gone.
    forgotten: mpsc::UnboundedSender<Forgotten>,
}

/// Which way the lock recipes take (see [`Client::with_lock_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockPath {
    /// The native one-round-trip lock when the server offers it, else the standard
    /// recipe.
    #[default]
    Auto,
    /// Always the standard ZooKeeper recipe (create, getChildren, watch).
    Recipe,
    /// Always the native lock; fails with `Unimplemented` on a server without it.
    Native,
}

/// What [`Client::lock_native`] answers.
#[derive(Debug)]
pub enum NativeLock {
    /// The contender's node holds now.
    Granted { node: String, czxid: i64 },
    /// The node is queued; `grant` resolves when the server grants it.
    Queued {
        node: String,
        czxid: i64,
        grant: GrantWaiter,
    },
    /// A try (`LockRequest` flag TRY) found the lock busy: nothing was created.
    Busy,
}

/// Resolves when the server pushes the grant for a queued native lock request:
/// `Ok(grant)` (node path relative to the chroot, and its czxid), or the session's
/// fate ([`Error::SessionExpired`], [`Error::Closed`]). Cancellation safe; dropping it
/// does not remove the node (delete it).
#[derive(Debug)]
pub struct GrantWaiter {
    rx: oneshot::Receiver<Result<LockGrant>>,
    chroot: Arc<str>,
    gone: Error,
}

impl std::future::Future for GrantWaiter {
    type Output = Result<LockGrant>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.rx).poll(cx).map(|r| {
            let mut g = r.map_err(|_| this.gone.clone())??;
            g.node = strip_chroot(&this.chroot, &g.node);
            Ok(g)
        })
    }
}

/// Splits a connect string `h1:2181,h2:2181/app` into hosts and chroot ("" for none).
pub(crate) fn parse_connect_string(s: &str) -> Result<(Vec<String>, String)> {
    let (hosts, chroot) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.contains(':') {
                h.to_owned()
            } else {
                format!("{h}:2181")
            }
        })
        .collect();
    if hosts.is_empty() {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot.contains("//") {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    Ok((hosts, chroot.to_owned()))
}

impl Client {
    /// Connects to a ZooKeeper connect string (`host:port[,host:port...][/chroot]`) and
    /// opens a session asking for `timeout_ms`. The hosts are tried in order once; later
    /// reconnects go round-robin. Watch events of the session (node events only, paths
    /// relative to the chroot) also arrive on the returned catch-all receiver; drop it
    /// if unused.
    ///
    /// # Errors
    /// [`Error::Connect`] when no host can be reached; [`Error::HandshakeClosed`] when
    /// the server closes the connection before it answers (too many connections from
    /// this address, for one); [`Error::Protocol`] when it does not answer the handshake
    /// like a ZooKeeper server; [`Error::BadConnectString`]. With several hosts, the
    /// last host's error.
    pub async fn connect(
        connect_string: &str,
        timeout_ms: i32,
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        Self::open(connect_string, timeout_ms, 0, &[]).await
    }

    /// Resumes an existing session (from [`Client::session_id`] and
    /// [`Client::session_password`]) on a new client; the server moves the session to
    /// it. [`Error::SessionExpired`] if the session is gone.
    pub async fn resume(
        connect_string: &str,
        timeout_ms: i32,
        session_id: i64,
        passwd: &[u8],
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        Self::open(connect_string, timeout_ms, session_id, passwd).await
    }

    async fn open(
        connect_string: &str,
        timeout_ms: i32,
        session_id: i64,
        passwd: &[u8],
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        let (hosts, chroot) = parse_connect_string(connect_string)?;
        let mut last = Error::BadConnectString(connect_string.to_owned());
        // A server can accept a connection and not answer yet (Apache ZooKeeper does
        // while it loads its data): give each host at most the session timeout.
        let per_host = std::time::Duration::from_millis(timeout_ms.max(100) as u64);
        for (i, host) in hosts.iter().enumerate() {
            let attempt = tokio::time::timeout(
                per_host,
                session::handshake(host, timeout_ms, session_id, passwd, 0),
            )
            .await
            .unwrap_or_else(|_| {
                Err(Error::Connect(
                    host.clone(),
                    format!("no answer to the handshake within {per_host:?}"),
                ))
            });
            match attempt {
                Ok((stream, buf, est)) => {
                    let (queue, inbox) = Queue::new();
                    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
                    let (forgotten, forgotten_rx) = mpsc::unbounded_channel();
                    let (state_tx, state_rx) = watch::channel(ConnectionState::Connected);
                    let features = Arc::new(AtomicI32::new(est.features));
                    let client = Client {
                        queue,
                        session_id: est.session_id,
                        timeout_ms: est.timeout_ms,
                        passwd: est.passwd.clone().into(),
                        chroot: chroot.clone().into(),
                        state: state_rx,
                        features: features.clone(),
                        lock_path: LockPath::Auto,
                        forgotten,
                    };
                    let actor = Actor::new(
                        hosts.clone(),
                        i + 1,
                        chroot,
                        est,
                        inbox,
                        forgotten_rx,
                        ev_tx,
                        state_tx,
                        features,
                    );
                    tokio::spawn(actor.run(stream, buf));
                    return Ok((client, ev_rx));
                }
                Err(e @ Error::SessionExpired) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The session password (to [`Client::resume`] the session elsewhere).
    pub fn session_password(&self) -> &[u8] {
        &self.passwd
    }

    /// The negotiated session timeout, ms.
    pub fn session_timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// The chroot of the connect string ("" for none).
    pub fn chroot(&self) -> &str {
        &self.chroot
    }

    /// The current connection state.
    pub fn state(&self) -> ConnectionState {
        *self.state.borrow()
    }

    /// The connection state as a stream: `changed().await` then `borrow()`. A slow
    /// reader may miss intermediate states but always sees the latest.
    pub fn state_stream(&self) -> watch::Receiver<ConnectionState> {
        self.state.clone()
    }

    fn gone(&self) -> Error {
        if *self.state.borrow() == ConnectionState::Lost {
            Error::SessionExpired
        } else {
            Error::Closed
        }
    }

    /// Sends a request; the returned future resolves with the raw reply. The request is
    /// queued, or takes its place in line when the queue is full (see Backpressure on
    /// [`Client`]), before this returns, so it goes out before anything sent later.
    /// Paths in it get the chroot prefixed; a watch flag (or AddWatch) registers the
    /// watch so it is re-set after a reconnect.
    pub fn send(
        &self,
        req: &Request,
    ) -> impl std::future::Future<Output = Result<(zlock_proto::records::ReplyHeader, Vec<u8>)>>
    {
        self.submit(req, Sink::None)
    }

    fn submit(
        &self,
        req: &Request,
        sink: Sink,
    ) -> impl std::future::Future<Output = Result<(zlock_proto::records::ReplyHeader, Vec<u8>)>>
    {
        self.submit_then(req, |req| match watch_of(req) {
            Some((kind, path)) => OnReply::Watch(WatchReg { kind, path, sink }),
            None => OnReply::Nothing,
        })
    }

    /// Sends `req`; `on_reply` tells, from the request as sent (chroot prefixed), what
    /// the session does with the reply besides answering.
    fn submit_then(
        &self,
        req: &Request,
        on_reply: impl FnOnce(&Request) -> OnReply,
    ) -> impl std::future::Future<Output = Result<(zlock_proto::records::ReplyHeader, Vec<u8>)>>
    {
        let owned;
        let req = if self.chroot.is_empty() {
            req
        } else {
            owned = chroot_request(&self.chroot, req);
            &owned
        };
        let on_reply = on_reply(req);
        let mut body = Vec::new();
        req.encode(&mut body);
        let (done, wait) = oneshot::channel();
        let place = self.queue.push(Cmd::Request {
            op: req.op_code(),
            body,
            on_reply,
            done,
        });
        let gone = self.gone();
        async move {
            let reply = wait.await.map_err(|_| gone);
            drop(place);
            reply?
        }
    }

    /// What a watcher of `kind` on `path` (a client path) holds to be forgotten once
    /// dropped.
    fn forget(&self, kind: WatchKind, path: &str) -> Forget {
        let mut path = path.to_owned();
        prefix(&self.chroot, &mut path);
        Forget {
            tx: self.forgotten.clone(),
            kind,
            path,
        }
    }

    async fn call<T: Record>(&self, req: Request) -> Result<T> {
        self.call_with(req, Sink::None).await
    }

    async fn call_with<T: Record>(&self, req: Request, sink: Sink) -> Result<T> {
        let (h, body) = self.submit(&req, sink).await?;
        decode_reply(&h, &body)
    }

    async fn call_empty(&self, req: Request) -> Result<()> {
        let (h, _) = self.send(&req).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        Ok(())
    }

    /// Does the server take zlock's native lock operation? (Learned in the handshake;
    /// false for Apache ZooKeeper.)
    pub fn server_has_native_locks(&self) -> bool {
        self.features.load(Ordering::Relaxed) & FEATURE_NATIVE_LOCK != 0
    }

    /// This handle with the lock recipes set to take `path` (default [`LockPath::Auto`]).
    /// The session is shared with the original handle.
    pub fn with_lock_path(mut self, path: LockPath) -> Client {
        self.lock_path = path;
        self
    }

    /// Should the lock recipes use the native lock on this handle?
    pub fn uses_native_locks(&self) -> bool {
        match self.lock_path {
            LockPath::Auto => self.server_has_native_locks(),
            LockPath::Recipe => false,
            LockPath::Native => true,
        }
    }

    /// zlock's native lock (one round trip): creates the ephemeral sequential node
    /// `req.path/req.prefixNNNNNNNNNN` (missing parents as containers) and answers
    /// whether it holds; a queued node's [`GrantWaiter`] resolves when the server grants
    /// it, in the commit that removed the last node before it. Release is an ordinary
    /// [`Client::delete`] of the node. After a reconnect the client re-registers queued
    /// waiters by itself. On a lost reply, call again with the RESUME flag: the server
    /// finds the node by its prefix instead of queueing a second one.
    ///
    /// # Errors
    /// `Server(Unimplemented)` without sending anything if the server does not offer
    /// the native lock (Apache ZooKeeper would close the connection); otherwise the
    /// errors of a create.
    pub async fn lock_native(&self, req: LockRequest) -> Result<NativeLock> {
        if !self.server_has_native_locks() {
            return Err(Error::Server(ErrorCode::Unimplemented));
        }
        let (gtx, grx) = oneshot::channel();
        let (h, body) = self
            .submit_then(&Request::Lock(req), |sent| match sent {
                // Kept to re-send the waiter after a reconnect.
                Request::Lock(req) => OnReply::Grant(GrantWait {
                    sink: gtx,
                    req: req.clone(),
                }),
                _ => OnReply::Nothing,
            })
            .await?;
        let r: LockResponse = decode_reply(&h, &body)?;
        let node = strip_chroot(&self.chroot, &r.node);
        Ok(if r.granted {
            NativeLock::Granted {
                node,
                czxid: r.czxid,
            }
        } else if r.node.is_empty() {
            NativeLock::Busy
        } else {
            NativeLock::Queued {
                node,
                czxid: r.czxid,
                grant: GrantWaiter {
                    rx: grx,
                    chroot: self.chroot.clone(),
                    gone: self.gone(),
                },
            }
        })
    }

    /// Creates a node with the open ACL; returns its actual path and Stat.
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        self.create_with_acl(path, data, Acl::open_unsafe(), mode)
            .await
    }

    pub async fn create_with_acl(
        &self,
        path: &str,
        data: &[u8],
        acl: Vec<Acl>,
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        let op = if mode == CreateMode::Container {
            OpCode::CreateContainer
        } else {
            OpCode::Create2
        };
        let r: Create2Response = self
            .call(Request::Create(
                op,
                CreateRequest {
                    path: path.to_owned(),
                    data: Some(data.to_vec()),
                    acl,
                    flags: mode.flags(),
                },
            ))
            .await?;
        Ok((strip_chroot(&self.chroot, &r.path), r.stat))
    }

    /// create (opcode 1): the reply holds only the path.
    pub async fn create_path_only(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String> {
        let r: CreateResponse = self
            .call(Request::Create(
                OpCode::Create,
                CreateRequest {
                    path: path.to_owned(),
                    data: Some(data.to_vec()),
                    acl: Acl::open_unsafe(),
                    flags: mode.flags(),
                },
            ))
            .await?;
        Ok(strip_chroot(&self.chroot, &r.path))
    }

    /// Deletes `path` if its version is `version` (-1 = any).
    pub async fn delete(&self, path: &str, version: i32) -> Result<()> {
        self.call_empty(Request::Delete(DeleteRequest {
            path: path.to_owned(),
            version,
        }))
        .await
    }

    /// The node's Stat, or None if it does not exist. `watch` sets a data/exist watch.
    pub async fn exists(&self, path: &str, watch: bool) -> Result<Option<Stat>> {
        match self
            .call::<StatResponse>(Request::Exists(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await
        {
            Ok(s) => Ok(Some(s.stat)),
            Err(Error::Server(ErrorCode::NoNode)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's data (a null value reads as empty) and Stat.
    pub async fn get_data(&self, path: &str, watch: bool) -> Result<(Vec<u8>, Stat)> {
        let r: GetDataResponse = self
            .call(Request::GetData(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok((r.data.unwrap_or_default(), r.stat))
    }

    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat> {
        let r: StatResponse = self
            .call(Request::SetData(SetDataRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                version,
            }))
            .await?;
        Ok(r.stat)
    }

    pub async fn get_children(&self, path: &str, watch: bool) -> Result<Vec<String>> {
        let r: GetChildrenResponse = self
            .call(Request::GetChildren(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok(r.children)
    }

    pub async fn get_children2(&self, path: &str, watch: bool) -> Result<(Vec<String>, Stat)> {
        let r: GetChildren2Response = self
            .call(Request::GetChildren2(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok((r.children, r.stat))
    }

    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        let r: GetAclResponse = self
            .call(Request::GetAcl(PathRequest {
                path: path.to_owned(),
            }))
            .await?;
        Ok((r.acl, r.stat))
    }

    /// An atomic multi; per-op results (an error entry for each op when it failed).
    pub async fn multi(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        let (h, body) = self.send(&Request::Multi(ops)).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        let mut rs = zlock_proto::records::decode_multi_results(&mut Reader::new(&body))
            .map_err(|e| Error::Protocol(e.to_string()))?;
        for r in &mut rs {
            if let MultiResult::Create(p) | MultiResult::Create2(p, _) = r {
                *p = strip_chroot(&self.chroot, p);
            }
        }
        Ok(rs)
    }

    /// The node's data and Stat, and a one-shot watcher for its next data change or
    /// deletion.
    pub async fn get_data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, OneshotWatcher)> {
        let (tx, rx) = oneshot::channel();
        let r: GetDataResponse = self
            .call_with(
                Request::GetData(PathWatchRequest {
                    path: path.to_owned(),
                    watch: true,
                }),
                Sink::Oneshot(tx),
            )
            .await?;
        let watcher = OneshotWatcher {
            rx,
            _forget: self.forget(WatchKind::Data, path),
        };
        Ok((r.data.unwrap_or_default(), r.stat, watcher))
    }

    /// The node's Stat (None if absent) and a one-shot watcher for its creation, data
    /// change or deletion.
    pub async fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, OneshotWatcher)> {
        let (tx, rx) = oneshot::channel();
        let r = self
            .call_with::<StatResponse>(
                Request::Exists(PathWatchRequest {
                    path: path.to_owned(),
                    watch: true,
                }),
                Sink::Oneshot(tx),
            )
            .await;
        let stat = match r {
            Ok(s) => Some(s.stat),
            Err(Error::Server(ErrorCode::NoNode)) => None,
            Err(e) => return Err(e),
        };
        let watcher = OneshotWatcher {
            rx,
            _forget: self.forget(WatchKind::Exists, path),
        };
        Ok((stat, watcher))
    }

    /// The node's children and a one-shot watcher for a change of them (or deletion).
    pub async fn get_children_watch(&self, path: &str) -> Result<(Vec<String>, OneshotWatcher)> {
        let (tx, rx) = oneshot::channel();
        let r: GetChildrenResponse = self
            .call_with(
                Request::GetChildren(PathWatchRequest {
                    path: path.to_owned(),
                    watch: true,
                }),
                Sink::Oneshot(tx),
            )
            .await?;
        let watcher = OneshotWatcher {
            rx,
            _forget: self.forget(WatchKind::Child, path),
        };
        Ok((r.children, watcher))
    }

    /// A persistent watch on `path` (addWatch, ZooKeeper 3.6+), recursive or not.
    pub async fn add_watch(&self, path: &str, recursive: bool) -> Result<PersistentWatcher> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mode = if recursive {
            add_watch_mode::PERSISTENT_RECURSIVE
        } else {
            add_watch_mode::PERSISTENT
        };
        let (h, _) = self
            .submit(
                &Request::AddWatch(AddWatchRequest {
                    path: path.to_owned(),
                    mode,
                }),
                Sink::Persistent(tx),
            )
            .await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        let kind = if recursive {
            WatchKind::PersistentRecursive
        } else {
            WatchKind::Persistent
        };
        Ok(PersistentWatcher {
            rx,
            _forget: self.forget(kind, path),
        })
    }

    /// Adds credentials to the session (e.g. `add_auth("digest", b"user:pass")`). Once
    /// accepted they are re-sent after every reconnect.
    ///
    /// # Errors
    /// `Server(AuthFailed)` when the server rejects them (ZooKeeper then also closes the
    /// connection).
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<()> {
        let (done, wait) = oneshot::channel();
        let gone = self.gone();
        let _place = self.queue.push(Cmd::Auth {
            scheme: scheme.to_owned(),
            auth: auth.to_vec(),
            done,
        });
        let (h, _) = wait.await.map_err(|_| gone)??;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        Ok(())
    }

    /// Creates every missing node of `path` (persistent, empty).
    pub async fn ensure_path(&self, path: &str) -> Result<()> {
        let mut cur = String::new();
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            match self.create(&cur, b"", CreateMode::Persistent).await {
                Ok(_) | Err(Error::Server(ErrorCode::NodeExists)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Closes the session: its ephemeral nodes go at once. While the connection is
    /// suspended the close waits for the reconnect (at most the session timeout); on a
    /// lost session it returns Ok at once.
    pub async fn close(&self) -> Result<()> {
        let (done, wait) = oneshot::channel();
        let _place = self.queue.push(Cmd::Close { done });
        match wait.await {
            Ok(Ok(_)) | Err(_) | Ok(Err(Error::ConnectionLoss | Error::SessionExpired)) => Ok(()),
            Ok(Err(e)) => Err(e),
        }
    }
}

/// The watch a request sets, with its (already chrooted) server path.
fn watch_of(req: &Request) -> Option<(WatchKind, String)> {
    match req {
        Request::Exists(r) if r.watch => Some((WatchKind::Exists, r.path.clone())),
        Request::GetData(r) if r.watch => Some((WatchKind::Data, r.path.clone())),
        Request::GetChildren(r) | Request::GetChildren2(r) if r.watch => {
            Some((WatchKind::Child, r.path.clone()))
        }
        Request::AddWatch(r) => {
            let kind = if r.mode == add_watch_mode::PERSISTENT_RECURSIVE {
                WatchKind::PersistentRecursive
            } else {
                WatchKind::Persistent
            };
            Some((kind, r.path.clone()))
        }
        _ => None,
    }
}

/// A reply's record, or the server's error.
fn decode_reply<T: Record>(h: &zlock_proto::records::ReplyHeader, body: &[u8]) -> Result<T> {
    if h.err != 0 {
        return Err(Error::from_code(h.err));
    }
    T::decode(&mut Reader::new(body)).map_err(|e| Error::Protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        let (h, c) = parse_connect_string("a:1,b:2/app/x").unwrap();
        assert_eq!(h, vec!["a:1", "b:2"]);
        assert_eq!(c, "/app/x");
        let (h, c) = parse_connect_string("a").unwrap();
        assert_eq!(h, vec!["a:2181"]);
        assert_eq!(c, "");
        assert_eq!(parse_connect_string("a:1/").unwrap().1, "");
        assert!(parse_connect_string("/app").is_err());
    }
}
