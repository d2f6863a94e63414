//! The apply stage: owns the [`State`], applies committed Txns in order, serves reads,
//! sends replies and watch events, tracks session liveness and proposes expiries.
//!
//! Runs on its own thread and receives only batches the commit stage has made durable,
//! so nothing it sends can reveal an un-durable change. For each write it sends the watch
//! events first, then the reply: a client sees the event before it can read the change.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use zlock_core::{Applied, SessionId, State, Txn};
use zlock_proto::frame;
use zlock_proto::records::{
    ConnectResponse, LockGrant, ReplyHeader, WatcherEvent, FEATURE_NATIVE_LOCK, XID_LOCK_GRANT,
    XID_NOTIFICATION,
};
use zlock_proto::{Record, Request};

use super::{AdminQuery, ApplyMsg, Committed, ConnHandle, Handshake, Item, Out, Permit};
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

pub(crate) struct ApplyStage {
    pub state: State,
    pub rx: std_mpsc::Receiver<ApplyMsg>,
    pub commit: mpsc::UnboundedSender<Item>,
    pub live: HashMap<SessionId, Live>,
    pub config: Arc<ServerConfig>,
    pub stats: Arc<Stats>,
    pub latency: Latency,
    pub snapshots: SnapshotWorker,
    pub since_snapshot: u64,
    pub next_container_check: Instant,
}

/// Encodes a reply frame: header, then the body when there is one.
pub(crate) fn reply_frame(xid: i32, zxid: i64, err: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + body.len());
    let at = frame::begin(&mut out);
    ReplyHeader { xid, zxid, err }.encode(&mut out);
    out.extend_from_slice(body);
    frame::finish(&mut out, at);
    out
}

fn event_frame(ev: &WatcherEvent) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + ev.path.len());
    let at = frame::begin(&mut out);
    ReplyHeader {
        xid: XID_NOTIFICATION,
        zxid: -1,
        err: 0,
    }
    .encode(&mut out);
    ev.encode(&mut out);
    frame::finish(&mut out, at);
    out
}

/// A pushed native lock grant (see `zlock_core::locks`).
fn grant_frame(zxid: i64, g: &LockGrant) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + g.node.len());
    let at = frame::begin(&mut out);
    ReplyHeader {
        xid: XID_LOCK_GRANT,
        zxid,
        err: 0,
    }
    .encode(&mut out);
    g.encode(&mut out);
    frame::finish(&mut out, at);
    out
}

/// The feature bits this server answers a zlock client with (none to other clients).
fn offered(asked: Option<i32>) -> Option<i32> {
    asked.map(|_| FEATURE_NATIVE_LOCK)
}

pub(crate) fn connect_frame(resp: &ConnectResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    let at = frame::begin(&mut out);
    resp.encode(&mut out);
    frame::finish(&mut out, at);
    out
}

impl ApplyStage {
    pub fn run(mut self) {
        let now = Instant::now();
        // Recovered sessions get a full timeout from startup to reconnect, as ZooKeeper
        // gives them.
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
        loop {
            match self.rx.recv_timeout(TICK) {
                Ok(ApplyMsg::Batch(batch)) => {
                    for c in batch {
                        let inflight = match &c.item {
                            Item::Request { inflight, .. } | Item::Reply { inflight, .. } => {
                                Some(inflight.clone())
                            }
                            _ => None,
                        };
                        let go_on = self.process(c);
                        // After the reply is queued: a later read of this session may now
                        // take the direct path without overtaking it.
                        if let Some(n) = inflight {
                            n.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        if !go_on {
                            self.finish();
                            return;
                        }
                    }
                }
                Ok(ApplyMsg::Direct(item)) => {
                    self.process(Committed { item, txn: None });
                }
                Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                    self.finish();
                    return;
                }
            }
            self.tick(Instant::now());
        }
    }

    /// Stops the snapshot worker and frees the state on a thread of its own: dropping a
    /// million znodes takes a noticeable fraction of a second that nobody needs to wait
    /// for (everything is durable by now).
    fn finish(&mut self) {
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

    fn send(&self, session: SessionId, frame: Vec<u8>) {
        if let Some(Live { conn: Some(c), .. }) = self.live.get(&session) {
            self.stats
                .packets_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = c.tx.send(Out::Frame(frame));
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

    fn send_to_conn(&self, session: SessionId, conn_id: u64, frame: Vec<u8>, permit: Permit) {
        if let Some(c) = self.conn(session, conn_id) {
            self.stats
                .packets_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = c.tx.send(Out::Reply(frame, permit));
        }
    }

    fn deliver(&self, events: &[(SessionId, WatcherEvent)]) {
        for (s, ev) in events {
            self.send(*s, event_frame(ev));
        }
    }

    /// Watch events, then native lock grants, of one applied Txn.
    fn deliver_applied(&self, a: &Applied) {
        self.deliver(&a.events);
        for (s, g) in &a.grants {
            self.stats
                .lock_grants
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.send(*s, grant_frame(a.zxid, g));
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
                let _ = c.tx.send(Out::Close);
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
                    let _ = conn.tx.send(Out::Frame(connect_frame(&ConnectResponse {
                        protocol_version: 0,
                        time_out: timeout_ms,
                        session_id,
                        passwd,
                        read_only: read_only.map(|_| false),
                        features: offered(features),
                    })));
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
                    let _ = conn.tx.send(Out::Close);
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
                        let frame = reply_frame(xid, a.zxid, a.reply.err, &a.reply.body);
                        self.send_to_conn(session, conn_id, frame, permit);
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
                self.send_to_conn(session, conn_id, frame, permit);
                if let Some(c) = self.conn(session, conn_id).filter(|_| close) {
                    let _ = c.tx.send(Out::Close);
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
                let _ = conn.tx.send(Out::Frame(connect_frame(&ConnectResponse {
                    protocol_version: 0,
                    time_out: s.timeout_ms,
                    session_id,
                    passwd: s.passwd.clone(),
                    read_only: read_only.map(|_| false),
                    features: offered(features),
                })));
                if let Some(l) = self.live.get_mut(&session_id) {
                    if let Some(old) = l.conn.replace(conn) {
                        let _ = old.tx.send(Out::Close);
                    }
                    l.timeout = timeout;
                    l.deadline = Instant::now() + timeout;
                }
                let _ = done.send(Some(Handshake {
                    session_id,
                    timeout_ms: s.timeout_ms,
                }));
            }
            _ => {
                // Expired, unknown, or a wrong password: ZooKeeper answers with a zero
                // timeout and session id, then closes.
                let _ = conn.tx.send(Out::Frame(connect_frame(&ConnectResponse {
                    protocol_version: 0,
                    time_out: 0,
                    session_id: 0,
                    passwd: vec![0; 16],
                    read_only: read_only.map(|_| false),
                    features: None,
                })));
                let _ = conn.tx.send(Out::Close);
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
        let frame = match req {
            Request::Ping => reply_frame(xid, zxid, 0, &[]),
            Request::SetWatches(w) => {
                let events = zlock_core::read::set_watches(&mut self.state, session, auth, w);
                self.deliver(&events);
                reply_frame(xid, zxid, 0, &[])
            }
            other => {
                let r = self.state.read(session, auth, other);
                reply_frame(xid, zxid, r.err, &r.body)
            }
        };
        self.send_to_conn(session, conn_id, frame, permit);
    }

    fn tick(&mut self, now: Instant) {
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
