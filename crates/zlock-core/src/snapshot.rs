//! The state's snapshot encoding (the payload inside a snapshot file).
//!
//! Version 7, jute primitives:
//! `int version (=7) | long zxid | long time_ms | int session count | sessions |
//!  long node count | nodes | int lock count | locks`
//! - time_ms: the state's time ([`State::time_ms`])
//! - session: `long id | int timeout_ms | buffer passwd | long owner` (the member whose
//!   requests act for it; -1: any)
//! - node, in the order of the znode map ([`Nodes`]: by a hash of the path):
//!   `ustring path | buffer data (-1 = null) | vector<ACL> acl | byte kind | long kind_arg |
//!    long czxid | long mzxid | long ctime | long mtime | int version | int cversion |
//!    int aversion | long pzxid | int child count | ustring child names`
//!   (each node but `/` is named by its parent; decoding checks that the counts add up)
//!   kind: 0 persistent, 1 ephemeral (arg = owner session), 2 container, 3 TTL (arg = ms).
//! - lock, one per lock path the native lock index follows, in path order:
//!   `ustring path | int waiter count | waiters | long held_until (-1: no lock-delay
//!    running) | int delay count | delays`
//! - waiter, in queue order: `ustring node name (under the lock path) | long session |
//!   byte mode | int leases`; mode: 0 exclusive, 1 read, 2 semaphore (leases >= 1; the
//!   field is 1 for the others).
//! - delay, in queue order, for each entry whose request asked for a lock-delay:
//!   `ustring node name | long delay_ms`
//!
//! The lock section keeps only what the log decided and the tree does not show: which
//! paths are followed, which entries have a native waiter or a lock-delay, and which
//! paths a lock-delay holds back (see [`crate::locks`]).
//! The entries are the lock paths' children; decoding follows each path again, which
//! rebuilds its queue from the tree, and puts the waiters back, so the restored state
//! grants exactly what the state that was saved would have.
//!
//! Version 6 is version 7 without the state's time (decoded as 0: no Txn stamped by a
//! leader applied yet, which is what every older build wrote; see
//! [`crate::txn::TxnClock`]).
//! Version 5 is version 6 without the lock-delays (none running, none asked for).
//! Version 4 is version 5 with the nodes parents before children (depth-first from `/`)
//! and without their child names: decoding links each node into its parent, which
//! cost a look-up per node when writing and when reading.
//! Version 3 is version 4 without the sessions' owners (decoded as "any member").
//! Version 2 is version 3 without the lock section; it decodes with no lock path
//! followed and no waiter (what every restart gave before version 3: a waiter finds its
//! node again with a RESUME request).
//!
//! Watches are not part of a snapshot: clients re-register them on reconnect.

use thiserror::Error;
use zlock_proto::jute::{Field, Reader, Writer};
use zlock_proto::records::Acl;
use zlock_proto::DecodeError;

use crate::ids::MemberId;
use crate::locks::{mode_of_parts, mode_parts, LockImage, RestoreError, SavedLock, SavedWaiter};
use crate::path;
use crate::state::{Config, Session, Sessions, State};
use std::sync::Arc;

use crate::tree::{DataTree, Node, NodeKind, Nodes, SessionId};

/// 1: first format. 2: node data may be null (buffer length -1); cversion holds the
/// parent's create count (the Stat's cversion is derived from it). 3: the native lock
/// index's followed paths and waiters after the nodes. 4: each session's owner. 5: the
/// nodes in the map's order, each with its children's names (before: parents before
/// children, in a walk of the tree), so that neither writing nor reading looks a node up.
/// 6: the lock-delays of the lock section. 7: the state's time.
pub const SNAPSHOT_VERSION: i32 = 7;

/// The oldest version [`decode`] still reads.
const OLDEST_VERSION: i32 = 2;

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("unsupported snapshot version {0}")]
    Version(i32),
    #[error("malformed snapshot: {0}")]
    Decode(#[from] DecodeError),
    #[error("snapshot node {0} has no parent")]
    Orphan(String),
    #[error("snapshot has {nodes} nodes but names {children} children and {distinct} paths")]
    Children {
        nodes: i64,
        children: i64,
        distinct: usize,
    },
    #[error("snapshot follows lock path {0}, which is not in its tree")]
    NoLockPath(String),
    #[error("snapshot has a native waiter on {0}, which is no entry of its lock path")]
    NoLockEntry(String),
}

impl From<RestoreError> for SnapshotError {
    fn from(e: RestoreError) -> Self {
        match e {
            RestoreError::NoLockPath(p) => SnapshotError::NoLockPath(p),
            RestoreError::NoEntry(p) => SnapshotError::NoLockEntry(p),
        }
    }
}

/// What a snapshot holds: the replicated part of the state, as of one log position, and
/// nothing the encoding does not read (the tree's indexes are rebuilt by [`decode`]).
/// Taking one is O(1) in the number of znodes and sessions (both are persistent maps
/// shared with the live state, see [`Nodes`]) plus a copy of the lock waiters, so the
/// server takes it under its lock and a background thread encodes it while the state
/// moves on.
#[derive(Debug, Clone)]
pub struct Image {
    /// The log position the image was taken at (it names the snapshot file).
    pub applied: crate::ids::LogIndex,
    pub zxid: crate::ids::Zxid,
    /// [`State::time_ms`].
    pub time_ms: i64,
    pub sessions: Sessions,
    pub nodes: Nodes,
    /// A copy of the lock index's followed paths and waiters (one entry per waiter, not
    /// per node).
    pub locks: LockImage,
}

impl Image {
    pub fn of(state: &State) -> Image {
        Image {
            applied: state.applied,
            zxid: state.zxid,
            time_ms: state.time_ms,
            sessions: state.sessions.clone(),
            nodes: state.tree.nodes().clone(),
            locks: state.locks.image(),
        }
    }
}

/// Encodes the replicated part of `state` into `out`.
pub fn encode(state: &State, out: &mut Vec<u8>) {
    let locks = state.locks.image();
    // Writing into a Vec cannot fail.
    let _ = write_parts(
        SNAPSHOT_VERSION,
        state.tree.nodes(),
        &state.sessions,
        (state.zxid, state.time_ms),
        &locks,
        out,
    );
}

/// Streams `image` to `w` in chunks (a snapshot of a million znodes is hundreds of MB;
/// it never needs to be in memory whole).
pub fn write_image(image: &Image, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    write_parts(
        SNAPSHOT_VERSION,
        &image.nodes,
        &image.sessions,
        (image.zxid, image.time_ms),
        &image.locks,
        w,
    )
}

const CHUNK: usize = 256 * 1024;

/// Writes format `version` (the current one, or an older one for tests of decoding).
fn write_parts(
    version: i32,
    tree: &Nodes,
    sessions: &Sessions,
    (zxid, time_ms): (crate::ids::Zxid, i64),
    locks: &LockImage,
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut out: Vec<u8> = Vec::with_capacity(CHUNK + 4096);
    out.write_i32(version);
    out.write_i64(zxid.0);
    if version >= 7 {
        out.write_i64(time_ms);
    }
    out.write_i32(sessions.len() as i32);
    for (id, s) in sessions {
        out.write_i64(id.0);
        out.write_i32(s.timeout_ms);
        out.write_buffer(&s.passwd);
        if version >= 4 {
            out.write_i64(s.owner.0 as i64);
        }
        if out.len() >= CHUNK {
            w.write_all(&out)?;
            out.clear();
        }
    }
    out.write_i64(tree.len() as i64);
    if version >= 5 {
        for (p, n) in tree.iter() {
            write_node(&mut out, p, n);
            out.write_i32(n.children.len() as i32);
            for c in &n.children {
                out.write_string(c);
            }
            if out.len() >= CHUNK {
                w.write_all(&out)?;
                out.clear();
            }
        }
    } else {
        // Parents before children, as the older formats' readers link each node into
        // its parent.
        let mut stack = vec!["/".to_string()];
        while let Some(p) = stack.pop() {
            let Some(n) = tree.get(&p) else {
                continue;
            };
            write_node(&mut out, &p, n);
            for c in n.children.iter().rev() {
                stack.push(path::join(&p, c));
            }
            if out.len() >= CHUNK {
                w.write_all(&out)?;
                out.clear();
            }
        }
    }
    if version < 3 {
        return w.write_all(&out);
    }
    out.write_i32(locks.locks.len() as i32);
    for lock in &locks.locks {
        out.write_string(&lock.path);
        out.write_i32(lock.waiters.len() as i32);
        for wt in &lock.waiters {
            let (mode, leases) = mode_parts(wt.mode);
            out.write_string(&wt.name);
            out.write_i64(wt.session.0);
            out.push(mode);
            out.write_i32(i32::try_from(leases).unwrap_or(i32::MAX));
        }
        if version >= 6 {
            out.write_i64(lock.held_until.unwrap_or(-1));
            out.write_i32(lock.delays.len() as i32);
            for (name, delay_ms) in &lock.delays {
                out.write_string(name);
                out.write_i64(*delay_ms);
            }
        }
        if out.len() >= CHUNK {
            w.write_all(&out)?;
            out.clear();
        }
    }
    w.write_all(&out)
}

/// One node's record, up to its children.
fn write_node(out: &mut Vec<u8>, p: &str, n: &Node) {
    out.write_string(p);
    out.write_opt_buffer(n.data.as_deref());
    n.acl.as_ref().put(out);
    let (kind, arg) = match n.kind {
        NodeKind::Persistent => (0u8, 0i64),
        NodeKind::Ephemeral(s) => (1, s.0),
        NodeKind::Container => (2, 0),
        NodeKind::Ttl(t) => (3, t),
    };
    out.push(kind);
    out.write_i64(arg);
    out.write_i64(n.czxid);
    out.write_i64(n.mzxid);
    out.write_i64(n.ctime);
    out.write_i64(n.mtime);
    out.write_i32(n.version);
    out.write_i32(n.cversion);
    out.write_i32(n.aversion);
    out.write_i64(n.pzxid);
}

/// Decodes a snapshot payload into a state (with no watches).
pub fn decode(bytes: &[u8], config: Config) -> Result<State, SnapshotError> {
    let mut r = Reader::new(bytes);
    let v = r.read_i32()?;
    if !(OLDEST_VERSION..=SNAPSHOT_VERSION).contains(&v) {
        return Err(SnapshotError::Version(v));
    }
    let mut st = State::new(config);
    st.tree = DataTree::empty();
    st.zxid = crate::ids::Zxid(r.read_i64()?);
    if v >= 7 {
        st.time_ms = r.read_i64()?;
    }
    let ns = r.read_i32()?;
    for _ in 0..ns.max(0) {
        let id = SessionId(r.read_i64()?);
        let timeout_ms = r.read_i32()?;
        let passwd = r.read_buffer()?;
        let owner = if v >= 4 {
            MemberId(r.read_i64()? as u64)
        } else {
            Session::ANY_OWNER
        };
        st.sessions.insert(
            id,
            Session {
                timeout_ms,
                passwd,
                owner,
            },
        );
    }
    let nn = r.read_i64()?;
    let mut children = 0i64;
    for _ in 0..nn.max(0) {
        let p = r.read_string()?;
        let data = r.read_opt_buffer()?;
        let acl = Vec::<Acl>::get(&mut r)?;
        let kind = match (r.read_u8()?, r.read_i64()?) {
            (0, _) => NodeKind::Persistent,
            (1, s) => NodeKind::Ephemeral(SessionId(s)),
            (2, _) => NodeKind::Container,
            (3, t) => NodeKind::Ttl(t),
            (k, _) => {
                return Err(DecodeError::InvalidValue {
                    field: "node kind",
                    value: i64::from(k),
                }
                .into())
            }
        };
        let acl = st.tree.intern_acl(acl);
        let mut n = Node::new(data, acl, kind, 0, 0);
        n.czxid = r.read_i64()?;
        n.mzxid = r.read_i64()?;
        n.ctime = r.read_i64()?;
        n.mtime = r.read_i64()?;
        n.version = r.read_i32()?;
        n.cversion = r.read_i32()?;
        n.aversion = r.read_i32()?;
        n.pzxid = r.read_i64()?;
        if v >= 5 {
            let nc = r.read_i32()?;
            for _ in 0..nc.max(0) {
                n.children.insert(r.read_string()?.into());
            }
            children += i64::from(nc.max(0));
            st.tree.insert_linked(&p, n);
        } else {
            if p != "/" && !st.tree.contains(path::parent(&p)) {
                return Err(SnapshotError::Orphan(p));
            }
            st.tree.insert(&p, n);
        }
    }
    // Each node but `/` is the child of one other: a count that does not add up is a
    // snapshot written wrong (the file's checksum guards against the disk).
    if v >= 5 && (children != (nn - 1).max(0) || st.tree.len() as i64 != nn.max(0)) {
        return Err(SnapshotError::Children {
            nodes: nn,
            children,
            distinct: st.tree.len(),
        });
    }
    if v >= 3 {
        let locks = read_locks(&mut r, v)?;
        st.restore_locks(locks)?;
    }
    Ok(st)
}

fn read_locks(r: &mut Reader<'_>, version: i32) -> Result<LockImage, DecodeError> {
    let n = r.read_i32()?;
    let mut locks = Vec::new();
    for _ in 0..n.max(0) {
        let lock: Arc<str> = r.read_string()?.into();
        let nw = r.read_i32()?;
        let mut waiters = Vec::new();
        for _ in 0..nw.max(0) {
            let name: Box<str> = r.read_string()?.into();
            let session = SessionId(r.read_i64()?);
            let kind = r.read_u8()?;
            let leases = r.read_i32()?;
            let mode = match usize::try_from(leases)
                .ok()
                .and_then(|l| mode_of_parts(kind, l))
            {
                Some(m) => m,
                None if kind > 2 => {
                    return Err(DecodeError::InvalidValue {
                        field: "lock waiter mode",
                        value: i64::from(kind),
                    })
                }
                None => {
                    return Err(DecodeError::InvalidValue {
                        field: "lock waiter leases",
                        value: i64::from(leases),
                    })
                }
            };
            waiters.push(SavedWaiter {
                name,
                session,
                mode,
            });
        }
        let mut saved = SavedLock {
            path: lock,
            waiters,
            held_until: None,
            delays: Vec::new(),
        };
        if version >= 6 {
            let until = r.read_i64()?;
            saved.held_until = (until >= 0).then_some(until);
            let nd = r.read_i32()?;
            for _ in 0..nd.max(0) {
                let name: Box<str> = r.read_string()?.into();
                saved.delays.push((name, r.read_i64()?));
            }
        }
        locks.push(saved);
    }
    Ok(LockImage { locks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Origin, Txn, TxnBody};
    use zlock_proto::records::{
        lock_mode, CreateRequest, DeleteRequest, LockRequest, SetDataRequest,
    };
    use zlock_proto::{OpCode, Request};

    fn apply_next(st: &mut State, txn: &Txn) -> crate::Applied {
        st.apply(st.applied.next(), txn).unwrap()
    }

    /// A new session (member 0: its id is the zxid it took).
    fn open_session(st: &mut State) -> SessionId {
        let create = Txn {
            origin: Origin::default(),
            time_ms: 100,
            clock: crate::TxnClock::Leader,
            body: TxnBody::CreateSession {
                passwd: vec![1; 16],
                timeout_ms: 4000,
            },
        };
        apply_next(st, &create).created_session.unwrap()
    }

    /// `request` of `session`, which must succeed.
    fn write(st: &mut State, session: SessionId, request: Request) {
        let origin = Origin {
            session,
            ..Origin::default()
        };
        let a = apply_next(st, &Txn::request(origin, 100, vec![].into(), request));
        assert_eq!(a.reply.err, 0);
    }

    #[test]
    fn round_trip() {
        let mut st = State::new(Config::default());
        let sid = open_session(&mut st);
        for (p, flags) in [("/a", 0), ("/a/b", 0), ("/a/e", 1), ("/c", 4)] {
            let create = CreateRequest {
                path: p.into(),
                data: Some(b"xy".to_vec()),
                acl: Acl::open_unsafe(),
                flags,
            };
            write(&mut st, sid, Request::Create(OpCode::Create, create));
        }
        let mut b = Vec::new();
        encode(&st, &mut b);
        let back = decode(&b, Config::default()).unwrap();
        assert_eq!(back.zxid, st.zxid);
        assert_eq!(back.sessions, st.sessions);
        assert_eq!(back.tree.len(), st.tree.len());
        for (p, n) in st.tree.iter() {
            assert_eq!(back.tree.get(p), Some(n), "{p}");
        }
        assert_eq!(back.tree.ephemerals_of(sid), vec!["/a/e".to_string()]);
        assert!(decode(&b[..b.len() - 3], Config::default()).is_err());
    }

    fn create(path: &str, data: &[u8]) -> Request {
        let create = CreateRequest {
            path: path.into(),
            data: Some(data.to_vec()),
            acl: Acl::open_unsafe(),
            flags: 0,
        };
        Request::Create(OpCode::Create, create)
    }

    /// An image shares the live state's maps (znodes, sessions) instead of copying them:
    /// what the state does after it was taken (data changed in place, nodes created and
    /// removed, sessions opened and closed, enough of them to change most of the map's
    /// inner nodes) must not show in it, and must all show in the state.
    #[test]
    fn an_image_encodes_the_state_it_was_taken_at() {
        let mut st = State::new(Config::default());
        let sid = open_session(&mut st);
        let other = open_session(&mut st);
        write(&mut st, sid, create("/d", b""));
        for i in 0..3000 {
            write(&mut st, sid, create(&format!("/d/n{i}"), b"old"));
        }
        let mut before = Vec::new();
        encode(&st, &mut before);
        let image = Image::of(&st);

        for i in (0..3000).step_by(3) {
            let set = SetDataRequest {
                path: format!("/d/n{i}"),
                data: Some(b"new".to_vec()),
                version: -1,
            };
            write(&mut st, sid, Request::SetData(set));
        }
        for i in (1..3000).step_by(3) {
            let delete = DeleteRequest {
                path: format!("/d/n{i}"),
                version: -1,
            };
            write(&mut st, sid, Request::Delete(delete));
        }
        for i in 3000..4000 {
            write(&mut st, sid, create(&format!("/d/n{i}"), b"added"));
        }
        let close = Txn {
            origin: Origin::default(),
            time_ms: 100,
            clock: crate::TxnClock::Leader,
            body: TxnBody::CloseSession { session_id: other },
        };
        apply_next(&mut st, &close);
        let opened = open_session(&mut st);

        let mut taken = Vec::new();
        write_image(&image, &mut taken).unwrap();
        assert!(taken == before, "the image changed with the state");
        assert_eq!(image.nodes.len(), 3000 + 5);
        assert_eq!(
            image.nodes.get("/d/n0").unwrap().data.as_deref(),
            Some(&b"old"[..])
        );
        assert!(image.nodes.contains("/d/n1") && !image.nodes.contains("/d/n3000"));
        assert!(image.sessions.contains_key(&other) && !image.sessions.contains_key(&opened));

        let mut now = Vec::new();
        encode(&st, &mut now);
        let back = decode(&now, Config::default()).unwrap();
        assert_eq!(back.tree.len(), 3000 - 1000 + 1000 + 5);
        assert_eq!(
            back.tree.get("/d/n0").unwrap().data.as_deref(),
            Some(&b"new"[..])
        );
        assert_eq!(
            back.tree.get("/d/n2").unwrap().data.as_deref(),
            Some(&b"old"[..])
        );
        assert!(!back.tree.contains("/d/n1") && back.tree.contains("/d/n3999"));
        assert_eq!(
            back.sessions.keys().copied().collect::<Vec<_>>(),
            vec![sid, opened]
        );
        // The image is still whole once the state is gone.
        drop(st);
        let mut again = Vec::new();
        write_image(&image, &mut again).unwrap();
        assert!(again == before);
    }

    /// Sessions 1 and 2; 1 holds `/l`, 2 waits for it.
    fn with_waiter() -> State {
        let mut st = State::new(Config::default());
        let sessions = [open_session(&mut st), open_session(&mut st)];
        for s in sessions {
            let lock = LockRequest {
                path: "/l".into(),
                prefix: "x-".into(),
                data: None,
                acl: Acl::open_unsafe(),
                mode: lock_mode::EXCLUSIVE,
                leases: 1,
                flags: 0,
                release: String::new(),
                ..LockRequest::default()
            };
            write(&mut st, s, Request::Lock(lock));
        }
        assert_eq!(st.locks.pending().len(), 1);
        st
    }

    /// `st` in snapshot format `version`.
    fn in_version(st: &State, version: i32) -> Vec<u8> {
        let mut b = Vec::new();
        let (nodes, locks) = (st.tree.nodes(), &st.locks.image());
        write_parts(
            version,
            nodes,
            &st.sessions,
            (st.zxid, st.time_ms),
            locks,
            &mut b,
        )
        .unwrap();
        b
    }

    #[test]
    fn version_2_decodes_with_no_waiters() {
        let st = with_waiter();
        let v2 = in_version(&st, 2);
        let back = decode(&v2, Config::default()).unwrap();
        assert!(back.locks.is_empty() && back.locks.pending().is_empty());
        assert_eq!(back.tree.len(), st.tree.len());
        let mut v3 = Vec::new();
        encode(&st, &mut v3);
        let back = decode(&v3, Config::default()).unwrap();
        assert_eq!(back.locks.pending(), st.locks.pending());
    }

    #[test]
    fn owners_are_kept_and_older_versions_decode_with_any_owner() {
        let st = with_waiter();
        assert!(!st.sessions.is_empty());
        let mut v4 = Vec::new();
        encode(&st, &mut v4);
        let back = decode(&v4, Config::default()).unwrap();
        assert_eq!(back.sessions, st.sessions, "owners round-trip");
        let v3 = in_version(&st, 3);
        let back = decode(&v3, Config::default()).unwrap();
        assert_eq!(back.locks.pending(), st.locks.pending());
        assert!(back
            .sessions
            .values()
            .all(|s| s.owner == Session::ANY_OWNER));
    }

    #[test]
    fn the_time_is_kept_and_older_versions_decode_with_none() {
        let mut st = with_waiter();
        st.time_ms = 1_700_000_123_456;
        let mut v7 = Vec::new();
        encode(&st, &mut v7);
        assert_eq!(decode(&v7, Config::default()).unwrap().time_ms, st.time_ms);
        let mut taken = Vec::new();
        write_image(&Image::of(&st), &mut taken).unwrap();
        assert!(taken == v7, "an image writes what encode does");
        let v6 = in_version(&st, 6);
        let back = decode(&v6, Config::default()).unwrap();
        assert_eq!(
            back.time_ms, 0,
            "no leader-stamped Txn applied before version 7"
        );
        assert_eq!(back.locks.pending(), st.locks.pending());
        assert_eq!(back.tree.len(), st.tree.len());
    }

    #[test]
    fn a_lock_section_that_does_not_fit_the_tree_is_refused() {
        let st = with_waiter();
        let mut image = st.locks.image();
        image.locks[0].waiters[0].name = "x-0000000007".into();
        let mut b = Vec::new();
        write_parts(
            4,
            st.tree.nodes(),
            &st.sessions,
            (st.zxid, 0),
            &image,
            &mut b,
        )
        .unwrap();
        assert!(matches!(
            decode(&b, Config::default()),
            Err(SnapshotError::NoLockEntry(p)) if p == "/l/x-0000000007"
        ));
        image.locks[0].path = "/nope".into();
        let mut b = Vec::new();
        write_parts(
            4,
            st.tree.nodes(),
            &st.sessions,
            (st.zxid, 0),
            &image,
            &mut b,
        )
        .unwrap();
        assert!(matches!(
            decode(&b, Config::default()),
            Err(SnapshotError::NoLockPath(p)) if p == "/nope"
        ));
    }
}
