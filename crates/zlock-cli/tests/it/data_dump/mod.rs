//! `zlock data dump-snapshot | dump-log` on the files of real servers: a single node
//! driven through the protocol (every create mode, setData, delete, setACL, a multi, a
//! native lock) and an ensemble member, each with a small snapCount so that snapshots
//! and a log after them exist. The dumps show what the client saw, field by field, and
//! change no file; a torn tail is reported with exit 0, a flipped byte earlier is exit 1
//! naming the file and the offset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use zlock::{perms, Acl, Client, CreateMode, Id, LockRequest, MultiOp, NativeLock, Stat};
use zlock_proto::records::{CheckVersionRequest, CreateRequest, SetDataRequest};
use zlock_proto::OpCode;
use zlock_testkit::{ChildEnsemble, ChildServer, EnsembleOptions};

use crate::common::{run, zlock_cmd, Out, Scratch, RUN_BOUND};

mod copies;
use copies::{damaged_copies, one_file_and_a_backup};

/// Every file under `dir`: its bytes and modification time.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let m = std::fs::metadata(&p).unwrap().modified().unwrap();
                all.insert(p.clone(), (std::fs::read(&p).unwrap(), m));
            }
        }
    }
    all
}

async fn zlock(args: &[&str]) -> Out {
    run(zlock_cmd(args), &args.join(" "), RUN_BOUND).await
}

/// `zlock data dump-snapshot PATH --json --data`, parsed.
async fn snapshot_json(path: &Path) -> Value {
    let out = zlock(&[
        "data",
        "dump-snapshot",
        path.to_str().unwrap(),
        "--json",
        "--data",
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

/// `zlock data dump-log PATH --json`: the record lines and the end line.
async fn log_json(path: &Path) -> (Vec<Value>, Value) {
    let out = zlock(&["data", "dump-log", path.to_str().unwrap(), "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let mut lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let end = lines.pop().expect("an end line");
    assert_eq!(end["type"], "end", "{end}");
    assert!(lines.iter().all(|l| l["type"] == "record"));
    (lines, end)
}

fn hex(v: i64) -> String {
    format!("0x{v:x}")
}

fn zxid(v: &Value) -> i64 {
    i64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The znode's entry in the dump agrees with what the client read of it.
fn check_znode(doc: &Value, path: &str, data: &[u8], stat: &Stat) {
    let z = doc["znodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the dump"));
    let s = &z["stat"];
    let want = [
        ("czxid", Value::from(hex(stat.czxid))),
        ("mzxid", hex(stat.mzxid).into()),
        ("pzxid", hex(stat.pzxid).into()),
        ("ctime", stat.ctime.into()),
        ("mtime", stat.mtime.into()),
        ("version", stat.version.into()),
        ("cversion", stat.cversion.into()),
        ("aversion", stat.aversion.into()),
        ("ephemeralOwner", hex(stat.ephemeral_owner).into()),
        ("dataLength", stat.data_length.into()),
        ("numChildren", stat.num_children.into()),
    ];
    for (field, value) in want {
        assert_eq!(s[field], value, "{path} {field}: {z}");
    }
    match std::str::from_utf8(data) {
        Ok(text) if !text.contains('\0') => assert_eq!(z["data"]["utf8"], text, "{path}"),
        _ => {
            use base64::Engine;
            let b = base64::engine::general_purpose::STANDARD.encode(data);
            assert_eq!(z["data"]["base64"], b, "{path}");
        }
    }
}

/// Waits (bounded) until the newest snapshot of `data` holds zxid `at`.
async fn snapshot_reaching(data: &Path, at: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = zlock(&["data", "dump-snapshot", data.to_str().unwrap(), "--json"]).await;
        if out.code == 0 {
            let doc: Value = serde_json::from_str(&out.stdout).unwrap();
            if zxid(&doc["last_zxid"]) >= at {
                return doc;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot reached zxid 0x{at:x}: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Txns of the log's records, in order (a Raft entry's each).
fn txns(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .flat_map(|r| match r.get("txn") {
            Some(t) => vec![t.clone()],
            None => r["txns"].as_array().cloned().unwrap_or_default(),
        })
        .collect()
}

fn find_op<'a>(txns: &'a [Value], op: &str, path: &str) -> &'a Value {
    txns.iter()
        .find(|t| t["op"] == op && t["path"] == path)
        .unwrap_or_else(|| panic!("no {op} {path} in the log"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump_a_single_nodes_snapshot_and_log_as_the_client_saw_them() {
    let dir = Scratch::new("dump-single");
    let data = dir.path().join("data");
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(&cfg, "snapCount=10\n").unwrap();
    let mut srv = ChildServer::start(&data, &["--config", cfg.to_str().unwrap()]).unwrap();
    let (c, _events) = Client::connect(&srv.addr.to_string(), 30_000)
        .await
        .unwrap();
    let session = c.session_id();

    c.create("/app", b"app-data", CreateMode::Persistent)
        .await
        .unwrap();
    let (eph, _) = c
        .create("/app/eph", b"e", CreateMode::Ephemeral)
        .await
        .unwrap();
    let (seq, _) = c
        .create("/app/seq-", b"s", CreateMode::PersistentSequential)
        .await
        .unwrap();
    let (eseq, _) = c
        .create("/app/eseq-", &[0xff, 0, 1], CreateMode::EphemeralSequential)
        .await
        .unwrap();
    c.create("/app/box", b"", CreateMode::Container)
        .await
        .unwrap();
    c.create("/app/box/item", b"i", CreateMode::Persistent)
        .await
        .unwrap();
    c.set_data("/app", b"app-data-2", 0).await.unwrap();
    c.create("/app/gone", b"", CreateMode::Persistent)
        .await
        .unwrap();
    c.delete("/app/gone", 0).await.unwrap();
    let acl = vec![
        Acl {
            perms: perms::ALL,
            id: Id::new("ip", "127.0.0.1"),
        },
        Acl {
            perms: perms::READ,
            id: Id::new("world", "anyone"),
        },
    ];
    c.set_acl(&seq, acl, 0).await.unwrap();
    c.multi(vec![
        MultiOp::Create(
            OpCode::Create,
            CreateRequest {
                path: "/app/m".into(),
                data: Some(b"m0".to_vec()),
                acl: Acl::open_unsafe(),
                flags: 0,
            },
        ),
        MultiOp::SetData(SetDataRequest {
            path: "/app/m".into(),
            data: Some(b"m1".to_vec()),
            version: 0,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/app".into(),
            version: 1,
        }),
    ])
    .await
    .unwrap();
    let lock = LockRequest::exclusive("/locks/job", "_c_dump-lock-");
    let NativeLock::Granted {
        node: lock_node, ..
    } = c.lock_native(lock).await.unwrap()
    else {
        panic!("an uncontended lock is granted");
    };
    // Past snapCount, so that a snapshot holds all of the above and a log follows it.
    c.create("/filler", b"", CreateMode::Persistent)
        .await
        .unwrap();
    for i in 0..30 {
        c.create(&format!("/filler/f{i}"), b"f", CreateMode::Persistent)
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    for p in [
        "/app",
        &eph,
        &seq,
        &eseq,
        "/app/box",
        "/app/box/item",
        "/app/m",
        &lock_node,
    ] {
        let (d, s) = c.get_data(p, false).await.unwrap();
        seen.push((p.to_string(), d, s));
    }
    let last = seen
        .iter()
        .map(|(_, _, s)| s.mzxid.max(s.pzxid))
        .max()
        .unwrap();
    snapshot_reaching(&data, last).await;
    // Stopped with the client's session open: its ephemeral nodes stay in the files.
    srv.terminate().unwrap();
    drop(c);
    let before = fingerprint(&data);

    let doc = snapshot_json(&data).await;
    assert_eq!(doc["format"], "single node snapshot", "{doc}");
    assert!(doc["file"]
        .as_str()
        .unwrap()
        .contains("snapshots/snapshot."));
    for (p, d, s) in &seen {
        check_znode(&doc, p, d, s);
    }
    let znodes = doc["znodes"].as_array().unwrap();
    let paths: Vec<&str> = znodes.iter().map(|z| z["path"].as_str().unwrap()).collect();
    assert!(paths.windows(2).all(|w| w[0] < w[1]), "not in path order");
    assert!(!paths.contains(&"/app/gone"));
    assert_eq!(doc["znode_count"], znodes.len());
    let by_path = |p: &str| znodes.iter().find(|z| z["path"] == p).unwrap().clone();
    assert_eq!(by_path(&eph)["kind"], "ephemeral");
    assert_eq!(by_path("/app/box")["kind"], "container");
    assert_eq!(
        by_path(&seq)["acl"],
        serde_json::json!([
            {"scheme": "ip", "id": "127.0.0.1", "perms": "cdrwa"},
            {"scheme": "world", "id": "anyone", "perms": "r"},
        ])
    );
    let me = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == hex(session))
        .unwrap_or_else(|| panic!("session {} not in {doc}", hex(session)))
        .clone();
    assert_eq!(me["ephemerals"], 3, "eph, eseq and the lock node: {me}");
    let lock = &doc["locks"][0];
    assert_eq!(lock["path"], "/locks/job", "{doc}");
    assert_eq!(
        format!(
            "/locks/job/{}",
            lock["entries"][0]["name"].as_str().unwrap()
        ),
        lock_node
    );
    assert_eq!(lock["entries"][0]["owner"], hex(session));
    assert_eq!(lock["entries"][0]["standing"], "holds");

    let text = zlock(&["data", "dump-snapshot", data.to_str().unwrap()]).await;
    assert_eq!(text.code, 0, "{text:?}");
    for want in [
        "format        single node snapshot".to_string(),
        format!("last zxid     {}", doc["last_zxid"].as_str().unwrap()),
        format!("{eph}\n"),
        format!("ephemeralOwner = {}", hex(session)),
        "acl = ip:127.0.0.1:cdrwa,world:anyone:r".into(),
        "/locks/job\n".into(),
    ] {
        assert!(
            text.stdout.contains(&want),
            "{want:?} not in\n{}",
            text.stdout
        );
    }

    let (records, end) = log_json(&data).await;
    assert_eq!(end["end"], "clean", "{end}");
    let indexes: Vec<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, (1..=indexes.len() as u64).collect::<Vec<_>>());
    let snap_index = doc["index"].as_u64().unwrap();
    assert!(
        indexes.len() as u64 > snap_index,
        "no log after the snapshot"
    );
    let all = txns(&records);
    let mine: Vec<&Value> = all
        .iter()
        .filter(|t| t["session"] == hex(session))
        .collect();
    let xids: Vec<i64> = mine.iter().map(|t| t["xid"].as_i64().unwrap()).collect();
    assert!(xids.windows(2).all(|w| w[0] < w[1]), "{xids:?}");
    let create = find_op(&all, "create2", "/app");
    assert_eq!(create["mode"], "PERSISTENT");
    assert_eq!(create["data_length"], 8);
    assert_eq!(create["session"], hex(session));
    assert_eq!(find_op(&all, "create2", "/app/eph")["mode"], "EPHEMERAL");
    assert_eq!(
        find_op(&all, "create2", "/app/seq-")["mode"],
        "PERSISTENT_SEQUENTIAL"
    );
    assert_eq!(
        find_op(&all, "create2", "/app/eseq-")["mode"],
        "EPHEMERAL_SEQUENTIAL"
    );
    assert_eq!(
        find_op(&all, "createContainer", "/app/box")["mode"],
        "CONTAINER"
    );
    let set = find_op(&all, "setData", "/app");
    assert_eq!(
        (&set["version"], &set["data_length"]),
        (&0.into(), &10.into())
    );
    assert_eq!(find_op(&all, "delete", "/app/gone")["version"], 0);
    assert_eq!(find_op(&all, "setACL", &seq)["acl"], by_path(&seq)["acl"]);
    let multi = all.iter().find(|t| t["op"] == "multi").expect("the multi");
    let ops: Vec<(&str, &str)> = multi["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["op"].as_str().unwrap(), o["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ops,
        [
            ("create", "/app/m"),
            ("setData", "/app/m"),
            ("check", "/app")
        ]
    );
    let locked = find_op(&all, "lock", "/locks/job");
    assert_eq!(
        (&locked["prefix"], &locked["mode"]),
        (&"_c_dump-lock-".into(), &"exclusive".into())
    );
    assert!(all.iter().any(|t| t["op"] == "createSession"));

    let text = zlock(&["data", "dump-log", data.to_str().unwrap()]).await;
    assert_eq!(text.code, 0, "{text:?}");
    for want in [
        format!("session {} xid", hex(session)),
        "setData path=/app data_length=10 version=0".into(),
        "multi count=3".into(),
        "- check path=/app version=1".into(),
        "lock path=/locks/job prefix=_c_dump-lock-".into(),
    ] {
        assert!(
            text.stdout.contains(&want),
            "{want:?} not in\n{}",
            text.stdout
        );
    }
    let d = data.to_str().unwrap();
    let some = zlock(&[
        "data", "dump-log", d, "--from", "3", "--limit", "2", "--json",
    ])
    .await;
    let lines: Vec<Value> = some
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: Vec<&Value> = lines.iter().map(|l| &l["index"]).collect();
    assert_eq!(shown[..2], [&Value::from(3), &Value::from(4)], "{some:?}");
    assert_eq!(lines[2]["end"], "limit", "{some:?}");
    assert_eq!(fingerprint(&data), before, "a dump changed a file");

    one_file_and_a_backup(&dir, &doc).await;
    damaged_copies(&dir, &data, &records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump_an_ensemble_members_raft_snapshot_and_log() {
    let mut e = ChildEnsemble::start_with(EnsembleOptions {
        snap_count: 20,
        ..EnsembleOptions::default()
    })
    .await
    .expect("ensemble");
    e.leader().await.expect("a leader");
    let (c, _events) = Client::connect(&e.connect_string(), 30_000).await.unwrap();
    c.create("/e", b"", CreateMode::Persistent).await.unwrap();
    let mut seen = Vec::new();
    for i in 0..60 {
        let (p, _) = c
            .create(
                &format!("/e/n{i}"),
                format!("v{i}").as_bytes(),
                CreateMode::Persistent,
            )
            .await
            .unwrap();
        seen.push(p);
    }
    let mut stats = Vec::new();
    for p in &seen {
        let (d, s) = c.get_data(p, false).await.unwrap();
        stats.push((p.clone(), d, s));
    }
    let member = e.data_dir(0).to_path_buf();
    snapshot_reaching(&member, stats[30].2.czxid).await;
    c.close().await.unwrap();
    for i in 0..e.len() {
        e.stop(i).unwrap();
    }
    let before = fingerprint(&member);

    let doc = snapshot_json(&member).await;
    assert_eq!(doc["format"], "ensemble member's Raft snapshot", "{doc}");
    let raft = &doc["raft"];
    assert_eq!(raft["membership"]["voters"], serde_json::json!([[1, 2, 3]]));
    assert_eq!(raft["membership"]["members"].as_object().unwrap().len(), 3);
    assert_eq!(raft["last_log_id"]["index"], doc["index"], "{raft}");
    let last = zxid(&doc["last_zxid"]);
    let mut held = 0;
    for (p, d, s) in &stats {
        if s.czxid <= last {
            check_znode(&doc, p, d, s);
            held += 1;
        }
    }
    assert!(held > 30, "{held} of the writes in the snapshot");
    let text = zlock(&["data", "dump-snapshot", member.to_str().unwrap()]).await;
    assert!(
        text.stdout.contains("membership    voters {1,2,3}"),
        "{text:?}"
    );

    let (records, end) = log_json(&member).await;
    assert_eq!(end["end"], "clean", "{end}");
    for r in &records {
        assert_eq!(r["index"], r["log_id"]["index"], "{r}");
        assert_eq!(r["record"].as_u64(), r["index"].as_u64().map(|i| i + 1));
    }
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"blank"),
        "a leader's first entry: {kinds:?}"
    );
    assert!(kinds.contains(&"normal"));
    assert_eq!(
        kinds[0], "membership",
        "the initial membership, Raft index 0"
    );
    assert_eq!(records[0]["membership"], raft["membership"]);
    let all = txns(&records);
    for p in &seen[40..] {
        find_op(&all, "create2", p);
    }
    let text = zlock(&["data", "dump-log", member.to_str().unwrap()]).await;
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.starts_with("index 0 term "), "{}", text.stdout);
    assert!(text.stdout.contains("blank (a new leader's first entry)"));
    let from = zlock(&[
        "data",
        "dump-log",
        member.to_str().unwrap(),
        "--from",
        "5",
        "--limit",
        "3",
    ])
    .await;
    let shown: Vec<&str> = from
        .stdout
        .lines()
        .filter(|l| l.starts_with("index "))
        .collect();
    assert_eq!(shown.len(), 3, "{from:?}");
    assert!(shown[0].starts_with("index 5 term "), "{from:?}");
    assert!(text.stdout.contains("normal, "));
    assert_eq!(fingerprint(&member), before, "a dump changed a file");

    // The segments copied to a directory whose name says nothing: the first record
    // tells a Raft log from a WAL.
    let scratch = Scratch::new("dump-raft-copy");
    zlock_testkit::copy_dir(&member.join("raft").join("log"), scratch.path());
    let (copied, _) = log_json(scratch.path()).await;
    let ids = |rs: &[Value]| -> Vec<Value> { rs.iter().map(|r| r["log_id"].clone()).collect() };
    assert_eq!(ids(&copied), ids(&records));
}
