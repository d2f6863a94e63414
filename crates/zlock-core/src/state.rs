//! The replicated state machine: tree + sessions + last zxid, plus the in-memory watch
//! registry. [`State::apply`] is the apply stage: deterministic, no clock, no I/O.

use zlock_proto::records::{event_type, Id};
use zlock_proto::{ErrorCode, OpCode, Request};

use crate::ids::{LogIndex, MemberId, Zxid};
use crate::locks::{Grant, Handovers, LockIndex};
use crate::read::LongRead;
use crate::tree::{DataTree, SessionId};
use crate::txn::{Txn, TxnBody, TxnClock};
use crate::watches::{Notification, Trigger, Watches};
use crate::write::{Ctx, Undo, Write};

/// Settings that change semantics; must be identical on every replica.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// ZooKeeper's `extendedTypesEnabled`: allows TTL nodes (createTTL).
    pub extended_types: bool,
}

/// A session as the state machine knows it. Liveness (when it was last heard from) is
/// the server's business, not replicated state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    /// The member whose requests act for the session: the one that created it, then
    /// the one it last moved to ([`TxnBody::MoveSession`]). [`Session::ANY_OWNER`] for
    /// a session restored from a snapshot older than owners.
    pub owner: MemberId,
}

impl Session {
    /// Any member may act for the session (until it moves).
    pub const ANY_OWNER: MemberId = MemberId(u64::MAX);
}

/// The sessions by id, in id order: a persistent map (`imbl`) like the tree's
/// [`Nodes`](crate::tree::Nodes), so that a snapshot image copies it in O(1) however
/// many sessions there are.
pub type Sessions = imbl::OrdMap<SessionId, Session>;

/// The reply to one request: error code (0 = ok) and the encoded response record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    pub err: i32,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn ok(body: Vec<u8>) -> Reply {
        Reply { err: 0, body }
    }
    pub fn error(e: ErrorCode) -> Reply {
        Reply {
            err: e.code(),
            body: Vec::new(),
        }
    }
}

/// What [`State::read_within`] made of a read.
#[derive(Debug)]
pub enum Answer {
    /// Served in full.
    Now(Reply),
    /// Served as of now, with a walk left to finish (see [`LongRead`]).
    Later(LongRead),
}

/// An entry offered out of log order: the log and the state disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("log entry {index} does not follow the last applied entry {applied}")]
pub struct OutOfOrder {
    pub index: LogIndex,
    pub applied: LogIndex,
}

/// What applying one Txn produced.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The zxid this Txn was given.
    pub zxid: Zxid,
    /// The answer for the session that sent the request (if any).
    pub reply: Reply,
    /// Watch notifications, in the order they fire.
    pub events: Vec<Notification>,
    /// A session that this Txn created.
    pub created_session: Option<SessionId>,
    /// A session that this Txn ended (close or expiry).
    pub closed_session: Option<SessionId>,
    /// A [`TxnBody::MoveSession`]'s session, and whether it moved (false: refused, the
    /// session is gone or the password wrong).
    pub moved: Option<(SessionId, bool)>,
    /// Native lock grants this Txn made, to push after `events`.
    pub grants: Vec<Grant>,
}

#[derive(Debug, Clone, Default)]
pub struct State {
    pub tree: DataTree,
    pub sessions: Sessions,
    /// zxid of the last applied Txn: a counter of applied Txns, so it is the same on
    /// every member whatever else the log holds.
    pub zxid: Zxid,
    /// The log position of the last applied entry (Txn or not); kept beside the zxid so
    /// a restart knows where to resume the log.
    pub applied: LogIndex,
    /// The state's time (ms since the epoch): the latest time of a [`TxnClock::Leader`]
    /// Txn applied so far (0 before the first). A Txn applies at its own time or this
    /// one, whichever is later, so time never goes back, whatever the clocks of the
    /// leaders that stamped the log did. Replicated (and snapshotted): every member
    /// applies the same Txn at the same time.
    pub time_ms: i64,
    pub watches: Watches,
    pub config: Config,
    /// The native lock index (its followed paths and waiters are snapshotted).
    pub locks: LockIndex,
    /// Grants made by the Txn being applied.
    pub(crate) lock_grants: Vec<Grant>,
    /// The recent hand-overs of every lock (member-local, bounded; see
    /// [`crate::locks::Handovers`]).
    pub handovers: Handovers,
    /// What `/zookeeper/config` shows on this member (None: the node as the tree holds
    /// it, empty, as on a standalone ZooKeeper). Member-local, like [`State::watches`]:
    /// never logged, never snapshotted; see [`ConfigNode`].
    pub config_node: Option<ConfigNode>,
}

/// The ensemble's configuration as `/zookeeper/config` shows it on one member, in
/// ZooKeeper's dynamic-config format.
///
/// Why a read-time view and not the tree: ZooKeeper writes this node into each server's
/// own DataTree at startup from that server's configuration (`initConfigInZKDatabase`,
/// reset again after a snapshot from the leader, ZOOKEEPER-2819), outside its log. Doing
/// the same in zlock's tree would make members' states differ in what their snapshots
/// carry (the mtime at least), breaking the rule that every member applies the same log
/// and ends in the same state. So the tree keeps the node as [`DataTree::new`] made it
/// (read-only ACL, empty) on every member, and reads of that path (exists, getData,
/// getChildren2, getACL, multiRead) show this view instead: data and Stat. A write
/// still meets the stored node, whose ACL refuses it (NOAUTH) as ZooKeeper's does; a
/// super user's setData does change the stored node (logged, the same on every member),
/// which a member with a view keeps hiding, where ZooKeeper would show it until the
/// server restarts.
///
/// [`DataTree::new`]: crate::tree::DataTree::new
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigNode {
    /// `server.N=...` lines in id order, then `version=<hex>`, joined by `\n` (no
    /// newline after the last line), as ZooKeeper's `QuorumMaj.toString` writes it.
    pub data: Vec<u8>,
    /// The configuration's version: the zxid of the change that made it, 0 for one from
    /// the static configuration. The Stat's mzxid, as in ZooKeeper.
    pub version: i64,
    /// When this member took the configuration (ms since the epoch): the Stat's mtime.
    pub mtime: i64,
}

impl ConfigNode {
    pub const PATH: &'static str = "/zookeeper/config";

    /// The node's Stat as ZooKeeper shows it in an ensemble: its setData of the node
    /// passes version -1, which becomes the dataVersion; ctime and czxid stay 0.
    pub fn stat(&self, stored: zlock_proto::records::Stat) -> zlock_proto::records::Stat {
        zlock_proto::records::Stat {
            mzxid: self.version,
            mtime: self.mtime,
            version: -1,
            data_length: i32::try_from(self.data.len()).unwrap_or(i32::MAX),
            ..stored
        }
    }
}

impl State {
    pub fn new(config: Config) -> State {
        State {
            tree: DataTree::new(),
            sessions: Sessions::new(),
            zxid: Zxid(0),
            applied: LogIndex(0),
            time_ms: 0,
            watches: Watches::default(),
            config,
            locks: LockIndex::default(),
            lock_grants: Vec::new(),
            handovers: Handovers::default(),
            config_node: None,
        }
    }

    /// Applies the Txn at log position `index`, the next one after [`State::applied`]:
    /// [`State::enter`] and [`State::apply_txn`] for an entry that holds one Txn.
    /// Never fails for what the Txn asks: a write that is invalid against the current
    /// tree is answered with its ZooKeeper error code and changes nothing. Fails only
    /// when `index` does not follow the last applied position (the caller's log and
    /// this state disagree: continuing would spread the damage).
    pub fn apply(&mut self, index: LogIndex, txn: &Txn) -> Result<Applied, OutOfOrder> {
        self.enter(index)?;
        Ok(self.apply_txn(txn))
    }

    /// Takes log position `index`, the next one after [`State::applied`], for the entry
    /// whose Txns [`State::apply_txn`] applies next (none: a Raft leader's blank entry, a
    /// membership change; nothing changes then but [`State::applied`]). A Raft entry
    /// holds a batch of Txns; each takes its own zxid.
    pub fn enter(&mut self, index: LogIndex) -> Result<(), OutOfOrder> {
        if index != self.applied.next() {
            return Err(OutOfOrder {
                index,
                applied: self.applied,
            });
        }
        self.applied = index;
        Ok(())
    }

    /// The id of the session created by a CreateSession that `member` proposed and that
    /// took `zxid`: the member in the top byte, as ZooKeeper puts its server id there,
    /// and the zxid below it. Unique across members (the byte) and across restarts (a
    /// zxid is never given twice), and decided by the log alone.
    pub fn session_id_for(member: MemberId, zxid: Zxid) -> SessionId {
        SessionId((((member.0 & 0xff) << 56) as i64) | (zxid.0 & 0x00ff_ffff_ffff_ffff))
    }

    /// The time `txn` applies at, advancing [`State::time_ms`]: a leader's Txn applies at
    /// its time or the state's, whichever is later (a new leader whose clock is behind
    /// its predecessor's does not take time back); a Txn logged before leaders stamped time applies at its own, as it did when written.
    fn time_of(&mut self, txn: &Txn) -> i64 {
        match txn.clock {
            TxnClock::Leader => {
                self.time_ms = self.time_ms.max(txn.time_ms);
                self.time_ms
            }
            TxnClock::Proposer => txn.time_ms,
        }
    }

    /// Applies the next Txn of the entry at [`State::applied`] (see [`State::enter`]).
    pub fn apply_txn(&mut self, txn: &Txn) -> Applied {
        self.zxid = self.zxid.next();
        // The nodes' Stat fields (czxid, mzxid, pzxid) hold the wire's integer.
        let zxid = self.zxid.0;
        let mut out = Applied {
            zxid: self.zxid,
            ..Applied::default()
        };
        let time = self.time_of(txn);
        self.end_lock_delays(time);
        match &txn.body {
            TxnBody::CreateSession { passwd, timeout_ms } => {
                let id = State::session_id_for(txn.origin.member, self.zxid);
                self.sessions.insert(
                    id,
                    Session {
                        timeout_ms: *timeout_ms,
                        passwd: passwd.clone(),
                        owner: txn.origin.member,
                    },
                );
                out.created_session = Some(id);
            }
            TxnBody::CloseSession { session_id } => {
                self.close_session(*session_id, zxid, time, &mut out.events);
                out.closed_session = Some(*session_id);
            }
            TxnBody::Request { auth, request } => {
                let session = txn.origin.session;
                // A request logged just before its session ended must not act for a
                // dead session (an ephemeral node would outlive its owner).
                let Some(s) = self.sessions.get(&session) else {
                    out.reply = Reply::error(ErrorCode::SessionExpired);
                    return out;
                };
                // Nor for a session that has moved to another member since: its client
                // has gone on there, and this request would land after its newer ones.
                if s.owner != txn.origin.member && s.owner != Session::ANY_OWNER {
                    out.reply = Reply::error(ErrorCode::SessionMoved);
                    return out;
                }
                let cx = Ctx {
                    session,
                    time,
                    auth,
                    zxid,
                };
                out.reply = self.write(&cx, request, &mut out.events);
            }
            TxnBody::DeleteExpired { paths } => {
                self.delete_expired(time, paths, zxid, &mut out.events);
            }
            TxnBody::MoveSession { session_id, passwd } => {
                let moved = match self.sessions.get_mut(session_id) {
                    Some(s) if s.passwd == *passwd => {
                        s.owner = txn.origin.member;
                        true
                    }
                    _ => {
                        out.reply = Reply::error(ErrorCode::SessionExpired);
                        false
                    }
                };
                out.moved = Some((*session_id, moved));
            }
        }
        self.settle_locks();
        self.handovers.settle(time);
        out.grants = std::mem::take(&mut self.lock_grants);
        out
    }

    fn write(&mut self, cx: &Ctx<'_>, req: &Request, events: &mut Vec<Notification>) -> Reply {
        let mut none: Option<&mut Undo> = None;
        match req {
            Request::Multi(ops) => self.multi(cx, ops, events),
            Request::CloseSession => {
                self.close_session(cx.session, cx.zxid, cx.time, events);
                Reply::ok(Vec::new())
            }
            Request::Lock(r) => {
                let mut trig = Vec::new();
                let reply = self.lock(cx, r, &mut trig);
                self.fire(trig, events);
                reply
            }
            other => {
                let Some(w) = Write::of_request(other) else {
                    return Reply::error(ErrorCode::BadArguments);
                };
                let mut trig = Vec::new();
                let r = match self.write_one(cx, w, &mut none, &mut trig) {
                    Ok(written) => Reply::ok(written.into_body()),
                    Err(e) => Reply::error(e),
                };
                self.fire(trig, events);
                r
            }
        }
    }

    /// Fires the watches of `trig`, in order.
    pub(crate) fn fire(&mut self, trig: Vec<Trigger>, events: &mut Vec<Notification>) {
        for (p, ty, acl) in trig {
            self.watches
                .trigger(&p, ty, acl.as_deref().map(|a| &a[..]), events);
        }
    }

    /// Ends `session` at Txn time `time_ms`: its ephemeral nodes go (starting the
    /// lock-delays of the locks it held, see [`crate::locks`]), and its watches.
    fn close_session(
        &mut self,
        session: SessionId,
        zxid: i64,
        time_ms: i64,
        events: &mut Vec<Notification>,
    ) {
        let mut trig = Vec::new();
        let nodes = self.tree.ephemerals_of(session);
        self.hold_back_locks_of(session, time_ms, &nodes);
        for p in nodes {
            self.unlink(&p, zxid, &mut trig);
        }
        self.fire(trig, events);
        self.sessions.remove(&session);
        self.watches.remove_session(session);
    }

    /// Removes a childless node, updating its parent and firing watches.
    pub(crate) fn unlink(&mut self, p: &str, zxid: i64, trig: &mut Vec<Trigger>) {
        let Some(gone) = self.tree.remove(p) else {
            return;
        };
        self.note_handover(p, gone.kind.ephemeral_owner(), zxid);
        let parent = crate::path::parent(p);
        // Like ZooKeeper's `DataTree.deleteNode`: only pzxid moves. The internal cversion
        // counts creates, so a delete still shows in the reported Stat cversion but does
        // not advance sequential names.
        if let Some(par) = self.tree.get_mut(parent) {
            par.pzxid = zxid;
        }
        if self.watches.is_empty() {
            return;
        }
        let parent_acl = self.tree.get(parent).map(|n| n.acl.clone());
        trig.push((p.to_owned(), event_type::NODE_DELETED, Some(gone.acl)));
        trig.push((
            parent.to_owned(),
            event_type::NODE_CHILDREN_CHANGED,
            parent_acl,
        ));
    }

    fn delete_expired(
        &mut self,
        time_ms: i64,
        paths: &[String],
        zxid: i64,
        events: &mut Vec<Notification>,
    ) {
        use crate::tree::NodeKind;
        let mut trig = Vec::new();
        for p in paths {
            let Some(n) = self.tree.get(p) else { continue };
            if !n.children.is_empty() {
                continue;
            }
            let expired = match n.kind {
                NodeKind::Container => n.cversion > 0,
                NodeKind::Ttl(ttl) => time_ms.saturating_sub(n.mtime) > ttl,
                _ => false,
            };
            if expired {
                self.unlink(p, zxid, &mut trig);
            }
        }
        self.fire(trig, events);
    }

    /// Containers and TTL nodes that look removable at `now_ms`; the server proposes
    /// them in a [`Txn::DeleteExpired`], which re-checks at apply time.
    pub fn expired_candidates(&self, now_ms: i64) -> Vec<String> {
        use crate::tree::NodeKind;
        let mut v = Vec::new();
        for p in self.tree.containers().chain(self.tree.ttl_nodes()) {
            if let Some(n) = self.tree.get(p) {
                let gone = n.children.is_empty()
                    && match n.kind {
                        NodeKind::Container => n.cversion > 0,
                        NodeKind::Ttl(ttl) => now_ms.saturating_sub(n.mtime) > ttl,
                        _ => false,
                    };
                if gone {
                    v.push(p.clone());
                }
            }
        }
        v
    }

    /// Serves a read-only request for `session` (identities `auth`), registering any
    /// watch it asks for. Writes must go through [`State::apply`].
    pub fn read(&mut self, session: SessionId, auth: &[Id], req: &Request) -> Reply {
        match self.read_within(session, auth, req, usize::MAX) {
            Answer::Now(r) => r,
            Answer::Later(rest) => rest.finish(),
        }
    }

    /// Serves a read like [`State::read`], except that one that would look up more
    /// than `budget` nodes (getAllChildrenNumber of a big subtree) stops there: what it
    /// checks (the node, its ACL) is checked now, and the rest comes back as a
    /// [`LongRead`] on an O(1) copy of the tree as it is now, for the caller to finish
    /// once it has released whatever lock guards this state.
    pub fn read_within(
        &mut self,
        session: SessionId,
        auth: &[Id],
        req: &Request,
        budget: usize,
    ) -> Answer {
        match crate::read::read(self, session, auth, req, budget) {
            Ok(a) => a,
            Err(e) => Answer::Now(Reply::error(e)),
        }
    }

    /// Is this request a write (must be logged)?
    pub fn is_write(req: &Request) -> bool {
        matches!(
            req.op_code(),
            OpCode::Create
                | OpCode::Create2
                | OpCode::CreateContainer
                | OpCode::CreateTtl
                | OpCode::Delete
                | OpCode::SetData
                | OpCode::SetAcl
                | OpCode::Check
                | OpCode::Multi
                | OpCode::CloseSession
                | OpCode::Lock
        )
    }
}
