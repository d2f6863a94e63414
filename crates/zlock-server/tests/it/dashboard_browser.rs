//! The lock dashboard in a real browser: zlock with its admin server, locks made
//! through the protocol, and `compat/dashboard/check.mjs` (headless Debian chromium
//! driven by playwright-core) checking what the page shows:
//! - native locks: a holder and two waiters on `/locks/l`, a holder on `/locks/other`;
//! - kazoo's `Lock` (a real kazoo client) holding `/locks/kz`, a native contender and a
//!   second kazoo client waiting behind it, in that order;
//! - Curator's `InterProcessMutex` (a real Curator, `CuratorLockCheck`) holding
//!   `/locks/cur` with a second Curator waiting, labelled as Curator's recipe;
//! - a hand-over on `/locks/early` that happened before the page was opened (the
//!   member's own history, not something the page saw).
//!
//! Then that the page updates without a reload when the holder of `/locks/l` releases,
//! lists that hand-over, flags the stuck queue and filters by its search box.
//!
//! Needs `node`, `compat/dashboard/node_modules` (`npm ci` there) and chromium
//! (`/usr/bin/chromium`, or `CHROMIUM`), kazoo's venv, Curator and the JDK;
//! `scripts/test.sh` installs them. Without them the test fails
//! (`zlock_testkit::require`).
//! `ZLOCK_DASHBOARD_SHOT` is where the screenshot goes (default
//! `target/dashboard.png`; the README's is `docs/dashboard.png`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use zlock::{Client, LockRequest, NativeLock};
use zlock_testkit::{require, with_admin, Peer, PeerProcess, TestServer};

const T: Duration = Duration::from_secs(60);

/// A kazoo client on a lock: `hold` takes it (printing HOLDING), `wait` starts taking
/// it from a thread; both print `READY 0x<session>` first and end on a stdin line.
const KAZOO: &str = r#"
import sys, threading
from kazoo.client import KazooClient
hosts, path, mode = sys.argv[1:4]
zk = KazooClient(hosts=hosts, timeout=10); zk.start(timeout=30)
lock = zk.Lock(path, mode)
print("READY 0x%x" % zk.client_id[0], flush=True)
if mode == "hold":
    assert lock.acquire(timeout=30)
    print("HOLDING", flush=True)
else:
    threading.Thread(target=lambda: lock.acquire(timeout=120), daemon=True).start()
sys.stdin.readline()
"#;

/// A peer program's session id, from its `READY ...0x<id>` line.
async fn session(p: &mut PeerProcess) -> String {
    let rest = p.expect("READY").await;
    rest.rsplit(' ').next().unwrap().to_owned()
}

/// Waits (bounded) until `path` has `n` children.
async fn children(c: &Client, path: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let got = c.get_children(path, false).await.unwrap_or_default();
        if got.len() == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path}: {got:?}, want {n} children"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn req(path: &str, guid: &str) -> LockRequest {
    LockRequest::exclusive(path, format!("_c_{guid}-lock-"))
}

async fn connect(at: &str) -> Client {
    Client::connect(at, 10_000).await.unwrap().0
}

fn hex(c: &Client) -> String {
    format!("0x{:x}", c.session_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium() {
    let Some(_) = require(Peer::Browser) else {
        return;
    };
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let Some(classes) = zlock_testkit::curator::compile_lock_check() else {
        return;
    };
    let s = TestServer::start_with(with_admin).await.unwrap();
    let url = format!("http://{}/locks", s.admin_addr().unwrap());
    let at = s.connect_string();
    let (h, w1, w2) = (connect(&at).await, connect(&at).await, connect(&at).await);
    let NativeLock::Granted { node, .. } = h.lock_native(req("/locks/l", "h")).await.unwrap()
    else {
        panic!("an uncontended lock is granted at once");
    };
    let NativeLock::Queued { grant: g1, .. } = w1.lock_native(req("/locks/l", "w1")).await.unwrap()
    else {
        panic!("the second contender waits");
    };
    let NativeLock::Queued { grant: _g2, .. } =
        w2.lock_native(req("/locks/l", "w2")).await.unwrap()
    else {
        panic!("the third contender waits");
    };
    let NativeLock::Granted { .. } = h.lock_native(req("/locks/other", "o")).await.unwrap() else {
        panic!("another path is free");
    };

    // A hand-over before the page opens: e1 releases, e2 holds.
    let (e1, e2) = (connect(&at).await, connect(&at).await);
    let NativeLock::Granted { node: early, .. } =
        e1.lock_native(req("/locks/early", "e1")).await.unwrap()
    else {
        panic!("/locks/early is free");
    };
    let NativeLock::Queued {
        grant: e2_grant, ..
    } = e2.lock_native(req("/locks/early", "e2")).await.unwrap()
    else {
        panic!("e2 waits behind e1");
    };
    e1.delete(&early, -1).await.unwrap();
    tokio::time::timeout(T, e2_grant)
        .await
        .expect("e2 is granted")
        .unwrap();

    // kazoo holds /locks/kz; a native contender, then a second kazoo client, wait.
    let kazoo = |mode: &str| {
        let mut cmd = Command::new(&py);
        cmd.args(["-c", KAZOO, &at, "/locks/kz", mode]);
        PeerProcess::spawn(cmd)
    };
    let mut ka = kazoo("hold");
    let ka_id = session(&mut ka).await;
    ka.expect("HOLDING").await;
    let n = connect(&at).await;
    let NativeLock::Queued { .. } = n.lock_native(req("/locks/kz", "n")).await.unwrap() else {
        panic!("the native contender waits behind kazoo");
    };
    let mut kb = kazoo("wait");
    let kb_id = session(&mut kb).await;
    children(&h, "/locks/kz", 3).await;

    // Curator holds /locks/cur, a second Curator waits.
    let curator = || {
        PeerProcess::spawn(zlock_testkit::curator::lock_check_command(
            classes.path(),
            &[],
            &[&at, "hold", "/locks/cur"],
        ))
    };
    let mut ca = curator();
    let ca_id = session(&mut ca).await;
    ca.expect("HOLDING").await;
    let mut cb = curator();
    let cb_id = session(&mut cb).await;
    children(&h, "/locks/cur", 2).await;

    let dir = tempfile::tempdir().unwrap();
    let expect = json!({
        "queues": [
            {"path": "/locks/kz", "holders": [ka_id], "waiters": [hex(&n), kb_id]},
            {"path": "/locks/cur", "holders": [ca_id], "waiters": [cb_id], "recipe": "curator"},
        ],
        "handovers": [{"path": "/locks/early", "from": hex(&e1), "to": hex(&e2)}],
    });
    std::fs::write(dir.path().join("expect.json"), expect.to_string()).unwrap();
    let shot = std::env::var("ZLOCK_DASHBOARD_SHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target/dashboard.png"));
    let mut child = Command::new("node")
        .arg(root().join("compat/dashboard/check.mjs"))
        .args([url.as_str(), dir.path().to_str().unwrap()])
        .args([hex(&h), hex(&w1), hex(&w2), hex(&h)])
        .arg(&shot)
        .spawn()
        .unwrap();

    // The page shows the first state: release the holder.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let ready = dir.path().join("ready");
    while !ready.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("check.mjs ended before the release: {status}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "check.mjs never ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.delete(&node, -1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), g1)
        .await
        .expect("the first waiter is granted")
        .unwrap();
    std::fs::write(dir.path().join("released"), b"").unwrap();

    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if tokio::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("check.mjs did not finish in time");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "check.mjs: {status}");
    assert!(shot.exists(), "no screenshot at {}", shot.display());
}
