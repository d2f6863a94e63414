//! The AdminServer's `locks` (and the dashboard's `/locks.json`) list the standard
//! recipes' queues too (`src/admin/recipes.rs`), derived from the tree: kazoo's own
//! `Lock` and `ReadLock` (a real kazoo client, a peer: missing, this test fails), and
//! nodes named as Curator's mutex, read-write lock and semaphore leases and as the
//! plain `lock-` recipe name them, made through the protocol; each with its holder and
//! its waiters in order, the owner's session and the fencing token (czxid). Ephemeral
//! sequential nodes that are no lock (a service's instances) are not listed. When the
//! first of a queue leaves, `handovers` lists it with the one first after it.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use zlock::{Client, CreateMode};
use zlock_testkit::{require, with_admin, Peer, TestServer};

const T: Duration = Duration::from_secs(30);

async fn locks(addr: SocketAddr) -> Vec<Value> {
    let a = crate::common::http::get(addr, "/commands/locks", None).await;
    a.json()["locks"].as_array().unwrap().clone()
}

fn queue<'a>(all: &'a [Value], path: &str) -> &'a Value {
    all.iter()
        .find(|l| l["path"] == path)
        .unwrap_or_else(|| panic!("{path} not listed: {all:#?}"))
}

/// (node name, state, mode, recipe) of each entry, in order.
fn shape(l: &Value) -> Vec<(String, String, String, String)> {
    l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let node = e["node"].as_str().unwrap();
            (
                node.rsplit('/').next().unwrap().to_owned(),
                e["state"].as_str().unwrap().to_owned(),
                e["mode"].as_str().unwrap().to_owned(),
                e["recipe"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

const KAZOO: &str = r#"
import sys, threading
from kazoo.client import KazooClient
hosts = sys.argv[1]
a = KazooClient(hosts=hosts, timeout=10); a.start(timeout=30)
b = KazooClient(hosts=hosts, timeout=10); b.start(timeout=30)
held = a.Lock("/kz/lock", "a")
assert held.acquire(timeout=30)
waiting = b.Lock("/kz/lock", "b")
t = threading.Thread(target=lambda: waiting.acquire(timeout=60), daemon=True)
t.start()
reader = a.ReadLock("/kz/rw", "r")
assert reader.acquire(timeout=30)
print("READY %d %d" % (a.client_id[0], b.client_id[0]), flush=True)
sys.stdin.readline()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_queues_are_listed_with_holder_and_waiters_in_order() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let s = TestServer::start_with(with_admin).await.unwrap();
    let a = s.admin_addr().unwrap();
    let (c, _ev) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    let (w, _ev2) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    for p in [
        "/cu",
        "/cu/lock",
        "/cu/rw",
        "/cu/sem",
        "/cu/sem/leases",
        "/plain",
        "/svc",
    ] {
        c.create(p, b"", CreateMode::Persistent).await.unwrap();
    }
    let seq = CreateMode::EphemeralSequential;
    let mut czxid = None;
    for (who, parent, name) in [
        (&c, "/cu/lock", "_c_1111-lock-"),
        (&w, "/cu/lock", "_c_2222-lock-"),
        (&c, "/cu/rw", "_c_3333-__READ__"),
        (&w, "/cu/rw", "_c_4444-__READ__"),
        (&c, "/cu/rw", "_c_5555-__WRIT__"),
        (&w, "/cu/rw", "_c_6666-__READ__"),
        (&c, "/cu/sem/leases", "_c_7777-lease-"),
        (&w, "/cu/sem/leases", "_c_8888-lease-"),
        (&w, "/plain", "lock-"),
        (&c, "/plain", "lock-"),
        (&c, "/svc", "instance-"),
    ] {
        let (path, st) = who
            .create(&format!("{parent}/{name}"), b"", seq)
            .await
            .unwrap();
        if path.starts_with("/cu/lock/_c_1111") {
            czxid = Some(st.czxid);
        }
    }

    let mut kazoo = Command::new(&py)
        .args(["-c", KAZOO, &s.connect_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(kazoo.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ids: Vec<i64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(line.starts_with("READY") && ids.len() == 2, "{line}");

    // kazoo's waiter creates its node from a thread: wait for it (bounded).
    let deadline = tokio::time::Instant::now() + T;
    let all = loop {
        let all = locks(a).await;
        let n = all
            .iter()
            .find(|l| l["path"] == "/kz/lock")
            .map_or(0, |l| l["entries"].as_array().unwrap().len());
        if n == 2 {
            break all;
        }
        assert!(tokio::time::Instant::now() < deadline, "{all:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let kz = queue(&all, "/kz/lock");
    let entries = kz["entries"].as_array().unwrap();
    assert_eq!(
        (
            entries[0]["state"].as_str(),
            entries[0]["session_id"].as_i64()
        ),
        (Some("holds"), Some(ids[0])),
        "{kz}"
    );
    assert_eq!(
        (
            entries[1]["state"].as_str(),
            entries[1]["session_id"].as_i64()
        ),
        (Some("queued"), Some(ids[1])),
        "{kz}"
    );
    assert!(entries
        .iter()
        .all(|e| e["recipe"] == "kazoo" && e["node"].as_str().unwrap().contains("__lock__")));
    let rw = shape(queue(&all, "/kz/rw"));
    assert_eq!(
        (rw[0].1.as_str(), rw[0].2.as_str()),
        ("holds", "read"),
        "{rw:?}"
    );

    let cu = queue(&all, "/cu/lock");
    assert_eq!(
        shape(cu)
            .iter()
            .map(|e| (e.1.as_str(), e.3.as_str()))
            .collect::<Vec<_>>(),
        [("holds", "curator"), ("queued", "curator")]
    );
    assert_eq!(
        cu["entries"][0]["czxid"].as_i64(),
        czxid,
        "the fencing token"
    );
    assert_eq!(
        cu["entries"][0]["session_id"].as_i64(),
        Some(c.session_id())
    );
    assert_eq!(
        cu["entries"][1]["session_id"].as_i64(),
        Some(w.session_id())
    );
    // Readers before the writer hold, the writer waits, the reader after it waits.
    assert_eq!(
        shape(queue(&all, "/cu/rw"))
            .iter()
            .map(|e| (e.1.as_str(), e.2.as_str()))
            .collect::<Vec<_>>(),
        [
            ("holds", "read"),
            ("holds", "read"),
            ("queued", "write"),
            ("queued", "read")
        ]
    );
    assert_eq!(
        shape(queue(&all, "/cu/sem/leases"))
            .iter()
            .map(|e| (e.1.as_str(), e.2.as_str()))
            .collect::<Vec<_>>(),
        [("holds", "lease"), ("holds", "lease")]
    );
    let plain = shape(queue(&all, "/plain"));
    assert_eq!(
        plain.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
        ["holds", "queued"]
    );
    assert!(plain.iter().all(|e| e.3 == "plain"));
    assert!(
        all.iter().all(|l| l["path"] != "/svc"),
        "instances are no lock"
    );

    // The holder leaves: the next in each queue holds.
    let c_id = c.session_id();
    c.close().await.unwrap();
    let all = locks(a).await;
    assert_eq!(
        shape(queue(&all, "/cu/lock"))
            .iter()
            .map(|e| e.1.as_str())
            .collect::<Vec<_>>(),
        ["holds"]
    );
    assert_eq!(
        queue(&all, "/plain")["entries"][0]["session_id"].as_i64(),
        Some(w.session_id())
    );
    // ... and each queue c was first in lists a hand-over to w, newest first (c's
    // nodes go in path order); /plain, where c only waited, lists none.
    let a2 = crate::common::http::get(a, "/commands/locks", None).await;
    let handovers: Vec<(String, i64, Option<i64>)> = a2.json()["handovers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap().to_owned(),
                h["from"]["session_id"].as_i64().unwrap(),
                h["to"]["session_id"].as_i64(),
            )
        })
        .collect();
    let (cs, ws) = (c_id, Some(w.session_id()));
    assert_eq!(
        handovers,
        [
            ("/cu/sem/leases".to_owned(), cs, ws),
            ("/cu/rw".to_owned(), cs, ws),
            ("/cu/lock".to_owned(), cs, ws),
        ]
    );
    let _ = kazoo.stdin.take().unwrap().write_all(b"\n");
    let _ = kazoo.wait();
    s.stop().await.unwrap();
}
