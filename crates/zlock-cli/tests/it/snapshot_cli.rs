//! `zlock snapshot save | status` against a 3-member ensemble under write and lock
//! traffic: the backup taken from a follower holds every acknowledged write whose zxid
//! is at most the file's last zxid, with its data, and none after; `status` reads it;
//! a damaged or truncated file is refused with a message and exit 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zlock::{Client, CreateMode, LockRequest, NativeLock};
use zlock_testkit::{ChildEnsemble, EnsembleOptions};

use crate::common::{run, zlock_cmd, Scratch, RUN_BOUND};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_backup_under_traffic_holds_exactly_the_writes_up_to_its_zxid() {
    let e = ChildEnsemble::start_with(EnsembleOptions {
        admin: true,
        ..EnsembleOptions::default()
    })
    .await
    .expect("ensemble");
    let leader = e.leader().await.expect("a leader");
    let follower = (leader + 1) % 3;
    let (c, _events) = Client::connect(&e.connect_string_from(leader), 30_000)
        .await
        .unwrap();
    c.create("/t", b"", CreateMode::Persistent).await.unwrap();

    // Writes through the leader, each acknowledged write kept with its zxid; a lock
    // handed between two sessions through another member beside them.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) && i < 20_000 {
                let data = i.to_string().into_bytes();
                let (path, stat) = c
                    .create("/t/n-", &data, CreateMode::PersistentSequential)
                    .await
                    .unwrap();
                acked.push((path, data, stat.czxid));
                i += 1;
            }
            acked
        })
    };
    let locker = {
        let (at, stop) = (e.connect_string_from(follower), stop.clone());
        tokio::spawn(async move {
            let (l, _ev) = Client::connect(&at, 30_000).await.unwrap();
            let mut cycles = 0u32;
            while !stop.load(Ordering::Relaxed) && cycles < 5_000 {
                let req = LockRequest::exclusive("/locks/job", "_c_cli-lock-");
                if let Ok(NativeLock::Granted { node, .. }) = l.lock_native(req).await {
                    l.delete(&node, -1).await.unwrap();
                }
                cycles += 1;
            }
            cycles
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let dir = Scratch::new("snapshot");
    let file = dir.file("backup.zlock");
    let admin = e.admin_addr(follower).unwrap().to_string();
    let saved = run(
        zlock_cmd(&[
            "snapshot",
            "save",
            "--server",
            &admin,
            "--auth",
            "digest:ops:pw",
            "--quiet",
            &file,
        ]),
        "zlock snapshot save",
        RUN_BOUND,
    )
    .await;
    assert_eq!(saved.code, 0, "{saved:?}");
    assert!(saved.stderr.contains("checksums ok"), "{}", saved.stderr);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(locker.await.unwrap() > 0);

    let status = run(
        zlock_cmd(&["snapshot", "status", &file]),
        "zlock snapshot status",
        RUN_BOUND,
    )
    .await;
    assert_eq!(status.code, 0, "{status:?}");
    let bytes = std::fs::read(&file).unwrap();
    let (h, st) = zlock_server::backup::decode(&bytes, zlock_core::Config::default()).unwrap();
    assert!(
        status
            .stdout
            .contains(&format!("last zxid      0x{:x}", h.zxid)),
        "{}",
        status.stdout
    );
    assert!(
        h.source.contains(&format!("member {}", follower + 1)),
        "{}",
        h.source
    );
    let (mut before, mut after) = (0, 0);
    for (path, data, zxid) in &acked {
        let node = st.tree.get(path);
        if *zxid <= h.zxid {
            before += 1;
            let n = node.unwrap_or_else(|| panic!("{path} (zxid 0x{zxid:x}) is missing"));
            assert_eq!(n.data.as_deref(), Some(data.as_slice()), "{path}");
        } else {
            after += 1;
            assert!(
                node.is_none(),
                "{path} (zxid 0x{zxid:x}) is after the file's"
            );
        }
    }
    assert!(
        before > 0 && after > 0,
        "{before} writes before, {after} after"
    );

    // Restored twice into new directories: the same tree both times; every write up to
    // the file's zxid, none after; no session, so the lock queue's ephemerals are gone;
    // new changes take zxids of the next epoch.
    let mut trees = Vec::new();
    for d in ["r1", "r2"] {
        let data = dir.path().join(d);
        let out = run(
            zlock_cmd(&[
                "snapshot",
                "restore",
                &file,
                "--data-dir",
                data.to_str().unwrap(),
            ]),
            "zlock snapshot restore",
            RUN_BOUND,
        )
        .await;
        assert_eq!(out.code, 0, "{out:?}");
        assert!(out.stderr.contains("sessions closed"), "{}", out.stderr);
        let mut srv = zlock_testkit::ChildServer::start(&data, &[]).unwrap();
        let (r, _ev) = Client::connect(&srv.addr.to_string(), 30_000)
            .await
            .unwrap();
        let mut names = r.get_children("/t", false).await.unwrap();
        names.sort();
        let mut want: Vec<String> = acked
            .iter()
            .filter(|(_, _, z)| *z <= h.zxid)
            .map(|(p, _, _)| p.trim_start_matches("/t/").to_owned())
            .collect();
        want.sort();
        assert_eq!(names, want, "{d}: the writes up to the file's zxid");
        for (path, data, zxid) in acked.iter().filter(|(_, _, z)| *z <= h.zxid).step_by(97) {
            let (got, stat) = r.get_data(path, false).await.unwrap();
            assert_eq!((&got, stat.czxid), (data, *zxid), "{d}: {path}");
        }
        let queue = r
            .get_children("/locks/job", false)
            .await
            .unwrap_or_default();
        assert!(queue.is_empty(), "{d}: no session, no lock node: {queue:?}");
        let (_, st) = r
            .create("/after", b"", CreateMode::Persistent)
            .await
            .unwrap();
        assert!(
            st.czxid > 1 << 32 && st.czxid > h.zxid,
            "{d}: 0x{:x}",
            st.czxid
        );
        r.delete("/after", -1).await.unwrap();
        let stat = r.exists("/t", false).await.unwrap().unwrap();
        trees.push((names, stat));
        srv.terminate().unwrap();
    }
    assert_eq!(trees[0], trees[1], "the same file restores the same tree");
    let standalone = dir.path().join("r1");
    let mut srv = zlock_testkit::ChildServer::start(&standalone, &[]).unwrap();
    let (r, _ev) = Client::connect(&srv.addr.to_string(), 30_000)
        .await
        .unwrap();
    let want = tree(&r).await;
    srv.terminate().unwrap();

    // Into a new 3-member ensemble: each member's directory restored from the same file
    // (with its id and the new member list), then started: they elect a leader and
    // serve the same tree as the restored single node, on every member.
    drop(c);
    let mut b = ChildEnsemble::start_with(EnsembleOptions::default())
        .await
        .expect("the second ensemble");
    let lines: Vec<String> = (0..3)
        .map(|i| b.server_line(i).trim_start_matches("server.").to_owned())
        .collect();
    let old_member = dir.path().join("old-m3");
    let mut id = String::new();
    for i in 0..3 {
        b.stop(i).unwrap();
        if i == 2 {
            // Kept: a member of the ensemble as it was before the restore, on the same
            // addresses.
            zlock_testkit::copy_dir(b.data_dir(i), &old_member);
        }
        std::fs::remove_dir_all(b.data_dir(i)).unwrap();
        std::fs::create_dir_all(b.data_dir(i)).unwrap();
        let myid = (i + 1).to_string();
        let mut args = vec![
            "snapshot",
            "restore",
            &file,
            "--data-dir",
            b.data_dir(i).to_str().unwrap(),
            "--myid",
            &myid,
        ];
        for l in &lines {
            args.extend(["--server", l.as_str()]);
        }
        let out = run(zlock_cmd(&args), "zlock snapshot restore", RUN_BOUND).await;
        assert_eq!(out.code, 0, "member {i}: {out:?}");
        assert!(
            out.stderr.contains(&format!("as member {} of 3", i + 1)),
            "{}",
            out.stderr
        );
        let this = out
            .stderr
            .split("new ensemble id ")
            .nth(1)
            .and_then(|r| r.split(':').next())
            .unwrap_or_else(|| panic!("no id in {}", out.stderr))
            .to_owned();
        assert!(
            id.is_empty() || id == this,
            "one id on every member: {id} {this}"
        );
        id = this;
    }
    for i in 0..3 {
        b.start_again(i).await.unwrap();
    }
    let leader = b
        .leader()
        .await
        .expect("the restored ensemble elects a leader");
    let (w, _ev) = Client::connect(&b.connect_string_from(leader), 30_000)
        .await
        .unwrap();
    let (_, st) = w
        .create("/restored", b"", CreateMode::Persistent)
        .await
        .unwrap();
    assert!(st.czxid > 1 << 32, "0x{:x}", st.czxid);
    w.delete("/restored", -1).await.unwrap();
    for i in 0..3 {
        let (m, _ev) = Client::connect(&b.client_addr(i).to_string(), 30_000)
            .await
            .unwrap();
        m.sync("/").await.unwrap();
        assert_eq!(tree(&m).await, want, "member {i} serves the restored tree");
    }

    // The old member 3 (the ensemble before the restore, same member lines) started
    // again: refused by the restored members, it never joins, and they go on.
    b.stop(2).unwrap();
    std::fs::remove_dir_all(b.data_dir(2)).unwrap();
    zlock_testkit::copy_dir(&old_member, b.data_dir(2));
    b.start_again(2).await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        let mode = b.mode(2).await;
        assert!(
            !matches!(mode.as_deref(), Some("follower" | "leader")),
            "the old member joined: {mode:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = b
        .leader_among(&[0, 1], Duration::from_secs(30))
        .await
        .unwrap();
    let (w, _ev) = Client::connect(&b.client_addr(leader).to_string(), 30_000)
        .await
        .unwrap();
    w.create("/still", b"", CreateMode::Persistent)
        .await
        .unwrap();

    // Its directory lost, member 3 rejoins the restored ensemble with zlock.ensembleId.
    b.stop(2).unwrap();
    std::fs::remove_dir_all(b.data_dir(2)).unwrap();
    std::fs::create_dir_all(b.data_dir(2)).unwrap();
    let mut cfg = std::fs::read_to_string(b.config_path()).unwrap();
    cfg.push_str(&format!("zlock.ensembleId={id}\n"));
    std::fs::write(b.config_path(), cfg).unwrap();
    b.start_again(2).await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while b.mode(2).await.as_deref() != Some("follower") {
        assert!(
            tokio::time::Instant::now() < until,
            "member 3 did not rejoin"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (m, _ev) = Client::connect(&b.client_addr(2).to_string(), 30_000)
        .await
        .unwrap();
    m.sync("/").await.unwrap();
    assert!(m.exists("/still", false).await.unwrap().is_some());

    // Into a directory that holds data: refused, nothing written.
    let out = run(
        zlock_cmd(&["snapshot", "restore", &file, "--data-dir", &dir.file("r1")]),
        "zlock snapshot restore",
        RUN_BOUND,
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("already holds data"), "{}", out.stderr);

    // Damage: one flipped byte in the payload, a truncated copy, not a backup at all.
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    for (name, content, says) in [
        ("flipped", flipped, "checksum"),
        ("short", bytes[..bytes.len() - 10].to_vec(), "damaged"),
        ("other", b"hello".to_vec(), "not a zlock backup"),
    ] {
        let f = dir.file(name);
        std::fs::write(&f, content).unwrap();
        let out = run(
            zlock_cmd(&["snapshot", "status", &f]),
            "zlock snapshot status",
            RUN_BOUND,
        )
        .await;
        assert_eq!(out.code, 1, "{name}: {out:?}");
        assert!(out.stderr.contains(says), "{name}: {}", out.stderr);
        let data = dir.path().join(format!("from-{name}"));
        let out = run(
            zlock_cmd(&[
                "snapshot",
                "restore",
                &f,
                "--data-dir",
                data.to_str().unwrap(),
            ]),
            "zlock snapshot restore",
            RUN_BOUND,
        )
        .await;
        assert_eq!(out.code, 1, "restore {name}: {out:?}");
        assert!(!data.join("snapshots").exists(), "{name}: nothing written");
    }
}

/// Every znode's data and Stat outside `/zookeeper` (whose `config` is member-local), by
/// path.
async fn tree(
    c: &Client,
) -> std::collections::BTreeMap<String, (Vec<u8>, zlock_proto::records::Stat)> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(path) = todo.pop() {
        if path == "/zookeeper" {
            continue;
        }
        let (data, mut stat) = c.get_data(&path, false).await.unwrap();
        for child in c.get_children(&path, false).await.unwrap() {
            let p = if path == "/" {
                format!("/{child}")
            } else {
                format!("{path}/{child}")
            };
            todo.push(p);
        }
        if path == "/" {
            // `/`'s pzxid follows the writes under it: /restored's create and delete.
            stat.pzxid = 0;
            stat.cversion = 0;
        }
        out.insert(path, (data, stat));
    }
    out
}

/// Without credentials the member answers 401, and `save` says what to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_without_credentials_says_what_to_give() {
    let e = ChildEnsemble::start_with(EnsembleOptions {
        admin: true,
        ..EnsembleOptions::default()
    })
    .await
    .expect("ensemble");
    e.leader().await.unwrap();
    let dir = Scratch::new("snapshot-noauth");
    let file = dir.file("b.zlock");
    let admin = e.admin_addr(0).unwrap().to_string();
    let out = run(
        zlock_cmd(&["snapshot", "save", "--server", &admin, &file]),
        "zlock snapshot save",
        RUN_BOUND,
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("401"), "{}", out.stderr);
    assert!(out.stderr.contains("--auth"), "{}", out.stderr);
    assert!(!std::path::Path::new(&file).exists());

    // ZooKeeper 3.9's restore on a running member: refused, saying how.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(&admin).await.unwrap();
    s.write_all(
        b"POST /commands/restore HTTP/1.1\r\nHost: z\r\nAuthorization: digest a:b\r\n\
          Content-Length: 3\r\nConnection: close\r\n\r\nabc",
    )
    .await
    .unwrap();
    let mut got = String::new();
    tokio::time::timeout(RUN_BOUND, s.read_to_string(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert!(got.contains("zlock snapshot restore"), "{got}");
}
