//! The core: owns the [`State`], applies committed Txns in order, serves reads, queues
//! replies and watch events, tracks session liveness and proposes expiries.
//!
//! It is not a thread of its own: it sits behind a lock that the commit thread takes to
//! apply each batch right after its fsync (so nothing it sends can reveal an un-durable
//! change), that a connection task takes to answer a read in place, and that the ticker
//! takes to check liveness. Frames are queued on the connections while the lock is held
//! and written to the sockets after it is released ([`with_core`], [`flush`]).
//! For each write it queues the watch events first, then the reply: a client sees the
//! event before it can read the change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use zlock_core::{Applied, SessionId, State, Txn};
use zlock_proto::frame;
use zlock_proto::records::{
    ConnectResponse, LockGrant, ReplyHeader, WatcherEvent, FEATURE_NATIVE_LOCK, XID_LOCK_GRANT,
    XID_NOTIFICATION,
};
use zlock_proto::{Record, Request};

use super::{AdminQuery, Committed, ConnHandle, Handshake, Item, Permit};
use crate::admin;
use crate::config::ServerConfig;
use crate::snapshot::SnapshotWorker;
use crate::stats::{Latency, Stats};

/// How often liveness is checked; bounds how late an expiry can be.
const TICK: Duration = Duration::from_millis(100);

/// A session's liveness, known only to this server.
pub(crate) struct Live {
    pub conn: Option<ConnHandle>,
    pub deadline: Instant,
    pub timeout: Duration,
    /// An expiry has been proposed and not yet applied.
    pub expiring: bool,
}

pub(crate) struct Core {
    pub state: State,
    pub commit: mpsc::UnboundedSender<Item>,
    pub live: HashMap<SessionId, Live>,
    pub config: Arc<ServerConfig>,
    pub stats: Arc<Stats>,
    pub latency: Latency,
    pub snapshots: SnapshotWorker,
    pub since_snapshot: u64,
    pub next_container_check: Instant,
    /// Connections with frames queued and not yet handed to a [`flush`].
    pub dirty: Vec<ConnHandle>,
    /// Set by [`Core::finish`]: the state is gone.
    pub stopped: bool,
}

/// Locks the core. A panic while it was held means a bug in applying a Txn: the state
/// may be half-changed, and serving from it could acknowledge what is not in the log, so
/// the process stops (the log is the truth; a restart recovers from it).
fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    match core.lock() {
        Ok(g) => g,
        Err(_) => {
            tracing::error!("the server core was poisoned by a panic; stopping");
            std::process::abort();
        }
    }
}

/// Runs `f` under the core's lock and moves the connections it queued frames on into
/// `dirty`, for the caller to [`flush`] once the lock is released. (Moved, not swapped:
/// both lists keep their capacity, so the request path allocates no list.)
pub(crate) fn with_core<R>(
    core: &Mutex<Core>,
    dirty: &mut Vec<ConnHandle>,
    f: impl FnOnce(&mut Core) -> R,
) -> R {
    let mut c = lock(core);
    let r = f(&mut c);
    dirty.append(&mut c.dirty);
    r
}

/// Above this many connections to write to at once (a watch firing for thousands of
/// sessions), the writes go to the connections' writer tasks on the io threads, so the
/// commit thread gets back to the log instead of making thousands of system calls.
const INLINE_FLUSH_MAX: usize = 32;

/// Writes what was queued on these connections (after the core's lock is released) and
/// empties the list.
pub(crate) fn flush(dirty: &mut Vec<ConnHandle>) {
    let inline = dirty.len() <= INLINE_FLUSH_MAX;
    for c in dirty.drain(..) {
        if inline {
            c.flush();
        } else {
            c.hand_off();
        }
    }
}

/// Starts the ticker thread: every [`TICK`], session liveness and container checks
/// ([`Core::tick`]). It stops when the returned sender is dropped.
pub(crate) fn start_ticker(
    core: Arc<Mutex<Core>>,
) -> std::io::Result<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, ticks) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("zlock-tick".into())
        .spawn(move || {
            let mut dirty = Vec::new();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ticks.recv_timeout(TICK) {
                with_core(&core, &mut dirty, |c| c.tick(Instant::now()));
                flush(&mut dirty);
            }
        })?;
    Ok((stop, thread))
}

/// Appends a reply frame to `out`: header, then the body when there is one.
fn write_reply(out: &mut Vec<u8>, xid: i32, zxid: i64, err: i32, body: &[u8]) {
    let at = frame::begin(out);
    ReplyHeader { xid, zxid, err }.encode(out);
    out.extend_from_slice(body);
    frame::finish(out, at);
}

/// A reply frame of its own (for replies built before they are queued).
pub(crate) fn reply_frame(xid: i32, zxid: i64, err: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + body.len());
    write_reply(&mut out, xid, zxid, err, body);
    out
}

fn write_event(out: &mut Vec<u8>, ev: &WatcherEvent) {
    let at = frame::begin(out);
    ReplyHeader {
        xid: XID_NOTIFICATION,
        zxid: -1,
        err: 0,
    }
    .encode(out);
    ev.encode(out);
    frame::finish(out, at);
}

/// A pushed native lock grant (see `zlock_core::locks`).
fn write_grant(out: &mut Vec<u8>, zxid: i64, g: &LockGrant) {
    let at = frame::begin(out);
    ReplyHeader {
        xid: XID_LOCK_GRANT,
        zxid,
        err: 0,
    }
    .encode(out);
    g.encode(out);
    frame::finish(out, at);
}

fn write_connect(out: &mut Vec<u8>, resp: &ConnectResponse) {
    let at = frame::begin(out);
    resp.encode(out);
    frame::finish(out, at);
}

/// Queues a frame on `conn`, encoded in place, and notes the connection for the flush.
/// (A free function so that callers can hold `conn` borrowed from `Core::live`.)
fn queue(
    dirty: &mut Vec<ConnHandle>,
    conn: &ConnHandle,
    permit: Permit,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    if conn.push_with(permit, encode) {
        dirty.push(conn.clone());
    }
}

/// The feature bits this server answers a zlock client with (none to other clients).
fn offered(asked: Option<i32>) -> Option<i32> {
    asked.map(|_| FEATURE_NATIVE_LOCK)
}

impl Core {
    /// Recovered sessions get a full timeout from now to reconnect, as ZooKeeper gives
    /// them.
    pub fn start_clocks(&mut self) {
        let now = Instant::now();
        for (id, s) in &self.state.sessions {
            let timeout = Duration::from_millis(s.timeout_ms.max(0) as u64);
            self.live.insert(
                *id,
                Live {
                    conn: None,
                    deadline: now + timeout,
                    timeout,
                    expiring: false,
                },
            );
        }
    }

    /// Applies a batch the commit stage has made durable; false once it held the
    /// shutdown.
    pub fn apply_batch(&mut self, batch: Vec<Committed>) -> bool {
        for c in batch {
            let inflight = match &c.item {
                Item::Request { inflight, .. } | Item::Reply { inflight, .. } => {
                    Some(inflight.clone())
                }
                _ => None,
            };
            let go_on = self.process(c);
            // After the reply is queued: a later read of this session may now be
            // answered in place without overtaking it.
            if let Some(n) = inflight {
                n.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            if !go_on {
                return false;
            }
        }
        true
    }

    /// Answers a read whose session has nothing in the commit stage (nothing once the
    /// server has stopped: the state is gone, and an answer from it would be wrong).
    pub fn direct(&mut self, item: Item) {
        if !self.stopped {
            self.process(Committed { item, txn: None });
        }
    }

    /// Stops the snapshot worker and frees the state on a thread of its own: dropping a
    /// million znodes takes a noticeable fraction of a second that nobody needs to wait
    /// for (everything is durable by now).
    pub fn finish(&mut self) {
        self.stopped = true;
        self.snapshots.stop();
        let state = std::mem::take(&mut self.state);
        let _ = std::thread::Builder::new()
            .name("zlock-free".into())
            .spawn(move || drop(state));
    }

    fn apply(&mut self, index: u64, txn: &Txn) -> Applied {
        let a = self.state.apply(txn);
        if a.zxid as u64 != index {
            // The log and the state disagree: continuing would spread the damage.
            tracing::error!(index, zxid = a.zxid, "log index and zxid diverged");
            std::process::abort();
        }
        self.since_snapshot += 1;
        if self.since_snapshot >= self.config.snap_count {
            self.since_snapshot = 0;
            self.snapshots.submit(&self.state);
        }
        a
    }

    fn close(&mut self, conn: &ConnHandle) {
        if conn.close() {
            self.dirty.push(conn.clone());
        }
    }

    /// Queues a frame on the session's connection, if it has one.
    fn send(&mut self, session: SessionId, encode: impl FnOnce(&mut Vec<u8>)) {
        if let Some(Live { conn: Some(c), .. }) = self.live.get(&session) {
            queue(&mut self.dirty, c, None, encode);
        }
    }

    /// The session's connection, if it is still `conn_id` (a reply for a connection the
    /// session has left is dropped with it).
    fn conn(&self, session: SessionId, conn_id: u64) -> Option<&ConnHandle> {
        match self.live.get(&session) {
            Some(Live { conn: Some(c), .. }) if c.id == conn_id => Some(c),
            _ => None,
        }
    }

    /// Queues a reply on the connection its request came on, if the session is still
    /// there.
    fn send_to_conn(
        &mut self,
        session: SessionId,
        conn_id: u64,
        permit: Permit,
        encode: impl FnOnce(&mut Vec<u8>),
    ) {
        if let Some(Live { conn: Some(c), .. }) = self.live.get(&session) {
            if c.id == conn_id {
                queue(&mut self.dirty, c, permit, encode);
            }
        }
    }

    fn deliver(&mut self, events: &[(SessionId, WatcherEvent)]) {
        for (s, ev) in events {
            self.send(*s, |out| write_event(out, ev));
        }
    }

    /// Watch events, then native lock grants, of one applied Txn.
    fn deliver_applied(&mut self, a: &Applied) {
        self.deliver(&a.events);
        for (s, g) in &a.grants {
            self.stats
                .lock_grants
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.send(*s, |out| write_grant(out, a.zxid, g));
        }
    }

    fn touch(&mut self, session: SessionId) {
        if let Some(l) = self.live.get_mut(&session) {
            l.deadline = Instant::now() + l.timeout;
        }
    }

    fn end_session(&mut self, session: SessionId) {
        if let Some(l) = self.live.remove(&session) {
            if let Some(c) = l.conn {
                self.close(&c);
            }
        }
    }

    /// Handles one committed item; false means stop.
    fn process(&mut self, c: Committed) -> bool {
        match c.item {
            Item::Connect {
                conn,
                read_only,
                features,
                done,
                ..
            } => {
                let Some((index, txn)) = c.txn else {
                    return true;
                };
                self.apply(index, &txn);
                if let Txn::CreateSession {
                    session_id,
                    passwd,
                    timeout_ms,
                } = txn
                {
                    let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
                    let resp = ConnectResponse {
                        protocol_version: 0,
                        time_out: timeout_ms,
                        session_id,
                        passwd,
                        read_only: read_only.map(|_| false),
                        features: offered(features),
                    };
                    queue(&mut self.dirty, &conn, None, |out| {
                        write_connect(out, &resp)
                    });
                    self.live.insert(
                        session_id,
                        Live {
                            conn: Some(conn),
                            deadline: Instant::now() + timeout,
                            timeout,
                            expiring: false,
                        },
                    );
                    let _ = done.send(Some(Handshake {
                        session_id,
                        timeout_ms,
                    }));
                }
            }
            Item::Resume {
                conn,
                session_id,
                last_zxid_seen,
                passwd,
                read_only,
                features,
                done,
            } => {
                if last_zxid_seen > self.state.zxid {
                    // The client has seen a newer state than ours (we lost data, or it
                    // talked to another ensemble): ZooKeeper refuses without an answer so
                    // the client tries another server.
                    tracing::warn!(
                        session = format_args!("0x{session_id:x}"),
                        client_zxid = format_args!("0x{last_zxid_seen:x}"),
                        our_zxid = format_args!("0x{:x}", self.state.zxid),
                        "refusing a client that has seen a newer zxid than ours"
                    );
                    self.close(&conn);
                    let _ = done.send(None);
                } else {
                    self.resume(conn, session_id, passwd, (read_only, features), done)
                }
            }
            Item::Request {
                session,
                conn_id,
                xid,
                auth,
                req,
                received,
                permit,
                ..
            } => {
                self.touch(session);
                match c.txn {
                    Some((index, txn)) => {
                        let a = self.apply(index, &txn);
                        self.deliver_applied(&a);
                        let (zxid, err, body) = (a.zxid, a.reply.err, &a.reply.body);
                        self.send_to_conn(session, conn_id, permit, |out| {
                            write_reply(out, xid, zxid, err, body)
                        });
                        if let Some(s) = a.closed_session {
                            self.end_session(s);
                        }
                    }
                    None => self.read(session, conn_id, xid, &auth, &req, permit),
                }
                self.latency
                    .record(received.elapsed().as_secs_f64() * 1000.0);
            }
            Item::Reply {
                session,
                conn_id,
                frame,
                close,
                permit,
                ..
            } => {
                self.send_to_conn(session, conn_id, permit, |out| {
                    out.extend_from_slice(&frame)
                });
                if let Some(c) = self.conn(session, conn_id).filter(|_| close).cloned() {
                    self.close(&c);
                }
            }
            Item::Disconnected { session, conn_id } => {
                if let Some(l) = self.live.get_mut(&session) {
                    if l.conn.as_ref().is_some_and(|c| c.id == conn_id) {
                        l.conn = None;
                    }
                }
            }
            Item::Expire { .. } | Item::DeleteExpired { .. } => {
                if let Some((index, txn)) = c.txn {
                    let a = self.apply(index, &txn);
                    self.deliver_applied(&a);
                    if let Some(s) = a.closed_session {
                        tracing::info!(session = format_args!("0x{s:x}"), "session expired");
                        self.end_session(s);
                    }
                }
            }
            Item::Admin { query, done } => {
                if query == AdminQuery::Srst {
                    self.latency = Latency::default();
                }
                let text = admin::answer(query, self);
                let _ = done.send(text);
            }
            Item::Purge { .. } => {}
            Item::Shutdown => return false,
        }
        true
    }

    fn resume(
        &mut self,
        conn: ConnHandle,
        session_id: SessionId,
        passwd: Vec<u8>,
        (read_only, features): (Option<bool>, Option<i32>),
        done: tokio::sync::oneshot::Sender<Option<Handshake>>,
    ) {
        let known = self.state.sessions.get(&session_id).cloned();
        let alive = self.live.get(&session_id).is_some_and(|l| !l.expiring);
        match known {
            Some(s) if alive && s.passwd == passwd => {
                let timeout = Duration::from_millis(s.timeout_ms.max(0) as u64);
                let resp = ConnectResponse {
                    protocol_version: 0,
                    time_out: s.timeout_ms,
                    session_id,
                    passwd: s.passwd.clone(),
                    read_only: read_only.map(|_| false),
                    features: offered(features),
                };
                queue(&mut self.dirty, &conn, None, |out| {
                    write_connect(out, &resp)
                });
                let old = self.live.get_mut(&session_id).and_then(|l| {
                    l.timeout = timeout;
                    l.deadline = Instant::now() + timeout;
                    l.conn.replace(conn)
                });
                if let Some(old) = old {
                    self.close(&old);
                }
                let _ = done.send(Some(Handshake {
                    session_id,
                    timeout_ms: s.timeout_ms,
                }));
            }
            _ => {
                // Expired, unknown, or a wrong password: ZooKeeper answers with a zero
                // timeout and session id, then closes.
                let resp = ConnectResponse {
                    protocol_version: 0,
                    time_out: 0,
                    session_id: 0,
                    passwd: vec![0; 16],
                    read_only: read_only.map(|_| false),
                    features: None,
                };
                queue(&mut self.dirty, &conn, None, |out| {
                    write_connect(out, &resp)
                });
                self.close(&conn);
                let _ = done.send(None);
            }
        }
    }

    fn read(
        &mut self,
        session: SessionId,
        conn_id: u64,
        xid: i32,
        auth: &[zlock_proto::records::Id],
        req: &Request,
        permit: Permit,
    ) {
        let zxid = self.state.zxid;
        let (err, body) = match req {
            Request::Ping => (0, Vec::new()),
            Request::SetWatches(w) => {
                let events = zlock_core::read::set_watches(&mut self.state, session, auth, w);
                self.deliver(&events);
                (0, Vec::new())
            }
            other => {
                let r = self.state.read(session, auth, other);
                (r.err, r.body)
            }
        };
        self.send_to_conn(session, conn_id, permit, |out| {
            write_reply(out, xid, zxid, err, &body)
        });
    }

    pub fn tick(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        for (id, l) in self.live.iter_mut() {
            if !l.expiring && now > l.deadline {
                l.expiring = true;
                let _ = self.commit.send(Item::Expire { session: *id });
            }
        }
        if now >= self.next_container_check {
            self.next_container_check =
                now + Duration::from_millis(self.config.container_check_interval_ms);
            let paths = self
                .state
                .expired_candidates(crate::pipeline::commit::now_ms());
            if !paths.is_empty() {
                let _ = self.commit.send(Item::DeleteExpired { paths });
            }
        }
    }
}
