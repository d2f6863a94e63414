//! The crate's Curator-style lock recipe with contending clients, and ACLs with digest
//! authentication.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zk::{Acl, Acls, AuthId, CreateMode, Error, LockOptions, LockPrefix, Permission};
use zookeeper_client as zk;

use super::{eventually, mode, on_both, persistent, wait_gone, Env, DEADLINE};

fn lock_options() -> LockOptions<'static> {
    // Like Curator: missing parents are created as containers.
    LockOptions::new(Acls::anyone_all())
        .with_ancestor_options(mode(CreateMode::Container))
        .unwrap()
}

fn curator_prefix() -> LockPrefix<'static> {
    LockPrefix::new_curator("/locks/res", "lock-").unwrap()
}

async fn children_count(c: &zk::Client, path: &str) -> usize {
    match c.list_children(path).await {
        Ok(k) => k.len(),
        Err(Error::NoNode) => 0,
        Err(e) => panic!("{e}"),
    }
}

/// Checks a Curator lock node name: `_c_<uuid>-lock-<10 digits>`.
fn assert_curator_name(path: &str, seq: i64) {
    let name = path.strip_prefix("/locks/res/_c_").expect(path);
    let (uuid, rest) = name.split_at(36);
    assert_eq!(uuid.matches('-').count(), 4, "{path}");
    assert_eq!(rest, format!("-lock-{seq:010}"), "{path}");
}

#[tokio::test]
async fn curator_lock_two_contending_clients() {
    on_both(
        "curator_lock_two_contending_clients",
        |env: Env| async move {
            let a = env.client().await;
            let b = env.client().await;
            let observer = env.client().await;

            // A takes the free lock; /locks and /locks/res are created on the way.
            let la = a
                .lock(curator_prefix(), b"a", lock_options())
                .await
                .unwrap();
            assert_curator_name(la.lock_path(), 0);
            let stat = observer.check_stat(la.lock_path()).await.unwrap().unwrap();
            assert_eq!(stat.ephemeral_owner, a.session_id().0);

            // B queues behind A.
            let b2 = b.clone();
            let waiting = tokio::spawn(async move {
                let l = b2
                    .lock(curator_prefix(), b"b", lock_options())
                    .await
                    .unwrap();
                l.into_owned()
            });
            eventually("B's lock node", || async {
                (children_count(&observer, "/locks/res").await == 2).then_some(())
            })
            .await;
            // B's node exists, A's node is first: B cannot have the lock.
            assert!(!waiting.is_finished(), "B got the lock while A holds it");

            // A's guarded write succeeds while it holds the lock.
            observer.create("/data", b"", &persistent()).await.unwrap();
            la.set_data("/data", b"by a", None).await.unwrap();

            // A releases: B gets it.
            drop(la);
            let lb = tokio::time::timeout(DEADLINE, waiting)
                .await
                .expect("B never got the lock")
                .unwrap();
            assert_curator_name(lb.lock_path(), 1);
            assert_eq!(children_count(&observer, "/locks/res").await, 1);
            lb.set_data("/data", b"by b", None).await.unwrap();

            // If the lock node vanishes behind the holder's back, guarded writes fail.
            observer.delete(lb.lock_path(), None).await.unwrap();
            assert_eq!(
                lb.set_data("/data", b"late", None).await,
                Err(Error::RuntimeInconsistent)
            );
            assert_eq!(observer.get_data("/data").await.unwrap().0, b"by b");
            drop(lb);

            // The lock parents are containers: once the last lock node is gone, so are they.
            wait_gone(&observer, "/locks/res").await;
            wait_gone(&observer, "/locks").await;
        },
    )
    .await;
}

#[tokio::test]
async fn curator_lock_mutual_exclusion() {
    on_both("curator_lock_mutual_exclusion", |env: Env| async move {
        const ROUNDS: usize = 10;
        let setup = env.client().await;
        setup.create("/counter", b"0", &persistent()).await.unwrap();
        let busy = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let c = env.client().await;
            let busy = busy.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let lock = c.lock(curator_prefix(), b"", lock_options()).await.unwrap();
                    assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                    let (data, _) = c.get_data("/counter").await.unwrap();
                    let n: usize = String::from_utf8(data).unwrap().parse().unwrap();
                    tokio::task::yield_now().await;
                    lock.set_data("/counter", (n + 1).to_string().as_bytes(), None)
                        .await
                        .unwrap();
                    busy.store(false, Ordering::SeqCst);
                    // Release and wait for the node to go, so the next round queues anew.
                    let path = lock.lock_path().to_owned();
                    drop(lock);
                    wait_gone(&c, &path).await;
                }
            }));
        }
        for t in tasks {
            tokio::time::timeout(DEADLINE * 3, t)
                .await
                .expect("lock rounds hung")
                .unwrap();
        }
        let (data, stat) = setup.get_data("/counter").await.unwrap();
        assert_eq!(String::from_utf8(data).unwrap(), (2 * ROUNDS).to_string());
        assert_eq!(stat.version as usize, 2 * ROUNDS);
    })
    .await;
}

/// `digest` id of alice:secret, i.e. `alice:` + base64(sha1("alice:secret")).
const ALICE: &str = "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=";

#[tokio::test]
async fn acl_digest_auth() {
    on_both("acl_digest_auth", |env: Env| async move {
        let alice = env
            .connect(zk::Client::connector().with_auth("digest", b"alice:secret"))
            .await;
        let anon = env.client().await;
        let only_alice = [Acl::new(Permission::ALL, AuthId::new("digest", ALICE))];
        alice
            .create(
                "/secure",
                b"s",
                &CreateMode::Persistent.with_acls(Acls::new(&only_alice)),
            )
            .await
            .unwrap();
        let (acl, stat) = alice.get_acl("/secure").await.unwrap();
        assert_eq!(acl, only_alice);
        assert_eq!(stat.aversion, 0);

        // Without auth: every ACL-checked op is NoAuth; exists is not ACL-checked.
        assert_eq!(anon.get_data("/secure").await, Err(Error::NoAuth));
        assert_eq!(
            anon.set_data("/secure", b"x", None).await,
            Err(Error::NoAuth)
        );
        assert_eq!(anon.list_children("/secure").await, Err(Error::NoAuth));
        assert_eq!(anon.get_children("/secure").await, Err(Error::NoAuth));
        assert_eq!(
            anon.create("/secure/x", b"", &persistent()).await,
            Err(Error::NoAuth)
        );
        assert_eq!(anon.get_acl("/secure").await, Err(Error::NoAuth));
        assert_eq!(
            anon.set_acl("/secure", &Acls::anyone_all(), None).await,
            Err(Error::NoAuth)
        );
        assert!(anon.check_stat("/secure").await.unwrap().is_some());
        let mut m = anon.new_multi_writer();
        m.add_set_data("/secure", b"x", None).unwrap();
        assert_eq!(
            m.commit().await,
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: Error::NoAuth
            })
        );

        // With auth: allowed. Deleting a child needs DELETE on the parent.
        assert_eq!(alice.get_data("/secure").await.unwrap().0, b"s");
        alice
            .create("/secure/kid", b"", &persistent())
            .await
            .unwrap();
        assert_eq!(anon.delete("/secure/kid", None).await, Err(Error::NoAuth));

        // A wrong password is not an auth failure for digest; it just matches nothing.
        let wrong = env
            .connect(zk::Client::connector().with_auth("digest", b"alice:wrong"))
            .await;
        assert_eq!(wrong.get_data("/secure").await, Err(Error::NoAuth));

        // Authenticating later in the session works too.
        anon.auth("digest", b"alice:secret").await.unwrap();
        assert_eq!(anon.get_data("/secure").await.unwrap().0, b"s");
        anon.delete("/secure/kid", None).await.unwrap();

        // creator_all ("auth" scheme) becomes the creator's digest id...
        alice
            .create(
                "/mine",
                b"",
                &CreateMode::Persistent.with_acls(Acls::creator_all()),
            )
            .await
            .unwrap();
        let (acl, _) = alice.get_acl("/mine").await.unwrap();
        assert_eq!(acl, only_alice);
        // ...and is invalid for a session with no authenticated id.
        let nobody = env.client().await;
        assert_eq!(
            nobody
                .create(
                    "/theirs",
                    b"",
                    &CreateMode::Persistent.with_acls(Acls::creator_all())
                )
                .await,
            Err(Error::InvalidAcl)
        );

        // READ for anyone, nothing else, applies to the creator too.
        alice
            .create(
                "/ro",
                b"r",
                &CreateMode::Persistent.with_acls(Acls::anyone_read()),
            )
            .await
            .unwrap();
        assert_eq!(nobody.get_data("/ro").await.unwrap().0, b"r");
        assert_eq!(alice.set_data("/ro", b"w", None).await, Err(Error::NoAuth));

        // ip ACLs match the connection's address.
        let mixed = [
            Acl::new(Permission::READ, AuthId::new("ip", "127.0.0.1")),
            Acl::new(Permission::ALL, AuthId::new("digest", ALICE)),
        ];
        alice
            .create(
                "/ip",
                b"i",
                &CreateMode::Persistent.with_acls(Acls::new(&mixed)),
            )
            .await
            .unwrap();
        assert_eq!(nobody.get_data("/ip").await.unwrap().0, b"i");
        assert_eq!(nobody.set_data("/ip", b"", None).await, Err(Error::NoAuth));

        // setACL checks the ACL version.
        assert_eq!(
            alice.set_acl("/secure", &Acls::anyone_all(), Some(3)).await,
            Err(Error::BadVersion)
        );
        let stat = alice
            .set_acl("/secure", &Acls::anyone_all(), Some(0))
            .await
            .unwrap();
        assert_eq!((stat.aversion, stat.version), (1, 0));
        assert_eq!(nobody.get_data("/secure").await.unwrap().0, b"s");
    })
    .await;
}

#[tokio::test]
async fn auth_with_unknown_scheme_fails_the_session() {
    on_both(
        "auth_with_unknown_scheme_fails_the_session",
        |env: Env| async move {
            let c = env.client().await;
            let mut states = c.state_watcher();
            assert_eq!(c.auth("no-such-scheme", b"x").await, Err(Error::AuthFailed));
            let state = tokio::time::timeout(DEADLINE, async {
                loop {
                    let s = states.changed().await;
                    if s.is_terminated() {
                        return s;
                    }
                }
            })
            .await
            .expect("session state did not change");
            assert_eq!(state, zk::SessionState::AuthFailed);
        },
    )
    .await;
}
