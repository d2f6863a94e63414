//! One client connection: handshake, request frames in, ordered replies and events out.
//!
//! This task decodes frames and hands requests to the pipeline, or answers a read of an
//! idle session itself; replies go out through the connection's [`ConnOut`], written by
//! whichever thread produced them, with a writer task for what the socket could not take
//! at once. Malformed input closes the connection (ZooKeeper does the same for a frame it
//! cannot unmarshal); an unknown opcode gets ZooKeeper's Unimplemented error instead.
//!
//! On the secure client port the task first runs the TLS handshake (`super::tls`); the
//! rest is the same, with reads and writes through the connection's rustls state, and
//! the identities of the client's certificate (`x509:<subject>`) among its session's.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use rand::RngCore;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use zlock_core::SessionId;
use zlock_proto::frame;
use zlock_proto::records::{ConnectRequest, Id, RequestHeader};
use zlock_proto::{Decoded, ErrorCode, Reader, Record, Request};

use super::fourlw;
use super::tls::Port;
use super::{ConnHandle, InFlight, Permit, Shared};
use crate::conn::frames::reply_frame;
use crate::conn::out::{flush, read_some, write_all, ConnOut};
use crate::conn::tls::TlsState;
use crate::pipeline::core::{locked, with_core};
use crate::pipeline::{Asker, Handshake, Item};
use crate::stats::ConnInfo;

/// Requests of one connection whose replies are not yet written; past this the
/// connection stops reading (ZooKeeper's globalOutstandingLimit is 1000 for a server).
pub(crate) const MAX_OUTSTANDING: usize = 1000;

/// Why a connection ended early; logged at debug level only (clients disconnect all the
/// time).
#[derive(Debug)]
enum Closed {
    Io,
    Frame,
    Malformed,
    Handshake,
    Quiet,
    Shutdown,
    /// The TLS handshake did not finish (logged where it failed).
    Tls,
}

/// Serves one client connection; with TLS (the secure client port, or a client that
/// starts a handshake on a unified port), after the TLS handshake, which runs here so
/// that a slow one holds up no other connection.
pub(crate) async fn serve(
    stream: TcpStream,
    addr: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    port: Port,
) {
    let id = shared.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let info = shared.stats.add_conn(id, addr);
    let _ = stream.set_nodelay(true);
    let tls = match port {
        Port::Plain => None,
        Port::Secure(acceptor) => Some(acceptor),
        Port::Unified(acceptor) => {
            let timeout = Duration::from_millis(shared.config.tls.handshake_timeout_ms);
            super::tls::starts_tls(&stream, timeout)
                .await
                .then_some(acceptor)
        }
    };
    let r = match tls {
        None => run(stream, addr, id, &shared, info, shutdown, None).await,
        Some(acceptor) => {
            let cfg = &shared.config.tls;
            let timeout = Duration::from_millis(cfg.handshake_timeout_ms);
            // The certificates in use now (`client.certReload` may replace them).
            let acceptor = acceptor.current();
            tokio::select! {
                r = super::tls::handshake(&acceptor, stream, timeout, cfg) => match r {
                    Ok(h) => {
                        let tls = Some((h.state, h.ids));
                        run(h.stream, addr, id, &shared, info, shutdown, tls).await
                    }
                    Err(e) => {
                        super::tls::log_failed(addr, &e);
                        Err(Closed::Tls)
                    }
                },
                _ = shutdown.changed() => Err(Closed::Shutdown),
            }
        }
    };
    shared.stats.remove_conn(id);
    if let Err(why) = r {
        tracing::debug!(conn = id, %addr, ?why, "connection closed");
    }
}

async fn run(
    stream: TcpStream,
    addr: SocketAddr,
    id: u64,
    shared: &Arc<Shared>,
    info: Arc<ConnInfo>,
    mut shutdown: watch::Receiver<bool>,
    tls: Option<(TlsState, Vec<Id>)>,
) -> Result<(), Closed> {
    let max = shared.config.max_packet;
    let stream = Arc::new(stream);
    let (tls, x509) = match tls {
        Some((state, ids)) => (Some(state), ids),
        None => (None, Vec::new()),
    };
    let tls = tls.as_ref();
    let mut buf = BytesMut::with_capacity(16 * 1024);

    // A client that connects and says nothing is dropped after the longest session
    // timeout it could have asked for.
    let quiet = Duration::from_millis(shared.config.max_session_timeout());
    let deadline = tokio::time::Instant::now() + quiet;
    while buf.len() < 4 {
        match tokio::time::timeout_at(deadline, read_from(&stream, tls, &mut buf)).await {
            Err(_) => return Err(Closed::Quiet),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Closed::Io),
            Ok(Ok(_)) => {}
        }
    }
    if let Some(word) = fourlw::detect(&buf[..4]) {
        let text = fourlw::answer(word, shared).await;
        let _ = match tls {
            None => write_all(&stream, text.as_bytes()).await,
            Some(t) => crate::conn::tls::write_all_and_close(t, &stream, text.as_bytes()).await,
        };
        let _ = socket2::SockRef::from(&*stream).shutdown(std::net::Shutdown::Write);
        return Ok(());
    }

    // The handshake frame.
    let connect = loop {
        match frame::parse(&buf, max).map_err(bad_frame)? {
            Some((n, body)) => {
                let stats = &shared.stats;
                stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                stats.connect_requests.fetch_add(1, Ordering::Relaxed);
                let req = ConnectRequest::decode(&mut Reader::new(body))
                    .map_err(|_| Closed::Malformed)?;
                buf.advance(n);
                break req;
            }
            None => {
                match tokio::time::timeout_at(deadline, read_from(&stream, tls, &mut buf)).await {
                    Err(_) => return Err(Closed::Quiet),
                    Ok(Ok(0)) | Ok(Err(_)) => return Err(Closed::Io),
                    Ok(Ok(_)) => {}
                }
            }
        }
    };

    let (closed_tx, mut closed_rx) = oneshot::channel::<()>();
    let conn: ConnHandle = Arc::new(ConnOut::new(
        id,
        stream.clone(),
        tls.cloned(),
        info.clone(),
        shared.stats.clone(),
    ));
    let writer = tokio::spawn(conn.clone().writer(closed_tx));
    // Only a TLS connection needs its own handle after the handshake (see below).
    let conn_out = tls.map(|_| conn.clone());
    let hs = handshake(shared, conn, connect).await;
    let Some(hs) = hs else {
        // The core queued the refusal and a close, or the handshake closed the
        // connection itself; let the writer finish.
        let _ = writer.await;
        return Err(Closed::Handshake);
    };
    info.session.store(hs.session_id.0, Ordering::Relaxed);
    tracing::debug!(
        conn = id,
        session = %hs.session_id,
        timeout_ms = hs.timeout_ms,
        "session established"
    );
    let session = hs.session_id;

    // ZooKeeper's order: the address first, then what the certificate gives.
    let mut auth = Arc::new(
        std::iter::once(Id::new("ip", &addr.ip().to_string()))
            .chain(x509)
            .collect::<Vec<_>>(),
    );
    let inflight: InFlight = Arc::default();
    let budget = Arc::new(Semaphore::new(MAX_OUTSTANDING));
    // Connections with replies queued by reads answered here, written once per buffer.
    let mut unflushed: Vec<ConnHandle> = Vec::new();
    let result = loop {
        // Every whole frame already buffered.
        let mut bad = None;
        loop {
            match frame::parse(&buf, max) {
                Ok(Some((n, body))) => {
                    info.received.fetch_add(1, Ordering::Relaxed);
                    let stats = &shared.stats;
                    stats.packets_received.fetch_add(1, Ordering::Relaxed);
                    stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                    // Stop reading while too many replies are unwritten: a client that
                    // sends without reading cannot make the server buffer without bound.
                    if budget.available_permits() == 0 {
                        flush(&mut unflushed);
                    }
                    let permit = tokio::select! {
                        p = budget.clone().acquire_owned() => p.ok(),
                        _ = &mut closed_rx => None,
                        _ = shutdown.changed() => None,
                    };
                    if permit.is_none() {
                        bad = Some(Closed::Shutdown);
                        break;
                    }
                    let sup = shared.config.super_digest.as_deref();
                    let ok = match decode(body, (session, id, sup), &mut auth, &inflight, permit) {
                        Ok(item) => submit(shared, item, &inflight, &mut unflushed).await,
                        Err(e) => Err(e),
                    };
                    buf.advance(n);
                    if let Err(e) = ok {
                        bad = Some(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    bad = Some(bad_frame(e));
                    break;
                }
            }
        }
        flush(&mut unflushed);
        if let Some(e) = bad {
            break Err(e);
        }
        tokio::select! {
            r = read_from(&stream, tls, &mut buf) => match r {
                Ok(0) | Err(_) => break Err(Closed::Io),
                Ok(_) => {
                    // What rustls made while reading (a key update's answer) and the
                    // socket did not take goes out with the connection's writes.
                    if let (Some(t), Some(c)) = (tls, &conn_out) {
                        // The rustls lock is released before flush takes it again.
                        let pending = crate::conn::tls::lock(t).wants_write();
                        if pending {
                            c.flush();
                        }
                    }
                }
            },
            _ = &mut closed_rx => break Ok(()),
            _ = shutdown.changed() => break Err(Closed::Shutdown),
        }
    };
    let _ = shared
        .commit
        .send(Item::Disconnected {
            session,
            conn_id: id,
        })
        .await;
    writer.abort();
    result
}

/// Reads what is available into `buf` (through TLS on the secure port); 0 at the end.
async fn read_from(
    stream: &TcpStream,
    tls: Option<&TlsState>,
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    match tls {
        None => read_some(stream, buf).await,
        Some(t) => crate::conn::tls::read_some(t, stream, buf).await,
    }
}

/// A frame whose length is negative or over `jute.maxbuffer`: ZooKeeper logs it and
/// closes the connection.
fn bad_frame(e: frame::FrameError) -> Closed {
    tracing::warn!(error = %e, "closing connection");
    Closed::Frame
}

async fn handshake(shared: &Arc<Shared>, conn: ConnHandle, c: ConnectRequest) -> Option<Handshake> {
    if let Some(q) = &shared.quorum {
        // A member out of touch with its quorum serves nobody; it waits a little (an
        // election is usually over by then), then the client tries the next server.
        let mut q = q.clone();
        let silent = q.borrow().silent;
        if tokio::time::timeout(silent, q.wait_for(|t| t.in_touch))
            .await
            .is_err()
        {
            tracing::info!("out of touch with the quorum: refusing a session");
            close_now(&conn);
            return None;
        }
    }
    let cfg = &shared.config;
    let (done, wait) = oneshot::channel();
    let item = if c.session_id == 0 {
        let timeout = i64::from(c.time_out).clamp(
            cfg.min_session_timeout() as i64,
            cfg.max_session_timeout() as i64,
        ) as i32;
        let mut passwd = vec![0u8; 16];
        rand::thread_rng().fill_bytes(&mut passwd);
        Item::Connect {
            conn,
            timeout_ms: timeout,
            passwd,
            read_only: c.read_only,
            features: c.features,
            done,
        }
    } else {
        // In an ensemble the resume goes through the log (a MoveSession, see
        // `Router::moved`): answered once it is applied here, so once this member has
        // applied everything committed before it, which settles the client's writes
        // whose replies it lost with its last connection (committed and applied here,
        // or never to be: one still on its way from its old member is refused).
        Item::Resume {
            conn,
            session_id: SessionId(c.session_id),
            last_zxid_seen: c.last_zxid_seen,
            passwd: c.passwd,
            read_only: c.read_only,
            features: c.features,
            done,
        }
    };
    if let Err(refused) = shared.commit.send(item).await {
        // Stopping: no core will answer it.
        if let Item::Connect { conn, .. } | Item::Resume { conn, .. } = refused.0 {
            close_now(&conn);
        }
        return None;
    }
    wait.await.ok().flatten()
}

/// Closes a connection the core has not seen (nothing queued on it): its writer task
/// shuts the socket, so the client learns at once that it should try elsewhere.
fn close_now(conn: &ConnHandle) {
    conn.close();
    conn.flush();
}

/// Decodes one request frame into the item for the pipeline (auth, unknown opcodes and
/// the like get their reply here). Err closes the connection.
fn decode(
    body: &[u8],
    (session, conn_id, super_digest): (SessionId, u64, Option<&str>),
    auth: &mut Arc<Vec<Id>>,
    inflight: &InFlight,
    permit: Permit,
) -> Result<Item, Closed> {
    let mut r = Reader::new(body);
    let hdr = RequestHeader::decode(&mut r).map_err(|_| Closed::Malformed)?;
    let asker = Asker {
        conn_id,
        xid: hdr.xid,
        received: Instant::now(),
        permit,
        inflight: inflight.clone(),
    };
    // ZooKeeper echoes the request's xid in these replies (usually -4 for auth, but the
    // zookeeper-client crate sends auth with an ordinary xid).
    let reply = |asker, err: i32, zxid: i64, close| Item::Reply {
        session,
        frame: reply_frame(hdr.xid, zxid, err, &[]),
        asker,
        close,
    };
    Ok(
        match Request::decode(hdr.op_type, &mut r).map_err(|_| Closed::Malformed)? {
            Decoded::UnknownOp(_) => reply(asker, ErrorCode::Unimplemented.code(), -1, false),
            Decoded::Request(Request::Auth(a)) => {
                let user = std::str::from_utf8(&a.auth).ok();
                match (a.scheme.as_str(), user.and_then(zlock_core::acl::digest_id)) {
                    ("digest", Some(idv)) => {
                        let mut v = auth.as_ref().clone();
                        // ZooKeeper's superDigest: that user is also `super`.
                        let sup =
                            (super_digest == Some(idv.as_str())).then(|| Id::new("super", ""));
                        for id in std::iter::once(Id::new("digest", &idv)).chain(sup) {
                            if !v.contains(&id) {
                                v.push(id);
                            }
                        }
                        *auth = Arc::new(v);
                        reply(asker, 0, 0, false)
                    }
                    // ZooKeeper answers AuthFailed and closes the connection; the core
                    // closes it once the reply (and everything before it) is out.
                    _ => reply(asker, ErrorCode::AuthFailed.code(), 0, true),
                }
            }
            Decoded::Request(Request::Sasl(_)) => {
                reply(asker, ErrorCode::Unimplemented.code(), -1, false)
            }
            Decoded::Request(req) => Item::Request {
                session,
                asker,
                auth: auth.clone(),
                req,
            },
        },
    )
}

/// Carries a `reconfig` out (this connection reads nothing more meanwhile, as during a
/// `sync`, so its replies stay in order) and turns it into what answers it: on success
/// a read of `/zookeeper/config`, which shows the new configuration by then (ZooKeeper
/// answers a reconfig with the new configuration's data and Stat, as a getData); else
/// the error, with ZooKeeper's code: `ReconfigDisabled` unless `reconfigEnabled`, and
/// `Unimplemented` on a standalone server (as ZooKeeper's, which cannot reconfigure).
async fn reconfig(
    shared: &Arc<Shared>,
    session: SessionId,
    asker: Asker,
    auth: Arc<Vec<Id>>,
    r: zlock_proto::records::ReconfigRequest,
) -> Item {
    let fail = |asker: Asker, code: ErrorCode| Item::Reply {
        session,
        frame: reply_frame(asker.xid, -1, code.code(), &[]),
        asker,
        close: false,
    };
    if !shared.config.reconfig_enabled {
        return fail(asker, ErrorCode::ReconfigDisabled);
    }
    let Some(rc) = &shared.reconfig else {
        return fail(asker, ErrorCode::Unimplemented);
    };
    let given = |s: Option<String>| s.filter(|s| !s.is_empty());
    let change = crate::commit::raft::reconfig::Change {
        joining: given(r.joining_servers),
        leaving: given(r.leaving_servers),
        new_members: given(r.new_members),
        from_config: r.cur_config_id,
        authorized: auth.iter().any(|a| a.scheme == "super"),
    };
    match rc.run(change).await {
        Ok(view) => {
            locked(&shared.core, |c| {
                c.set_config_view(view.text(), view.version)
            });
            Item::Request {
                session,
                asker,
                auth,
                req: Request::GetData(zlock_proto::records::PathWatchRequest {
                    path: zlock_core::ConfigNode::PATH.to_owned(),
                    watch: false,
                }),
            }
        }
        Err(e) => {
            tracing::info!(error = %e, "reconfig refused");
            fail(asker, e.code())
        }
    }
}

/// Answers a read here, under the core's lock, when nothing of this connection is in
/// the commit stage (it cannot overtake anything then); everything else goes through
/// commit. Connections with frames queued here go into `unflushed`.
async fn submit(
    shared: &Arc<Shared>,
    item: Item,
    inflight: &InFlight,
    unflushed: &mut Vec<ConnHandle>,
) -> Result<(), Closed> {
    let item = match item {
        Item::Request {
            session,
            asker,
            auth,
            req: Request::Reconfig(r),
        } => {
            flush(unflushed);
            reconfig(shared, session, asker, auth, r).await
        }
        other => other,
    };
    if let (
        Some(b),
        Item::Request {
            req: Request::Sync(_),
            ..
        },
    ) = (&shared.barrier, &item)
    {
        // In an ensemble, sync answers once this member has everything the leader had
        // committed (then it queues behind this session's writes as any read does).
        flush(unflushed);
        if let Err(e) = b.wait().await {
            tracing::info!(error = %e, "sync could not reach the leader; closing");
            return Err(Closed::Shutdown);
        }
    }
    let item = match item {
        Item::Request {
            session,
            asker,
            auth,
            req,
        } if !zlock_core::State::is_write(&req) && inflight.load(Ordering::SeqCst) == 0 => {
            with_core(&shared.core, unflushed, |c| {
                c.direct(session, asker, &auth, &req)
            });
            return Ok(());
        }
        other => other,
    };
    inflight.fetch_add(1, Ordering::SeqCst);
    match shared.commit.try_send(item) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(item)) => {
            // The sequencer is a batch and more behind: write what this task answered
            // before waiting for room.
            flush(unflushed);
            shared.commit.send(item).await.map_err(|_| Closed::Shutdown)
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed::Shutdown),
    }
}
