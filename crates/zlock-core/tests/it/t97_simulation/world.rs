//! The simulated server and its clients: one live [`State`], the log of every Txn
//! applied to it (with what each produced), a [`SessionTracker`] on virtual time, and
//! the clients' side of each session. Every write goes through [`World::apply`], which
//! runs the lock checks after it; session liveness (check 4) is [`World::expire`].

use std::collections::{BTreeMap, HashMap, VecDeque};

use zlock_core::locks::Grant;
use zlock_core::sessions::{SessionTracker, Time};
use zlock_core::watches::Notification;
use zlock_core::{Config, LogIndex, Origin, Reply, SessionId, State, Txn, TxnBody};
use zlock_proto::records::{Id, LockResponse};
use zlock_proto::{Reader, Record, Request};

use super::oracle::Oracle;
use super::rng::Rng;
use crate::harness::{self, flags, T0};

/// How many recent operations a failure report shows (`ZLOCK_SIM_TRACE` overrides).
const TRACE: usize = 40;

/// The client of one live session.
#[derive(Debug, Clone)]
pub struct Client {
    pub timeout_ms: u64,
    /// The client has died (or given up): it sends nothing more, not even pings, so
    /// the tracker must expire it.
    pub silent: bool,
}

/// One applied log entry and what it produced live.
pub struct Entry {
    pub txn: Txn,
    pub reply: Reply,
    pub events: Vec<Notification>,
    pub grants: Vec<Grant>,
}

/// Counts for the per-seed coverage line.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub sessions: u64,
    pub expired: u64,
    pub self_closed: u64,
    pub snapshots: u64,
    pub restarts: u64,
    pub resumes_after_restart: u64,
    pub failed_multis: u64,
    pub max_waiting: usize,
}

pub struct World {
    pub rng: Rng,
    pub st: State,
    /// Virtual time in ms; a Txn carries `T0 + now`.
    pub now: u64,
    pub tracker: SessionTracker,
    /// When each tracked session was last added, touched or restarted: what the
    /// tracker must respect (check 4).
    pub last_seen: HashMap<SessionId, u64>,
    /// The clients of the sessions the state holds (closed ones are dropped).
    pub clients: BTreeMap<SessionId, Client>,
    /// Sessions already closed, for requests logged after their end.
    pub dead: Vec<SessionId>,
    /// Sessions the tracker reported whose CloseSession is not applied yet.
    pub pending_close: Vec<SessionId>,
    pub log: Vec<Entry>,
    /// The latest snapshot: the log length it covers and its encoding.
    pub snap: Option<(usize, Vec<u8>)>,
    pub oracle: Oracle,
    /// How many live sessions this seed keeps around.
    pub target_sessions: usize,
    pub trace: VecDeque<String>,
    pub trace_len: usize,
    pub stats: Stats,
    pub step: usize,
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let tick = *rng.pick(&[50, 100, 250, 500]).unwrap_or(&100);
        let target_sessions = rng.range(20, 50) as usize;
        World {
            rng,
            st: State::new(Config::default()),
            now: 0,
            tracker: SessionTracker::new(tick),
            last_seen: HashMap::new(),
            clients: BTreeMap::new(),
            dead: Vec::new(),
            pending_close: Vec::new(),
            log: Vec::new(),
            snap: None,
            oracle: Oracle::default(),
            target_sessions,
            trace: VecDeque::new(),
            trace_len: std::env::var("ZLOCK_SIM_TRACE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(TRACE),
            stats: Stats::default(),
            step: 0,
        }
    }

    pub fn note(&mut self, what: String) {
        if self.trace.len() >= self.trace_len {
            self.trace.pop_front();
        }
        self.trace
            .push_back(format!("#{} t={} {what}", self.step, self.now));
    }

    /// Applies `txn` at the next log position, logs it, and runs the lock checks. For
    /// a native lock request, `lock` names the lock index, prefix and mode so its
    /// reply is folded in before the checks.
    pub fn apply(&mut self, txn: Txn, lock: Option<(usize, &str, i32)>) -> Result<Reply, String> {
        let index = self.st.applied.next();
        let a = self.st.apply(index, &txn).map_err(|e| e.to_string())?;
        if let (Some((li, prefix, mode)), 0) = (lock, a.reply.err) {
            let r = LockResponse::decode(&mut Reader::new(&a.reply.body))
                .map_err(|e| format!("lock reply: {e}"))?;
            self.oracle
                .on_lock_reply(&self.st.tree, txn.origin.session, li, (prefix, mode), &r)?;
        }
        for g in &a.grants {
            self.oracle.on_grant(&self.st.tree, g)?;
        }
        self.oracle.reconcile(&self.st.tree);
        self.oracle.check(&self.st.tree)?;
        self.stats.max_waiting = self.stats.max_waiting.max(self.st.locks.waiting());
        self.log.push(Entry {
            txn,
            reply: a.reply.clone(),
            events: a.events,
            grants: a.grants,
        });
        Ok(a.reply)
    }

    /// A client's write, at the current virtual time.
    pub fn request(&mut self, s: SessionId, request: Request) -> Result<Reply, String> {
        self.apply(self.txn(s, request), None)
    }

    pub fn txn(&self, s: SessionId, request: Request) -> Txn {
        Txn::request(
            Origin {
                session: s,
                ..Origin::default()
            },
            self.time_ms(),
            vec![harness::ip()].into(),
            request,
        )
    }

    pub fn time_ms(&self) -> i64 {
        T0 + self.now as i64
    }

    /// A client about to send: touches its session as the server does for every
    /// request. False if the tracker has already given it up (the client is answered
    /// SessionExpired and stops).
    pub fn touch(&mut self, s: SessionId) -> bool {
        if self.tracker.touch(s, Time(self.now)) {
            self.last_seen.insert(s, self.now);
            return true;
        }
        if let Some(c) = self.clients.get_mut(&s) {
            c.silent = true;
        }
        false
    }

    /// A random client that is still talking, touched; None if there is none (or it
    /// just learned its session expired).
    pub fn active_client(&mut self) -> Option<SessionId> {
        let live: Vec<SessionId> = self
            .clients
            .iter()
            .filter(|(_, c)| !c.silent)
            .map(|(s, _)| *s)
            .collect();
        let s = *self.rng.pick(&live)?;
        self.touch(s).then_some(s)
    }

    pub fn create_session(&mut self) -> Result<SessionId, String> {
        let timeout_ms = *self
            .rng
            .pick(&[1_500u64, 3_000, 6_000, 10_000])
            .unwrap_or(&3_000);
        let txn = Txn {
            origin: Origin::default(),
            time_ms: self.time_ms(),
            clock: zlock_core::TxnClock::Leader,
            body: TxnBody::CreateSession {
                passwd: vec![7; 16],
                timeout_ms: timeout_ms as i32,
            },
        };
        let index = self.st.applied.next();
        let a = self.st.apply(index, &txn).map_err(|e| e.to_string())?;
        let id = a
            .created_session
            .ok_or("CreateSession created no session")?;
        if self.clients.contains_key(&id) || self.dead.contains(&id) {
            return Err(format!("session id {id:#x} given twice"));
        }
        self.log.push(Entry {
            txn,
            reply: a.reply,
            events: a.events,
            grants: a.grants,
        });
        self.tracker.add(id, timeout_ms, Time(self.now));
        self.last_seen.insert(id, self.now);
        self.clients.insert(
            id,
            Client {
                timeout_ms,
                silent: false,
            },
        );
        self.stats.sessions += 1;
        self.note(format!("session {id:#x} timeout {timeout_ms}"));
        Ok(id)
    }

    /// Ends session `id` with a CloseSession Txn: its own (`by_client`) or the
    /// server's expiry.
    pub fn close_session(&mut self, id: SessionId, by_client: bool) -> Result<(), String> {
        let origin = Origin {
            session: if by_client { id } else { SessionId::NONE },
            ..Origin::default()
        };
        let txn = if by_client && self.rng.chance(50) {
            Txn::request(origin, self.time_ms(), vec![].into(), Request::CloseSession)
        } else {
            Txn {
                origin,
                time_ms: self.time_ms(),
                clock: zlock_core::TxnClock::Leader,
                body: TxnBody::CloseSession { session_id: id },
            }
        };
        self.apply(txn, None)?;
        if self.st.sessions.contains_key(&id) {
            return Err(format!("session {id:#x} survived its CloseSession"));
        }
        self.tracker.remove(id);
        self.last_seen.remove(&id);
        self.clients.remove(&id);
        self.dead.push(id);
        self.note(format!("closed {id:#x} (by client: {by_client})"));
        Ok(())
    }

    /// The server's expiry check, and check 4: a reported session has been silent
    /// for longer than its timeout; one that has been silent for a tick past its
    /// timeout is reported (the tracker's documented bound).
    pub fn expire(&mut self) -> Result<(), String> {
        let now = self.now;
        for id in self.tracker.expired(Time(now)) {
            let last = self
                .last_seen
                .get(&id)
                .copied()
                .ok_or("expired unknown session")?;
            let timeout = self.clients.get(&id).map_or(0, |c| c.timeout_ms);
            if now <= last + timeout {
                return Err(format!(
                    "session {id:#x} expired at {now}, last seen {last}, timeout {timeout}"
                ));
            }
            self.pending_close.push(id);
            self.note(format!("tracker reports {id:#x} (last seen {last})"));
        }
        let tick = self.tracker.tick_ms();
        for (&id, &last) in &self.last_seen {
            let timeout = self.tracker.timeout_ms(id).unwrap_or(0);
            if !self.tracker.is_expiring(id) && now >= last + timeout + tick {
                return Err(format!(
                    "session {id:#x} last seen {last} with timeout {timeout} not reported at {now}"
                ));
            }
        }
        Ok(())
    }

    /// Applies the CloseSession of some reported sessions (the rest stay pending a
    /// while, so requests can still be logged for a session the tracker gave up).
    pub fn close_expired(&mut self) -> Result<(), String> {
        let pending = std::mem::take(&mut self.pending_close);
        for id in pending {
            if self.rng.chance(60) {
                self.close_session(id, false)?;
                self.stats.expired += 1;
            } else {
                self.pending_close.push(id);
            }
        }
        Ok(())
    }

    /// Clients ping a third of their timeout after they last sent anything.
    pub fn heartbeats(&mut self) {
        let due: Vec<SessionId> = self
            .clients
            .iter()
            .filter(|(s, c)| {
                !c.silent
                    && self.now >= self.last_seen.get(s).copied().unwrap_or(0) + c.timeout_ms / 3
            })
            .map(|(s, _)| *s)
            .collect();
        for s in due {
            self.touch(s);
        }
    }

    /// Sets up the fixed parents of the data and lock areas.
    pub fn init(&mut self) -> Result<(), String> {
        let s = self.create_session()?;
        for p in ["/d", "/d/a", "/d/b", "/locks"] {
            let r = self.request(s, harness::create2(p, b"", flags::PERSISTENT))?;
            if r.err != 0 {
                return Err(format!("setup create {p}: {}", r.err));
            }
        }
        Ok(())
    }

    /// Structural checks after a step: the clients are exactly the state's sessions,
    /// and now and then (they walk the whole tree) the tree invariants.
    pub fn check_step(&self) -> Result<(), String> {
        if self.step.is_multiple_of(25) {
            harness::check_invariants(&self.st);
        }
        if !self.clients.keys().eq(self.st.sessions.keys()) {
            return Err("clients and the state's sessions differ".into());
        }
        Ok(())
    }

    pub fn auth() -> Vec<Id> {
        vec![harness::ip()]
    }
}

/// What one replayed entry produced: reply, events, grants.
pub type Produced = (Reply, Vec<Notification>, Vec<Grant>);

/// Replays `entries` (which start at log position `from + 1`) into `st`, returning
/// what each produced.
pub fn replay(st: &mut State, from: usize, entries: &[Entry]) -> Result<Vec<Produced>, String> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let a = st
            .apply(LogIndex((from + i + 1) as u64), &e.txn)
            .map_err(|e| format!("replay: {e}"))?;
        out.push((a.reply, a.events, a.grants));
    }
    Ok(out)
}
