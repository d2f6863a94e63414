//! The lock recipes against a live server: each scenario runs against an in-process
//! zlock server and against Apache ZooKeeper 3.8 (Debian's package; missing, it fails).
//! No timing thresholds: deadlines only keep a broken run from hanging.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    children, connect, join_all, on_zlock_native, on_zlock_recipe, on_zookeeper, run_each,
    wait_children, within,
};
use zlock::recipes::{Mutex, NaiveLock};
use zlock::{Client, Error};

/// 8 sessions x 20 acquisitions: never two holders, every increment kept, fencing
/// tokens strictly increasing in acquisition order, no node left.
async fn mutual_exclusion(addr: &str) {
    const PATH: &str = "/locks/stress";
    let busy = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let zk = connect(addr).await;
        let (busy, counter, tokens) = (busy.clone(), counter.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let lock = Mutex::new(zk.clone(), PATH);
            for _ in 0..20 {
                let g = lock.acquire().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(g.fencing_token());
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::SeqCst);
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
            zk.close().await.unwrap();
        }));
    }
    eprintln!("mutual_exclusion: 8 sessions connected");
    join_all("mutex stress", tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), 160);
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 160);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing: {tokens:?}"
    );
    let zk = connect(addr).await;
    assert!(children(&zk, PATH).await.is_empty());
    zk.close().await.unwrap();
}

/// Waiters acquire in the order they queued.
async fn fifo(addr: &str) {
    const PATH: &str = "/locks/fifo";
    let zk = connect(addr).await;
    let holder = Mutex::new(zk.clone(), PATH);
    let g = holder.acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5usize {
        let c = connect(addr).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let lock = Mutex::new(c.clone(), PATH);
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
            c.close().await.unwrap();
        }));
        // Waiter i has queued once its node is there.
        wait_children(&zk, PATH, i + 2).await;
    }
    let children_names = children(&zk, PATH).await;
    assert!(
        children_names
            .iter()
            .all(|c| c.starts_with("_c_") && c.contains("-lock-")),
        "Curator-style names: {children_names:?}"
    );
    g.release().await.unwrap();
    join_all("fifo waiters", tasks).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert!(children(&zk, PATH).await.is_empty());
    zk.close().await.unwrap();
}

/// The same instance re-enters; the node stays until the last guard goes; another
/// instance (same or other session) is excluded meanwhile.
async fn reentrancy(addr: &str) {
    const PATH: &str = "/locks/reentrant";
    let zk = connect(addr).await;
    let other_zk = connect(addr).await;
    let m = Mutex::new(zk.clone(), PATH);
    let other = Mutex::new(other_zk.clone(), PATH);
    let same_session_other = Mutex::new(zk.clone(), PATH);

    let g1 = m.acquire().await.unwrap();
    let g2 = within("reenter", m.acquire()).await.unwrap();
    let g3 = m
        .try_acquire()
        .await
        .unwrap()
        .expect("reentrant try_acquire");
    assert_eq!(g1.node(), g2.node());
    assert_eq!(g1.fencing_token(), g3.fencing_token());
    assert_eq!(children(&zk, PATH).await.len(), 1);
    assert!(other.try_acquire().await.unwrap().is_none());
    assert!(same_session_other.try_acquire().await.unwrap().is_none());

    g1.release().await.unwrap();
    drop(g3);
    assert_eq!(children(&zk, PATH).await.len(), 1);
    assert!(other.try_acquire().await.unwrap().is_none());
    g2.release().await.unwrap();
    assert!(children(&zk, PATH).await.is_empty());

    let g = other
        .try_acquire()
        .await
        .unwrap()
        .expect("free after last release");
    g.release().await.unwrap();
    zk.close().await.unwrap();
    other_zk.close().await.unwrap();
}

/// try_acquire, a timed-out acquire and a cancelled acquire leave no node behind.
async fn no_node_left(addr: &str) {
    const PATH: &str = "/locks/timeouts";
    let zk = connect(addr).await;
    let waiter_zk = connect(addr).await;
    let holder = Mutex::new(zk.clone(), PATH);
    let g = holder.acquire().await.unwrap();
    let waiter = Mutex::new(waiter_zk.clone(), PATH);

    assert!(waiter.try_acquire().await.unwrap().is_none());
    assert_eq!(children(&zk, PATH).await.len(), 1);

    let r = within(
        "acquire_timeout",
        waiter.acquire_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    assert!(r.is_none());
    assert_eq!(children(&zk, PATH).await.len(), 1);

    // A cancelled acquire (its future dropped while waiting) removes its node.
    let w = Arc::new(waiter);
    let w2 = w.clone();
    let task = tokio::spawn(async move {
        let _g = w2.acquire().await;
    });
    wait_children(&zk, PATH, 2).await;
    task.abort();
    let _ = task.await;
    wait_children(&zk, PATH, 1).await;

    // Dropping the guard releases too.
    drop(g);
    wait_children(&zk, PATH, 0).await;
    let g = w.try_acquire().await.unwrap().expect("free after drop");
    g.release().await.unwrap();
    assert!(children(&zk, PATH).await.is_empty());
    zk.close().await.unwrap();
    waiter_zk.close().await.unwrap();
}

/// A holder whose session is closed: the next waiter acquires.
async fn holder_session_closed(addr: &str) {
    const PATH: &str = "/locks/closed";
    let holder_zk = connect(addr).await;
    let waiter_zk = connect(addr).await;
    let holder = Mutex::new(holder_zk.clone(), PATH);
    let g = holder.acquire().await.unwrap();
    let token = g.fencing_token();
    let lost = g.lost();
    let w = waiter_zk.clone();
    let task = tokio::spawn(async move {
        let m = Mutex::new(w, PATH);
        let g = m.acquire().await.unwrap();
        let t = g.fencing_token();
        g.release().await.unwrap();
        t
    });
    wait_children(&waiter_zk, PATH, 2).await;
    holder_zk.close().await.unwrap();
    // The holder learns it may have lost the lock.
    within("lost() after close", lost).await;
    let next = within("waiter after holder's close", task).await.unwrap();
    assert!(next > token);
    std::mem::forget(g); // its session is gone; nothing to release
    assert!(children(&waiter_zk, PATH).await.is_empty());
    waiter_zk.close().await.unwrap();
}

/// The naive lock excludes too (and does not re-enter: try_acquire by another
/// contender fails while held).
async fn naive_exclusion(addr: &str) {
    const PATH: &str = "/locks/naive";
    let busy = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let zk = connect(addr).await;
        let (busy, counter) = (busy.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let lock = NaiveLock::new(zk.clone(), PATH);
            let mut last = 0;
            for _ in 0..20 {
                let g = lock.acquire().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                assert!(g.fencing_token() > last);
                last = g.fencing_token();
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::SeqCst);
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
            zk.close().await.unwrap();
        }));
    }
    join_all("naive stress", tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), 160);

    let a = connect(addr).await;
    let b = connect(addr).await;
    let la = NaiveLock::new(a.clone(), PATH);
    let lb = NaiveLock::new(b.clone(), PATH);
    let g = la.try_acquire().await.unwrap().expect("free");
    assert!(lb.try_acquire().await.unwrap().is_none());
    assert!(lb
        .acquire_timeout(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    let t = tokio::spawn(async move {
        let g = lb.acquire().await.unwrap();
        g.release().await.unwrap();
        b.close().await.unwrap();
    });
    g.release().await.unwrap();
    within("naive waiter", t).await.unwrap();
    assert!(children(&a, PATH).await.is_empty());
    a.close().await.unwrap();
}

fn set(path: &str, data: &str, version: i32) -> zlock::MultiOp {
    zlock::MultiOp::SetData(zlock::SetDataRequest {
        path: path.into(),
        data: Some(data.as_bytes().to_vec()),
        version,
    })
}

async fn data(zk: &Client, path: &str) -> String {
    String::from_utf8(zk.get_data(path, false).await.unwrap().0).unwrap()
}

/// `MutexGuard::fenced` writes only while the lock node exists; `release_with` writes
/// and releases in one transaction, and releases even when the write fails.
async fn fenced_writes(addr: &str) {
    const PATH: &str = "/locks/fenced";
    const DATA: &str = "/fenced-data";
    let a = connect(addr).await;
    let admin = connect(addr).await;
    let _ = admin.delete(DATA, -1).await;
    admin
        .create(DATA, b"0", zlock::CreateMode::Persistent)
        .await
        .unwrap();
    let lock = Mutex::new(a.clone(), PATH);
    let g = lock.acquire().await.unwrap();
    let rs = g.fenced(vec![set(DATA, "1", -1)]).await.unwrap();
    assert!(matches!(rs[..], [zlock::MultiResult::SetData(_)]), "{rs:?}");
    assert_eq!(data(&admin, DATA).await, "1");
    // The lock node vanishes (as when the session expired and someone else took
    // over): the fenced write is refused and changes nothing.
    admin.delete(g.node(), -1).await.unwrap();
    assert_eq!(
        g.fenced(vec![set(DATA, "2", -1)]).await.unwrap_err(),
        Error::Server(zlock::ErrorCode::NoNode)
    );
    assert_eq!(data(&admin, DATA).await, "1");
    drop(g);
    // Write and release in one transaction.
    let g = lock.acquire().await.unwrap();
    g.release_with(vec![set(DATA, "3", -1)]).await.unwrap();
    assert_eq!(data(&admin, DATA).await, "3");
    assert!(children(&admin, PATH).await.is_empty());
    // A failing write is not applied, and the lock is released anyway.
    let g = lock.acquire().await.unwrap();
    assert_eq!(
        g.release_with(vec![set(DATA, "4", 99)]).await.unwrap_err(),
        Error::Server(zlock::ErrorCode::BadVersion)
    );
    assert_eq!(data(&admin, DATA).await, "3");
    assert!(children(&admin, PATH).await.is_empty());
    admin.delete(DATA, -1).await.unwrap();
    a.close().await.unwrap();
    admin.close().await.unwrap();
}

/// Every scenario in turn.
async fn all(addr: &str) {
    run_each!(addr;
        mutual_exclusion,
        fifo,
        reentrancy,
        no_node_left,
        holder_session_closed,
        naive_exclusion,
        fenced_writes,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_recipes() {
    on_zlock_native(|a| async move { all(&a).await }).await;
}

/// The same scenarios on zlock with the standard recipe (create, getChildren, watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_recipes_standard_path() {
    on_zlock_recipe(|a| async move { all(&a).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_recipes() {
    on_zookeeper(|a| async move { all(&a).await }).await;
}
