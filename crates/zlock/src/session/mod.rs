//! The session actor: one task that owns the socket, writes requests in call order,
//! matches replies (which a ZooKeeper server sends in request order), and keeps what
//! must outlive a connection: the watch registry, the native lock waiters, the accepted
//! auth; it reconnects when the connection breaks.
//!
//! - `connection`: one connection's read/write loop.
//! - `handshake`: connect (over TLS with [`crate::TlsOptions`]) and open or resume the
//!   session.
//! - `watches`: the watch registry (registration, dispatch, SetWatches, removal).
//! - `grants`: queued native lock requests waiting for their pushed grant.
//! - `reconnect`: finding a host that resumes the session.
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
//! server fires at once whatever changed while we were away, re-sends each queued native
//! lock request with RESUME, and publishes [`ConnectionState::Reconnected`].
//!
//! If the server answers the resume with a zero timeout (session expired), or no host
//! answers within the session timeout (the server will have expired it), the session
//! is lost: [`ConnectionState::Lost`], every queued and later request fails with
//! [`Error::SessionExpired`], one-shot watchers resolve with that error and persistent
//! watchers end. A new session is never opened silently.

mod connection;
mod grants;
mod handshake;
mod reconnect;
mod watches;

use std::collections::VecDeque;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_rustls::client::TlsStream;
use zlock_proto::records::{ReplyHeader, WatcherEvent};
use zlock_proto::OpCode;

pub(crate) use grants::GrantWait;
pub(crate) use handshake::{handshake, Established};
pub(crate) use watches::{Forgotten, Sink, WatchKind, WatchReg};

use crate::error::{Error, Result};
use crate::queue::Inbox;
use crate::tls::Tls;
use crate::watcher::ConnectionState;
use grants::Grants;
use watches::Watches;

/// A reply: its header and the bytes after it.
pub(crate) type Reply = Result<(ReplyHeader, Vec<u8>)>;

/// What the actor does with a request's reply besides handing it to the caller.
pub(crate) enum OnReply {
    Nothing,
    /// Register the watch the request set, if the server accepted it.
    Watch(WatchReg),
    /// A native lock request: if the server queued it, wait for its grant.
    Grant(GrantWait),
}

pub(crate) enum Cmd {
    Request {
        op: OpCode,
        body: Vec<u8>,
        on_reply: OnReply,
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

/// One connection to a server: plain, or TLS (boxed: its rustls state is large).
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Requests written and not yet answered, in xid order (a server answers in order).
type Pending = VecDeque<(i32, oneshot::Sender<Reply>, OnReply)>;

enum End {
    Closed,
    Broken,
}

pub(crate) struct Actor {
    hosts: Vec<String>,
    /// Every connection of the session is TLS with this, or none is.
    tls: Option<Tls>,
    next_host: usize,
    chroot: String,
    session_id: i64,
    passwd: Vec<u8>,
    timeout_ms: i32,
    last_zxid: i64,
    cmds: Inbox,
    /// Watchers dropped by their owners.
    forgotten: mpsc::UnboundedReceiver<Forgotten>,
    events: mpsc::UnboundedSender<WatcherEvent>,
    state: watch::Sender<ConnectionState>,
    /// The server's feature bits, shared with the [`Client`](crate::Client) handles.
    features: Arc<AtomicI32>,
    /// Credentials the server accepted, re-sent first on every new connection.
    auths: Vec<(String, Vec<u8>)>,
    watches: Watches,
    grants: Grants,
}

impl Actor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        hosts: Vec<String>,
        tls: Option<Tls>,
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
            tls,
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
            grants: Grants::new(),
        }
    }

    /// Runs the session until it is closed or lost.
    pub(crate) async fn run(mut self, mut stream: Stream, mut buf: BytesMut) {
        loop {
            match self.serve(stream, buf).await {
                End::Closed => {
                    self.watches.fail_all(&Error::Closed);
                    self.grants.fail_all(&Error::Closed);
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
        self.grants.fail_all(&Error::SessionExpired);
        let _ = self.state.send(ConnectionState::Lost);
        while let Some(cmd) = self.cmds.recv().await {
            let done = match cmd {
                Cmd::Request { done, .. } | Cmd::Auth { done, .. } | Cmd::Close { done } => done,
            };
            let _ = done.send(Err(Error::SessionExpired));
            self.cmds.release();
        }
    }
}
