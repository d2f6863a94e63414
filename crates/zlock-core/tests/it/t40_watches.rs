//! Watches, following ZooKeeper's `DataTree` and `WatchManager`:
//! - getData/exists set a one-shot data watch (exists also on a missing node, which then
//!   fires NodeCreated); getChildren sets a one-shot child watch;
//! - create fires NodeCreated on the path and NodeChildrenChanged on the parent; delete
//!   fires NodeDeleted to the path's data and child watches, then NodeChildrenChanged on
//!   the parent; setData fires NodeDataChanged; setACL fires nothing;
//! - persistent watches see the node's own events and NodeChildrenChanged; recursive
//!   watches see every data event in the subtree but never NodeChildrenChanged;
//! - a session gets at most one event per trigger;
//! - checkWatches/removeWatches answer NoWatcher when nothing matches;
//! - setWatches re-arms after a reconnect, first reporting what changed since
//!   relativeZxid (`DataTree.setWatches`).

use zlock_core::read::set_watches;
use zlock_proto::records::{event_type as et, watcher_type, SetWatches2};

use crate::harness::*;

#[test]
fn data_watch_is_one_shot() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    h.get_data(w, "/n", true).unwrap();
    let a = h.set_data(s, "/n", b"1", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DATA_CHANGED, "/n")]);
    let a = h.set_data(s, "/n", b"2", -1);
    assert!(a.events.is_empty(), "fired once, then gone");
    assert_eq!(h.st.watches.count(), 0);
    // Setting it twice is still one watch and one event.
    h.get_data(w, "/n", true).unwrap();
    h.exists(w, "/n", true).unwrap();
    assert_eq!(h.st.watches.count(), 1);
    let a = h.delete(s, "/n", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/n")]);
}

#[test]
fn reads_without_watch_set_nothing() {
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/n");
    h.get_data(s, "/n", false).unwrap();
    h.exists(s, "/n", false).unwrap();
    h.children(s, "/n", false).unwrap();
    h.children2(s, "/n", false).unwrap();
    assert_eq!(h.exists(s, "/missing", false), Err(NO_NODE));
    assert_eq!(h.st.watches.count(), 0);
}

#[test]
fn exists_watch_on_missing_node_fires_created() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    assert_eq!(h.exists(w, "/n", true), Err(NO_NODE));
    // getData/getChildren on a missing node set no watch.
    assert_eq!(h.get_data(w, "/m", true), Err(NO_NODE));
    assert_eq!(h.children(w, "/m", true), Err(NO_NODE));
    assert_eq!(h.st.watches.count(), 1);
    let a = h.create(s, "/n", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CREATED, "/n")]);
    let a = h.create(s, "/m", b"", 0);
    assert!(a.events.is_empty());
}

#[test]
fn exists_watch_on_existing_node() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    h.exists(w, "/n", true).unwrap();
    let a = h.set_data(s, "/n", b"x", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DATA_CHANGED, "/n")]);
    h.exists(w, "/n", true).unwrap();
    let a = h.delete(s, "/n", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/n")]);
}

#[test]
fn child_watch() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/p");
    h.children(w, "/p", true).unwrap();
    // Data changes of the node or its children do not fire a child watch.
    assert!(h.set_data(s, "/p", b"x", -1).events.is_empty());
    let a = h.create(s, "/p/c", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CHILDREN_CHANGED, "/p")]);
    assert!(h.create(s, "/p/d", b"", 0).events.is_empty(), "one-shot");
    h.children2(w, "/p", true).unwrap();
    assert!(h.set_data(s, "/p/c", b"x", -1).events.is_empty());
    assert!(
        h.create(s, "/p/c/g", b"", 0).events.is_empty(),
        "grandchild"
    );
    let a = h.delete(s, "/p/d", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CHILDREN_CHANGED, "/p")]);
}

#[test]
fn create_fires_node_created_then_parent_children_changed() {
    let mut h = Harness::new();
    let s = h.session();
    let w1 = h.session();
    let w2 = h.session();
    h.mk(s, "/p");
    assert_eq!(h.exists(w1, "/p/c", true), Err(NO_NODE));
    h.children(w2, "/p", true).unwrap();
    h.children(w1, "/", true).unwrap();
    let a = h.create(s, "/p/c", b"", 0);
    assert_eq!(
        evs(&a),
        vec![
            ev(w1, et::NODE_CREATED, "/p/c"),
            ev(w2, et::NODE_CHILDREN_CHANGED, "/p"),
        ]
    );
    // The watch on "/" fires for a child of the root.
    let a = h.create(s, "/top", b"", 0);
    assert_eq!(evs(&a), vec![ev(w1, et::NODE_CHILDREN_CHANGED, "/")]);
}

#[test]
fn delete_fires_data_and_child_watches_once_per_session() {
    let mut h = Harness::new();
    let s = h.session();
    let both = h.session();
    let child_only = h.session();
    let parent = h.session();
    h.mk(s, "/p");
    h.mk(s, "/p/n");
    h.get_data(both, "/p/n", true).unwrap();
    h.children(both, "/p/n", true).unwrap();
    h.children(child_only, "/p/n", true).unwrap();
    h.children(parent, "/p", true).unwrap();
    let a = h.delete(s, "/p/n", -1);
    let got = evs(&a);
    // NodeDeleted on the path first (to each session once), then the parent.
    let (deleted, rest) = got.split_at(2);
    let mut deleted = deleted.to_vec();
    deleted.sort();
    assert_eq!(
        deleted,
        vec![
            ev(both, et::NODE_DELETED, "/p/n"),
            ev(child_only, et::NODE_DELETED, "/p/n"),
        ]
    );
    assert_eq!(rest, &[ev(parent, et::NODE_CHILDREN_CHANGED, "/p")]);
    assert_eq!(h.st.watches.count(), 0, "all one-shot watches used up");
}

#[test]
fn set_acl_and_failed_writes_fire_nothing() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    h.get_data(w, "/n", true).unwrap();
    h.children(w, "/n", true).unwrap();
    h.children(w, "/", true).unwrap();
    assert!(h.write(s, set_acl("/n", open(), -1)).events.is_empty());
    assert!(h.set_data(s, "/n", b"", 5).events.is_empty());
    assert!(h.create(s, "/n", b"", 0).events.is_empty());
    assert!(h.delete(s, "/n", 5).events.is_empty());
    assert!(h.create(s, "/n/e/x", b"", 0).events.is_empty());
    assert_eq!(h.st.watches.count(), 3, "still armed");
}

#[test]
fn persistent_watch() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.add_watch(w, "/p", false); // allowed on a missing path
    let a = h.create(s, "/p", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CREATED, "/p")]);
    let a = h.set_data(s, "/p", b"x", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DATA_CHANGED, "/p")]);
    let a = h.create(s, "/p/c", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CHILDREN_CHANGED, "/p")]);
    assert!(
        h.set_data(s, "/p/c", b"x", -1).events.is_empty(),
        "not the children's data"
    );
    assert!(
        h.create(s, "/p/c/g", b"", 0).events.is_empty(),
        "not grandchildren"
    );
    assert!(h.delete(s, "/p/c/g", -1).events.is_empty());
    let a = h.delete(s, "/p/c", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CHILDREN_CHANGED, "/p")]);
    let a = h.delete(s, "/p", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/p")]);
    // It survives its node.
    let a = h.create(s, "/p", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CREATED, "/p")]);
    assert_eq!(h.check_watches(w, "/p", watcher_type::ANY), OK);
}

#[test]
fn recursive_watch() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.add_watch(w, "/r", true);
    let mut all = Vec::new();
    for p in ["/r", "/r/a", "/r/a/b"] {
        all.extend(evs(&h.create(s, p, b"", 0)));
    }
    all.extend(evs(&h.set_data(s, "/r/a/b", b"x", -1)));
    all.extend(evs(&h.set_data(s, "/r", b"x", -1)));
    all.extend(evs(&h.delete(s, "/r/a/b", -1)));
    assert_eq!(
        all,
        vec![
            ev(w, et::NODE_CREATED, "/r"),
            ev(w, et::NODE_CREATED, "/r/a"),
            ev(w, et::NODE_CREATED, "/r/a/b"),
            ev(w, et::NODE_DATA_CHANGED, "/r/a/b"),
            ev(w, et::NODE_DATA_CHANGED, "/r"),
            ev(w, et::NODE_DELETED, "/r/a/b"),
        ],
        "every data event in the subtree, never NodeChildrenChanged"
    );
    // A sibling sharing the name prefix is not in the subtree.
    assert!(h.create(s, "/rx", b"", 0).events.is_empty());
    assert!(h.create(s, "/rx/r", b"", 0).events.is_empty());
}

#[test]
fn recursive_watch_on_root_sees_everything() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.add_watch(w, "/", true);
    let a = h.create(s, "/a", b"", 0);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CREATED, "/a")]);
    let a = h.create(s, "/a/b", b"", flags::EPHEMERAL);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_CREATED, "/a/b")]);
    let a = h.close(s);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/a/b")]);
}

#[test]
fn at_most_one_event_per_session_per_trigger() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    let other = h.session();
    h.mk(s, "/a");
    h.mk(s, "/a/n");
    h.get_data(w, "/a/n", true).unwrap();
    h.children(w, "/a/n", true).unwrap();
    h.add_watch(w, "/a/n", false);
    h.add_watch(w, "/a", true);
    h.add_watch(w, "/", true);
    h.get_data(other, "/a/n", true).unwrap();
    let a = h.set_data(s, "/a/n", b"x", -1);
    assert_eq!(
        sorted(&a),
        vec![
            ev(w, et::NODE_DATA_CHANGED, "/a/n"),
            ev(other, et::NODE_DATA_CHANGED, "/a/n"),
        ]
    );
    let a = h.delete(s, "/a/n", -1);
    assert_eq!(evs(&a), vec![ev(w, et::NODE_DELETED, "/a/n")]);
}

#[test]
fn check_and_remove_watches() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/n");
    for ty in [
        watcher_type::DATA,
        watcher_type::CHILDREN,
        watcher_type::ANY,
    ] {
        assert_eq!(h.check_watches(w, "/n", ty), NO_WATCHER);
        assert_eq!(h.remove_watches(w, "/n", ty), NO_WATCHER);
    }
    h.get_data(w, "/n", true).unwrap();
    assert_eq!(h.check_watches(w, "/n", watcher_type::DATA), OK);
    assert_eq!(h.check_watches(w, "/n", watcher_type::ANY), OK);
    assert_eq!(h.check_watches(w, "/n", watcher_type::CHILDREN), NO_WATCHER);
    // Watches belong to their session. (ZooKeeper 3.8.0's `WatchManager.containsWatcher`
    // answers yes to *any* session once someone watches the path; checked live. zlock
    // deliberately does not copy that bug; removeWatches is per session in both.)
    assert_eq!(h.check_watches(s, "/n", watcher_type::DATA), NO_WATCHER);
    assert_eq!(h.remove_watches(s, "/n", watcher_type::DATA), NO_WATCHER);
    assert_eq!(
        h.remove_watches(w, "/n", watcher_type::CHILDREN),
        NO_WATCHER
    );
    assert_eq!(h.remove_watches(w, "/n", watcher_type::DATA), OK);
    assert_eq!(h.remove_watches(w, "/n", watcher_type::DATA), NO_WATCHER);
    assert!(
        h.set_data(s, "/n", b"x", -1).events.is_empty(),
        "removed watches do not fire"
    );

    // ANY removes both one-shot kinds and persistent ones.
    h.get_data(w, "/n", true).unwrap();
    h.children(w, "/n", true).unwrap();
    h.add_watch(w, "/n", false);
    assert_eq!(h.remove_watches(w, "/n", watcher_type::CHILDREN), OK);
    assert_eq!(h.check_watches(w, "/n", watcher_type::DATA), OK);
    assert_eq!(h.remove_watches(w, "/n", watcher_type::ANY), OK);
    assert_eq!(h.check_watches(w, "/n", watcher_type::ANY), NO_WATCHER);
    assert!(h.set_data(s, "/n", b"y", -1).events.is_empty());
    assert!(h.delete(s, "/n", -1).events.is_empty());
    // An exists-watch on a missing node counts as a data watch.
    assert_eq!(h.exists(w, "/gone", true), Err(NO_NODE));
    assert_eq!(h.check_watches(w, "/gone", watcher_type::DATA), OK);
    // A fired watch is gone.
    let a = h.create(s, "/gone", b"", 0);
    assert_eq!(evs(&a).len(), 1);
    assert_eq!(h.check_watches(w, "/gone", watcher_type::DATA), NO_WATCHER);
}

fn sw(rel: i64) -> SetWatches2 {
    SetWatches2 {
        relative_zxid: rel,
        data_watches: vec![],
        exist_watches: vec![],
        child_watches: vec![],
        persistent_watches: vec![],
        persistent_recursive_watches: vec![],
    }
}

#[test]
fn set_watches_reports_missed_changes_and_rearms_the_rest() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/same");
    h.mk(s, "/changed");
    h.mk(s, "/kids");
    h.mk(s, "/quiet");
    h.mk(s, "/deleted");
    h.mk(s, "/appeared-before");
    let rel = h.st.zxid.0;
    // Changes the client missed while disconnected.
    h.set_data_ok(s, "/changed", b"x");
    h.mk(s, "/kids/k");
    assert_eq!(h.delete(s, "/deleted", -1).reply.err, OK);
    h.mk(s, "/appeared");

    let mut req = sw(rel);
    req.data_watches = vec!["/same".into(), "/changed".into(), "/deleted".into()];
    req.exist_watches = vec![
        "/appeared".into(),
        "/appeared-before".into(),
        "/absent".into(),
    ];
    req.child_watches = vec!["/kids".into(), "/quiet".into(), "/deleted".into()];
    req.persistent_watches = vec!["/p".into()];
    req.persistent_recursive_watches = vec!["/r".into()];
    let events = set_watches(&mut h.st, w, &[], &req);
    assert_eq!(
        flat(&events),
        vec![
            ev(w, et::NODE_DATA_CHANGED, "/changed"),
            ev(w, et::NODE_DELETED, "/deleted"),
            ev(w, et::NODE_CREATED, "/appeared"),
            // An exist watch on a node that exists fires whatever its age.
            ev(w, et::NODE_CREATED, "/appeared-before"),
            ev(w, et::NODE_CHILDREN_CHANGED, "/kids"),
            ev(w, et::NODE_DELETED, "/deleted"),
        ]
    );
    // Re-armed: data on /same, exist on /absent, child on /quiet, plus the persistent ones.
    let mut armed = h.st.watches.of_session(w);
    armed.sort_by(|a, b| a.1.cmp(&b.1));
    let paths: Vec<&str> = armed.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(paths, vec!["/absent", "/p", "/quiet", "/r", "/same"]);
    // Those fire normally now.
    assert_eq!(
        evs(&h.set_data(s, "/same", b"y", -1)),
        vec![ev(w, et::NODE_DATA_CHANGED, "/same")]
    );
    assert_eq!(
        evs(&h.create(s, "/absent", b"", 0)),
        vec![ev(w, et::NODE_CREATED, "/absent")]
    );
    assert_eq!(
        evs(&h.create(s, "/quiet/c", b"", 0)),
        vec![ev(w, et::NODE_CHILDREN_CHANGED, "/quiet")]
    );
    assert_eq!(
        evs(&h.create(s, "/p", b"", 0)),
        vec![ev(w, et::NODE_CREATED, "/p")]
    );
    assert_eq!(
        evs(&h.create(s, "/r", b"", 0)),
        vec![ev(w, et::NODE_CREATED, "/r")]
    );
    assert_eq!(
        evs(&h.create(s, "/r/x", b"", 0)),
        vec![ev(w, et::NODE_CREATED, "/r/x")]
    );
    // Persistent watches stay.
    assert_eq!(
        evs(&h.set_data(s, "/p", b"1", -1)),
        vec![ev(w, et::NODE_DATA_CHANGED, "/p")]
    );
}

#[test]
fn set_watches_with_current_zxid_only_rearms() {
    let mut h = Harness::new();
    let s = h.session();
    let w = h.session();
    h.mk(s, "/a");
    h.mk(s, "/a/b");
    let mut req = sw(h.st.zxid.0);
    req.data_watches = vec!["/a".into()];
    req.child_watches = vec!["/a".into()];
    req.exist_watches = vec!["/x".into()];
    assert!(set_watches(&mut h.st, w, &[], &req).is_empty());
    assert_eq!(h.st.watches.count(), 3);
    // relativeZxid is compared with mzxid/pzxid strictly: a change at exactly rel is old.
    let mut req = sw(h.stat("/a").pzxid - 1);
    req.child_watches = vec!["/a".into()];
    let got = set_watches(&mut h.st, w, &[], &req);
    assert_eq!(flat(&got), vec![ev(w, et::NODE_CHILDREN_CHANGED, "/a")]);
}

#[test]
fn events_go_to_the_sessions_that_asked() {
    let mut h = Harness::new();
    let s = h.session();
    let ws: Vec<_> = (0..5).map(|_| h.session()).collect();
    h.mk(s, "/n");
    for w in &ws {
        h.get_data(*w, "/n", true).unwrap();
    }
    let a = h.set_data(s, "/n", b"x", -1);
    let mut want: Vec<_> = ws
        .iter()
        .map(|w| ev(*w, et::NODE_DATA_CHANGED, "/n"))
        .collect();
    want.sort();
    assert_eq!(sorted(&a), want);
}

#[test]
fn reads_of_malformed_paths_are_not_found() {
    // FinalRequestProcessor does not validate read paths (checked against 3.8.0): a
    // malformed path is NoNode, and exists only refuses a NUL. An exists watch is set
    // even then, as DataTree.statNode adds it before looking the node up.
    let mut h = Harness::new();
    let s = h.session();
    h.mk(s, "/a");
    for p in ["/a/", "a", "/a//b", "/\u{1F600}"] {
        assert_eq!(h.exists(s, p, false), Err(NO_NODE), "exists {p:?}");
        assert_eq!(h.get_data(s, p, false), Err(NO_NODE), "getData {p:?}");
        assert_eq!(h.children(s, p, false), Err(NO_NODE), "getChildren {p:?}");
        assert_eq!(h.get_acl(s, p), Err(NO_NODE), "getACL {p:?}");
    }
    // ZooKeeper's DataTree keeps the root under "" as well as "/" (observed: exists,
    // getData and getChildren of "" answer for the root).
    assert_eq!(h.exists(s, "", false), Ok(h.stat("/")), "exists \"\"");
    assert_eq!(h.children(s, "", false).unwrap(), vec!["a", "zookeeper"]);
    assert_eq!(h.exists(s, "/a\0", false), Err(BAD_ARGUMENTS));
    assert_eq!(h.get_data(s, "/a\0", false), Err(NO_NODE));
    // Writes do validate: setData on "/a/" is BadArguments although "/a" exists.
    assert_eq!(h.set_data(s, "/a/", b"", -1).reply.err, BAD_ARGUMENTS);
}
