//! Nodes the server removes by itself: TTL nodes, containers, and ephemerals when their
//! session closes or expires.

use std::time::Duration;

use zk::{CreateMode, Error, EventType};
use zookeeper_client as zk;

use super::{ephemeral, event, mode, on_both, oneshot, persistent, wait_gone, Env};

#[tokio::test]
async fn ttl_node_removed_after_its_ttl() {
    on_both("ttl_node_removed_after_its_ttl", |env: Env| async move {
        let c = env.client().await;
        let short = persistent().with_ttl(Duration::from_millis(1000));
        let long = persistent().with_ttl(Duration::from_secs(3600));

        c.create("/short", b"", &short).await.unwrap();
        c.create("/long", b"", &long).await.unwrap();
        c.create("/plain", b"", &persistent()).await.unwrap();
        // A TTL node with a child stays while the child does.
        c.create("/parent", b"", &short).await.unwrap();
        c.create("/parent/kid", b"", &persistent()).await.unwrap();
        // Sequential TTL.
        c.create("/dir", b"", &persistent()).await.unwrap();
        let seq = mode(CreateMode::PersistentSequential).with_ttl(Duration::from_millis(1000));
        c.create("/dir/s-", b"", &seq).await.unwrap();

        // Watchers see the removal as NodeDeleted (unless a very slow machine let the TTL
        // run out before the watch was set).
        let (stat, ew) = c.check_and_watch_stat("/short").await.unwrap();
        if stat.is_some() {
            assert_eq!(oneshot(ew).await, event(EventType::NodeDeleted, "/short"));
        }
        assert_eq!(c.check_stat("/short").await.unwrap(), None);
        wait_gone(&c, "/dir/s-0000000000").await;

        // /parent's TTL ran out before that of /dir/s-0000000000 (created later, same
        // TTL), but it has a child. Removing the child lets it go.
        assert!(
            c.check_stat("/parent").await.unwrap().is_some(),
            "has a child"
        );
        c.delete("/parent/kid", None).await.unwrap();
        wait_gone(&c, "/parent").await;

        assert!(c.check_stat("/long").await.unwrap().is_some());
        assert!(c.check_stat("/plain").await.unwrap().is_some());
        assert!(c.check_stat("/dir").await.unwrap().is_some());
    })
    .await;
}

#[tokio::test]
async fn container_removed_after_last_child_goes() {
    on_both(
        "container_removed_after_last_child_goes",
        |env: Env| async move {
            let c = env.client().await;
            c.create("/empty", b"", &mode(CreateMode::Container))
                .await
                .unwrap();
            c.create("/c", b"", &mode(CreateMode::Container))
                .await
                .unwrap();
            c.create("/c/a", b"", &persistent()).await.unwrap();
            c.create("/c/b", b"", &persistent()).await.unwrap();
            c.delete("/c/a", None).await.unwrap();
            // Still has a child: must stay.
            assert!(c.check_stat("/c").await.unwrap().is_some());
            let (_, ew) = c.check_and_watch_stat("/c").await.unwrap();
            c.delete("/c/b", None).await.unwrap();
            assert_eq!(oneshot(ew).await, event(EventType::NodeDeleted, "/c"));
            // A container that never had a child is not a candidate: the sweep that took /c
            // (created after /empty) left it alone.
            assert!(c.check_stat("/empty").await.unwrap().is_some());

            // The lock-recipe pattern: a container whose only child is an ephemeral goes
            // once that session closes.
            c.create("/locks", b"", &mode(CreateMode::Container))
                .await
                .unwrap();
            let holder = env.client().await;
            holder
                .create("/locks/lock-", b"", &mode(CreateMode::EphemeralSequential))
                .await
                .unwrap();
            drop(holder);
            wait_gone(&c, "/locks").await;

            // Nested: a container inside a container goes first, then its parent.
            c.create("/outer", b"", &mode(CreateMode::Container))
                .await
                .unwrap();
            c.create("/outer/inner", b"", &mode(CreateMode::Container))
                .await
                .unwrap();
            c.create("/outer/inner/x", b"", &persistent())
                .await
                .unwrap();
            c.delete("/outer/inner/x", None).await.unwrap();
            wait_gone(&c, "/outer/inner").await;
            wait_gone(&c, "/outer").await;
        },
    )
    .await;
}

#[tokio::test]
async fn ephemerals_removed_when_session_closes() {
    on_both(
        "ephemerals_removed_when_session_closes",
        |env: Env| async move {
            let watcher = env.client().await;
            watcher.create("/dir", b"", &persistent()).await.unwrap();
            let owner = env.client().await;
            owner.create("/e", b"", &ephemeral()).await.unwrap();
            owner
                .create("/dir/e-", b"", &mode(CreateMode::EphemeralSequential))
                .await
                .unwrap();
            owner.create("/dir/keep", b"", &persistent()).await.unwrap();

            let (_, ew) = watcher.check_and_watch_stat("/e").await.unwrap();
            let (_, _, dw) = watcher
                .get_and_watch_data("/dir/e-0000000000")
                .await
                .unwrap();
            let (kids, cw) = watcher.list_and_watch_children("/dir").await.unwrap();
            assert_eq!(kids.len(), 2);
            // Dropping the only client closes the session (closeSession).
            drop(owner);
            assert_eq!(oneshot(ew).await, event(EventType::NodeDeleted, "/e"));
            assert_eq!(
                oneshot(dw).await,
                event(EventType::NodeDeleted, "/dir/e-0000000000")
            );
            assert_eq!(
                oneshot(cw).await,
                event(EventType::NodeChildrenChanged, "/dir")
            );
            // By the time the events arrive, the nodes are gone; persistent ones stay.
            assert_eq!(watcher.check_stat("/e").await.unwrap(), None);
            assert_eq!(watcher.list_children("/dir").await.unwrap(), ["keep"]);
        },
    )
    .await;
}

#[tokio::test]
async fn ephemerals_removed_when_session_expires() {
    on_both(
        "ephemerals_removed_when_session_expires",
        |env: Env| async move {
            let watcher = env.client().await;
            // A detached client leaves without closeSession: the session lives on until the
            // server expires it (about 1 s without pings).
            let owner = env
                .connect(
                    zk::Client::connector()
                        .with_detached()
                        .with_session_timeout(Duration::from_millis(1000)),
                )
                .await;
            assert_eq!(owner.session_timeout(), Duration::from_millis(1000));
            owner.create("/e", b"", &ephemeral()).await.unwrap();
            owner.create("/e2", b"", &ephemeral()).await.unwrap();
            let session = owner.session().clone();
            let (_, ew) = watcher.check_and_watch_stat("/e").await.unwrap();
            drop(owner);

            assert_eq!(oneshot(ew).await, event(EventType::NodeDeleted, "/e"));
            assert_eq!(watcher.check_stat("/e2").await.unwrap(), None);
            // The session is expired, not merely closed: resuming it is refused.
            let resumed = zk::Client::connector()
                .with_session(session)
                .connect(&env.connect_string())
                .await;
            assert_eq!(resumed.err(), Some(Error::SessionExpired));
        },
    )
    .await;
}
