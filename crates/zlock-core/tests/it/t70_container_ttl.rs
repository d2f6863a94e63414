//! Containers and TTL nodes, as ZooKeeper's `ContainerManager.getCandidates` picks them:
//! an empty container whose cversion is above 0 (it had a child), and a childless TTL
//! node whose mtime is more than its TTL ago. [`State::expired_candidates`] proposes,
//! [`zlock_core::TxnBody::DeleteExpired`] re-checks at apply time.

use zlock_core::{State, TxnBody};
use zlock_proto::records::event_type as et;

use crate::harness::*;

fn expire(h: &mut Harness, paths: &[&str]) -> zlock_core::Applied {
    let txn = h.txn(
        SessionId::NONE,
        TxnBody::DeleteExpired {
            paths: paths.iter().map(|p| p.to_string()).collect(),
        },
    );
    h.apply(&txn)
}

fn candidates(st: &State, now: i64) -> Vec<String> {
    let mut v = st.expired_candidates(now);
    v.sort();
    v
}

#[test]
fn a_container_that_never_had_a_child_stays() {
    let mut h = Harness::new();
    let s = h.session();
    h.write(s, create_container("/c"));
    h.tick(10_000_000);
    assert!(candidates(&h.st, h.now).is_empty());
    let a = expire(&mut h, &["/c"]);
    assert_eq!(a.reply.err, OK);
    assert!(h.has("/c"));
}

#[test]
fn a_container_goes_once_its_last_child_is_gone() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.write(s, create_container("/c"));
    h.mk(s, "/c/a");
    h.mk(s, "/c/b");
    assert_eq!(h.delete(s, "/c/a", -1).reply.err, OK);
    assert!(candidates(&h.st, h.now).is_empty(), "still has a child");
    assert_eq!(h.delete(s, "/c/b", -1).reply.err, OK);
    assert_eq!(candidates(&h.st, h.now), vec!["/c"]);
    h.get_data(w, "/c", true).unwrap();
    h.children(w, "/", true).unwrap();
    let z = h.st.zxid.0;
    let a = expire(&mut h, &["/c"]);
    assert_eq!(a.zxid.0, z + 1);
    assert!(!h.has("/c"));
    assert_eq!(
        evs(&a),
        vec![
            ev(w, et::NODE_DELETED, "/c"),
            ev(w, et::NODE_CHILDREN_CHANGED, "/"),
        ]
    );
    assert_eq!(h.stat("/").pzxid, a.zxid.0);
    assert_eq!(h.st.tree.containers().count(), 0);
    check_invariants(&h.st);
}

#[test]
fn delete_expired_rechecks_at_apply_time() {
    let mut h = Harness::new();
    let s = h.session();
    h.write(s, create_container("/c"));
    h.mk(s, "/c/x");
    assert_eq!(h.delete(s, "/c/x", -1).reply.err, OK);
    let picked = candidates(&h.st, h.now);
    assert_eq!(picked, vec!["/c"]);
    // A child arrives between the proposal and its apply.
    h.mk(s, "/c/y");
    let a = expire(&mut h, &["/c"]);
    assert!(a.events.is_empty());
    assert!(h.has("/c") && h.has("/c/y"));
    // Persistent and ephemeral nodes, missing paths and the root are never touched.
    h.mk(s, "/p");
    h.create_ok(s, "/e", b"", flags::EPHEMERAL);
    let before = h.dump();
    let a = expire(
        &mut h,
        &["/p", "/e", "/missing", "/", "/zookeeper/quota", "bad"],
    );
    assert!(a.events.is_empty());
    assert_eq!(h.dump(), before);
}

#[test]
fn container_emptied_by_session_close() {
    // The Curator lock layout: a container parent with ephemeral sequential children.
    let mut h = Harness::new();
    let admin = h.session();
    let s = h.session();
    h.write(admin, create_container("/locks"));
    h.create_ok(s, "/locks/lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    assert!(candidates(&h.st, h.now).is_empty());
    h.close(s);
    assert_eq!(candidates(&h.st, h.now), vec!["/locks"]);
    expire(&mut h, &["/locks"]);
    assert!(!h.has("/locks"));
    check_invariants(&h.st);
}

#[test]
fn nested_containers_go_one_level_at_a_time() {
    let mut h = Harness::new();
    let s = h.session();
    h.write(s, create_container("/c1"));
    h.write(s, create_container("/c1/c2"));
    h.mk(s, "/c1/c2/x");
    assert_eq!(h.delete(s, "/c1/c2/x", -1).reply.err, OK);
    assert_eq!(candidates(&h.st, h.now), vec!["/c1/c2"]);
    // A batch naming both removes only what is removable when each is reached.
    expire(&mut h, &["/c1", "/c1/c2"]);
    assert!(h.has("/c1") && !h.has("/c1/c2"));
    assert_eq!(candidates(&h.st, h.now), vec!["/c1"]);
    expire(&mut h, &["/c1"]);
    assert!(!h.has("/c1"));
    check_invariants(&h.st);
}

#[test]
fn ttl_node_expires_strictly_after_its_ttl() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    let w = h.session();
    let created = h.now;
    assert_eq!(h.write(s, create_ttl("/t", flags::TTL, 1000)).reply.err, OK);
    h.get_data(w, "/t", true).unwrap();
    assert!(candidates(&h.st, created + 1000).is_empty());
    assert_eq!(candidates(&h.st, created + 1001), vec!["/t"]);
    // The Txn's own time decides.
    h.now = created + 1000;
    expire(&mut h, &["/t"]);
    assert!(h.has("/t"));
    h.now = created + 1001;
    let a = expire(&mut h, &["/t"]);
    assert!(!h.has("/t"));
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/t")]);
    assert_eq!(h.st.tree.ttl_nodes().count(), 0);
    check_invariants(&h.st);
}

#[test]
fn ttl_counts_from_the_last_modification() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    let t0 = h.now;
    h.write(s, create_ttl("/t", flags::TTL, 1000));
    h.tick(600);
    h.set_data_ok(s, "/t", b"touch");
    assert!(candidates(&h.st, t0 + 1001).is_empty());
    assert_eq!(candidates(&h.st, t0 + 1601), vec!["/t"]);
    // setACL does not change mtime, so it does not extend the TTL.
    h.tick(500);
    assert_eq!(h.write(s, set_acl("/t", open(), -1)).reply.err, OK);
    assert_eq!(candidates(&h.st, t0 + 1601), vec!["/t"]);
}

#[test]
fn ttl_node_with_children_does_not_expire() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    let t0 = h.now;
    h.write(s, create_ttl("/t", flags::TTL, 10));
    h.mk(s, "/t/child");
    h.now = t0 + 100;
    assert!(candidates(&h.st, h.now).is_empty());
    expire(&mut h, &["/t"]);
    assert!(h.has("/t"));
    // Once the child is gone (and it was gone long enough) it expires: deleting a child
    // does not touch the parent's mtime.
    assert_eq!(h.delete(s, "/t/child", -1).reply.err, OK);
    assert_eq!(candidates(&h.st, h.now), vec!["/t"]);
    expire(&mut h, &["/t"]);
    assert!(!h.has("/t"));
}

#[test]
fn sequential_ttl_and_mixed_candidates() {
    let mut h = Harness::with_ttl();
    let s = h.session();
    let t0 = h.now;
    h.mk(s, "/q");
    let a = h.write(s, create_ttl("/q/t-", flags::TTL_SEQUENTIAL, 50));
    let p = create2_body(&a.reply).path;
    assert_eq!(p, "/q/t-0000000000");
    h.write(s, create_ttl("/long", flags::TTL, 1_000_000));
    h.write(s, create_container("/c"));
    h.mk(s, "/c/x");
    h.delete(s, "/c/x", -1);
    assert_eq!(
        candidates(&h.st, t0 + 51),
        vec!["/c".to_string(), p.clone()]
    );
    h.now = t0 + 51;
    let list = candidates(&h.st, h.now);
    let refs: Vec<&str> = list.iter().map(String::as_str).collect();
    expire(&mut h, &refs);
    assert!(!h.has(&p) && !h.has("/c") && h.has("/long") && h.has("/q"));
    check_invariants(&h.st);
}

#[test]
fn create2_with_container_flags_is_not_a_container() {
    // ZooKeeper 3.8.0 keeps such a node after its last child goes (checked live).
    let mut h = Harness::new();
    let s = h.session();
    h.create_ok(s, "/c2", b"", flags::CONTAINER);
    h.mk(s, "/c2/x");
    assert_eq!(h.delete(s, "/c2/x", -1).reply.err, OK);
    assert!(candidates(&h.st, h.now).is_empty());
    expire(&mut h, &["/c2"]);
    assert!(h.has("/c2"));
}
