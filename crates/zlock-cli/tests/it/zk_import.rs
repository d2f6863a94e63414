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
use zlock_proto::{OpCode, Request};
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

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn acl_choice(rng: &mut Rng) -> Vec<Acl> {
    let all = perms::ALL;
    match rng.below(4) {
        0 => Acl::open_unsafe(),
        1 => vec![Acl {
            perms: all,
            id: Id::new("digest", USER_DIGEST),
        }],
        2 => vec![Acl {
            perms: all,
            id: Id::new("ip", "127.0.0.1"),
        }],
        _ => vec![
            Acl {
                perms: perms::READ,
                id: Id::new("world", "anyone"),
            },
            Acl {
                perms: all,
                id: Id::new("digest", USER_DIGEST),
            },
        ],
    }
}

fn data_choice(rng: &mut Rng, i: usize) -> Option<Vec<u8>> {
    match rng.below(5) {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some(format!("payload-{i}-{}", rng.next() % 1000).into_bytes()),
    }
}

/// A session on `addr`, retried while the server, its port open, is still loading its
/// data (it closes connections until then, or leaves them unanswered); each attempt
/// bounded by [`BOUND`], all of them by [`CONNECT_BOUND`].
async fn connect(addr: &str) -> Client {
    let deadline = tokio::time::Instant::now() + CONNECT_BOUND;
    loop {
        match tokio::time::timeout(BOUND, Client::connect(addr, SESSION_MS)).await {
            Ok(Ok((c, _events))) => {
                c.add_auth("digest", USER).await.unwrap();
                return c;
            }
            Ok(Err(e)) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect to {addr}: {e}; again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Err(e)) => panic!("connect to {addr}: {e}"),
            Err(_) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect to {addr}: no session in {BOUND:?}; again");
            }
            Err(_) => panic!("connect to {addr}: no session in {CONNECT_BOUND:?}"),
        }
    }
}

/// Sends `req`, bounded; the reply's error code (0: ok) and body.
async fn call(c: &Client, req: Request) -> (i32, Vec<u8>) {
    match tokio::time::timeout(BOUND, c.send(&req)).await {
        Ok(Ok((h, body))) => (h.err, body),
        Ok(Err(e)) => panic!("{req:?}: {e}"),
        Err(_) => panic!("{req:?} got no answer in {BOUND:?}"),
    }
}

fn create(path: &str, data: Option<Vec<u8>>, acl: Vec<Acl>, flags: i32) -> Request {
    Request::Create(
        OpCode::Create,
        CreateRequest {
            path: path.into(),
            data,
            acl,
            flags,
        },
    )
}

/// Drives ZooKeeper through the seeded mix; returns the long-lived session's client.
async fn workload(addr: &str) -> Client {
    let a = connect(addr).await;
    let mut b = connect(addr).await;
    let mut rng = Rng(SEED);
    let mut known: Vec<String> = Vec::new();
    for d in ["/t", "/t/d1", "/t/d2"] {
        call(&a, create(d, Some(b"dir".to_vec()), Acl::open_unsafe(), 0)).await;
    }
    let dirs = ["/t", "/t/d1", "/t/d2"];
    for i in 0..STEPS {
        let dir = dirs[rng.below(dirs.len())];
        let r = rng.below(100);
        if r < 25 {
            let seq = rng.below(3) == 0;
            let path = if seq {
                format!("{dir}/s-")
            } else {
                format!("{dir}/n{i}")
            };
            let req = create(
                &path,
                data_choice(&mut rng, i),
                acl_choice(&mut rng),
                if seq { 2 } else { 0 },
            );
            if let (0, body) = call(&a, req).await {
                known.push(
                    CreateResponse::decode(&mut Reader::new(&body))
                        .map(|r| r.path)
                        .unwrap(),
                );
            }
        } else if r < 35 {
            let owner = if rng.below(2) == 0 { &a } else { &b };
            let flags = if rng.below(2) == 0 { 1 } else { 3 };
            let req = create(
                &format!("{dir}/e{i}-"),
                data_choice(&mut rng, i),
                Acl::open_unsafe(),
                flags,
            );
            call(owner, req).await;
        } else if r < 40 {
            let req = Request::CreateTtl(CreateTtlRequest {
                path: format!("{dir}/ttl{i}-"),
                data: data_choice(&mut rng, i),
                acl: acl_choice(&mut rng),
                flags: if rng.below(2) == 0 { 5 } else { 6 },
                ttl: 3_600_000,
            });
            if let (0, body) = call(&a, req).await {
                known.push(
                    CreateResponse::decode(&mut Reader::new(&body))
                        .map(|r| r.path)
                        .unwrap(),
                );
            }
        } else if r < 43 {
            // A container keeps a child for good: ZooKeeper would delete an emptied one
            // while the test reads it.
            let path = format!("/t/c{i}");
            let req = Request::Create(
                OpCode::CreateContainer,
                CreateRequest {
                    path: path.clone(),
                    data: data_choice(&mut rng, i),
                    acl: Acl::open_unsafe(),
                    flags: 4,
                },
            );
            call(&a, req).await;
            call(
                &a,
                create(&format!("{path}/keep"), None, Acl::open_unsafe(), 0),
            )
            .await;
        } else if r < 60 && !known.is_empty() {
            let path = known[rng.below(known.len())].clone();
            let version = match rng.below(3) {
                0 => -1,
                1 => 0,
                _ => 7,
            };
            let req = Request::SetData(SetDataRequest {
                path,
                data: data_choice(&mut rng, i),
                version,
            });
            call(&a, req).await;
        } else if r < 72 && !known.is_empty() {
            let path = known.swap_remove(rng.below(known.len()));
            call(&a, Request::Delete(DeleteRequest { path, version: -1 })).await;
        } else if r < 80 && !known.is_empty() {
            let path = known[rng.below(known.len())].clone();
            let req = Request::SetAcl(SetAclRequest {
                path,
                acl: acl_choice(&mut rng),
                version: -1,
            });
            call(&a, req).await;
        } else if r < 95 {
            let path = format!("{dir}/m{i}");
            let mut ops = vec![
                MultiOp::Create(
                    OpCode::Create,
                    CreateRequest {
                        path: path.clone(),
                        data: data_choice(&mut rng, i),
                        acl: Acl::open_unsafe(),
                        flags: 0,
                    },
                ),
                MultiOp::SetData(SetDataRequest {
                    path: path.clone(),
                    data: data_choice(&mut rng, i),
                    version: 0,
                }),
            ];
            if rng.below(3) == 0 {
                // Fails the whole multi (an ErrorTxn in ZooKeeper's log).
                ops.push(MultiOp::Check(CheckVersionRequest {
                    path: "/t".into(),
                    version: 99,
                }));
            } else if let Some(victim) = known.pop() {
                ops.push(MultiOp::Delete(DeleteRequest {
                    path: victim,
                    version: -1,
                }));
            }
            if let (0, _) = call(&a, Request::Multi(ops)).await {
                known.push(path);
            }
        } else {
            // The second session ends (its ephemerals go) and another begins.
            b.close().await.unwrap();
            b = connect(addr).await;
        }
    }
    a
}

/// Every node as `c` reads it, walking from `/`.
async fn read_all(c: &Client) -> View {
    let mut view = View::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        let (err, body) = call(
            c,
            Request::GetData(PathWatchRequest {
                path: p.clone(),
                watch: false,
            }),
        )
        .await;
        let data = match err {
            0 => {
                let r = GetDataResponse::decode(&mut Reader::new(&body)).unwrap();
                format!("data={:?} stat={:?}", r.data, r.stat)
            }
            e => format!("getData error {e}"),
        };
        let (err, body) = call(c, Request::GetAcl(PathRequest { path: p.clone() })).await;
        let acl = match err {
            0 => format!(
                "acl={:?}",
                GetAclResponse::decode(&mut Reader::new(&body)).unwrap().acl
            ),
            e => format!("getACL error {e}"),
        };
        let (err, body) = call(
            c,
            Request::GetChildren(PathWatchRequest {
                path: p.clone(),
                watch: false,
            }),
        )
        .await;
        if err == 0 {
            let kids = GetChildrenResponse::decode(&mut Reader::new(&body))
                .unwrap()
                .children;
            for k in kids {
                stack.push(if p == "/" {
                    format!("/{k}")
                } else {
                    format!("{p}/{k}")
                });
            }
        }
        view.insert(p, format!("{data} {acl}"));
    }
    view
}

/// The paths on which two views differ, each with both sides.
fn differences(want: &View, got: &View) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            Some(g) if g == w => {}
            g => out.push(format!("{p}:\n  zookeeper: {w}\n  zlock:     {g:?}")),
        }
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        out.push(format!("{p}: only on zlock"));
    }
    out
}

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

/// zlock on `data_dir`, read whole, stopped.
async fn read_zlock(data_dir: &Path) -> View {
    let port = free_port().to_string();
    let mut server = zlock_cmd(&[
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
    let port = free_port().to_string();
    let mut server = zlock_cmd(&[
        "server",
        "--port",
        &port,
        "--data-dir",
        target.to_str().unwrap(),
    ])
    .stderr(std::process::Stdio::inherit())
    .spawn()
    .unwrap();
    let addr = format!("127.0.0.1:{port}");
    wait_for_port(addr.parse().unwrap(), Duration::from_secs(60)).unwrap();
    let resumed = tokio::time::timeout(BOUND, Client::resume(&addr, SESSION_MS, session, &passwd))
        .await
        .expect("resume in time");
    let (c, _events) = resumed.expect("the imported session resumes with ZooKeeper's password");
    assert_eq!(c.session_id(), session);
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
