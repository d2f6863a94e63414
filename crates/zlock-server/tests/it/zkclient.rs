//! zlock driven by an independent client, the `zookeeper-client` crate (0.11), and the
//! same test bodies run against Apache ZooKeeper 3.8 (Debian's package) so that every
//! expectation here is ZooKeeper's, not zlock's idea of it.
//!
//! Each test calls [`on_both`] with its body. The body gets an [`Env`] whose connect
//! string is chrooted to a fresh node named after the test, so bodies use short absolute
//! paths and the ZooKeeper side can be one server shared by all tests (started by the
//! first test that needs it, stopped when the last one holding it finishes).
//!
//! `on_both` runs the body against zlock, then against ZooKeeper, and fails naming each
//! server the body failed on: "fails on zlock, passes on ZooKeeper" is a zlock bug.
//! ZooKeeper missing, the tests fail (`zlock_testkit::require`);
//! `ZLOCK_TEST_ALLOW_MISSING=1` runs them against zlock only, saying so.
//!
//! No assertion depends on timing: everything that happens "later" (TTL and container
//! removal, session expiry, lock hand-over, watch events) is awaited with a generous
//! deadline that only bounds a hang.
//!
//! Topic modules live in `tests/it/zkclient/`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use zlock_testkit::{require, Peer, TestServer, ZooKeeper};
use zookeeper_client as zk;

mod lifecycle;
mod nodes;
mod raw;
mod recipes;
mod watches;

/// How long any single awaited condition may take before the test is declared hung.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Which server a body is running against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Zlock,
    ZooKeeper,
}

/// What a test body gets: the server's address and a chroot of its own.
#[derive(Clone, Debug)]
pub struct Env {
    pub flavor: Flavor,
    pub addr: SocketAddr,
    /// The chroot, e.g. `/nodes_create_modes`: it exists and is empty when the body starts.
    pub root: String,
}

impl Env {
    /// `127.0.0.1:<port>/<root>`
    pub fn connect_string(&self) -> String {
        format!("{}{}", self.addr, self.root)
    }

    /// A new session, chrooted to [`Env::root`].
    pub async fn client(&self) -> zk::Client {
        self.connect(zk::Client::connector()).await
    }

    /// A new session built from `connector`, chrooted to [`Env::root`].
    pub async fn connect(&self, connector: zk::Connector) -> zk::Client {
        tokio::time::timeout(DEADLINE, connector.connect(&self.connect_string()))
            .await
            .expect("connect timed out")
            .expect("connect")
    }

    /// A server path (without the chroot) for a client path.
    pub fn server_path(&self, path: &str) -> String {
        if path == "/" {
            self.root.clone()
        } else {
            format!("{}{path}", self.root)
        }
    }
}

static SHARED_ZK: Mutex<Weak<ZooKeeper>> = Mutex::new(Weak::new());

/// The shared Apache ZooKeeper, started if no running test holds it (`None`: it is
/// missing and missing peers are allowed).
fn shared_zookeeper() -> Option<Arc<ZooKeeper>> {
    require(Peer::ZooKeeper)?;
    let mut slot = SHARED_ZK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(zk) = slot.upgrade() {
        return Some(zk);
    }
    let zk = Arc::new(ZooKeeper::start().expect("starting Apache ZooKeeper"));
    *slot = Arc::downgrade(&zk);
    Some(zk)
}

/// Creates the test's chroot node on the server at `addr`.
async fn make_root(addr: SocketAddr, root: &str) {
    let c = tokio::time::timeout(DEADLINE, zk::Client::connect(&addr.to_string()))
        .await
        .expect("connect timed out")
        .expect("connect");
    c.create(root, b"", &persistent())
        .await
        .unwrap_or_else(|e| panic!("creating chroot {root}: {e}"));
}

/// Runs `body` on a fresh Env (own chroot) and turns a panic or a hang into an error text.
async fn run_one<F, Fut>(
    flavor: Flavor,
    addr: SocketAddr,
    test: &str,
    body: &F,
) -> Result<(), String>
where
    F: Fn(Env) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let root = format!("/{test}");
    make_root(addr, &root).await;
    let env = Env { flavor, addr, root };
    let task = tokio::spawn(tokio::time::timeout(Duration::from_secs(60), body(env)));
    match task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err("timed out after 60 s".into()),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(msg)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the same test body against zlock and against Apache ZooKeeper, and fails with
/// what went wrong on each.
pub async fn on_both<F, Fut>(test: &str, body: F)
where
    F: Fn(Env) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Taken first, so a test running in parallel keeps the shared server alive.
    let zookeeper = shared_zookeeper();

    let server = TestServer::start().await.expect("starting zlock");
    let on_zlock = run_one(Flavor::Zlock, server.addr, test, &body).await;
    server.stop().await.expect("stopping zlock");

    let on_zk = match &zookeeper {
        Some(zk) => Some(run_one(Flavor::ZooKeeper, zk.addr, test, &body).await),
        None => None,
    };
    drop(zookeeper);

    match (on_zlock, on_zk) {
        (Ok(()), None | Some(Ok(()))) => {}
        (Err(e), Some(Ok(()))) => {
            panic!("{test}: FAILS ON ZLOCK, passes on Apache ZooKeeper (a zlock bug): {e}")
        }
        (Err(e), None) => panic!("{test}: fails on zlock (ZooKeeper not run): {e}"),
        (Ok(()), Some(Err(e))) => {
            panic!("{test}: passes on zlock, FAILS ON APACHE ZOOKEEPER (wrong expectation?): {e}")
        }
        (Err(a), Some(Err(b))) => panic!("{test}: fails on both. zlock: {a}\nZooKeeper: {b}"),
    }
}

// ---- small helpers shared by the topic modules ----

pub fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

pub fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

pub fn mode(m: zk::CreateMode) -> zk::CreateOptions<'static> {
    m.with_acls(zk::Acls::anyone_all())
}

/// Polls `check` (about every 50 ms) until it returns `Some`, or panics after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `path` no longer exists.
pub async fn wait_gone(c: &zk::Client, path: &str) {
    eventually(&format!("{path} to be removed"), || async {
        match c.check_stat(path).await.unwrap() {
            None => Some(()),
            Some(_) => None,
        }
    })
    .await
}

/// Awaits a one-shot watch event (bounded by [`DEADLINE`]).
pub async fn oneshot(w: zk::OneshotWatcher) -> zk::WatchedEvent {
    tokio::time::timeout(DEADLINE, w.changed())
        .await
        .expect("no watch event before the deadline")
}

/// Awaits the next persistent-watch event (bounded by [`DEADLINE`]).
pub async fn next_event(w: &mut zk::PersistentWatcher) -> zk::WatchedEvent {
    tokio::time::timeout(DEADLINE, w.changed())
        .await
        .expect("no watch event before the deadline")
}

/// A node event as ZooKeeper 3.8 delivers it (3.8 sends no zxid with notifications).
pub fn event(t: zk::EventType, path: &str) -> zk::WatchedEvent {
    zk::WatchedEvent::new(t, path)
}

/// Names sorted, for comparing child lists (their order is unspecified).
pub fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}
