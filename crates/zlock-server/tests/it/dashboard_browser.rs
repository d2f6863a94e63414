//! The lock dashboard in a real browser: zlock with its admin server, locks made
//! through the protocol (a holder and two waiters on `/locks/l`, a holder on
//! `/locks/other`), and `compat/dashboard/check.mjs` (headless Debian chromium driven
//! by playwright-core) checking that the page shows them, updates without a reload
//! when the holder releases, lists the hand-over, flags the stuck queue and filters
//! by its search box.
//!
//! Needs `node`, `compat/dashboard/node_modules` (`npm ci` there) and chromium
//! (`/usr/bin/chromium`, or `CHROMIUM`); `scripts/test.sh` installs them. Without
//! them the test fails (`zlock_testkit::require(Peer::Browser)`).
//! `ZLOCK_DASHBOARD_SHOT` is where the screenshot goes (default
//! `target/dashboard.png`; the README's is `docs/dashboard.png`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use zlock::{Client, LockRequest, NativeLock};
use zlock_testkit::{require, with_admin, Peer, TestServer};

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

    let dir = tempfile::tempdir().unwrap();
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
