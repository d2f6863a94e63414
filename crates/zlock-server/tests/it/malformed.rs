//! Malformed and hostile input against an in-process server.
//!
//! Every case sends something a well-behaved client never would (oversized or negative
//! frame lengths, truncated frames, garbage, requests before the handshake, unknown
//! opcodes, invalid paths, silence, absurd vector counts) and then checks that:
//! - the server answered the way ZooKeeper does (an error reply, or closing that one
//!   connection),
//! - a fresh session still works (reads and a write round trip), and
//! - the tree is exactly as before (every node's data and Stat compared).
//!
//! No assertion depends on timing; waits are bounded only so that a hang fails.

use std::collections::BTreeMap;

use crate::common;
use crate::common::rawclient::{
    connect_frame, create_req, delete_req, expect_closed, finish_sending, get_children_req,
    get_data_req, handshake, request_frame, send_bytes, set_data_req, RawClient,
};
use rand::{Rng, SeedableRng};
use tokio::net::TcpStream;
use zlock_proto::frame::DEFAULT_MAX_PACKET;
use zlock_proto::jute::Writer;
use zlock_proto::records::{PathWatchRequest, Stat, XID_SET_WATCHES};
use zlock_proto::{OpCode, Request};
use zlock_testkit::{require, Peer, TestServer};

type Tree = BTreeMap<String, (Vec<u8>, Stat)>;

const BAD_ARGUMENTS: i32 = -8;
const UNIMPLEMENTED: i32 = -6;
const NO_NODE: i32 = -101;

/// Starts a server and creates the nodes whose state every case compares.
async fn start_with(tune: impl FnOnce(&mut zlock_server::ServerConfig)) -> (TestServer, Tree) {
    let server = TestServer::start_with(tune).await.expect("server starts");
    let c = RawClient::connect(server.addr).await.unwrap();
    for (p, d) in [
        ("/m", "m"),
        ("/m/a", "a"),
        ("/m/b", "b"),
        ("/m/a/deep", "deep"),
        ("/a", "a-root"),
        ("/scratch", ""),
    ] {
        assert!(c.create(p, d.as_bytes()).await.unwrap().is_ok(), "{p}");
    }
    assert!(c.set_data("/m/b", b"b2", -1).await.unwrap().is_ok());
    let tree = c.dump_tree("/").await.unwrap();
    c.close_session().await.unwrap();
    (server, tree)
}

async fn start() -> (TestServer, Tree) {
    start_with(|_| {}).await
}

/// A fresh session works and the tree equals `before`. Then a write round trip (in
/// /scratch, which it leaves as it found it apart from Stat counters); returns the tree
/// after that, for the next comparison.
async fn healthy(server: &TestServer, before: &Tree, after_what: &str) -> Tree {
    let c = RawClient::connect(server.addr)
        .await
        .unwrap_or_else(|e| panic!("after {after_what}: no fresh session: {e}"));
    let now = c.dump_tree("/").await.unwrap();
    assert_eq!(&now, before, "after {after_what}: the tree changed");
    let r = c.create("/scratch/probe", b"p").await.unwrap();
    assert!(r.is_ok(), "after {after_what}: create failed: {}", r.err);
    assert_eq!(
        c.get_data("/scratch/probe").await.unwrap().unwrap().0,
        b"p",
        "after {after_what}"
    );
    assert!(c.delete("/scratch/probe", 0).await.unwrap().is_ok());
    let tree = c.dump_tree("/").await.unwrap();
    c.close_session().await.unwrap();
    tree
}

fn len_prefix(len: i32) -> Vec<u8> {
    len.to_be_bytes().to_vec()
}

/// Frame lengths the server must refuse: over the packet limit or negative.
const BAD_LENGTHS: [i32; 6] = [
    i32::MAX,                        // 0x7fffffff
    DEFAULT_MAX_PACKET as i32 + 1,   // just over jute.maxbuffer
    DEFAULT_MAX_PACKET as i32 + 100, // a little more
    -1,
    -5,
    i32::MIN,
];

#[tokio::test]
async fn bad_frame_lengths_before_handshake() {
    let (server, mut tree) = start().await;
    for len in BAD_LENGTHS {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let mut bytes = len_prefix(len);
        bytes.extend_from_slice(&[0u8; 64]);
        send_bytes(&mut s, &bytes).await.unwrap();
        expect_closed(&mut s, &format!("handshake frame length {len:#x}")).await;
        tree = healthy(&server, &tree, &format!("handshake length {len:#x}")).await;
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn bad_frame_lengths_after_handshake() {
    let (server, mut tree) = start().await;
    for len in BAD_LENGTHS {
        let c = RawClient::connect(server.addr).await.unwrap();
        // A normal request first: the connection is fine up to the bad frame.
        assert!(c.get_data("/m").await.unwrap().is_ok());
        let mut bytes = len_prefix(len);
        bytes.extend_from_slice(&[0u8; 64]);
        c.write_raw(&bytes).await.unwrap();
        c.wait_closed(&format!("request frame length {len:#x}"))
            .await;
        tree = healthy(&server, &tree, &format!("request length {len:#x}")).await;
    }
    server.stop().await.unwrap();
}

/// The limit itself is allowed: a frame of exactly jute.maxbuffer bytes is a request.
#[tokio::test]
async fn frame_of_exactly_the_limit_is_served() {
    let (server, tree) = start().await;
    let c = RawClient::connect(server.addr).await.unwrap();
    // header (8) + path (4 + n) + watch (1) = DEFAULT_MAX_PACKET
    let n = DEFAULT_MAX_PACKET - 13;
    let path = format!("/{}", "x".repeat(n - 1));
    let req = Request::Exists(PathWatchRequest { path, watch: false });
    let mut body = Vec::new();
    req.encode(&mut body);
    let f = request_frame(1_000_000, OpCode::Exists.code(), &body);
    assert_eq!(f.len(), 4 + DEFAULT_MAX_PACKET);
    let p = c.send(&req).await.unwrap();
    let r = tokio::time::timeout(common::rawclient::STUCK, p.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.err, NO_NODE);
    // Still usable.
    assert_eq!(c.get_data("/m/a").await.unwrap().unwrap().0, b"a");
    c.close_session().await.unwrap();
    healthy(&server, &tree, "a frame of exactly the limit").await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn truncated_frames_then_close() {
    let (server, mut tree) = start().await;
    // Before the handshake: a ConnectRequest frame cut in the middle.
    let full = connect_frame(30_000);
    for cut in [1, 3, 4, 10, full.len() - 1] {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        send_bytes(&mut s, &full[..cut]).await.unwrap();
        drop(s);
        tree = healthy(&server, &tree, &format!("handshake cut at {cut}")).await;
    }
    // After the handshake: a request frame cut in the middle, then the client leaves.
    let mut body = Vec::new();
    create_req("/m/c", b"never").encode(&mut body);
    let full = request_frame(7, OpCode::Create.code(), &body);
    for cut in [2, 4, 9, full.len() - 1] {
        let c = RawClient::connect(server.addr).await.unwrap();
        c.write_raw(&full[..cut]).await.unwrap();
        drop(c);
        tree = healthy(&server, &tree, &format!("request cut at {cut}")).await;
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn garbage_bytes() {
    let seed: u64 = rand::random();
    println!("garbage seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (server, mut tree) = start().await;
    for round in 0..6 {
        let mut junk = vec![0u8; 4096];
        rng.fill(&mut junk[..]);
        // High bit set: a negative frame length, whatever follows.
        junk[0] |= 0x80;
        // Before the handshake.
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        send_bytes(&mut s, &junk).await.unwrap();
        expect_closed(&mut s, "garbage before the handshake").await;
        tree = healthy(&server, &tree, &format!("garbage #{round} (seed {seed})")).await;

        // After the handshake, as a bad length.
        let c = RawClient::connect(server.addr).await.unwrap();
        c.write_raw(&junk).await.unwrap();
        c.wait_closed("garbage after the handshake").await;
        drop(c);

        // After the handshake, inside well-formed frames: the server may answer
        // (an unknown opcode) or close (a body that does not decode); either way the
        // tree must not change.
        let c = RawClient::connect(server.addr).await.unwrap();
        let mut framed = Vec::new();
        for chunk in junk.chunks(200) {
            zlock_proto::frame::encode(chunk, &mut framed);
        }
        let _ = c.write_raw(&framed).await;
        drop(c);
        tree = healthy(
            &server,
            &tree,
            &format!("framed garbage #{round} (seed {seed})"),
        )
        .await;
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn request_before_handshake() {
    let (server, mut tree) = start().await;
    let mut frames = Vec::new();
    for path in ["/m/a".to_owned(), format!("/{}", "x".repeat(40))] {
        let mut body = Vec::new();
        get_data_req(&path).encode(&mut body);
        frames.push(request_frame(1, OpCode::GetData.code(), &body));
    }
    let mut body = Vec::new();
    create_req(&format!("/m/{}", "y".repeat(40)), b"z").encode(&mut body);
    frames.push(request_frame(1, OpCode::Create.code(), &body));
    for (i, f) in frames.iter().enumerate() {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        send_bytes(&mut s, f).await.unwrap();
        // Whatever the server makes of it (a truncated or refused handshake), nothing
        // is executed; once we stop sending, it closes.
        finish_sending(&mut s).await.unwrap();
        expect_closed(&mut s, "request before handshake").await;
        tree = healthy(
            &server,
            &tree,
            &format!("request #{i} before the handshake"),
        )
        .await;
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn truncated_request_after_handshake() {
    let (server, mut tree) = start().await;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // An empty frame: not even a header.
    cases.push(("empty frame", vec![0, 0, 0, 0]));
    // Three bytes: a header cut short.
    cases.push(("short header", {
        let mut f = Vec::new();
        zlock_proto::frame::encode(&[0, 0, 1], &mut f);
        f
    }));
    // A well-framed getData whose path claims 100 bytes but carries 2.
    cases.push(("short path", {
        let mut body = Vec::new();
        body.write_i32(100);
        body.extend_from_slice(b"/m");
        request_frame(3, OpCode::GetData.code(), &body)
    }));
    // A create with its flags missing.
    cases.push(("create without flags", {
        let mut body = Vec::new();
        create_req("/m/z", b"z").encode(&mut body);
        body.truncate(body.len() - 4);
        request_frame(3, OpCode::Create.code(), &body)
    }));
    // A setData with its version missing.
    cases.push(("setData without version", {
        let mut body = Vec::new();
        set_data_req("/m/a", b"evil", -1).encode(&mut body);
        body.truncate(body.len() - 2);
        request_frame(3, OpCode::SetData.code(), &body)
    }));
    // zlock's native lock (1001) cut short inside its last field.
    cases.push(("lock request cut short", {
        let req = zlock_proto::records::LockRequest {
            path: "/m/lock".into(),
            prefix: "_c_x-lock-".into(),
            data: Some(Vec::new()),
            acl: zlock_proto::records::Acl::open_unsafe(),
            mode: 0,
            leases: 1,
            flags: 0,
            release: "/m/lock/x".into(),
            ..zlock_proto::records::LockRequest::default()
        };
        let mut body = zlock_proto::Record::to_bytes(&req);
        body.truncate(body.len() - 3);
        request_frame(3, OpCode::Lock.code(), &body)
    }));
    for (what, f) in cases {
        let c = RawClient::connect(server.addr).await.unwrap();
        c.write_raw(&f).await.unwrap();
        c.wait_closed(what).await;
        drop(c);
        tree = healthy(&server, &tree, what).await;
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_opcode_gets_unimplemented_and_connection_stays_usable() {
    let (server, tree) = start().await;
    let c = RawClient::connect(server.addr).await.unwrap();
    for op in [999, 23, 108, 1000, i32::MAX, i32::MIN, -100, 0, 20, -10] {
        let r = c
            .send_raw(op, b"trailing body bytes")
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(r.err, UNIMPLEMENTED, "opcode {op}");
        assert!(r.body.is_empty(), "opcode {op}: no body with an error");
        assert_eq!(r.zxid, -1, "opcode {op}: ZooKeeper answers zxid -1");
        // The same connection keeps working.
        assert_eq!(c.get_data("/m/a").await.unwrap().unwrap().0, b"a");
    }
    // Pipelined: unknown, getData, unknown; replies in order.
    let p1 = c.send_raw(4242, &[]).await.unwrap();
    let p2 = c.send(&get_data_req("/m/b")).await.unwrap();
    let p3 = c.send_raw(4243, &[]).await.unwrap();
    let (x1, x2, x3) = (p1.xid, p2.xid, p3.xid);
    let r1 = p1.wait().await.unwrap();
    let r2 = p2.wait().await.unwrap();
    let r3 = p3.wait().await.unwrap();
    assert_eq!((r1.xid, r1.err), (x1, UNIMPLEMENTED));
    assert_eq!((r2.xid, r2.err), (x2, 0));
    assert_eq!((r3.xid, r3.err), (x3, UNIMPLEMENTED));
    assert!(!c.is_closed());
    c.close_session().await.unwrap();
    healthy(&server, &tree, "unknown opcodes").await;
    server.stop().await.unwrap();
}

/// Malformed paths. Not "": ZooKeeper's DataTree holds the root under "" as well as "/",
/// so reads of "" succeed there (see `empty_path_reads_the_root`).
const BAD_PATHS: [&str; 7] = ["a", "/a/", "//", "/a/../b", "/a\0b", "/m/./a", "/m//a"];

/// The error code of every op on every malformed path, asked on `c` (a server holding
/// /m and /a).
async fn bad_path_codes(c: &RawClient) -> Vec<(&'static str, &'static str, i32)> {
    let mut out = Vec::new();
    for p in BAD_PATHS {
        let reqs = [
            ("getData", get_data_req(p)),
            ("getChildren", get_children_req(p)),
            (
                "exists",
                Request::Exists(PathWatchRequest {
                    path: p.into(),
                    watch: false,
                }),
            ),
            ("setData", set_data_req(p, b"evil", -1)),
            ("create", create_req(p, b"evil")),
            ("delete", delete_req(p, -1)),
        ];
        for (op, req) in reqs {
            out.push((op, p, c.call(&req).await.unwrap().err));
        }
    }
    out
}

/// Malformed paths are refused and change nothing. ZooKeeper 3.8 does not answer
/// BadArguments everywhere: reads do not validate (a malformed path is just not found;
/// exists refuses only NUL), create and delete check only for a '/' and NUL before
/// looking the parent up. So the codes here are checked against what must hold in any
/// case, and compared one by one with Apache ZooKeeper's answers.
#[tokio::test]
async fn invalid_paths_are_refused() {
    let (server, tree) = start().await;
    let c = RawClient::connect(server.addr).await.unwrap();
    let codes = bad_path_codes(&c).await;
    for &(op, p, err) in &codes {
        assert!(
            err == BAD_ARGUMENTS || err == NO_NODE,
            "{op} {p:?}: err {err}"
        );
        let must_be_bad_arguments = match op {
            "setData" => true,
            "create" | "delete" => !p.contains('/') || p.contains('\0'),
            "exists" => p.contains('\0'),
            _ => false,
        };
        if must_be_bad_arguments {
            assert_eq!(err, BAD_ARGUMENTS, "{op} {p:?}");
        }
    }
    // Create under an existing parent with a trailing slash or an empty segment: the
    // full-path check applies.
    for p in ["/a/", "//"] {
        let r = c.create(p, b"evil").await.unwrap();
        assert_eq!(r.err, BAD_ARGUMENTS, "create {p:?}");
    }
    assert!(
        !c.is_closed(),
        "invalid paths must not close the connection"
    );
    assert_eq!(c.get_data("/m").await.unwrap().unwrap().0, b"m");
    c.close_session().await.unwrap();
    healthy(&server, &tree, "invalid paths").await;
    server.stop().await.unwrap();

    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let zk = tokio::task::spawn_blocking(zlock_testkit::ZooKeeper::start)
        .await
        .unwrap()
        .expect("Apache ZooKeeper starts");
    // ZooKeeper listens before it serves: a handshake sent too early is accepted and
    // never answered. Each attempt gets a few seconds; the JVM may take long to start
    // on a loaded machine.
    let deadline = std::time::Instant::now() + 2 * common::rawclient::STUCK;
    let z = loop {
        let attempt = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            RawClient::connect(zk.addr),
        )
        .await;
        match attempt {
            Ok(Ok(z)) => break z,
            Ok(Err(e)) => assert!(
                std::time::Instant::now() < deadline,
                "ZooKeeper never took a session: {e}"
            ),
            Err(_) => assert!(
                std::time::Instant::now() < deadline,
                "ZooKeeper never answered a handshake"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    for p in ["/m", "/a"] {
        let r = z.create(p, b"").await.unwrap();
        assert!(
            r.err == 0 || r.err == -110,
            "ZooKeeper create {p}: {}",
            r.err
        );
    }
    let zk_codes = bad_path_codes(&z).await;
    let diff: Vec<String> = codes
        .iter()
        .zip(&zk_codes)
        .filter(|(a, b)| a != b)
        .map(|((op, p, ours), (_, _, theirs))| {
            format!("{op} {p:?}: zlock {ours}, ZooKeeper {theirs}")
        })
        .collect();
    assert!(
        diff.is_empty(),
        "differs from ZooKeeper 3.8:\n{}",
        diff.join("\n")
    );
}

/// ZooKeeper 3.8 answers reads of the empty path with the root (its DataTree maps ""
/// to the root node; observed: getData, getChildren and exists of "" return err 0 on
/// 3.8.0). Java and kazoo clients refuse "" before sending it, so only a raw client sees
/// the difference; writes of "" are BadArguments on both.
#[tokio::test]
async fn empty_path_reads_the_root() {
    let (server, tree) = start().await;
    let c = RawClient::connect(server.addr).await.unwrap();
    let root = c.get_data("/").await.unwrap().unwrap();
    assert_eq!(c.get_data("").await.unwrap(), Ok(root.clone()));
    assert_eq!(
        c.get_children("").await.unwrap(),
        c.get_children("/").await.unwrap()
    );
    assert_eq!(c.exists("").await.unwrap(), Ok(root.1));
    for (op, req) in [
        ("setData", set_data_req("", b"x", -1)),
        ("create", create_req("", b"x")),
        ("delete", delete_req("", -1)),
    ] {
        assert_eq!(c.call(&req).await.unwrap().err, BAD_ARGUMENTS, "{op} \"\"");
    }
    c.close_session().await.unwrap();
    healthy(&server, &tree, "the empty path").await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn silent_clients_are_closed() {
    let (server, mut tree) = start_with(|c| c.max_session_timeout_ms = Some(500)).await;
    // Nothing at all.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    expect_closed(&mut s, "a client that sends nothing").await;
    tree = healthy(&server, &tree, "a silent client").await;
    // Two bytes of a length, then silence.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    send_bytes(&mut s, &[0, 0]).await.unwrap();
    expect_closed(&mut s, "a client that stops inside the length").await;
    tree = healthy(&server, &tree, "a client silent after 2 bytes").await;
    // Half a handshake, then silence.
    let f = connect_frame(30_000);
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    send_bytes(&mut s, &f[..20]).await.unwrap();
    expect_closed(&mut s, "a client that stops inside the handshake").await;
    healthy(&server, &tree, "a client silent inside the handshake").await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn huge_counts_inside_valid_frames() {
    let (server, mut tree) = start().await;
    let huge = [i32::MAX, 0x00ff_ffff, 1000];
    for n in huge {
        let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
        // create with an ACL vector of n entries and none present.
        let mut body = Vec::new();
        body.write_string("/m/huge");
        body.write_buffer(b"d");
        body.write_i32(n);
        cases.push((
            format!("create acl count {n}"),
            request_frame(5, OpCode::Create.code(), &body),
        ));
        // setWatches with n data watches.
        let mut body = Vec::new();
        body.write_i64(0);
        body.write_i32(n);
        cases.push((
            format!("setWatches count {n}"),
            request_frame(XID_SET_WATCHES, OpCode::SetWatches.code(), &body),
        ));
        // getData whose path claims n bytes.
        let mut body = Vec::new();
        body.write_i32(n);
        body.extend_from_slice(b"/m");
        cases.push((
            format!("path length {n}"),
            request_frame(5, OpCode::GetData.code(), &body),
        ));
        // setData whose data claims n bytes.
        let mut body = Vec::new();
        body.write_string("/m/a");
        body.write_i32(n);
        body.extend_from_slice(b"evil");
        cases.push((
            format!("data length {n}"),
            request_frame(5, OpCode::SetData.code(), &body),
        ));
        for (what, f) in cases {
            let c = RawClient::connect(server.addr).await.unwrap();
            c.write_raw(&f).await.unwrap();
            c.wait_closed(&what).await;
            drop(c);
            tree = healthy(&server, &tree, &what).await;
        }
        // A ConnectRequest whose password claims n bytes.
        let mut body = Vec::new();
        body.write_i32(0);
        body.write_i64(0);
        body.write_i32(30_000);
        body.write_i64(0);
        body.write_i32(n);
        let mut f = Vec::new();
        zlock_proto::frame::encode(&body, &mut f);
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        send_bytes(&mut s, &f).await.unwrap();
        expect_closed(&mut s, "huge passwd length").await;
        tree = healthy(&server, &tree, &format!("passwd length {n}")).await;
    }
    // A multi that never ends: headers and creates until the frame runs out.
    let mut body = Vec::new();
    for i in 0..50 {
        body.write_i32(OpCode::Create.code());
        body.write_bool(false);
        body.write_i32(-1);
        create_req(&format!("/m/multi{i}"), b"x").encode(&mut body);
    }
    let c = RawClient::connect(server.addr).await.unwrap();
    c.write_raw(&request_frame(9, OpCode::Multi.code(), &body))
        .await
        .unwrap();
    c.wait_closed("unterminated multi").await;
    drop(c);
    healthy(&server, &tree, "an unterminated multi").await;
    server.stop().await.unwrap();
}

/// The plain handshake helper agrees with RawClient (a smoke test of the test client).
#[tokio::test]
async fn raw_handshake_smoke() {
    let (server, tree) = start().await;
    let (s, resp) = handshake(server.addr).await.unwrap();
    assert!(resp.time_out > 0 && resp.session_id != 0);
    drop(s);
    healthy(&server, &tree, "a plain handshake").await;
    server.stop().await.unwrap();
}
