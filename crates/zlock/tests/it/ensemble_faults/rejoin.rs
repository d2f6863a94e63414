//! 12: the rejoin gap. A member whose data directory was lost comes back blank while
//! the leader's log is ahead of the third member's (a write the leader appended while
//! that member was down), and the leader is killed at once, before the blank member
//! has caught up: the blank member and the third must elect and serve without it.
//! Before the leader could tell a blank member that it needs none of its earlier
//! acknowledgements (`commit::raft::rejoin`), the blank member was gated until its
//! log reached the leader's, which the third member did not have: no leader until
//! the dead one came back.

use std::time::Duration;

use zlock::CreateMode;

use super::{bounded, children, connect, converged, start, sync, within, T};

/// Nodes written before the member loses its disk, and while it is down.
const BEFORE: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_member_and_follower_elect_when_the_leader_dies_at_once() {
    bounded(async {
        let (mut ens, l) = start().await;
        let (b, c) = ((l + 1) % 3, (l + 2) % 3);
        let zk = connect(&ens.client_addr(l).to_string()).await;
        zk.create("/rejoin", b"", CreateMode::Persistent)
            .await
            .unwrap();
        for i in 0..BEFORE {
            let p = format!("/rejoin/a{i:02}");
            zk.create(&p, b"", CreateMode::Persistent).await.unwrap();
        }
        // Member b loses its disk: killed, its data directory emptied (its id is on
        // its command line, as `myid` would be).
        ens.kill9(b);
        let dir = ens.data_dir(b).to_owned();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        // Writes while it is down: the leader and c hold them, b never did.
        for i in 0..BEFORE {
            let p = format!("/rejoin/b{i:02}");
            zk.create(&p, b"", CreateMode::Persistent).await.unwrap();
        }
        // c killed (not paused: a paused member's socket would still take the
        // leader's append, and apply it when resumed): the leader appends a write it
        // cannot commit, so its log is ahead of c's (never acknowledged: it may be
        // lost).
        ens.kill9(c);
        let pending = {
            let zk = zk.clone();
            tokio::spawn(async move {
                let _ = zk
                    .create("/rejoin/pending", b"", CreateMode::Persistent)
                    .await;
            })
        };
        // b starts blank and asks the others where they stand: the leader answers, c
        // (down) does not, so b keeps waiting and says for whom.
        ens.start_again(b).await.unwrap();
        let waits_for_c = format!("[{}]", c + 1);
        within("the leader's answer to the blank member", async {
            loop {
                let log = ens.log(b);
                let this_run = log.rsplit("==== testkit: starting").next().unwrap_or("");
                if this_run.lines().any(|line| {
                    line.contains("waiting for the other members to answer")
                        && line.contains(&waits_for_c)
                }) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        // The leader dies at once; c comes back. b hears from c, and the two elect.
        ens.kill9(l);
        ens.start_again(c).await.unwrap();
        pending.abort();
        let new = ens
            .leader_within(T)
            .await
            .unwrap_or_else(|e| panic!("b and c did not elect without the leader: {e}"));
        assert_ne!(new, l);
        let own = connect(&ens.connect_string_from(new)).await;
        within(
            "a write with the leader gone",
            own.create("/rejoin/after", b"", CreateMode::Persistent),
        )
        .await
        .unwrap();
        // Nothing acknowledged is lost: every node is on b, and on all three once the
        // old leader is back.
        let on_b = connect(&ens.client_addr(b).to_string()).await;
        within("sync on the blank member", sync(&on_b))
            .await
            .unwrap();
        let kids = children(&on_b, "/rejoin").await;
        for i in 0..BEFORE {
            for p in ["a", "b"] {
                let name = format!("{p}{i:02}");
                assert!(kids.contains(&name), "{name} lost: {kids:?}");
            }
        }
        assert!(kids.contains(&"after".to_string()));
        ens.restart(l).await.unwrap();
        on_b.close().await.unwrap();
        own.close().await.unwrap();
        converged(&ens).await;
    })
    .await;
}
