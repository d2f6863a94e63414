//! `zlock lock`'s flock/consul-style flags, run as the built binary against an
//! in-process zlock server: -n and -E, --shared, --semaphore, lock loss (--kill-after),
//! a signal while waiting, the environment, the help.
//!
//! No test depends on how long anything takes: commands wait for marker files the test
//! (or another command) creates, and every wait has a deadline.

use std::path::Path;
use std::time::Duration;

use crate::common::{finish, run, zlock_cmd, Out, Scratch, RUN_BOUND as DEADLINE};
use tokio::time::Instant;
use zlock::Client;
use zlock_testkit::TestServer;

/// Runs `zlock args...` to the end (bounded).
async fn zl(args: &[&str]) -> Out {
    run(zlock_cmd(args), &format!("zlock {args:?}"), DEADLINE).await
}

/// Shell text that waits (bounded, then exit 9) until `path` exists.
fn sh_wait_for(path: &str) -> String {
    format!(
        "n=0; while [ ! -e '{path}' ]; do sleep 0.02; n=$((n+1)); \
         if [ $n -gt 3000 ]; then exit 9; fi; done"
    )
}

/// Polls `cond` until it holds, failing the test at the deadline.
async fn until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn children(c: &Client, path: &str) -> Vec<String> {
    match c.get_children(path, false).await {
        Ok(v) => v,
        Err(zlock::Error::Server(zlock::ErrorCode::NoNode)) => Vec::new(),
        Err(e) => panic!("getChildren {path}: {e}"),
    }
}

fn exists(p: &str) -> bool {
    Path::new(p).exists()
}

fn kill(sig: &str, pid: u32) -> bool {
    std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_exits_with_conflict_code_and_leaves_no_node() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();

    // Free: -n takes it and runs the command.
    let o = zl(&[
        "lock", "-n", "/locks/n", "--server", &cs, "--", "echo", "ran",
    ])
    .await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "ran\n"), "{}", o.stderr);

    let guard = zlock::recipes::Mutex::new(c.clone(), "/locks/n")
        .acquire()
        .await
        .unwrap();
    let holder = vec![guard.node().rsplit('/').next().unwrap().to_owned()];
    let o = zl(&[
        "lock", "-n", "/locks/n", "--server", &cs, "--", "echo", "ran",
    ])
    .await;
    assert_eq!(o.code, 1, "stderr {:?}", o.stderr);
    assert_eq!(o.stdout, "");
    assert!(o.stderr.contains("lock /locks/n is held"), "{:?}", o.stderr);
    assert_eq!(children(&c, "/locks/n").await, holder);

    let o = zl(&[
        "lock",
        "--no-wait",
        "-E",
        "7",
        "/locks/n",
        "--server",
        &cs,
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 7, "stderr {:?}", o.stderr);
    assert_eq!(children(&c, "/locks/n").await, holder);

    // -E is the --timeout code too (flock -w).
    let o = zl(&[
        "lock",
        "--timeout",
        "100ms",
        "--conflict-exit-code",
        "5",
        "/locks/n",
        "--server",
        &cs,
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 5, "stderr {:?}", o.stderr);
    assert_eq!(children(&c, "/locks/n").await, holder);

    guard.release().await.unwrap();
    c.close().await.unwrap();
}

/// Two `--shared` holders run at once (each waits to see the other's start marker), a
/// plain `zlock lock` on the same path queued meanwhile runs only after both ended, and
/// while the plain one holds, `--shared -n` finds the lock held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_overlap_and_exclusive_excludes_them() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let d = Scratch::new("shared");
    let go = d.file("go");
    let mut readers = Vec::new();
    for (me, other) in [("r1", "r2"), ("r2", "r1")] {
        let script = format!(
            "touch '{start}'; {wait_other}; {wait_go}; touch '{end}'",
            start = d.file(&format!("{me}.start")),
            wait_other = sh_wait_for(&d.file(&format!("{other}.start"))),
            wait_go = sh_wait_for(&go),
            end = d.file(&format!("{me}.end")),
        );
        let args = [
            "lock",
            "--shared",
            "/locks/rw",
            "--server",
            &cs,
            "--",
            "sh",
            "-c",
            &script,
        ];
        readers.push(zlock_cmd(&args).spawn().unwrap());
    }
    // Both hold at once: each has seen the other's start marker (from inside the lock).
    until("both readers to start", || async {
        exists(&d.file("r1.start")) && exists(&d.file("r2.start"))
    })
    .await;

    // A writer queues behind them...
    let (e1, e2) = (d.file("r1.end"), d.file("r2.end"));
    let check = format!(
        "if [ -e '{e1}' ] && [ -e '{e2}' ]; then echo after-readers; else echo overlap; fi; \
         touch '{held}'; {wait}",
        held = d.file("w.held"),
        wait = sh_wait_for(&d.file("w.go")),
    );
    let writer = zlock_cmd(&[
        "lock",
        "/locks/rw",
        "--server",
        &cs,
        "--",
        "sh",
        "-c",
        &check,
    ])
    .spawn()
    .unwrap();
    until("the writer to queue", || async {
        children(&c, "/locks/rw").await.len() == 3
    })
    .await;
    // ...and a new reader behind a queued writer does not get in (fair queue).
    let o = zl(&[
        "lock",
        "-s",
        "-n",
        "/locks/rw",
        "--server",
        &cs,
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 1, "stderr {:?}", o.stderr);

    std::fs::write(&go, b"").unwrap();
    for r in readers {
        let o = finish(r).await;
        assert_eq!(o.code, 0, "reader: {:?}", o.stderr);
    }
    // The writer holds now: a reader is excluded.
    until("the writer to hold", || async { exists(&d.file("w.held")) }).await;
    let o = zl(&[
        "lock",
        "-s",
        "-n",
        "/locks/rw",
        "--server",
        &cs,
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 1, "stderr {:?}", o.stderr);

    std::fs::write(d.file("w.go"), b"").unwrap();
    let o = finish(writer).await;
    assert_eq!(o.code, 0, "writer: {:?}", o.stderr);
    assert_eq!(o.stdout.trim(), "after-readers");
    assert!(children(&c, "/locks/rw").await.is_empty());
    c.close().await.unwrap();
}

/// Five `--semaphore 3` commands: three run, the other two queue (their lease nodes
/// exist but they do not start); once released all five finish, and the start/end
/// log never shows more than three at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_runs_at_most_n_at_once() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let d = Scratch::new("sem");
    let log = d.file("log");
    let go = d.file("go");
    let script = format!(
        "echo start >> '{log}'; \
         case $ZLOCK_LOCK_NODE in /pools/p/leases/*) ;; *) exit 8;; esac; \
         [ \"$ZLOCK_FENCING_TOKEN\" -gt 0 ] || exit 8; \
         {wait}; echo end >> '{log}'",
        wait = sh_wait_for(&go),
    );
    let mut runs = Vec::new();
    for _ in 0..5 {
        let args = [
            "lock",
            "--semaphore",
            "3",
            "/pools/p",
            "--server",
            &cs,
            "--",
            "sh",
            "-c",
            &script,
        ];
        runs.push(zlock_cmd(&args).spawn().unwrap());
    }
    let starts = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    until(
        "three commands to start and five leases to queue",
        || async { starts() == 3 && children(&c, "/pools/p/leases").await.len() == 5 },
    )
    .await;
    // Every one of the five has its lease node: the two without a lease are queued.
    assert_eq!(starts(), 3);

    std::fs::write(&go, b"").unwrap();
    for r in runs {
        let o = finish(r).await;
        assert_eq!(o.code, 0, "stderr {:?}", o.stderr);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let (mut now, mut max) = (0i32, 0i32);
    for l in text.lines() {
        now += if l == "start" { 1 } else { -1 };
        max = max.max(now);
    }
    assert_eq!(text.lines().filter(|l| *l == "end").count(), 5, "{text}");
    assert_eq!(max, 3, "{text}");
    assert!(children(&c, "/pools/p/leases").await.is_empty());
    c.close().await.unwrap();
}

/// Runs `script` (which must write its shell's pid to `$PIDFILE`) under
/// `zlock lock --session-timeout 2000 <extra>`, stops `zlock lock` (not the command)
/// with SIGSTOP until the server has expired its session, resumes it, and returns its
/// output and the command's pid.
async fn lose_the_lock(tag: &str, extra: &[&str], script: &str) -> (Out, u32) {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let d = Scratch::new(tag);
    let pidfile = d.file("pid");
    let path = format!("/locks/{tag}");
    let mut args = vec!["lock", "--session-timeout", "2000", "--server", &cs];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[&path, "--", "sh", "-c", script]);
    let mut cmd = zlock_cmd(&args);
    cmd.env("PIDFILE", &pidfile);
    let child = cmd.spawn().unwrap();
    let zpid = child.id().unwrap();
    until("the command's pid", || async {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let cmd_pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(children(&c, &path).await.len(), 1);

    assert!(kill("-STOP", zpid));
    until("the server to expire the session", || async {
        children(&c, &path).await.is_empty()
    })
    .await;
    assert!(kill("-CONT", zpid));
    let o = finish(child).await;
    c.close().await.unwrap();
    (o, cmd_pid)
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_lost_stops_the_command_and_exits_75() {
    let (o, pid) = lose_the_lock("lost", &[], "echo $$ > \"$PIDFILE\"; sleep 300").await;
    assert_eq!(o.code, 75, "stderr {:?}", o.stderr);
    assert!(
        o.stderr.contains("zlock lock: lock /locks/lost lost (")
            && o.stderr.contains("); stopping the command"),
        "{:?}",
        o.stderr
    );
    // SIGTERM was enough: no SIGKILL.
    assert!(!o.stderr.contains("SIGKILL"), "{:?}", o.stderr);
    // The shell is gone, and so is its `sleep`: it held the stderr pipe, which
    // `finish` read to the end.
    assert!(!kill("-0", pid), "the command {pid} still runs");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_lost_kills_a_command_that_ignores_sigterm() {
    let script = "trap '' TERM; echo $$ > \"$PIDFILE\"; while true; do sleep 0.1; done";
    let (o, pid) = lose_the_lock("lostkill", &["--kill-after", "200ms"], script).await;
    assert_eq!(o.code, 75, "stderr {:?}", o.stderr);
    assert!(
        o.stderr.contains("lock /locks/lostkill lost ("),
        "{:?}",
        o.stderr
    );
    assert!(o.stderr.contains("sending SIGKILL"), "{:?}", o.stderr);
    assert!(!kill("-0", pid), "the command {pid} still runs");
}

/// SIGTERM to a `zlock lock` that is waiting: it exits 143 and its queued node is gone
/// by then (the holder's node is the only one left).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_exits_143_and_leaves_no_node() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let d = Scratch::new("waitsig");
    let script = format!(
        "touch '{ready}'; {wait}",
        ready = d.file("ready"),
        wait = sh_wait_for(&d.file("go")),
    );
    let holder = zlock_cmd(&[
        "lock", "/locks/w", "--server", &cs, "--", "sh", "-c", &script,
    ])
    .spawn()
    .unwrap();
    until("the holder to run", || async { exists(&d.file("ready")) }).await;
    let first = children(&c, "/locks/w").await;
    assert_eq!(first.len(), 1);

    let waiter = zlock_cmd(&["lock", "/locks/w", "--server", &cs, "--", "echo", "ran"])
        .spawn()
        .unwrap();
    until("the waiter to queue", || async {
        children(&c, "/locks/w").await.len() == 2
    })
    .await;
    assert!(kill("-TERM", waiter.id().unwrap()));
    let o = finish(waiter).await;
    assert_eq!(o.code, 128 + 15, "stderr {:?}", o.stderr);
    assert_eq!(o.stdout, "");
    assert_eq!(children(&c, "/locks/w").await, first);

    std::fs::write(d.file("go"), b"").unwrap();
    let o = finish(holder).await;
    assert_eq!(o.code, 0, "stderr {:?}", o.stderr);
    assert!(children(&c, "/locks/w").await.is_empty());
    c.close().await.unwrap();
}

#[tokio::test]
async fn command_gets_session_id() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let o = zl(&[
        "lock",
        "/locks/env",
        "--server",
        &cs,
        "--",
        "sh",
        "-c",
        "echo $ZLOCK_SESSION_ID",
    ])
    .await;
    assert_eq!(o.code, 0, "stderr {:?}", o.stderr);
    let id = o.stdout.trim();
    let hex = id.strip_prefix("0x").unwrap_or_else(|| panic!("{id:?}"));
    assert!(
        !hex.is_empty() && hex.chars().all(|ch| ch.is_ascii_hexdigit()),
        "{id:?}"
    );
    assert_ne!(u64::from_str_radix(hex, 16).unwrap(), 0);
}

#[tokio::test]
async fn help_lists_exit_codes_and_usage_errors_exit_2() {
    let o = zl(&["lock", "--help"]).await;
    assert_eq!(o.code, 0);
    for want in [
        "--no-wait",
        "--conflict-exit-code",
        "--shared",
        "--semaphore",
        "--kill-after",
        "Exit codes:",
        "75",
        "128+N",
        "ZLOCK_SESSION_ID",
    ] {
        assert!(o.stdout.contains(want), "{want:?} not in {}", o.stdout);
    }
    for bad in [
        &["lock", "--shared", "--semaphore", "2", "/p", "--", "true"][..],
        &["lock", "--semaphore", "0", "/p", "--", "true"],
        &["lock", "-n", "--timeout", "1s", "/p", "--", "true"],
        &["lock", "/p"],
    ] {
        let o = zl(bad).await;
        assert_eq!(o.code, 2, "{bad:?}: {:?}", o.stderr);
    }
}

/// `--lock-delay`: a holder `zlock lock` killed with `kill -9` (its session expires)
/// keeps the next `zlock lock` waiting for the delay after its node went; the waiter's
/// command records when it ran. The bound checked is half the delay, from when the test
/// saw the node go (which can only be after the expiry). A clean end of the holder's
/// command hands over at once (exit 0 of the waiter long before a 60 s delay).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_holds_back_the_next_holder_after_kill_9() {
    const DELAY: Duration = Duration::from_secs(3);
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    let (c, _ev) = Client::connect(&cs, 10_000).await.unwrap();
    let d = Scratch::new("delay");
    let pidfile = d.file("pid");
    let ran = d.file("ran");
    let mut holder = zlock_cmd(&[
        "lock",
        "--session-timeout",
        "1000",
        "--lock-delay",
        "3s",
        "--server",
        &cs,
        "/locks/delay",
        "--",
        "sh",
        "-c",
        "echo $$ > \"$PIDFILE\"; sleep 300",
    ]);
    holder.env("PIDFILE", &pidfile);
    let holder = holder.spawn().unwrap();
    until("the holder's command", || async {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let cmd_pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let held = children(&c, "/locks/delay").await;
    assert_eq!(held.len(), 1);
    let waiter = zlock_cmd(&[
        "lock",
        "--server",
        &cs,
        "/locks/delay",
        "--",
        "sh",
        "-c",
        &format!("date +%s%N > '{ran}'"),
    ])
    .spawn()
    .unwrap();
    until("the waiter queued", || async {
        children(&c, "/locks/delay").await.len() == 2
    })
    .await;
    assert!(kill("-9", holder.id().unwrap()));
    until("the holder's node gone with its session", || async {
        !children(&c, "/locks/delay").await.contains(&held[0])
    })
    .await;
    let gone = std::time::SystemTime::now();
    let o = finish(waiter).await;
    assert_eq!(o.code, 0, "stderr {:?}", o.stderr);
    let ran_ns: u128 = std::fs::read_to_string(&ran)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone_ns = gone
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let waited = Duration::from_nanos(ran_ns.saturating_sub(gone_ns) as u64);
    assert!(
        waited >= DELAY / 2,
        "the waiter ran {waited:?} after the holder's node went, inside the {DELAY:?} delay"
    );
    // The killed holder's command is still running (kill -9 reaches no one else).
    assert!(kill("-9", cmd_pid));

    // A holder whose command ends releases: the next one runs at once.
    let o = zl(&[
        "lock",
        "--lock-delay",
        "60s",
        "--server",
        &cs,
        "/locks/delay",
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 0, "stderr {:?}", o.stderr);
    let o = tokio::time::timeout(
        Duration::from_secs(30),
        zlock_cmd(&["lock", "--server", &cs, "/locks/delay", "--", "true"]).output(),
    )
    .await
    .expect("a released lock is free at once, whatever its lock-delay")
    .unwrap();
    assert_eq!(Out::from(o).code, 0);
    c.close().await.unwrap();
}
