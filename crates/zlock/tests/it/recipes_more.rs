//! The read-write lock, the semaphore, the leader latch and the lock metrics against a
//! live server: each scenario runs against an in-process zlock server and against
//! Apache ZooKeeper 3.8 (Debian's package; missing, the test fails). No timing thresholds:
//! deadlines only keep a broken run from hanging.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    children, connect, join_all, on_zlock_native, on_zlock_recipe, on_zookeeper, run_each,
    wait_children, within,
};
use crate::proxy::Proxy;
use zlock::recipes::{LeaderLatch, LockMetrics, Mutex, ReadWriteLock, Semaphore};
use zlock::{Client, ConnectionState, Error, ErrorCode};

/// How long a waiter that must not get the lock is given (a bound, not a threshold:
/// the assertion holds for any value).
const SHORT: Duration = Duration::from_millis(200);

/// Readers share; Curator-style names.
async fn rw_readers_share(addr: &str) {
    const PATH: &str = "/rw/share";
    let mut clients = Vec::new();
    let mut guards = Vec::new();
    for _ in 0..3 {
        let zk = connect(addr).await;
        let lock = ReadWriteLock::new(zk.clone(), PATH);
        guards.push(within("reader", lock.read_lock().acquire()).await.unwrap());
        clients.push(zk);
    }
    let names = children(&clients[0], PATH).await;
    assert_eq!(names.len(), 3, "three readers hold at once");
    assert!(
        names
            .iter()
            .all(|c| c.starts_with("_c_") && c.contains("-__READ__")),
        "Curator-style names: {names:?}"
    );
    assert!(guards.iter().all(|g| !g.is_write()));
    for g in guards {
        g.release().await.unwrap();
    }
    assert!(children(&clients[0], PATH).await.is_empty());
    for zk in clients {
        zk.close().await.unwrap();
    }
}

/// A writer excludes readers and writers; readers exclude writers; failed and
/// timed-out attempts leave no node; downgrade works.
async fn rw_writer_excludes(addr: &str) {
    const PATH: &str = "/rw/excl";
    let a = connect(addr).await;
    let b = connect(addr).await;
    let la = ReadWriteLock::new(a.clone(), PATH);
    let lb = ReadWriteLock::new(b.clone(), PATH);

    let w = la.write_lock().acquire().await.unwrap();
    assert!(w.is_write() && w.node().contains("-__WRIT__"));
    assert!(lb.read_lock().try_acquire().await.unwrap().is_none());
    assert!(lb.write_lock().try_acquire().await.unwrap().is_none());
    let r = within("read timeout", lb.read_lock().acquire_timeout(SHORT)).await;
    assert!(r.unwrap().is_none());
    let r = within("write timeout", lb.write_lock().acquire_timeout(SHORT)).await;
    assert!(r.unwrap().is_none());
    assert_eq!(
        children(&a, PATH).await.len(),
        1,
        "no node left by failed tries"
    );

    // Downgrade: the write holder takes the read lock at once.
    let r = within("downgrade", la.read_lock().try_acquire())
        .await
        .unwrap()
        .expect("write holder may read");
    w.release().await.unwrap();
    assert!(lb.write_lock().try_acquire().await.unwrap().is_none());
    let other_reader = lb
        .read_lock()
        .try_acquire()
        .await
        .unwrap()
        .expect("readers share");
    assert!(r.fencing_token() < other_reader.fencing_token());
    r.release().await.unwrap();
    other_reader.release().await.unwrap();

    let w = lb.write_lock().try_acquire().await.unwrap().expect("free");
    w.release().await.unwrap();
    assert!(children(&a, PATH).await.is_empty());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A writer queued behind a reader blocks readers that come later; they get the
/// lock after the writer.
async fn rw_writer_blocks_later_readers(addr: &str) {
    const PATH: &str = "/rw/fair";
    let zk = connect(addr).await;
    let first = ReadWriteLock::new(zk.clone(), PATH);
    let r1 = first.read_lock().acquire().await.unwrap();

    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer_zk = connect(addr).await;
    let writer = {
        let (zk, order) = (writer_zk.clone(), order.clone());
        tokio::spawn(async move {
            let l = ReadWriteLock::new(zk, PATH);
            let g = l.write_lock().acquire().await.unwrap();
            order.lock().unwrap().push("writer holds");
            tokio::task::yield_now().await;
            order.lock().unwrap().push("writer releases");
            g.release().await.unwrap();
        })
    };
    wait_children(&zk, PATH, 2).await;

    let reader_zk = connect(addr).await;
    let late = ReadWriteLock::new(reader_zk.clone(), PATH);
    assert!(late.read_lock().try_acquire().await.unwrap().is_none());
    let r = within(
        "late reader timeout",
        late.read_lock().acquire_timeout(SHORT),
    )
    .await;
    assert!(r.unwrap().is_none(), "a queued writer blocks later readers");
    assert_eq!(children(&zk, PATH).await.len(), 2);

    let reader = {
        let order = order.clone();
        tokio::spawn(async move {
            let g = late.read_lock().acquire().await.unwrap();
            order.lock().unwrap().push("late reader holds");
            g.release().await.unwrap();
        })
    };
    wait_children(&zk, PATH, 3).await;
    r1.release().await.unwrap();
    within("writer", writer).await.unwrap();
    within("late reader", reader).await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["writer holds", "writer releases", "late reader holds"]
    );
    assert!(children(&zk, PATH).await.is_empty());
    for c in [zk, writer_zk, reader_zk] {
        c.close().await.unwrap();
    }
}

/// Mixed readers and writers under concurrency: a writer never overlaps anyone.
async fn rw_stress(addr: &str) {
    const PATH: &str = "/rw/stress";
    let readers = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..4usize {
        let zk = connect(addr).await;
        let (readers, writing) = (readers.clone(), writing.clone());
        tasks.push(tokio::spawn(async move {
            let lock = ReadWriteLock::new(zk.clone(), PATH);
            for j in 0..10usize {
                if (i + j) % 3 == 0 {
                    let g = lock.write_lock().acquire().await.unwrap();
                    assert!(!writing.swap(true, Ordering::SeqCst), "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "writer with readers");
                    tokio::task::yield_now().await;
                    writing.store(false, Ordering::SeqCst);
                    g.release().await.unwrap();
                } else {
                    let g = lock.read_lock().acquire().await.unwrap();
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert!(!writing.load(Ordering::SeqCst), "reader with a writer");
                    tokio::task::yield_now().await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.unwrap();
                }
            }
            zk.close().await.unwrap();
        }));
    }
    join_all("rw stress", tasks).await;
    let zk = connect(addr).await;
    assert!(children(&zk, PATH).await.is_empty());
    zk.close().await.unwrap();
}

/// Never more than max_leases holders at once.
async fn semaphore_bounds_holders(addr: &str) {
    const PATH: &str = "/sem/bound";
    const MAX: usize = 2;
    let holders = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let zk = connect(addr).await;
        let (holders, peak) = (holders.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let sem = Semaphore::new(zk.clone(), PATH, MAX);
            for _ in 0..6 {
                let lease = sem.acquire().await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(now <= MAX, "{now} holders of {MAX} leases");
                tokio::task::yield_now().await;
                holders.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.unwrap();
            }
            zk.close().await.unwrap();
        }));
    }
    join_all("semaphore stress", tasks).await;
    assert!(peak.load(Ordering::SeqCst) <= MAX);
    let zk = connect(addr).await;
    assert!(children(&zk, &format!("{PATH}/leases")).await.is_empty());
    assert!(children(&zk, &format!("{PATH}/locks")).await.is_empty());
    zk.close().await.unwrap();
}

/// Failed tries and timeouts leave no node; acquire_many; n > max is refused.
async fn semaphore_no_node_left(addr: &str) {
    const PATH: &str = "/sem/timeouts";
    const LEASES: &str = "/sem/timeouts/leases";
    let a = connect(addr).await;
    let b = connect(addr).await;
    let sa = Semaphore::new(a.clone(), PATH, 2);
    let sb = Semaphore::new(b.clone(), PATH, 2);

    let held = sa.acquire_many(2).await.unwrap();
    let names = children(&a, LEASES).await;
    assert_eq!(names.len(), 2);
    assert!(
        names
            .iter()
            .all(|c| c.starts_with("_c_") && c.contains("-lease-")),
        "Curator-style names: {names:?}"
    );
    assert!(sb.try_acquire().await.unwrap().is_none());
    let r = within("semaphore timeout", sb.acquire_timeout(SHORT)).await;
    assert!(r.unwrap().is_none());
    assert_eq!(children(&a, LEASES).await.len(), 2);
    assert!(children(&a, &format!("{PATH}/locks")).await.is_empty());

    // Partly granted then timed out: the granted lease is given back.
    let mut held = held.into_iter();
    held.next().unwrap().release().await.unwrap();
    let r = within("acquire_many timeout", sb.acquire_many_timeout(2, SHORT)).await;
    assert!(r.unwrap().is_none());
    assert_eq!(children(&a, LEASES).await.len(), 1);

    assert_eq!(
        sb.acquire_many(3).await.unwrap_err(),
        Error::Server(ErrorCode::BadArguments)
    );

    // A waiter gets the lease when one is released.
    let waiter = tokio::spawn(async move {
        let lease = sb.acquire_many(2).await.unwrap();
        for l in lease {
            l.release().await.unwrap();
        }
        b.close().await.unwrap();
    });
    drop(held); // the last lease, released on drop
    within("semaphore waiter", waiter).await.unwrap();
    wait_children(&a, LEASES, 0).await;
    a.close().await.unwrap();
}

/// A cancelled acquire (its future dropped while waiting for a lease) removes both
/// its lease node and the internal mutex node (the native path takes no mutex).
async fn semaphore_cancelled(addr: &str) {
    const PATH: &str = "/sem/cancel";
    const LEASES: &str = "/sem/cancel/leases";
    const LOCKS: &str = "/sem/cancel/locks";
    let a = connect(addr).await;
    let b = connect(addr).await;
    let lease = Semaphore::new(a.clone(), PATH, 1).acquire().await.unwrap();
    let sb = Semaphore::new(b.clone(), PATH, 1);
    let waiter = tokio::spawn(async move {
        let _lease = sb.acquire().await;
    });
    wait_children(&a, LEASES, 2).await;
    let mutex_nodes = if b.uses_native_locks() { 0 } else { 1 };
    wait_children(&a, LOCKS, mutex_nodes).await;
    waiter.abort();
    let _ = waiter.await;
    wait_children(&a, LEASES, 1).await;
    wait_children(&a, LOCKS, 0).await;
    lease.release().await.unwrap();
    assert!(children(&a, LEASES).await.is_empty());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A lease's `lost()` stays pending while the session is fine and resolves when the
/// client is closed (the lease's node goes with the session).
async fn lease_lost_on_close(addr: &str) {
    let a = connect(addr).await;
    let lease = Semaphore::new(a.clone(), "/sem/lost", 2)
        .acquire()
        .await
        .unwrap();
    let lost = lease.lost();
    tokio::pin!(lost);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut lost)
            .await
            .is_err(),
        "lost() fired on a healthy session"
    );
    a.close().await.unwrap();
    let state = within("lease lost after close", lost).await;
    assert_eq!(state, zlock::ConnectionState::Closed);
    drop(lease);
}

/// Waits until `latch` reports `want` on its stream.
async fn leadership_becomes(latch: &LeaderLatch, want: bool) {
    let mut rx = latch.leadership();
    within(&format!("leadership {want}"), async {
        while *rx.borrow_and_update() != want {
            if rx.changed().await.is_err() {
                assert_eq!(*rx.borrow(), want, "stream closed");
                return;
            }
        }
    })
    .await;
}

/// Exactly one leader among three; leadership passes on close and on the leader's
/// session close, in queue order; the streams say so.
async fn leader_latch(addr: &str) {
    const PATH: &str = "/election/latch";
    let clients = [
        connect(addr).await,
        connect(addr).await,
        connect(addr).await,
    ];
    let latches: Vec<LeaderLatch> = ["a", "b", "c"]
        .iter()
        .zip(&clients)
        .map(|(id, zk)| LeaderLatch::new(zk.clone(), PATH, id))
        .collect();
    let mut b_stream = latches[1].leadership();
    assert!(!*b_stream.borrow_and_update());

    for (i, l) in latches.iter().enumerate() {
        l.start();
        wait_children(&clients[0], PATH, i + 1).await;
    }
    within("a leads", latches[0].await_leadership())
        .await
        .unwrap();
    let names = children(&clients[0], PATH).await;
    assert!(
        names
            .iter()
            .all(|c| c.starts_with("_c_") && c.contains("-latch-")),
        "Curator-style names: {names:?}"
    );
    assert_eq!(latches[2].participants().await.unwrap(), ["a", "b", "c"]);
    // The followers have looked at the queue once they watch their predecessor; none
    // of them leads.
    assert!(!latches[1].has_leadership() && !latches[2].has_leadership());

    // The leader closes: b leads; a's stream ends false.
    let mut a_stream = latches[0].leadership();
    latches[0].close().await.unwrap();
    assert!(!*a_stream.borrow_and_update());
    assert!(a_stream.changed().await.is_err(), "a's stream closes");
    within("b leads", latches[1].await_leadership())
        .await
        .unwrap();
    within("b's stream says true", b_stream.wait_for(|l| *l))
        .await
        .unwrap();
    assert!(!latches[2].has_leadership());
    assert_eq!(latches[2].participants().await.unwrap(), ["b", "c"]);

    // The leader's session closes: c leads; b's stream says false.
    clients[1].close().await.unwrap();
    leadership_becomes(&latches[1], false).await;
    assert!(within("b ended", latches[1].await_leadership())
        .await
        .is_err());
    within("c leads", latches[2].await_leadership())
        .await
        .unwrap();
    assert_eq!(latches[2].participants().await.unwrap(), ["c"]);

    latches[2].close().await.unwrap();
    assert!(!latches[2].has_leadership());
    assert!(children(&clients[0], PATH).await.is_empty());
    for zk in [&clients[0], &clients[2]] {
        zk.close().await.unwrap();
    }
}

/// The leader's connection breaks (the session lives): leadership turns false past
/// the safe window, nobody else takes over, and it comes back on the reconnect.
async fn leader_latch_suspended(addr: &str) {
    const PATH: &str = "/election/suspended";
    let proxy = Proxy::start(addr.parse().unwrap()).await;
    let leader_zk = within("connect via proxy", async {
        let (c, _) = Client::connect(&proxy.addr.to_string(), 6_000)
            .await
            .unwrap();
        c
    })
    .await;
    let other_zk = connect(addr).await;
    let leader = LeaderLatch::new(leader_zk.clone(), PATH, "a");
    let other = LeaderLatch::new(other_zk.clone(), PATH, "b");
    leader.start();
    within("a leads", leader.await_leadership()).await.unwrap();
    other.start();
    wait_children(&other_zk, PATH, 2).await;

    let mut state = leader_zk.state_stream();
    proxy.block(true);
    proxy.cut();
    within(
        "suspended",
        state.wait_for(|s| *s == ConnectionState::Suspended),
    )
    .await
    .unwrap();
    leadership_becomes(&leader, false).await;
    assert!(!other.has_leadership(), "the session lives: no new leader");
    proxy.block(false);
    within("a leads again", leader.await_leadership())
        .await
        .unwrap();
    assert_eq!(leader_zk.state(), ConnectionState::Reconnected);
    assert_eq!(other.participants().await.unwrap(), ["a", "b"]);

    leader.close().await.unwrap();
    within("b leads", other.await_leadership()).await.unwrap();
    other.close().await.unwrap();
    leader_zk.close().await.unwrap();
    other_zk.close().await.unwrap();
}

/// The counters through real acquires: acquisitions, timeouts, failures, releases.
async fn metrics(addr: &str) {
    const PATH: &str = "/metrics/mutex";
    let a = connect(addr).await;
    let b = connect(addr).await;
    let m = LockMetrics::new();
    let ma = Mutex::new(a.clone(), PATH).with_metrics(m.clone());
    let mb = Mutex::new(b.clone(), PATH).with_metrics(m.clone());

    let g = ma.acquire().await.unwrap();
    let g2 = ma.acquire().await.unwrap(); // reentrant: counted too
    assert!(mb.try_acquire().await.unwrap().is_none());
    assert!(within("timeout", mb.acquire_timeout(SHORT))
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
    drop(g2);
    wait_children(&a, PATH, 0).await;
    let s = m.snapshot();
    assert_eq!(
        (s.acquisitions, s.timeouts, s.failures, s.releases),
        (2, 2, 0, 2)
    );
    assert!(s.wait_max_us >= s.wait_p50_us && s.wait_p50_us > 0);

    // A closed client cannot acquire: a failure.
    b.close().await.unwrap();
    assert!(mb.acquire().await.is_err());
    let s = m.snapshot();
    assert_eq!(s.failures, 1);
    assert!((m.failure_rate() - 1.0 / 5.0).abs() < 1e-9);

    // The read-write lock and the semaphore report to the same sink.
    let rw = ReadWriteLock::new(a.clone(), "/metrics/rw").with_metrics(m.clone());
    rw.read_lock()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    rw.write_lock()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let sem = Semaphore::new(a.clone(), "/metrics/sem", 3).with_metrics(m.clone());
    for l in sem.acquire_many(2).await.unwrap() {
        l.release().await.unwrap();
    }
    let s = m.snapshot();
    assert_eq!((s.acquisitions, s.releases), (6, 6));
    a.close().await.unwrap();
}

/// Every scenario in turn.
async fn all(addr: &str) {
    run_each!(addr;
        rw_readers_share,
        rw_writer_excludes,
        rw_writer_blocks_later_readers,
        rw_stress,
        semaphore_bounds_holders,
        semaphore_no_node_left,
        semaphore_cancelled,
        lease_lost_on_close,
        leader_latch,
        leader_latch_suspended,
        metrics,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_recipes_more() {
    on_zlock_native(|a| async move { all(&a).await }).await;
}

/// The same scenarios on zlock with the standard recipe (create, getChildren, watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_recipes_more_standard_path() {
    on_zlock_recipe(|a| async move { all(&a).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_recipes_more() {
    on_zookeeper(|a| async move { all(&a).await }).await;
}
