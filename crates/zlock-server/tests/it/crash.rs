//! Durability under `kill -9`, torn and corrupt logs, and snapshot recovery, with the
//! real `zlock` binary as a child process.
//!
//! - [`kill9_rounds_wal_only`] / [`kill9_rounds_with_snapshots`]: several sessions write
//!   concurrently (pipelined creates, setData of shared counters, deletes). A write is
//!   recorded as acknowledged only when its reply arrives. At a seeded random moment the
//!   server gets SIGKILL, is restarted on the same data directory, and the tree under
//!   `/crash` is checked against a model, path by path: every acknowledged write is there,
//!   and writes still in flight at the kill are either there or not, nothing else.
//!   Set `ZLOCK_CRASH_SEED` to replay a seed.
//! - [`torn_last_record_is_cut_and_earlier_writes_survive`]: a clean stop, the newest log
//!   segment cut by a few bytes; the server starts and everything before the cut record
//!   is there.
//! - [`corrupt_middle_record_stops_startup`]: one flipped byte in an early record; startup
//!   fails with a message naming the file and the offset, and leaves the file alone.
//! - [`snapshot_then_log_recovery_after_kill9`]: `snapCount=50` from a config file, 500+
//!   nodes, SIGKILL, restart: all there, and a snapshot file exists.
//!
//! These tests run the `zlock` binary: `zlock_testkit::zlock_bin` builds it for this
//! test process (or takes `ZLOCK_BIN=/path/to/zlock`); a failed build fails them.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::rawclient::{
    create_req, delete_req, get_data_req, set_data_req, RawClient, Reply, STUCK,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zlock_proto::records::StatResponse;
use zlock_proto::Request;
use zlock_testkit::ChildServer;

// ---------------------------------------------------------------------------------------
// Binary and process helpers

/// The zlock binary, or a failure that says why there is none.
fn zlock_binary() -> PathBuf {
    zlock_testkit::zlock_bin().unwrap_or_else(|e| panic!("the zlock binary: {e:#}"))
}

fn start_child(dir: &Path, extra: &[&str]) -> ChildServer {
    zlock_binary();
    ChildServer::start(dir, extra).expect("zlock child server starts")
}

fn restart(server: &mut ChildServer) {
    server
        .restart()
        .expect("zlock restarts on the same data dir");
}

async fn connect(addr: SocketAddr) -> RawClient {
    RawClient::connect(addr).await.expect("session on zlock")
}

fn wal_segments(data_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir.join("wal"))
        .expect("wal dir exists")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("log.") && n.len() == 24)
        })
        .collect();
    v.sort();
    v
}

fn snapshot_files(data_dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(data_dir.join("snapshots")) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snapshot.") && !n.ends_with(".tmp"))
        })
        .collect();
    v.sort();
    v
}

/// One WAL record as laid out in the zlock-store crate doc: `len u32 | crc u32 |
/// index u64 | payload`, little-endian, after a 24-byte segment header. The newest
/// segment may end in zeros after its last record (preallocated space).
#[derive(Debug)]
struct WalRecord {
    offset: usize,
    index: u64,
    payload: Vec<u8>,
}

const SEGMENT_HEADER: usize = 24;
const RECORD_HEADER: usize = 16;

fn parse_segment(bytes: &[u8]) -> Vec<WalRecord> {
    assert_eq!(&bytes[..8], b"ZLOCKWAL", "segment magic");
    let mut out = Vec::new();
    let mut off = SEGMENT_HEADER;
    while off + RECORD_HEADER <= bytes.len() && bytes[off..].iter().any(|&b| b != 0) {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        let index = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap());
        let end = off + RECORD_HEADER + len;
        if end > bytes.len() {
            break;
        }
        out.push(WalRecord {
            offset: off,
            index,
            payload: bytes[off + RECORD_HEADER..end].to_vec(),
        });
        off = end;
    }
    assert!(
        bytes[off..].iter().all(|&b| b == 0),
        "segment parses to its end, or to zeros"
    );
    out
}

/// Offset just past the last record of a parsed segment.
fn records_end(records: &[WalRecord]) -> usize {
    records.last().map_or(SEGMENT_HEADER, |r| {
        r.offset + RECORD_HEADER + r.payload.len()
    })
}

/// The path a logged Txn creates, if it is a create.
fn created_path(payload: &[u8]) -> Option<String> {
    match zlock_core::Txn::decode(payload).ok()? {
        zlock_core::Txn {
            body:
                zlock_core::TxnBody::Request {
                    request: Request::Create(_, c),
                    ..
                },
            ..
        } => Some(c.path),
        _ => None,
    }
}

/// Creates `paths` with pipelining (up to `window` requests in flight); panics on any
/// failure.
async fn create_all(c: &RawClient, paths: &[String], window: usize) {
    for chunk in paths.chunks(window) {
        let mut pending = Vec::new();
        for p in chunk {
            pending.push((p, c.send(&create_req(p, p.as_bytes())).await.unwrap()));
        }
        for (p, w) in pending {
            let r = w.wait().await.unwrap();
            assert!(r.is_ok(), "create {p}: err {}", r.err);
        }
    }
}

async fn assert_all_present(c: &RawClient, paths: &[String], what: &str) {
    for p in paths {
        match c.get_data(p).await.unwrap() {
            Ok((d, _)) => assert_eq!(d, p.as_bytes(), "{what}: data of {p}"),
            Err(e) => panic!("{what}: acknowledged node {p} is missing (err {e})"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// kill -9 rounds

const SESSIONS: usize = 4;
const WORKERS_PER_SESSION: usize = 4;
const COUNTERS: usize = 4;
const ROUNDS: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Create { path: String, data: Vec<u8> },
    Set { path: String, data: Vec<u8> },
    Delete { path: String },
}

impl Op {
    fn path(&self) -> &str {
        match self {
            Op::Create { path, .. } | Op::Set { path, .. } | Op::Delete { path } => path,
        }
    }
}

/// A write and, if it was acknowledged, its reply. `None` = in flight at the kill.
#[derive(Debug)]
struct Outcome {
    op: Op,
    reply: Option<Reply>,
}

/// The exact state of `/crash` (child name → data, version) as last verified.
type Known = BTreeMap<String, (Vec<u8>, i32)>;

struct Shared {
    acked: AtomicUsize,
    stop: AtomicBool,
}

async fn worker(
    client: Arc<RawClient>,
    mut rng: StdRng,
    prefix: String,
    mut deletable: Vec<String>,
    shared: Arc<Shared>,
) -> Vec<Outcome> {
    let mut log = Vec::new();
    let mut seq = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        seq += 1;
        let pad = "p".repeat(rng.gen_range(0..160));
        let unique = format!("{prefix}-{seq}-{pad}").into_bytes();
        let roll = rng.gen_range(0..100);
        let op = if !deletable.is_empty() && roll < 25 {
            let i = rng.gen_range(0..deletable.len());
            Op::Delete {
                path: deletable.swap_remove(i),
            }
        } else if roll < 65 {
            Op::Set {
                path: format!("/crash/counter{}", rng.gen_range(0..COUNTERS)),
                data: unique,
            }
        } else {
            Op::Create {
                path: format!("/crash/{prefix}-{seq}"),
                data: unique,
            }
        };
        let req = match &op {
            Op::Create { path, data } => create_req(path, data),
            Op::Set { path, data } => set_data_req(path, data, -1),
            Op::Delete { path } => delete_req(path, -1),
        };
        log.push(Outcome { op, reply: None });
        let sent = match client.send(&req).await {
            Ok(p) => p,
            Err(_) => break,
        };
        let reply = match sent.wait().await {
            Ok(r) => r,
            Err(_) => break,
        };
        let last = log.last_mut().unwrap();
        if reply.is_ok() {
            if let Op::Create { path, .. } = &last.op {
                deletable.push(path.clone());
            }
            shared.acked.fetch_add(1, Ordering::Relaxed);
        }
        last.reply = Some(reply);
    }
    log
}

/// Checks the recovered `/crash` against `before` and the round's outcomes, path by
/// path, and returns the new exact state.
fn verify_round(
    round: usize,
    seed: u64,
    before: &Known,
    outcomes: &[Outcome],
    observed: &Known,
) -> Known {
    let ctx = |path: &str| format!("seed {seed}, round {round}, {path}");
    let mut by_path: HashMap<&str, Vec<&Outcome>> = HashMap::new();
    for o in outcomes {
        if let Some(r) = &o.reply {
            assert_eq!(r.err, 0, "{}: {:?} failed", ctx(o.op.path()), o.op);
        }
        by_path.entry(o.op.path()).or_default().push(o);
    }
    let name = |p: &str| p.trim_start_matches("/crash/").to_owned();

    // Every observed node must be explained.
    for child in observed.keys() {
        let p = format!("/crash/{child}");
        assert!(
            before.contains_key(child) || by_path.contains_key(p.as_str()),
            "{}: a node nobody created",
            ctx(&p)
        );
    }

    let mut paths: Vec<String> = before.keys().map(|c| format!("/crash/{c}")).collect();
    for p in by_path.keys() {
        if !before.contains_key(&name(p)) {
            paths.push((*p).to_owned());
        }
    }
    for p in &paths {
        let ops = by_path.get(p.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let got = observed.get(&name(p));
        let had = before.get(&name(p));
        let of_kind = |k: fn(&Op) -> bool| -> Vec<&Outcome> {
            ops.iter().copied().filter(|o| k(&o.op)).collect()
        };
        let creates = of_kind(|op| matches!(op, Op::Create { .. }));
        let deletes = of_kind(|op| matches!(op, Op::Delete { .. }));
        let sets = of_kind(|op| matches!(op, Op::Set { .. }));
        assert!(creates.len() <= 1 && deletes.len() <= 1, "{}", ctx(p));

        if !sets.is_empty() {
            // A counter: never deleted, written concurrently by many sessions.
            let (d0, v0) = had.unwrap_or_else(|| panic!("{}: counter missing before", ctx(p)));
            let (data, version) =
                got.unwrap_or_else(|| panic!("{}: counter lost after the crash", ctx(p)));
            let acks: Vec<(&Vec<u8>, i32, i64)> = sets
                .iter()
                .filter(|o| o.reply.is_some())
                .map(|o| {
                    let Op::Set { data, .. } = &o.op else {
                        unreachable!()
                    };
                    let r = o.reply.as_ref().unwrap();
                    (data, r.decode::<StatResponse>().stat.version, r.zxid)
                })
                .collect();
            let maybes: Vec<&Vec<u8>> = sets
                .iter()
                .filter(|o| o.reply.is_none())
                .map(|o| match &o.op {
                    Op::Set { data, .. } => data,
                    _ => unreachable!(),
                })
                .collect();
            let lo = v0 + acks.len() as i32;
            let hi = lo + maybes.len() as i32;
            assert!(
                (lo..=hi).contains(version),
                "{}: version {version} outside [{lo}, {hi}] ({} acked, {} in flight)",
                ctx(p),
                acks.len(),
                maybes.len()
            );
            match acks.iter().max_by_key(|a| a.1) {
                Some(&(last_data, last_version, _)) => {
                    if data == last_data {
                        assert_eq!(*version, last_version, "{}: data/version mismatch", ctx(p));
                    } else {
                        assert!(
                            maybes.contains(&data) && *version > last_version,
                            "{}: data is neither the last acknowledged write (version \
                             {last_version}) nor a later in-flight one (version {version})",
                            ctx(p)
                        );
                    }
                }
                None => assert!(
                    (data == d0 && version == v0) || maybes.contains(&data),
                    "{}: data from nowhere",
                    ctx(p)
                ),
            }
            continue;
        }

        // A plain node: created (before or in this round), maybe deleted.
        let created_data: Option<&Vec<u8>> = creates.first().map(|o| match &o.op {
            Op::Create { data, .. } => data,
            _ => unreachable!(),
        });
        let must_exist_before_delete = match (had, creates.first()) {
            (Some(_), None) => true,
            (None, Some(c)) => c.reply.is_some(),
            (Some(_), Some(_)) => panic!("{}: created twice", ctx(p)),
            (None, None) => unreachable!(),
        };
        let expected_data = had.map(|h| &h.0).or(created_data).unwrap();
        let delete = deletes.first();
        match (got, delete) {
            (Some((d, v)), _) => {
                assert_eq!(d, expected_data, "{}: wrong data", ctx(p));
                assert_eq!(*v, had.map_or(0, |h| h.1), "{}: wrong version", ctx(p));
                if let Some(del) = delete {
                    assert!(
                        del.reply.is_none(),
                        "{}: acknowledged delete undone by the crash",
                        ctx(p)
                    );
                }
            }
            (None, Some(_)) => {} // deleted (acknowledged or in flight)
            (None, None) => assert!(
                !must_exist_before_delete,
                "{}: acknowledged node lost in the crash",
                ctx(p)
            ),
        }
    }
    observed.clone()
}

async fn read_crash_tree(c: &RawClient) -> Known {
    let mut out = Known::new();
    for child in c.get_children("/crash").await.unwrap().unwrap() {
        let (d, s) = c
            .get_data(&format!("/crash/{child}"))
            .await
            .unwrap()
            .unwrap();
        out.insert(child, (d, s.version));
    }
    out
}

async fn kill9_rounds(extra: &[&str], label: &str) {
    let seed = std::env::var("ZLOCK_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("{label}: seed {seed} (replay with ZLOCK_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_child(dir.path(), extra);

    let setup = connect(server.addr).await;
    assert!(setup.create("/crash", b"").await.unwrap().is_ok());
    for i in 0..COUNTERS {
        let p = format!("/crash/counter{i}");
        assert!(setup.create(&p, b"0").await.unwrap().is_ok());
    }
    let mut known = read_crash_tree(&setup).await;
    drop(setup);

    for round in 0..ROUNDS {
        let shared = Arc::new(Shared {
            acked: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        // Existing plain nodes are dealt out to the workers as delete candidates.
        let mut pool: Vec<String> = known
            .keys()
            .filter(|k| !k.starts_with("counter"))
            .map(|k| format!("/crash/{k}"))
            .collect();
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let client = Arc::new(connect(server.addr).await);
            for w in 0..WORKERS_PER_SESSION {
                let share: Vec<String> = (0..pool.len() / (SESSIONS * WORKERS_PER_SESSION) + 1)
                    .filter_map(|_| pool.pop())
                    .collect();
                tasks.push(tokio::spawn(worker(
                    client.clone(),
                    StdRng::seed_from_u64(rng.gen()),
                    format!("r{round}s{s}w{w}"),
                    share,
                    shared.clone(),
                )));
            }
        }
        let kill_after = rng.gen_range(1..800);
        let extra_ms = rng.gen_range(0..4);
        let deadline = Instant::now() + STUCK;
        while shared.acked.load(Ordering::Relaxed) < kill_after {
            assert!(
                Instant::now() < deadline,
                "seed {seed}, round {round}: writers stalled at {} acknowledged writes",
                shared.acked.load(Ordering::Relaxed)
            );
            assert!(
                !tasks.iter().all(|t| t.is_finished()),
                "seed {seed}, round {round}: every writer stopped before the kill"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(extra_ms)).await;
        server.kill9();
        shared.stop.store(true, Ordering::Relaxed);
        let mut outcomes = Vec::new();
        for t in tasks {
            let log = tokio::time::timeout(STUCK, t)
                .await
                .expect("writers notice the dead server")
                .expect("writer task");
            outcomes.extend(log);
        }

        restart(&mut server);
        let c = connect(server.addr).await;
        let observed = read_crash_tree(&c).await;
        let acked: Vec<&Outcome> = outcomes.iter().filter(|o| o.reply.is_some()).collect();
        let max_acked_zxid = acked.iter().map(|o| o.reply.as_ref().unwrap().zxid).max();
        let probe = c.call(&get_data_req("/crash")).await.unwrap();
        if let Some(z) = max_acked_zxid {
            assert!(
                probe.zxid >= z,
                "seed {seed}, round {round}: server zxid {} went behind acknowledged zxid {z}",
                probe.zxid
            );
        }
        let in_flight = outcomes.len() - acked.len();
        let in_flight_applied = outcomes
            .iter()
            .filter(|o| o.reply.is_none())
            .filter(|o| match &o.op {
                Op::Create { path, .. } => observed.contains_key(&path[7..]),
                Op::Delete { path } => !observed.contains_key(&path[7..]),
                Op::Set { path, data } => observed.get(&path[7..]).is_some_and(|v| &v.0 == data),
            })
            .count();
        println!(
            "{label} round {round}: killed after {} acknowledged writes; {in_flight} in flight, \
             of which {in_flight_applied} visibly survived; {} nodes under /crash",
            acked.len(),
            observed.len()
        );
        known = verify_round(round, seed, &known, &outcomes, &observed);
        drop(c);
    }
    server.terminate().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_rounds_wal_only() {
    kill9_rounds(&[], "wal").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_rounds_with_snapshots() {
    let cfg = tempfile::tempdir().unwrap();
    let path = cfg.path().join("zoo.cfg");
    std::fs::write(&path, "snapCount=37\n").unwrap();
    kill9_rounds(&["--config", path.to_str().unwrap()], "snapshots").await;
}

// ---------------------------------------------------------------------------------------
// Torn tail and corruption

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_last_record_is_cut_and_earlier_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_child(dir.path(), &[]);
    let c = connect(server.addr).await;
    let paths: Vec<String> = (0..40).map(|i| format!("/torn{i:03}")).collect();
    create_all(&c, &paths, 8).await;
    drop(c);
    server.terminate().unwrap();

    let newest = wal_segments(dir.path()).pop().expect("a log segment");
    let bytes = std::fs::read(&newest).unwrap();
    let records = parse_segment(&bytes);
    let last = records.last().expect("records in the newest segment");
    assert!(last.payload.len() > 3, "last record too small to tear");
    let torn = created_path(&last.payload);
    println!(
        "tearing record {} at offset {} of {} (creates {torn:?})",
        last.index,
        last.offset,
        newest.display()
    );
    let cut = records_end(&records) as u64 - 3;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(cut)
        .unwrap();

    restart(&mut server);
    let c = connect(server.addr).await;
    let survivors: Vec<String> = paths
        .iter()
        .filter(|p| Some(*p) != torn.as_ref())
        .cloned()
        .collect();
    assert_all_present(&c, &survivors, "after a torn tail").await;
    if let Some(t) = &torn {
        assert_eq!(
            c.get_data(t).await.unwrap().map(|_| ()),
            Err(-101),
            "the torn record's create must be gone"
        );
    }
    // The log is writable after the cut, and survives another crash.
    let more: Vec<String> = (0..10).map(|i| format!("/after{i:03}")).collect();
    create_all(&c, &more, 4).await;
    drop(c);
    server.kill9();
    restart(&mut server);
    let c = connect(server.addr).await;
    assert_all_present(&c, &survivors, "after the second restart").await;
    assert_all_present(&c, &more, "after the second restart").await;
    drop(c);
    server.terminate().unwrap();
}

/// A crash can leave the newest segment cut anywhere inside its last batch, or with
/// zeros past the data (a size update that got ahead of the data). For seeded cut points
/// in the last records, recovery must keep exactly the records that end before the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tail_at_random_cut_points_and_zero_fill() {
    let seed: u64 = rand::random();
    println!("cut-point seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let base = tempfile::tempdir().unwrap();
    let original = base.path().join("original");
    let mut server = start_child(&original, &[]);
    let c = connect(server.addr).await;
    let paths: Vec<String> = (0..40).map(|i| format!("/cut{i:03}")).collect();
    create_all(&c, &paths, 1).await;
    drop(c);
    server.terminate().unwrap();
    drop(server);

    let seg = wal_segments(&original).pop().unwrap();
    let seg_name = seg.file_name().unwrap().to_owned();
    let bytes = std::fs::read(&seg).unwrap();
    let records = parse_segment(&bytes);
    let first_cut = records[records.len() - 8].offset;
    let mut cuts: Vec<usize> = (0..6)
        .map(|_| rng.gen_range(first_cut..records_end(&records)))
        .collect();
    cuts.push(records[records.len() - 2].offset); // exactly on a record boundary
    for (i, cut) in cuts.into_iter().enumerate() {
        let dir = base.path().join(format!("cut{i}"));
        zlock_testkit::copy_dir(&original, &dir);
        let f = dir.join("wal").join(&seg_name);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        let mut server = start_child(&dir, &[]);
        let c = connect(server.addr).await;
        for r in &records {
            let Some(p) = created_path(&r.payload) else {
                continue;
            };
            let whole = r.offset + RECORD_HEADER + r.payload.len() <= cut;
            let got = c.get_data(&p).await.unwrap().map(|(d, _)| d);
            if whole {
                assert_eq!(
                    got,
                    Ok(p.clone().into_bytes()),
                    "seed {seed}, cut at {cut}: {p}"
                );
            } else {
                assert_eq!(
                    got,
                    Err(-101),
                    "seed {seed}, cut at {cut}: {p} is past the cut"
                );
            }
        }
        drop(c);
        server.terminate().unwrap();
    }

    // Zeros after the last record.
    let dir = base.path().join("zeros");
    zlock_testkit::copy_dir(&original, &dir);
    let f = dir.join("wal").join(&seg_name);
    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&f, &padded).unwrap();
    let mut server = start_child(&dir, &[]);
    let c = connect(server.addr).await;
    assert_all_present(&c, &paths, "after a zero-filled tail").await;
    drop(c);
    server.terminate().unwrap();
}

/// Kills a child process on drop, so no early return leaves it running.
struct Reaper(Option<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes a log with a few dozen records into `dir` and stops the server cleanly.
async fn write_some_log(dir: &Path) -> Vec<String> {
    let mut server = start_child(dir, &[]);
    let c = connect(server.addr).await;
    let paths: Vec<String> = (0..30).map(|i| format!("/c{i:03}")).collect();
    create_all(&c, &paths, 1).await;
    drop(c);
    server.terminate().unwrap();
    paths
}

/// Runs `zlock server` on `dir` and expects it to exit with an error; returns stderr.
fn run_expecting_failure(dir: &Path) -> String {
    let port = zlock_testkit::free_port();
    let child = Command::new(zlock_binary())
        .args(["server", "--port", &port.to_string(), "--data-dir"])
        .arg(dir)
        .args(["--tick-time", "100"])
        .env("ZLOCK_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zlock");
    let mut reaper = Reaper(Some(child));
    // Read stderr on a thread so a chatty child can never block on a full pipe.
    let mut stderr = reaper.0.as_mut().unwrap().stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + STUCK;
    let status = loop {
        if let Some(st) = reaper.0.as_mut().unwrap().try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "zlock kept running on a corrupt log"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    reaper.0 = None;
    let err = reader.join().unwrap();
    assert!(
        !status.success(),
        "zlock exited 0 on a corrupt log; stderr:\n{err}"
    );
    err
}

/// What to damage in a record, and which byte of it (from the record's start) to flip.
type Damage = (&'static str, fn(&WalRecord) -> usize);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_middle_record_stops_startup() {
    // (what is damaged, byte offset inside the record to flip)
    let cases: [Damage; 3] = [
        ("payload", |r| RECORD_HEADER + r.payload.len() / 2),
        ("crc", |_| 5),
        ("length", |_| 1),
    ];
    for (what, at) in cases {
        let dir = tempfile::tempdir().unwrap();
        write_some_log(dir.path()).await;
        let seg = wal_segments(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let records = parse_segment(&bytes);
        assert!(records.len() > 10, "enough records to damage an early one");
        let victim = &records[3];
        let flip = victim.offset + at(victim);
        bytes[flip] ^= 0x40;
        std::fs::write(&seg, &bytes).unwrap();

        let err = run_expecting_failure(dir.path());
        let file_name = seg.file_name().unwrap().to_str().unwrap();
        let offset = format!("offset {}", victim.offset);
        assert!(
            err.contains(file_name) && err.contains(&offset),
            "damaged {what}: stderr should name {file_name} and {offset}; got:\n{err}"
        );
        println!("damaged {what}: {}", err.trim());
        assert_eq!(
            std::fs::read(&seg).unwrap(),
            bytes,
            "damaged {what}: a failed startup must leave the log as it was"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Snapshots

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_log_recovery_after_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(&cfg, "# snapshots every 50 txns\nsnapCount=50\n").unwrap();
    let data = dir.path().join("data");
    let mut server = start_child(&data, &["--config", cfg.to_str().unwrap()]);
    let c = connect(server.addr).await;
    assert!(c.create("/snap", b"").await.unwrap().is_ok());
    let paths: Vec<String> = (0..500).map(|i| format!("/snap/n{i:04}")).collect();
    create_all(&c, &paths, 16).await;
    // Snapshots are written in the background: wait for one (bounded), then add writes
    // that only the log holds, so recovery needs both.
    let deadline = Instant::now() + STUCK;
    while snapshot_files(&data).is_empty() {
        assert!(Instant::now() < deadline, "no snapshot after 500 writes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tail: Vec<String> = (0..30).map(|i| format!("/snap/t{i:04}")).collect();
    create_all(&c, &tail, 4).await;
    drop(c);
    server.kill9();
    let snaps = snapshot_files(&data);
    assert!(!snaps.is_empty(), "a snapshot file exists");
    println!("snapshots on disk: {snaps:?}");

    restart(&mut server);
    let c = connect(server.addr).await;
    assert_all_present(&c, &paths, "after kill -9 with snapshots").await;
    assert_all_present(&c, &tail, "after kill -9 with snapshots").await;
    let children = c.get_children("/snap").await.unwrap().unwrap();
    assert_eq!(children.len(), paths.len() + tail.len(), "no extra nodes");
    drop(c);
    server.terminate().unwrap();

    // A damaged newest snapshot: recovery falls back to an older one plus the log.
    let snaps = snapshot_files(&data);
    if snaps.len() >= 2 {
        let newest = snaps.last().unwrap();
        let mut b = std::fs::read(newest).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x01;
        std::fs::write(newest, &b).unwrap();
        println!("damaged {}", newest.display());
        restart(&mut server);
        let c = connect(server.addr).await;
        assert_all_present(&c, &paths, "after falling back to an older snapshot").await;
        assert_all_present(&c, &tail, "after falling back to an older snapshot").await;
        drop(c);
        server.terminate().unwrap();
    }
}
