//! The decoding harnesses behind the fuzz targets, and the seed corpus they start from.
//!
//! This file is also compiled into `crates/zlock-server/tests/it/fuzz_corpus.rs` (through a
//! `#[path]` module), so the corpus replay on every `cargo test` runs exactly the code the
//! fuzzer runs. Keep it free of anything but `zlock_proto`, `zlock_core` and `std`.
//!
//! Properties checked, beyond "never panics":
//! - a decoded request, re-encoded, decodes to the same request;
//! - a decoded ConnectRequest and a decoded Txn round-trip the same way.

use zlock_proto::frame::{self, DEFAULT_MAX_PACKET};
use zlock_proto::jute::Writer;
use zlock_proto::records::{
    Acl, AuthPacket, CheckVersionRequest, ConnectRequest, CreateRequest, CreateTtlRequest,
    DeleteRequest, Id, MultiOp, PathRequest, PathWatchRequest, RequestHeader, SetDataRequest,
    SetWatches2, XID_AUTH, XID_PING, XID_SET_WATCHES,
};
use zlock_proto::{Decoded, OpCode, Reader, Record, Request};

/// Frames in `data` (a client's byte stream): each body decoded as a request, the first
/// also as a ConnectRequest. Stops at the first frame error, as the server does.
pub fn frame_decode(data: &[u8]) {
    for max in [DEFAULT_MAX_PACKET, 64] {
        let mut rest = data;
        let mut first = true;
        while let Ok(Some((n, body))) = frame::parse(rest, max) {
            assert!(n >= 4 && n <= rest.len() && body.len() == n - 4);
            if first {
                connect_decode(body);
                first = false;
            }
            request_decode(body);
            rest = &rest[n..];
        }
    }
    // The raw bytes as one body, too (what a frame holding them would carry).
    connect_decode(data);
    request_decode(data);
}

/// One frame body as a ConnectRequest.
pub fn connect_decode(body: &[u8]) {
    if let Ok(c) = ConnectRequest::decode(&mut Reader::new(body)) {
        let again = ConnectRequest::decode(&mut Reader::new(&c.to_bytes()))
            .expect("a re-encoded ConnectRequest decodes");
        assert_eq!(again, c, "ConnectRequest round trip");
    }
}

/// One frame body as `RequestHeader` + request.
pub fn request_decode(body: &[u8]) {
    let mut r = Reader::new(body);
    let Ok(h) = RequestHeader::decode(&mut r) else {
        return;
    };
    if let Ok(Decoded::Request(req)) = Request::decode(h.op_type, &mut r) {
        let mut out = Vec::new();
        req.encode(&mut out);
        let mut r2 = Reader::new(&out);
        let again = Request::decode(req.op_code().code(), &mut r2);
        assert_eq!(again, Ok(Decoded::Request(req)), "request round trip");
        assert!(r2.is_empty(), "re-encoded request decodes to its end");
    }
}

/// A WAL payload as a Txn.
pub fn txn_decode(data: &[u8]) {
    if let Ok(t) = zlock_core::Txn::decode(data) {
        let again = zlock_core::Txn::decode(&t.to_bytes()).expect("a re-encoded Txn decodes");
        assert_eq!(again, t, "Txn round trip");
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(body, &mut out);
    out
}

fn request(xid: i32, req: &Request) -> Vec<u8> {
    let mut body = RequestHeader {
        xid,
        op_type: req.op_code().code(),
    }
    .to_bytes();
    req.encode(&mut body);
    framed(&body)
}

fn raw_request(xid: i32, op: i32, rest: &[u8]) -> Vec<u8> {
    let mut body = RequestHeader { xid, op_type: op }.to_bytes();
    body.extend_from_slice(rest);
    framed(&body)
}

fn create(path: &str, data: &[u8], flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        acl: Acl::open_unsafe(),
        flags,
    }
}

fn path_watch(path: &str, watch: bool) -> PathWatchRequest {
    PathWatchRequest {
        path: path.into(),
        watch,
    }
}

/// A fixed pseudo-random byte string (xorshift), so the corpus is reproducible.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The hand-made seed corpus of `frame_decode`: name and bytes, valid and invalid.
pub fn seed_frames() -> Vec<(&'static str, Vec<u8>)> {
    let connect = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        time_out: 30_000,
        session_id: 0,
        passwd: vec![0; 16],
        read_only: Some(false),
        features: None,
    };
    let mut connect44 = connect.clone();
    connect44.read_only = None;

    let mut pipelined = Vec::new();
    pipelined.extend(request(
        1,
        &Request::Create(OpCode::Create, create("/fz", b"v", 0)),
    ));
    pipelined.extend(request(
        2,
        &Request::SetData(SetDataRequest {
            path: "/fz".into(),
            data: Some(b"w".to_vec()),
            version: -1,
        }),
    ));
    pipelined.extend(request(3, &Request::GetChildren(path_watch("/", true))));
    pipelined.extend(request(
        4,
        &Request::Delete(DeleteRequest {
            path: "/fz".into(),
            version: 1,
        }),
    ));
    pipelined.extend(raw_request(XID_PING, OpCode::Ping.code(), &[]));

    let multi = request(
        5,
        &Request::Multi(vec![
            MultiOp::Create(OpCode::Create2, create("/fzm", b"", 0)),
            MultiOp::Check(CheckVersionRequest {
                path: "/fzm".into(),
                version: 0,
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/fzm".into(),
                data: Some(b"x".to_vec()),
                version: 0,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/fzm".into(),
                version: -1,
            }),
        ]),
    );

    let watches = request(
        XID_SET_WATCHES,
        &Request::SetWatches(SetWatches2 {
            relative_zxid: 7,
            data_watches: vec!["/a".into()],
            exist_watches: vec!["/b".into(), "/c".into()],
            child_watches: vec!["/".into()],
            persistent_watches: vec![],
            persistent_recursive_watches: vec!["/r".into()],
        }),
    );

    let mut misc = Vec::new();
    misc.extend(request(
        XID_AUTH,
        &Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"user:pass".to_vec(),
        }),
    ));
    misc.extend(request(
        6,
        &Request::CreateTtl(CreateTtlRequest {
            path: "/fzttl".into(),
            data: Some(vec![]),
            acl: vec![Acl {
                perms: 31,
                id: Id::new("world", "anyone"),
            }],
            flags: 5,
            ttl: 60_000,
        }),
    ));
    misc.extend(request(
        7,
        &Request::GetAllChildrenNumber(PathRequest { path: "/".into() }),
    ));
    misc.extend(request(8, &Request::WhoAmI));
    misc.extend(request(9, &Request::Exists(path_watch("/nope", true))));
    misc.extend(request(10, &Request::CloseSession));

    let mut truncated = request(11, &Request::GetData(path_watch("/some/path", false)));
    truncated.truncate(truncated.len() - 5);

    let mut huge_vec_body = Vec::new();
    huge_vec_body.write_string("/fzhuge");
    huge_vec_body.write_buffer(b"d");
    huge_vec_body.write_i32(i32::MAX);

    let mut bad_path = Vec::new();
    bad_path.write_i32(0x7fff_fff0);
    bad_path.extend_from_slice(b"/x");

    let mut bad_utf8 = Vec::new();
    bad_utf8.write_buffer(&[b'/', 0xff, 0xfe]);
    bad_utf8.write_bool(false);

    let mut over = 0x7fff_ffffi32.to_be_bytes().to_vec();
    over.extend_from_slice(&[0; 16]);
    let mut just_over = ((DEFAULT_MAX_PACKET + 1) as i32).to_be_bytes().to_vec();
    just_over.extend_from_slice(&[0; 16]);
    let mut negative = (-5i32).to_be_bytes().to_vec();
    negative.extend_from_slice(&[0; 16]);

    vec![
        ("connect_45", framed(&connect.to_bytes())),
        ("connect_44", framed(&connect44.to_bytes())),
        (
            "get_data",
            request(1, &Request::GetData(path_watch("/a", true))),
        ),
        ("pipelined_writes", pipelined),
        ("multi", multi),
        ("set_watches", watches),
        ("misc_ops", misc),
        ("unknown_opcode", raw_request(12, 999, b"trailing")),
        ("truncated_request", truncated),
        (
            "huge_acl_count",
            raw_request(13, OpCode::Create.code(), &huge_vec_body),
        ),
        (
            "huge_path_length",
            raw_request(14, OpCode::GetData.code(), &bad_path),
        ),
        (
            "invalid_utf8_path",
            raw_request(15, OpCode::GetData.code(), &bad_utf8),
        ),
        ("length_0x7fffffff", over),
        ("length_just_over_limit", just_over),
        ("negative_length", negative),
        ("empty_frame", vec![0, 0, 0, 0]),
        ("garbage", noise(0x5eed, 512)),
        ("framed_garbage", framed(&noise(0xbad, 300))),
    ]
}

/// The hand-made seed corpus of `txn_decode`.
pub fn seed_txns() -> Vec<(&'static str, Vec<u8>)> {
    use zlock_core::{MemberId, Origin, SessionId, Txn, TxnBody};
    let origin = Origin {
        member: MemberId(1),
        session: SessionId(0x1234),
        xid: 7,
    };
    let txn = |time_ms, body| Txn::new(origin, time_ms, body);
    let create_txn = Txn::request(
        origin,
        1_700_000_000_000,
        vec![Id::new("ip", "127.0.0.1")].into(),
        Request::Create(OpCode::Create2, create("/t", b"data", 3)),
    );
    let multi = Txn::request(
        origin,
        1,
        vec![].into(),
        Request::Multi(vec![
            MultiOp::Create(OpCode::Create, create("/m", b"", 0)),
            MultiOp::Delete(DeleteRequest {
                path: "/m".into(),
                version: -1,
            }),
        ]),
    );
    let mut bad_op = create_txn.to_bytes();
    // The opcode follows version, tag, origin (member, session, xid), time and the auth
    // vector.
    let op_at = 2 + 8 + 8 + 4 + 8 + 4 + (4 + 2 + 4 + 9);
    assert_eq!(
        bad_op[op_at..op_at + 4],
        OpCode::Create2.code().to_be_bytes()
    );
    bad_op[op_at..op_at + 4].copy_from_slice(&999i32.to_be_bytes());
    let mut truncated = multi.to_bytes();
    truncated.truncate(truncated.len() - 3);
    // What an older zlock logged: a Txn of its proposer's clock (encoding version 2).
    let mut proposer_time = txn(
        9,
        TxnBody::CloseSession {
            session_id: SessionId(0x1234),
        },
    );
    proposer_time.clock = zlock_core::TxnClock::Proposer;
    vec![
        ("proposer_time", proposer_time.to_bytes()),
        (
            "create_session",
            txn(
                5,
                TxnBody::CreateSession {
                    passwd: vec![7; 16],
                    timeout_ms: 4000,
                },
            )
            .to_bytes(),
        ),
        (
            "close_session",
            txn(
                5,
                TxnBody::CloseSession {
                    session_id: SessionId(42),
                },
            )
            .to_bytes(),
        ),
        ("create", create_txn.to_bytes()),
        ("multi", multi.to_bytes()),
        (
            "delete_expired",
            txn(
                5,
                TxnBody::DeleteExpired {
                    paths: vec!["/c".into(), "/ttl".into()],
                },
            )
            .to_bytes(),
        ),
        ("unknown_opcode", bad_op),
        ("truncated", truncated),
        ("bad_version", vec![9, 1, 0, 0]),
        ("bad_tag", vec![2, 77, 0, 0, 0, 0]),
        ("version_1", vec![1, 2, 0, 0, 0, 0, 0, 0, 0, 42]),
        ("empty", vec![]),
    ]
}
