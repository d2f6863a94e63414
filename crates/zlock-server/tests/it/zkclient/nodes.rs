//! Sessions and the plain node operations: create (every mode), getData/setData,
//! delete, getChildren/getChildren2, exists, multi, multiRead, getEphemerals,
//! getAllChildrenNumber, whoAmI, sync.

use std::time::Duration;

use zk::{CreateMode, Error, MultiReadResult, MultiWriteError, MultiWriteResult};
use zookeeper_client as zk;

use super::{ephemeral, mode, on_both, persistent, sorted, Env, Flavor};

#[tokio::test]
async fn session_connect_negotiate_and_resume() {
    on_both(
        "session_connect_negotiate_and_resume",
        |env: Env| async move {
            let a = env.client().await;
            let b = env.client().await;
            assert_ne!(a.session_id().0, 0);
            assert_ne!(a.session_id(), b.session_id(), "two connects, two sessions");
            assert_eq!(a.state(), zk::SessionState::SyncConnected);

            // The requested timeout is clamped to [minSessionTimeout, maxSessionTimeout] =
            // [200 ms, 60 s] on both test servers.
            let t = |ms| zk::Client::connector().with_session_timeout(Duration::from_millis(ms));
            assert_eq!(
                env.connect(t(5_000)).await.session_timeout(),
                Duration::from_millis(5_000)
            );
            assert_eq!(
                env.connect(t(100_000)).await.session_timeout(),
                Duration::from_secs(60)
            );
            assert_eq!(
                env.connect(t(50)).await.session_timeout(),
                Duration::from_millis(200)
            );

            // A detached client leaves without closeSession; its session (and ephemeral)
            // survives, and a new connection with its id and password takes it over.
            let d = env.connect(zk::Client::connector().with_detached()).await;
            d.create("/eph", b"", &ephemeral()).await.unwrap();
            let info = d.session().clone();
            let id = d.session_id();
            drop(d);
            let resumed = env
                .connect(zk::Client::connector().with_session(info))
                .await;
            assert_eq!(resumed.session_id(), id, "same session after reconnect");
            let stat = resumed
                .check_stat("/eph")
                .await
                .unwrap()
                .expect("ephemeral survives");
            assert_eq!(stat.ephemeral_owner, id.0);
            // Dropping the last client closes the session: its ephemeral goes with it.
            drop(resumed);
            super::wait_gone(&a, "/eph").await;
        },
    )
    .await;
}

#[tokio::test]
async fn create_every_mode_with_stats() {
    on_both("create_every_mode_with_stats", |env: Env| async move {
        let c = env.client().await;
        let sid = c.session_id().0;
        let (root0, _) = c.get_children("/").await.unwrap();
        assert!(root0.is_empty());
        let root_stat0 = c.check_stat("/").await.unwrap().unwrap();

        // Persistent.
        let (p, seq) = c.create("/p", b"val", &persistent()).await.unwrap();
        assert_eq!(seq.into_i64(), -1, "not sequential");
        assert!(p.czxid > 0);
        assert_eq!(p.czxid, p.mzxid);
        assert_eq!(p.czxid, p.pzxid);
        assert_eq!(p.ctime, p.mtime);
        assert!(p.ctime > 0);
        assert_eq!((p.version, p.cversion, p.aversion), (0, 0, 0));
        assert_eq!(p.ephemeral_owner, 0);
        assert_eq!((p.data_length, p.num_children), (3, 0));
        assert_eq!(
            c.check_stat("/p").await.unwrap(),
            Some(p),
            "exists returns the create2 stat"
        );
        let root_stat = c.check_stat("/").await.unwrap().unwrap();
        assert_eq!(root_stat.num_children, root_stat0.num_children + 1);
        assert_eq!(root_stat.cversion, root_stat0.cversion + 1);
        assert_eq!(
            root_stat.pzxid, p.czxid,
            "parent pzxid is the child's czxid"
        );
        assert_eq!(
            root_stat.mzxid, root_stat0.mzxid,
            "children changes leave mzxid alone"
        );

        // Duplicate, missing parent.
        assert_eq!(
            c.create("/p", b"", &persistent()).await,
            Err(Error::NodeExists)
        );
        assert_eq!(
            c.create("/no/such", b"", &persistent()).await,
            Err(Error::NoNode)
        );

        // Ephemeral: owned by the session; cannot have children.
        let (e, _) = c.create("/e", b"", &ephemeral()).await.unwrap();
        assert_eq!(e.ephemeral_owner, sid);
        assert!(e.czxid > p.czxid);
        assert_eq!(
            c.create("/e/child", b"", &persistent()).await,
            Err(Error::NoChildrenForEphemerals)
        );

        // Sequential: suffix = parent's cversion, 10 digits; ephemeral-sequential shares
        // the counter.
        c.create("/s", b"", &persistent()).await.unwrap();
        let (s0, n0) = c
            .create("/s/n-", b"", &mode(CreateMode::PersistentSequential))
            .await
            .unwrap();
        let (_, n1) = c
            .create("/s/n-", b"", &mode(CreateMode::PersistentSequential))
            .await
            .unwrap();
        let (es, n2) = c
            .create("/s/e-", b"", &mode(CreateMode::EphemeralSequential))
            .await
            .unwrap();
        assert_eq!((n0.into_i64(), n1.into_i64(), n2.into_i64()), (0, 1, 2));
        assert_eq!(n2.to_string(), "0000000002");
        assert_eq!(s0.ephemeral_owner, 0);
        assert_eq!(es.ephemeral_owner, sid);
        assert_eq!(
            sorted(c.list_children("/s").await.unwrap()),
            ["e-0000000002", "n-0000000000", "n-0000000001"]
        );
        // A delete bumps the parent's cversion but not the sequence: ZooKeeper numbers
        // children by the creates it has seen (here 3, while cversion is 4).
        c.delete("/s/n-0000000001", None).await.unwrap();
        assert_eq!(c.check_stat("/s").await.unwrap().unwrap().cversion, 4);
        let (_, n3) = c
            .create("/s/n-", b"", &mode(CreateMode::PersistentSequential))
            .await
            .unwrap();
        assert_eq!(n3.into_i64(), 3);

        // Container (createContainer): persistent-looking stat.
        let (ct, _) = c
            .create("/c", b"x", &mode(CreateMode::Container))
            .await
            .unwrap();
        assert_eq!((ct.version, ct.data_length, ct.num_children), (0, 1, 0));
        assert_eq!(c.check_stat("/c").await.unwrap(), Some(ct));

        // TTL (createTTL), plain and sequential.
        let ttl = persistent().with_ttl(Duration::from_secs(3600));
        let (t, _) = c.create("/t", b"tt", &ttl).await.unwrap();
        assert_eq!((t.version, t.data_length), (0, 2));
        assert_eq!(c.check_stat("/t").await.unwrap(), Some(t));
        c.create("/ts", b"", &persistent()).await.unwrap();
        let ttl_seq = mode(CreateMode::PersistentSequential).with_ttl(Duration::from_secs(3600));
        let (_, tn) = c.create("/ts/x-", b"", &ttl_seq).await.unwrap();
        assert_eq!(tn.into_i64(), 0);
        assert!(c.check_stat("/ts/x-0000000000").await.unwrap().is_some());

        // Every stat's ephemeralOwner as a client sees it.
        let owners = [
            c.check_stat("/p").await.unwrap().unwrap().ephemeral_owner,
            c.check_stat("/c").await.unwrap().unwrap().ephemeral_owner,
            c.check_stat("/t").await.unwrap().unwrap().ephemeral_owner,
            c.check_stat("/e").await.unwrap().unwrap().ephemeral_owner,
        ];
        assert_eq!(owners, [0, 0, 0, sid]);
    })
    .await;
}

#[tokio::test]
async fn get_and_set_data_with_versions() {
    on_both("get_and_set_data_with_versions", |env: Env| async move {
        let c = env.client().await;
        let (created, _) = c.create("/d", b"one", &persistent()).await.unwrap();
        let (data, stat) = c.get_data("/d").await.unwrap();
        assert_eq!(data, b"one");
        assert_eq!(stat, created);

        // Unconditional set.
        let s1 = c.set_data("/d", b"two!", None).await.unwrap();
        assert_eq!(s1.version, 1);
        assert_eq!(s1.data_length, 4);
        assert_eq!(s1.czxid, created.czxid);
        assert!(s1.mzxid > created.mzxid);
        assert!(s1.mtime >= created.mtime);
        assert_eq!(s1.pzxid, created.pzxid, "setData leaves pzxid alone");
        assert_eq!(s1.cversion, 0);

        // Conditional set: right version, then a stale one.
        let s2 = c.set_data("/d", b"three", Some(1)).await.unwrap();
        assert_eq!(s2.version, 2);
        assert_eq!(
            c.set_data("/d", b"nope", Some(1)).await,
            Err(Error::BadVersion)
        );
        assert_eq!(
            c.set_data("/d", b"nope", Some(7)).await,
            Err(Error::BadVersion)
        );
        let (data, stat) = c.get_data("/d").await.unwrap();
        assert_eq!(data, b"three", "a failed setData changes nothing");
        assert_eq!(stat, s2);

        // Empty and large values round-trip.
        c.set_data("/d", b"", None).await.unwrap();
        let (data, stat) = c.get_data("/d").await.unwrap();
        assert!(data.is_empty());
        assert_eq!((stat.data_length, stat.version), (0, 3));
        let big: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
        c.set_data("/d", &big, Some(3)).await.unwrap();
        let (data, stat) = c.get_data("/d").await.unwrap();
        assert_eq!(data, big);
        assert_eq!(stat.data_length, 500_000);

        assert_eq!(c.get_data("/missing").await, Err(Error::NoNode));
        assert_eq!(c.set_data("/missing", b"x", None).await, Err(Error::NoNode));
        assert_eq!(
            c.set_data("/missing", b"x", Some(0)).await,
            Err(Error::NoNode)
        );
    })
    .await;
}

#[tokio::test]
async fn delete_errors_and_parent_stat() {
    on_both("delete_errors_and_parent_stat", |env: Env| async move {
        let c = env.client().await;
        assert_eq!(c.delete("/missing", None).await, Err(Error::NoNode));
        c.create("/a", b"", &persistent()).await.unwrap();
        let (kid, _) = c.create("/a/b", b"", &persistent()).await.unwrap();
        assert_eq!(c.delete("/a", None).await, Err(Error::NotEmpty));
        assert_eq!(c.delete("/a", Some(0)).await, Err(Error::NotEmpty));

        c.set_data("/a/b", b"v", None).await.unwrap();
        assert_eq!(c.delete("/a/b", Some(0)).await, Err(Error::BadVersion));
        assert!(c.check_stat("/a/b").await.unwrap().is_some());
        c.delete("/a/b", Some(1)).await.unwrap();
        assert_eq!(c.check_stat("/a/b").await.unwrap(), None);
        assert_eq!(c.delete("/a/b", None).await, Err(Error::NoNode));

        // The parent counts both the create and the delete; pzxid moves to the delete.
        let a = c.check_stat("/a").await.unwrap().unwrap();
        assert_eq!((a.cversion, a.num_children), (2, 0));
        assert!(a.pzxid > kid.czxid);
        assert_eq!(a.version, 0);
        c.delete("/a", Some(0)).await.unwrap();
        assert_eq!(c.check_stat("/a").await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn children_and_exists() {
    on_both("children_and_exists", |env: Env| async move {
        let c = env.client().await;
        assert_eq!(c.check_stat("/k").await.unwrap(), None);
        assert_eq!(c.list_children("/k").await, Err(Error::NoNode));
        assert_eq!(c.get_children("/k").await, Err(Error::NoNode));

        let (k, _) = c.create("/k", b"", &persistent()).await.unwrap();
        assert_eq!(c.check_stat("/k").await.unwrap(), Some(k));
        assert!(c.list_children("/k").await.unwrap().is_empty());
        for name in ["z", "a", "m"] {
            c.create(&format!("/k/{name}"), b"", &persistent())
                .await
                .unwrap();
        }
        c.create("/k/a/deeper", b"", &persistent()).await.unwrap();
        c.create("/k/eph", b"", &ephemeral()).await.unwrap();

        // getChildren: direct children only.
        let names = sorted(c.list_children("/k").await.unwrap());
        assert_eq!(names, ["a", "eph", "m", "z"]);
        // getChildren2: the same plus the parent's stat.
        let (names2, stat) = c.get_children("/k").await.unwrap();
        assert_eq!(sorted(names2), names);
        assert_eq!(stat.num_children, 4);
        assert_eq!(stat.cversion, 4);
        assert_eq!(stat.czxid, k.czxid);
        assert_eq!(Some(stat), c.check_stat("/k").await.unwrap());
        // The chroot itself lists /k only.
        assert_eq!(c.list_children("/").await.unwrap(), ["k"]);
    })
    .await;
}

#[tokio::test]
async fn multi_success_applies_every_op() {
    on_both("multi_success_applies_every_op", |env: Env| async move {
        let c = env.client().await;
        c.create("/m", b"", &persistent()).await.unwrap();
        let mut w = c.new_multi_writer();
        w.add_create("/m/a", b"1", &persistent()).unwrap();
        w.add_create("/m/s-", b"", &mode(CreateMode::PersistentSequential))
            .unwrap();
        w.add_set_data("/m", b"parent", Some(0)).unwrap();
        w.add_check_version("/m", 1).unwrap();
        w.add_set_data("/m/a", b"2", None).unwrap();
        w.add_delete("/m/a", Some(1)).unwrap();
        let results = w.commit().await.unwrap();
        assert_eq!(results.len(), 6);
        let MultiWriteResult::Create {
            path,
            stat: create_stat,
        } = &results[0]
        else {
            panic!("{results:?}")
        };
        assert_eq!(path, "/m/a");
        let MultiWriteResult::Create { path, .. } = &results[1] else {
            panic!("{results:?}")
        };
        assert_eq!(path, "/m/s-0000000001", "sequential suffix inside a multi");
        let MultiWriteResult::SetData { stat } = &results[2] else {
            panic!("{results:?}")
        };
        assert_eq!(stat.version, 1);
        let zxid = stat.mzxid;
        // A create2 inside a multi: ZooKeeper 3.8.0 answers it with a plain create result,
        // no stat (ZOOKEEPER-4026, fixed in 3.8.2); zlock gives the stat, as 3.8.2+ does.
        // Where there is a stat, all ops of one multi share one zxid.
        if env.flavor == Flavor::Zlock || !create_stat.is_invalid() {
            assert_eq!(create_stat.czxid, zxid, "{create_stat:?}");
            assert_eq!((create_stat.version, create_stat.data_length), (0, 1));
        }
        assert_eq!(results[3], MultiWriteResult::Check);
        let MultiWriteResult::SetData { stat } = &results[4] else {
            panic!("{results:?}")
        };
        assert_eq!(stat.version, 1);
        assert_eq!(results[5], MultiWriteResult::Delete);

        let (data, m) = c.get_data("/m").await.unwrap();
        assert_eq!(data, b"parent");
        assert_eq!(m.mzxid, zxid);
        assert_eq!(
            sorted(c.list_children("/m").await.unwrap()),
            ["s-0000000001"]
        );

        // An empty multi is fine (the client does not even send it).
        assert!(c.new_multi_writer().commit().await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn multi_failure_is_atomic_and_names_the_failing_op() {
    on_both(
        "multi_failure_is_atomic_and_names_the_failing_op",
        |env: Env| async move {
            let c = env.client().await;
            c.create("/m", b"v0", &persistent()).await.unwrap();
            let before = c.check_stat("/m").await.unwrap().unwrap();

            // The second op fails (NoNode): the first is rolled back, the third never runs.
            let mut w = c.new_multi_writer();
            w.add_create("/m/x", b"", &persistent()).unwrap();
            w.add_set_data("/missing", b"", None).unwrap();
            w.add_create("/m/y", b"", &persistent()).unwrap();
            assert_eq!(
                w.commit().await,
                Err(MultiWriteError::OperationFailed {
                    index: 1,
                    source: Error::NoNode
                })
            );
            assert_eq!(c.check_stat("/m/x").await.unwrap(), None);
            assert_eq!(c.check_stat("/m/y").await.unwrap(), None);

            // A failing version check at the end undoes a setData and a create before it.
            let mut w = c.new_multi_writer();
            w.add_set_data("/m", b"v1", None).unwrap();
            w.add_create("/m/z", b"", &persistent()).unwrap();
            w.add_check_version("/m", 0).unwrap();
            assert_eq!(
                w.commit().await,
                Err(MultiWriteError::OperationFailed {
                    index: 2,
                    source: Error::BadVersion
                })
            );
            // Other per-op errors: NodeExists, NotEmpty.
            let mut w = c.new_multi_writer();
            w.add_create("/m/w", b"", &persistent()).unwrap();
            w.add_create("/m/w", b"", &persistent()).unwrap();
            assert_eq!(
                w.commit().await,
                Err(MultiWriteError::OperationFailed {
                    index: 1,
                    source: Error::NodeExists
                })
            );
            let mut w = c.new_multi_writer();
            w.add_create("/m/w", b"", &persistent()).unwrap();
            w.add_delete("/m", None).unwrap();
            assert_eq!(
                w.commit().await,
                Err(MultiWriteError::OperationFailed {
                    index: 1,
                    source: Error::NotEmpty
                })
            );

            let (data, after) = c.get_data("/m").await.unwrap();
            assert_eq!(data, b"v0");
            assert_eq!(after.version, before.version);
            assert_eq!(after.cversion, before.cversion, "no child was ever created");
            assert!(c.list_children("/m").await.unwrap().is_empty());

            // The CheckWriter form: a failed leading check maps to RuntimeInconsistent.
            let mut w = c.new_check_writer("/m", Some(5)).unwrap();
            w.add_set_data("/m", b"x", None).unwrap();
            assert_eq!(
                Error::from(w.commit().await.unwrap_err()),
                Error::RuntimeInconsistent
            );
            assert_eq!(c.get_data("/m").await.unwrap().0, b"v0");
        },
    )
    .await;
}

#[tokio::test]
async fn multi_read_reports_errors_per_op() {
    on_both("multi_read_reports_errors_per_op", |env: Env| async move {
        let c = env.client().await;
        c.create("/r", b"data", &persistent()).await.unwrap();
        c.create("/r/k", b"", &persistent()).await.unwrap();
        let mut r = c.new_multi_reader();
        r.add_get_data("/r").unwrap();
        r.add_get_children("/r").unwrap();
        r.add_get_data("/missing").unwrap();
        r.add_get_children("/missing").unwrap();
        let res = r.commit().await.unwrap();
        assert_eq!(res.len(), 4);
        match &res[0] {
            MultiReadResult::Data { data, stat } => {
                assert_eq!(data, b"data");
                assert_eq!(stat.num_children, 1);
            }
            other => panic!("{other:?}"),
        }
        match &res[1] {
            MultiReadResult::Children { children } => assert_eq!(children, &["k"]),
            other => panic!("{other:?}"),
        }
        for r in &res[2..] {
            match r {
                MultiReadResult::Error { err } => assert_eq!(*err, Error::NoNode),
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn get_ephemerals_and_all_children_number() {
    on_both(
        "get_ephemerals_and_all_children_number",
        |env: Env| async move {
            let c = env.client().await;
            let other = env.client().await;
            c.create("/d", b"", &persistent()).await.unwrap();
            c.create("/d/p", b"", &persistent()).await.unwrap();
            c.create("/e1", b"", &ephemeral()).await.unwrap();
            c.create("/d/e2", b"", &ephemeral()).await.unwrap();
            c.create("/d/e3", b"", &ephemeral()).await.unwrap();
            c.create("/d/q-", b"", &mode(CreateMode::EphemeralSequential))
                .await
                .unwrap();
            other.create("/d/theirs", b"", &ephemeral()).await.unwrap();

            // Only this session's ephemerals, paths relative to the chroot.
            let all = sorted(c.list_ephemerals("/").await.unwrap());
            assert_eq!(all, ["/d/e2", "/d/e3", "/d/q-0000000003", "/e1"]);
            let under_d = sorted(c.list_ephemerals("/d").await.unwrap());
            assert_eq!(under_d, ["/d/e2", "/d/e3", "/d/q-0000000003"]);
            // The prefix is a string prefix, not a path: "/d/e" matches e2 and e3.
            assert_eq!(
                sorted(c.list_ephemerals("/d/e").await.unwrap()),
                ["/d/e2", "/d/e3"]
            );
            assert!(c.list_ephemerals("/nothing").await.unwrap().is_empty());
            assert_eq!(other.list_ephemerals("/").await.unwrap(), ["/d/theirs"]);

            // getAllChildrenNumber: every descendant, the node itself excluded.
            c.create("/d/p/x", b"", &persistent()).await.unwrap();
            c.create("/d/p/x/y", b"", &persistent()).await.unwrap();
            assert_eq!(c.count_descendants_number("/d").await.unwrap(), 7);
            assert_eq!(c.count_descendants_number("/d/p").await.unwrap(), 2);
            assert_eq!(c.count_descendants_number("/d/p/x/y").await.unwrap(), 0);
            assert_eq!(c.count_descendants_number("/").await.unwrap(), 9);
            assert_eq!(
                c.count_descendants_number("/missing").await,
                Err(Error::NoNode)
            );
        },
    )
    .await;
}

#[tokio::test]
async fn who_am_i_and_sync() {
    on_both("who_am_i_and_sync", |env: Env| async move {
        let c = env.client().await;
        let users = c.list_auth_users().await.unwrap();
        assert_eq!(users, [zk::AuthUser::new("ip", "127.0.0.1")]);
        c.auth("digest", b"alice:secret").await.unwrap();
        let users = c.list_auth_users().await.unwrap();
        assert_eq!(users.len(), 2, "{users:?}");
        assert!(
            users.contains(&zk::AuthUser::new("ip", "127.0.0.1")),
            "{users:?}"
        );
        assert!(
            users.contains(&zk::AuthUser::new("digest", "alice")),
            "{users:?}"
        );

        // sync: on the chroot, on a node, and on a path that does not exist (sync does
        // not look the path up). After a sync, a write by another session is visible.
        let writer = env.client().await;
        c.sync("/").await.unwrap();
        writer.create("/s", b"w", &persistent()).await.unwrap();
        c.sync("/s").await.unwrap();
        assert_eq!(c.get_data("/s").await.unwrap().0, b"w");
        c.sync("/no/such/path").await.unwrap();
    })
    .await;
}
