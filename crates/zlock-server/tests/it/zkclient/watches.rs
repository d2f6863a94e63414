//! One-shot watches (data, exist, child) and persistent / persistent-recursive watches
//! (addWatch), with the exact event sequence ZooKeeper delivers.

use zk::{AddWatchMode, CreateMode, EventType};
use zookeeper_client as zk;

use super::{ephemeral, event, mode, next_event, on_both, oneshot, persistent, Env};

/// `Some(output)` if `f` is ready on its first poll.
async fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        v = f => Some(v),
        _ = std::future::ready(()) => None,
    }
}

#[tokio::test]
async fn oneshot_data_and_exist_watches() {
    on_both("oneshot_data_and_exist_watches", |env: Env| async move {
        let c = env.client().await;
        let w = env.client().await;
        c.create("/n", b"0", &persistent()).await.unwrap();

        // getData watch: setData, then delete.
        let (_, _, dw) = c.get_and_watch_data("/n").await.unwrap();
        w.set_data("/n", b"1", None).await.unwrap();
        assert_eq!(oneshot(dw).await, event(EventType::NodeDataChanged, "/n"));
        let (data, _, dw) = c.get_and_watch_data("/n").await.unwrap();
        assert_eq!(data, b"1");
        w.delete("/n", None).await.unwrap();
        assert_eq!(oneshot(dw).await, event(EventType::NodeDeleted, "/n"));

        // exists watch on a missing node: creation.
        let (stat, ew) = c.check_and_watch_stat("/x").await.unwrap();
        assert_eq!(stat, None);
        w.create("/x", b"", &persistent()).await.unwrap();
        assert_eq!(oneshot(ew).await, event(EventType::NodeCreated, "/x"));
        // exists watch on an existing node: data change, then deletion.
        let (stat, ew) = c.check_and_watch_stat("/x").await.unwrap();
        assert!(stat.is_some());
        w.set_data("/x", b"d", None).await.unwrap();
        assert_eq!(oneshot(ew).await, event(EventType::NodeDataChanged, "/x"));
        let (_, ew) = c.check_and_watch_stat("/x").await.unwrap();
        w.delete("/x", None).await.unwrap();
        assert_eq!(oneshot(ew).await, event(EventType::NodeDeleted, "/x"));

        // A data watch and an exists watch on one path both fire, once each.
        w.create("/y", b"", &persistent()).await.unwrap();
        let (_, _, dw) = c.get_and_watch_data("/y").await.unwrap();
        let (_, ew) = c.check_and_watch_stat("/y").await.unwrap();
        w.set_data("/y", b"!", None).await.unwrap();
        assert_eq!(oneshot(dw).await, event(EventType::NodeDataChanged, "/y"));
        assert_eq!(oneshot(ew).await, event(EventType::NodeDataChanged, "/y"));

        // A watch set by one session does not fire for changes on another path.
        let (_, _, dw) = c.get_and_watch_data("/y").await.unwrap();
        w.create("/y2", b"", &persistent()).await.unwrap();
        w.create("/y/child", b"", &persistent()).await.unwrap();
        w.set_data("/y", b"?", None).await.unwrap();
        assert_eq!(oneshot(dw).await, event(EventType::NodeDataChanged, "/y"));
    })
    .await;
}

#[tokio::test]
async fn oneshot_child_watches() {
    on_both("oneshot_child_watches", |env: Env| async move {
        let c = env.client().await;
        let w = env.client().await;
        c.create("/p", b"", &persistent()).await.unwrap();

        // getChildren watch: a child created.
        let (kids, cw) = c.list_and_watch_children("/p").await.unwrap();
        assert!(kids.is_empty());
        w.create("/p/a", b"", &persistent()).await.unwrap();
        assert_eq!(
            oneshot(cw).await,
            event(EventType::NodeChildrenChanged, "/p")
        );

        // getChildren2 watch: a child deleted. Data changes of the parent and changes
        // below a child do not count as children changes.
        let (kids, stat, cw) = c.get_and_watch_children("/p").await.unwrap();
        assert_eq!(kids, ["a"]);
        assert_eq!(stat.num_children, 1);
        w.set_data("/p", b"data", None).await.unwrap();
        w.create("/p/a/grandchild", b"", &persistent())
            .await
            .unwrap();
        w.delete("/p/a/grandchild", None).await.unwrap();
        w.delete("/p/a", None).await.unwrap();
        assert_eq!(
            oneshot(cw).await,
            event(EventType::NodeChildrenChanged, "/p")
        );

        // An ephemeral child going away with its session.
        let e = env.client().await;
        e.create("/p/eph", b"", &ephemeral()).await.unwrap();
        let (kids, cw) = c.list_and_watch_children("/p").await.unwrap();
        assert_eq!(kids, ["eph"]);
        drop(e);
        assert_eq!(
            oneshot(cw).await,
            event(EventType::NodeChildrenChanged, "/p")
        );

        // A child watch on a node that is deleted gets NodeDeleted.
        let (_, cw) = c.list_and_watch_children("/p").await.unwrap();
        w.delete("/p", None).await.unwrap();
        assert_eq!(oneshot(cw).await, event(EventType::NodeDeleted, "/p"));

        // Sequential creation under a watched parent.
        c.create("/q", b"", &persistent()).await.unwrap();
        let (_, cw) = c.list_and_watch_children("/q").await.unwrap();
        w.create("/q/s-", b"", &mode(CreateMode::PersistentSequential))
            .await
            .unwrap();
        assert_eq!(
            oneshot(cw).await,
            event(EventType::NodeChildrenChanged, "/q")
        );
    })
    .await;
}

#[tokio::test]
async fn watch_event_precedes_reply_on_same_session() {
    on_both(
        "watch_event_precedes_reply_on_same_session",
        |env: Env| async move {
            // ZooKeeper sends a session's watch events before the reply to that session's
            // request that caused them, so once the write returns the event is already there.
            let c = env.client().await;
            c.create("/n", b"", &persistent()).await.unwrap();
            let (_, _, dw) = c.get_and_watch_data("/n").await.unwrap();
            c.set_data("/n", b"x", None).await.unwrap();
            let ev = now_or_never(dw.changed()).await;
            assert_eq!(ev, Some(event(EventType::NodeDataChanged, "/n")));

            let (_, ew) = c.check_and_watch_stat("/m").await.unwrap();
            c.create("/m", b"", &persistent()).await.unwrap();
            let ev = now_or_never(ew.changed()).await;
            assert_eq!(ev, Some(event(EventType::NodeCreated, "/m")));

            let mut pw = c
                .watch("/r", AddWatchMode::PersistentRecursive)
                .await
                .unwrap();
            c.create("/r", b"", &persistent()).await.unwrap();
            assert_eq!(
                now_or_never(pw.changed()).await,
                Some(event(EventType::NodeCreated, "/r"))
            );
            let ttl = persistent().with_ttl(std::time::Duration::from_secs(3600));
            c.create("/r/ttl", b"", &ttl).await.unwrap();
            assert_eq!(
                now_or_never(pw.changed()).await,
                Some(event(EventType::NodeCreated, "/r/ttl"))
            );
            let mut m = c.new_multi_writer();
            m.add_set_data("/r/ttl", b"1", None).unwrap();
            m.add_delete("/r/ttl", None).unwrap();
            m.commit().await.unwrap();
            assert_eq!(
                now_or_never(pw.changed()).await,
                Some(event(EventType::NodeDataChanged, "/r/ttl"))
            );
            assert_eq!(
                now_or_never(pw.changed()).await,
                Some(event(EventType::NodeDeleted, "/r/ttl"))
            );
        },
    )
    .await;
}

#[tokio::test]
async fn persistent_watch_event_sequence() {
    on_both("persistent_watch_event_sequence", |env: Env| async move {
        let c = env.client().await;
        let w = env.client().await;
        // addWatch is allowed on a path that does not exist yet.
        let mut pw = c.watch("/pw", AddWatchMode::Persistent).await.unwrap();

        w.create("/pw", b"", &persistent()).await.unwrap();
        w.set_data("/pw", b"1", None).await.unwrap();
        w.create("/pw/c", b"", &persistent()).await.unwrap();
        // Not seen by a non-recursive watch: changes to a child's data or below it.
        w.set_data("/pw/c", b"1", None).await.unwrap();
        w.create("/pw/c/g", b"", &persistent()).await.unwrap();
        w.delete("/pw/c/g", None).await.unwrap();
        w.delete("/pw/c", None).await.unwrap();
        w.delete("/pw", None).await.unwrap();
        // Still armed after the node it watches is gone.
        w.create("/pw", b"", &persistent()).await.unwrap();
        w.set_data("/pw", b"2", None).await.unwrap();

        let expected = [
            event(EventType::NodeCreated, "/pw"),
            event(EventType::NodeDataChanged, "/pw"),
            event(EventType::NodeChildrenChanged, "/pw"),
            event(EventType::NodeChildrenChanged, "/pw"),
            event(EventType::NodeDeleted, "/pw"),
            event(EventType::NodeCreated, "/pw"),
            event(EventType::NodeDataChanged, "/pw"),
        ];
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(&next_event(&mut pw).await, want, "event #{i}");
        }
    })
    .await;
}

#[tokio::test]
async fn persistent_recursive_watch_event_sequence() {
    on_both(
        "persistent_recursive_watch_event_sequence",
        |env: Env| async move {
            let c = env.client().await;
            let w = env.client().await;
            let mut rw = c
                .watch("/r", AddWatchMode::PersistentRecursive)
                .await
                .unwrap();

            w.create("/r", b"", &persistent()).await.unwrap();
            w.create("/r/a", b"", &persistent()).await.unwrap();
            w.create("/r/a/b", b"", &persistent()).await.unwrap();
            w.set_data("/r/a/b", b"x", None).await.unwrap();
            w.set_data("/r", b"x", None).await.unwrap();
            // Outside the subtree, though its name starts with "/r".
            w.create("/rx", b"", &persistent()).await.unwrap();
            w.set_data("/rx", b"", None).await.unwrap();
            w.delete("/r/a/b", None).await.unwrap();
            // One multi: its events in op order.
            let mut m = w.new_multi_writer();
            m.add_create("/r/m", b"", &persistent()).unwrap();
            m.add_set_data("/r/m", b"1", None).unwrap();
            m.add_delete("/r/m", None).unwrap();
            m.commit().await.unwrap();
            // Sequential and ephemeral nodes; the ephemeral leaves with its session.
            let (_, n) = w
                .create("/r/a/s-", b"", &mode(CreateMode::PersistentSequential))
                .await
                .unwrap();
            assert_eq!(n.into_i64(), 1, "numbered by creates under /r/a");
            let e = env.client().await;
            e.create("/r/a/eph", b"", &ephemeral()).await.unwrap();
            drop(e);
            super::wait_gone(&w, "/r/a/eph").await;
            w.delete("/r/a/s-0000000001", None).await.unwrap();
            w.delete("/r/a", None).await.unwrap();
            w.delete("/r", None).await.unwrap();
            w.create("/r", b"", &persistent()).await.unwrap();

            let expected = [
                event(EventType::NodeCreated, "/r"),
                event(EventType::NodeCreated, "/r/a"),
                event(EventType::NodeCreated, "/r/a/b"),
                event(EventType::NodeDataChanged, "/r/a/b"),
                event(EventType::NodeDataChanged, "/r"),
                event(EventType::NodeDeleted, "/r/a/b"),
                event(EventType::NodeCreated, "/r/m"),
                event(EventType::NodeDataChanged, "/r/m"),
                event(EventType::NodeDeleted, "/r/m"),
                event(EventType::NodeCreated, "/r/a/s-0000000001"),
                event(EventType::NodeCreated, "/r/a/eph"),
                event(EventType::NodeDeleted, "/r/a/eph"),
                event(EventType::NodeDeleted, "/r/a/s-0000000001"),
                event(EventType::NodeDeleted, "/r/a"),
                event(EventType::NodeDeleted, "/r"),
                event(EventType::NodeCreated, "/r"),
            ];
            for (i, want) in expected.iter().enumerate() {
                assert_eq!(&next_event(&mut rw).await, want, "event #{i}");
            }
        },
    )
    .await;
}

#[tokio::test]
async fn recursive_watch_on_root_sees_whole_tree() {
    on_both(
        "recursive_watch_on_root_sees_whole_tree",
        |env: Env| async move {
            // "/" here is the chroot: the watch covers it and everything below.
            // (Two sessions: ZooKeeper keeps one watch mode per session and path.)
            let c = env.client().await;
            let c2 = env.client().await;
            let mut rw = c
                .watch("/", AddWatchMode::PersistentRecursive)
                .await
                .unwrap();
            let mut pw = c2.watch("/", AddWatchMode::Persistent).await.unwrap();
            c.create("/a", b"", &persistent()).await.unwrap();
            c.create("/a/b", b"", &persistent()).await.unwrap();
            c.set_data("/", b"root", None).await.unwrap();
            c.delete("/a/b", None).await.unwrap();
            assert_eq!(
                next_event(&mut rw).await,
                event(EventType::NodeCreated, "/a")
            );
            assert_eq!(
                next_event(&mut rw).await,
                event(EventType::NodeCreated, "/a/b")
            );
            assert_eq!(
                next_event(&mut rw).await,
                event(EventType::NodeDataChanged, "/")
            );
            assert_eq!(
                next_event(&mut rw).await,
                event(EventType::NodeDeleted, "/a/b")
            );
            // The plain persistent watch on the same path: only its own node and children.
            assert_eq!(
                next_event(&mut pw).await,
                event(EventType::NodeChildrenChanged, "/")
            );
            assert_eq!(
                next_event(&mut pw).await,
                event(EventType::NodeDataChanged, "/")
            );
        },
    )
    .await;
}
