//! Reading ZooKeeper's snapshot files into zlock's state.
//!
//! A snapshot (`FileSnap`, `SerializeUtils.serializeSnapshot`, `DataTree.serialize`), all
//! integers big-endian jute:
//!
//! ```text
//! int magic "ZKSN" | int version (2) | long dbid
//! int session count | (long id | int timeout ms)*
//! int ACL count | (long index | vector<ACL>)*          the ACL cache
//! (ustring path | buffer data | long acl index | StatPersisted)*   parents first;
//!     the root's path is "", its children's "/a"; index -1 is world:anyone:all
//! ustring "/"                                          end of the nodes
//! long Adler-32 of every byte before it | ustring "/"  the seal
//! [long zxid | int digest version | long digest | seal]        3.6+: the tree digest
//! [long last processed zxid | seal]                            3.9+
//! ```
//!
//! StatPersisted is `long czxid, mzxid, ctime, mtime | int version, cversion, aversion |
//! long ephemeralOwner, pzxid`; its cversion is the count of children ever created (what
//! zlock's [`Node::cversion`] holds too), and ephemeralOwner also encodes containers
//! and TTL nodes ([`kind_of`]).
//!
//! The snapshot is fuzzy: ZooKeeper writes it while it applies transactions, so it may
//! hold changes made after the zxid in its name; replaying the log from that zxid on
//! puts them right ([`super::replay`]).
//!
//! As ZooKeeper does (`FileSnap.deserialize`), a snapshot that does not read (cut short,
//! failed checksum, bad magic, a node without its parent) is skipped for the one before
//! it, with a warning; only a snapshot naming an ACL its cache lacks stops the import,
//! as it stops ZooKeeper.

use std::io::Read;
use std::path::Path;

use zlock_core::tree::{DataTree, Node, NodeKind};
use zlock_core::{Session, SessionId, State};
use zlock_proto::jute::{Field, Reader};
use zlock_proto::records::{Acl, Id};

use super::error::ImportError;
use super::files::{Compression, ZkFile};
use super::passwd::session_passwd;

/// "ZKSN".
const SNAP_MAGIC: i32 = 0x5a4b_534e;
/// ZooKeeper's `OPEN_UNSAFE_ACL_ID`: the index that means world:anyone with every
/// permission, never stored in the cache.
const OPEN_ACL_INDEX: i64 = -1;
/// A long, then a seal (a long and the string "/").
const LAST_ZXID_SECTION: usize = 8 + 8 + 4 + 1;

/// A snapshot read into a state: its tree and sessions, nothing replayed yet.
pub(crate) struct Loaded {
    /// The zxid in the file's name: the log is replayed from the one after it.
    pub zxid: i64,
    pub state: State,
    /// The latest ctime or mtime in the tree (the state's clock starts there).
    pub max_time: i64,
}

/// Why one snapshot did not read.
pub(super) enum Failure {
    /// ZooKeeper would skip it for the one before it.
    Skip { offset: u64, what: String },
    /// ZooKeeper would not start.
    Fatal { offset: u64, what: String },
}

/// Reads the newest snapshot that reads, newest first as ZooKeeper tries them;
/// `warn` hears of every snapshot skipped. `progress` hears (bytes read, bytes).
pub(crate) fn load_newest(
    dir: &Path,
    snapshots: &[ZkFile],
    config: zlock_core::Config,
    warn: &mut dyn FnMut(String),
    progress: &mut dyn FnMut(&Path, u64, u64),
) -> Result<Loaded, ImportError> {
    if snapshots.is_empty() {
        return Err(ImportError::NoSnapshot {
            dir: dir.to_owned(),
        });
    }
    let mut reasons = Vec::new();
    // ZooKeeper looks at the newest 100.
    for f in snapshots.iter().rev().take(100) {
        if let Compression::Unsupported(method) = &f.compression {
            return Err(ImportError::UnsupportedCompression {
                path: f.path.clone(),
                method: method.clone(),
            });
        }
        let bytes = read_file(f)?;
        match parse(&bytes, f.zxid, config.clone(), &mut |done| {
            progress(&f.path, done, bytes.len() as u64)
        }) {
            Ok(loaded) => return Ok(loaded),
            Err(Failure::Fatal { offset, what }) => {
                return Err(ImportError::Corrupt {
                    path: f.path.clone(),
                    offset,
                    what,
                })
            }
            Err(Failure::Skip { offset, what }) => {
                let reason = format!("{} at byte {offset}: {what}", f.path.display());
                warn(format!(
                    "skipping snapshot {reason}; trying the one before it, as ZooKeeper does"
                ));
                reasons.push(reason);
            }
        }
    }
    Err(ImportError::NoValidSnapshot {
        dir: dir.to_owned(),
        reasons,
    })
}

/// The snapshot's bytes, uncompressed (the checksum covers the uncompressed stream).
fn read_file(f: &ZkFile) -> Result<Vec<u8>, ImportError> {
    let file = std::fs::File::open(&f.path).map_err(|e| ImportError::io(&f.path, e))?;
    let mut bytes = Vec::new();
    let read = match f.compression {
        Compression::Gzip => flate2::read::MultiGzDecoder::new(file).read_to_end(&mut bytes),
        _ => std::io::BufReader::new(file).read_to_end(&mut bytes),
    };
    read.map_err(|e| ImportError::io(&f.path, e))?;
    Ok(bytes)
}

/// Decodes one snapshot's bytes (`zxid`: the one in its name).
pub(super) fn parse(
    bytes: &[u8],
    zxid: i64,
    config: zlock_core::Config,
    progress: &mut dyn FnMut(u64),
) -> Result<Loaded, Failure> {
    let mut r = Reader::new(bytes);
    let at = |r: &Reader<'_>| (bytes.len() - r.remaining()) as u64;
    let skip = |r: &Reader<'_>, what: String| Failure::Skip {
        offset: at(r),
        what,
    };
    let cut = |r: &Reader<'_>, e: zlock_proto::DecodeError| skip(r, format!("{e}"));

    let magic = r.read_i32().map_err(|e| cut(&r, e))?;
    if magic != SNAP_MAGIC {
        return Err(Failure::Skip {
            offset: 0,
            what: format!("not a ZooKeeper snapshot (magic {magic:#x})"),
        });
    }
    let _version = r.read_i32().map_err(|e| cut(&r, e))?;
    let _dbid = r.read_i64().map_err(|e| cut(&r, e))?;

    let mut state = State::new(config);
    state.tree = DataTree::empty();
    let sessions = r.read_i32().map_err(|e| cut(&r, e))?;
    for _ in 0..sessions.max(0) {
        let id = r.read_i64().map_err(|e| cut(&r, e))?;
        let timeout_ms = r.read_i32().map_err(|e| cut(&r, e))?;
        state
            .sessions
            .insert(SessionId(id), imported_session(id, timeout_ms));
    }

    let acls = r.read_i32().map_err(|e| cut(&r, e))?;
    let mut cache = std::collections::HashMap::new();
    for _ in 0..acls.max(0) {
        let index = r.read_i64().map_err(|e| cut(&r, e))?;
        let list = Vec::<Acl>::get(&mut r).map_err(|e| cut(&r, e))?;
        cache.insert(index, state.tree.intern_acl(list));
    }
    let open = state.tree.intern_acl(vec![Acl {
        perms: zlock_proto::records::perms::ALL,
        id: Id::new("world", "anyone"),
    }]);

    let mut max_time = 0i64;
    let mut count = 0u64;
    loop {
        let node_at = at(&r);
        let path = r.read_string().map_err(|e| cut(&r, e))?;
        if path == "/" {
            break;
        }
        let data = r.read_opt_buffer().map_err(|e| cut(&r, e))?;
        let acl_index = r.read_i64().map_err(|e| cut(&r, e))?;
        let mut f = [0i64; 9];
        for (i, v) in f.iter_mut().enumerate() {
            *v = match i {
                4..=6 => r.read_i32().map(i64::from),
                _ => r.read_i64(),
            }
            .map_err(|e| cut(&r, e))?;
        }
        let [czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid] = f;
        let acl = match acl_index {
            OPEN_ACL_INDEX => open.clone(),
            i => match cache.get(&i) {
                Some(a) => a.clone(),
                None => {
                    return Err(Failure::Fatal {
                        offset: node_at,
                        what: format!("node {path:?} names ACL {i}, which the ACL cache lacks"),
                    })
                }
            },
        };
        let path = if path.is_empty() {
            "/".to_owned()
        } else {
            path
        };
        if path != "/" && !well_formed(&path) {
            return Err(Failure::Skip {
                offset: node_at,
                what: format!("node path {path:?} is not an absolute path"),
            });
        }
        if path != "/" && !state.tree.contains(zlock_core::path::parent(&path)) {
            return Err(Failure::Skip {
                offset: node_at,
                what: format!("node {path:?} comes before its parent"),
            });
        }
        let mut n = Node::new(data, acl, kind_of(owner), czxid, ctime);
        n.mzxid = mzxid;
        n.mtime = mtime;
        n.version = version as i32;
        n.cversion = cversion as i32;
        n.aversion = aversion as i32;
        n.pzxid = pzxid;
        max_time = max_time.max(ctime).max(mtime);
        state.tree.insert(&path, n);
        count += 1;
        if count & 0xffff == 0 {
            progress(at(&r));
        }
    }
    seal(bytes, &mut r).map_err(|(offset, what)| Failure::Skip { offset, what })?;
    // After the seal: the tree digest (3.6+, unless zookeeper.digest.enabled=false),
    // then the last processed zxid (3.9+). A section of 21 bytes can only be the
    // latter (a zxid and a seal; a digest section is longer).
    if !r.is_empty() && r.remaining() != LAST_ZXID_SECTION {
        // The tree digest: its zxid, its version, the digest (a hex string
        // before version 2), then a seal of its own.
        let digest = (|| {
            r.read_i64()?;
            if r.read_i32()? < 2 {
                r.read_string()?;
            } else {
                r.read_i64()?;
            }
            Ok::<_, zlock_proto::DecodeError>(())
        })();
        digest.map_err(|e| cut(&r, e))?;
        seal(bytes, &mut r).map_err(|(offset, what)| Failure::Skip { offset, what })?;
    }
    if r.remaining() >= 8 {
        // The last processed zxid (3.9+), sealed too.
        r.read_i64().map_err(|e| cut(&r, e))?;
        seal(bytes, &mut r).map_err(|(offset, what)| Failure::Skip { offset, what })?;
    }
    progress(bytes.len() as u64);
    if !state.tree.contains("/") {
        return Err(Failure::Skip {
            offset: at(&r),
            what: "the snapshot holds no root node".into(),
        });
    }
    state.zxid = zlock_core::Zxid(zxid);
    Ok(Loaded {
        zxid,
        state,
        max_time,
    })
}

/// Checks a seal: the Adler-32 of every byte before it, then the string "/".
fn seal(bytes: &[u8], r: &mut Reader<'_>) -> Result<(), (u64, String)> {
    let offset = bytes.len() - r.remaining();
    let expected = adler2::adler32_slice(&bytes[..offset]);
    let read = (|| {
        let v = r.read_i64()?;
        r.read_string()?;
        Ok::<_, zlock_proto::DecodeError>(v)
    })()
    .map_err(|e| (offset as u64, format!("{e}")))?;
    if read != i64::from(expected) {
        return Err((
            offset as u64,
            format!("checksum mismatch (stored {read:#x}, computed {expected:#x})"),
        ));
    }
    Ok(())
}

/// An absolute path other than the root, as ZooKeeper's clients must send them: no
/// empty segment (so no trailing '/').
pub(crate) fn well_formed(path: &str) -> bool {
    path.len() > 1 && path.starts_with('/') && path[1..].split('/').all(|s| !s.is_empty())
}

/// A session as zlock keeps it: the password is the one ZooKeeper gave the client
/// (derived from the id), so a client may resume its session on zlock.
pub(crate) fn imported_session(id: i64, timeout_ms: i32) -> Session {
    Session {
        timeout_ms,
        passwd: session_passwd(id),
        owner: Session::ANY_OWNER,
    }
}

/// What a StatPersisted's ephemeralOwner says of the node (`EphemeralType.get` with
/// extended types on): `Long.MIN_VALUE` a container; the top byte 0xff with the next two
/// bytes 0 a TTL node, its TTL in the low 40 bits; any other non-zero value the owning
/// session.
pub(crate) fn kind_of(owner: i64) -> NodeKind {
    const EXTENDED: u64 = 0xff00_0000_0000_0000;
    const RESERVED: u64 = 0x00ff_ff00_0000_0000;
    let bits = owner as u64;
    if owner == i64::MIN {
        NodeKind::Container
    } else if bits & EXTENDED == EXTENDED && bits & RESERVED == 0 {
        NodeKind::Ttl((bits & !(EXTENDED | RESERVED)) as i64)
    } else if owner != 0 {
        NodeKind::Ephemeral(SessionId(owner))
    } else {
        NodeKind::Persistent
    }
}
