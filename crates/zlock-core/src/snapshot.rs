//! The state's snapshot encoding (the payload inside a snapshot file).
//!
//! Version 2, jute primitives:
//! `int version (=1) | long zxid | int session count | sessions | long node count | nodes`
//! - session: `long id | int timeout_ms | buffer passwd`
//! - node, parents before children (depth-first from `/`):
//!   `ustring path | buffer data (-1 = null) | vector<ACL> acl | byte kind | long kind_arg |
//!    long czxid | long mzxid | long ctime | long mtime | int version | int cversion |
//!    int aversion | long pzxid`
//!   kind: 0 persistent, 1 ephemeral (arg = owner session), 2 container, 3 TTL (arg = ms).
//!
//! Watches are not part of a snapshot: clients re-register them on reconnect.

use thiserror::Error;
use zlock_proto::jute::{Field, Reader, Writer};
use zlock_proto::records::Acl;
use zlock_proto::DecodeError;

use crate::path;
use crate::state::{Config, Session, State};
use std::collections::BTreeMap;

use crate::tree::{DataTree, Node, NodeKind, SessionId};

/// 1: first format. 2: node data may be null (buffer length -1); cversion holds the
/// parent's create count (the Stat's cversion is derived from it).
pub const SNAPSHOT_VERSION: i32 = 2;

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("unsupported snapshot version {0}")]
    Version(i32),
    #[error("malformed snapshot: {0}")]
    Decode(#[from] DecodeError),
    #[error("snapshot node {0} has no parent")]
    Orphan(String),
}

/// What a snapshot holds: the replicated part of the state. Cloning it is cheap (the
/// tree shares its nodes, see [`DataTree`]), so the server takes one and a
/// background thread encodes it.
#[derive(Debug, Clone)]
pub struct Image {
    /// The log position the image was taken at (it names the snapshot file).
    pub applied: crate::ids::LogIndex,
    pub zxid: i64,
    pub sessions: BTreeMap<SessionId, Session>,
    pub tree: DataTree,
}

impl Image {
    pub fn of(state: &State) -> Image {
        Image {
            applied: state.applied,
            zxid: state.zxid,
            sessions: state.sessions.clone(),
            tree: state.tree.clone(),
        }
    }
}

/// Encodes the replicated part of `state` into `out`.
pub fn encode(state: &State, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = write_parts(&state.tree, &state.sessions, state.zxid, out);
}

/// Streams `image` to `w` in chunks (a snapshot of a million znodes is hundreds of MB;
/// it never needs to be in memory whole).
pub fn write_image(image: &Image, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    write_parts(&image.tree, &image.sessions, image.zxid, w)
}

const CHUNK: usize = 256 * 1024;

fn write_parts(
    tree: &DataTree,
    sessions: &BTreeMap<SessionId, Session>,
    zxid: i64,
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut out: Vec<u8> = Vec::with_capacity(CHUNK + 4096);
    out.write_i32(SNAPSHOT_VERSION);
    out.write_i64(zxid);
    out.write_i32(sessions.len() as i32);
    for (id, s) in sessions {
        out.write_i64(*id);
        out.write_i32(s.timeout_ms);
        out.write_buffer(&s.passwd);
        if out.len() >= CHUNK {
            w.write_all(&out)?;
            out.clear();
        }
    }
    out.write_i64(tree.len() as i64);
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        let Some(n) = tree.get(&p) else {
            continue;
        };
        out.write_string(&p);
        out.write_opt_buffer(n.data.as_deref());
        n.acl.as_ref().put(&mut out);
        let (kind, arg) = match n.kind {
            NodeKind::Persistent => (0u8, 0i64),
            NodeKind::Ephemeral(s) => (1, s),
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
        for c in n.children.iter().rev() {
            stack.push(path::join(&p, c));
        }
        if out.len() >= CHUNK {
            w.write_all(&out)?;
            out.clear();
        }
    }
    w.write_all(&out)
}

/// Decodes a snapshot payload into a state (with no watches).
pub fn decode(bytes: &[u8], config: Config) -> Result<State, SnapshotError> {
    let mut r = Reader::new(bytes);
    let v = r.read_i32()?;
    if v != SNAPSHOT_VERSION {
        return Err(SnapshotError::Version(v));
    }
    let mut st = State::new(config);
    st.tree = DataTree::empty();
    st.zxid = r.read_i64()?;
    let ns = r.read_i32()?;
    for _ in 0..ns.max(0) {
        let id = r.read_i64()?;
        let timeout_ms = r.read_i32()?;
        let passwd = r.read_buffer()?;
        st.sessions.insert(id, Session { timeout_ms, passwd });
    }
    let nn = r.read_i64()?;
    for _ in 0..nn.max(0) {
        let p = r.read_string()?;
        let data = r.read_opt_buffer()?;
        let acl = Vec::<Acl>::get(&mut r)?;
        let kind = match (r.read_u8()?, r.read_i64()?) {
            (0, _) => NodeKind::Persistent,
            (1, s) => NodeKind::Ephemeral(s),
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
        if p != "/" && !st.tree.contains(path::parent(&p)) {
            return Err(SnapshotError::Orphan(p));
        }
        st.tree.insert(&p, n);
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Origin, Txn, TxnBody};
    use zlock_proto::records::CreateRequest;
    use zlock_proto::{OpCode, Request};

    #[test]
    fn round_trip() {
        let mut st = State::new(Config::default());
        let sid = st
            .apply_next(&Txn {
                origin: Origin::default(),
                time_ms: 100,
                body: TxnBody::CreateSession {
                    passwd: vec![1; 16],
                    timeout_ms: 4000,
                },
            })
            .created_session
            .unwrap();
        let origin = Origin {
            session: sid,
            ..Origin::default()
        };
        for (p, flags) in [("/a", 0), ("/a/b", 0), ("/a/e", 1), ("/c", 4)] {
            let a = st.apply_next(&Txn::request(
                origin,
                100,
                vec![].into(),
                Request::Create(
                    OpCode::Create,
                    CreateRequest {
                        path: p.into(),
                        data: Some(b"xy".to_vec()),
                        acl: Acl::open_unsafe(),
                        flags,
                    },
                ),
            ));
            assert_eq!(a.reply.err, 0, "{p}");
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
}
