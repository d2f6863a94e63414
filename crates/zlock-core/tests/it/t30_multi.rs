//! multi (14) and multiRead (22). A multi takes one zxid, is all-or-nothing, answers
//! with reply header err 0, and on failure reports per op: 0 before the failing op, its
//! code, -2 (RuntimeInconsistency) after it (`PrepRequestProcessor` multi case,
//! `DataTree.processTxn` multi case). A failed multi fires no watch.

use zlock_proto::records::{
    event_type, perms, CreateTtlRequest, ErrorResponse, MultiHeader, MultiOp, MultiResult,
};
use zlock_proto::{OpCode, Reader, Record, Request};

use crate::harness::*;

#[test]
fn successful_multi_results_and_one_zxid() {
    let mut h = Harness::new();
    let s = h.session();
    h.tick(42);
    let (a, res) = h.multi(
        s,
        vec![
            m_create("/m", b"d", 0),
            m_create1("/m/a", 0),
            m_set("/m", b"dd", 0),
            m_check("/m", 1),
            m_delete("/m/a", 0),
            m_create("/m/s-", b"", flags::PERSISTENT_SEQUENTIAL),
        ],
    );
    assert_eq!(res.len(), 6);
    match &res[0] {
        MultiResult::Create2(p, st) => {
            assert_eq!(p, "/m");
            assert_eq!(st.czxid, a.zxid.0);
            assert_eq!(st.version, 0);
            assert_eq!(st.ctime, T0 + 42);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(res[1], MultiResult::Create("/m/a".into()));
    match &res[2] {
        MultiResult::SetData(st) => {
            assert_eq!(st.version, 1);
            assert_eq!(st.mzxid, a.zxid.0);
            assert_eq!(st.num_children, 1, "sees the create before it");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(res[3], MultiResult::Check);
    assert_eq!(res[4], MultiResult::Delete);
    match &res[5] {
        // Two creates under /m so far in this multi: the suffix is 1.
        MultiResult::Create2(p, _) => assert_eq!(p, "/m/s-0000000001"),
        other => panic!("{other:?}"),
    }
    let m = h.stat("/m");
    assert_eq!((m.czxid, m.mzxid, m.pzxid), (a.zxid.0, a.zxid.0, a.zxid.0));
    assert_eq!(m.version, 1);
    assert_eq!(h.children(s, "/m", false).unwrap(), vec!["s-0000000001"]);
    assert_eq!(h.get_data(s, "/m", false).unwrap().0, b"dd");
    check_invariants(&h.st);
}

#[test]
fn failed_multi_is_atomic_with_per_op_errors() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/keep");
    h.set_data_ok(s, "/keep", b"old");
    h.mk(s, "/q");
    let before = h.dump();
    let z = h.st.zxid.0;
    let (a, res) = h.multi(
        s,
        vec![
            m_create("/x", b"", 0),
            m_set("/keep", b"new", -1),
            m_delete("/q", -1),
            m_create("/q2/s-", b"", flags::PERSISTENT_SEQUENTIAL),
            m_create("/y", b"", 0),
            m_delete("/keep", -1),
        ],
    );
    assert_eq!(
        a.zxid.0,
        z + 1,
        "a failed multi still takes exactly one zxid"
    );
    assert_eq!(
        multi_errors(&res),
        vec![
            0,
            0,
            0,
            NO_NODE,
            RUNTIME_INCONSISTENCY,
            RUNTIME_INCONSISTENCY
        ]
    );
    assert_eq!(
        h.dump(),
        before,
        "nothing applied, every touched node restored"
    );
    assert!(a.events.is_empty());
    check_invariants(&h.st);
}

#[test]
fn failed_multi_restores_sequence_counters_and_deleted_nodes() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/q");
    h.create_ok(s, "/q/e", b"eph", flags::EPHEMERAL);
    let (_, res) = h.multi(
        s,
        vec![
            m_create("/q/s-", b"", flags::PERSISTENT_SEQUENTIAL),
            m_delete("/q/s-0000000001", -1),
            m_delete("/q/e", -1),
            m_delete("/q", -1),
            m_check("/", 99),
        ],
    );
    assert_eq!(multi_errors(&res), vec![0, 0, 0, 0, BAD_VERSION]);
    assert_eq!(h.st.tree.ephemerals_of(s), vec!["/q/e".to_string()]);
    assert_eq!(h.children(s, "/q", false).unwrap(), vec!["e"]);
    // The counter is back where it was: the next name is 1 (one create so far).
    let (p, _) = h.create_ok(s, "/q/s-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p, "/q/s-0000000001");
    check_invariants(&h.st);
}

#[test]
fn failing_op_codes_inside_a_multi() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/a");
    h.mk(s, "/a/c");
    h.create_ok(s, "/e", b"", flags::EPHEMERAL);
    let locked = vec![acl(perms::READ, "world", "anyone")];
    assert_eq!(h.write(s, create_with_acl("/ro", locked, 0)).reply.err, OK);
    let cases: Vec<(MultiOp, i32)> = vec![
        (m_create("/a", b"", 0), NODE_EXISTS),
        (m_create("/nope/x", b"", 0), NO_NODE),
        (m_create("/a/", b"", 0), BAD_ARGUMENTS),
        (m_create("/e/x", b"", 0), NO_CHILDREN_FOR_EPHEMERALS),
        (m_create("/ro/x", b"", 0), NO_AUTH),
        (m_create("/a/x", b"", 9), BAD_ARGUMENTS),
        (m_delete("/a", -1), NOT_EMPTY),
        (m_delete("/a/c", 3), BAD_VERSION),
        (m_delete("/zookeeper", -1), BAD_ARGUMENTS),
        (m_set("/ro", b"", -1), NO_AUTH),
        (m_set("/nope", b"", -1), NO_NODE),
        (m_check("/nope", 0), NO_NODE),
        (m_check("/a", 1), BAD_VERSION),
        (
            MultiOp::Create(
                OpCode::Create2,
                zlock_proto::records::CreateRequest {
                    path: "/z".into(),
                    data: Some(vec![]),
                    acl: vec![],
                    flags: 0,
                },
            ),
            INVALID_ACL,
        ),
    ];
    let before = h.dump();
    for (op, want) in cases {
        let what = format!("{op:?}");
        let (_, res) = h.multi(
            s,
            vec![m_create("/first", b"", 0), op, m_delete("/first", -1)],
        );
        assert_eq!(
            multi_errors(&res),
            vec![0, want, RUNTIME_INCONSISTENCY],
            "{what}"
        );
    }
    assert_eq!(h.dump(), before);
}

#[test]
fn multi_ops_see_each_other() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/old");
    let (_, res) = h.multi(
        s,
        vec![
            m_create("/a", b"", 0),
            m_create("/a/b", b"", 0),
            m_set("/a/b", b"x", 0),
            m_delete("/a/b", 1),
            m_delete("/old", 0),
            m_create("/old", b"again", 0),
            m_check("/old", 0),
        ],
    );
    assert!(
        !res.iter().any(|r| matches!(r, MultiResult::Error(_))),
        "{res:?}"
    );
    assert!(h.has("/a") && !h.has("/a/b"));
    assert_eq!(h.get_data(s, "/old", false).unwrap().0, b"again");
    check_invariants(&h.st);
}

#[test]
fn failed_multi_fires_no_watch_and_keeps_watches_armed() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    assert_eq!(h.exists(w, "/x", true), Err(NO_NODE));
    h.get_data(w, "/n", true).unwrap();
    h.children(w, "/", true).unwrap();
    let (a, res) = h.multi(
        s,
        vec![
            m_create("/x", b"", 0),
            m_set("/n", b"v", -1),
            m_create("/x", b"", 0),
        ],
    );
    assert_eq!(multi_errors(&res), vec![0, 0, NODE_EXISTS]);
    assert!(a.events.is_empty());
    // The watches are still there and fire on the real change.
    let a = h.create(s, "/x", b"", 0);
    assert_eq!(
        evs(&a),
        vec![
            ev(w, event_type::NODE_CREATED, "/x"),
            ev(w, event_type::NODE_CHILDREN_CHANGED, "/")
        ]
    );
    let a = h.set_data(s, "/n", b"v", -1);
    assert_eq!(evs(&a), vec![ev(w, event_type::NODE_DATA_CHANGED, "/n")]);
}

#[test]
fn successful_multi_fires_watches_in_op_order() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/w");
    h.get_data(w, "/w", true).unwrap();
    h.children(w, "/w", true).unwrap();
    assert_eq!(h.exists(w, "/w/a", true), Err(NO_NODE));
    let (a, _) = h.multi(
        s,
        vec![
            m_create("/w/a", b"", 0),
            m_set("/w", b"x", -1),
            m_create("/w/b", b"", 0),
        ],
    );
    assert_eq!(
        evs(&a),
        vec![
            ev(w, event_type::NODE_CREATED, "/w/a"),
            ev(w, event_type::NODE_CHILDREN_CHANGED, "/w"),
            ev(w, event_type::NODE_DATA_CHANGED, "/w"),
        ],
        "one-shot: the second create does not fire the child watch again"
    );
}

/// Reads `MultiHeader`s and bodies straight off the reply bytes.
fn raw_headers(body: &[u8]) -> Vec<(MultiHeader, Option<i32>)> {
    let mut rd = Reader::new(body);
    let mut out = Vec::new();
    loop {
        let h = MultiHeader::decode(&mut rd).unwrap();
        if h.done {
            assert_eq!(
                (h.op_type, h.err),
                (-1, -1),
                "end marker is {{-1, true, -1}}"
            );
            assert!(rd.is_empty());
            return out;
        }
        let err = if h.op_type == -1 {
            Some(ErrorResponse::decode(&mut rd).unwrap().err)
        } else {
            // Skip the result record by decoding it per type.
            match h.op_type {
                1 => {
                    zlock_proto::records::CreateResponse::decode(&mut rd).unwrap();
                }
                15 => {
                    zlock_proto::records::Create2Response::decode(&mut rd).unwrap();
                }
                5 => {
                    zlock_proto::records::StatResponse::decode(&mut rd).unwrap();
                }
                2 | 13 => {}
                t => panic!("unexpected result type {t}"),
            }
            None
        };
        out.push((h, err));
    }
}

#[test]
fn multi_wire_shapes() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    h.mk(s, "/n");
    // Containers and TTL nodes answer as create2 (type 15), like ZooKeeper's CreateResult.
    let a = h.write(
        s,
        Request::Multi(vec![
            MultiOp::Create(
                OpCode::CreateContainer,
                create_req("/c", b"", flags::CONTAINER),
            ),
            MultiOp::CreateTtl(CreateTtlRequest {
                path: "/t".into(),
                data: Some(vec![]),
                acl: open(),
                flags: flags::TTL,
                ttl: 1000,
            }),
            m_create1("/p", 0),
            m_set("/n", b"", -1),
            m_check("/n", 1),
            m_delete("/p", -1),
        ]),
    );
    let types: Vec<(i32, bool, i32)> = raw_headers(&a.reply.body)
        .iter()
        .map(|(h, _)| (h.op_type, h.done, h.err))
        .collect();
    assert_eq!(
        types,
        vec![
            (15, false, 0),
            (15, false, 0),
            (1, false, 0),
            (5, false, 0),
            (13, false, 0),
            (2, false, 0)
        ]
    );
    // A failed multi: every entry is {-1, false, X} + ErrorResponse{X}.
    let a = h.write(
        s,
        Request::Multi(vec![m_check("/n", 1), m_check("/n", 0), m_check("/n", 1)]),
    );
    assert_eq!(a.reply.err, OK);
    let got: Vec<(i32, i32, Option<i32>)> = raw_headers(&a.reply.body)
        .into_iter()
        .map(|(h, e)| (h.op_type, h.err, e))
        .collect();
    assert_eq!(
        got,
        vec![
            (-1, 0, Some(0)),
            (-1, BAD_VERSION, Some(BAD_VERSION)),
            (-1, RUNTIME_INCONSISTENCY, Some(RUNTIME_INCONSISTENCY)),
        ]
    );
}

#[test]
fn empty_multi() {
    let mut h = Harness::new();
    let s = h.session();
    let before = h.dump();
    let (a, res) = h.multi(s, vec![]);
    assert!(res.is_empty());
    // Just the end marker {-1, true, -1}.
    let mut end = Vec::new();
    MultiHeader {
        op_type: -1,
        done: true,
        err: -1,
    }
    .encode(&mut end);
    assert_eq!(a.reply.body, end);
    assert_eq!(h.dump(), before);
}

#[test]
fn failing_first_op() {
    let mut h = Harness::new();
    let s = h.session();
    let (_, res) = h.multi(s, vec![m_delete("/nope", -1), m_create("/a", b"", 0)]);
    assert_eq!(multi_errors(&res), vec![NO_NODE, RUNTIME_INCONSISTENCY]);
    assert!(!h.has("/a"));
}

#[test]
fn multi_read_is_per_op_and_sets_watches() {
    let mut h = Harness::new();
    let s = h.session();
    let r = h.session();
    h.create_ok(s, "/a", b"data", 0);
    h.mk(s, "/a/k");
    let ro = vec![acl(perms::WRITE, "world", "anyone")];
    assert_eq!(h.write(s, create_with_acl("/secret", ro, 0)).reply.err, OK);
    let reply = h.read(
        r,
        &Request::MultiRead(vec![
            MultiOp::GetData(pw("/a", true)),
            MultiOp::GetChildren(pw("/missing", true)),
            MultiOp::GetChildren(pw("/a", true)),
            MultiOp::GetData(pw("/secret", false)),
        ]),
    );
    assert_eq!(reply.err, OK);
    let res = multi_results(&reply);
    match &res[0] {
        MultiResult::GetData(d, st) => {
            assert_eq!(d.as_deref(), Some(&b"data"[..]));
            assert_eq!(*st, h.stat("/a"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(res[1], MultiResult::Error(NO_NODE));
    assert_eq!(res[2], MultiResult::GetChildren(vec!["k".into()]));
    assert_eq!(res[3], MultiResult::Error(NO_AUTH));
    // Both watches were set; the failed read set none.
    let a = h.set_data(s, "/a", b"x", -1);
    assert_eq!(evs(&a), vec![ev(r, event_type::NODE_DATA_CHANGED, "/a")]);
    let a = h.create(s, "/a/k2", b"", 0);
    assert_eq!(
        evs(&a),
        vec![ev(r, event_type::NODE_CHILDREN_CHANGED, "/a")]
    );
    let a = h.create(s, "/missing", b"", 0);
    assert!(a.events.is_empty());
}
