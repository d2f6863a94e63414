//! create, create2, createContainer, createTTL: Stat fields, sequential names, and the
//! order of checks in ZooKeeper's `PrepRequestProcessor.pRequest2TxnCreate`:
//! flags → TTL → '/' and NUL → fixupACL → parent → CREATE permission → sequential
//! suffix → full path check → NodeExists → ephemeral parent.

use zlock_core::tree::NodeKind;
use zlock_proto::records::{perms, CreateResponse};
use zlock_proto::{OpCode, Reader, Record, Request};

use crate::harness::*;

#[test]
fn fresh_tree_matches_zookeeper() {
    let mut h = Harness::new();
    let s = h.session();
    assert_eq!(h.children(s, "/", false).unwrap(), vec!["zookeeper"]);
    assert_eq!(
        h.children(s, "/zookeeper", false).unwrap(),
        vec!["config", "quota"]
    );
    // DataNode.copyStat reports cversion as 2 * creates - numChildren; the built-in
    // nodes were linked without a create, so a fresh `/` shows -1 and `/zookeeper` -2.
    let root = h.stat("/");
    assert_eq!(root.num_children, 1);
    assert_eq!(root.cversion, -1);
    assert_eq!((root.czxid, root.mzxid, root.pzxid), (0, 0, 0));
    assert_eq!(h.stat("/zookeeper").cversion, -2);
    assert_eq!(h.stat("/zookeeper/quota").cversion, 0);
    // /zookeeper/config is read-only for everyone, set with aversion -1 (ZOOKEEPER-2014).
    let (acl_list, stat) = h.get_acl(s, "/zookeeper/config").unwrap();
    assert_eq!(acl_list, vec![acl(perms::READ, "world", "anyone")]);
    assert_eq!(stat.aversion, -1);
    assert_eq!(h.get_acl(s, "/zookeeper/quota").unwrap().0, open());
    check_invariants(&h.st);
}

#[test]
fn create2_stat_fields() {
    let mut h = Harness::new();
    let s = h.session();
    h.tick(1234);
    let a = h.create(s, "/a", b"hello", flags::PERSISTENT);
    assert_eq!(a.reply.err, OK);
    let r = create2_body(&a.reply);
    assert_eq!(r.path, "/a");
    let st = r.stat;
    assert_eq!(st.czxid, a.zxid.0);
    assert_eq!(st.mzxid, a.zxid.0);
    assert_eq!(st.pzxid, a.zxid.0);
    assert_eq!(st.ctime, T0 + 1234);
    assert_eq!(st.mtime, T0 + 1234);
    assert_eq!(st.version, 0);
    assert_eq!(st.cversion, 0);
    assert_eq!(st.aversion, 0);
    assert_eq!(st.ephemeral_owner, 0);
    assert_eq!(st.data_length, 5);
    assert_eq!(st.num_children, 0);
    // The reply Stat is what exists/getData report afterwards.
    assert_eq!(h.exists(s, "/a", false).unwrap(), st);
    let (data, st2) = h.get_data(s, "/a", false).unwrap();
    assert_eq!(data, b"hello");
    assert_eq!(st2, st);
    // The parent: pzxid moves, its own czxid/mzxid/version do not.
    let root = h.stat("/");
    assert_eq!(root.pzxid, a.zxid.0);
    assert_eq!(root.num_children, 2);
    assert_eq!(root.cversion, 0, "2 * 1 create - 2 children");
    assert_eq!((root.mzxid, root.version), (0, 0));
    assert!(a.events.is_empty());
    check_invariants(&h.st);
}

#[test]
fn create_opcode_1_replies_with_the_path_only() {
    let mut h = Harness::new();
    let s = h.session();
    let a = h.write(s, create1("/p", b"x", flags::PERSISTENT_SEQUENTIAL));
    assert_eq!(a.reply.err, OK);
    let mut rd = Reader::new(&a.reply.body);
    let r = CreateResponse::decode(&mut rd).unwrap();
    assert!(
        rd.is_empty(),
        "create (1) answers CreateResponse{{path}} only"
    );
    assert_eq!(r.path, "/p0000000000");
    assert!(h.has("/p0000000000"));
}

#[test]
fn ephemeral_create_sets_owner() {
    let mut h = Harness::new();
    let s = h.session();
    let (p, st) = h.create_ok(s, "/e", b"", flags::EPHEMERAL);
    assert_eq!(p, "/e");
    assert_eq!(st.ephemeral_owner, s.0);
    assert_eq!(h.st.tree.ephemerals_of(s), vec!["/e".to_string()]);
    assert_eq!(h.st.tree.get("/e").unwrap().kind, NodeKind::Ephemeral(s));
    // Ephemerals cannot have children, whoever asks and whatever the child's mode.
    let other = h.session();
    for f in [
        flags::PERSISTENT,
        flags::EPHEMERAL,
        flags::PERSISTENT_SEQUENTIAL,
    ] {
        let a = h.create(other, "/e/c", b"", f);
        assert_eq!(a.reply.err, NO_CHILDREN_FOR_EPHEMERALS, "flags {f}");
    }
    // A node that exists wins over the ephemeral-parent check (NodeExists comes first).
    assert_eq!(
        h.create(s, "/e", b"", flags::EPHEMERAL).reply.err,
        NODE_EXISTS
    );
    check_invariants(&h.st);
}

#[test]
fn sequential_names_count_creates_not_deletes() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/q");
    let (p0, _) = h.create_ok(s, "/q/n-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p0, "/q/n-0000000000");
    let (p1, _) = h.create_ok(s, "/q/n-", b"", flags::EPHEMERAL_SEQUENTIAL);
    assert_eq!(p1, "/q/n-0000000001");
    assert_eq!(h.stat("/q").cversion, 2);

    // ZooKeeper's DataTree.deleteNode leaves the parent's internal cversion alone, so the
    // next sequential name continues from the number of creates...
    assert_eq!(h.delete(s, &p0, -1).reply.err, OK);
    let (p2, _) = h.create_ok(s, "/q/n-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p2, "/q/n-0000000002");
    assert_eq!(h.delete(s, &p2, -1).reply.err, OK);
    assert_eq!(h.delete(s, &p1, -1).reply.err, OK);
    let (p3, _) = h.create_ok(s, "/q/n-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p3, "/q/n-0000000003");
    // ...while the reported cversion counts both: 4 creates + 3 deletes.
    let q = h.stat("/q");
    assert_eq!(q.num_children, 1);
    assert_eq!(q.cversion, 7);

    // Any create under the parent advances the counter, whatever the name or mode.
    h.mk(s, "/q/plain");
    let (p5, _) = h.create_ok(s, "/q/other-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p5, "/q/other-0000000005");
    check_invariants(&h.st);
}

#[test]
fn sequential_create_then_delete_then_create() {
    // The Curator/kazoo lock pattern: one node at a time. Names go up by one per create.
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/lock");
    for i in 0..5 {
        let (p, _) = h.create_ok(s, "/lock/lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
        assert_eq!(p, format!("/lock/lock-{i:010}"));
        assert_eq!(h.delete(s, &p, 0).reply.err, OK);
    }
    assert_eq!(h.stat("/lock").cversion, 10);
}

#[test]
fn sequential_names_under_root_and_with_trailing_slash() {
    let mut h = Harness::new();
    let s = h.session();
    // The root starts with an internal cversion of 0 (/zookeeper was linked, not created).
    let (p, _) = h.create_ok(s, "/", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p, "/0000000000");
    h.mk(s, "/q");
    // ZooKeeper validates the *final* path, so "/q/" is fine for a sequential create.
    let (p, _) = h.create_ok(s, "/q/", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p, "/q/0000000000");
    // ...but not for a plain one.
    assert_eq!(
        h.create(s, "/q/", b"", flags::PERSISTENT).reply.err,
        BAD_ARGUMENTS
    );
    check_invariants(&h.st);
}

#[test]
fn sequential_collision_is_node_exists_and_does_not_advance() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/q");
    // Pre-create the name the next sequential create will pick (counter is 1 after it).
    h.mk(s, "/q/n-0000000001");
    for _ in 0..2 {
        let a = h.create(s, "/q/n-", b"", flags::PERSISTENT_SEQUENTIAL);
        assert_eq!(a.reply.err, NODE_EXISTS);
    }
    h.mk(s, "/q/x");
    let (p, _) = h.create_ok(s, "/q/n-", b"", flags::PERSISTENT_SEQUENTIAL);
    assert_eq!(p, "/q/n-0000000002");
}

#[test]
fn create_check_order() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/a");
    // A parent everyone may read but not create under.
    let locked = create_with_acl("/locked", vec![acl(perms::READ, "world", "anyone")], 0);
    assert_eq!(h.write(s, locked).reply.err, OK);
    h.create_ok(s, "/locked-ok", b"", flags::PERSISTENT);

    let bad_acl = |path: &str, f: i32| create_with_acl(path, vec![], f);
    let cases: Vec<(&str, Request, i32)> = vec![
        // Unknown flags first: CreateMode.fromFlag.
        ("flags 7", create2("no-slash", b"", 7), BAD_ARGUMENTS),
        ("flags -1", create2("/a/x", b"", -1), BAD_ARGUMENTS),
        // validatePathForCreate: no '/' or a NUL, before the ACL is looked at.
        ("no slash", bad_acl("a", 0), BAD_ARGUMENTS),
        ("empty path", bad_acl("", 0), BAD_ARGUMENTS),
        ("NUL", bad_acl("/a/x\0", 0), BAD_ARGUMENTS),
        // fixupACL before the parent lookup.
        (
            "empty ACL, missing parent",
            bad_acl("/missing/x", 0),
            INVALID_ACL,
        ),
        (
            "empty ACL, locked parent",
            bad_acl("/locked/x", 0),
            INVALID_ACL,
        ),
        // Parent lookup before the full path check: the parent of "/missing//x" is
        // "/missing/", which does not exist.
        ("missing parent", create2("/missing/x", b"", 0), NO_NODE),
        (
            "missing parent, bad path",
            create2("/missing//x", b"", 0),
            NO_NODE,
        ),
        (
            "missing parent, trailing /",
            create2("/missing/x/", b"", 0),
            NO_NODE,
        ),
        ("relative", create2("a/b", b"", 0), NO_NODE),
        // CREATE permission before the full path check and before NodeExists.
        ("no CREATE", create2("/locked/x", b"", 0), NO_AUTH),
        ("no CREATE, bad path", create2("/locked/.", b"", 0), NO_AUTH),
        // ("/locked/x/" has the parent "/locked/x", which does not exist.)
        (
            "trailing / under locked",
            create2("/locked/x/", b"", 0),
            NO_NODE,
        ),
        (
            "no CREATE, sequential",
            create2("/locked/x", b"", 2),
            NO_AUTH,
        ),
        // The full check on the final path.
        ("trailing /", create2("/a/", b"", 0), BAD_ARGUMENTS),
        ("dot", create2("/a/.", b"", 0), BAD_ARGUMENTS),
        ("dot-dot", create2("/a/..", b"", 0), BAD_ARGUMENTS),
        ("control char", create2("/a/x\u{1}", b"", 0), BAD_ARGUMENTS),
        ("U+FFF5", create2("/a/\u{fff5}", b"", 0), BAD_ARGUMENTS),
        // Java checks UTF-16 units: a character beyond U+FFFF is a surrogate pair.
        ("emoji", create2("/a/\u{1F600}", b"", 0), BAD_ARGUMENTS),
        ("exists", create2("/a", b"", 0), NODE_EXISTS),
        ("root", create2("/", b"", 0), NODE_EXISTS),
        ("zookeeper", create2("/zookeeper", b"", 0), NODE_EXISTS),
    ];
    let before = h.dump();
    for (what, req, want) in cases {
        let a = h.write(s, req);
        assert_eq!(a.reply.err, want, "{what}");
        assert!(a.reply.body.is_empty(), "{what}: no body on error");
        assert!(a.events.is_empty(), "{what}: no events");
    }
    assert_eq!(h.dump(), before, "failed creates change nothing");
    for ok in [
        "/a/...",
        "/a/.x",
        "/a/x.",
        "/a/ü",
        "/a/日本",
        "/a/with space",
    ] {
        assert_eq!(h.create(s, ok, b"", 0).reply.err, OK, "{ok:?}");
    }
    check_invariants(&h.st);
}

#[test]
fn failed_writes_still_take_a_zxid() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/a");
    let z = h.st.zxid.0;
    let fails = [
        create2("/a", b"", 0),
        create2("/nope/x", b"", 0),
        delete("/nope", -1),
        set_data("/a", b"", 9),
        create2("bad", b"", 0),
    ];
    for (i, req) in fails.into_iter().enumerate() {
        let a = h.write(s, req);
        assert_ne!(a.reply.err, OK);
        assert_eq!(a.zxid.0, z + 1 + i as i64);
    }
    assert_eq!(h.st.zxid.0, z + 5);
    // The next good write gets the next zxid, and that is what its Stat shows.
    let st = h.mk(s, "/b");
    assert_eq!(st.czxid, z + 6);
}

#[test]
fn ttl_needs_extended_types() {
    let mut h = Harness::new();
    let s = h.session();
    assert_eq!(
        h.write(s, create_ttl("/t", flags::TTL, 1000)).reply.err,
        UNIMPLEMENTED
    );
    assert_eq!(h.create(s, "/t", b"", flags::TTL).reply.err, UNIMPLEMENTED);
    assert_eq!(
        h.create(s, "/t", b"", flags::TTL_SEQUENTIAL).reply.err,
        UNIMPLEMENTED
    );
    assert!(!h.has("/t"));
}

#[test]
fn ttl_create_and_ttl_bounds() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    let max = (1i64 << 40) - 1; // EphemeralType.TTL.maxValue()
    for (ttl, want) in [
        (0, BAD_ARGUMENTS),
        (-1, BAD_ARGUMENTS),
        (max + 1, BAD_ARGUMENTS),
        (i64::MAX, BAD_ARGUMENTS),
    ] {
        let a = h.write(s, create_ttl("/t", flags::TTL, ttl));
        assert_eq!(a.reply.err, want, "ttl {ttl}");
    }
    // A TTL mode needs a TTL: create2 sends none (-1).
    assert_eq!(h.create(s, "/t", b"", flags::TTL).reply.err, BAD_ARGUMENTS);
    // And createTTL with a non-TTL mode must not carry one (EphemeralType.validateTTL).
    assert_eq!(
        h.write(s, create_ttl("/t", flags::PERSISTENT, 1000))
            .reply
            .err,
        BAD_ARGUMENTS
    );
    let a = h.write(s, create_ttl("/t", flags::TTL, max));
    let r = create2_body(&a.reply);
    assert_eq!(r.path, "/t");
    assert_eq!(r.stat.ephemeral_owner, 0, "a TTL node reads back owner 0");
    assert_eq!(h.st.tree.get("/t").unwrap().kind, NodeKind::Ttl(max));
    let a = h.write(s, create_ttl("/t/s-", flags::TTL_SEQUENTIAL, 5));
    assert_eq!(create2_body(&a.reply).path, "/t/s-0000000000");
    check_invariants(&h.st);
}

#[test]
fn container_create() {
    let mut h = Harness::new();
    let s = h.session();
    let a = h.write(s, create_container("/c"));
    let r = create2_body(&a.reply);
    assert_eq!(r.path, "/c");
    assert_eq!(r.stat.ephemeral_owner, 0, "a container reads back owner 0");
    assert_eq!(h.st.tree.get("/c").unwrap().kind, NodeKind::Container);
    // Containers and TTL nodes may have children.
    h.mk(s, "/c/x");
    let (p, _) = h.create_ok(s, "/c/e-", b"", flags::EPHEMERAL_SEQUENTIAL);
    assert_eq!(p, "/c/e-0000000001");
    check_invariants(&h.st);
}

#[test]
fn create_stores_data_and_acl() {
    let mut h = Harness::new();
    let s = h.session();
    let big = vec![0xAB; 100_000];
    h.create_ok(s, "/big", &big, 0);
    let (data, st) = h.get_data(s, "/big", false).unwrap();
    assert_eq!(data, big);
    assert_eq!(st.data_length, 100_000);
    let list = vec![
        acl(perms::READ, "world", "anyone"),
        acl(perms::ALL, "ip", "10.0.0.0/8"),
    ];
    let a = h.write(s, create_with_acl("/acl", list.clone(), 0));
    assert_eq!(a.reply.err, OK);
    assert_eq!(h.get_acl(s, "/acl").unwrap().0, list);
    // create2 replies with the same Stat the tree holds.
    assert_eq!(create2_body(&a.reply).stat, h.stat("/acl"));
}

#[test]
fn pzxid_and_cversion_follow_child_changes_only() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/p");
    let c = h.mk(s, "/p/c");
    let p = h.stat("/p");
    assert_eq!(p.pzxid, c.czxid);
    assert_eq!(p.cversion, 1);
    // Grandchildren and data changes of children leave the parent alone.
    h.mk(s, "/p/c/g");
    h.set_data_ok(s, "/p/c", b"x");
    assert_eq!(h.stat("/p"), p);
    // Writes on the node itself do not touch pzxid/cversion either.
    let after = h.set_data_ok(s, "/p", b"y");
    assert_eq!((after.pzxid, after.cversion), (p.pzxid, p.cversion));
}

#[test]
fn node_kind_follows_the_opcode_like_zookeepers_txn_types() {
    // Checked against ZooKeeper 3.8.0: createContainer makes a container whatever its
    // flags (CreateContainerTxn); create/create2 with flags CONTAINER make a persistent
    // node (CreateTxn knows only "ephemeral or not"), which is never cleaned up.
    let mut h = Harness::with_ttl();
    let s = h.session();
    let kind = |h: &Harness, p: &str| h.st.tree.get(p).unwrap().kind;
    let a = h.write(
        s,
        Request::Create(OpCode::CreateContainer, create_req("/c", b"", 4)),
    );
    assert_eq!(create2_body(&a.reply).path, "/c");
    assert_eq!(kind(&h, "/c"), NodeKind::Container);
    let a = h.write(
        s,
        Request::Create(OpCode::CreateContainer, create_req("/c0", b"", 0)),
    );
    assert_eq!(a.reply.err, OK);
    assert_eq!(kind(&h, "/c0"), NodeKind::Container);
    let a = h.write(
        s,
        Request::Create(OpCode::CreateContainer, create_req("/cs-", b"", 2)),
    );
    let p = create2_body(&a.reply).path;
    assert_eq!(p, "/cs-0000000002");
    assert_eq!(kind(&h, &p), NodeKind::Container);
    // create2 and create (1) with flags 4: accepted, persistent.
    let (_, st) = h.create_ok(s, "/p2", b"", flags::CONTAINER);
    assert_eq!(st.ephemeral_owner, 0);
    assert_eq!(kind(&h, "/p2"), NodeKind::Persistent);
    assert_eq!(h.write(s, create1("/p1", b"", 4)).reply.err, OK);
    assert_eq!(kind(&h, "/p1"), NodeKind::Persistent);
    assert_eq!(h.st.tree.containers().count(), 3);
    // A TTL mode through createContainer still needs a TTL.
    let a = h.write(
        s,
        Request::Create(OpCode::CreateContainer, create_req("/ct", b"", 5)),
    );
    assert_eq!(a.reply.err, BAD_ARGUMENTS);
    check_invariants(&h.st);
}

#[test]
fn create_modes_through_each_opcode() {
    // The node kind follows the flags; each opcode answers with its own record.
    let mut h = Harness::with_ttl();
    let s = h.session();
    let a = h.write(
        s,
        Request::Create(OpCode::CreateContainer, create_req("/c", b"", 4)),
    );
    assert_eq!(create2_body(&a.reply).path, "/c");
    let a = h.write(s, create1("/p", b"", 0));
    assert_eq!(
        CreateResponse::decode(&mut Reader::new(&a.reply.body))
            .unwrap()
            .path,
        "/p"
    );
    assert_eq!(h.st.tree.get("/p").unwrap().kind, NodeKind::Persistent);
    let a = h.write(s, create1("/e", b"", 1));
    assert_eq!(a.reply.err, OK);
    assert_eq!(h.st.tree.get("/e").unwrap().kind, NodeKind::Ephemeral(s));
}

/// `/zookeeper/config` on an ensemble member: reads show the member's configuration
/// ([`zlock_core::ConfigNode`]) with ZooKeeper's ensemble Stat (dataVersion -1, mzxid =
/// the configuration's version), writes still meet the stored read-only node, and the
/// tree (what is logged and snapshotted) never holds the text.
#[test]
fn config_node_view() {
    let mut h = Harness::new();
    let s = h.session();
    // Standalone: empty, dataVersion 0, as on a standalone ZooKeeper 3.8.
    let (data, stat) = h.get_data(s, "/zookeeper/config", false).unwrap();
    assert!(data.is_empty());
    assert_eq!((stat.version, stat.aversion, stat.data_length), (0, -1, 0));
    let text = b"server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\nversion=0".to_vec();
    h.st.config_node = Some(zlock_core::ConfigNode {
        data: text.clone(),
        version: 0,
        mtime: 1_700_000_000_000,
    });
    let before = h.dump();
    let (data, stat) = h.get_data(s, "/zookeeper/config", true).unwrap();
    assert_eq!(data, text);
    assert_eq!(
        (stat.czxid, stat.mzxid, stat.ctime, stat.mtime),
        (0, 0, 0, 1_700_000_000_000)
    );
    assert_eq!((stat.version, stat.aversion), (-1, -1));
    assert_eq!(stat.data_length as usize, text.len());
    assert_eq!(h.exists(s, "/zookeeper/config", false).unwrap(), stat);
    assert_eq!(h.get_acl(s, "/zookeeper/config").unwrap().1, stat);
    assert_eq!(h.children2(s, "/zookeeper/config", false).unwrap().1, stat);
    // Other nodes are untouched by the view.
    assert_eq!(h.get_data(s, "/zookeeper", false).unwrap().0, b"");
    // Read-only: NOAUTH, as ZooKeeper answers setData there.
    assert_eq!(
        h.set_data(s, "/zookeeper/config", b"x", -1).reply.err,
        NO_AUTH
    );
    assert_eq!(h.dump(), before);
    assert_eq!(h.stat("/zookeeper/config").data_length, 0);
}
