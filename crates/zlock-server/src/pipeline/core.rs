//! The core: this member's state-machine host. It owns the [`State`] (replicated: every
//! member applies the same Txns), the [`Router`] (member-local: connections and
//! unanswered requests), and the [`SessionTracker`] (liveness, owned by the one member
//! allowed to expire sessions: the single node today, the leader in an ensemble).
//!
//! It is not a thread of its own: it sits behind a lock that the sequencer thread takes
//! to register a batch's requests and then, as the commit stage's [`Apply`], to apply
//! the batch once durable; that a connection task takes to answer a read in place; and
//! that the ticker takes to check liveness. Frames are queued on the connections while
//! the lock is held and written to the sockets after it is released ([`with_core`],
//! [`crate::conn::out::flush`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zlock_core::sessions::SessionTracker;
use zlock_core::{LogIndex, MemberId, Origin, SessionId, State, Txn, TxnBody, Zxid};
use zlock_proto::records::{Id, LOCK_DELAY_SERVER_DEFAULT};
use zlock_proto::Request;

use crate::clock::{now_ms, Clock};

use super::router::{Handshaking, Router, Waiting};
use super::{AdminQuery, Asker, Item};
use crate::admin;
use crate::commit::{Apply, Entry};
use crate::config::ServerConfig;
use crate::conn::ConnHandle;
use crate::snapshot::SnapshotWorker;
use crate::stats::Latency;

pub(crate) struct Core {
    state: State,
    router: Router,
    sessions: SessionTracker,
    clock: Clock,
    config: Arc<ServerConfig>,
    snapshots: SnapshotWorker,
    since_snapshot: u64,
    next_container_check: Instant,
    /// Set by [`Core::finish`]: the state is gone.
    stopped: bool,
    /// This member may expire sessions: the single node, or an ensemble's leader...
    leads: bool,
    /// ... while it is in touch with a quorum (always, on the single node).
    in_touch: bool,
    /// In an ensemble: `leader` or `follower`; `standalone` otherwise.
    mode: &'static str,
    /// In an ensemble, since when this member leads (`leader_uptime`).
    led_since: Option<Instant>,
    /// In an ensemble, the sessions active here since the last report to the leader
    /// (whose tracker is the one that expires); `None` on the single node.
    touched: Option<std::collections::HashSet<SessionId>>,
    /// In an ensemble: the ensemble as this member last saw it (for `mntr`).
    ensemble: Option<crate::commit::raft::RaftFacts>,
    /// Whether the core takes snapshots itself (the single node; in an ensemble the
    /// Raft log asks for them).
    snapshot_self: bool,
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
/// `dirty`, for the caller to flush once the lock is released. (Moved, not swapped:
/// both lists keep their capacity, so the request path allocates no list.)
pub(crate) fn with_core<R>(
    core: &Mutex<Core>,
    dirty: &mut Vec<ConnHandle>,
    f: impl FnOnce(&mut Core) -> R,
) -> R {
    let mut c = lock(core);
    let r = f(&mut c);
    dirty.append(&mut c.router.dirty);
    r
}

/// Runs `f` under the core's lock, then writes what it queued on any connection once
/// the lock is released: the usual way in. [`with_core`] is for a caller that gathers
/// several holds' connections for one flush (the sequencer's chunks, the apply path, a
/// connection task answering in place).
pub(crate) fn locked<R>(core: &Mutex<Core>, f: impl FnOnce(&mut Core) -> R) -> R {
    let mut dirty = Vec::new();
    let r = with_core(core, &mut dirty, f);
    crate::conn::out::flush(&mut dirty);
    r
}

/// What the sequencer should do after an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Go,
    Stop,
}

impl Core {
    /// The core of a server with `config`, over `state` (recovered, or a member's
    /// empty state until its Raft restores it). On the single node it leads and is in
    /// touch from the start; an ensemble member is a follower (or an observer) until
    /// its Raft says otherwise.
    pub fn new(
        config: Arc<ServerConfig>,
        state: State,
        stats: Arc<crate::stats::Stats>,
        snapshots: SnapshotWorker,
        long_reads: super::long_read::LongReads,
    ) -> Core {
        let me = config
            .ensemble
            .as_ref()
            .map_or(STANDALONE, |e| zlock_core::MemberId(e.me));
        let standalone = config.ensemble.is_none();
        Core {
            state,
            router: Router::new(me, stats, long_reads),
            sessions: SessionTracker::new(super::TICK.as_millis() as u64),
            clock: Clock::start(),
            snapshots,
            since_snapshot: 0,
            next_container_check: Instant::now()
                + Duration::from_millis(config.container_check_interval_ms),
            stopped: false,
            leads: standalone,
            in_touch: standalone,
            mode: match &config.ensemble {
                None => "standalone",
                Some(e) if e.is_observer() => "observer",
                Some(_) => "follower",
            },
            led_since: None,
            touched: config.ensemble.as_ref().map(|_| Default::default()),
            snapshot_self: standalone,
            ensemble: None,
            config,
        }
    }

    /// Tracks the recovered sessions: each gets a full timeout from now to reconnect,
    /// as ZooKeeper gives them.
    pub fn start_clocks(&mut self) {
        let now = self.clock.now();
        for (id, s) in &self.state.sessions {
            self.sessions.add(*id, s.timeout_ms.max(0) as u64, now);
        }
    }

    /// Activity of `session` on this member.
    fn touch(&mut self, session: SessionId) {
        self.sessions.touch(session, self.clock.now());
        if let Some(t) = &mut self.touched {
            t.insert(session);
        }
    }

    /// Sessions reported active by another member (to the leader).
    pub fn touched_elsewhere(&mut self, sessions: &[SessionId]) {
        let now = self.clock.now();
        for s in sessions {
            self.sessions.touch(*s, now);
        }
    }

    /// This member became the leader (`true`) or stopped being it. A new leader gives
    /// every session a full timeout from now, as a new ZooKeeper leader does: its
    /// clients may be reconnecting from the old leader.
    pub fn set_leader(&mut self, leads: bool) {
        if leads && !self.leads {
            self.sessions.restart_all(self.clock.now());
        }
        if leads != self.leads || self.led_since.is_none() {
            self.led_since = leads.then(Instant::now);
        }
        self.leads = leads;
        let observer = self
            .config
            .ensemble
            .as_ref()
            .is_some_and(|e| e.is_observer());
        self.mode = match (leads, observer) {
            (true, _) => "leader",
            // ZooKeeper's srvr `Mode: observer`, mntr `zk_server_state observer`.
            (false, true) => "observer",
            (false, false) => "follower",
        };
    }

    /// Whether a quorum answers this member. Back in touch, every session gets a full
    /// timeout, as under a new leader: while cut off, the leader heard nothing of the
    /// sessions that other members serve.
    pub fn set_in_touch(&mut self, in_touch: bool) {
        if in_touch && !self.in_touch {
            self.sessions.restart_all(self.clock.now());
        }
        self.in_touch = in_touch;
    }

    /// The ensemble's committed configuration is (now) `text` at `version`:
    /// `/zookeeper/config` shows it, and its data watches fire as on ZooKeeper, where a
    /// reconfig is a setData of that node. An older or the same version changes nothing.
    pub fn set_config_view(&mut self, text: String, version: u64) {
        let Some(cur) = &self.state.config_node else {
            return;
        };
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        if version < cur.version || (version == cur.version && cur.data == text.as_bytes()) {
            return;
        }
        self.state.config_node = Some(zlock_core::ConfigNode {
            data: text.into_bytes(),
            version,
            mtime: crate::clock::now_ms(),
        });
        let mut events = Vec::new();
        self.state.watches.trigger(
            zlock_core::ConfigNode::PATH,
            zlock_proto::records::event_type::NODE_DATA_CHANGED,
            None,
            &mut events,
        );
        self.router.deliver(&events);
    }

    /// Closes every client connection here (they reconnect and resume elsewhere, or
    /// here once the member is back in touch).
    pub fn drop_all_clients(&mut self) {
        self.router.drop_all();
    }

    /// The server's counters (shared: they live as long as the server).
    pub fn stats(&self) -> Arc<crate::stats::Stats> {
        self.router.stats.clone()
    }

    /// The ensemble as this member sees it now, for `mntr` and `srvr`.
    pub fn saw_ensemble(&mut self, facts: crate::commit::raft::RaftFacts) {
        self.ensemble = Some(facts);
    }

    /// The sessions active here since the last call.
    pub fn take_touched(&mut self) -> Vec<SessionId> {
        self.touched
            .as_mut()
            .map(|t| t.drain().collect())
            .unwrap_or_default()
    }

    fn origin(&self, session: SessionId, xid: i32) -> Origin {
        Origin {
            member: self.router.me,
            session,
            xid,
        }
    }

    /// The sequencer's step for one item, in arrival order: a write becomes a Txn with
    /// everything fixed in it (origin, time, a new session's password) and is pushed to
    /// `txns`, its request registered with the router; anything member-local (a read
    /// queued behind a write, a reconnect, a four-letter word) is handled here.
    pub fn sequence(&mut self, item: Item, txns: &mut Vec<Txn>) -> Flow {
        match item {
            Item::Connect {
                conn,
                timeout_ms,
                passwd,
                read_only,
                features,
                done,
            } => {
                let hs = Handshaking {
                    conn,
                    passwd: passwd.clone(),
                    resume: None,
                    read_only,
                    features,
                    done,
                };
                self.handshake(hs, TxnBody::CreateSession { passwd, timeout_ms }, txns);
            }
            resume @ Item::Resume { .. } => self.resume(resume, txns),
            Item::Request {
                session,
                asker,
                auth,
                req,
            } => {
                let write = State::is_write(&req);
                if write && !self.router.routes_to(session, asker.conn_id) {
                    // Its connection is closed here (dropped when a proposal's outcome
                    // was unknown, replaced by a newer connection of its session, or
                    // its session ended) and its client told ConnectionLoss: proposing
                    // it now would let it land after the client, reconnected, decided
                    // it was not applied (a lock recipe would create a second node).
                    // A ZooKeeper follower that loses its leader drops its queued
                    // requests the same way.
                    asker
                        .inflight
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    return Flow::Go;
                }
                self.touch(session);
                if write {
                    let body = match req {
                        Request::CloseSession => TxnBody::CloseSession {
                            session_id: session,
                        },
                        Request::Lock(mut lock) => {
                            self.router
                                .stats
                                .lock_requests
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            // The proposer fixes the default in the Txn: a member
                            // configured otherwise applies the same lock-delay.
                            if lock.lock_delay_ms == LOCK_DELAY_SERVER_DEFAULT {
                                lock.lock_delay_ms = self.config.lock_delay_ms;
                            }
                            TxnBody::Request {
                                auth,
                                request: Request::Lock(lock),
                            }
                        }
                        request => TxnBody::Request { auth, request },
                    };
                    txns.push(Txn::new(self.origin(session, asker.xid), now_ms(), body));
                    if crate::stages::on() {
                        let ago = asker.received.elapsed();
                        crate::stages::mark("in", session.0, asker.xid, ago);
                        crate::stages::mark("seq", session.0, asker.xid, std::time::Duration::ZERO);
                    }
                    self.router.expect_write(session, asker);
                } else {
                    let w = Waiting::Read { asker, auth, req };
                    self.router.behind_writes(&mut self.state, session, w);
                }
            }
            Item::Reply {
                session,
                asker,
                frame,
                close,
            } => {
                let w = Waiting::Reply {
                    asker,
                    frame,
                    close,
                };
                self.router.behind_writes(&mut self.state, session, w);
            }
            Item::Disconnected { session, conn_id } => self.router.disconnected(session, conn_id),
            Item::Expire { session } => txns.push(Txn::new(
                self.origin(SessionId::NONE, 0),
                now_ms(),
                TxnBody::CloseSession {
                    session_id: session,
                },
            )),
            Item::DeleteExpired { paths } => txns.push(Txn::new(
                self.origin(SessionId::NONE, 0),
                now_ms(),
                TxnBody::DeleteExpired { paths },
            )),
            Item::Admin { query, done } => {
                if query == AdminQuery::Srst {
                    self.router.latency = Latency::default();
                }
                let _ = done.send(admin::answer(query, &self.facts()));
            }
            Item::AdminJson { query, done } => {
                let _ = done.send(admin::json::answer(query, &self.facts()));
            }
            Item::Scrape { done } => {
                let _ = done.send(Box::new(self.scrape()));
            }
            dropping @ (Item::OutOfTouch | Item::Trouble(_)) => {
                // Trouble: committed or not, nobody can say. Either way every client
                // here is dropped (they reconnect and resume), and none of their
                // requests sequenced before this is proposed.
                if let Item::Trouble(why) = &dropping {
                    tracing::warn!(reason = %why, "no answer from the leader; closing client connections");
                }
                txns.clear();
                self.router.drop_all();
            }
            // The sequencer takes the log's own items as it gathers a batch.
            Item::Purge { .. } => {}
            Item::Shutdown => return Flow::Stop,
        }
        Flow::Go
    }

    /// What the admin answers read (see `admin::Facts`).
    fn facts(&self) -> admin::Facts<'_> {
        admin::Facts {
            state: &self.state,
            stats: &self.router.stats,
            latency: &self.router.latency,
            mode: self.mode,
            ensemble: self.ensemble.as_ref(),
            tracker: &self.sessions,
            now: self.clock.now(),
            waiting: self.router.waiting(),
        }
    }

    /// What a metrics scrape reads of the applied state (see `crate::metrics`): numbers,
    /// and an O(1) copy of the znodes.
    fn scrape(&self) -> super::Scrape {
        let st = &self.state;
        // One walk of the lock queues (O(entries), once a scrape): holders, and the
        // oldest waiting native request by its node's creation time.
        let (mut holders, mut oldest) = (0, None::<i64>);
        for lock in st.locks.view() {
            for e in &lock.entries {
                match e.standing {
                    zlock_core::locks::Standing::Holds => holders += 1,
                    zlock_core::locks::Standing::Waiting(_) => {
                        let node = zlock_core::path::join(&lock.path, &e.name);
                        if let Some(n) = st.tree.get(&node) {
                            oldest = Some(oldest.map_or(n.ctime, |o: i64| o.min(n.ctime)));
                        }
                    }
                    zlock_core::locks::Standing::Queued => {}
                }
            }
        }
        super::Scrape {
            latency: self.router.latency.clone(),
            znode_count: st.tree.len(),
            watch_count: st.watches.count(),
            ephemerals_count: st.tree.ephemeral_count(),
            global_sessions: st.sessions.len(),
            nodes: st.tree.nodes().clone(),
            waiting: self.router.waiting(),
            lock_waiters: st.locks.waiting(),
            lock_paths: st.locks.len(),
            lock_delays: st.locks.delayed(),
            lock_holders: holders,
            lock_longest_wait_ms: oldest.map_or(0, |t| now_ms().saturating_sub(t)),
            ensemble: self.ensemble.clone(),
            led_since: if self.ensemble.is_some() && self.leads {
                self.led_since
            } else {
                None
            },
        }
    }

    /// Applies committed entries in log order (the commit stage's [`Apply`]).
    pub fn apply_entries(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        if self.stopped {
            // Stopping: the state is gone (see `finish`). In an ensemble openraft may
            // still apply committed entries until it stops; they are in its log, and a
            // restart applies them again.
            return;
        }
        for (index, entry) in entries {
            if let Err(e) = self.state.enter(index) {
                diverged(e);
            }
            let Entry::Txns(txns) = entry else {
                continue;
            };
            for txn in txns {
                self.apply_txn(txn);
            }
        }
    }

    /// Applies the next Txn of the entry the state has entered, and hands on what it
    /// produced: replies, events and grants to the router, sessions to the tracker.
    fn apply_txn(&mut self, txn: &Txn) {
        let a = self.state.apply_txn(txn);
        if txn.origin.member == self.router.me {
            self.count_applied(txn, &a);
        }
        if let Some(s) = a.created_session {
            let timeout = self.state.sessions.get(&s).map_or(0, |s| s.timeout_ms);
            self.sessions
                .add(s, timeout.max(0) as u64, self.clock.now());
        }
        if let Some((s, true)) = a.moved {
            if txn.origin.member == self.router.me {
                self.touch(s);
            }
        }
        self.router.applied(&mut self.state, txn.origin, &a);
        if let Some(s) = a.closed_session {
            if txn.origin.session == SessionId::NONE {
                tracing::info!(session = %s, "session expired");
            }
            self.sessions.remove(s);
            self.router.end_session(s);
        }
        self.since_snapshot += 1;
        if self.snapshot_self && self.since_snapshot >= self.config.snap_count {
            self.since_snapshot = 0;
            self.snapshots.submit(&self.state);
        }
    }

    /// The counters of a Txn this member proposed: lock hand-overs and failures,
    /// expiries. (A Txn's time is the leader's clock: on a follower, a hand-over's time
    /// also holds the difference of the two clocks.)
    fn count_applied(&self, txn: &Txn, a: &zlock_core::Applied) {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = &self.router.stats;
        if let (Some(t), false) = (&stats.timings, a.grants.is_empty()) {
            let ms = (now_ms() - txn.time_ms).max(0) as f64;
            for _ in &a.grants {
                t.handover.record(ms);
            }
        }
        let is_lock = matches!(
            &txn.body,
            TxnBody::Request {
                request: Request::Lock(_),
                ..
            }
        );
        if is_lock && a.reply.err != 0 {
            stats.lock_failures.fetch_add(1, Relaxed);
        }
        if a.closed_session.is_some() && txn.origin.session == SessionId::NONE {
            stats.sessions_expired.fetch_add(1, Relaxed);
        }
    }

    /// Answers a read whose session has nothing in the commit stage (nothing once the
    /// server has stopped: the state is gone, and an answer from it would be wrong).
    pub fn direct(&mut self, session: SessionId, asker: Asker, auth: &[Id], req: &Request) {
        if self.stopped {
            return;
        }
        self.touch(session);
        self.router
            .read_now(&mut self.state, session, asker, auth, req);
    }

    /// Replaces the state by a snapshot payload (from the ensemble's leader) taken at
    /// `index`. Watches and the `/zookeeper/config` view are member-local and stay; sessions are tracked again from the
    /// snapshot's, each with a full timeout.
    pub fn install(&mut self, index: LogIndex, payload: &[u8]) -> Result<(), String> {
        let config = zlock_core::Config {
            extended_types: self.config.extended_types,
        };
        let mut st = zlock_core::snapshot::decode(payload, config).map_err(|e| e.to_string())?;
        st.applied = index;
        st.watches = std::mem::take(&mut self.state.watches);
        // So is the view of `/zookeeper/config` (ZooKeeper resets the node from its local
        // configuration after a leader's snapshot too, ZOOKEEPER-2819).
        st.config_node = self.state.config_node.take();
        let old = std::mem::replace(&mut self.state, st);
        for id in old.sessions.keys() {
            if !self.state.sessions.contains_key(id) {
                self.sessions.remove(*id);
                self.router.end_session(*id);
            }
        }
        let now = self.clock.now();
        for (id, s) in &self.state.sessions {
            if !self.sessions.contains(*id) {
                self.sessions.add(*id, s.timeout_ms.max(0) as u64, now);
            }
        }
        let _ = std::thread::Builder::new()
            .name("zlock-free".into())
            .spawn(move || drop(old));
        tracing::info!(index = index.0, zxid = %self.state.zxid, nodes = self.state.tree.len(), "state replaced by the leader's snapshot");
        Ok(())
    }

    /// Stops the snapshot worker and frees the state on a thread of its own: dropping a
    /// million znodes takes a noticeable fraction of a second that nobody needs to wait
    /// for (everything is durable by now).
    pub fn finish(&mut self) {
        self.stopped = true;
        self.snapshots.stop();
        self.router.long_reads.stop();
        let state = std::mem::take(&mut self.state);
        let _ = std::thread::Builder::new()
            .name("zlock-free".into())
            .spawn(move || drop(state));
    }

    /// Registers a handshake with the router and queues the Txn (a CreateSession, or
    /// a MoveSession in an ensemble) whose application answers it.
    fn handshake(&mut self, hs: Handshaking, body: TxnBody, txns: &mut Vec<Txn>) {
        let ticket = self.router.expect_session(hs);
        txns.push(Txn::new(
            self.origin(SessionId::NONE, ticket),
            now_ms(),
            body,
        ));
    }

    /// A reconnect to an existing session (`item` is an [`Item::Resume`]).
    fn resume(&mut self, item: Item, txns: &mut Vec<Txn>) {
        let Item::Resume {
            conn,
            session_id,
            last_zxid_seen,
            passwd,
            read_only,
            features,
            done,
        } = item
        else {
            return;
        };
        let offer = (read_only, features);
        if self.config.ensemble.is_some() {
            // A member of an ensemble resumes a session through the log: the session
            // moves here (see `Router::moved`), answered once applied.
            let hs = Handshaking {
                conn,
                passwd: passwd.clone(),
                resume: Some((session_id, last_zxid_seen)),
                read_only,
                features,
                done,
            };
            self.handshake(hs, TxnBody::MoveSession { session_id, passwd }, txns);
            return;
        }
        if Zxid(last_zxid_seen) > self.state.zxid {
            // The client has seen a newer state than ours (we lost data, or it talked
            // to another ensemble): ZooKeeper refuses without an answer so the client
            // tries another server.
            tracing::warn!(
                session = %session_id,
                client_zxid = format_args!("0x{last_zxid_seen:x}"),
                our_zxid = %self.state.zxid,
                "refusing a client that has seen a newer zxid than ours"
            );
            self.router.close(&conn);
            let _ = done.send(None);
            return;
        }
        let alive = !self.sessions.is_expiring(session_id) && self.sessions.contains(session_id);
        match self.state.sessions.get(&session_id) {
            Some(s) if alive && s.passwd == passwd => {
                self.sessions.touch(session_id, self.clock.now());
                if let Some(t) = &mut self.touched {
                    t.insert(session_id);
                }
                let timeout_ms = s.timeout_ms;
                self.router.accept(conn, session_id, s, offer);
                let _ = done.send(Some(super::Handshake {
                    session_id,
                    timeout_ms,
                }));
            }
            _ => {
                self.router.refuse(&conn, offer.0);
                let _ = done.send(None);
            }
        }
    }

    /// Liveness and container checks; what must be proposed goes to `out`.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Item>) {
        if self.stopped {
            return;
        }
        // Only the member that leads expires, and only while a quorum answers it (in an
        // ensemble, the others' trackers only keep the sessions for when they lead).
        if self.leads && self.in_touch {
            for session in self.sessions.expired(self.clock.at(now)) {
                out.push(Item::Expire { session });
            }
        }
        let mut paths = Vec::new();
        if now >= self.next_container_check {
            self.next_container_check =
                now + Duration::from_millis(self.config.container_check_interval_ms);
            paths = self.state.expired_candidates(now_ms());
        }
        // A lock-delay ends at the first Txn whose time reaches it; the member that
        // expires sessions proposes one then, so its waiters are granted within a tick
        // even when nothing else is written. Proposed again each tick until applied.
        let delay_due = self.leads
            && self.in_touch
            && self
                .state
                .locks
                .next_delay_end()
                .is_some_and(|end| end <= now_ms());
        if !paths.is_empty() || delay_due {
            out.push(Item::DeleteExpired { paths });
        }
    }
}

/// The log and the state disagree: continuing would spread the damage.
fn diverged(e: zlock_core::OutOfOrder) -> ! {
    tracing::error!(error = %e, "the commit log and the state diverged; stopping");
    std::process::abort();
}

/// The commit stage's receiving end: the core, locked for each committed batch, with
/// the frames it queued written once the lock is released.
pub(crate) struct CoreApply {
    pub core: Arc<Mutex<Core>>,
    pub dirty: Vec<ConnHandle>,
}

impl crate::commit::Snapshots for CoreApply {
    fn image(&mut self) -> crate::commit::SnapshotJob {
        let image = locked(&self.core, |c| zlock_core::snapshot::Image::of(&c.state));
        Box::new(move |w| zlock_core::snapshot::write_image(&image, w))
    }

    fn install(&mut self, index: LogIndex, payload: &[u8]) -> Result<(), String> {
        let r = with_core(&self.core, &mut self.dirty, |c| c.install(index, payload));
        crate::conn::out::flush(&mut self.dirty);
        r
    }
}

/// Txns applied per hold of the core's lock: a connection task answering a read in
/// place waits for about this many (a chunk ends with the entry that reaches it, and a
/// Raft entry holds up to 256), never for a whole batch (up to 4096 Txns).
pub(crate) const APPLY_CHUNK: usize = 64;

impl Apply for CoreApply {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        loop {
            let (mut txns, mut more) = (0, false);
            let mut chunk = std::iter::from_fn(|| {
                if txns >= APPLY_CHUNK {
                    more = true;
                    return None;
                }
                let e = entries.next()?;
                txns += match e.1 {
                    Entry::Txns(t) => t.len().max(1),
                    Entry::Blank => 1,
                };
                Some(e)
            });
            with_core(&self.core, &mut self.dirty, |c| c.apply_entries(&mut chunk));
            // Each chunk's replies and events leave before the next is applied.
            crate::conn::out::flush(&mut self.dirty);
            if !more {
                return;
            }
        }
    }
}

/// The member id of the single node (a standalone ZooKeeper is server 0).
pub(crate) const STANDALONE: MemberId = MemberId(0);
