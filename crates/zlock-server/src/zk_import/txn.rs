//! ZooKeeper's transaction records (`zookeeper.jute`, module `org.apache.zookeeper.txn`),
//! decoded with zlock's jute reader, as `SerializeUtils.deserializeTxn` reads them.
//!
//! ```text
//! TxnHeader          long clientId | int cxid | long zxid | long time | int type
//! CreateTxn          ustring path | buffer data | vector<ACL> acl | boolean ephemeral |
//!                    int parentCVersion           (create, create2)
//! CreateTxnV0        CreateTxn without parentCVersion (before 3.3; read as -1)
//! CreateTTLTxn       ustring path | buffer data | vector<ACL> acl | int parentCVersion |
//!                    long ttl
//! CreateContainerTxn ustring path | buffer data | vector<ACL> acl | int parentCVersion
//! DeleteTxn          ustring path                 (delete, deleteContainer)
//! SetDataTxn         ustring path | buffer data | int version   (setData, reconfig)
//! SetACLTxn          ustring path | vector<ACL> acl | int version
//! CheckVersionTxn    ustring path | int version
//! ErrorTxn           int err
//! CreateSessionTxn   int timeOut
//! CloseSessionTxn    vector<ustring> paths2Delete (3.6+; absent before)
//! MultiTxn           vector<Txn>, Txn = int type | buffer data (one of the above)
//! ```
//!
//! A 3.6+ entry may end with a TxnDigest (`int version | long treeDigest`); nothing here
//! reads it (zlock does not check ZooKeeper's tree digests).

use zlock_proto::jute::{Field, Reader};
use zlock_proto::records::Acl;
use zlock_proto::DecodeError;

/// ZooKeeper's opcodes that appear in its log.
mod op {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const SET_DATA: i32 = 5;
    pub const SET_ACL: i32 = 7;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
    pub const ERROR: i32 = -1;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;
}

/// What every logged transaction starts with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub client_id: i64,
    pub zxid: i64,
    pub time: i64,
    pub kind: i32,
}

impl Header {
    pub fn decode(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
        let client_id = r.read_i64()?;
        let _cxid = r.read_i32()?;
        let zxid = r.read_i64()?;
        let time = r.read_i64()?;
        let kind = r.read_i32()?;
        Ok(Header {
            client_id,
            zxid,
            time,
            kind,
        })
    }
}

/// One transaction's effect, with the facts ZooKeeper's `DataTree.processTxn` uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ZkTxn {
    CreateSession {
        timeout_ms: i32,
    },
    /// `paths`: the ephemerals the leader listed (3.6+), or none.
    CloseSession {
        paths: Option<Vec<String>>,
    },
    Create {
        path: String,
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        /// ephemeralOwner as ZooKeeper stores it (session, container or TTL marker).
        owner: i64,
        parent_cversion: i32,
        /// A plain `create` (not create2, TTL or container): only those fix the
        /// parent's cversion when the node already exists (`processTxn`'s tail).
        plain: bool,
    },
    Delete {
        path: String,
    },
    SetData {
        path: String,
        data: Option<Vec<u8>>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    /// An ErrorTxn (a failed write, or a failed multi's op), or a check: no change.
    NoChange {
        error: bool,
    },
    Multi(Vec<ZkTxn>),
}

/// The TTL marker in ephemeralOwner's top byte (`EphemeralType.TTL.toEphemeralOwner`).
const TTL_MARK: i64 = 0xff00_0000_0000_0000_u64 as i64;

/// Decodes the record of a transaction of type `kind` by `client_id`; None for a type
/// ZooKeeper's reader does not know either.
pub(crate) fn decode(
    kind: i32,
    client_id: i64,
    r: &mut Reader<'_>,
) -> Result<Option<ZkTxn>, DecodeError> {
    let txn = match kind {
        op::CREATE_SESSION => ZkTxn::CreateSession {
            timeout_ms: r.read_i32()?,
        },
        op::CLOSE_SESSION => {
            let mut probe = r.clone();
            // A close logged before 3.6 has no record: ZooKeeper reads it as none.
            let paths = Vec::<String>::get(&mut probe).ok();
            if paths.is_some() {
                *r = probe;
            }
            ZkTxn::CloseSession { paths }
        }
        op::CREATE | op::CREATE2 => {
            let mut probe = r.clone();
            match create(client_id, &mut probe, kind == op::CREATE) {
                Ok(t) => {
                    *r = probe;
                    t
                }
                // CreateTxnV0, as ZooKeeper falls back to for a plain create.
                Err(DecodeError::Truncated { .. }) if kind == op::CREATE => {
                    let path = r.read_string()?;
                    let data = r.read_opt_buffer()?;
                    let acl = Vec::<Acl>::get(r)?;
                    let ephemeral = r.read_bool()?;
                    ZkTxn::Create {
                        path,
                        data,
                        acl,
                        owner: if ephemeral { client_id } else { 0 },
                        parent_cversion: -1,
                        plain: true,
                    }
                }
                Err(e) => return Err(e),
            }
        }
        op::CREATE_TTL => {
            let (path, data, acl) = (r.read_string()?, r.read_opt_buffer()?, Vec::get(r)?);
            let parent_cversion = r.read_i32()?;
            let ttl = r.read_i64()?;
            ZkTxn::Create {
                path,
                data,
                acl,
                owner: TTL_MARK | (ttl & 0x0000_00ff_ffff_ffff),
                parent_cversion,
                plain: false,
            }
        }
        op::CREATE_CONTAINER => {
            let (path, data, acl) = (r.read_string()?, r.read_opt_buffer()?, Vec::get(r)?);
            ZkTxn::Create {
                path,
                data,
                acl,
                owner: i64::MIN,
                parent_cversion: r.read_i32()?,
                plain: false,
            }
        }
        op::DELETE | op::DELETE_CONTAINER => ZkTxn::Delete {
            path: r.read_string()?,
        },
        op::SET_DATA | op::RECONFIG => ZkTxn::SetData {
            path: r.read_string()?,
            data: r.read_opt_buffer()?,
            version: r.read_i32()?,
        },
        op::SET_ACL => ZkTxn::SetAcl {
            path: r.read_string()?,
            acl: Vec::get(r)?,
            version: r.read_i32()?,
        },
        op::ERROR => {
            r.read_i32()?;
            ZkTxn::NoChange { error: true }
        }
        op::CHECK => {
            r.read_string()?;
            r.read_i32()?;
            ZkTxn::NoChange { error: false }
        }
        op::MULTI => {
            let subs = r.read_vec(|r| Ok((r.read_i32()?, r.read_buffer()?)))?;
            let mut out = Vec::with_capacity(subs.len());
            for (kind, bytes) in subs {
                // A multi holds only these (`processTxn` refuses any other).
                let allowed = matches!(
                    kind,
                    op::CREATE
                        | op::CREATE2
                        | op::CREATE_TTL
                        | op::CREATE_CONTAINER
                        | op::DELETE
                        | op::DELETE_CONTAINER
                        | op::SET_DATA
                        | op::ERROR
                        | op::CHECK
                );
                if !allowed {
                    return Err(DecodeError::InvalidValue {
                        field: "multi op type",
                        value: i64::from(kind),
                    });
                }
                match decode(kind, client_id, &mut Reader::new(&bytes))? {
                    Some(t) => out.push(t),
                    None => unreachable_kind(kind)?,
                }
            }
            ZkTxn::Multi(out)
        }
        _ => return Ok(None),
    };
    Ok(Some(txn))
}

fn unreachable_kind(kind: i32) -> Result<(), DecodeError> {
    Err(DecodeError::InvalidValue {
        field: "txn type",
        value: i64::from(kind),
    })
}

fn create(client_id: i64, r: &mut Reader<'_>, plain: bool) -> Result<ZkTxn, DecodeError> {
    let path = r.read_string()?;
    let data = r.read_opt_buffer()?;
    let acl = Vec::<Acl>::get(r)?;
    let ephemeral = r.read_bool()?;
    let parent_cversion = r.read_i32()?;
    Ok(ZkTxn::Create {
        path,
        data,
        acl,
        owner: if ephemeral { client_id } else { 0 },
        parent_cversion,
        plain,
    })
}
