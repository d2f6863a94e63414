//! The client handle: cheap to clone, requests queued in call order, a chroot applied
//! to every path. Its ZooKeeper operations are in `ops`, the native lock in `native`.

mod native;
mod ops;

use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use zlock_proto::records::{add_watch_mode, ReplyHeader, WatcherEvent};
use zlock_proto::{Reader, Record, Request};

pub use native::{GrantWaiter, LockPath, NativeLock};
pub use ops::CreateMode;

use crate::chroot::{chroot_request, prefix};
use crate::connect::{parse_connect_string, ClientBuilder};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::session::{self, Actor, Cmd, Forgotten, OnReply, Sink, WatchKind, WatchReg};
use crate::watcher::{ConnectionState, Forget};

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

impl Client {
    /// Connects to a ZooKeeper connect string (`host:port[,host:port...][/chroot]`) and
    /// opens a session asking for `timeout_ms`. The hosts are tried in order once; later
    /// reconnects go round-robin. Watch events of the session (node events only, paths
    /// relative to the chroot) also arrive on the returned catch-all receiver; drop it
    /// if unused. For TLS and other options, [`Client::builder`].
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
        Self::builder(connect_string)
            .session_timeout_ms(timeout_ms)
            .connect()
            .await
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
        Self::builder(connect_string)
            .session_timeout_ms(timeout_ms)
            .resume(session_id, passwd)
            .await
    }

    /// A client to `connect_string` with options: the session timeout, TLS
    /// ([`crate::TlsOptions`]).
    pub fn builder(connect_string: &str) -> ClientBuilder {
        ClientBuilder::new(connect_string)
    }

    pub(crate) async fn open(
        opts: &ClientBuilder,
        session_id: i64,
        passwd: &[u8],
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        let (hosts, chroot) = parse_connect_string(&opts.connect_string)?;
        let timeout_ms = opts.timeout_ms;
        let tls = opts.tls.as_ref().map(|t| t.connector()).transpose()?;
        let mut last = Error::BadConnectString(opts.connect_string.clone());
        // A server can accept a connection and not answer yet (Apache ZooKeeper does
        // while it loads its data): give each host at most the session timeout.
        let per_host = std::time::Duration::from_millis(timeout_ms.max(100) as u64);
        for (i, host) in hosts.iter().enumerate() {
            let attempt = tokio::time::timeout(
                per_host,
                session::handshake(host, tls.as_ref(), timeout_ms, session_id, passwd, 0),
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
                        tls,
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
    ) -> impl std::future::Future<Output = Result<(ReplyHeader, Vec<u8>)>> {
        self.submit(req, Sink::None)
    }

    fn submit(
        &self,
        req: &Request,
        sink: Sink,
    ) -> impl std::future::Future<Output = Result<(ReplyHeader, Vec<u8>)>> {
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
    ) -> impl std::future::Future<Output = Result<(ReplyHeader, Vec<u8>)>> {
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
fn decode_reply<T: Record>(h: &ReplyHeader, body: &[u8]) -> Result<T> {
    if h.err != 0 {
        return Err(Error::from_code(h.err));
    }
    T::decode(&mut Reader::new(body)).map_err(|e| Error::Protocol(e.to_string()))
}
