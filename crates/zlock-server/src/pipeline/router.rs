//! The router: this member's side of every applied Txn. Every member applies every Txn;
//! the router answers the requests that were sent to *this* member, and pushes watch
//! events and lock grants to the sessions connected *here*.
//!
//! It keeps, per local session, its connection and its requests in the order they
//! arrived: writes waiting for their Txn to be applied, and the reads (and locally built
//! replies) that came after a write and so must not overtake it. When a Txn whose
//! [`Origin`] is this member is applied, the router matches it to the session's first
//! waiting write by (session, xid), as ZooKeeper's CommitProcessor matches committed
//! requests by session and cxid, answers it, then answers the reads queued behind it.
//! Results for sessions connected elsewhere produce only their events and grants here.
//! A new session's handshake is matched by the ticket in its CreateSession's origin.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use zlock_core::{Applied, MemberId, Origin, SessionId, State};
use zlock_proto::records::{ConnectResponse, Id, WatcherEvent, FEATURE_NATIVE_LOCK};
use zlock_proto::Request;

use super::Handshake;
use crate::net::frames::{write_connect, write_event, write_grant, write_reply};
use crate::net::{ConnHandle, InFlight, Permit};
use crate::stats::{Latency, Stats};

/// A request of a local session that has not been answered yet.
pub(crate) enum Waiting {
    /// A write: answered when its Txn is applied.
    Write {
        xid: i32,
        conn_id: u64,
        received: Instant,
        permit: Permit,
        inflight: InFlight,
    },
    /// A read that arrived after a write of its session.
    Read {
        xid: i32,
        conn_id: u64,
        auth: Arc<Vec<Id>>,
        req: Request,
        received: Instant,
        permit: Permit,
        inflight: InFlight,
    },
    /// A reply the connection built itself (auth), kept in order.
    Reply {
        conn_id: u64,
        frame: Vec<u8>,
        /// Close the connection after it (a failed auth).
        close: bool,
        permit: Permit,
        inflight: InFlight,
    },
}

impl Waiting {
    fn inflight(&self) -> &InFlight {
        match self {
            Waiting::Write { inflight, .. }
            | Waiting::Read { inflight, .. }
            | Waiting::Reply { inflight, .. } => inflight,
        }
    }
}

/// A handshake waiting for its CreateSession.
pub(crate) struct Handshaking {
    pub conn: ConnHandle,
    pub read_only: Option<bool>,
    pub features: Option<i32>,
    pub done: oneshot::Sender<Option<Handshake>>,
}

pub(crate) struct Router {
    pub me: MemberId,
    /// The connection of each local session that has one.
    routes: HashMap<SessionId, ConnHandle>,
    /// Unanswered requests of local sessions, in arrival order; the front is always a
    /// write (reads and replies at the front are answered at once).
    waiting: HashMap<SessionId, VecDeque<Waiting>>,
    handshakes: HashMap<i32, Handshaking>,
    next_ticket: i32,
    /// Connections with frames queued and not yet handed to a flush.
    pub dirty: Vec<ConnHandle>,
    pub stats: Arc<Stats>,
    pub latency: Latency,
}

/// The feature bits this server answers a zlock client with (none to other clients).
pub(crate) fn offered(asked: Option<i32>) -> Option<i32> {
    asked.map(|_| FEATURE_NATIVE_LOCK)
}

/// Queues a frame on `conn`, encoded in place, and notes the connection for the flush.
pub(crate) fn queue(
    dirty: &mut Vec<ConnHandle>,
    conn: &ConnHandle,
    permit: Permit,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    if conn.push_with(permit, encode) {
        dirty.push(conn.clone());
    }
}

impl Router {
    pub fn new(me: MemberId, stats: Arc<Stats>) -> Router {
        Router {
            me,
            routes: HashMap::new(),
            waiting: HashMap::new(),
            handshakes: HashMap::new(),
            next_ticket: 0,
            dirty: Vec::new(),
            stats,
            latency: Latency::default(),
        }
    }

    pub fn close(&mut self, conn: &ConnHandle) {
        if conn.close() {
            self.dirty.push(conn.clone());
        }
    }

    /// The connection of `session` if it is still `conn_id`.
    fn conn(&self, session: SessionId, conn_id: u64) -> Option<&ConnHandle> {
        self.routes.get(&session).filter(|c| c.id == conn_id)
    }

    /// Queues a frame on the session's connection, if it has one here.
    pub fn send(&mut self, session: SessionId, encode: impl FnOnce(&mut Vec<u8>)) {
        if let Some(c) = self.routes.get(&session) {
            queue(&mut self.dirty, c, None, encode);
        }
    }

    fn send_to_conn(
        &mut self,
        session: SessionId,
        conn_id: u64,
        permit: Permit,
        encode: impl FnOnce(&mut Vec<u8>),
    ) {
        if let Some(c) = self.routes.get(&session).filter(|c| c.id == conn_id) {
            queue(&mut self.dirty, c, permit, encode);
        }
    }

    /// Watch events to the local sessions among them.
    pub fn deliver(&mut self, events: &[(SessionId, WatcherEvent)]) {
        for (s, ev) in events {
            self.send(*s, |out| write_event(out, ev));
        }
    }

    /// A new handshake; returns the ticket its CreateSession carries as origin xid.
    pub fn expect_session(&mut self, h: Handshaking) -> i32 {
        self.next_ticket = self.next_ticket.wrapping_add(1);
        self.handshakes.insert(self.next_ticket, h);
        self.next_ticket
    }

    /// Routes `session` to `conn` (a new session, or one resumed on a new connection);
    /// the previous connection, if any, is closed.
    pub fn route(&mut self, session: SessionId, conn: ConnHandle) {
        if let Some(old) = self.routes.insert(session, conn) {
            self.close(&old);
        }
    }

    /// The connection `conn_id` of `session` went away.
    pub fn disconnected(&mut self, session: SessionId, conn_id: u64) {
        if self.routes.get(&session).is_some_and(|c| c.id == conn_id) {
            self.routes.remove(&session);
        }
    }

    /// The session ended: its connection is closed, its unanswered requests forgotten.
    pub fn end_session(&mut self, session: SessionId) {
        if let Some(c) = self.routes.remove(&session) {
            self.close(&c);
        }
        for w in self.waiting.remove(&session).into_iter().flatten() {
            w.inflight().fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Does `session` have a write waiting for its Txn?
    pub fn has_waiting(&self, session: SessionId) -> bool {
        self.waiting.get(&session).is_some_and(|q| !q.is_empty())
    }

    /// A write of `session` was proposed: it is answered when its Txn is applied.
    pub fn expect_write(&mut self, session: SessionId, w: Waiting) {
        self.waiting.entry(session).or_default().push_back(w);
    }

    /// A read or a local reply that came through the commit stage (its connection had
    /// something there): answered now if nothing of its session waits, else queued.
    pub fn behind_writes(&mut self, state: &mut State, session: SessionId, w: Waiting) {
        if self.has_waiting(session) {
            self.waiting.entry(session).or_default().push_back(w);
        } else {
            self.answer(state, session, w);
        }
    }

    /// One applied Txn, as this member sees it: watch events and grants for local
    /// sessions, then the answer to its request if it came from here.
    pub fn applied(&mut self, state: &mut State, origin: Origin, a: &Applied) {
        self.deliver(&a.events);
        for (s, g) in &a.grants {
            self.stats
                .lock_grants
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.send(*s, |out| write_grant(out, a.zxid.0, g));
        }
        if origin.member != self.me {
            return;
        }
        if let Some(session) = a.created_session {
            self.created(origin.xid, session, state);
            return;
        }
        if origin.session == SessionId::NONE {
            return;
        }
        let Some(q) = self.waiting.get_mut(&origin.session) else {
            return;
        };
        let at = q
            .iter()
            .position(|w| matches!(w, Waiting::Write { xid, .. } if *xid == origin.xid));
        let Some(at) = at else {
            // Its session left and came back, or the request was forgotten with an
            // ended session: nobody waits for this answer here.
            return;
        };
        if at != 0 {
            tracing::warn!(
                session = %origin.session,
                xid = origin.xid,
                "a write was applied before an earlier write of its session"
            );
        }
        let Some(Waiting::Write {
            xid,
            conn_id,
            received,
            permit,
            inflight,
        }) = q.remove(at)
        else {
            return;
        };
        let (zxid, err, body) = (a.zxid.0, a.reply.err, &a.reply.body);
        self.send_to_conn(origin.session, conn_id, permit, |out| {
            write_reply(out, xid, zxid, err, body)
        });
        self.latency
            .record(received.elapsed().as_secs_f64() * 1000.0);
        // After the reply is queued: a later read of this connection may now be
        // answered in place without overtaking it.
        inflight.fetch_sub(1, Ordering::SeqCst);
        self.drain(state, origin.session);
    }

    /// Answers what waits at the front of the session's queue up to its next write.
    fn drain(&mut self, state: &mut State, session: SessionId) {
        loop {
            // An emptied queue stays (with its buffer) until the session ends: a session
            // that writes does not allocate a queue per write.
            let Some(q) = self.waiting.get_mut(&session) else {
                return;
            };
            match q.front() {
                None | Some(Waiting::Write { .. }) => return,
                Some(_) => {}
            }
            if let Some(w) = q.pop_front() {
                self.answer(state, session, w);
            }
        }
    }

    /// Answers a read or a local reply (not a write).
    pub fn answer(&mut self, state: &mut State, session: SessionId, w: Waiting) {
        match w {
            Waiting::Read {
                xid,
                conn_id,
                auth,
                req,
                received,
                permit,
                inflight,
            } => {
                self.read(
                    state,
                    session,
                    (conn_id, xid, received),
                    &auth,
                    &req,
                    permit,
                );
                inflight.fetch_sub(1, Ordering::SeqCst);
            }
            Waiting::Reply {
                conn_id,
                frame,
                close,
                permit,
                inflight,
            } => {
                self.send_to_conn(session, conn_id, permit, |out| {
                    out.extend_from_slice(&frame)
                });
                if close {
                    if let Some(c) = self.conn(session, conn_id).cloned() {
                        self.close(&c);
                    }
                }
                inflight.fetch_sub(1, Ordering::SeqCst);
            }
            Waiting::Write { inflight, .. } => {
                inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Serves a read from the applied state, queues its reply and records its latency.
    pub fn read(
        &mut self,
        state: &mut State,
        session: SessionId,
        (conn_id, xid, received): (u64, i32, Instant),
        auth: &[Id],
        req: &Request,
        permit: Permit,
    ) {
        let zxid = state.zxid.0;
        let (err, body) = match req {
            Request::Ping => (0, Vec::new()),
            Request::SetWatches(w) => {
                let events = zlock_core::read::set_watches(state, session, auth, w);
                self.deliver(&events);
                (0, Vec::new())
            }
            other => {
                let r = state.read(session, auth, other);
                (r.err, r.body)
            }
        };
        self.send_to_conn(session, conn_id, permit, |out| {
            write_reply(out, xid, zxid, err, &body)
        });
        self.latency
            .record(received.elapsed().as_secs_f64() * 1000.0);
    }

    /// A CreateSession proposed here was applied: answer its handshake.
    fn created(&mut self, ticket: i32, session: SessionId, state: &State) {
        let Some(h) = self.handshakes.remove(&ticket) else {
            return;
        };
        let Some(s) = state.sessions.get(&session) else {
            return;
        };
        let resp = ConnectResponse {
            protocol_version: 0,
            time_out: s.timeout_ms,
            session_id: session.0,
            passwd: s.passwd.clone(),
            read_only: h.read_only.map(|_| false),
            features: offered(h.features),
        };
        queue(&mut self.dirty, &h.conn, None, |out| {
            write_connect(out, &resp)
        });
        let timeout_ms = s.timeout_ms;
        self.route(session, h.conn);
        let _ = h.done.send(Some(Handshake {
            session_id: session,
            timeout_ms,
        }));
    }

    /// Refuses a handshake: ZooKeeper answers an expired, unknown or wrongly
    /// authenticated session with a zero timeout and session id, then closes.
    pub fn refuse(&mut self, conn: &ConnHandle, read_only: Option<bool>) {
        let resp = ConnectResponse {
            protocol_version: 0,
            time_out: 0,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: read_only.map(|_| false),
            features: None,
        };
        queue(&mut self.dirty, conn, None, |out| write_connect(out, &resp));
        self.close(conn);
    }

    /// Accepts a reconnect of `session` on `conn`.
    pub fn resumed(
        &mut self,
        conn: ConnHandle,
        session: SessionId,
        s: &zlock_core::Session,
        (read_only, features): (Option<bool>, Option<i32>),
    ) {
        let resp = ConnectResponse {
            protocol_version: 0,
            time_out: s.timeout_ms,
            session_id: session.0,
            passwd: s.passwd.clone(),
            read_only: read_only.map(|_| false),
            features: offered(features),
        };
        queue(&mut self.dirty, &conn, None, |out| {
            write_connect(out, &resp)
        });
        self.route(session, conn);
    }
}
