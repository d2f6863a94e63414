//! Helpers shared by the recipe test modules: deadlines, connecting with the lock path
//! a run asks for, listing children, and running one scenario list against zlock (native
//! path), zlock (standard recipe) and Apache ZooKeeper.

use std::future::Future;
use std::time::Duration;

use zlock::{Client, Error, ErrorCode, LockPath};
use zlock_testkit::{require, Peer, TestServer, ZooKeeper};

/// Deadline for one step; only there so that a hang fails with a name.
pub const T: Duration = Duration::from_secs(60);

pub async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(T, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// Waits for every task (each must succeed), all within [`T`].
pub async fn join_all(what: &str, tasks: Vec<tokio::task::JoinHandle<()>>) {
    within(what, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

tokio::task_local! {
    /// The lock path the scenario's clients take (the zlock runs go both ways; a client
    /// made in a spawned task takes the default, which mixes the two).
    pub static LOCK_PATH: LockPath;
}

/// Connects, retrying while the server is still starting (ZooKeeper listens first).
pub async fn connect(addr: &str) -> Client {
    let start = std::time::Instant::now();
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(10), Client::connect(addr, 10_000));
        match attempt.await.unwrap_or(Err(Error::ConnectionLoss)) {
            Ok((c, _)) => return c.with_lock_path(LOCK_PATH.try_with(|p| *p).unwrap_or_default()),
            Err(_) if start.elapsed() < T => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

/// The children of a path (none if it is gone).
pub async fn children(zk: &Client, path: &str) -> Vec<String> {
    match zk.get_children(path, false).await {
        Ok(c) => c,
        Err(Error::Server(ErrorCode::NoNode)) => Vec::new(),
        Err(e) => panic!("get_children {path}: {e}"),
    }
}

/// Polls until `path` has exactly `n` children.
pub async fn wait_children(zk: &Client, path: &str, n: usize) {
    within(&format!("{path} to have {n} children"), async {
        while children(zk, path).await.len() != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Runs `all` against an in-process zlock server, whose clients take the native lock
/// path (checked).
pub async fn on_zlock_native<F: Future<Output = ()>>(all: impl FnOnce(String) -> F) {
    let s = TestServer::start().await.unwrap();
    let probe = connect(&s.connect_string()).await;
    assert!(
        probe.uses_native_locks(),
        "zlock offers the native lock path"
    );
    all(s.connect_string()).await;
}

/// Runs `all` against zlock with the standard recipe (create, getChildren, watch).
pub async fn on_zlock_recipe<F: Future<Output = ()>>(all: impl FnOnce(String) -> F) {
    let s = TestServer::start().await.unwrap();
    LOCK_PATH
        .scope(LockPath::Recipe, all(s.connect_string()))
        .await;
}

/// Runs `all` against Apache ZooKeeper 3.8 (missing, it fails: [`require`]).
pub async fn on_zookeeper<F: Future<Output = ()>>(all: impl FnOnce(String) -> F) {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let zk = ZooKeeper::start().unwrap();
    all(zk.connect_string()).await;
}

/// Runs scenario functions `f(addr)` one after another, each under an overall deadline
/// (so a hang names itself).
macro_rules! run_each {
    ($addr:expr; $($f:ident),+ $(,)?) => {{
        let deadline = std::time::Duration::from_secs(120);
        $(
            tokio::time::timeout(deadline, $f($addr))
                .await
                .unwrap_or_else(|_| panic!("{}: timed out", stringify!($f)));
        )+
    }};
}
pub(crate) use run_each;
