//! Sessions and ephemeral nodes: CreateSession/CloseSession Txns, ephemeral cleanup
//! with its watch events (ZooKeeper's `DataTree.killSession` → `deleteNode`), and
//! getEphemerals.

use zlock_core::TxnBody;
use zlock_proto::records::{event_type as et, GetEphemeralsResponse, PathRequest};
use zlock_proto::{Reader, Record, Request};

use crate::harness::*;

#[test]
fn create_session_registers_it() {
    let mut h = Harness::new();
    let txn = h.txn(
        SessionId::NONE,
        TxnBody::CreateSession {
            passwd: vec![9; 16],
            timeout_ms: 12_000,
        },
    );
    let a = h.apply(&txn);
    assert_eq!(a.reply.err, OK);
    assert!(a.events.is_empty());
    assert_eq!(a.closed_session, None);
    // Member 0 (the single node): the id is the zxid the session took.
    assert_eq!(a.created_session, Some(SessionId(a.zxid.0)));
    let s = &h.st.sessions[&SessionId(a.zxid.0)];
    assert_eq!((s.timeout_ms, s.passwd.clone()), (12_000, vec![9; 16]));
}

#[test]
fn close_session_deletes_ephemerals_and_fires_watches() {
    let mut h = Harness::new();
    let owner = h.session();
    let w = h.session();
    h.mk(w, "/d");
    h.create_ok(owner, "/e1", b"", flags::EPHEMERAL);
    h.create_ok(owner, "/d/e2", b"", flags::EPHEMERAL);
    let (seq, _) = h.create_ok(owner, "/d/s-", b"", flags::EPHEMERAL_SEQUENTIAL);
    h.create_ok(w, "/d/mine", b"", flags::EPHEMERAL);
    h.get_data(w, "/e1", true).unwrap();
    h.children(w, "/d", true).unwrap();
    h.exists(w, &seq, true).unwrap();
    let d_before = h.stat("/d");

    let a = h.close(owner);
    assert_eq!(a.reply.err, OK);
    assert_eq!(a.closed_session, Some(owner));
    assert!(!h.st.sessions.contains_key(&owner));
    assert!(!h.has("/e1") && !h.has("/d/e2") && !h.has(&seq));
    assert!(h.st.tree.ephemerals_of(owner).is_empty());
    // The other session's ephemeral stays.
    assert_eq!(h.st.tree.ephemerals_of(w), vec!["/d/mine".to_string()]);
    let mut want = vec![
        ev(w, et::NODE_DELETED, "/e1"),
        ev(w, et::NODE_DELETED, &seq),
        ev(w, et::NODE_CHILDREN_CHANGED, "/d"),
    ];
    want.sort();
    assert_eq!(sorted(&a), want);
    // The parent: pzxid is the close's zxid; cversion counts the two deletes.
    let d = h.stat("/d");
    assert_eq!(d.pzxid, a.zxid.0);
    assert_eq!(d.num_children, 1);
    assert_eq!(d.cversion, d_before.cversion + 2);
    check_invariants(&h.st);
}

#[test]
fn close_session_drops_its_watches() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    h.get_data(w, "/n", true).unwrap();
    h.children(w, "/", true).unwrap();
    h.add_watch(w, "/", true);
    assert_eq!(h.exists(w, "/x", true), Err(NO_NODE));
    assert!(!h.st.watches.of_session(w).is_empty());
    let a = h.close(w);
    assert!(a.events.is_empty());
    assert!(h.st.watches.of_session(w).is_empty());
    assert_eq!(h.st.watches.count(), 0);
    assert!(h.set_data(s, "/n", b"x", -1).events.is_empty());
    assert!(h.create(s, "/x", b"", 0).events.is_empty());
}

#[test]
fn closing_a_session_that_owns_nothing() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/n");
    let before = h.dump();
    let a = h.close(s);
    assert_eq!(a.reply.err, OK);
    assert!(a.events.is_empty());
    assert_eq!(h.dump(), before);
    // Closing again, or closing a session never created, is harmless.
    let a = h.close(s);
    assert_eq!(a.reply.err, OK);
    let a = h.close(SessionId(999_999));
    assert_eq!(a.reply.err, OK);
    assert_eq!(h.dump(), before);
}

#[test]
fn ephemeral_deleted_by_hand_is_not_deleted_again() {
    let mut h = Harness::new();
    let owner = h.session();
    let w = h.session();
    h.create_ok(owner, "/e", b"", flags::EPHEMERAL);
    assert_eq!(h.delete(owner, "/e", -1).reply.err, OK);
    h.children(w, "/", true).unwrap();
    let a = h.close(owner);
    assert!(a.events.is_empty());
    check_invariants(&h.st);
}

#[test]
fn ephemeral_recreated_by_another_session_survives_the_first_close() {
    let mut h = Harness::new();
    let a = h.session();
    let b = h.session();
    h.create_ok(a, "/lock", b"", flags::EPHEMERAL);
    assert_eq!(h.delete(b, "/lock", -1).reply.err, OK);
    h.create_ok(b, "/lock", b"", flags::EPHEMERAL);
    h.close(a);
    assert_eq!(h.stat("/lock").ephemeral_owner, b.0);
    h.close(b);
    assert!(!h.has("/lock"));
    check_invariants(&h.st);
}

#[test]
fn many_sessions_close_in_any_order() {
    let mut h = Harness::new();
    let admin = h.session();
    h.mk(admin, "/locks");
    let sessions: Vec<_> = (0..6).map(|_| h.session()).collect();
    for (i, s) in sessions.iter().enumerate() {
        let (p, _) = h.create_ok(*s, "/locks/l-", b"", flags::EPHEMERAL_SEQUENTIAL);
        assert_eq!(p, format!("/locks/l-{i:010}"));
    }
    for s in sessions.iter().rev().step_by(2) {
        h.close(*s);
        check_invariants(&h.st);
    }
    assert_eq!(h.children(admin, "/locks", false).unwrap().len(), 3);
    for s in sessions.iter() {
        h.close(*s);
    }
    assert!(h.children(admin, "/locks", false).unwrap().is_empty());
    assert_eq!(h.st.tree.ephemeral_count(), 0);
    check_invariants(&h.st);
}

#[test]
fn get_ephemerals() {
    let mut h = Harness::new();
    let s = h.session();
    let other = h.session();
    h.mk(s, "/a");
    h.mk(s, "/b");
    h.create_ok(s, "/a/e1", b"", flags::EPHEMERAL);
    h.create_ok(s, "/a/e2", b"", flags::EPHEMERAL);
    h.create_ok(s, "/b/e3", b"", flags::EPHEMERAL);
    h.create_ok(s, "/ab", b"", flags::EPHEMERAL);
    h.create_ok(other, "/a/theirs", b"", flags::EPHEMERAL);
    let mut get = |who, prefix: &str| {
        let r = h.read(
            who,
            &Request::GetEphemerals(PathRequest {
                path: prefix.into(),
            }),
        );
        assert_eq!(r.err, OK);
        let mut v = GetEphemeralsResponse::decode(&mut Reader::new(&r.body))
            .unwrap()
            .ephemerals;
        v.sort();
        v
    };
    assert_eq!(get(s, "/"), vec!["/a/e1", "/a/e2", "/ab", "/b/e3"]);
    assert_eq!(get(s, ""), vec!["/a/e1", "/a/e2", "/ab", "/b/e3"]);
    // A plain string prefix, as ZooKeeper's `startsWith`.
    assert_eq!(get(s, "/a"), vec!["/a/e1", "/a/e2", "/ab"]);
    assert_eq!(get(s, "/a/"), vec!["/a/e1", "/a/e2"]);
    assert_eq!(get(s, "/zzz"), Vec::<String>::new());
    assert_eq!(get(other, "/"), vec!["/a/theirs"]);
}

#[test]
fn ephemeral_and_sequential_flags_combine() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/q");
    let (p, st) = h.create_ok(s, "/q/x-", b"d", flags::EPHEMERAL_SEQUENTIAL);
    assert_eq!(p, "/q/x-0000000000");
    assert_eq!(st.ephemeral_owner, s.0);
    let (p, st) = h.create_ok(s, "/q/y-", b"d", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p, "/q/y-0000000001");
    assert_eq!(st.ephemeral_owner, 0);
    h.close(s);
    let reader = h.session();
    assert_eq!(
        h.children(reader, "/q", false).unwrap(),
        vec!["y-0000000001"]
    );
}

#[test]
fn a_write_logged_after_its_sessions_close_is_session_expired() {
    // ZooKeeper refuses writes of a closing session in PrepRequestProcessor
    // (`checkSession`); zlock decides at apply time, so an ephemeral cannot outlive
    // its owner.
    let mut h = Harness::new();
    let s = h.session();
    h.close(s);
    let before = h.dump();
    for req in [
        create2("/e", b"", flags::EPHEMERAL),
        create2("/p", b"", flags::PERSISTENT),
        set_data("/zookeeper", b"", -1),
        Request::Multi(vec![m_create("/m", b"", 0)]),
    ] {
        let a = h.write(s, req);
        assert_eq!(a.reply.err, -112, "SessionExpired");
        assert!(a.events.is_empty());
    }
    assert_eq!(h.dump(), before);
    check_invariants(&h.st);
}

/// A Txn of session `s` from member `m`.
fn from_member(h: &Harness, m: u64, s: SessionId, body: TxnBody) -> zlock_core::Txn {
    let mut t = h.txn(s, body);
    t.origin.member = zlock_core::MemberId(m);
    t
}

fn create_from(h: &mut Harness, m: u64, s: SessionId, path: &str) -> i32 {
    let body = TxnBody::Request {
        auth: vec![ip()].into(),
        request: create2(path, b"", 0),
    };
    let t = from_member(h, m, s, body);
    h.apply(&t).reply.err
}

#[test]
fn a_session_moves_between_members_and_its_old_member_is_refused() {
    let mut h = Harness::new();
    let create = from_member(
        &h,
        1,
        SessionId::NONE,
        TxnBody::CreateSession {
            passwd: vec![5; 16],
            timeout_ms: 10_000,
        },
    );
    let s = h.apply(&create).created_session.unwrap();
    assert_eq!(h.st.sessions[&s].owner, zlock_core::MemberId(1));
    assert_eq!(create_from(&mut h, 1, s, "/a"), OK);

    // A wrong password moves nothing.
    let bad = from_member(
        &h,
        2,
        SessionId::NONE,
        TxnBody::MoveSession {
            session_id: s,
            passwd: vec![6; 16],
        },
    );
    let a = h.apply(&bad);
    assert_eq!(a.moved, Some((s, false)));
    assert_eq!(a.reply.err, zlock_proto::ErrorCode::SessionExpired as i32);
    assert_eq!(create_from(&mut h, 1, s, "/b"), OK);

    let good = from_member(
        &h,
        2,
        SessionId::NONE,
        TxnBody::MoveSession {
            session_id: s,
            passwd: vec![5; 16],
        },
    );
    assert_eq!(h.apply(&good).moved, Some((s, true)));
    assert_eq!(h.st.sessions[&s].owner, zlock_core::MemberId(2));
    assert_eq!(
        create_from(&mut h, 1, s, "/late"),
        zlock_proto::ErrorCode::SessionMoved as i32
    );
    assert!(!h.has("/late"), "the refused write changed nothing");
    assert_eq!(create_from(&mut h, 2, s, "/c"), OK);

    // Moving a session that is gone is refused.
    let close = from_member(&h, 2, s, TxnBody::CloseSession { session_id: s });
    h.apply(&close);
    let gone = from_member(
        &h,
        3,
        SessionId::NONE,
        TxnBody::MoveSession {
            session_id: s,
            passwd: vec![5; 16],
        },
    );
    assert_eq!(h.apply(&gone).moved, Some((s, false)));
}
