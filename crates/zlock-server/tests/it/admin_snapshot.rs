//! The AdminServer's `snapshot` command (`src/admin/snapshot.rs`), answered as ZooKeeper
//! 3.9 documents it: credentials always (401 without, 403 without ALL on `/`),
//! `last_zxid` and `snapshot_size` headers, the file unless `streaming=false`, 503 when
//! `admin.snapshot.enabled=false`, 429 past `admin.rateLimiterIntervalInMS` (counted in
//! `snapshot_rate_limited_count`). The file is checked against what the server serves:
//! every znode's data, ACL and Stat. Apache ZooKeeper 3.8 has no `snapshot` command (3.9
//! added it), so there is no peer to run beside.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::Value;

use zlock::{Client, CreateMode};
use zlock_proto::records::{perms, Acl, Id, Stat};
use zlock_testkit::{with_admin, with_metrics, TestServer};

const AUTH: &str = "digest root:r00t";

/// One GET: status, head (lower case), body bytes.
async fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> (u16, String, Vec<u8>) {
    let a = crate::common::http::get(addr, path, auth).await;
    (a.status, a.head.to_ascii_lowercase(), a.body)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}

/// Every znode the server serves: data, ACL, Stat.
type Served = BTreeMap<String, (Vec<u8>, Vec<Acl>, Stat)>;

async fn served(c: &Client) -> Served {
    let mut out = BTreeMap::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(path) = todo.pop() {
        let (data, stat) = c.get_data(&path, false).await.unwrap();
        let (acl, _) = c.get_acl(&path).await.unwrap();
        for child in c.get_children(&path, false).await.unwrap() {
            todo.push(zlock_core::path::join(&path, &child));
        }
        out.insert(path, (data, acl, stat));
    }
    out
}

/// Every znode of a backup's state.
fn in_file(bytes: &[u8]) -> (zlock_server::backup::Header, Served) {
    let (h, st) = zlock_server::backup::decode(bytes, zlock_core::Config::default()).unwrap();
    let nodes = st
        .tree
        .iter()
        .map(|(p, n)| {
            let data = n.data.clone().unwrap_or_default();
            (p.to_owned(), (data, n.acl.to_vec(), n.stat()))
        })
        .collect();
    (h, nodes)
}

#[tokio::test]
async fn snapshot_is_the_served_state_and_answers_as_zookeeper_39() {
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        with_metrics(cfg);
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    let (c, _events) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    c.create("/app", b"config", CreateMode::Persistent)
        .await
        .unwrap();
    for i in 0..5 {
        c.create("/app/job-", &[i], CreateMode::PersistentSequential)
            .await
            .unwrap();
    }
    c.create("/app/owner", b"me", CreateMode::Ephemeral)
        .await
        .unwrap();
    c.create("/empty", b"", CreateMode::Persistent)
        .await
        .unwrap();
    c.set_data("/app", b"config-2", -1).await.unwrap();
    c.delete("/app/job-0000000001", -1).await.unwrap();

    // No credentials, then credentials without ALL on `/`.
    let (status, _, body) = get(a, "/commands/snapshot", None).await;
    assert_eq!(status, 401, "{}", String::from_utf8_lossy(&body));
    let root = Id::new("digest", &zlock_core::acl::digest_id("root:r00t").unwrap());
    let acl = vec![
        Acl {
            perms: perms::ALL,
            id: root,
        },
        Acl {
            perms: perms::READ,
            id: Id::new("world", "anyone"),
        },
    ];
    c.set_acl("/", acl, -1).await.unwrap();
    let (status, _, _) = get(a, "/commands/snap", Some("digest eve:x")).await;
    assert_eq!(status, 403);

    // As root: GetACL shows a digest's hash only to a caller with ADMIN (ZOOKEEPER-1392).
    c.add_auth("digest", b"root:r00t").await.unwrap();
    let want = served(&c).await;
    let (status, head, body) = get(a, "/commands/snapshot", Some(AUTH)).await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("content-type: application/octet-stream"),
        "{head}"
    );
    let (h, got) = in_file(&body);
    assert_eq!(
        header(&head, "last_zxid"),
        Some(format!("0x{:x}", h.zxid).as_str()),
        "{head}"
    );
    assert_eq!(
        header(&head, "snapshot_size"),
        Some(body.len().to_string().as_str())
    );
    let last = want.values().map(|(_, _, st)| st.mzxid).max().unwrap();
    assert!(h.zxid >= last, "the file holds every change served");
    assert_eq!(h.nodes as usize, got.len());
    assert_eq!(h.sessions, 1, "the one session");
    assert!(h.source.contains("standalone"), "{}", h.source);
    assert_eq!(got, want, "every znode's data, ACL and Stat");

    // One per interval (ZooKeeper's default, 5 minutes): the next is 429, counted.
    let (status, _, _) = get(a, "/commands/snapshot", Some(AUTH)).await;
    assert_eq!(status, 429);
    let (_, _, scrape) = get(s.metrics_addr().unwrap(), "/metrics", None).await;
    let scrape = String::from_utf8(scrape).unwrap();
    assert!(
        scrape.contains("snapshot_rate_limited_count 1"),
        "{}",
        scrape
            .lines()
            .filter(|l| l.contains("snapshot"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(scrape.contains("snapshot_error_count 0"));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn snapshot_without_streaming_and_when_disabled() {
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.rate_limit_ms = 0;
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    let (c, _events) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    c.create("/x", b"1", CreateMode::Persistent).await.unwrap();
    let st = c.exists("/x", false).await.unwrap().unwrap();
    for q in ["streaming=false", "streaming=no", "x=1&streaming=FALSE"] {
        let (status, head, body) = get(a, &format!("/commands/snapshot?{q}"), Some(AUTH)).await;
        assert_eq!(status, 200, "{q}: {head}");
        assert_eq!(
            header(&head, "last_zxid"),
            Some(format!("0x{:x}", st.mzxid).as_str())
        );
        assert!(
            header(&head, "snapshot_size")
                .unwrap()
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert!(body.is_empty(), "{q}: no file without streaming");
    }
    let (status, _, body) = get(a, "/commands/snapshot?streaming=TRUE", Some(AUTH)).await;
    assert_eq!(status, 200);
    assert!(!body.is_empty());
    s.stop().await.unwrap();

    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.snapshot_enabled = false;
    })
    .await
    .unwrap();
    let (status, _, body) = get(s.admin_addr().unwrap(), "/commands/snapshot", Some(AUTH)).await;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    s.stop().await.unwrap();

    // restore: a body that is no backup, or none, is 400 and changes nothing (ZooKeeper
    // answers a snapshot that does not read with 500); disabled, 503.
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.rate_limit_ms = 0;
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    let (c, _events) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    c.create("/kept", b"", CreateMode::Persistent)
        .await
        .unwrap();
    for body in [&b"not a backup"[..], b""] {
        let (status, v) = post(a, "/commands/rest", Some(AUTH), body).await;
        assert_eq!(status, 400, "{v}");
    }
    assert!(
        c.exists("/kept", false).await.unwrap().is_some(),
        "unchanged"
    );
    s.stop().await.unwrap();
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.restore_enabled = false;
    })
    .await
    .unwrap();
    let (status, v) = post(
        s.admin_addr().unwrap(),
        "/commands/restore",
        Some(AUTH),
        b"x",
    )
    .await;
    assert_eq!(status, 503, "{v}");
    s.stop().await.unwrap();
}

/// One POST of `body`: status and the JSON answer.
async fn post(addr: SocketAddr, path: &str, auth: Option<&str>, body: &[u8]) -> (u16, Value) {
    let a = crate::common::http::post(addr, path, auth, body).await;
    (a.status, a.json())
}

/// ZooKeeper 3.9's `restore` on a single node: another server's backup replaces this
/// one's state; its clients are cut off and their sessions gone; the restored tree is
/// served, survives a restart, and takes writes after it.
#[tokio::test]
async fn restore_replaces_the_state_and_survives_a_restart() {
    // The source: its tree, backed up.
    let a = TestServer::start_with(|cfg| {
        with_admin(cfg);
    })
    .await
    .unwrap();
    let (ca, _ev) = Client::connect(&a.connect_string(), 30_000).await.unwrap();
    ca.create("/cfg", b"v1", CreateMode::Persistent)
        .await
        .unwrap();
    for i in 0..3u8 {
        ca.create("/cfg/item-", &[i], CreateMode::PersistentSequential)
            .await
            .unwrap();
    }
    ca.set_data("/cfg", b"v2", -1).await.unwrap();
    let want = served(&ca).await;
    let (status, _, file) = get(a.admin_addr().unwrap(), "/commands/snapshot", Some(AUTH)).await;
    assert_eq!(status, 200);
    ca.close().await.unwrap();
    a.stop().await.unwrap();

    // The target: other data, a live session with an ephemeral node.
    let b = TestServer::start_with(|cfg| {
        with_admin(cfg);
        with_metrics(cfg);
    })
    .await
    .unwrap();
    let admin = b.admin_addr().unwrap();
    let (cb, _ev) = Client::connect(&b.connect_string(), 30_000).await.unwrap();
    cb.create("/other", b"x", CreateMode::Persistent)
        .await
        .unwrap();
    cb.create("/mine", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    for z in 0..40 {
        cb.create(&format!("/z{z}"), b"", CreateMode::Persistent)
            .await
            .unwrap();
    }
    let before = cb.exists("/z39", false).await.unwrap().unwrap().mzxid;

    // GET is not how a restore is asked; no credentials; not a backup.
    let (status, _, _) = get(admin, "/commands/restore", Some(AUTH)).await;
    assert_eq!(status, 405);
    let (status, v) = post(admin, "/commands/restore", None, &file).await;
    assert_eq!(status, 401, "{v}");
    assert!(
        cb.exists("/other", false).await.unwrap().is_some(),
        "unchanged"
    );

    let (status, v) = post(admin, "/commands/restore", Some(AUTH), &file).await;
    assert_eq!(status, 200, "{v}");
    let zxid = v["last_zxid"].as_i64().unwrap();
    assert!(zxid > before && zxid >= 1 << 32, "0x{zxid:x}");
    // One per interval (ZooKeeper's default, 5 minutes), counted before the body is
    // read, as ZooKeeper counts it.
    let (status, _) = post(admin, "/commands/restore", Some(AUTH), b"anything").await;
    assert_eq!(status, 429);
    let (_, _, scrape) = get(b.metrics_addr().unwrap(), "/metrics", None).await;
    let scrape = String::from_utf8(scrape).unwrap();
    let counters: Vec<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("restore_"))
        .collect();
    assert!(
        counters.contains(&"restore_rate_limited_count 1")
            && counters.contains(&"restore_error_count 0"),
        "{counters:?}"
    );

    // The old session is gone; a new one sees the restored tree.
    assert!(
        cb.exists("/other", false).await.is_err(),
        "the old client is cut off"
    );
    let (c2, _ev) = Client::connect(&b.connect_string(), 30_000).await.unwrap();
    c2.add_auth("digest", b"root:r00t").await.unwrap();
    assert_eq!(served(&c2).await, want, "the backup's tree, node for node");
    let (_, st) = c2
        .create("/after", b"1", CreateMode::Persistent)
        .await
        .unwrap();
    assert!(st.czxid > zxid);
    c2.close().await.unwrap();

    // A restart serves the restored tree and the write after it.
    let cfg = b.config.clone();
    let dir = b.stop().await.unwrap();
    let b = TestServer::start_in(cfg, dir).await.unwrap();
    let (c3, _ev) = Client::connect(&b.connect_string(), 30_000).await.unwrap();
    assert!(c3.exists("/other", false).await.unwrap().is_none());
    assert_eq!(c3.get_data("/after", false).await.unwrap().0, b"1");
    assert_eq!(
        c3.get_data("/cfg", false).await.unwrap().0,
        b"v2",
        "restored data after a restart"
    );
    b.stop().await.unwrap();
}
