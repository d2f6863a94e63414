//! The client against a live server: chroot, reconnect resuming the same session, watches
//! surviving a reconnect, expiry reported as such, auth re-sent, the state stream.
//! Each scenario runs against an in-process zlock server; the main ones also against
//! Apache ZooKeeper (Debian's package; missing, the test fails: `zlock_testkit::require`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proxy::Proxy;
use tokio::sync::watch;
use zlock::{
    perms, Acl, Client, ConnectionState, CreateMode, Error, ErrorCode, EventType, Id, WatchedEvent,
};
use zlock_testkit::{require, ChildServer, Peer, TestServer, ZooKeeper};

const T: Duration = Duration::from_secs(15);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(T, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// Connects, retrying while the server is still starting (ZooKeeper listens first).
async fn connect(addr: &str, timeout_ms: i32) -> Client {
    let start = std::time::Instant::now();
    loop {
        match Client::connect(addr, timeout_ms).await {
            Ok((c, _)) => return c,
            Err(e) if start.elapsed() < Duration::from_secs(60) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

/// Records every state the stream shows.
fn record(mut rx: watch::Receiver<ConnectionState>) -> Arc<Mutex<Vec<ConnectionState>>> {
    let seen = Arc::new(Mutex::new(vec![*rx.borrow_and_update()]));
    let s = seen.clone();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let v = *rx.borrow_and_update();
            s.lock().unwrap().push(v);
        }
    });
    seen
}

/// The recorder runs on its own task: give it a moment to see the last state.
async fn assert_states(seen: &Arc<Mutex<Vec<ConnectionState>>>, want: &[ConnectionState]) {
    for _ in 0..100 {
        if seen.lock().unwrap().as_slice() == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.lock().unwrap().as_slice(), want);
}

async fn wait_state(c: &Client, want: ConnectionState) {
    let mut rx = c.state_stream();
    within(&format!("state {want:?}"), rx.wait_for(|s| *s == want))
        .await
        .unwrap_or_else(|_| panic!("state stream ended before {want:?}"));
}

fn ev(t: EventType, p: &str) -> WatchedEvent {
    WatchedEvent {
        event_type: t,
        path: p.to_owned(),
    }
}

async fn chroot(addr: SocketAddr) {
    let admin = connect(&addr.to_string(), 10_000).await;
    admin.ensure_path("/app").await.unwrap();
    // The first host is dead: the client moves on to the second.
    let dead = zlock_testkit::free_port();
    let (c, mut events) = Client::connect(&format!("127.0.0.1:{dead},{addr}/app"), 10_000)
        .await
        .unwrap();
    assert_eq!(c.chroot(), "/app");
    let (p, _) = c.create("/x", b"1", CreateMode::Persistent).await.unwrap();
    assert_eq!(p, "/x");
    let (p, _) = c
        .create("/s-", b"", CreateMode::PersistentSequential)
        .await
        .unwrap();
    assert!(p.starts_with("/s-"), "{p}");
    assert_eq!(admin.get_data("/app/x", false).await.unwrap().0, b"1");
    let mut kids = c.get_children("/", false).await.unwrap();
    kids.sort();
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[1], "x");
    let (_, _, w) = c.get_data_watch("/x").await.unwrap();
    admin.set_data("/app/x", b"2", -1).await.unwrap();
    assert_eq!(
        within("watch", w).await.unwrap(),
        ev(EventType::NodeDataChanged, "/x")
    );
    let raw = within("catch-all", events.recv()).await.unwrap();
    assert_eq!(raw.path, "/x");
    c.close().await.unwrap();
    admin.close().await.unwrap();
}

async fn reconnect_resumes(addr: SocketAddr) {
    let proxy = Proxy::start(addr).await;
    let admin = connect(&addr.to_string(), 10_000).await;
    admin.ensure_path("/r").await.unwrap();
    let c = connect(&proxy.addr.to_string(), 6_000).await;
    let states = record(c.state_stream());
    let sid = c.session_id();
    c.create("/r/eph", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    c.create("/r/w", b"0", CreateMode::Persistent)
        .await
        .unwrap();
    let (_, _, data_w) = c.get_data_watch("/r/w").await.unwrap();
    let (_, child_w) = c.get_children_watch("/r").await.unwrap();
    let (none, exist_w) = c.exists_watch("/r/later").await.unwrap();
    assert!(none.is_none());
    let mut pw = c.add_watch("/r", true).await.unwrap();

    // A request in flight when the connection breaks fails with ConnectionLoss.
    proxy.stall(true);
    let inflight = tokio::spawn({
        let c = c.clone();
        async move { c.get_data("/r/w", false).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.block(true);
    proxy.cut();
    proxy.stall(false);
    assert_eq!(
        within("in flight", inflight).await.unwrap(),
        Err(Error::ConnectionLoss)
    );
    wait_state(&c, ConnectionState::Suspended).await;

    // Changes while disconnected.
    admin.set_data("/r/w", b"1", -1).await.unwrap();
    admin
        .create("/r/later", b"", CreateMode::Persistent)
        .await
        .unwrap();
    // A request made while disconnected waits for the reconnect.
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.exists("/r/eph", false).await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished());
    proxy.block(false);
    wait_state(&c, ConnectionState::Reconnected).await;
    assert_eq!(c.session_id(), sid);
    let stat = within("waiting", waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, sid, "the ephemeral survived");
    let owner = admin.exists("/r/eph", false).await.unwrap().unwrap();
    assert_eq!(owner.ephemeral_owner, sid);

    // The one-shot watches set before the disconnect fire for the missed changes.
    assert_eq!(
        within("data watch", data_w).await.unwrap(),
        ev(EventType::NodeDataChanged, "/r/w")
    );
    assert_eq!(
        within("child watch", child_w).await.unwrap(),
        ev(EventType::NodeChildrenChanged, "/r")
    );
    assert_eq!(
        within("exist watch", exist_w).await.unwrap(),
        ev(EventType::NodeCreated, "/r/later")
    );
    // The persistent recursive watch is registered again (SetWatches2): new changes arrive.
    // (Missed changes are not replayed for persistent watches, as in ZooKeeper.)
    admin.set_data("/r/w", b"2", -1).await.unwrap();
    loop {
        let e = within("persistent", pw.changed()).await.unwrap();
        if e == ev(EventType::NodeDataChanged, "/r/w") {
            break;
        }
    }
    c.close().await.unwrap();
    assert_states(
        &states,
        &[
            ConnectionState::Connected,
            ConnectionState::Suspended,
            ConnectionState::Reconnected,
            ConnectionState::Closed,
        ],
    )
    .await;
    assert_eq!(c.get_data("/r/w", false).await, Err(Error::Closed));
    admin.close().await.unwrap();
}

/// The session is closed elsewhere while the client is away: the resume is refused and
/// the client reports the expiry instead of opening a new session.
async fn expiry_reported(addr: SocketAddr) {
    let proxy = Proxy::start(addr).await;
    let admin = connect(&addr.to_string(), 10_000).await;
    admin.ensure_path("/e").await.unwrap();
    let c = connect(&proxy.addr.to_string(), 6_000).await;
    let states = record(c.state_stream());
    c.create("/e/eph", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let (_, _, w) = c.get_data_watch("/e/eph").await.unwrap();
    proxy.block(true);
    proxy.cut();
    wait_state(&c, ConnectionState::Suspended).await;
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.get_data("/e", false).await }
    });
    let (other, _) = Client::resume(
        &addr.to_string(),
        6_000,
        c.session_id(),
        c.session_password(),
    )
    .await
    .unwrap();
    assert_eq!(other.session_id(), c.session_id());
    other.close().await.unwrap();
    proxy.block(false);
    wait_state(&c, ConnectionState::Lost).await;
    assert_eq!(
        within("waiting", waiting).await.unwrap(),
        Err(Error::SessionExpired)
    );
    assert_eq!(within("watch", w).await, Err(Error::SessionExpired));
    assert_eq!(c.get_data("/e", false).await, Err(Error::SessionExpired));
    assert_eq!(admin.exists("/e/eph", false).await.unwrap(), None);
    assert_states(
        &states,
        &[
            ConnectionState::Connected,
            ConnectionState::Suspended,
            ConnectionState::Lost,
        ],
    )
    .await;
    admin.close().await.unwrap();
}

/// No host answers within the session timeout: Lost, SessionExpired.
async fn unreachable_past_timeout(addr: SocketAddr) {
    let proxy = Proxy::start(addr).await;
    let c = connect(&proxy.addr.to_string(), 1_000).await;
    let states = record(c.state_stream());
    proxy.block(true);
    proxy.cut();
    wait_state(&c, ConnectionState::Lost).await;
    proxy.block(false);
    assert_eq!(c.exists("/", false).await, Err(Error::SessionExpired));
    assert_states(
        &states,
        &[
            ConnectionState::Connected,
            ConnectionState::Suspended,
            ConnectionState::Lost,
        ],
    )
    .await;
}

/// Digest credentials are re-sent after a reconnect.
async fn auth_survives_reconnect(addr: SocketAddr) {
    let proxy = Proxy::start(addr).await;
    let c = connect(&proxy.addr.to_string(), 6_000).await;
    c.add_auth("digest", b"alice:secret").await.unwrap();
    let acl = vec![Acl {
        perms: perms::ALL,
        id: Id::new("auth", ""),
    }];
    c.create_with_acl("/secret", b"s", acl, CreateMode::Persistent)
        .await
        .unwrap();
    let stranger = connect(&addr.to_string(), 6_000).await;
    assert_eq!(
        stranger.get_data("/secret", false).await,
        Err(Error::Server(ErrorCode::NoAuth))
    );
    proxy.cut();
    wait_state(&c, ConnectionState::Reconnected).await;
    assert_eq!(c.get_data("/secret", false).await.unwrap().0, b"s");
    c.delete("/secret", -1).await.unwrap();
    c.close().await.unwrap();
    stranger.close().await.unwrap();
}

fn zlock_addr(s: &TestServer) -> SocketAddr {
    s.connect_string().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_chroot() {
    let s = TestServer::start().await.unwrap();
    chroot(zlock_addr(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_reconnect_resumes_session_and_watches() {
    let s = TestServer::start().await.unwrap();
    reconnect_resumes(zlock_addr(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_expiry_reported() {
    let s = TestServer::start().await.unwrap();
    expiry_reported(zlock_addr(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_unreachable_past_timeout_is_lost() {
    let s = TestServer::start().await.unwrap();
    unreachable_past_timeout(zlock_addr(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_auth_survives_reconnect() {
    let s = TestServer::start().await.unwrap();
    auth_survives_reconnect(zlock_addr(&s)).await;
}

/// The same scenarios against Apache ZooKeeper (one JVM for all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_scenarios() {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let zk = ZooKeeper::start().unwrap();
    let addr = zk.addr;
    drop(connect(&addr.to_string(), 6_000).await);
    chroot(addr).await;
    reconnect_resumes(addr).await;
    expiry_reported(addr).await;
    unreachable_past_timeout(addr).await;
    auth_survives_reconnect(addr).await;
}

/// kill -9 and restart of the zlock process on the same port and data: the client
/// resumes its session, its ephemeral survives and its watch fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_process_restart_same_port() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let mut server = tokio::task::spawn_blocking(move || ChildServer::start(&path, &[]))
        .await
        .unwrap()
        .unwrap();
    let addr = server.addr;
    let c = connect(&addr.to_string(), 10_000).await;
    let sid = c.session_id();
    c.create("/eph", b"", CreateMode::Ephemeral).await.unwrap();
    c.create("/p", b"0", CreateMode::Persistent).await.unwrap();
    let (_, _, w) = c.get_data_watch("/p").await.unwrap();
    let mut server = tokio::task::spawn_blocking(move || {
        server.restart_same_port().unwrap();
        server
    })
    .await
    .unwrap();
    wait_state(&c, ConnectionState::Reconnected).await;
    assert_eq!(
        c.exists("/eph", false)
            .await
            .unwrap()
            .unwrap()
            .ephemeral_owner,
        sid
    );
    let admin = connect(&addr.to_string(), 10_000).await;
    admin.set_data("/p", b"1", -1).await.unwrap();
    assert_eq!(
        within("watch", w).await.unwrap(),
        ev(EventType::NodeDataChanged, "/p")
    );
    c.close().await.unwrap();
    admin.close().await.unwrap();
    server.kill9();
}

/// A server at its `maxClientCnxns` for this address accepts the TCP connection and
/// closes it before the handshake (ZooKeeper does the same): the error says so, and
/// the same address connects again once a connection is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_handshake_closed_at_max_client_cnxns_is_explained() {
    let s = TestServer::start_with(|c| c.max_client_cnxns = 1)
        .await
        .unwrap();
    let addr = s.connect_string();
    let first = connect(&addr, 10_000).await;
    let refused = within("second connect", Client::connect(&addr, 10_000)).await;
    let e = refused
        .err()
        .expect("a second connection over maxClientCnxns=1");
    assert_eq!(e, Error::HandshakeClosed(addr.clone()));
    assert_eq!(e.code(), Some(ErrorCode::ConnectionLoss));
    assert_eq!(
        e.to_string(),
        format!(
            "cannot connect to {addr}: the server closed the connection during the \
             handshake; too many connections from this address? (maxClientCnxns)"
        )
    );
    first.close().await.unwrap();
    // The server sees the first connection go once the close is answered.
    let again = within("connect after a close", connect(&addr, 10_000)).await;
    again.close().await.unwrap();
}

/// The watched paths `wchc` lists for session `sid` (zlock answers it on the client
/// port).
async fn watched_by(addr: SocketAddr, sid: i64) -> Vec<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"wchc").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let mut mine = false;
    let mut paths = Vec::new();
    for line in out.lines() {
        match line.strip_prefix('\t') {
            Some(p) if mine => paths.push(p.to_owned()),
            Some(_) => {}
            // Session ids in hex, as ZooKeeper prints them.
            None => mine = line.trim() == format!("{sid:#x}"),
        }
    }
    paths
}

/// Waits (bounded) until `wchc` shows `path` watched by `sid` or not, as `want`.
async fn wait_watched(addr: SocketAddr, sid: i64, path: &str, want: bool) {
    within(&format!("{path} watched: {want}"), async {
        while watched_by(addr, sid).await.iter().any(|p| p == path) != want {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A dropped watcher is forgotten: removed on the server (`wchc`) once no other
/// watcher of the session needs the watch, so the server sends nothing more for it,
/// and not registered again after a reconnect. Against zlock and Apache ZooKeeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_dropped_watchers_are_removed() {
    let s = TestServer::start().await.unwrap();
    dropped_watchers_are_removed(zlock_addr(&s), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_dropped_watchers_are_removed() {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let zk = ZooKeeper::start().unwrap();
    // ZooKeeper's `wchc` lists data watches only (DataTree.dumpWatches dumps its data
    // watch manager; a persistent watch is in both): its child watches are checked by
    // their events alone.
    dropped_watchers_are_removed(zk.addr, false).await;
}

/// `wchc_child`: the server's `wchc` lists child watches (zlock's does).
async fn dropped_watchers_are_removed(addr: SocketAddr, wchc_child: bool) {
    let proxy = Proxy::start(addr).await;
    let admin = connect(&addr.to_string(), 10_000).await;
    admin.ensure_path("/dw/a").await.unwrap();
    let (c, mut events) = Client::connect(&proxy.addr.to_string(), 6_000)
        .await
        .unwrap();
    let sid = c.session_id();

    // A one-shot data watch, dropped.
    let (_, _, w) = c.get_data_watch("/dw/a").await.unwrap();
    wait_watched(addr, sid, "/dw/a", true).await;
    drop(w);
    wait_watched(addr, sid, "/dw/a", false).await;
    // The server sends nothing for it: an event would come before the reply to a read
    // made after the change.
    admin.set_data("/dw/a", b"1", -1).await.unwrap();
    c.get_data("/dw/a", false).await.unwrap();
    assert!(events.try_recv().is_err(), "an event for a dropped watcher");

    // Two watchers of one data watch (getData and exists): dropping one keeps the
    // server's watch for the other, which still fires.
    let (_, _, w1) = c.get_data_watch("/dw/a").await.unwrap();
    let (_, w2) = c.exists_watch("/dw/a").await.unwrap();
    drop(w1);
    c.get_data("/dw/a", false).await.unwrap();
    admin.set_data("/dw/a", b"2", -1).await.unwrap();
    assert_eq!(
        within("the exists watcher left", w2).await.unwrap(),
        ev(EventType::NodeDataChanged, "/dw/a")
    );
    // The catch-all stream gets that event too, just after: a later reply comes after
    // it.
    c.get_data("/dw/a", false).await.unwrap();
    while events.try_recv().is_ok() {}

    // A persistent recursive watch, dropped.
    let pw = c.add_watch("/dw", true).await.unwrap();
    wait_watched(addr, sid, "/dw", true).await;
    drop(pw);
    wait_watched(addr, sid, "/dw", false).await;
    admin.set_data("/dw/a", b"3", -1).await.unwrap();
    c.get_data("/dw/a", false).await.unwrap();
    assert!(events.try_recv().is_err(), "an event for a dropped watcher");

    // A child watch dropped while the connection is down: after the reconnect it is
    // not registered again (and what the server kept of it is removed).
    let (_, cw) = c.get_children_watch("/dw").await.unwrap();
    let (_, _, kept) = c.get_data_watch("/dw/a").await.unwrap();
    if wchc_child {
        wait_watched(addr, sid, "/dw", true).await;
    }
    proxy.block(true);
    proxy.cut();
    wait_state(&c, ConnectionState::Suspended).await;
    drop(cw);
    proxy.block(false);
    wait_state(&c, ConnectionState::Reconnected).await;
    if wchc_child {
        wait_watched(addr, sid, "/dw", false).await;
    }
    admin
        .create("/dw/b", b"", CreateMode::Persistent)
        .await
        .unwrap();
    c.get_data("/dw/a", false).await.unwrap();
    assert!(events.try_recv().is_err(), "an event for a dropped watcher");
    // The watcher still held was registered again.
    assert!(watched_by(addr, sid).await.iter().any(|p| p == "/dw/a"));
    admin.set_data("/dw/a", b"4", -1).await.unwrap();
    assert_eq!(
        within("the watcher kept across the reconnect", kept)
            .await
            .unwrap(),
        ev(EventType::NodeDataChanged, "/dw/a")
    );
    c.close().await.unwrap();
    admin.close().await.unwrap();
}
