//! The simulated clients: each has a session (created through the log, as a real
//! member's handshake does) and sends batches of Txns, one batch at a time, to the
//! member it believes leads, through zlock's own leader-side write
//! (`peer::write_as_leader`). The writes: sequential creates, native lock acquires
//! (zlock-core's lock op), releases (deleting its lock node), TTL nodes made, touched
//! (setData) and asked to be removed as expired (a `DeleteExpired` naming them, as a
//! leader's ticker proposes one, early or not: the state machine decides at apply
//! time, by the Txn's time) and, now and then, closing its session. A batch is
//! acknowledged when the write returns Ok. A quarter of the batches go through a
//! member's own writer instead (see [`Client::through_writer`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use zlock_core::{MemberId, Origin, SessionId, Txn, TxnBody};
use zlock_proto::records::{
    lock_mode, Acl, CreateRequest, CreateTtlRequest, DeleteRequest, LockRequest, LockResponse,
    SetDataRequest,
};
use zlock_proto::{OpCode, Reader, Record, Request};
use zlock_server::commit::raft::peer::{write_as_leader, ForwardError};
use zlock_server::commit::raft::submit::Submitter;
use zlock_server::commit::raft::types::Proposal;
use zlock_server::commit::raft::types::WatchReceiver as _;

use crate::desk::{Conn, Handed};
use crate::host;
use crate::world::{lock, Shared};

/// Lock paths the clients contend for.
pub const LOCKS: usize = 2;

/// How long a client waits for its batch before taking its outcome as unknown.
const PATIENCE: Duration = Duration::from_secs(2);

/// What the clients were told, for the final checks.
#[derive(Default)]
pub struct Ledger {
    /// Acknowledged Txns, in acknowledgement order.
    pub acked: Vec<Txn>,
    /// Txns whose outcome is unknown (may or may not be in the history).
    pub unknown: Vec<Txn>,
    /// Batches refused by a non-leader (not in the history).
    pub refused: usize,
    /// Their Txns: none may be in the history.
    pub refused_txns: Vec<Txn>,
    /// Batches sent together through one pinned submitter (`write::Submitter`), in
    /// order: the ones applied must be a prefix of each group.
    pub groups: Vec<Vec<Vec<Txn>>>,
    /// Batches handed to a member's own writer: acknowledged, and not (unknown).
    pub through_writer: (usize, usize),
    /// Batches pipelined through a member's sequencer (`desk`): answered, and not
    /// (unknown); and how often the client's connection was dropped meanwhile.
    pub pipelined: (usize, usize, usize),
    /// The batches handed over each client connection to a sequencer, in order: what was
    /// applied of them must be a prefix (the writer discards what it is handed after an
    /// unknown outcome until the sequencer has dropped the connections).
    pub conns: Vec<Vec<Vec<Txn>>>,
    /// A group's outcomes broke the submitter's rule (a batch taken after an earlier
    /// one was refused).
    pub violations: Vec<String>,
}

/// Where a client finds the members.
#[derive(Default)]
pub struct Members {
    /// Running members: their Raft and their host.
    pub running:
        std::collections::BTreeMap<u64, (zlock_server::commit::raft::types::Raft, host::SimHost)>,
    /// Each running member's sequencer, as a client connection hands it batches.
    pub desks: std::collections::BTreeMap<u64, tokio::sync::mpsc::UnboundedSender<Handed>>,
}

pub type SharedMembers = Arc<Mutex<Members>>;

pub struct Client {
    pub id: u64,
    pub rng: StdRng,
    pub world: Shared,
    pub members: SharedMembers,
    pub ledger: Arc<Mutex<Ledger>>,
    pub stop: Arc<AtomicBool>,
    session: Option<SessionId>,
    xid: i32,
    /// Lock nodes this client's session made (holding or waiting).
    nodes: Vec<String>,
    /// The TTL nodes this client asked for (made, or perhaps made, or perhaps
    /// removed since: a request on one that is gone fails harmlessly).
    ttl_nodes: Vec<String>,
    /// The member whose writer this client's session is held to (see
    /// [`Client::through_writer`]).
    held_to: Option<u64>,
    /// The client's connection to a member's sequencer, while it has one, and its
    /// batches' place in `Ledger::conns`.
    conn: Option<(u64, Arc<Conn>, usize)>,
}

impl Client {
    pub fn new(
        id: u64,
        rng: StdRng,
        world: Shared,
        members: SharedMembers,
        ledger: Arc<Mutex<Ledger>>,
        stop: Arc<AtomicBool>,
    ) -> Client {
        Client {
            id,
            rng,
            world,
            members,
            ledger,
            stop,
            session: None,
            xid: 0,
            nodes: Vec::new(),
            ttl_nodes: Vec::new(),
            held_to: None,
            conn: None,
        }
    }

    fn origin(&mut self) -> Origin {
        self.xid += 1;
        Origin {
            // Outside the members' ids: only the session id's top byte uses it.
            member: MemberId(100 + self.id),
            session: self.session.unwrap_or(SessionId(0)),
            xid: self.xid,
        }
    }

    fn request(&mut self, now: i64, request: Request) -> Txn {
        Txn::request(self.origin(), now, Arc::new(Vec::new()), request)
    }

    /// The next batch: a new session if there is none, else 1-3 writes.
    fn batch(&mut self, now: i64) -> Vec<Txn> {
        if self.session.is_none() {
            let origin = self.origin();
            let body = TxnBody::CreateSession {
                passwd: vec![7; 16],
                timeout_ms: 30_000,
            };
            return vec![Txn::new(origin, now, body)];
        }
        let n = self.rng.gen_range(1..=3);
        let mut out = Vec::new();
        for _ in 0..n {
            let roll = self.rng.gen_range(0..112);
            if roll >= 100 {
                if let Some(t) = self.ttl_write(now, roll - 100) {
                    out.push(t);
                }
                continue;
            }
            let req = if roll < 40 {
                Request::Create(
                    OpCode::Create,
                    CreateRequest {
                        path: format!("/c{}-", self.id),
                        data: Some(self.xid.to_le_bytes().to_vec()),
                        acl: Acl::open_unsafe(),
                        flags: 2, // SEQUENTIAL
                    },
                )
            } else if roll < 70 || self.nodes.is_empty() {
                // A third ask for a lock-delay: a session closed while holding then
                // holds its lock back until a Txn's time passes the end, which every
                // member must decide at the same log position.
                let lock_delay_ms = if self.rng.gen_range(0..3) == 0 {
                    self.rng.gen_range(1..=400)
                } else {
                    0
                };
                Request::Lock(LockRequest {
                    path: format!("/locks/l{}", self.rng.gen_range(0..LOCKS)),
                    prefix: "lock-".into(),
                    data: None,
                    acl: Acl::open_unsafe(),
                    mode: lock_mode::EXCLUSIVE,
                    leases: 1,
                    flags: 0,
                    release: String::new(),
                    lock_delay_ms,
                })
            } else if roll < 97 {
                let node = self.nodes.remove(0);
                Request::Delete(DeleteRequest {
                    path: node,
                    version: -1,
                })
            } else {
                out.push(self.request(now, Request::CloseSession));
                break;
            };
            out.push(self.request(now, req));
        }
        out
    }

    /// A write on TTL nodes (`roll` in 0..12): make one (TTL 20-800 ms), touch one
    /// (setData resets the time it expires from) or name them all in a DeleteExpired.
    fn ttl_write(&mut self, now: i64, roll: u32) -> Option<Txn> {
        if roll < 5 || self.ttl_nodes.is_empty() {
            let path = format!("/t{}-{}", self.id, self.xid + 1);
            self.ttl_nodes.push(path.clone());
            if self.ttl_nodes.len() > 8 {
                self.ttl_nodes.remove(0);
            }
            let req = Request::CreateTtl(CreateTtlRequest {
                path,
                data: None,
                acl: Acl::open_unsafe(),
                flags: 5, // PERSISTENT_WITH_TTL
                ttl: self.rng.gen_range(20..=800),
            });
            return Some(self.request(now, req));
        }
        if roll < 8 {
            let path = self.ttl_nodes[self.rng.gen_range(0..self.ttl_nodes.len())].clone();
            let req = Request::SetData(SetDataRequest {
                path,
                data: Some(vec![1]),
                version: -1,
            });
            return Some(self.request(now, req));
        }
        let paths = self.ttl_nodes.clone();
        let origin = self.origin();
        Some(Txn::new(origin, now, TxnBody::DeleteExpired { paths }))
    }

    /// Member `id`'s host, if it runs.
    fn host_of(&self, id: u64) -> Option<host::SimHost> {
        let m = self.members.lock().unwrap();
        m.running.get(&id).map(|r| r.1.clone())
    }

    /// The member to write to: the leader as a random member sees it (stale at times,
    /// as a client's view is), or any member if that one knows none.
    /// Returns the member asked and the one written to.
    fn target(
        &mut self,
    ) -> Option<(
        u64,
        u64,
        zlock_server::commit::raft::types::Raft,
        host::SimHost,
    )> {
        let m = self.members.lock().unwrap();
        let ids: Vec<u64> = m.running.keys().copied().collect();
        if ids.is_empty() {
            return None;
        }
        let asked = ids[self.rng.gen_range(0..ids.len())];
        let leader = m.running[&asked]
            .0
            .metrics()
            .borrow_watched()
            .current_leader;
        let id = leader
            .filter(|l| m.running.contains_key(l))
            .unwrap_or(asked);
        let (raft, host) = m.running[&id].clone();
        Some((asked, id, raft, host))
    }

    pub async fn run(mut self, max_batches: usize) {
        for _ in 0..max_batches {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let think = self.rng.gen_range(2..60);
            tokio::time::sleep(Duration::from_millis(think)).await;
            if let Some(m) = self.held_to.filter(|_| self.session.is_some()) {
                match self.host_of(m) {
                    Some(host) => {
                        let own = lock(&self.world).clock_of(m);
                        if self.rng.gen_bool(0.5) {
                            self.pipelined(m, host, own).await;
                        } else {
                            self.through_writer(m, host, own).await;
                        }
                    }
                    // Gone: a real client would move its session elsewhere.
                    None => self.forget_session(),
                }
                continue;
            }
            let Some((asked, to, raft, host)) = self.target() else {
                continue;
            };
            // Stamped by the member the client is connected to (its sequencer), then
            // again by the one that takes the batch as leader: only the second counts.
            let (own, leaders) = {
                let w = lock(&self.world);
                (w.clock_of(asked), w.clock_of(to))
            };
            // A third of the time, several batches in flight at once, as a member's
            // writer keeps them; a quarter, through the member's own writer.
            let roll = self.rng.gen_range(0..12);
            if self.session.is_some() && roll < 4 {
                self.group(to, raft, host, (own, leaders)).await;
                continue;
            }
            if roll == 8 && self.session.is_some() {
                // Pipelined through the sequencer of the member the client is connected
                // to, or of the one it believes leads.
                let at = if self.rng.gen_bool(0.5) { asked } else { to };
                if let Some(host) = self.host_of(at) {
                    self.pipelined(at, host, own).await;
                    continue;
                }
            }
            if roll >= 9 {
                // The member the client is connected to, which forwards to the leader
                // it knows; or the one it believes leads.
                if roll == 11 {
                    if let Some(host) = self.host_of(asked) {
                        self.through_writer(asked, host, own).await;
                        continue;
                    }
                }
                self.through_writer(to, host, own).await;
                continue;
            }
            let batch = self.batch(own);
            lock(&self.world).stamp(to, &batch);
            let props = Proposal::split(batch.iter().cloned());
            let write = write_as_leader(&raft, to, props, leaders);
            let r = tokio::time::timeout(PATIENCE, write).await;
            let what = match &r {
                Ok(Ok(i)) => format!("acked through {i}"),
                Ok(Err(e)) => format!("failed: {e}"),
                Err(_) => "no answer".to_string(),
            };
            lock(&self.world).event(format!(
                "client {} batch of {} to {to}: {what}",
                self.id,
                batch.len()
            ));
            match r {
                Ok(Ok(_)) => self.acked(&batch, &host),
                Ok(Err(ForwardError::NotLeader(_))) => {
                    let mut l = self.ledger.lock().unwrap();
                    l.refused += 1;
                    l.refused_txns.extend(batch.iter().cloned());
                }
                _ => self.unknown(batch),
            }
        }
    }

    /// 2-4 batches handed to one pinned submitter at `to` before any outcome is
    /// awaited, their outcomes then read in order (as `write::Writer` does).
    async fn group(
        &mut self,
        to: u64,
        raft: zlock_server::commit::raft::types::Raft,
        host: host::SimHost,
        (own, leaders): (i64, i64),
    ) {
        let k = self.rng.gen_range(2..=4);
        let batches: Vec<Vec<Txn>> = (0..k)
            .map(|_| {
                let b = self.batch(own);
                lock(&self.world).stamp(to, &b);
                b
            })
            .collect();
        let mut submitter = Submitter::new(raft, to);
        let mut pending = Vec::new();
        for b in &batches {
            let props = Proposal::split(b.iter().cloned());
            pending.push(submitter.submit(props, leaders).await);
        }
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut refused_before = false;
        for (i, (b, p)) in batches.iter().zip(pending).enumerate() {
            let r = tokio::time::timeout_at(deadline, p).await;
            let what = match &r {
                Ok(Ok(i)) => format!("acked through {i}"),
                Ok(Err(e)) => format!("failed: {e}"),
                Err(_) => "no answer".to_string(),
            };
            lock(&self.world).event(format!(
                "client {} group batch {i} of {k} ({} Txns) to {to}: {what}",
                self.id,
                b.len()
            ));
            match r {
                Ok(Ok(_)) => {
                    if refused_before {
                        self.ledger.lock().unwrap().violations.push(format!(
                            "client {}: batch {i} of a group at member {to} was taken after \
                             an earlier one was refused",
                            self.id
                        ));
                    }
                    self.acked(b, &host)
                }
                Ok(Err(ForwardError::NotLeader(_))) => {
                    refused_before = true;
                    let mut l = self.ledger.lock().unwrap();
                    l.refused += 1;
                    l.refused_txns.extend(b.iter().cloned());
                }
                _ => self.unknown(b.clone()),
            }
        }
        self.ledger.lock().unwrap().groups.push(batches);
    }

    /// One batch through member `to`'s own writer (`write::Writer`), handed over by its
    /// sequencer (`desk`) in turn with every other batch there, with the outcome asked
    /// for (`Order::Batch`'s `done`, as a synchronous proposer does): while `to` leads,
    /// the writer submits it to its Raft, with any batch other clients handed it,
    /// several in flight; else it forwards it to the leader it knows over a forwarding
    /// connection (`forward`). Its outcome is read when the writer reports it. The
    /// writer (or the leader, for a forwarded frame) stamps the Txns itself, with its own
    /// clock: they are not in `World::stamps`, so the lock-delay and TTL checks skip them
    /// (those clocks raise `World::max_stamp_offset`, which only loosens those checks).
    ///
    /// After an unknown outcome the client keeps its session, as a real one reconnects
    /// and resumes it, and sends every later batch of it through `to`'s writer again:
    /// the session stays at `to`, where its earlier requests may still be on their way.
    /// (A real client that reconnects to another member moves its session there
    /// (`MoveSession`), which fails a request still on its way from the old member as
    /// SessionMoved when it lands (`State::apply`); the simulation does not model moves.
    /// If `to` is gone, the client starts a new session.)
    async fn through_writer(&mut self, to: u64, host: host::SimHost, own: i64) {
        let batch = self.batch(own);
        let desk = self.members.lock().unwrap().desks.get(&to).cloned();
        let Some(desk) = desk else {
            return self.unknown(batch);
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        // A connection of its own: its batch is in order behind everything this
        // client handed the sequencer before (pipelined batches it gave up on may still
        // be waiting there), as a real client's resumed session's requests are.
        let handed = Handed {
            conn: Arc::new(Conn::default()),
            props: Proposal::split(batch.iter().cloned()),
            done: Some(done),
        };
        let r = tokio::time::timeout(4 * PATIENCE, async move {
            desk.send(handed)
                .map_err(|_| "sequencer gone".to_string())?;
            match answer.await {
                Ok(Ok(i)) => Ok(i),
                Ok(Err(e)) => Err(format!("failed: {e}")),
                Err(_) => Err("writer gone".to_string()),
            }
        })
        .await;
        let what = match &r {
            Ok(Ok(i)) => format!("acked through {i}"),
            Ok(Err(e)) => e.clone(),
            Err(_) => "no answer".to_string(),
        };
        lock(&self.world).event(format!(
            "client {} batch of {} through member {to}'s writer: {what}",
            self.id,
            batch.len()
        ));
        match r {
            Ok(Ok(_)) => {
                self.ledger.lock().unwrap().through_writer.0 += 1;
                self.acked(&batch, &host)
            }
            _ => {
                self.ledger.lock().unwrap().through_writer.1 += 1;
                self.unknown(batch);
                if self.session.is_some() {
                    self.held_to = Some(to);
                }
            }
        }
    }

    /// 2-4 batches of this client's session handed to member `to`'s sequencer (`desk`)
    /// at once over its connection there, as a client that pipelines its requests does:
    /// the sequencer hands them to the member's writer without waiting, and the client
    /// hears a batch answered when `to` has applied all of it. If the sequencer drops its
    /// connection (the writer reported an outcome it cannot know) or nothing comes in
    /// time, the batches not answered end unknown, and the client resumes its session at
    /// `to` over a new connection (see [`Client::through_writer`] for why at `to`).
    async fn pipelined(&mut self, to: u64, host: host::SimHost, own: i64) {
        let desk = self.members.lock().unwrap().desks.get(&to).cloned();
        let Some(desk) = desk else { return };
        let (conn, at) = match &self.conn {
            Some((m, c, at)) if *m == to && !c.dropped() => (c.clone(), *at),
            _ => {
                let c = Arc::new(Conn::default());
                let at = {
                    let mut l = self.ledger.lock().unwrap();
                    l.conns.push(Vec::new());
                    l.conns.len() - 1
                };
                self.conn = Some((to, c.clone(), at));
                (c, at)
            }
        };
        let k = self.rng.gen_range(2..=4);
        let mut batches: Vec<Vec<Txn>> = Vec::new();
        for _ in 0..k {
            let b = self.batch(own);
            let ends = makes_or_ends_session(&b);
            let handed = Handed {
                conn: conn.clone(),
                props: Proposal::split(b.iter().cloned()),
                done: None,
            };
            let sent = desk.send(handed).is_ok();
            self.ledger.lock().unwrap().conns[at].push(b.clone());
            batches.push(b);
            if ends || !sent {
                break;
            }
        }
        // Answered: every Txn of the batch applied at `to` (which replies as it applies).
        let answered = |b: &[Txn]| {
            let h = host::lock(&host.inner);
            b.iter()
                .all(|t| h.replies.contains_key(&(t.origin.session.0, t.origin.xid)))
        };
        let deadline = tokio::time::Instant::now() + 4 * PATIENCE;
        loop {
            if batches.iter().all(|b| answered(b)) || conn.dropped() {
                break;
            }
            // `to` crashed (its host is a new one, or none): the connection went with it.
            let same = self
                .host_of(to)
                .is_some_and(|h| Arc::ptr_eq(&h.inner, &host.inner));
            if !same || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let dropped = conn.dropped();
        let mut unknown = false;
        for (i, b) in batches.into_iter().enumerate() {
            let ok = answered(&b);
            lock(&self.world).event(format!(
                "client {} pipelined batch {i} ({} Txns) at member {to}: {}",
                self.id,
                b.len(),
                if ok {
                    "answered"
                } else if dropped {
                    "dropped"
                } else {
                    "no answer"
                }
            ));
            if ok && !unknown {
                self.ledger.lock().unwrap().pipelined.0 += 1;
                self.acked(&b, &host);
            } else {
                // A later batch answered after an earlier one was not: still unknown to
                // this client, which lost the earlier one's answer with its connection.
                self.ledger.lock().unwrap().pipelined.1 += 1;
                unknown = true;
                self.unknown(b);
            }
        }
        if dropped {
            self.ledger.lock().unwrap().pipelined.2 += 1;
        }
        if unknown {
            self.conn = None;
            if self.session.is_some() {
                self.held_to = Some(to);
            }
        }
    }

    /// Reads what the acknowledged batch did from the member that applied it (it
    /// applies before it answers).
    fn acked(&mut self, batch: &[Txn], host: &host::SimHost) {
        let h = host::lock(&host.inner);
        for t in batch {
            match &t.body {
                TxnBody::CreateSession { .. } => {
                    self.session = h.created.get(&(t.origin.member.0, t.origin.xid)).copied();
                }
                TxnBody::Request {
                    request: Request::Lock(_),
                    ..
                } => {
                    if let Some(reply) = h.replies.get(&(t.origin.session.0, t.origin.xid)) {
                        if reply.err == 0 {
                            if let Ok(resp) = LockResponse::decode(&mut Reader::new(&reply.body)) {
                                self.nodes.push(resp.node);
                            }
                        }
                    }
                }
                TxnBody::Request {
                    request: Request::CloseSession,
                    ..
                } => self.forget_session(),
                _ => {}
            }
        }
        drop(h);
        self.ledger
            .lock()
            .unwrap()
            .acked
            .extend(batch.iter().cloned());
    }

    /// A batch that may or may not have been committed: the client starts over with a
    /// new session if it was making one or closing one (a real client would resume
    /// it; its lock nodes stay with the old session until that one is closed).
    fn unknown(&mut self, batch: Vec<Txn>) {
        if makes_or_ends_session(&batch) {
            self.forget_session();
        }
        self.ledger.lock().unwrap().unknown.extend(batch);
    }

    fn forget_session(&mut self) {
        self.held_to = None;
        self.session = None;
        self.nodes.clear();
    }
}

/// Whether `batch` makes a session or closes one.
fn makes_or_ends_session(batch: &[Txn]) -> bool {
    batch.iter().any(|t| {
        matches!(
            t.body,
            TxnBody::CreateSession { .. }
                | TxnBody::Request {
                    request: Request::CloseSession,
                    ..
                }
        )
    })
}
