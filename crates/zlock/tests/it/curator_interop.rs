//! Curator interop: Apache Curator's `InterProcessMutex` (Debian
//! `libcurator-recipes-java`, driven by `compat/curator/CuratorLockCheck.java`) and
//! zlock's `Mutex` contending on one path exclude each other, against an in-process
//! zlock server, against a three-member zlock ensemble (`zlock server` child
//! processes) and against Apache ZooKeeper 3.8.
//!
//! On the ensemble the zlock sessions spread over the members (`target.rs`);
//! Curator and kazoo shuffle the hosts they are given: with every member, they land on
//! any (`increments`, `mixed`: the zlock contenders sit on several members anyway);
//! where one zlock session faces Curator alone, Curator is given the other members
//! only, so the lock crosses members for sure.
//!
//! - `increments`: a Curator process and two zlock sessions each take the lock and do
//!   a read-sleep-write increment of one counter znode; no increment may be lost.
//! - `curator_holds`: while Curator holds, zlock's `try_acquire` and `acquire_timeout`
//!   fail; a queued zlock `acquire` gets the lock when Curator releases.
//! - `zlock_holds`: while zlock holds, Curator's `acquire(timeout)` fails; a queued
//!   Curator acquire gets the lock when zlock releases.
//!
//! - `mixed`: four kinds of contenders on one lock path: zlock's native lock path (on
//!   zlock), zlock's standard recipe, Curator, and kazoo (`compat/kazoo/lock_contender.py`,
//!   with Curator's node names). All increment one counter; the non-Curator ones also
//!   log their node's sequence number while holding. No increment may be lost, and the
//!   logged sequence numbers must rise (grants in queue order: FIFO across kinds).
//!
//! - `curator_and_zlock_over_tls`: the two exclusions above, both sides over TLS to a
//!   zlock `secureClientPort` (ZooKeeper's Java client through Netty).
//!
//! Curator, the JDK and kazoo's venv are peers (`zlock_testkit::require`): missing, the
//! test fails. Java processes are SIGKILLed by pid when their handle drops, so a failing
//! test leaves none behind.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{connect, wait_children, within};
use crate::target;
use crate::target::Target;
use zlock::recipes::Mutex;
use zlock::{Client, CreateMode, Error, ErrorCode};
use zlock_testkit::{require, ChildEnsemble, PeerProcess, TestServer, ZooKeeper, NETTY_JARS};

/// `CuratorLockCheck` compiled into a temporary directory (`None`: Curator or the JDK
/// is missing and missing peers are allowed).
fn compile() -> Option<tempfile::TempDir> {
    zlock_testkit::curator::compile_lock_check()
}

/// A running peer program (`CuratorLockCheck`, or the kazoo contender): the testkit's
/// [`PeerProcess`], with the two programs' constructors.
struct Peer(PeerProcess);

impl std::ops::Deref for Peer {
    type Target = PeerProcess;
    fn deref(&self) -> &PeerProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Peer {
    fn deref_mut(&mut self) -> &mut PeerProcess {
        &mut self.0
    }
}

impl Peer {
    fn java(classes: &Path, args: &[&str]) -> Peer {
        Peer::java_with(classes, &[], args)
    }

    /// `java` with `jvm` flags before the class (system properties), and Netty on the
    /// class path (ZooKeeper's Java client speaks TLS through Netty only).
    fn java_with(classes: &Path, jvm: &[String], args: &[&str]) -> Peer {
        Peer(PeerProcess::spawn(
            zlock_testkit::curator::lock_check_command(classes, jvm, args),
        ))
    }

    /// `compat/kazoo/lock_contender.py` with the venv's python.
    fn kazoo(python: &Path, args: &[&str]) -> Peer {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/kazoo/lock_contender.py");
        let mut cmd = Command::new(python);
        cmd.arg(script).args(args);
        Peer(PeerProcess::spawn(cmd))
    }
}

/// The children of a path after a sync (`target::sync`: on an ensemble, what other
/// members acknowledged is seen).
async fn children(zk: &Client, path: &str) -> Vec<String> {
    target::sync(zk).await;
    common::children(zk, path).await
}

async fn read_counter(zk: &Client, path: &str) -> u64 {
    let (data, _) = zk.get_data(path, false).await.unwrap();
    std::str::from_utf8(&data).unwrap().trim().parse().unwrap()
}

/// Curator (100 increments; 40 on an ensemble) and two zlock sessions (as many each)
/// increment one counter under the lock, all at once: every increment is kept. zlock
/// session `k` is on member `k + 1`; Curator is given every member.
async fn increments(t: &Target, classes: &Path) {
    const LOCK: &str = "/interop/counter-lock";
    const COUNTER: &str = "/interop/counter";
    const SESSIONS: usize = 2;
    // 40 on an ensemble: an increment there is three commits through the leader
    // (lock node, counter, release); 300 took 7 s on a 2-core test machine.
    let each: u64 = if t.is_ensemble() { 40 } else { 100 };
    let admin = connect(&t.hosts(0)).await;
    reset(&admin, COUNTER, b"0").await;
    let n = each.to_string();
    let hosts = t.hosts(0);
    let mut java = Peer::java(classes, &[&hosts, "increment", LOCK, COUNTER, &n]);
    let mut clients = Vec::new();
    for k in 0..SESSIONS {
        clients.push(connect(&t.hosts(k + 1)).await);
    }
    // Start together with Curator, once it is connected.
    java.expect("READY").await;
    let started = Instant::now();
    let busy = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for zk in &clients {
        let (zk, busy, seen) = (zk.clone(), busy.clone(), seen.clone());
        tasks.spawn(async move {
            let lock = Mutex::new(zk.clone(), LOCK);
            for _ in 0..each {
                let g = lock.acquire().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two zlock holders");
                let v = read_counter(&zk, COUNTER).await;
                seen.lock().unwrap().push(v);
                tokio::time::sleep(Duration::from_millis(1)).await;
                zk.set_data(COUNTER, (v + 1).to_string().as_bytes(), -1)
                    .await
                    .unwrap();
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        });
    }
    within("zlock increments", async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await;
    java.expect(&format!("DONE {each}")).await;
    assert_eq!(java.exit_code().await, 0);
    let total = each * (SESSIONS as u64 + 1);
    target::sync(&admin).await;
    let got = read_counter(&admin, COUNTER).await;
    // The values zlock read, in order: a jump means Curator held the lock in between.
    let seen = seen.lock().unwrap().clone();
    let handovers = seen.windows(2).filter(|w| w[1] != w[0] + 1).count();
    eprintln!(
        "increments: counter {got} of {total} (Curator {each}, zlock {SESSIONS} x {each}) \
         in {:?}; Curator held the lock between two zlock holds {handovers} times",
        started.elapsed()
    );
    assert_eq!(
        got, total,
        "lost increments: Curator and zlock did not exclude"
    );
    assert!(handovers > 0, "Curator and zlock never contended: {seen:?}");
    assert!(children(&admin, LOCK).await.is_empty(), "node left");
    for c in clients.into_iter().chain([admin]) {
        c.close().await.unwrap();
    }
}

/// While Curator holds the lock, zlock's try_acquire and acquire_timeout fail; a zlock
/// acquire queued behind Curator gets the lock when Curator releases. zlock is on
/// member 0, Curator on another.
async fn curator_holds(t: &Target, classes: &Path) {
    const LOCK: &str = "/interop/curator-holds";
    let zk = connect(&t.hosts(0)).await;
    let mut java = Peer::java(classes, &[&t.hosts_except(0), "hold", LOCK]);
    java.expect("READY").await;
    java.expect("HOLDING").await;
    let held = children(&zk, LOCK).await;
    assert_eq!(held.len(), 1, "{held:?}");
    let lock = Arc::new(Mutex::new(zk.clone(), LOCK));
    assert!(lock.try_acquire().await.unwrap().is_none(), "try_acquire");
    let r = lock
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(r.is_none(), "acquire_timeout while Curator holds");
    assert_eq!(children(&zk, LOCK).await, held, "zlock left a node");

    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.unwrap() }
    });
    wait_children(&zk, LOCK, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "acquired while Curator holds");
    java.send_line();
    java.expect("RELEASED").await;
    let g = within("zlock after Curator's release", waiter)
        .await
        .unwrap();
    assert_eq!(java.exit_code().await, 0);
    assert_ne!(g.node().rsplit('/').next().unwrap(), held[0]);
    g.release().await.unwrap();
    assert!(children(&zk, LOCK).await.is_empty());
    zk.close().await.unwrap();
}

/// While zlock holds the lock, Curator's acquire(timeout) fails; a Curator acquire
/// queued behind zlock gets the lock when zlock releases. zlock is on member 0,
/// Curator on another.
async fn zlock_holds(t: &Target, classes: &Path) {
    const LOCK: &str = "/interop/zlock-holds";
    let zk = connect(&t.hosts(0)).await;
    let g = Mutex::new(zk.clone(), LOCK).acquire().await.unwrap();
    let others = t.hosts_except(0);

    let mut java = Peer::java(classes, &[&others, "try", LOCK, "1000"]);
    java.expect("READY").await;
    java.expect("NOT_ACQUIRED").await;
    assert_eq!(java.exit_code().await, 3);
    assert_eq!(children(&zk, LOCK).await.len(), 1, "Curator left a node");

    let mut java = Peer::java(classes, &[&others, "try", LOCK, "30000"]);
    java.expect("READY").await;
    wait_children(&zk, LOCK, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(java.running(), "Curator ended early");
    g.release().await.unwrap();
    java.expect("ACQUIRED").await;
    assert_eq!(java.exit_code().await, 0);
    wait_children(&zk, LOCK, 0).await;
    zk.close().await.unwrap();
}

async fn reset(zk: &Client, path: &str, data: &[u8]) {
    match zk.create(path, data, CreateMode::Persistent).await {
        Ok(_) => {}
        Err(Error::Server(ErrorCode::NodeExists)) => {
            zk.set_data(path, data, -1).await.unwrap();
        }
        Err(e) => panic!("{e}"),
    }
}

/// Native zlock, recipe zlock, Curator and kazoo contending on one path. zlock
/// contender `k` is on member `k % n`; Curator and kazoo are given every member.
async fn mixed(t: &Target, classes: &Path, native: bool) {
    const LOCK: &str = "/interop/mixed";
    const COUNTER: &str = "/interop/mixed-counter";
    const LOG: &str = "/interop/mixed-log";
    const EACH: u64 = 15;
    let admin = connect(&t.hosts(0)).await;
    reset(&admin, COUNTER, b"0").await;
    reset(&admin, LOG, b"").await;
    let n = EACH.to_string();
    let hosts = t.hosts(0);
    let mut peers = vec![Peer::java(
        classes,
        &[&hosts, "increment", LOCK, COUNTER, &n],
    )];
    // The venv's python with kazoo (`ZLOCK_VENV`, else `<repo>/.venv`).
    if let Some(py) = require(zlock_testkit::Peer::Kazoo) {
        peers.push(Peer::kazoo(&py, &[&hosts, LOCK, COUNTER, LOG, &n]));
    }
    let kinds = [
        (zlock::LockPath::Auto, "native"),
        (zlock::LockPath::Auto, "native"),
        (zlock::LockPath::Recipe, "recipe"),
        (zlock::LockPath::Recipe, "recipe"),
    ];
    let mut clients = Vec::new();
    for (k, (path, kind)) in kinds.into_iter().enumerate() {
        let c = connect(&t.hosts(k)).await.with_lock_path(path);
        assert_eq!(c.uses_native_locks(), native && kind == "native");
        clients.push((c, if native { kind } else { "recipe" }));
    }
    for p in &mut peers {
        p.expect("READY").await;
    }
    let busy = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for (zk, kind) in &clients {
        let (zk, kind, busy) = (zk.clone(), *kind, busy.clone());
        tasks.spawn(async move {
            let lock = Mutex::new(zk.clone(), LOCK);
            for _ in 0..EACH {
                let g = lock.acquire().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two zlock holders");
                let v = read_counter(&zk, COUNTER).await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                zk.set_data(COUNTER, (v + 1).to_string().as_bytes(), -1)
                    .await
                    .unwrap();
                let seq: i64 = g.node()[g.node().len() - 10..].parse().unwrap();
                let (mut log, _) = zk.get_data(LOG, false).await.unwrap();
                log.extend_from_slice(format!("{kind}:{seq},").as_bytes());
                zk.set_data(LOG, &log, -1).await.unwrap();
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        });
    }
    within("zlock contenders", async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await;
    for p in &mut peers {
        p.expect(&format!("DONE {EACH}")).await;
        assert_eq!(p.exit_code().await, 0);
    }
    let total = EACH * (clients.len() + peers.len()) as u64;
    target::sync(&admin).await;
    assert_eq!(
        read_counter(&admin, COUNTER).await,
        total,
        "lost increments: the contenders did not exclude each other"
    );
    let (log, _) = admin.get_data(LOG, false).await.unwrap();
    let log = String::from_utf8(log).unwrap();
    let holds: Vec<(&str, i64)> = log
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (who, seq) = e.split_once(':').unwrap();
            (who, seq.parse().unwrap())
        })
        .collect();
    let logged = EACH * (clients.len() + peers.len() - 1) as u64;
    assert_eq!(holds.len() as u64, logged, "{log}");
    assert!(
        holds.windows(2).all(|w| w[0].1 < w[1].1),
        "grants out of queue order: {log}"
    );
    let mut by_kind: Vec<(&str, usize)> = Vec::new();
    for (who, _) in &holds {
        match by_kind.iter_mut().find(|(k, _)| k == who) {
            Some((_, n)) => *n += 1,
            None => by_kind.push((who, 1)),
        }
    }
    eprintln!(
        "mixed: counter {total} of {total} (Curator {EACH} + {by_kind:?}); \
         {} holds logged in queue order",
        holds.len()
    );
    assert!(children(&admin, LOCK).await.is_empty(), "node left");
    for (c, _) in clients {
        c.close().await.unwrap();
    }
    admin.close().await.unwrap();
}

async fn all(t: &Target, server: &str) {
    let Some(classes) = compile() else {
        return;
    };
    // A persistent parent, so that no lock path's parent container is reaped midway.
    let admin = connect(&t.hosts(0)).await;
    admin.ensure_path("/interop").await.unwrap();
    admin.close().await.unwrap();
    let started = Instant::now();
    increments(t, classes.path()).await;
    eprintln!("[{server}] increments passed in {:?}", started.elapsed());
    let started = Instant::now();
    curator_holds(t, classes.path()).await;
    eprintln!("[{server}] curator_holds passed in {:?}", started.elapsed());
    let started = Instant::now();
    zlock_holds(t, classes.path()).await;
    eprintln!("[{server}] zlock_holds passed in {:?}", started.elapsed());
    let started = Instant::now();
    mixed(t, classes.path(), server.starts_with("zlock")).await;
    eprintln!("[{server}] mixed passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zlock_curator_interop() {
    let s = TestServer::start().await.unwrap();
    all(&Target::parse(&s.connect_string()), "zlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_curator_interop() {
    let e = ChildEnsemble::start().await.unwrap();
    all(&Target::parse(&e.connect_string()), "zlock ensemble").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_curator_interop() {
    let Some(_) = require(zlock_testkit::Peer::ZooKeeper) else {
        return;
    };
    let zk = ZooKeeper::start().unwrap();
    all(&Target::parse(&zk.connect_string()), "ZooKeeper 3.8").await;
}

/// Curator's `InterProcessMutex` over TLS (ZooKeeper's Java client with
/// `zookeeper.client.secure`, Netty and PEM stores) and zlock's `Mutex` over TLS, on a
/// zlock `secureClientPort` with `ssl.clientAuth=need`: while Curator holds, zlock
/// cannot acquire and a queued zlock acquire gets the lock on Curator's release; while
/// zlock holds, Curator's acquire(timeout) fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_zlock_over_tls() {
    const LOCK: &str = "/interop/tls";
    let Some(classes) = compile() else {
        return;
    };
    for jar in NETTY_JARS {
        assert!(
            Path::new(jar).is_file(),
            "{jar} is missing: ZooKeeper's Java client needs Netty for TLS \
             (apt-get install libnetty-java)"
        );
    }
    let pki = zlock_testkit::pki::Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    let secure = server.secure.to_string();
    // ZooKeeper's PEM key store: the chain, then the key.
    let bob_pem = pki.path("bob.pem");
    let chain_and_key = std::fs::read_to_string(pki.path("bob.crt")).unwrap()
        + &std::fs::read_to_string(pki.path("bob.key")).unwrap();
    std::fs::write(&bob_pem, chain_and_key).unwrap();
    let jvm = [
        "-Dzookeeper.client.secure=true".to_owned(),
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty".to_owned(),
        format!("-Dzookeeper.ssl.keyStore.location={}", bob_pem.display()),
        format!(
            "-Dzookeeper.ssl.trustStore.location={}",
            pki.path("ca.pem").display()
        ),
    ];
    let zk = crate::tls::connect_tls(&secure, crate::tls::tls_as(&pki, "alice"))
        .await
        .unwrap();
    zk.ensure_path("/interop").await.unwrap();

    let mut java = Peer::java_with(classes.path(), &jvm, &[&secure, "hold", LOCK]);
    java.expect("READY").await;
    java.expect("HOLDING").await;
    let lock = Arc::new(Mutex::new(zk.clone(), LOCK));
    assert!(lock.try_acquire().await.unwrap().is_none(), "Curator holds");
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.unwrap() }
    });
    wait_children(&zk, LOCK, 2).await;
    assert!(!waiter.is_finished(), "acquired while Curator holds");
    java.send_line();
    java.expect("RELEASED").await;
    let g = within("zlock after Curator's release", waiter)
        .await
        .unwrap();
    assert_eq!(java.exit_code().await, 0);

    let mut java = Peer::java_with(classes.path(), &jvm, &[&secure, "try", LOCK, "1000"]);
    java.expect("READY").await;
    java.expect("NOT_ACQUIRED").await;
    assert_eq!(java.exit_code().await, 3);
    g.release().await.unwrap();
    let mut java = Peer::java_with(classes.path(), &jvm, &[&secure, "try", LOCK, "30000"]);
    java.expect("READY").await;
    java.expect("ACQUIRED").await;
    assert_eq!(java.exit_code().await, 0);
    wait_children(&zk, LOCK, 0).await;
    zk.close().await.unwrap();
}
