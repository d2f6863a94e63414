//! `zlock lock` and `zlock demo orders`, run as the built binary against an in-process
//! zlock server (or, for the demo, its own embedded one).

use std::time::Duration;

use crate::common::{run, zlock_cmd, Out, Scratch};
use zlock::Client;
use zlock_testkit::TestServer;

async fn zl(args: &[&str]) -> Out {
    let what = format!("zlock {args:?}");
    run(zlock_cmd(args), &what, Duration::from_secs(120)).await
}

/// Nothing is left under a released lock's path: its children are gone, and the path
/// itself, a container the recipe created, may already have been cleaned up too (the
/// server removes an emptied container on its next check, as ZooKeeper does).
async fn assert_released(c: &Client, path: &str) {
    match c.get_children(path, false).await {
        Ok(kids) => assert!(kids.is_empty(), "{path} still holds {kids:?}"),
        Err(zlock::Error::Server(zlock::ErrorCode::NoNode)) => {}
        Err(e) => panic!("get_children({path}): {e}"),
    }
}

#[tokio::test]
async fn lock_passes_exit_code_and_exports_token() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let o = zl(&[
        "lock",
        "/locks/a",
        "--server",
        &cs,
        "--",
        "sh",
        "-c",
        "echo token=$ZLOCK_FENCING_TOKEN node=$ZLOCK_LOCK_NODE; exit 7",
    ])
    .await;
    assert_eq!(o.code, 7, "stderr {:?}", o.stderr);
    let line = o.stdout.trim();
    let token: i64 = line
        .strip_prefix("token=")
        .and_then(|r| r.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {line:?}"));
    assert!(token > 0, "{line}");
    assert!(line.contains("node=/locks/a/_c_"), "{line}");
    assert!(line.contains("-lock-"), "{line}");

    let o = zl(&["lock", "/locks/a", "--server", &cs, "--", "true"]).await;
    assert_eq!(o.code, 0, "stderr {:?}", o.stderr);

    // Released: nothing left under the lock path.
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    assert_released(&c, "/locks/a").await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn two_lock_processes_never_overlap() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let dir = Scratch::new("overlap");
    let log = dir.path().join("markers");
    let log_s = log.to_str().unwrap().to_owned();
    let mut runs = Vec::new();
    for who in ["A", "B"] {
        let (cs, log_s) = (cs.clone(), log_s.clone());
        runs.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for _ in 0..3 {
                let script =
                    format!("echo start {who} >> {log_s}; sleep 0.2; echo end {who} >> {log_s}");
                let o = zl(&[
                    "lock", "/locks/b", "--server", &cs, "--", "sh", "-c", &script,
                ])
                .await;
                codes.push((o.code, o.stderr));
            }
            codes
        }));
    }
    for r in runs {
        for (code, stderr) in r.await.unwrap() {
            assert_eq!(code, 0, "stderr {stderr:?}");
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "{text}");
    for pair in lines.chunks(2) {
        let who = pair[0].strip_prefix("start ").expect(&text);
        assert_eq!(pair[1], format!("end {who}"), "interleaved:\n{text}");
    }
}

#[tokio::test]
async fn lock_timeout_exits_1_and_leaves_no_node() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let lock = zlock::recipes::Mutex::new(c.clone(), "/locks/c");
    let guard = lock.acquire().await.unwrap();
    let o = zl(&[
        "lock",
        "/locks/c",
        "--timeout",
        "300ms",
        "--server",
        &cs,
        "--",
        "echo",
        "should not run",
    ])
    .await;
    assert_eq!(o.code, 1, "stdout {:?}", o.stdout);
    assert_eq!(o.stderr, "timed out waiting for lock /locks/c\n");
    assert_eq!(o.stdout, "");
    let kids = c.get_children("/locks/c", false).await.unwrap();
    assert_eq!(
        kids,
        vec![guard.node().rsplit('/').next().unwrap().to_owned()]
    );
    guard.release().await.unwrap();
    assert_released(&c, "/locks/c").await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn lock_unreachable_server_exits_1() {
    let port = zlock_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let o = zl(&["lock", "/locks/d", "--server", &addr, "--", "true"]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.starts_with("zlock lock: cannot connect to"),
        "{:?}",
        o.stderr
    );
}

#[cfg(unix)]
#[tokio::test]
async fn lock_forwards_sigterm_and_releases() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let dir = Scratch::new("sigterm");
    let ready = dir.path().join("ready");
    let script = format!(
        "trap 'echo got-term; exit 3' TERM; touch {}; while true; do sleep 0.05; done",
        ready.display()
    );
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_zlock"))
        .args([
            "lock", "/locks/e", "--server", &cs, "--", "sh", "-c", &script,
        ])
        .env_remove("ZLOCK_SERVER")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while !ready.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().unwrap();
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 15));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "got-term");
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    assert_released(&c, "/locks/e").await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn demo_orders_fair_lock_ok() {
    let o = zl(&["demo", "orders", "--clients", "30"]).await;
    assert_eq!(o.code, 0, "stdout {:?} stderr {:?}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("embedded zlock server on 127.0.0.1:"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("OK: 30 unique consecutive order numbers"),
        "{}",
        o.stdout
    );
    assert_eq!(o.stdout.matches(" -> order ").count(), 30);
    assert!(o.stdout.contains("lock path: native"), "{}", o.stdout);
    assert!(
        o.stdout.contains("watch notifications delivered: 0 "),
        "the native path sets no watch: {}",
        o.stdout
    );
}

/// `--recipe`: the same Mutex through the watch-based recipe.
/// The demo's "watch notifications delivered: N" figure.
fn notifications(stdout: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("watch notifications delivered: "))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no notification count in {stdout}"))
}

#[tokio::test]
async fn demo_orders_recipe_path() {
    let o = zl(&["demo", "orders", "--clients", "30", "--recipe"]).await;
    assert_eq!(o.code, 0, "stdout {:?} stderr {:?}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("lock path: standard recipe"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("OK: 30 unique consecutive order numbers"),
        "{}",
        o.stdout
    );
    // At most one per waiter (fewer when a predecessor was gone before its watch).
    let count = notifications(&o.stdout);
    assert!((1..=29).contains(&count), "{}", o.stdout);
}

#[tokio::test]
async fn demo_orders_naive_ok_and_counts_notifications() {
    let o = zl(&["demo", "orders", "--clients", "30", "--naive"]).await;
    assert_eq!(o.code, 0, "stdout {:?} stderr {:?}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("OK: 30 unique consecutive order numbers"),
        "{}",
        o.stdout
    );
    let count = notifications(&o.stdout);
    assert!(count > 0, "{}", o.stdout);
}

#[tokio::test]
async fn demo_orders_no_lock_exits_0() {
    let o = zl(&["demo", "orders", "--clients", "30", "--no-lock"]).await;
    assert_eq!(o.code, 0, "stdout {:?} stderr {:?}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("DUPLICATES: ") || o.stdout.contains("OK: 30"),
        "{}",
        o.stdout
    );
}

#[tokio::test]
async fn demo_orders_against_a_server() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let o = zl(&["demo", "orders", "--clients", "10", "--server", &cs]).await;
    assert_eq!(o.code, 0, "stdout {:?} stderr {:?}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("OK: 10 unique consecutive"),
        "{}",
        o.stdout
    );
}
