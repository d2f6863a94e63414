//! Snapshots and Txn encoding: a decoded snapshot is the same state (tree, Stat,
//! internal counters, indexes, sessions, zxid) and behaves the same from then on; a
//! replayed log of encoded Txns rebuilds the same state. Watches are not snapshotted.

use zlock_core::snapshot::{self, SnapshotError, SNAPSHOT_VERSION};
use zlock_core::{Config, State, Txn, TxnBody};
use zlock_proto::jute::Writer;
use zlock_proto::records::{perms, MultiOp};
use zlock_proto::Request;

use crate::harness::*;

/// Builds a state with every node kind, ACLs, deletes and sessions; returns the log.
fn rich(h: &mut Harness) -> Vec<Txn> {
    let mut log = Vec::new();
    let mut run = |h: &mut Harness, txn: Txn| {
        let a = h.apply(&txn);
        log.push(txn);
        a
    };
    let mut open_session = |h: &mut Harness, n: u8| {
        let t = h.txn(
            SessionId::NONE,
            TxnBody::CreateSession {
                passwd: vec![n; 16],
                timeout_ms: 10_000 + i32::from(n),
            },
        );
        run(h, t).created_session.unwrap()
    };
    let s1 = open_session(h, 0x51);
    let s2 = open_session(h, 0x52);
    let req = |h: &Harness, s: SessionId, request: Request| {
        h.txn(
            s,
            TxnBody::Request {
                auth: vec![ip()].into(),
                request,
            },
        )
    };
    let steps: Vec<(SessionId, Request)> = vec![
        (s1, create2("/app", b"config", 0)),
        (s1, create2("/app/q", b"", 0)),
        (s1, create2("/app/q/n-", b"1", flags::PERSISTENT_SEQUENTIAL)),
        (s1, create2("/app/q/n-", b"2", flags::EPHEMERAL_SEQUENTIAL)),
        (s2, create2("/app/e", b"eph", flags::EPHEMERAL)),
        (s1, delete("/app/q/n-0000000000", -1)),
        (s1, create_container("/locks")),
        (s2, create2("/locks/l-", b"", flags::EPHEMERAL_SEQUENTIAL)),
        (s1, create_ttl("/ttl", flags::TTL, 5000)),
        (
            s1,
            create_with_acl(
                "/acl",
                vec![
                    acl(perms::READ, "world", "anyone"),
                    acl(ALL, "digest", "u:h"),
                ],
                0,
            ),
        ),
        (s1, set_data("/app", b"v2", 0)),
        (s1, set_acl("/app", open(), 0)),
        (
            s1,
            Request::Multi(vec![
                m_create("/m", b"", 0),
                m_create("/m/x", b"", 0),
                m_set("/app", b"v3", 1),
            ]),
        ),
        (s1, create2("/app", b"", 0)), // fails, still logged
        (s1, create2("/big", &[7u8; 4096], 0)),
    ];
    for (s, r) in steps {
        h.tick(17);
        let t = req(h, s, r);
        run(h, t);
    }
    log
}

fn snap(st: &State) -> Vec<u8> {
    let mut b = Vec::new();
    snapshot::encode(st, &mut b);
    b
}

#[test]
fn round_trip_keeps_everything_replicated() {
    let mut h = Harness::with_ttl();
    rich(&mut h);
    let ids: Vec<SessionId> = h.st.sessions.keys().copied().collect();
    let s = ids[0];
    h.get_data(s, "/app", true).unwrap();
    h.add_watch(s, "/", true);
    let bytes = snap(&h.st);
    let back = snapshot::decode(
        &bytes,
        Config {
            extended_types: true,
        },
    )
    .unwrap();
    assert_eq!(back.zxid.0, h.st.zxid.0);
    assert_eq!(back.sessions, h.st.sessions);
    assert_eq!(
        dump(&back),
        h.dump(),
        "every node, Stat and internal counter"
    );
    for p in ["/", "/zookeeper", "/app/q", "/locks"] {
        assert_eq!(back.tree.get(p).unwrap().stat(), h.stat(p), "{p}");
    }
    for s in ids {
        assert_eq!(back.tree.ephemerals_of(s), h.st.tree.ephemerals_of(s));
    }
    assert_eq!(
        h.st.tree.ephemerals_of(s2_of(&h)).len(),
        2,
        "the ephemerals compared exist"
    );
    assert_eq!(
        back.tree.containers().collect::<Vec<_>>(),
        h.st.tree.containers().collect::<Vec<_>>()
    );
    assert_eq!(
        back.tree.ttl_nodes().collect::<Vec<_>>(),
        h.st.tree.ttl_nodes().collect::<Vec<_>>()
    );
    assert_eq!(back.watches.count(), 0, "watches are not snapshotted");
    check_invariants(&back);
    // Encoding is deterministic and stable through a round trip.
    assert_eq!(snap(&back), bytes);
    assert_eq!(snap(&h.st), bytes);
}

#[test]
fn decoded_state_behaves_the_same() {
    let mut h = Harness::with_ttl();
    rich(&mut h);
    let bytes = snap(&h.st);
    let mut other = Harness::with_ttl();
    other.st = snapshot::decode(
        &bytes,
        Config {
            extended_types: true,
        },
    )
    .unwrap();
    other.now = h.now;
    let ids: Vec<SessionId> = h.st.sessions.keys().copied().collect();
    let (s1, s2) = (ids[0], ids[1]);
    let more: Vec<(SessionId, Request)> = vec![
        (s1, create2("/app/q/n-", b"", flags::PERSISTENT_SEQUENTIAL)),
        (s2, create2("/locks/l-", b"", flags::EPHEMERAL_SEQUENTIAL)),
        (s1, set_data("/app", b"again", -1)),
        (s1, delete("/app/q", -1)),
        (s1, create2("/", b"", flags::PERSISTENT_SEQUENTIAL)),
        (
            s1,
            Request::Multi(vec![m_delete("/m/x", 0), m_delete("/m", 0)]),
        ),
    ];
    for (s, r) in more {
        let a = h.write(s, r.clone());
        let b = other.write(s, r);
        assert_eq!(a.reply, b.reply);
        assert_eq!(a.zxid.0, b.zxid.0);
    }
    let a = h.close(s2);
    let b = other.close(s2);
    assert_eq!(a.reply, b.reply);
    assert_eq!(h.dump(), other.dump());
    let now = h.now + 1_000_000;
    assert_eq!(h.st.expired_candidates(now).len(), 2, "/locks and /ttl");
    let mut ca = h.st.expired_candidates(now);
    let mut cb = other.st.expired_candidates(now);
    ca.sort();
    cb.sort();
    assert_eq!(ca, cb);
}

#[test]
fn replaying_encoded_txns_rebuilds_the_state() {
    let mut h = Harness::with_ttl();
    let log = rich(&mut h);
    let mut replay = State::new(Config {
        extended_types: true,
    });
    for t in &log {
        let bytes = t.to_bytes();
        let back = Txn::decode(&bytes).unwrap();
        assert_eq!(&back, t);
        apply_next(&mut replay, &back);
    }
    assert_eq!(replay.zxid.0, h.st.zxid.0);
    assert_eq!(replay.sessions, h.st.sessions);
    assert_eq!(dump(&replay), h.dump());
    // Snapshot at the end == snapshot of the replayed state.
    assert_eq!(snap(&replay), snap(&h.st));
}

#[test]
fn fresh_state_round_trip() {
    let st = State::new(Config::default());
    let back = snapshot::decode(&snap(&st), Config::default()).unwrap();
    assert_eq!(dump(&back), dump(&st));
    assert_eq!(back.tree.get("/").unwrap().stat().cversion, -1);
    assert_eq!(back.tree.get("/zookeeper/config").unwrap().aversion, -1);
    assert_eq!(back.zxid.0, 0);
}

#[test]
fn bad_snapshots_are_errors_not_panics() {
    let mut h = Harness::with_ttl();
    rich(&mut h);
    let bytes = snap(&h.st);
    for cut in 0..bytes.len() {
        assert!(
            snapshot::decode(&bytes[..cut], Config::default()).is_err(),
            "truncated at {cut}"
        );
    }
    let mut wrong = bytes.clone();
    wrong[..4].copy_from_slice(&(SNAPSHOT_VERSION + 1).to_be_bytes());
    assert!(matches!(
        snapshot::decode(&wrong, Config::default()),
        Err(SnapshotError::Version(v)) if v == SNAPSHOT_VERSION + 1
    ));
    // Nodes `/` and `/a/b` with zeroed fields, no sessions, in format `version` (from
    // 5 on, each node names its children: none here; from 7 on, the time comes first).
    let two_nodes = |version: i32| {
        let mut b = Vec::new();
        b.write_i32(version);
        b.write_i64(5);
        if version >= 7 {
            b.write_i64(0); // the state's time
        }
        b.write_i32(0);
        b.write_i64(2);
        for p in ["/", "/a/b"] {
            b.write_string(p);
            b.write_buffer(b"");
            b.write_i32(0); // empty ACL vector
            b.push(0);
            b.write_i64(0);
            for _ in 0..4 {
                b.write_i64(0);
            }
            for _ in 0..3 {
                b.write_i32(0);
            }
            b.write_i64(0);
            if version >= 5 {
                b.write_i32(0); // no children
            }
        }
        b
    };
    // A node listed before its parent, in version 4 (which lists parents first).
    let b = two_nodes(4);
    assert!(matches!(
        snapshot::decode(&b, Config::default()),
        Err(SnapshotError::Orphan(p)) if p == "/a/b"
    ));
    // The same in version 5: `/` does not name `/a/b`, so the children do not add up.
    let c = two_nodes(SNAPSHOT_VERSION);
    assert!(matches!(
        snapshot::decode(&c, Config::default()),
        Err(SnapshotError::Children {
            nodes: 2,
            children: 0,
            distinct: 2
        })
    ));
    // An unknown node kind.
    let mut k = b.clone();
    let kind_at = 4 + 8 + 4 + 8 + (4 + 1) + 4 + 4;
    assert_eq!(k[kind_at], 0);
    k[kind_at] = 9;
    assert!(snapshot::decode(&k, Config::default()).is_err());
}

#[test]
fn bad_txns_are_errors() {
    let h = Harness::new();
    let good = h.txn(
        SessionId(1),
        TxnBody::Request {
            auth: vec![ip()].into(),
            request: Request::Multi(vec![MultiOp::Check(
                zlock_proto::records::CheckVersionRequest {
                    path: "/x".into(),
                    version: 3,
                },
            )]),
        },
    );
    let bytes = good.to_bytes();
    assert_eq!(Txn::decode(&bytes).unwrap(), good);
    for cut in 0..bytes.len() {
        assert!(Txn::decode(&bytes[..cut]).is_err(), "truncated at {cut}");
    }
    let mut v = bytes.clone();
    v[0] = 99;
    assert!(Txn::decode(&v).is_err());
    let mut t = bytes.clone();
    t[1] = 99;
    assert!(Txn::decode(&t).is_err());
}

/// The second session of [`rich`] (it owns `/app/e` and `/locks/l-...`).
fn s2_of(h: &Harness) -> SessionId {
    h.st.sessions.keys().copied().nth(1).unwrap()
}
