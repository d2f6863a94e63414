//! One client connection: handshake, request frames in, ordered replies and events out.
//!
//! A reader (this task) decodes frames and hands requests to the pipeline; a writer task
//! writes whatever the apply thread sends, coalescing frames queued together into one
//! write. Malformed input closes the connection (ZooKeeper does the same for a frame it
//! cannot unmarshal); an unknown opcode gets ZooKeeper's Unimplemented error instead.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use rand::RngCore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use zlock_proto::frame;
use zlock_proto::records::{ConnectRequest, Id, RequestHeader};
use zlock_proto::{Decoded, ErrorCode, Reader, Record, Request};

use super::fourlw;
use crate::config::ServerConfig;
use crate::pipeline::apply::reply_frame;
use crate::pipeline::{ApplyMsg, ConnHandle, Handshake, InFlight, Item, Out, Permit};
use crate::stats::{ConnInfo, Stats};

/// Requests of one connection whose replies are not yet written; past this the
/// connection stops reading (ZooKeeper's globalOutstandingLimit is 1000 for a server).
pub(crate) const MAX_OUTSTANDING: usize = 1000;

/// What every connection task shares.
pub(crate) struct Shared {
    pub config: Arc<ServerConfig>,
    pub commit: mpsc::UnboundedSender<Item>,
    /// The apply thread, for reads that need not queue behind the commit stage.
    pub apply: std::sync::mpsc::Sender<ApplyMsg>,
    pub stats: Arc<Stats>,
    pub next_conn_id: AtomicU64,
}

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
}

pub(crate) async fn serve(
    stream: TcpStream,
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) {
    let id = shared.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let info = shared.stats.add_conn(id, addr);
    let _ = stream.set_nodelay(true);
    let r = run(stream, addr, id, &shared, info, shutdown).await;
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
) -> Result<(), Closed> {
    let max = shared.config.max_packet;
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::with_capacity(16 * 1024);

    // A client that connects and says nothing is dropped after the longest session
    // timeout it could have asked for.
    let quiet = Duration::from_millis(shared.config.max_session_timeout());
    let deadline = tokio::time::Instant::now() + quiet;
    while buf.len() < 4 {
        match tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)).await {
            Err(_) => return Err(Closed::Quiet),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Closed::Io),
            Ok(Ok(_)) => {}
        }
    }
    if let Some(word) = fourlw::detect(&buf[..4]) {
        let text = fourlw::answer(word, shared).await;
        let _ = wr.write_all(text.as_bytes()).await;
        let _ = wr.shutdown().await;
        return Ok(());
    }

    // The handshake frame.
    let connect = loop {
        match frame::parse(&buf, max).map_err(bad_frame)? {
            Some((n, body)) => {
                let req = ConnectRequest::decode(&mut Reader::new(body))
                    .map_err(|_| Closed::Malformed)?;
                buf.advance(n);
                break req;
            }
            None => match tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)).await {
                Err(_) => return Err(Closed::Quiet),
                Ok(Ok(0)) | Ok(Err(_)) => return Err(Closed::Io),
                Ok(Ok(_)) => {}
            },
        }
    };

    let (tx, rx) = mpsc::unbounded_channel();
    let (closed_tx, mut closed_rx) = oneshot::channel::<()>();
    let writer = tokio::spawn(write_loop(wr, rx, info.clone(), closed_tx));
    let conn = ConnHandle { id, tx };
    let hs = handshake(shared, conn, connect).await;
    let Some(hs) = hs else {
        // The apply thread queued the refusal and a Close; let the writer finish.
        let _ = writer.await;
        return Err(Closed::Handshake);
    };
    info.session.store(hs.session_id, Ordering::Relaxed);
    tracing::debug!(
        conn = id,
        session = format_args!("0x{:x}", hs.session_id),
        timeout_ms = hs.timeout_ms,
        "session established"
    );
    let session = hs.session_id;

    let mut auth = Arc::new(vec![Id::new("ip", &addr.ip().to_string())]);
    let inflight: InFlight = Arc::default();
    let budget = Arc::new(Semaphore::new(MAX_OUTSTANDING));
    let result = loop {
        // Every whole frame already buffered.
        let mut bad = None;
        loop {
            match frame::parse(&buf, max) {
                Ok(Some((n, body))) => {
                    info.received.fetch_add(1, Ordering::Relaxed);
                    shared
                        .stats
                        .packets_received
                        .fetch_add(1, Ordering::Relaxed);
                    // Stop reading while too many replies are unwritten: a client that
                    // sends without reading cannot make the server buffer without bound.
                    let permit = tokio::select! {
                        p = budget.clone().acquire_owned() => p.ok(),
                        _ = &mut closed_rx => None,
                        _ = shutdown.changed() => None,
                    };
                    if permit.is_none() {
                        bad = Some(Closed::Shutdown);
                        break;
                    }
                    let ok = handle(body, shared, session, id, &mut auth, &inflight, permit);
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
        if let Some(e) = bad {
            break Err(e);
        }
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => break Err(Closed::Io),
                Ok(_) => {}
            },
            _ = &mut closed_rx => break Ok(()),
            _ = shutdown.changed() => break Err(Closed::Shutdown),
        }
    };
    let _ = shared.commit.send(Item::Disconnected {
        session,
        conn_id: id,
    });
    writer.abort();
    result
}

/// A frame whose length is negative or over `jute.maxbuffer`: ZooKeeper logs it and
/// closes the connection.
fn bad_frame(e: frame::FrameError) -> Closed {
    tracing::warn!(error = %e, "closing connection");
    Closed::Frame
}

async fn handshake(shared: &Arc<Shared>, conn: ConnHandle, c: ConnectRequest) -> Option<Handshake> {
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
        Item::Resume {
            conn,
            session_id: c.session_id,
            last_zxid_seen: c.last_zxid_seen,
            passwd: c.passwd,
            read_only: c.read_only,
            features: c.features,
            done,
        }
    };
    shared.commit.send(item).ok()?;
    wait.await.ok().flatten()
}

/// Decodes one request frame and passes it on. Err closes the connection.
fn handle(
    body: &[u8],
    shared: &Arc<Shared>,
    session: i64,
    conn_id: u64,
    auth: &mut Arc<Vec<Id>>,
    inflight: &InFlight,
    permit: Permit,
) -> Result<(), Closed> {
    let mut r = Reader::new(body);
    let hdr = RequestHeader::decode(&mut r).map_err(|_| Closed::Malformed)?;
    let reply = |err: ErrorCode, zxid: i64| Item::Reply {
        session,
        conn_id,
        frame: reply_frame(hdr.xid, zxid, err.code(), &[]),
        close: false,
        inflight: inflight.clone(),
        permit: None,
    };
    let mut item = match Request::decode(hdr.op_type, &mut r).map_err(|_| Closed::Malformed)? {
        Decoded::UnknownOp(_) => reply(ErrorCode::Unimplemented, -1),
        Decoded::Request(Request::Auth(a)) => {
            let user = std::str::from_utf8(&a.auth).ok();
            match (a.scheme.as_str(), user.and_then(zlock_core::acl::digest_id)) {
                ("digest", Some(idv)) => {
                    let mut v = auth.as_ref().clone();
                    let id = Id::new("digest", &idv);
                    if !v.contains(&id) {
                        v.push(id);
                    }
                    *auth = Arc::new(v);
                    Item::Reply {
                        session,
                        conn_id,
                        // ZooKeeper echoes the request's xid (usually -4, but the
                        // zookeeper-client crate sends auth with an ordinary xid).
                        frame: reply_frame(hdr.xid, 0, 0, &[]),
                        close: false,
                        inflight: inflight.clone(),
                        permit: None,
                    }
                }
                // ZooKeeper answers AuthFailed and closes the connection; the apply
                // thread closes it once the reply (and everything before it) is out.
                _ => Item::Reply {
                    session,
                    conn_id,
                    frame: reply_frame(hdr.xid, 0, ErrorCode::AuthFailed.code(), &[]),
                    close: true,
                    inflight: inflight.clone(),
                    permit: None,
                },
            }
        }
        Decoded::Request(Request::Sasl(_)) => reply(ErrorCode::Unimplemented, -1),
        Decoded::Request(Request::Reconfig(_)) => reply(ErrorCode::ReconfigDisabled, -1),
        Decoded::Request(req) => Item::Request {
            session,
            conn_id,
            xid: hdr.xid,
            auth: auth.clone(),
            req,
            received: Instant::now(),
            inflight: inflight.clone(),
            permit: None,
        },
    };
    if let Item::Request { permit: p, .. } | Item::Reply { permit: p, .. } = &mut item {
        *p = permit;
    }
    submit(shared, item, inflight)
}

/// Sends a read straight to the apply thread when nothing of this connection is in the
/// commit stage (it cannot overtake anything then); everything else goes through commit.
fn submit(shared: &Arc<Shared>, item: Item, inflight: &InFlight) -> Result<(), Closed> {
    let direct = match &item {
        Item::Request { req, .. } => !zlock_core::State::is_write(req),
        _ => false,
    };
    if direct && inflight.load(Ordering::SeqCst) == 0 {
        return shared
            .apply
            .send(ApplyMsg::Direct(item))
            .map_err(|_| Closed::Shutdown);
    }
    inflight.fetch_add(1, Ordering::SeqCst);
    shared.commit.send(item).map_err(|_| Closed::Shutdown)
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Out>,
    info: Arc<ConnInfo>,
    closed: oneshot::Sender<()>,
) {
    // Small to start, and given back after a burst: with 10,000 connections a buffer
    // kept at the size of the largest reply (a big getChildren) would be gigabytes.
    const OUT_KEEP: usize = 64 * 1024;
    let mut out: Vec<u8> = Vec::with_capacity(8 * 1024);
    let mut written = Vec::new();
    'outer: while let Some(first) = rx.recv().await {
        let mut close = false;
        let mut msg = Some(first);
        while let Some(m) = msg.take() {
            match m {
                Out::Frame(f) => {
                    info.sent.fetch_add(1, Ordering::Relaxed);
                    out.extend_from_slice(&f);
                }
                Out::Reply(f, permit) => {
                    info.sent.fetch_add(1, Ordering::Relaxed);
                    out.extend_from_slice(&f);
                    written.push(permit);
                }
                Out::Close => {
                    close = true;
                    break;
                }
            }
            if out.len() >= 1 << 20 {
                break;
            }
            msg = rx.try_recv().ok();
        }
        if !out.is_empty() && wr.write_all(&out).await.is_err() {
            break 'outer;
        }
        out.clear();
        if out.capacity() > OUT_KEEP {
            out.shrink_to(8 * 1024);
        }
        // The replies are on the wire: their requests no longer count as outstanding.
        written.clear();
        if close {
            let _ = wr.shutdown().await;
            break;
        }
    }
    let _ = closed.send(());
}
