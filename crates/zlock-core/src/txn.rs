//! Txn: the log payload. Everything that changes the state is a Txn, applied in log
//! order by [`crate::State::apply`].
//!
//! A Txn carries every input its outcome depends on (session id, time, the caller's
//! identities), so applying the same log gives the same state on every replica. A write
//! is logged as the client sent it and validated at apply time: a failing write still
//! takes a zxid, as in ZooKeeper 3.8.
//!
//! Encoding (version 1), jute primitives:
//! `u8 version (=1) | u8 tag | fields`
//! - tag 1 CreateSession: `long session_id | buffer passwd | int timeout_ms`
//! - tag 2 CloseSession: `long session_id`
//! - tag 3 Request: `long session_id | long time_ms | vector<Id> auth | int opcode | request body`
//! - tag 4 DeleteExpired: `long time_ms | vector<ustring> paths`

use std::sync::Arc;

use thiserror::Error;
use zlock_proto::jute::{Field, Reader, Writer};
use zlock_proto::records::Id;
use zlock_proto::{DecodeError, Decoded, Request};

use crate::tree::SessionId;

/// Version byte at the start of every encoded Txn.
pub const TXN_VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Txn {
    CreateSession {
        session_id: SessionId,
        passwd: Vec<u8>,
        timeout_ms: i32,
    },
    /// A closeSession request or an expiry.
    CloseSession { session_id: SessionId },
    /// A client write (create, delete, setData, setACL, multi, ...).
    Request {
        session_id: SessionId,
        time_ms: i64,
        /// Shared with the connection that sent it: a write does not copy its caller's
        /// identities.
        auth: Arc<Vec<Id>>,
        request: Request,
    },
    /// Removal of empty containers and expired TTL nodes, re-checked at apply time.
    DeleteExpired { time_ms: i64, paths: Vec<String> },
}

#[derive(Debug, Error)]
pub enum TxnDecodeError {
    #[error("unknown txn version {0}")]
    Version(u8),
    #[error("unknown txn tag {0}")]
    Tag(u8),
    #[error("bad txn body: {0}")]
    Body(#[from] DecodeError),
    #[error("txn holds an unknown opcode {0}")]
    UnknownOp(i32),
}

impl Txn {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(TXN_VERSION);
        match self {
            Txn::CreateSession {
                session_id,
                passwd,
                timeout_ms,
            } => {
                out.push(1);
                out.write_i64(*session_id);
                out.write_buffer(passwd);
                out.write_i32(*timeout_ms);
            }
            Txn::CloseSession { session_id } => {
                out.push(2);
                out.write_i64(*session_id);
            }
            Txn::Request {
                session_id,
                time_ms,
                auth,
                request,
            } => {
                out.push(3);
                out.write_i64(*session_id);
                out.write_i64(*time_ms);
                auth.as_ref().put(out);
                out.write_i32(request.op_code().code());
                request.encode(out);
            }
            Txn::DeleteExpired { time_ms, paths } => {
                out.push(4);
                out.write_i64(*time_ms);
                paths.put(out);
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    pub fn decode(bytes: &[u8]) -> Result<Txn, TxnDecodeError> {
        let (&version, rest) = bytes
            .split_first()
            .ok_or(DecodeError::Truncated { needed: 1 })?;
        if version != TXN_VERSION {
            return Err(TxnDecodeError::Version(version));
        }
        let (&tag, rest) = rest
            .split_first()
            .ok_or(DecodeError::Truncated { needed: 1 })?;
        let mut r = Reader::new(rest);
        Ok(match tag {
            1 => Txn::CreateSession {
                session_id: r.read_i64()?,
                passwd: r.read_buffer()?,
                timeout_ms: r.read_i32()?,
            },
            2 => Txn::CloseSession {
                session_id: r.read_i64()?,
            },
            3 => {
                let session_id = r.read_i64()?;
                let time_ms = r.read_i64()?;
                let auth = Arc::new(Vec::<Id>::get(&mut r)?);
                let op = r.read_i32()?;
                let request = match Request::decode(op, &mut r)? {
                    Decoded::Request(req) => req,
                    Decoded::UnknownOp(op) => return Err(TxnDecodeError::UnknownOp(op)),
                };
                Txn::Request {
                    session_id,
                    time_ms,
                    auth,
                    request,
                }
            }
            4 => Txn::DeleteExpired {
                time_ms: r.read_i64()?,
                paths: Vec::<String>::get(&mut r)?,
            },
            t => return Err(TxnDecodeError::Tag(t)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_proto::records::{Acl, CreateRequest};
    use zlock_proto::OpCode;

    #[test]
    fn round_trip() {
        let txns = vec![
            Txn::CreateSession {
                session_id: 42,
                passwd: vec![1; 16],
                timeout_ms: 4000,
            },
            Txn::CloseSession { session_id: 42 },
            Txn::Request {
                session_id: 42,
                time_ms: 1_700_000_000_000,
                auth: vec![Id::new("ip", "127.0.0.1")].into(),
                request: Request::Create(
                    OpCode::Create2,
                    CreateRequest {
                        path: "/a".into(),
                        data: Some(b"d".to_vec()),
                        acl: Acl::open_unsafe(),
                        flags: 3,
                    },
                ),
            },
            Txn::DeleteExpired {
                time_ms: 5,
                paths: vec!["/c".into()],
            },
        ];
        for t in txns {
            assert_eq!(Txn::decode(&t.to_bytes()).unwrap(), t);
        }
        assert!(Txn::decode(&[2, 1]).is_err());
        assert!(Txn::decode(&[]).is_err());
    }
}
