//! Observers (`server.N=...:observer`): three voters and one observer
//! ([`EnsembleOptions::observers`]).
//!
//! 1. A client connected to the observer alone creates nodes (writes forwarded to the
//!    leader), reads them back, gets a watch event for another member's write, and
//!    holds a native lock that a client of a voter contends for, mutual exclusion
//!    holding both ways; `srvr` on the observer says `Mode: observer`, `mntr` on the
//!    leader counts it a synced observer.
//! 2. The observer never counts in a quorum: with the observer and a voter killed, the
//!    two voters left still commit; with two voters killed (one voter and the observer
//!    left), a write through the observer is not acknowledged; one voter back, writes
//!    through the observer commit again.
//!
//! The negative step of 2 can only be bounded: the write is given 3 s (about seven
//! times the members' silent time, after which the lone voter gives up on the batch).

use std::time::Duration;

use zlock::recipes::Mutex;
use zlock::{CreateMode, EventType, LockPath};
use zlock_testkit::{ChildEnsemble, EnsembleOptions};

use super::{bounded, connect, converged, within, T};

/// The observer's member index: after the three voters.
const OBS: usize = 3;

async fn three_voters_one_observer() -> (ChildEnsemble, usize) {
    let ens = ChildEnsemble::start_with(EnsembleOptions {
        observers: 1,
        ..EnsembleOptions::default()
    })
    .await
    .unwrap();
    assert!(ens.is_observer(OBS));
    let l = ens.leader().await.unwrap();
    assert!(l < OBS, "a voter leads");
    (ens, l)
}

/// Waits (bounded) until `mntr` on member `i` has `key` with the value `want`.
async fn mntr_says(ens: &ChildEnsemble, i: usize, key: &str, want: &str) {
    let mut last = None;
    let done = tokio::time::timeout(T, async {
        loop {
            let out = ens.four_letters(i, "mntr", Duration::from_secs(1)).await;
            last = out.as_deref().and_then(|o| {
                o.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('\t').map(str::to_owned))
            });
            if last.as_deref() == Some(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "member {i}'s mntr: {key} is {last:?}, not {want}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_serves_reads_forwards_writes_and_locks() {
    bounded(async {
        let (ens, l) = three_voters_one_observer().await;
        assert_eq!(ens.mode(OBS).await.as_deref(), Some("observer"));
        mntr_says(&ens, OBS, "zk_server_state", "observer").await;
        mntr_says(&ens, OBS, "zk_peer_state", "observing - broadcast").await;
        mntr_says(&ens, l, "zk_synced_observers", "1").await;
        mntr_says(&ens, l, "zk_quorum_size", "3").await;

        // Only the observer in the connect string.
        let obs = connect(&ens.client_addr(OBS).to_string())
            .await
            .with_lock_path(LockPath::Native);
        let voter = connect(&ens.client_addr((l + 1) % 3).to_string())
            .await
            .with_lock_path(LockPath::Native);
        assert!(obs.uses_native_locks());

        obs.create("/obs", b"one", CreateMode::Persistent)
            .await
            .unwrap();
        obs.create("/obs/child", b"", CreateMode::Persistent)
            .await
            .unwrap();
        assert_eq!(obs.get_data("/obs", false).await.unwrap().0, b"one");
        assert_eq!(obs.get_children("/obs", false).await.unwrap(), ["child"]);

        // A watch set through the observer fires on a voter's write.
        let (_, _, fired) = obs.get_data_watch("/obs").await.unwrap();
        voter.set_data("/obs", b"two", -1).await.unwrap();
        let ev = within("the observer's watch", fired).await.unwrap();
        assert_eq!(ev.event_type, EventType::NodeDataChanged);
        assert_eq!(obs.get_data("/obs", false).await.unwrap().0, b"two");

        // The native lock: held through the observer, the voter's client is excluded;
        // handed over, the observer's client is excluded.
        const LOCK: &str = "/locks/observed";
        let mine = Mutex::new(obs.clone(), LOCK);
        let theirs = Mutex::new(voter.clone(), LOCK);
        let held = within("lock through the observer", mine.acquire())
            .await
            .unwrap();
        assert!(theirs.try_acquire().await.unwrap().is_none());
        let waiting = tokio::spawn(async move { theirs.acquire().await });
        // The voter's client queues behind the holder and gets nothing while it holds
        // (looked at after a round trip through the observer).
        assert!(obs.exists(held.node(), false).await.unwrap().is_some());
        assert!(!waiting.is_finished(), "both clients hold the lock");
        let first = held.fencing_token();
        held.release().await.unwrap();
        let next = within("the voter's client gets the lock", waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(next.fencing_token() > first, "fencing tokens rise");
        let other = Mutex::new(obs.clone(), LOCK);
        assert!(other.try_acquire().await.unwrap().is_none());
        next.release().await.unwrap();
        let again = within("the observer's client again", other.acquire())
            .await
            .unwrap();
        again.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_never_counts_in_a_quorum() {
    bounded(async {
        let (mut ens, l) = three_voters_one_observer().await;
        mntr_says(&ens, l, "zk_synced_observers", "1").await;
        // Every member has applied a write before any is killed: a voter that started
        // after the others had elected rejoins and grants no vote until its log has
        // caught up (`commit::raft::rejoin`), and with the leader killed before that
        // the remaining two could not elect.
        let first = connect(&ens.client_addr(l).to_string()).await;
        first
            .create("/warm", b"", CreateMode::Persistent)
            .await
            .unwrap();
        converged(&ens).await;

        // The observer and the leader gone: the two voters left elect and commit.
        ens.kill9(OBS);
        ens.kill9(l);
        let (a, b) = ((l + 1) % 3, (l + 2) % 3);
        let l2 = ens.leader().await.unwrap();
        assert!(l2 == a || l2 == b);
        let zk = connect(&format!("{},{}", ens.client_addr(a), ens.client_addr(b))).await;
        within(
            "a write with two voters of three",
            zk.create("/two-of-three", b"", CreateMode::Persistent),
        )
        .await
        .unwrap();

        // The observer back: it catches up and serves.
        ens.restart(OBS).await.unwrap();
        let obs = connect(&ens.client_addr(OBS).to_string()).await;
        within("the observer catches up", async {
            while obs
                .exists("/two-of-three", false)
                .await
                .ok()
                .flatten()
                .is_none()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        obs.create("/through-observer", b"", CreateMode::Persistent)
            .await
            .unwrap();

        // One voter and the observer left (the leader stays): no quorum, so a write
        // through the observer is not acknowledged.
        let f2 = if l2 == a { b } else { a };
        ens.kill9(f2);
        let w = tokio::time::timeout(
            Duration::from_secs(3),
            obs.create("/one-voter-and-observer", b"", CreateMode::Persistent),
        )
        .await;
        assert!(
            !matches!(w, Ok(Ok(_))),
            "a write committed with one voter of three and the observer: {w:?}"
        );

        // A second voter back: writes through the observer commit again.
        ens.restart(f2).await.unwrap();
        let obs = connect(&ens.client_addr(OBS).to_string()).await;
        within("a write through the observer, quorum back", async {
            loop {
                match obs
                    .create("/quorum-back", b"", CreateMode::Persistent)
                    .await
                {
                    Ok(_) | Err(zlock::Error::Server(zlock::ErrorCode::NodeExists)) => return,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await;
    })
    .await;
}
