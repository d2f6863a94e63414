//! zlock's native lock operation through the real protocol: discovery in the handshake,
//! one-round-trip grants, FIFO hand-over pushed to the waiter, hand-over on session end,
//! waiters re-registered after a reconnect, recipe contenders sharing the queue, and a
//! queue of 10,000 waiters handed over with one message per hand-over. `native/`: the
//! queue order the server and the recipes share; a failed multi keeps the index;
//! a grant made while the waiter is disconnected, and a second break before the
//! waiter's re-sent request is answered; lock-delay after a holder dies.
//!
//! Every scenario runs against its own in-process zlock server (`standalone::<name>`)
//! and, all in turn, against one three-member zlock ensemble (`ensemble`: `zlock
//! server` child processes; a scenario's clients spread over the members, see
//! `target.rs`, so that grants are pushed by another member than the one the
//! release went through). Scenario paths are distinct, since the ensemble run shares
//! one tree.

mod lock_delay;
mod order;
mod reconnect;
mod rollback;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proxy::Proxy;
use crate::target;
use crate::target::Target;
use zlock::{lock_flags, Client, ConnectionState, Error, LockRequest, NativeLock};
use zlock_testkit::{require, ChildEnsemble, Peer, TestServer, ZooKeeper};

const T: Duration = Duration::from_secs(30);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(T, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

async fn connect(addr: &str) -> Client {
    Client::connect(addr, 10_000).await.unwrap().0
}

fn req(path: &str, guid: &str) -> LockRequest {
    LockRequest::exclusive(path, format!("_c_{guid}-lock-"))
}

#[tokio::test]
async fn offered_by_zlock_not_by_zookeeper() {
    let s = TestServer::start().await.unwrap();
    let c = connect(&s.connect_string()).await;
    assert!(c.server_has_native_locks());
    assert!(c.uses_native_locks());
    assert!(!c
        .clone()
        .with_lock_path(zlock::LockPath::Recipe)
        .uses_native_locks());
    if require(Peer::ZooKeeper).is_some() {
        let zk = ZooKeeper::start().unwrap();
        let z = loop {
            match Client::connect(&zk.connect_string(), 10_000).await {
                Ok((z, _)) => break z,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        assert!(
            !z.server_has_native_locks(),
            "ZooKeeper offered zlock features?"
        );
        // Refused locally: ZooKeeper would close the connection on an unknown opcode.
        assert_eq!(
            z.lock_native(req("/l", "a")).await.unwrap_err(),
            Error::Server(zlock::ErrorCode::Unimplemented)
        );
        z.create("/still-works", b"", zlock::CreateMode::Persistent)
            .await
            .unwrap();
    }
}

/// The holder is on member 0, waiter `i` on member `i + 1`.
async fn fifo_grants_pushed_in_order(t: &Target) {
    let holder = connect(&t.hosts(0)).await;
    let NativeLock::Granted { node: first, czxid } =
        holder.lock_native(req("/app/l", "h")).await.unwrap()
    else {
        panic!("an uncontended native lock is granted in its reply")
    };
    assert!(first.starts_with("/app/l/_c_h-lock-"));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let c = connect(&t.hosts(i + 1)).await;
        match c
            .lock_native(req("/app/l", &format!("w{i}")))
            .await
            .unwrap()
        {
            NativeLock::Queued { node, grant, .. } => waiters.push((c, node, grant)),
            other => panic!("expected queued, got {other:?}"),
        }
    }
    // The Curator-compatible names are ordinary children everyone can see.
    target::sync(&holder).await;
    assert_eq!(holder.get_children("/app/l", false).await.unwrap().len(), 6);
    holder.delete(&first, -1).await.unwrap();
    let mut last = czxid;
    for (c, node, grant) in waiters {
        let g = within("grant", grant).await.unwrap();
        assert_eq!(g.node, node);
        assert!(g.czxid > last, "fencing tokens increase");
        last = g.czxid;
        c.delete(&node, -1).await.unwrap();
    }
}

/// `a`, `b` and `c` on members 0, 1 and 2.
async fn try_and_session_close_hand_over(t: &Target) {
    const P: &str = "/handover";
    let a = connect(&t.hosts(0)).await;
    let b = connect(&t.hosts(1)).await;
    let c = connect(&t.hosts(2)).await;
    assert!(matches!(
        a.lock_native(req(P, "a")).await.unwrap(),
        NativeLock::Granted { .. }
    ));
    let mut r = req(P, "c");
    r.flags = lock_flags::TRY;
    assert!(matches!(c.lock_native(r).await.unwrap(), NativeLock::Busy));
    let NativeLock::Queued { grant, .. } = b.lock_native(req(P, "b")).await.unwrap() else {
        panic!()
    };
    a.close().await.unwrap();
    within("grant after the holder's session closed", grant)
        .await
        .unwrap();
    target::sync(&c).await;
    assert_eq!(c.get_children(P, false).await.unwrap().len(), 1);
}

/// The holder reaches member 0 and the waiter member 1, each through a proxy alone (so
/// that, cut off, they reach no member); the observer is on member 2.
async fn waiter_survives_reconnect_and_holder_expiry(t: &Target) {
    const P: &str = "/expiry";
    let holder_proxy = Proxy::start(t.member(0)).await;
    let waiter_proxy = Proxy::start(t.member(1)).await;
    let (holder, _) = Client::connect(&holder_proxy.addr.to_string(), 2_000)
        .await
        .unwrap();
    let waiter = connect(&waiter_proxy.addr.to_string()).await;
    let NativeLock::Granted { .. } = holder.lock_native(req(P, "h")).await.unwrap() else {
        panic!()
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req(P, "w")).await.unwrap()
    else {
        panic!()
    };
    // The waiter is cut off while the holder's session dies (the grant, if pushed, is
    // lost with the connection); on reconnect the client re-registers and learns it holds.
    waiter_proxy.block(true);
    waiter_proxy.cut();
    holder_proxy.block(true);
    holder_proxy.cut();
    let mut st = holder.state_stream();
    within("holder session lost", async {
        while *st.borrow_and_update() != ConnectionState::Lost {
            st.changed().await.unwrap();
        }
    })
    .await;
    let observer = connect(&t.hosts(2)).await;
    within("holder node gone", async {
        while observer.get_children(P, false).await.unwrap().len() != 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    waiter_proxy.block(false);
    let g = within("grant after reconnect", grant).await.unwrap();
    assert_eq!(g.node, node);
    assert_eq!(waiter.state(), ConnectionState::Reconnected);
}

/// Native contenders and the standard recipe (zlock's Mutex with `LockPath::Recipe`)
/// on one path exclude each other.
/// Contender `i` is on member `i % n`.
async fn native_and_recipe_contenders_exclude_each_other(t: &Target) {
    let busy = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = connect(&t.hosts(i)).await;
        let (busy, count) = (busy.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            for j in 0..15 {
                let native = i % 2 == 0;
                let release: Box<dyn FnOnce() -> _ + Send> = if native {
                    let node = match c
                        .lock_native(req("/mixed", &format!("n{i}-{j}")))
                        .await
                        .unwrap()
                    {
                        NativeLock::Granted { node, .. } => node,
                        NativeLock::Queued { grant, .. } => grant.await.unwrap().node,
                        NativeLock::Busy => unreachable!(),
                    };
                    let c = c.clone();
                    Box::new(move || {
                        tokio::spawn(async move { c.delete(&node, -1).await.unwrap() })
                    })
                } else {
                    let m = zlock::Mutex::new(
                        c.clone().with_lock_path(zlock::LockPath::Recipe),
                        "/mixed",
                    );
                    let g = m.acquire().await.unwrap();
                    Box::new(move || tokio::spawn(async move { g.release().await.unwrap() }))
                };
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                let v = count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                count.store(v + 1, Ordering::SeqCst);
                busy.store(false, Ordering::SeqCst);
                release().await.unwrap();
            }
        }));
    }
    within("mixed contenders", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(count.load(Ordering::SeqCst), 90);
}

/// 10,000 queued waiters (100 sessions x 100 nodes): every release hands over with
/// exactly one pushed grant, to the next node in line, and no watch event at all.
/// Session `i` is on member `i % n`, so on an ensemble most hand-overs cross members;
/// there 300 waiters (100 x 3): a hand-over is a delete committed through the leader
/// and its grant, about 7 ms on a 2-core test machine, and 10,000 of them would take
/// over a minute. Every member applies every grant, and counts it
/// (`zlock_native_lock_grants`): each member's count rises by one per hand-over.
async fn ten_thousand_waiters_one_message_per_hand_over(t: &Target) {
    const SESSIONS: usize = 100;
    let per: usize = if t.is_ensemble() { 3 } else { 100 };
    let holder = connect(&t.hosts(0)).await;
    let NativeLock::Granted { node: mut held, .. } =
        holder.lock_native(req("/big", "h")).await.unwrap()
    else {
        panic!()
    };
    let mut clients = Vec::new();
    let mut events = Vec::new();
    for i in 0..SESSIONS {
        let (c, ev) = Client::connect(&t.hosts(i), 30_000).await.unwrap();
        clients.push(c);
        events.push(ev);
    }
    // Queue them round-robin so consecutive nodes belong to different sessions.
    let mut queue = Vec::with_capacity(SESSIONS * per);
    for j in 0..per {
        let mut replies = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            replies.push((i, c.lock_native(req("/big", &format!("s{i}-{j}")))));
        }
        for (i, r) in replies {
            match r.await.unwrap() {
                NativeLock::Queued { node, grant, .. } => queue.push((i, node, grant)),
                other => panic!("{other:?}"),
            }
        }
    }
    let hand_overs = (SESSIONS * per) as u64;
    // Every member has applied the queue (a member behind catches up).
    let mut grants_before = Vec::new();
    for &m in t.members() {
        wait_mntr(m, "zlock_native_lock_waiters", hand_overs).await;
        grants_before.push(mntr(m, "zlock_native_lock_grants").await);
    }
    let started = Instant::now();
    let mut releaser = holder.clone();
    for (i, node, grant) in queue {
        releaser.delete(&held, -1).await.unwrap();
        let g = within("grant", grant).await.unwrap();
        assert_eq!(g.node, node);
        held = node;
        releaser = clients[i].clone();
    }
    releaser.delete(&held, -1).await.unwrap();
    let took = started.elapsed();
    for (&m, before) in t.members().iter().zip(grants_before) {
        wait_mntr(m, "zlock_native_lock_waiters", 0).await;
        let grants = mntr(m, "zlock_native_lock_grants").await - before;
        assert_eq!(grants, hand_overs, "{m}: one grant per hand-over");
    }
    for ev in &mut events {
        assert!(ev.try_recv().is_err(), "a native waiter got a watch event");
    }
    eprintln!(
        "{hand_overs} native waiters on {} member(s): {hand_overs} hand-overs, one grant each, {:.1} µs per hand-over (delete + grant round trip)",
        t.members().len(),
        took.as_micros() as f64 / hand_overs as f64
    );
}

/// A `mntr` value of one server, through the four-letter-word port.
async fn mntr(addr: std::net::SocketAddr, key: &str) -> u64 {
    target::mntr(addr, key)
        .await
        .unwrap_or_else(|| panic!("{key} not in the mntr of {addr}"))
}

/// Polls a `mntr` value of one server until it is `want`.
async fn wait_mntr(addr: std::net::SocketAddr, key: &str, want: u64) {
    let mut last = 0;
    let r = tokio::time::timeout(T, async {
        loop {
            last = mntr(addr, key).await;
            if last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "{addr}: {key} {last}, not {want}");
}

/// Dropping a guard queues its delete at once, so the same client's next acquire goes
/// after it (in the same write): a `try_acquire` right after a drop holds, on both
/// paths, many times in a row.
/// The client of the `k`-th path is on member `k % n`.
async fn drop_then_acquire_travel_together(t: &Target) {
    for (k, path) in [zlock::LockPath::Auto, zlock::LockPath::Recipe]
        .into_iter()
        .enumerate()
    {
        let c = connect(&t.hosts(k + 1)).await.with_lock_path(path);
        let lock = zlock::Mutex::new(c.clone(), "/drop");
        let mut g = lock.acquire().await.unwrap();
        for _ in 0..50 {
            drop(g);
            g = lock
                .try_acquire()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{path:?}: busy right after our own drop"));
        }
        g.release().await.unwrap();
        // Nothing left: no child, or not even the path (a container the recipe made,
        // which the server may have cleaned up once empty).
        match c.get_children("/drop", false).await {
            Ok(kids) => assert!(kids.is_empty(), "{path:?}: /drop still holds {kids:?}"),
            Err(zlock::Error::Server(zlock::ErrorCode::NoNode)) => {}
            Err(e) => panic!("{path:?}: {e}"),
        }
        c.close().await.unwrap();
    }
}

/// `Mutex::reacquire`: release and queue again in one request on the native path (two
/// on the recipe): alone it holds again at once with a higher fencing token; with a
/// waiter, the waiter goes first.
/// `a` on member 0, `b` on member 1.
async fn reacquire_hands_over_then_requeues(t: &Target) {
    for path in [zlock::LockPath::Auto, zlock::LockPath::Recipe] {
        let a = connect(&t.hosts(0)).await.with_lock_path(path);
        let b = connect(&t.hosts(1)).await.with_lock_path(path);
        let la = zlock::Mutex::new(a.clone(), "/re");
        let mut g = la.acquire().await.unwrap();
        let mut token = g.fencing_token();
        for _ in 0..20 {
            g = la.reacquire(g).await.unwrap();
            assert!(g.fencing_token() > token, "{path:?}");
            token = g.fencing_token();
        }
        assert_eq!(a.get_children("/re", false).await.unwrap().len(), 1);
        // A waiter gets its turn before the reacquirer holds again.
        let lb = zlock::Mutex::new(b.clone(), "/re");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let waiter = tokio::spawn({
            let order = order.clone();
            async move {
                let g = lb.acquire().await.unwrap();
                order.lock().unwrap().push("b");
                tokio::time::sleep(Duration::from_millis(50)).await;
                g.release().await.unwrap();
            }
        });
        within("b queued", async {
            while a.get_children("/re", false).await.unwrap().len() != 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let g = within("reacquire behind b", la.reacquire(g)).await.unwrap();
        order.lock().unwrap().push("a");
        waiter.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["b", "a"], "{path:?}");
        g.release().await.unwrap();
        a.close().await.unwrap();
        b.close().await.unwrap();
    }
}

/// Under a chroot, the native request's lock path and release node both get the
/// chroot (a reacquire names its old node relative to the chroot).
/// `root` on member 0, the chrooted client on member 1.
async fn chroot_native_lock_and_reacquire(t: &Target) {
    let root = connect(&t.hosts(0)).await;
    root.ensure_path("/app").await.unwrap();
    let c = connect(&format!("{}/app", t.hosts(1))).await;
    let lock = zlock::Mutex::new(c.clone(), "/locks/l");
    let mut g = lock.acquire().await.unwrap();
    assert!(g.node().starts_with("/locks/l/_c_"), "{}", g.node());
    for _ in 0..3 {
        g = lock.reacquire(g).await.unwrap();
    }
    target::sync(&root).await;
    let kids = root.get_children("/app/locks/l", false).await.unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(format!("/locks/l/{}", kids[0]), g.node());
    g.release().await.unwrap();
    target::sync(&root).await;
    assert!(root
        .get_children("/app/locks/l", false)
        .await
        .unwrap()
        .is_empty());
}

/// A native waiter survives a server restart (`kill -9`, same port): the nodes and the
/// waiters come back from the snapshot and the log; on reconnect the client re-sends
/// its request with RESUME, and the holder's release then grants it. One server only:
/// for an ensemble, `ensemble_faults::all_members_kill9_and_restart` kills and
/// restarts every member under native lock traffic (waiters queued among it), and its
/// other tests kill single members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let server = tokio::task::spawn_blocking(move || zlock_testkit::ChildServer::start(&path, &[]))
        .await
        .unwrap()
        .unwrap();
    let addr = server.addr.to_string();
    let holder = connect(&addr).await;
    let waiter = connect(&addr).await;
    let NativeLock::Granted { node: held, .. } = holder.lock_native(req("/r", "h")).await.unwrap()
    else {
        panic!()
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req("/r", "w")).await.unwrap()
    else {
        panic!()
    };
    let mut server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.restart_same_port().unwrap();
        server
    })
    .await
    .unwrap();
    for c in [&holder, &waiter] {
        let mut st = c.state_stream();
        within(
            "reconnected",
            st.wait_for(|s| *s == ConnectionState::Reconnected),
        )
        .await
        .unwrap();
    }
    holder.delete(&held, -1).await.unwrap();
    let g = within("grant after the restart", grant).await.unwrap();
    assert_eq!(g.node, node);
    waiter.delete(&node, -1).await.unwrap();
    server.kill9();
}

/// Declares the scenarios: a test each against its own in-process server
/// (`standalone::<name>`), and one test running them all in turn against one ensemble.
macro_rules! scenarios {
    ($($name:ident => $($f:ident)::+),+ $(,)?) => {
        mod standalone {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let s = zlock_testkit::TestServer::start().await.unwrap();
                    super::$($f)::+(&super::Target::parse(&s.connect_string())).await;
                }
            )+
        }

        /// Every scenario in turn against one three-member ensemble (`zlock server`
        /// processes, `zlock_testkit::zlock_bin`).
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn ensemble() {
            let e = ChildEnsemble::start().await.unwrap();
            let t = Target::parse(&e.connect_string());
            for i in 0..e.len() {
                assert!(connect(&t.hosts(i)).await.server_has_native_locks(), "member {i}");
            }
            $(
                let started = Instant::now();
                tokio::time::timeout(Duration::from_secs(120), $($f)::+(&t))
                    .await
                    .unwrap_or_else(|_| panic!("[ensemble] {}: timed out", stringify!($name)));
                eprintln!("[ensemble] {} passed in {:?}", stringify!($name), started.elapsed());
            )+
        }
    };
}

scenarios! {
    fifo_grants_pushed_in_order => fifo_grants_pushed_in_order,
    try_and_session_close_hand_over => try_and_session_close_hand_over,
    waiter_survives_reconnect_and_holder_expiry => waiter_survives_reconnect_and_holder_expiry,
    native_and_recipe_contenders_exclude_each_other => native_and_recipe_contenders_exclude_each_other,
    ten_thousand_waiters_one_message_per_hand_over => ten_thousand_waiters_one_message_per_hand_over,
    drop_then_acquire_travel_together => drop_then_acquire_travel_together,
    reacquire_hands_over_then_requeues => reacquire_hands_over_then_requeues,
    chroot_native_lock_and_reacquire => chroot_native_lock_and_reacquire,
    foreign_kinds_block_alike_and_unnumbered_names_block_nobody =>
        order::foreign_kinds_block_alike_and_unnumbered_names_block_nobody,
    wrapped_counters_order_alike => order::wrapped_counters_order_alike,
    grant_made_while_disconnected_arrives_on_reconnect =>
        reconnect::grant_made_while_disconnected_arrives_on_reconnect,
    waiter_survives_a_second_break_before_its_resume_is_answered =>
        reconnect::waiter_survives_a_second_break_before_its_resume_is_answered,
    failed_multi_over_a_waiters_node_keeps_its_grant =>
        rollback::failed_multi_over_a_waiters_node_keeps_its_grant,
    lock_delay_after_the_holder_dies => lock_delay::lock_delay_after_the_holder_dies,
    clean_release_hands_over_at_once => lock_delay::clean_release_hands_over_at_once,
    lock_delay_out_of_bounds_is_refused => lock_delay::lock_delay_out_of_bounds_is_refused,
    paused_recipe_holder_sees_lost_and_its_fenced_write_is_refused =>
        lock_delay::paused_recipe_holder_sees_lost_and_its_fenced_write_is_refused,
    recipe_refuses_a_lock_delay_without_the_native_path =>
        lock_delay::recipe_refuses_a_lock_delay_without_the_native_path,
}
