//! Txn: the log payload. Everything that changes the state is a Txn, applied in log
//! order by [`crate::State::apply`].
//!
//! A Txn carries every input its outcome depends on, fixed by the member that proposed
//! it: its [`Origin`] (that member and the request's session and xid), the time, the
//! caller's identities, a new session's password. Applying the same log therefore gives
//! the same state on every member, and the member holding the client's connection can
//! match the applied result to the waiting request by its origin. A write is logged as
//! the client sent it and validated at apply time: a failing write still takes a zxid,
//! as in ZooKeeper 3.8.
//!
//! Encoding (version 3), jute primitives:
//! `u8 version (=3) | u8 tag | long member | long session | int xid | long time_ms | body`
//! - tag 1 CreateSession: `buffer passwd | int timeout_ms`
//! - tag 2 CloseSession: `long session_id`
//! - tag 3 Request: `vector<Id> auth | int opcode | request body`
//! - tag 4 DeleteExpired: `vector<ustring> paths`
//! - tag 5 MoveSession: `long session_id | buffer passwd`
//!
//! Version 2 is version 3 with the time of the member that proposed the Txn rather than
//! the leader's; it decodes as [`TxnClock::Proposer`] (see [`Txn::clock`]).
//! Version 1 (before the origin existed) carried the session id of a CreateSession,
//! chosen from the wall clock by the single node; it is not read any more (no release
//! wrote it).

use std::sync::Arc;

use thiserror::Error;
use zlock_proto::jute::{Field, Reader, Writer};
use zlock_proto::records::Id;
use zlock_proto::{DecodeError, Decoded, Request};

use crate::ids::MemberId;
use crate::tree::SessionId;

/// Version byte at the start of every encoded Txn.
pub const TXN_VERSION: u8 = 3;

/// The version whose Txns carry their proposer's time ([`TxnClock::Proposer`]).
const PROPOSER_TIME_VERSION: u8 = 2;

/// Whose clock a Txn's `time_ms` was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnClock {
    /// The leader's (the single node's) when it sequenced the Txn: a follower's Txns are
    /// stamped again by the leader when it takes them. The state's time never goes back
    /// on such a Txn (see [`crate::State::time_ms`]). Every Txn this build writes.
    Leader,
    /// The clock of whichever member proposed it: a Txn logged by zlock before its
    /// leader stamped time (encoding version 2). It applies at its own time, as it did
    /// when it was written, and does not move the state's time, so that a member that
    /// replays it and one that restored a snapshot taken after it agree.
    Proposer,
}

/// Who proposed a Txn, and for which request.
///
/// `session` and `xid` are the request's (ZooKeeper's TxnHeader clientId and cxid).
/// Txns no client waits for (an expiry, a container sweep) have session 0. A
/// CreateSession has no session yet: its `xid` is the proposing member's handshake
/// number, which only that member's router interprets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Origin {
    pub member: MemberId,
    pub session: SessionId,
    pub xid: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub origin: Origin,
    /// Wall-clock time (ms since the epoch) read by the leader when it sequenced the Txn
    /// (see [`TxnClock`]): ctime/mtime of what the Txn writes, TTL checks, the ends of
    /// lock-delays.
    pub time_ms: i64,
    /// Whose clock `time_ms` is; not encoded (the encoding's version says it).
    pub clock: TxnClock,
    pub body: TxnBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnBody {
    /// A new session. Its id is not chosen by the proposer but derived when the Txn is
    /// applied, from the proposing member and the zxid (see
    /// [`crate::State::session_id_for`]): unique across members and restarts, with no
    /// clock read at apply time.
    CreateSession { passwd: Vec<u8>, timeout_ms: i32 },
    /// A closeSession request or an expiry.
    CloseSession { session_id: SessionId },
    /// A client write (create, delete, setData, setACL, multi, ...) of `origin.session`.
    Request {
        /// Shared with the connection that sent it: a write does not copy its caller's
        /// identities.
        auth: Arc<Vec<Id>>,
        request: Request,
    },
    /// Removal of empty containers and expired TTL nodes, re-checked at apply time.
    /// Also proposed with no paths when a lock-delay is due: like every Txn, its time
    /// ends the lock-delays that have run their course (see [`crate::locks`]).
    DeleteExpired { paths: Vec<String> },
    /// A session resumes at `origin.member` (in an ensemble): from this Txn on, only
    /// that member's requests act for it; one still on its way from the member it left
    /// is answered SessionMoved, as ZooKeeper's leader answers a request from a server
    /// that no longer owns the session. `origin.xid` is the resuming member's handshake
    /// number. Refused (the session stays where it was) unless the session lives and
    /// `passwd` is its password.
    MoveSession {
        session_id: SessionId,
        passwd: Vec<u8>,
    },
}

#[derive(Debug, Error)]
pub enum TxnDecodeError {
    #[error(
        "unknown txn version {0} (version 1 logs were written by zlock before Txns carried \
         their origin and cannot be read by this one: start it on an empty dataDir)"
    )]
    Version(u8),
    #[error("unknown txn tag {0}")]
    Tag(u8),
    #[error("bad txn body: {0}")]
    Body(#[from] DecodeError),
    #[error("txn holds an unknown opcode {0}")]
    UnknownOp(i32),
}

impl Txn {
    /// A Txn stamped at `time_ms` by the leader (or the single node).
    pub fn new(origin: Origin, time_ms: i64, body: TxnBody) -> Txn {
        Txn {
            origin,
            time_ms,
            clock: TxnClock::Leader,
            body,
        }
    }

    /// A client's write.
    pub fn request(origin: Origin, time_ms: i64, auth: Arc<Vec<Id>>, request: Request) -> Txn {
        Txn::new(origin, time_ms, TxnBody::Request { auth, request })
    }

    /// The session this Txn acts for, if it is a client's (0 otherwise).
    pub fn session(&self) -> SessionId {
        self.origin.session
    }

    /// Whether this is a session expiry: a CloseSession that no client asked for, decided
    /// by the session tracker of the member that proposed it (which led when it did).
    pub fn is_expiry(&self) -> bool {
        matches!(self.body, TxnBody::CloseSession { .. }) && self.origin.session == SessionId::NONE
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(match self.clock {
            TxnClock::Leader => TXN_VERSION,
            TxnClock::Proposer => PROPOSER_TIME_VERSION,
        });
        out.push(match &self.body {
            TxnBody::CreateSession { .. } => 1,
            TxnBody::CloseSession { .. } => 2,
            TxnBody::Request { .. } => 3,
            TxnBody::DeleteExpired { .. } => 4,
            TxnBody::MoveSession { .. } => 5,
        });
        out.write_i64(self.origin.member.0 as i64);
        out.write_i64(self.origin.session.0);
        out.write_i32(self.origin.xid);
        out.write_i64(self.time_ms);
        match &self.body {
            TxnBody::CreateSession { passwd, timeout_ms } => {
                out.write_buffer(passwd);
                out.write_i32(*timeout_ms);
            }
            TxnBody::CloseSession { session_id } => out.write_i64(session_id.0),
            TxnBody::Request { auth, request } => {
                auth.as_ref().put(out);
                out.write_i32(request.op_code().code());
                request.encode(out);
            }
            TxnBody::DeleteExpired { paths } => paths.put(out),
            TxnBody::MoveSession { session_id, passwd } => {
                out.write_i64(session_id.0);
                out.write_buffer(passwd);
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
        let clock = match version {
            TXN_VERSION => TxnClock::Leader,
            PROPOSER_TIME_VERSION => TxnClock::Proposer,
            v => return Err(TxnDecodeError::Version(v)),
        };
        let (&tag, rest) = rest
            .split_first()
            .ok_or(DecodeError::Truncated { needed: 1 })?;
        if !(1..=5).contains(&tag) {
            return Err(TxnDecodeError::Tag(tag));
        }
        let mut r = Reader::new(rest);
        let origin = Origin {
            member: MemberId(r.read_i64()? as u64),
            session: SessionId(r.read_i64()?),
            xid: r.read_i32()?,
        };
        let time_ms = r.read_i64()?;
        let body = match tag {
            1 => TxnBody::CreateSession {
                passwd: r.read_buffer()?,
                timeout_ms: r.read_i32()?,
            },
            2 => TxnBody::CloseSession {
                session_id: SessionId(r.read_i64()?),
            },
            3 => {
                let auth = Arc::new(Vec::<Id>::get(&mut r)?);
                let op = r.read_i32()?;
                let request = match Request::decode(op, &mut r)? {
                    Decoded::Request(req) => req,
                    Decoded::UnknownOp(op) => return Err(TxnDecodeError::UnknownOp(op)),
                };
                TxnBody::Request { auth, request }
            }
            4 => TxnBody::DeleteExpired {
                paths: Vec::<String>::get(&mut r)?,
            },
            _ => TxnBody::MoveSession {
                session_id: SessionId(r.read_i64()?),
                passwd: r.read_buffer()?,
            },
        };
        Ok(Txn {
            origin,
            time_ms,
            clock,
            body,
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
        let origin = Origin {
            member: MemberId(3),
            session: SessionId(42),
            xid: 7,
        };
        let bodies = vec![
            TxnBody::CreateSession {
                passwd: vec![1; 16],
                timeout_ms: 4000,
            },
            TxnBody::CloseSession {
                session_id: SessionId(42),
            },
            TxnBody::Request {
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
            TxnBody::DeleteExpired {
                paths: vec!["/c".into()],
            },
            TxnBody::MoveSession {
                session_id: SessionId(99),
                passwd: vec![4; 16],
            },
        ];
        for body in bodies {
            let t = Txn {
                origin,
                time_ms: 1_700_000_000_000,
                clock: TxnClock::Leader,
                body,
            };
            assert_eq!(Txn::decode(&t.to_bytes()).unwrap(), t);
        }
        assert!(Txn::decode(&[2, 9]).is_err());
        assert!(Txn::decode(&[1, 1]).is_err(), "version 1 is not read");
        assert!(Txn::decode(&[]).is_err());
    }

    #[test]
    fn only_a_close_no_client_asked_for_is_an_expiry() {
        let by = |session| Origin {
            member: MemberId(1),
            session,
            xid: 0,
        };
        let close = |origin| Txn {
            origin,
            time_ms: 0,
            clock: TxnClock::Leader,
            body: TxnBody::CloseSession {
                session_id: SessionId(42),
            },
        };
        assert!(close(by(SessionId::NONE)).is_expiry());
        assert!(
            !close(by(SessionId(42))).is_expiry(),
            "the client's closeSession"
        );
        let sweep = Txn {
            origin: by(SessionId::NONE),
            time_ms: 0,
            clock: TxnClock::Leader,
            body: TxnBody::DeleteExpired { paths: Vec::new() },
        };
        assert!(!sweep.is_expiry());
    }
}
