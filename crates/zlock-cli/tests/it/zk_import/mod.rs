//! `zlock import --from-zookeeper` against files Apache ZooKeeper 3.8 wrote itself: a
//! seeded workload with a small `snapCount` (several snapshots, a log after the last),
//! ZooKeeper killed, the import, zlock started on the result, every node compared
//! (data with null kept apart from empty, ACLs, every Stat field). Then the damage
//! cases on copies of the same files: a torn last log, a newest snapshot whose
//! checksum fails, a damaged entry in the middle of a log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zlock::Client;
use zlock_proto::jute::{Reader, Record};
use zlock_proto::records::*;
use zlock_testkit::{copy_dir, free_port, wait_for_port, ZooKeeper};
use zlock_testkit::{require, Peer};

use crate::common::{run, zlock_cmd, Scratch, RUN_BOUND};

const SEED: u64 = 0x5eed_2027;
const STEPS: usize = 240;
/// Long enough that the workload's ephemerals outlive the comparison on zlock, which
/// gives each imported session one full timeout from its start.
const SESSION_MS: i32 = 30_000;
/// ZooKeeper's files: a snapshot every 5-10 transactions, small log preallocation (the
/// zero padding is still there, 256 KiB of it).
const ZK_CFG: &str = "snapCount=10\npreAllocSize=256\n";
const USER: &[u8] = b"user:pw";
/// `base64(sha1("user:pw"))`: the digest ACL id of [`USER`].
const USER_DIGEST: &str = "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=";
/// One request, or one connection attempt.
const BOUND: Duration = Duration::from_secs(10);
/// Connection attempts to a server that has just started (a JVM on a busy machine).
const CONNECT_BOUND: Duration = Duration::from_secs(60);

/// What a reader sees of one node: data (None = null), Stat, ACL; or an error code.
type View = BTreeMap<String, String>;

mod workload;

use workload::{call, connect, create, differences, read_all, workload};

/// `zlock import`, bounded.
async fn import(zk_data: &Path, target: &Path) -> crate::common::Out {
    let cmd = zlock_cmd(&[
        "import",
        "--from-zookeeper",
        zk_data.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    run(cmd, "zlock import", RUN_BOUND).await
}

/// `zlock server` on `data_dir` (zlock's own defaults, so session timeouts are as
/// ZooKeeper's), listening on a free port: the process and its address.
fn serve(data_dir: &Path) -> (tokio::process::Child, String) {
    let port = free_port().to_string();
    let server = zlock_cmd(&[
        "server",
        "--port",
        &port,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ])
    .stderr(std::process::Stdio::inherit())
    .spawn()
    .unwrap();
    let addr = format!("127.0.0.1:{port}");
    wait_for_port(addr.parse().unwrap(), Duration::from_secs(60)).unwrap();
    (server, addr)
}

/// zlock on `data_dir`, read whole, stopped.
async fn read_zlock(data_dir: &Path) -> View {
    let (mut server, addr) = serve(data_dir);
    let c = connect(&addr).await;
    let view = read_all(&c).await;
    let _ = c.close().await;
    server.kill().await.unwrap();
    view
}

/// ZooKeeper's own recovery of `data_dir` (a copy: ZooKeeper writes into it), read whole.
async fn read_zookeeper_on(data_dir: &Path) -> View {
    let mut zk = ZooKeeper::start_on(Some(data_dir), ZK_CFG).unwrap();
    let c = connect(&zk.connect_string()).await;
    let view = read_all(&c).await;
    zk.stop();
    view
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(i64, PathBuf)> = std::fs::read_dir(dir.join("version-2"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_str()?.to_owned();
            let hex = name.strip_prefix(prefix)?.strip_prefix('.')?;
            Some((i64::from_str_radix(hex, 16).ok()?, p))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// The entries of a ZooKeeper log: (offset, length of the entry body, zxid).
fn log_entries(bytes: &[u8]) -> Vec<(usize, usize, i64)> {
    let mut out = Vec::new();
    let mut at = 16;
    while at + 12 <= bytes.len() {
        let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        if len <= 0 || at + 12 + len as usize >= bytes.len() {
            break;
        }
        let body = &bytes[at + 12..at + 12 + len as usize];
        let zxid = i64::from_be_bytes(body[12..20].try_into().unwrap());
        out.push((at, len as usize, zxid));
        at += 12 + len as usize + 1;
    }
    out
}

fn snapshot_of(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(dir, "snapshot")
        .into_iter()
        .chain(files(dir, "log"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_from_zookeeper() {
    if require(Peer::ZooKeeper).is_none() {
        return;
    }
    let scratch = Scratch::new("zk-import");
    let mut zk = ZooKeeper::start_on(None, ZK_CFG).unwrap();
    let a = workload(&zk.connect_string()).await;
    let live = read_all(&a).await;
    let (session, passwd) = (a.session_id(), a.session_password().to_vec());
    zk.stop();
    drop(a);
    let zk_dir = zk.data_dir.clone();
    let snaps = files(&zk_dir, "snapshot");
    assert!(
        snaps.len() >= 3,
        "the workload should make several snapshots: {snaps:?}"
    );
    assert!(
        live.keys().any(|p| p.contains("/e")) && live.keys().any(|p| p.contains("/ttl")),
        "the workload should leave ephemeral and TTL nodes"
    );
    let before = snapshot_of(&zk_dir);

    // 1. The whole state, through zlock.
    let target = scratch.path().join("zl");
    let out = import(&zk_dir, &target).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("{} nodes", live.len())),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("last zxid 0x"), "{}", out.stderr);
    assert!(snapshot_of(&zk_dir) == before, "ZooKeeper's files changed");
    let got = read_zlock(&target).await;
    let diffs = differences(&live, &got);
    assert!(
        diffs.is_empty(),
        "{} differences (seed {SEED:#x}):\n{}",
        diffs.len(),
        diffs.join("\n")
    );

    // The live session resumes on zlock with the password ZooKeeper gave it.
    let (mut server, addr) = serve(&target);
    let resumed = tokio::time::timeout(BOUND, Client::resume(&addr, SESSION_MS, session, &passwd))
        .await
        .expect("resume in time");
    let (c, _events) = resumed.expect("the imported session resumes with ZooKeeper's password");
    assert_eq!(c.session_id(), session);
    // The next sequential name under a parent is the one ZooKeeper would have given:
    // its count of children ever created, (cversion + numChildren) / 2 of its Stat.
    let (err, body) = call(&c, create("/t/d1/next-", None, Acl::open_unsafe(), 2)).await;
    assert_eq!(err, 0);
    let name = CreateResponse::decode(&mut Reader::new(&body))
        .unwrap()
        .path;
    let stat = live["/t/d1"].split("stat=").nth(1).unwrap();
    let field = |k: &str| -> i32 {
        let v = stat.split(&format!("{k}: ")).nth(1).unwrap();
        v.split(|ch: char| !ch.is_ascii_digit() && ch != '-')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let created = (field("cversion") + field("num_children")) / 2;
    assert_eq!(name, format!("/t/d1/next-{created:010}"));
    let _ = c.close().await;
    server.kill().await.unwrap();

    // 2. The target now holds data: a second import refuses it.
    let out = import(&zk_dir, &target).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("already holds data"), "{}", out.stderr);

    // 3. The newest snapshot's checksum fails: the one before it, and the logs.
    let bad_snap = scratch.path().join("bad-snap");
    copy_dir(&zk_dir, &bad_snap);
    let newest = files(&bad_snap, "snapshot").pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let at = bytes
        .windows(8)
        .position(|w| w == b"payload-")
        .expect("a data byte to damage");
    bytes[at + 3] ^= 0x20;
    std::fs::write(&newest, bytes).unwrap();
    let target = scratch.path().join("zl-bad-snap");
    let out = import(&bad_snap, &target).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("warning: skipping snapshot"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("checksum mismatch"), "{}", out.stderr);
    let diffs = differences(&live, &read_zlock(&target).await);
    assert!(diffs.is_empty(), "after the fallback: {}", diffs.join("\n"));

    // 3b. A gzip-compressed newest snapshot (snapshot.compression.method=gz) reads the
    // same; a snappy one is refused, saying what to do.
    let gz = scratch.path().join("gz");
    copy_dir(&zk_dir, &gz);
    let newest = files(&gz, "snapshot").pop().unwrap();
    let status = std::process::Command::new("gzip")
        .arg(&newest)
        .status()
        .unwrap();
    assert!(status.success());
    let target = scratch.path().join("zl-gz");
    let out = import(&gz, &target).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    let diffs = differences(&live, &read_zlock(&target).await);
    assert!(
        diffs.is_empty(),
        "from a gzip snapshot: {}",
        diffs.join("\n")
    );
    let snappy = scratch.path().join("snappy");
    copy_dir(&zk_dir, &snappy);
    let newest = files(&snappy, "snapshot").pop().unwrap();
    std::fs::rename(
        &newest,
        newest.with_extension(format!(
            "{}.snappy",
            newest.extension().unwrap().to_str().unwrap()
        )),
    )
    .unwrap();
    let target = scratch.path().join("zl-snappy");
    let out = import(&snappy, &target).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("compressed with snappy"),
        "{}",
        out.stderr
    );
    assert!(!target.exists());

    // 3c. The logs kept apart from the snapshots (ZooKeeper's dataLogDir).
    let split = scratch.path().join("split");
    let split_logs = scratch.path().join("split-logs");
    copy_dir(&zk_dir, &split);
    std::fs::create_dir_all(split_logs.join("version-2")).unwrap();
    for log in files(&split, "log") {
        let to = split_logs.join("version-2").join(log.file_name().unwrap());
        std::fs::rename(&log, to).unwrap();
    }
    let target = scratch.path().join("zl-split");
    let mut cmd = zlock_cmd(&["import", "--from-zookeeper", split.to_str().unwrap()]);
    cmd.args(["--data-log-dir", split_logs.to_str().unwrap()])
        .args(["--data-dir", target.to_str().unwrap()]);
    let out = run(cmd, "zlock import --data-log-dir", RUN_BOUND).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let diffs = differences(&live, &read_zlock(&target).await);
    assert!(
        diffs.is_empty(),
        "with --data-log-dir: {}",
        diffs.join("\n")
    );

    // 4. The last log torn inside its last entry: the entries before it are imported,
    // exactly what ZooKeeper itself recovers from the same files.
    let torn = scratch.path().join("torn");
    copy_dir(&zk_dir, &torn);
    let last_log = files(&torn, "log").pop().unwrap();
    let bytes = std::fs::read(&last_log).unwrap();
    let entries = log_entries(&bytes);
    assert!(!entries.is_empty(), "the last log holds entries");
    let (at, len, _) = *entries.last().unwrap();
    std::fs::write(&last_log, &bytes[..at + 12 + len / 2]).unwrap();
    let zk_copy = scratch.path().join("torn-for-zookeeper");
    copy_dir(&torn, &zk_copy);
    let target = scratch.path().join("zl-torn");
    let out = import(&torn, &target).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("torn entry at byte"), "{}", out.stderr);
    let zookeeper = read_zookeeper_on(&zk_copy).await;
    let diffs = differences(&zookeeper, &read_zlock(&target).await);
    assert!(diffs.is_empty(), "after the tear: {}", diffs.join("\n"));

    // 5. A damaged entry before the end of a log: an error naming the file and the
    // entry's offset, and no directory.
    let corrupt = scratch.path().join("corrupt");
    copy_dir(&zk_dir, &corrupt);
    // Only the first snapshot left, so that every log is read (past the newest
    // snapshot there may be too few entries for one in the middle).
    for snap in files(&corrupt, "snapshot").into_iter().skip(1) {
        std::fs::remove_file(snap).unwrap();
    }
    let (log, entry) = files(&corrupt, "log")
        .into_iter()
        .rev()
        .find_map(|p| {
            let e = log_entries(&std::fs::read(&p).unwrap());
            (e.len() >= 3).then(|| (p, e[1]))
        })
        .expect("a log of three entries");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[entry.0 + 12 + entry.1 / 2] ^= 0x01;
    std::fs::write(&log, bytes).unwrap();
    let target = scratch.path().join("zl-corrupt");
    let out = import(&corrupt, &target).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let name = log.file_name().unwrap().to_str().unwrap();
    assert!(out.stderr.contains(name), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("at byte {}", entry.0)),
        "{}",
        out.stderr
    );
    assert!(!target.exists(), "a failed import leaves no directory");
    let leftovers: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".import-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary directories left: {leftovers:?}"
    );
}
