//! Scenario 9, the herd effect measured: 100 waiters (one `Client` each; 30 on an
//! ensemble, see [`waiters`]) queue behind a holder, then the lock is handed over a few
//! times. For each release we count the watch notifications delivered to all the
//! waiters' sessions (their catch-all event receivers), once the server is quiet again:
//! every remaining waiter is back to one registered watch (the `wchs` four-letter
//! word).
//!
//! `Mutex` (each waiter watches its predecessor only): one notification per hand-over.
//! `NaiveLock` (everyone watches the one node): one per remaining waiter per release.
//!
//! The holder is on member 0, waiter `i` on member `i % n`; on an ensemble each member
//! notifies its own clients and holds their watches (`wchs` is summed over them).

use tokio::sync::{mpsc, oneshot};
use zlock::recipes::{Mutex, NaiveLock};
use zlock::{Client, MutexGuard, NaiveGuard, WatcherEvent};

use super::{connect, connect_events, wait_watches, within};
use crate::target::{parked, Target};

/// Waiters per lock: 100, or 30 on an ensemble. Every `NaiveLock` release sends each
/// remaining waiter back to its create (failing with NodeExists), and on an ensemble
/// every one of those is a write through the leader: handing the lock down 100 waiters
/// is some 5,000 of them, which took 15 s there (2 s on one server). 30, ten on each
/// member, still show the herd, and the successor notified across members.
fn waiters(t: &Target) -> usize {
    if t.is_ensemble() {
        30
    } else {
        100
    }
}
/// Releases measured.
const RELEASES: usize = 5;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Naive,
}

enum Guard {
    Mutex(MutexGuard),
    Naive(NaiveGuard),
}

impl Guard {
    async fn acquire(zk: &Client, path: &str, kind: Kind) -> Guard {
        // The herd is a property of the watch-based recipes; zlock's native path sets no
        // watch at all (one pushed grant per hand-over, see tests/it/native.rs).
        let zk = &zk.clone().with_lock_path(zlock::LockPath::Recipe);
        match kind {
            Kind::Mutex => Guard::Mutex(Mutex::new(zk.clone(), path).acquire().await.unwrap()),
            Kind::Naive => Guard::Naive(NaiveLock::new(zk.clone(), path).acquire().await.unwrap()),
        }
    }

    async fn release(self) {
        match self {
            Guard::Mutex(g) => g.release().await.unwrap(),
            Guard::Naive(g) => g.release().await.unwrap(),
        }
    }
}

/// Measures both recipes on one server, prints the figures and checks them: `Mutex`
/// at most 2 notifications per hand-over (at least the successor's), `NaiveLock` at
/// least half the waiters on the first release.
pub async fn compare(t: &Target, server: &str) {
    let waiters = waiters(t);
    let mutex = measure(t, "/suite/herd-mutex", Kind::Mutex).await;
    let naive = measure(t, "/suite/herd-naive", Kind::Naive).await;
    eprintln!("herd [{server}]: watch notifications delivered to {waiters} waiters' sessions");
    for (i, (m, n)) in mutex.iter().zip(&naive).enumerate() {
        eprintln!(
            "herd [{server}] release {}: Mutex {m}, NaiveLock {n}",
            i + 1
        );
    }
    for (i, n) in mutex.iter().enumerate() {
        assert!(
            (1..=2).contains(n),
            "Mutex release {}: {n} notifications",
            i + 1
        );
    }
    assert!(
        naive[0] >= waiters / 2,
        "NaiveLock first release: only {} notifications for {waiters} waiters",
        naive[0]
    );
}

async fn measure(t: &Target, path: &'static str, kind: Kind) -> Vec<usize> {
    let n = waiters(t);
    let base = parked(t).await;
    let holder_zk = connect(&t.hosts(0), 30_000).await;
    let mut first = Some(Guard::acquire(&holder_zk, path, kind).await);

    let mut opening = tokio::task::JoinSet::new();
    for i in 0..n {
        let hosts = t.hosts(i);
        opening.spawn(async move { connect_events(&hosts, 30_000).await });
    }
    let mut waiters = Vec::with_capacity(n);
    while let Some(r) = opening.join_next().await {
        waiters.push(r.unwrap());
    }

    // Each waiter reports when it holds the lock, then releases when its permit is
    // sent (or dropped).
    let (acquired_tx, mut acquired) = mpsc::unbounded_channel::<usize>();
    let mut permits: Vec<Option<oneshot::Sender<()>>> = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (zk, _)) in waiters.iter().enumerate() {
        let (permit, wait) = oneshot::channel::<()>();
        permits.push(Some(permit));
        let (zk, acquired_tx) = (zk.clone(), acquired_tx.clone());
        tasks.spawn(async move {
            let g = Guard::acquire(&zk, path, kind).await;
            let _ = acquired_tx.send(i);
            let _ = wait.await;
            g.release().await;
        });
    }
    let mut events: Vec<mpsc::UnboundedReceiver<WatcherEvent>> =
        waiters.iter_mut().map(|(_, ev)| take(ev)).collect();
    wait_watches(t, base + n).await;
    drain(&mut events);

    let mut per_release = Vec::with_capacity(RELEASES);
    let mut holder: Option<usize> = None;
    for r in 0..RELEASES {
        match holder {
            None => first.take().unwrap().release().await,
            Some(i) => permits[i].take().unwrap().send(()).unwrap(),
        }
        holder = Some(within("next holder", acquired.recv()).await.unwrap());
        wait_watches(t, base + n - r - 1).await;
        per_release.push(drain(&mut events));
    }
    // The rest hand over as soon as each acquires.
    drop(permits);
    within(&format!("{kind:?} waiters to finish"), async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await;
    for (zk, _) in waiters {
        zk.close().await.unwrap();
    }
    holder_zk.close().await.unwrap();
    per_release
}

/// Takes the receiver out, leaving a closed one in its place.
fn take(ev: &mut mpsc::UnboundedReceiver<WatcherEvent>) -> mpsc::UnboundedReceiver<WatcherEvent> {
    let (_, empty) = mpsc::unbounded_channel();
    std::mem::replace(ev, empty)
}

/// Counts (and discards) the events queued in every receiver.
fn drain(events: &mut [mpsc::UnboundedReceiver<WatcherEvent>]) -> usize {
    let mut n = 0;
    for ev in events {
        while ev.try_recv().is_ok() {
            n += 1;
        }
    }
    n
}
