//! delete, setData, setACL and a bare check, with ZooKeeper's check order:
//! - delete: '/' and NUL and special paths → parent → DELETE on the parent → node →
//!   version → NotEmpty (`PrepRequestProcessor`, `getParentPathAndValidate`);
//! - setData: path → node → WRITE → version;
//! - setACL: path → fixupACL → node → ADMIN → aversion;
//! - check: path → node → READ → version.

use zlock_proto::records::{perms, CheckVersionRequest};
use zlock_proto::Request;

use crate::harness::*;

#[test]
fn delete_updates_the_parent() {
    let mut h = Harness::new();
    let s = h.session();
    let p0 = h.mk(s, "/p");
    h.mk(s, "/p/c");
    let a = h.delete(s, "/p/c", -1);
    assert_eq!(a.reply.err, OK);
    assert!(a.reply.body.is_empty(), "delete has no response record");
    assert!(!h.has("/p/c"));
    let p = h.stat("/p");
    assert_eq!(p.pzxid, a.zxid.0);
    assert_eq!(p.num_children, 0);
    assert_eq!(p.cversion, 2, "one create + one delete");
    assert_eq!((p.czxid, p.mzxid, p.version), (p0.czxid, p0.mzxid, 0));
    assert_eq!(h.children(s, "/p", false).unwrap(), Vec::<String>::new());
    check_invariants(&h.st);
}

#[test]
fn delete_check_order() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/a");
    h.mk(s, "/p");
    h.set_data_ok(s, "/p", b"v1");
    h.mk(s, "/p/c");
    // A parent nobody may delete under.
    let no_delete = vec![acl(perms::ALL & !perms::DELETE, "world", "anyone")];
    assert_eq!(
        h.write(s, create_with_acl("/locked", no_delete, 0))
            .reply
            .err,
        OK
    );
    h.mk(s, "/locked/x");

    let cases: Vec<(&str, i32, i32)> = vec![
        // getParentPathAndValidate: no '/', NUL, or a node the server owns.
        ("x", -1, BAD_ARGUMENTS),
        ("", -1, BAD_ARGUMENTS),
        ("/a\0", -1, BAD_ARGUMENTS),
        ("/", -1, BAD_ARGUMENTS),
        ("/zookeeper", -1, BAD_ARGUMENTS),
        ("/zookeeper/quota", -1, BAD_ARGUMENTS),
        ("/zookeeper/config", -1, BAD_ARGUMENTS),
        // Parent lookup.
        ("/missing/x", -1, NO_NODE),
        ("/missing/x/", -1, NO_NODE),
        // DELETE on the parent, before the node is even looked up.
        ("/locked/x", -1, NO_AUTH),
        ("/locked/nothing", -1, NO_AUTH),
        // No full path validation on delete: a malformed path is just not found.
        ("/a/", -1, NO_NODE),
        ("/a/.", -1, NO_NODE),
        ("/nope", -1, NO_NODE),
        // Version before NotEmpty.
        ("/p", 0, BAD_VERSION),
        ("/p", 7, BAD_VERSION),
        ("/p", -1, NOT_EMPTY),
        ("/p", 1, NOT_EMPTY),
    ];
    let before = h.dump();
    for (path, version, want) in cases {
        let a = h.delete(s, path, version);
        assert_eq!(a.reply.err, want, "delete {path:?} v{version}");
        assert!(a.events.is_empty());
    }
    assert_eq!(h.dump(), before);
    assert_eq!(h.delete(s, "/p/c", 0).reply.err, OK);
    assert_eq!(h.delete(s, "/p", 1).reply.err, OK);
    check_invariants(&h.st);
}

#[test]
fn delete_needs_delete_on_parent_not_on_node() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/open");
    let nothing = vec![acl(perms::READ, "ip", "10.9.9.9")];
    assert_eq!(
        h.write(s, create_with_acl("/open/n", nothing, 0)).reply.err,
        OK
    );
    assert_eq!(h.delete(s, "/open/n", -1).reply.err, OK);
}

#[test]
fn delete_ephemeral_updates_index() {
    let mut h = Harness::new();
    let s = h.session();
    h.create_ok(s, "/e1", b"", flags::EPHEMERAL);
    h.create_ok(s, "/e2", b"", flags::EPHEMERAL);
    // Any session may delete another's ephemeral.
    let other = h.session();
    assert_eq!(h.delete(other, "/e1", -1).reply.err, OK);
    assert_eq!(h.st.tree.ephemerals_of(s), vec!["/e2".to_string()]);
    assert_eq!(h.delete(s, "/e2", -1).reply.err, OK);
    assert!(h.st.tree.ephemerals_of(s).is_empty());
    assert_eq!(h.st.tree.ephemeral_count(), 0);
    check_invariants(&h.st);
}

#[test]
fn set_data_stat() {
    let mut h = Harness::new();
    let s = h.session();
    let c = h.create_ok(s, "/n", b"first", 0).1;
    h.mk(s, "/n/child");
    let before = h.stat("/n");
    h.tick(500);
    let a = h.set_data(s, "/n", b"second!", 0);
    let st = stat_body(&a.reply);
    assert_eq!(st.version, 1);
    assert_eq!(st.mzxid, a.zxid.0);
    assert_eq!(st.mtime, h.now);
    assert_eq!(st.data_length, 7);
    assert_eq!((st.czxid, st.ctime), (c.czxid, c.ctime));
    assert_eq!((st.cversion, st.pzxid), (before.cversion, before.pzxid));
    assert_eq!((st.num_children, st.aversion), (1, 0));
    assert_eq!(
        h.get_data(s, "/n", false).unwrap(),
        (b"second!".to_vec(), st.clone())
    );
    // The parent is untouched.
    let root_before = h.stat("/");
    let st2 = h.set_data_ok(s, "/n", b"");
    assert_eq!(st2.version, 2);
    assert_eq!(st2.data_length, 0);
    assert_eq!(h.stat("/"), root_before);
}

#[test]
fn set_data_check_order() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/n");
    let ro = vec![acl(perms::ALL & !perms::WRITE, "world", "anyone")];
    assert_eq!(h.write(s, create_with_acl("/ro", ro, 0)).reply.err, OK);
    let cases: Vec<(&str, i32, i32)> = vec![
        ("/n/", -1, BAD_ARGUMENTS),
        ("n", -1, BAD_ARGUMENTS),
        ("/missing/", 0, BAD_ARGUMENTS),
        ("/missing", -1, NO_NODE),
        ("/missing", 3, NO_NODE),
        // WRITE before the version.
        ("/ro", 5, NO_AUTH),
        ("/ro", -1, NO_AUTH),
        ("/n", 1, BAD_VERSION),
        ("/n", -2, BAD_VERSION),
    ];
    let before = h.dump();
    for (path, version, want) in cases {
        let a = h.set_data(s, path, b"x", version);
        assert_eq!(a.reply.err, want, "setData {path:?} v{version}");
    }
    assert_eq!(h.dump(), before);
    // The config node is read-only.
    assert_eq!(
        h.set_data(s, "/zookeeper/config", b"x", -1).reply.err,
        NO_AUTH
    );
    assert_eq!(h.set_data(s, "/n", b"x", 0).reply.err, OK);
    assert_eq!(h.set_data(s, "/n", b"x", 1).reply.err, OK);
    assert_eq!(h.set_data(s, "/n", b"x", 1).reply.err, BAD_VERSION);
    assert_eq!(h.stat("/n").version, 2);
}

#[test]
fn set_acl_stat_and_checks() {
    let mut h = Harness::new();
    let s = h.session();
    let c = h.create_ok(s, "/n", b"d", 0).1;
    h.tick(10);
    let read_admin = vec![acl(perms::READ | perms::ADMIN, "world", "anyone")];
    let a = h.write(s, set_acl("/n", read_admin.clone(), 0));
    let st = stat_body(&a.reply);
    assert_eq!(st.aversion, 1);
    // setACL changes neither data version nor mzxid/mtime.
    assert_eq!((st.version, st.mzxid, st.mtime), (0, c.mzxid, c.mtime));
    assert!(a.events.is_empty(), "setACL fires no watch");
    assert_eq!(h.get_acl(s, "/n").unwrap(), (read_admin.clone(), st));
    // The aversion is checked, not the data version.
    assert_eq!(h.write(s, set_acl("/n", open(), 0)).reply.err, BAD_VERSION);
    assert_eq!(h.write(s, set_acl("/n", open(), 1)).reply.err, OK);
    assert_eq!(h.stat("/n").aversion, 2);

    let no_admin = vec![acl(perms::ALL & !perms::ADMIN, "world", "anyone")];
    assert_eq!(h.write(s, set_acl("/n", no_admin, -1)).reply.err, OK);
    let cases: Vec<(&str, Vec<_>, i32, i32)> = vec![
        // Path, then fixupACL (before the node lookup), then the node, then ADMIN.
        ("/n/", vec![], -1, BAD_ARGUMENTS),
        ("/missing", vec![], -1, INVALID_ACL),
        ("/n", vec![], 9, INVALID_ACL),
        ("/missing", open(), -1, NO_NODE),
        ("/n", open(), 9, NO_AUTH),
        ("/n", open(), -1, NO_AUTH),
    ];
    for (path, list, version, want) in cases {
        let a = h.write(s, set_acl(path, list, version));
        assert_eq!(a.reply.err, want, "setACL {path:?}");
    }
    assert_eq!(h.stat("/n").aversion, 3);
}

#[test]
fn bare_check_op() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/n");
    h.set_data_ok(s, "/n", b"x");
    let check = |path: &str, version: i32| {
        Request::Check(CheckVersionRequest {
            path: path.into(),
            version,
        })
    };
    let before = h.dump();
    assert_eq!(h.write(s, check("/n", 1)).reply.err, OK);
    assert_eq!(h.write(s, check("/n", -1)).reply.err, OK);
    assert_eq!(h.write(s, check("/n", 0)).reply.err, BAD_VERSION);
    assert_eq!(h.write(s, check("/missing", 0)).reply.err, NO_NODE);
    assert_eq!(h.write(s, check("bad", 0)).reply.err, BAD_ARGUMENTS);
    assert_eq!(h.dump(), before, "check changes nothing");
}

#[test]
fn recreated_node_starts_over() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/n");
    h.set_data_ok(s, "/n", b"1");
    h.set_data_ok(s, "/n", b"2");
    assert_eq!(h.delete(s, "/n", 2).reply.err, OK);
    let st = h.create_ok(s, "/n", b"", 0).1;
    assert_eq!(st.version, 0);
    assert_eq!(st.czxid, h.st.zxid.0);
    assert_eq!(h.get_data(s, "/n", false).unwrap().0, Vec::<u8>::new());
}
