//! A whole client request body, decoded by its opcode.

use crate::jute::{DecodeError, Reader, Record};
use crate::op_code::OpCode;
use crate::records::*;

/// Every request a client can send after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// create (1), create2 (15), createContainer (19): the opcode decides the reply shape.
    Create(OpCode, CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    Exists(PathWatchRequest),
    GetData(PathWatchRequest),
    SetData(SetDataRequest),
    GetAcl(PathRequest),
    SetAcl(SetAclRequest),
    GetChildren(PathWatchRequest),
    GetChildren2(PathWatchRequest),
    Sync(PathRequest),
    Ping,
    /// check (13) outside a multi.
    Check(CheckVersionRequest),
    Multi(Vec<MultiOp>),
    MultiRead(Vec<MultiOp>),
    Reconfig(ReconfigRequest),
    CheckWatches(WatchesRequest),
    RemoveWatches(WatchesRequest),
    Auth(AuthPacket),
    /// setWatches (101) is widened into the setWatches2 shape.
    SetWatches(SetWatches2),
    Sasl(SaslRequest),
    GetEphemerals(PathRequest),
    GetAllChildrenNumber(PathRequest),
    AddWatch(AddWatchRequest),
    WhoAmI,
    CloseSession,
    /// zlock's native lock (1001).
    Lock(LockRequest),
}

/// The result of decoding a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Request(Request),
    /// An opcode this protocol does not know: ZooKeeper answers Unimplemented.
    UnknownOp(i32),
}

impl Request {
    /// Decodes the body that follows a `RequestHeader` of type `op`.
    pub fn decode(op: i32, r: &mut Reader<'_>) -> Result<Decoded, DecodeError> {
        let Some(code) = OpCode::from_i32(op) else {
            return Ok(Decoded::UnknownOp(op));
        };
        let req = match code {
            OpCode::Create | OpCode::Create2 | OpCode::CreateContainer => {
                Request::Create(code, CreateRequest::decode(r)?)
            }
            OpCode::CreateTtl => Request::CreateTtl(CreateTtlRequest::decode(r)?),
            OpCode::Delete => Request::Delete(DeleteRequest::decode(r)?),
            OpCode::Exists => Request::Exists(PathWatchRequest::decode(r)?),
            OpCode::GetData => Request::GetData(PathWatchRequest::decode(r)?),
            OpCode::SetData => Request::SetData(SetDataRequest::decode(r)?),
            OpCode::GetAcl => Request::GetAcl(PathRequest::decode(r)?),
            OpCode::SetAcl => Request::SetAcl(SetAclRequest::decode(r)?),
            OpCode::GetChildren => Request::GetChildren(PathWatchRequest::decode(r)?),
            OpCode::GetChildren2 => Request::GetChildren2(PathWatchRequest::decode(r)?),
            OpCode::Sync => Request::Sync(PathRequest::decode(r)?),
            OpCode::Ping => Request::Ping,
            OpCode::Check => Request::Check(CheckVersionRequest::decode(r)?),
            OpCode::Multi => Request::Multi(decode_multi(r)?),
            OpCode::MultiRead => Request::MultiRead(decode_multi(r)?),
            OpCode::Reconfig => Request::Reconfig(ReconfigRequest::decode(r)?),
            OpCode::CheckWatches => Request::CheckWatches(WatchesRequest::decode(r)?),
            OpCode::RemoveWatches => Request::RemoveWatches(WatchesRequest::decode(r)?),
            OpCode::Auth => Request::Auth(AuthPacket::decode(r)?),
            OpCode::SetWatches => {
                let w = SetWatches::decode(r)?;
                Request::SetWatches(SetWatches2 {
                    relative_zxid: w.relative_zxid,
                    data_watches: w.data_watches,
                    exist_watches: w.exist_watches,
                    child_watches: w.child_watches,
                    persistent_watches: Vec::new(),
                    persistent_recursive_watches: Vec::new(),
                })
            }
            OpCode::SetWatches2 => Request::SetWatches(SetWatches2::decode(r)?),
            OpCode::Sasl => Request::Sasl(SaslRequest::decode(r)?),
            OpCode::GetEphemerals => Request::GetEphemerals(PathRequest::decode(r)?),
            OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber(PathRequest::decode(r)?),
            OpCode::AddWatch => Request::AddWatch(AddWatchRequest::decode(r)?),
            OpCode::WhoAmI => Request::WhoAmI,
            OpCode::Lock => Request::Lock(LockRequest::decode(r)?),
            OpCode::CloseSession => Request::CloseSession,
            OpCode::Notification
            | OpCode::DeleteContainer
            | OpCode::CreateSession
            | OpCode::Error => return Ok(Decoded::UnknownOp(op)),
        };
        Ok(Decoded::Request(req))
    }

    pub fn op_code(&self) -> OpCode {
        match self {
            Request::Create(op, _) => *op,
            Request::CreateTtl(_) => OpCode::CreateTtl,
            Request::Delete(_) => OpCode::Delete,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl(_) => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Sync(_) => OpCode::Sync,
            Request::Ping => OpCode::Ping,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Reconfig(_) => OpCode::Reconfig,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::Auth(_) => OpCode::Auth,
            Request::SetWatches(_) => OpCode::SetWatches2,
            Request::Sasl(_) => OpCode::Sasl,
            Request::GetEphemerals(_) => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::CloseSession => OpCode::CloseSession,
            Request::Lock(_) => OpCode::Lock,
        }
    }

    /// Encodes the body (without the header).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Create(_, r) => r.encode(out),
            Request::CreateTtl(r) => r.encode(out),
            Request::Delete(r) => r.encode(out),
            Request::Exists(r)
            | Request::GetData(r)
            | Request::GetChildren(r)
            | Request::GetChildren2(r) => r.encode(out),
            Request::SetData(r) => r.encode(out),
            Request::GetAcl(r)
            | Request::Sync(r)
            | Request::GetEphemerals(r)
            | Request::GetAllChildrenNumber(r) => r.encode(out),
            Request::SetAcl(r) => r.encode(out),
            Request::Ping | Request::WhoAmI | Request::CloseSession => {}
            Request::Check(r) => r.encode(out),
            Request::Multi(ops) | Request::MultiRead(ops) => encode_multi(ops, out),
            Request::Reconfig(r) => r.encode(out),
            Request::CheckWatches(r) | Request::RemoveWatches(r) => r.encode(out),
            Request::Auth(r) => r.encode(out),
            Request::SetWatches(r) => r.encode(out),
            Request::Sasl(r) => r.encode(out),
            Request::AddWatch(r) => r.encode(out),
            Request::Lock(r) => r.encode(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_opcode_is_not_an_error() {
        assert_eq!(
            Request::decode(999, &mut Reader::new(&[])),
            Ok(Decoded::UnknownOp(999))
        );
    }

    #[test]
    fn encode_decode_round_trip() {
        let reqs = vec![
            Request::Create(
                OpCode::Create,
                CreateRequest {
                    path: "/x".into(),
                    data: Some(vec![1, 2]),
                    acl: Acl::open_unsafe(),
                    flags: 3,
                },
            ),
            Request::GetData(PathWatchRequest {
                path: "/x".into(),
                watch: true,
            }),
            Request::Ping,
            Request::AddWatch(AddWatchRequest {
                path: "/".into(),
                mode: 1,
            }),
        ];
        for req in reqs {
            let mut b = Vec::new();
            req.encode(&mut b);
            let mut r = Reader::new(&b);
            assert_eq!(
                Request::decode(req.op_code().code(), &mut r),
                Ok(Decoded::Request(req))
            );
            assert!(r.is_empty());
        }
    }
}
