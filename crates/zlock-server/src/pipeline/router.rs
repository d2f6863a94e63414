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
//! A new session's handshake is matched by the ticket in its CreateSession's origin
//! and the password fixed in it (a restarted member replays CreateSessions it proposed
//! before, with tickets it hands out again).
//!
//! A read whose walk is long is served here and finished by the [`long_read`] thread:
//! its reply's place on the connection is held from the moment it is served, so the
//! order above holds for it too.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use zlock_core::{Answer, Applied, MemberId, Origin, Reply, SessionId, State};
use zlock_proto::records::{
    ConnectResponse, Id, WatcherEvent, FEATURE_LOCK_DELAY, FEATURE_NATIVE_LOCK,
};
use zlock_proto::Request;

use super::long_read::{self, LongReads};
use super::{Asker, Handshake};
use crate::conn::frames::{write_connect, write_event, write_grant, write_reply};
use crate::conn::{ConnHandle, InFlight, Permit};
use crate::stats::{Latency, Stats};

/// A request of a local session that has not been answered yet.
pub(crate) enum Waiting {
    /// A write: answered when its Txn is applied.
    Write(Asker),
    /// A read that arrived after a write of its session.
    Read {
        asker: Asker,
        auth: Arc<Vec<Id>>,
        req: Request,
    },
    /// A reply the connection built itself (auth), kept in order.
    Reply {
        asker: Asker,
        frame: Vec<u8>,
        /// Close the connection after it (a failed auth).
        close: bool,
    },
}

impl Waiting {
    fn asker(&self) -> &Asker {
        match self {
            Waiting::Write(a)
            | Waiting::Read { asker: a, .. }
            | Waiting::Reply { asker: a, .. } => a,
        }
    }
}

/// A handshake waiting for its CreateSession (or, resuming a session at a member of an
/// ensemble, for its MoveSession).
pub(crate) struct Handshaking {
    pub conn: ConnHandle,
    /// The new session's password, as fixed in its CreateSession (or the password the
    /// resuming client gave): what tells this handshake's Txn from one with the same
    /// ticket that an earlier run of this member proposed (tickets start again from 1
    /// at every start, and a restarted member replays its log).
    pub passwd: Vec<u8>,
    /// Resuming: the session and the client's lastZxidSeen.
    pub resume: Option<(SessionId, i64)>,
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
    /// The thread that finishes long reads.
    pub long_reads: LongReads,
}

/// The feature bits this server answers a zlock client with (none to other clients).
pub(crate) fn offered(asked: Option<i32>) -> Option<i32> {
    asked.map(|_| FEATURE_NATIVE_LOCK | FEATURE_LOCK_DELAY)
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

/// `encode`, adding the bytes it appends to `bytes`.
fn counted<'a>(
    bytes: &'a AtomicU64,
    encode: impl FnOnce(&mut Vec<u8>) + 'a,
) -> impl FnOnce(&mut Vec<u8>) + 'a {
    move |out| {
        let at = out.len();
        encode(out);
        bytes.fetch_add((out.len() - at) as u64, Ordering::Relaxed);
    }
}

impl Router {
    pub fn new(me: MemberId, stats: Arc<Stats>, long_reads: LongReads) -> Router {
        Router {
            me,
            routes: HashMap::new(),
            waiting: HashMap::new(),
            handshakes: HashMap::new(),
            next_ticket: 0,
            dirty: Vec::new(),
            stats,
            latency: Latency::default(),
            long_reads,
        }
    }

    /// Closes every client connection and forgets every unanswered request and
    /// handshake: the commit stage could not say whether the last proposals were
    /// committed (the leader changed), so nothing waiting can be answered truthfully.
    /// A ZooKeeper follower that loses its leader does the same; the clients reconnect
    /// and resume their sessions (here or at another member), and a write that did
    /// commit meets nobody waiting when it is applied.
    pub fn drop_all(&mut self) {
        let conns: Vec<ConnHandle> = self.routes.drain().map(|(_, c)| c).collect();
        for c in &conns {
            self.close(c);
        }
        for (_, ws) in self.waiting.drain() {
            for w in ws {
                w.asker().inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let hs: Vec<Handshaking> = self.handshakes.drain().map(|(_, h)| h).collect();
        for h in hs {
            self.close(&h.conn);
        }
    }

    pub fn close(&mut self, conn: &ConnHandle) {
        if conn.close() {
            self.dirty.push(conn.clone());
        }
    }

    /// Whether `session` is connected here through connection `conn_id`.
    pub fn routes_to(&self, session: SessionId, conn_id: u64) -> bool {
        self.conn(session, conn_id).is_some()
    }

    /// The connection of `session` if it is still `conn_id`.
    fn conn(&self, session: SessionId, conn_id: u64) -> Option<&ConnHandle> {
        self.routes.get(&session).filter(|c| c.id == conn_id)
    }

    /// Queues a frame on the session's connection, if it has one here.
    /// (Watch events and lock grants: counted as `watch_bytes`.)
    pub fn send(&mut self, session: SessionId, encode: impl FnOnce(&mut Vec<u8>)) {
        if let Some(c) = self.routes.get(&session) {
            let bytes = &self.stats.watch_bytes;
            queue(&mut self.dirty, c, None, counted(bytes, encode));
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
            let bytes = &self.stats.response_bytes;
            queue(&mut self.dirty, c, permit, counted(bytes, encode));
        }
    }

    /// Requests waiting for their commit, or queued behind a write of their session
    /// (part of `outstanding_requests`). O(sessions with a queue).
    pub fn waiting(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
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
            w.asker().inflight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A write of `session` was proposed: it is answered when its Txn is applied.
    pub fn expect_write(&mut self, session: SessionId, asker: Asker) {
        self.waiting
            .entry(session)
            .or_default()
            .push_back(Waiting::Write(asker));
    }

    /// A read or a local reply that came through the commit stage (its connection had
    /// something there): answered now if nothing of its session waits, else queued.
    pub fn behind_writes(&mut self, state: &mut State, session: SessionId, w: Waiting) {
        match self.waiting.get_mut(&session) {
            Some(q) if !q.is_empty() => q.push_back(w),
            _ => self.answer(state, session, w),
        }
    }

    /// One applied Txn, as this member sees it: watch events and grants for local
    /// sessions, then the answer to its request if it came from here.
    pub fn applied(&mut self, state: &mut State, origin: Origin, a: &Applied) {
        if origin.session != SessionId::NONE {
            crate::stages::mark(
                "applied",
                origin.session.0,
                origin.xid,
                std::time::Duration::ZERO,
            );
        }
        self.deliver(&a.events);
        for (s, g) in &a.grants {
            self.stats.lock_grants.fetch_add(1, Ordering::Relaxed);
            self.send(*s, |out| write_grant(out, a.zxid.0, g));
        }
        if origin.member != self.me {
            return;
        }
        if let Some(session) = a.created_session {
            self.created(origin.xid, session, state);
            return;
        }
        if let Some((session, ok)) = a.moved {
            self.moved(origin.xid, session, ok, state);
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
            .position(|w| matches!(w, Waiting::Write(a) if a.xid == origin.xid));
        let Some(at) = at else {
            // Its session left and came back, or the request was forgotten with an
            // ended session: nobody waits for this answer here.
            return;
        };
        if at != 0 {
            // The earlier writes were not taken (a leader refused their batch and took
            // the next one: see `commit::raft::write`): answering this one would answer
            // out of order, and the earlier ones will never be. The client is told
            // ConnectionLoss for all of them, as for any outcome nobody can tell.
            tracing::warn!(
                session = %origin.session,
                xid = origin.xid,
                "a write was applied before an earlier write of its session; closing its connection"
            );
            self.end_session(origin.session);
            return;
        }
        let Some(Waiting::Write(asker)) = q.remove(at) else {
            return;
        };
        // Usually nothing waits behind a write: then no second look-up.
        let behind = matches!(
            q.front(),
            Some(Waiting::Read { .. } | Waiting::Reply { .. })
        );
        let (zxid, err, body) = (a.zxid.0, a.reply.err, &a.reply.body);
        self.reply(origin.session, asker, true, |out, xid| {
            write_reply(out, xid, zxid, err, body)
        })
        .fetch_sub(1, Ordering::SeqCst);
        if behind {
            self.drain(state, origin.session);
        }
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

    /// Queues the reply to a request (`encode` gets its xid) on the asker's connection
    /// and records the request's latency. Returns the connection's count of items in
    /// the commit stage, for the caller to count the request out of when it went
    /// through it: from then on a later read may be answered in place without
    /// overtaking this reply.
    fn reply(
        &mut self,
        session: SessionId,
        asker: Asker,
        write: bool,
        encode: impl FnOnce(&mut Vec<u8>, i32),
    ) -> InFlight {
        let xid = asker.xid;
        self.send_to_conn(session, asker.conn_id, asker.permit, |out| encode(out, xid));
        self.record_latency(asker.received, write);
        asker.inflight
    }

    /// A request received at `received` is answered: `mntr`'s latency, and
    /// `updatelatency` or `readlatency` when metrics are on.
    fn record_latency(&mut self, received: Instant, write: bool) {
        let ms = received.elapsed().as_secs_f64() * 1000.0;
        self.latency.record(ms);
        if let Some(t) = &self.stats.timings {
            if write {
                t.update.record(ms);
            } else {
                t.read.record(ms);
            }
        }
    }

    /// Answers a read or a local reply that went through the commit stage.
    fn answer(&mut self, state: &mut State, session: SessionId, w: Waiting) {
        match w {
            Waiting::Read { asker, auth, req } => {
                let (zxid, answer) = self.read(state, session, &auth, &req);
                self.reply_read(session, asker, zxid, answer)
                    .fetch_sub(1, Ordering::SeqCst);
            }
            // Not a request the state answers: no latency to record.
            Waiting::Reply {
                asker,
                frame,
                close,
            } => {
                let conn_id = asker.conn_id;
                self.send_to_conn(session, conn_id, asker.permit, |out| {
                    out.extend_from_slice(&frame)
                });
                if close {
                    if let Some(c) = self.conn(session, conn_id).cloned() {
                        self.close(&c);
                    }
                }
                asker.inflight.fetch_sub(1, Ordering::SeqCst);
            }
            // Writes wait for their Txn, never here.
            Waiting::Write(asker) => {
                asker.inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// A read of a session with nothing in the commit stage, answered in place: its
    /// connection's count stays as it is (the read never entered the stage).
    pub fn read_now(
        &mut self,
        state: &mut State,
        session: SessionId,
        asker: Asker,
        auth: &[Id],
        req: &Request,
    ) {
        let (zxid, answer) = self.read(state, session, auth, req);
        self.reply_read(session, asker, zxid, answer);
    }

    /// Serves a read from the applied state: the reply's zxid, and its answer (or what
    /// is left of a long one).
    fn read(
        &mut self,
        state: &mut State,
        session: SessionId,
        auth: &[Id],
        req: &Request,
    ) -> (i64, Answer) {
        let zxid = state.zxid.0;
        match req {
            Request::Ping => (zxid, Answer::Now(Reply::default())),
            Request::SetWatches(w) => {
                let events = zlock_core::read::set_watches(state, session, auth, w);
                self.deliver(&events);
                (zxid, Answer::Now(Reply::default()))
            }
            other => (
                zxid,
                state.read_within(session, auth, other, long_read::IN_PLACE),
            ),
        }
    }

    /// Queues the reply to a read served at `zxid`; for a long read, holds its place on
    /// the connection and hands the rest of the walk to the long-read thread. Returns
    /// the connection's count of items in the commit stage, as [`Router::reply`] does: a
    /// held place counts as a queued reply (nothing queued later can overtake it).
    fn reply_read(
        &mut self,
        session: SessionId,
        asker: Asker,
        zxid: i64,
        answer: Answer,
    ) -> InFlight {
        let read = match answer {
            Answer::Now(r) => {
                return self.reply(session, asker, false, |out, xid| {
                    write_reply(out, xid, zxid, r.err, &r.body)
                })
            }
            Answer::Later(read) => read,
        };
        // Not on the session's connection any more: nobody to answer (as `send_to_conn`).
        let slot = self.conn(session, asker.conn_id).and_then(|c| c.reserve());
        if let Some(slot) = slot {
            let job = long_read::Job {
                read,
                slot,
                permit: asker.permit,
                xid: asker.xid,
                zxid,
            };
            if let Some(c) = self.long_reads.submit(job) {
                self.dirty.push(c);
            }
        }
        // Its latency counts to the moment it was served, not to its reply.
        self.record_latency(asker.received, false);
        asker.inflight
    }

    /// A CreateSession proposed here was applied: answer its handshake.
    fn created(&mut self, ticket: i32, session: SessionId, state: &State) {
        let Some(s) = state.sessions.get(&session) else {
            return;
        };
        if self
            .handshakes
            .get(&ticket)
            .is_none_or(|h| h.passwd != s.passwd)
        {
            // Nobody here waits for it: proposed before this member restarted (or by a
            // handshake already given up).
            return;
        }
        let Some(h) = self.handshakes.remove(&ticket) else {
            return;
        };
        self.accept(h.conn, session, s, (h.read_only, h.features));
        let _ = h.done.send(Some(Handshake {
            session_id: session,
            timeout_ms: s.timeout_ms,
        }));
    }

    /// A MoveSession proposed here was applied: answer its handshake (resumed here, or
    /// refused: the session is gone or the password wrong). Everything committed before
    /// it is applied here by now, and what its old member still sends for it is
    /// refused, so the client finds here every write it made, and none lands later.
    fn moved(&mut self, ticket: i32, session: SessionId, ok: bool, state: &State) {
        let Some(h) = self.handshakes.get(&ticket) else {
            return;
        };
        let Some((wanted, last_zxid_seen)) = h.resume else {
            return;
        };
        if wanted != session {
            return; // proposed before this member restarted
        }
        let Some(h) = self.handshakes.remove(&ticket) else {
            return;
        };
        if zlock_core::Zxid(last_zxid_seen) > state.zxid {
            // The client has seen a newer state than this ensemble's (it talked to
            // another one): refused without an answer, as ZooKeeper does.
            tracing::warn!(
                session = %session,
                client_zxid = format_args!("0x{last_zxid_seen:x}"),
                our_zxid = %state.zxid,
                "refusing a client that has seen a newer zxid than ours"
            );
            self.close(&h.conn);
            let _ = h.done.send(None);
            return;
        }
        match state.sessions.get(&session) {
            Some(s) if ok && s.passwd == h.passwd => {
                self.accept(h.conn, session, s, (h.read_only, h.features));
                let _ = h.done.send(Some(Handshake {
                    session_id: session,
                    timeout_ms: s.timeout_ms,
                }));
            }
            _ => {
                self.refuse(&h.conn, h.read_only);
                let _ = h.done.send(None);
            }
        }
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

    /// Answers a handshake for `session` (new, or resumed) on `conn` and routes the
    /// session there.
    pub fn accept(
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
