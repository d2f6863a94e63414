//! Server-level behaviour: the listen backlog, four-letter words and their whitelist,
//! session handshake rules, clean shutdown on SIGTERM, recovery after a clean restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use zlock::{Client, CreateMode};
use zlock_testkit::{ChildServer, TestServer};

fn four_letter(addr: std::net::SocketAddr, word: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(word.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_101_clients_all_get_sessions() {
    let server = TestServer::start().await.unwrap();
    let addr = server.connect_string();
    let mut tasks = Vec::new();
    for _ in 0..101 {
        let a = addr.clone();
        tasks.push(tokio::spawn(
            async move { Client::connect(&a, 10_000).await },
        ));
    }
    let mut ids = std::collections::HashSet::new();
    let mut clients = Vec::new();
    for t in tasks {
        let (c, _ev) = t.await.unwrap().unwrap();
        assert!(ids.insert(c.session_id()), "session ids must be unique");
        clients.push((c, _ev));
    }
    assert_eq!(ids.len(), 101);
    // The backlog is what lets a burst in without SYN retries: check the socket's.
    let port = server.addr.port();
    let ss = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output();
    if let Ok(out) = ss {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().next() {
            let backlog: u32 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
            assert!(backlog >= 101, "listen backlog {backlog} < 101: {line}");
        }
    }
    for (c, _) in &clients {
        c.close().await.unwrap();
    }
}

#[tokio::test]
async fn four_letter_words_and_whitelist() {
    let server = TestServer::start_with(|c| {
        c.four_letter_words = vec!["ruok".into(), "srvr".into(), "mntr".into(), "conf".into()];
        c.commit_spin_us = Some(50);
        c.global_outstanding_limit = 777;
    })
    .await
    .unwrap();
    let addr = server.addr;
    let (c, _ev) = Client::connect(&server.connect_string(), 10_000)
        .await
        .unwrap();
    c.create("/fl", b"x", CreateMode::Persistent).await.unwrap();
    let (ruok, srvr, mntr, dump, conf) = tokio::task::spawn_blocking(move || {
        (
            four_letter(addr, "ruok"),
            four_letter(addr, "srvr"),
            four_letter(addr, "mntr"),
            four_letter(addr, "dump"),
            four_letter(addr, "conf"),
        )
    })
    .await
    .unwrap();
    assert_eq!(ruok, "imok");
    assert!(srvr.starts_with("Zookeeper version: 3.8.0"), "{srvr}");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert!(srvr.contains("Node count: 5"), "{srvr}");
    for key in [
        "zk_version",
        "zk_avg_latency",
        "zk_packets_received",
        "zk_num_alive_connections",
        "zk_znode_count\t5",
        "zk_watch_count",
        "zk_ephemerals_count",
        "zk_approximate_data_size",
        "zk_server_state\tstandalone",
    ] {
        assert!(mntr.contains(key), "mntr lacks {key}: {mntr}");
    }
    assert_eq!(
        dump,
        "dump is not executed because it is not in the whitelist.\n"
    );
    for line in [
        "preAllocSize=4096\n",
        "zlock.commitSpinMicros=50\n",
        "globalOutstandingLimit=777\n",
    ] {
        assert!(conf.contains(line), "conf lacks {line}: {conf}");
    }
    c.close().await.unwrap();
}

#[tokio::test]
async fn data_survives_a_clean_restart() {
    let server = TestServer::start().await.unwrap();
    let (c, _ev) = Client::connect(&server.connect_string(), 10_000)
        .await
        .unwrap();
    c.create("/keep", b"1", CreateMode::Persistent)
        .await
        .unwrap();
    let (p, _) = c
        .create("/keep/s-", b"2", CreateMode::PersistentSequential)
        .await
        .unwrap();
    c.set_data("/keep", b"3", 0).await.unwrap();
    c.close().await.unwrap();
    let cfg = server.config.clone();
    let dir = server.stop().await.unwrap();
    let server = TestServer::start_in(cfg, dir).await.unwrap();
    let (c, _ev) = Client::connect(&server.connect_string(), 10_000)
        .await
        .unwrap();
    let (data, stat) = c.get_data("/keep", false).await.unwrap();
    assert_eq!(data, b"3");
    assert_eq!(stat.version, 1);
    assert_eq!(c.get_data(&p, false).await.unwrap().0, b"2");
    // New writes continue the zxid sequence.
    let (_, s2) = c
        .create("/after", b"", CreateMode::Persistent)
        .await
        .unwrap();
    assert!(s2.czxid > stat.mzxid);
    c.close().await.unwrap();
}

#[test]
fn sigterm_stops_cleanly_and_releases_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ChildServer::start(dir.path(), &[]).unwrap();
    let addr = server.addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (c, _ev) = Client::connect(&addr.to_string(), 10_000).await.unwrap();
        c.create("/t", b"v", CreateMode::Persistent).await.unwrap();
    });
    let status = server.terminate().unwrap();
    assert!(status.success(), "exit status {status}");
    // The port is free again.
    std::net::TcpListener::bind(addr).expect("port released");
    // And the write is there after a restart.
    server.restart().unwrap();
    let addr = server.addr;
    rt.block_on(async {
        let (c, _ev) = Client::connect(&addr.to_string(), 10_000).await.unwrap();
        assert_eq!(c.get_data("/t", false).await.unwrap().0, b"v");
    });
}
