//! multi (14) and multiRead (22).
//!
//! Request: repeated `MultiHeader{type, done=false, err=-1}` + that op's record, closed by
//! `MultiHeader{-1, true, -1}`. Reply: per op a `MultiHeader{type, false, err}` + result,
//! closed the same way. A failed multi answers every op with an error entry (type -1):
//! 0 for ops before the failing one, its code for the failing op, -2 after it.

use super::{
    CheckVersionRequest, Create2Response, CreateRequest, CreateResponse, CreateTtlRequest,
    DeleteRequest, ErrorResponse, GetChildrenResponse, GetDataResponse, PathWatchRequest,
    SetDataRequest, Stat, StatResponse,
};
use crate::jute::{DecodeError, Reader, Record, Writer};
use crate::op_code::OpCode;
use crate::record;

record! {
    pub struct MultiHeader {
        pub op_type: i32,
        pub done: bool,
        pub err: i32,
    }
}

/// One operation inside a multi or multiRead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// create (1), create2 (15) or createContainer (19).
    Create(OpCode, CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    Check(CheckVersionRequest),
    GetData(PathWatchRequest),
    GetChildren(PathWatchRequest),
}

impl MultiOp {
    pub fn op_code(&self) -> OpCode {
        match self {
            MultiOp::Create(op, _) => *op,
            MultiOp::CreateTtl(_) => OpCode::CreateTtl,
            MultiOp::Delete(_) => OpCode::Delete,
            MultiOp::SetData(_) => OpCode::SetData,
            MultiOp::Check(_) => OpCode::Check,
            MultiOp::GetData(_) => OpCode::GetData,
            MultiOp::GetChildren(_) => OpCode::GetChildren,
        }
    }

    pub fn path(&self) -> &str {
        match self {
            MultiOp::Create(_, r) => &r.path,
            MultiOp::CreateTtl(r) => &r.path,
            MultiOp::Delete(r) => &r.path,
            MultiOp::SetData(r) => &r.path,
            MultiOp::Check(r) => &r.path,
            MultiOp::GetData(r) | MultiOp::GetChildren(r) => &r.path,
        }
    }

    pub fn is_read(&self) -> bool {
        matches!(self, MultiOp::GetData(_) | MultiOp::GetChildren(_))
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        match self {
            MultiOp::Create(_, r) => r.encode(out),
            MultiOp::CreateTtl(r) => r.encode(out),
            MultiOp::Delete(r) => r.encode(out),
            MultiOp::SetData(r) => r.encode(out),
            MultiOp::Check(r) => r.encode(out),
            MultiOp::GetData(r) | MultiOp::GetChildren(r) => r.encode(out),
        }
    }
}

const END: MultiHeader = MultiHeader {
    op_type: -1,
    done: true,
    err: -1,
};

/// Encodes a multi request body.
pub fn encode_multi(ops: &[MultiOp], out: &mut Vec<u8>) {
    for op in ops {
        MultiHeader {
            op_type: op.op_code().code(),
            done: false,
            err: -1,
        }
        .encode(out);
        op.encode_body(out);
    }
    END.encode(out);
}

/// Decodes a multi or multiRead request body.
pub fn decode_multi(r: &mut Reader<'_>) -> Result<Vec<MultiOp>, DecodeError> {
    let mut ops = Vec::new();
    loop {
        let h = MultiHeader::decode(r)?;
        if h.done {
            return Ok(ops);
        }
        let op = match OpCode::from_i32(h.op_type) {
            Some(c @ (OpCode::Create | OpCode::Create2 | OpCode::CreateContainer)) => {
                MultiOp::Create(c, CreateRequest::decode(r)?)
            }
            Some(OpCode::CreateTtl) => MultiOp::CreateTtl(CreateTtlRequest::decode(r)?),
            Some(OpCode::Delete) => MultiOp::Delete(DeleteRequest::decode(r)?),
            Some(OpCode::SetData) => MultiOp::SetData(SetDataRequest::decode(r)?),
            Some(OpCode::Check) => MultiOp::Check(CheckVersionRequest::decode(r)?),
            Some(OpCode::GetData) => MultiOp::GetData(PathWatchRequest::decode(r)?),
            Some(OpCode::GetChildren) => MultiOp::GetChildren(PathWatchRequest::decode(r)?),
            _ => {
                return Err(DecodeError::InvalidValue {
                    field: "multi op type",
                    value: i64::from(h.op_type),
                })
            }
        };
        ops.push(op);
    }
}

/// One entry of a multi or multiRead reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// Answer to create (1).
    Create(String),
    /// Answer to create2, createContainer and createTTL (header type 15).
    Create2(String, Stat),
    Delete,
    SetData(Stat),
    Check,
    GetData(Option<Vec<u8>>, Stat),
    GetChildren(Vec<String>),
    /// An error entry (header type -1); 0 for ops before the failing one in a failed multi.
    Error(i32),
}

/// Encodes a multi or multiRead reply body.
pub fn encode_multi_results(results: &[MultiResult], out: &mut Vec<u8>) {
    for res in results {
        let (ty, err) = match res {
            MultiResult::Create(_) => (OpCode::Create.code(), 0),
            MultiResult::Create2(..) => (OpCode::Create2.code(), 0),
            MultiResult::Delete => (OpCode::Delete.code(), 0),
            MultiResult::SetData(_) => (OpCode::SetData.code(), 0),
            MultiResult::Check => (OpCode::Check.code(), 0),
            MultiResult::GetData(..) => (OpCode::GetData.code(), 0),
            MultiResult::GetChildren(_) => (OpCode::GetChildren.code(), 0),
            MultiResult::Error(e) => (-1, *e),
        };
        MultiHeader {
            op_type: ty,
            done: false,
            err,
        }
        .encode(out);
        match res {
            MultiResult::Create(path) => CreateResponse { path: path.clone() }.encode(out),
            MultiResult::Create2(path, stat) => Create2Response {
                path: path.clone(),
                stat: stat.clone(),
            }
            .encode(out),
            MultiResult::Delete | MultiResult::Check => {}
            MultiResult::SetData(stat) => StatResponse { stat: stat.clone() }.encode(out),
            MultiResult::GetData(data, stat) => {
                out.write_opt_buffer(data.as_deref());
                stat.encode(out);
            }
            MultiResult::GetChildren(children) => GetChildrenResponse {
                children: children.clone(),
            }
            .encode(out),
            MultiResult::Error(e) => ErrorResponse { err: *e }.encode(out),
        }
    }
    END.encode(out);
}

/// Decodes a multi or multiRead reply body.
pub fn decode_multi_results(r: &mut Reader<'_>) -> Result<Vec<MultiResult>, DecodeError> {
    let mut results = Vec::new();
    loop {
        let h = MultiHeader::decode(r)?;
        if h.done {
            return Ok(results);
        }
        let res = match OpCode::from_i32(h.op_type) {
            Some(OpCode::Create) => MultiResult::Create(CreateResponse::decode(r)?.path),
            Some(OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl) => {
                let c = Create2Response::decode(r)?;
                MultiResult::Create2(c.path, c.stat)
            }
            Some(OpCode::Delete) => MultiResult::Delete,
            Some(OpCode::SetData) => MultiResult::SetData(StatResponse::decode(r)?.stat),
            Some(OpCode::Check) => MultiResult::Check,
            Some(OpCode::GetData) => {
                let g = GetDataResponse::decode(r)?;
                MultiResult::GetData(g.data, g.stat)
            }
            Some(OpCode::GetChildren) => {
                MultiResult::GetChildren(GetChildrenResponse::decode(r)?.children)
            }
            Some(OpCode::Error) => MultiResult::Error(ErrorResponse::decode(r)?.err),
            _ => {
                return Err(DecodeError::InvalidValue {
                    field: "multi result type",
                    value: i64::from(h.op_type),
                })
            }
        };
        results.push(res);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Acl;

    #[test]
    fn multi_round_trip() {
        let ops = vec![
            MultiOp::Create(
                OpCode::Create2,
                CreateRequest {
                    path: "/a".into(),
                    data: Some(b"x".to_vec()),
                    acl: Acl::open_unsafe(),
                    flags: 0,
                },
            ),
            MultiOp::Check(CheckVersionRequest {
                path: "/a".into(),
                version: 0,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/a".into(),
                version: -1,
            }),
        ];
        let mut b = Vec::new();
        encode_multi(&ops, &mut b);
        assert_eq!(decode_multi(&mut Reader::new(&b)).unwrap(), ops);

        let results = vec![
            MultiResult::Create2("/a".into(), Stat::default()),
            MultiResult::Error(-101),
            MultiResult::Delete,
        ];
        let mut b = Vec::new();
        encode_multi_results(&results, &mut b);
        assert_eq!(decode_multi_results(&mut Reader::new(&b)).unwrap(), results);
    }

    #[test]
    fn unknown_op_in_multi_is_an_error() {
        let mut b = Vec::new();
        MultiHeader {
            op_type: 99,
            done: false,
            err: -1,
        }
        .encode(&mut b);
        assert!(decode_multi(&mut Reader::new(&b)).is_err());
    }
}
