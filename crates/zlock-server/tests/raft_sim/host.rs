//! A member's state-machine host: the real `zlock_core::State`, behind zlock's Raft
//! state machine (`commit::raft::sm`), so lock grants and fencing tokens are the core's
//! own. At every applied point it checks lock exclusion and rising fencing tokens, that
//! the position holds what every other member applied there, and that its log entry
//! was already durable on a majority of the voters' disks; at each lock-delay's end and
//! each TTL node's expiry, that it lasted long enough in true time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::FutureExt as _;
use openraft::storage::RaftLogReader as _;
use zlock_core::{Applied, Config, LogIndex, SessionId, State, Txn, TxnBody};
use zlock_proto::jute::Reader;
use zlock_proto::records::LockResponse;
use zlock_proto::{Record, Request};
use zlock_server::commit::raft::log::TailReader;
use zlock_server::commit::raft::types::Entry as LogEntry;
use zlock_server::commit::{Apply, Entry, SnapshotJob, Snapshots};

use crate::world::{lock as wlock, Fact, Shared};

/// One applied Txn (or entry without one): its log position, and its place among the
/// entry's Txns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub index: u64,
    pub pos: usize,
    pub txn: Option<Txn>,
    pub fact: Fact,
}

/// A lock holder: told it holds (granted in its reply, or pushed a grant), its node
/// still there.
#[derive(Debug, Clone)]
struct Holder {
    session: SessionId,
    node: String,
}

pub struct Inner {
    pub member: u64,
    pub state: State,
    /// This incarnation's Raft log (its in-memory tail): the entry, with its log id,
    /// behind each position the host applies.
    log: TailReader,
    /// Everything applied by this incarnation (a restart applies from the start).
    pub history: Vec<Rec>,
    /// Replies by (session, xid), and sessions created by (member, xid): what a client
    /// learns from the member it wrote to.
    pub replies: BTreeMap<(i64, i32), zlock_core::Reply>,
    pub created: BTreeMap<(u64, i32), SessionId>,
    holders: BTreeMap<String, Vec<Holder>>,
    tokens: BTreeMap<String, i64>,
    /// The lock-delays running, by lock path: the origin of the Txn that started each
    /// and its length (ms of Txn time).
    delays: BTreeMap<String, (Key, i64)>,
    /// Lock-delays ended by a grant since the last check: lock path, length, the
    /// origins of the Txns that started it and that granted the lock.
    ended: Vec<(String, i64, Key, Key)>,
    /// The TTL nodes this incarnation saw made: each one's TTL (ms) and the origin of
    /// the Txn that last set its mtime (its create or a setData).
    ttls: BTreeMap<String, (Key, i64)>,
    /// TTL nodes removed as expired since the last check: path, TTL, the origins of
    /// the Txn that last set its mtime and of the one that removed it.
    expired: Vec<(String, i64, Key, Key)>,
}

/// Every member's state machine runs with TTL nodes allowed, so the simulation's
/// clients can make them.
fn config() -> Config {
    Config {
        extended_types: true,
    }
}

/// A Txn's origin as `(member, session, xid)`.
type Key = (u64, i64, i32);

fn key(t: &Txn) -> Key {
    (t.origin.member.0, t.origin.session.0, t.origin.xid)
}

/// The end of each running lock-delay, by lock path.
fn lock_delays(state: &State) -> BTreeMap<String, i64> {
    let image = state.locks.image();
    image
        .locks
        .into_iter()
        .filter_map(|l| Some((l.path.to_string(), l.held_until?)))
        .collect()
}

#[derive(Clone)]
pub struct SimHost {
    pub inner: Arc<Mutex<Inner>>,
    world: Shared,
}

pub fn lock(h: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimHost {
    pub fn new(member: u64, world: Shared, log: TailReader) -> SimHost {
        SimHost {
            inner: Arc::new(Mutex::new(Inner {
                member,
                state: State::new(config()),
                log,
                history: Vec::new(),
                replies: BTreeMap::new(),
                created: BTreeMap::new(),
                holders: BTreeMap::new(),
                tokens: BTreeMap::new(),
                delays: BTreeMap::new(),
                ended: Vec::new(),
                ttls: BTreeMap::new(),
                expired: Vec::new(),
            })),
            world,
        }
    }
}

fn outcome(a: &Applied) -> String {
    format!(
        "zxid={} err={} body={:?} grants={:?}",
        a.zxid.0, a.reply.err, a.reply.body, a.grants
    )
}

impl Inner {
    /// The log entry at `index`, as this member's log holds it (openraft applies from
    /// there; the tail is behind a short lock, so its reader is ready at once).
    fn logged(&mut self, index: u64) -> Result<LogEntry, String> {
        let m = self.member;
        match self.log.try_get_log_entries(index..=index).now_or_never() {
            Some(Ok(mut v)) if v.len() == 1 => Ok(v.remove(0)),
            Some(Ok(_)) => Err(format!("member {m} applied {index}, not in its log")),
            Some(Err(e)) => Err(format!("member {m} applied {index}: its log: {e}")),
            None => Err(format!(
                "member {m} applied {index}: its log did not answer"
            )),
        }
    }

    /// Applies one entry and checks the locks after each of its Txns; records what it
    /// applied in `out` and any violation in `bad`.
    fn apply_entry(
        &mut self,
        index: LogIndex,
        entry: Entry<'_>,
        bad: &mut Vec<String>,
        out: &mut Vec<Rec>,
    ) {
        let m = self.member;
        if let Err(e) = self.state.enter(index) {
            bad.push(format!("member {m}: {e}"));
        }
        let Entry::Txns(txns) = entry else {
            out.push(Rec {
                index: index.0,
                pos: 0,
                txn: None,
                fact: Fact {
                    txn: Vec::new(),
                    outcome: String::new(),
                },
            });
            return;
        };
        for (pos, t) in txns.iter().enumerate() {
            let before = lock_delays(&self.state);
            // The TTL nodes a DeleteExpired names that exist before it.
            let named: Vec<String> = match &t.body {
                TxnBody::DeleteExpired { paths } => paths
                    .iter()
                    .filter(|p| self.state.tree.contains(p))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            };
            let a = self.state.apply_txn(t);
            self.track_ttls(t, &a, named);
            // A lock-delay that starts here (one already running, or running in the
            // snapshot this member started from, is not one this member saw start).
            for (lock, until) in lock_delays(&self.state) {
                if !before.contains_key(&lock) {
                    let length = until - self.state.time_ms;
                    self.delays.insert(lock, (key(t), length));
                }
            }
            if let TxnBody::CreateSession { .. } = t.body {
                if let Some(s) = a.created_session {
                    self.created.insert((t.origin.member.0, t.origin.xid), s);
                }
            }
            if t.origin.session.0 != 0 {
                self.replies
                    .insert((t.origin.session.0, t.origin.xid), a.reply.clone());
            }
            self.check_locks(index.0, t, &a, bad);
            out.push(Rec {
                index: index.0,
                pos,
                txn: Some(t.clone()),
                fact: Fact {
                    txn: t.to_bytes(),
                    outcome: outcome(&a),
                },
            });
        }
    }

    /// Follows the TTL nodes: made or touched by `t`, or removed by it as expired
    /// (`named`: the paths it named that existed before it).
    fn track_ttls(&mut self, t: &Txn, a: &Applied, named: Vec<String>) {
        match &t.body {
            TxnBody::Request {
                request: Request::CreateTtl(r),
                ..
            } if a.reply.err == 0 => {
                self.ttls.insert(r.path.clone(), (key(t), r.ttl));
            }
            TxnBody::Request {
                request: Request::SetData(r),
                ..
            } if a.reply.err == 0 => {
                if let Some(at) = self.ttls.get_mut(&r.path) {
                    at.0 = key(t);
                }
            }
            TxnBody::DeleteExpired { .. } => {
                for path in named {
                    if self.state.tree.contains(&path) {
                        continue;
                    }
                    if let Some((start, ttl)) = self.ttls.remove(&path) {
                        self.expired.push((path, ttl, start, key(t)));
                    }
                }
            }
            _ => {}
        }
    }

    /// Lock exclusion and rising fencing tokens, after the Txn at `index`.
    fn check_locks(&mut self, index: u64, t: &Txn, a: &Applied, bad: &mut Vec<String>) {
        let m = self.member;
        let mut told: Vec<(String, Holder, i64)> = Vec::new();
        if let TxnBody::Request {
            request: Request::Lock(r),
            ..
        } = &t.body
        {
            if a.reply.err == 0 {
                match LockResponse::decode(&mut Reader::new(&a.reply.body)) {
                    Ok(resp) if resp.granted => told.push((
                        r.path.clone(),
                        Holder {
                            session: t.origin.session,
                            node: resp.node,
                        },
                        resp.czxid,
                    )),
                    Ok(_) => {}
                    Err(e) => bad.push(format!("member {m} at {index}: lock reply: {e}")),
                }
            }
        }
        for (session, g) in &a.grants {
            let lock = zlock_core::path::parent(&g.node).to_string();
            told.push((
                lock,
                Holder {
                    session: *session,
                    node: g.node.clone(),
                },
                g.czxid,
            ));
        }
        for (lock, h, token) in told {
            if let Some((start, length)) = self.delays.remove(&lock) {
                self.ended.push((lock.clone(), length, start, key(t)));
            }
            let holders = self.holders.entry(lock.clone()).or_default();
            if holders.iter().any(|x| x.node == h.node) {
                continue;
            }
            let last = self.tokens.get(&lock).copied().unwrap_or(0);
            if token <= last {
                bad.push(format!(
                    "member {m} at {index}: fencing token {token} of {} on {lock} after {last}",
                    h.node
                ));
            }
            self.tokens.insert(lock, token);
            holders.push(h);
        }
        let tree = &self.state.tree;
        for (lock, holders) in self.holders.iter_mut() {
            holders.retain(|h| tree.contains(&h.node));
            if holders.len() > 1 {
                let who: Vec<String> = holders
                    .iter()
                    .map(|h| format!("session {:#x} by {}", h.session.0, h.node))
                    .collect();
                bad.push(format!(
                    "member {m} at {index}: {} hold {lock} at once: {who:?}",
                    holders.len()
                ));
            }
        }
    }
}

impl Apply for SimHost {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        let mut h = lock(&self.inner);
        let mut bad = Vec::new();
        let mut recs = Vec::new();
        let mut logged = Vec::new();
        for (index, entry) in entries {
            match h.logged(index.0) {
                Ok(e) => logged.push(e),
                Err(e) => bad.push(e),
            }
            h.apply_entry(index, entry, &mut bad, &mut recs);
        }
        h.history.extend(recs.iter().cloned());
        let member = h.member;
        let ended = std::mem::take(&mut h.ended);
        let expired = std::mem::take(&mut h.expired);
        drop(h);
        let mut w = wlock(&self.world);
        // Nothing happens to a disk between the apply and this check: one thread.
        for e in &logged {
            w.check_durable(member, e);
        }
        for (lock, length, start, grant) in ended {
            w.check_lasted("lock-delay", &format!("on {lock}"), length, start, grant);
        }
        for (path, ttl, touched, removed) in expired {
            w.check_lasted("TTL", &format!("of {path}"), ttl, touched, removed);
        }
        for rec in recs {
            w.event(format!(
                "member {member} applied {}: {}",
                rec.index, rec.fact.outcome
            ));
            match w.applied.get(&(rec.index, rec.pos)) {
                None => {
                    w.applied.insert((rec.index, rec.pos), rec.fact);
                }
                Some(f) if *f == rec.fact => {}
                Some(f) => {
                    let f = f.clone();
                    let origin = rec.txn.as_ref().map(|t| t.origin);
                    w.violation(format!(
                        "member {member} applied {origin:?} ({}) at {}, another member a Txn \
                         of {} bytes ({})",
                        rec.fact.outcome,
                        rec.index,
                        f.txn.len(),
                        f.outcome
                    ));
                }
            }
        }
        for b in bad {
            w.violation(b);
        }
    }
}

impl Snapshots for SimHost {
    // The simulation runs with snapshots off (see the crate doc); these are what a
    // host must offer all the same.
    fn image(&mut self) -> SnapshotJob {
        let mut bytes = Vec::new();
        zlock_core::snapshot::encode(&lock(&self.inner).state, &mut bytes);
        Box::new(move |w| w.write_all(&bytes))
    }

    fn install(
        &mut self,
        index: LogIndex,
        payload: &[u8],
    ) -> Result<(), zlock_server::commit::InstallError> {
        let mut state =
            zlock_core::snapshot::decode(payload, config()).map_err(|e| e.to_string())?;
        state.applied = index;
        let mut h = lock(&self.inner);
        h.state = state;
        Ok(())
    }
}
