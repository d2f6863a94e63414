//! The Prometheus endpoint (`metricsProvider.*`, `src/metrics`): real traffic through
//! the ZooKeeper protocol and the native lock, then `GET /metrics` read by a Prometheus
//! text-format parser (`prometheus-parse`). Checked: the names and types that the
//! ZooKeeper monitoring guide's alert rules and the Grafana dashboards use, values that
//! agree with the traffic and with `mntr`, zlock's lock metrics, and that bad HTTP
//! (another path or method, a malformed or oversized request, a client that never
//! finishes) is answered cleanly while the server keeps serving its clients.

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_parse::{Scrape, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use zlock::{Client, CreateMode, LockRequest, NativeLock};
use zlock_testkit::{with_metrics, TestServer};

const T: Duration = Duration::from_secs(30);

/// What a metric must be, as the parser sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Counter,
    /// A summary with these quantiles (and `_sum`, `_count`).
    Summary(&'static [f64]),
}

const ADVANCED: &[f64] = &[0.5, 0.9, 0.99];
const BASIC: &[f64] = &[0.5];

/// Names the usual consumers query, each with where it comes from.
const REQUIRED: &[(&str, Kind, &str)] = &[
    // zookeeperMonitor.md, "Alerting with Prometheus" (ZooKeeper 3.9):
    ("znode_count", Kind::Gauge, "alert: create too many znodes"),
    (
        "num_alive_connections",
        Kind::Gauge,
        "alert: create too many connections",
    ),
    (
        "approximate_data_size",
        Kind::Gauge,
        "alert: znode total occupied memory",
    ),
    ("watch_count", Kind::Gauge, "alert: set too many watch"),
    (
        "election_time",
        Kind::Summary(BASIC),
        "alert: a leader election happens (_count)",
    ),
    (
        "open_file_descriptor_count",
        Kind::Gauge,
        "alert: open too many files",
    ),
    (
        "fsynctime",
        Kind::Summary(BASIC),
        "alert: fsync time is too long (_sum)",
    ),
    (
        "snapshottime",
        Kind::Summary(BASIC),
        "alert: take snapshot time is too long (_sum)",
    ),
    ("avg_latency", Kind::Gauge, "alert: avg latency is too high"),
    // Grafana's ZooKeeper library (grafana/jsonnet-libs zookeeper-observ-lib, source
    // `prometheus`): signals and the discovery metrics.
    (
        "outstanding_requests",
        Kind::Gauge,
        "grafana: outstanding requests",
    ),
    ("min_latency", Kind::Gauge, "grafana: latency (min)"),
    ("max_latency", Kind::Gauge, "grafana: latency (max)"),
    // ZooKeeperServer.registerMetrics and ServerMetrics (3.9), shown by the
    // "ZooKeeper by Prometheus" dashboard's panels:
    ("packets_received", Kind::Gauge, "ZooKeeperServer gauge"),
    ("packets_sent", Kind::Gauge, "ZooKeeperServer gauge"),
    ("ephemerals_count", Kind::Gauge, "ZooKeeperServer gauge"),
    ("global_sessions", Kind::Gauge, "ZooKeeperServer gauge"),
    ("uptime", Kind::Gauge, "ZooKeeperServer gauge"),
    (
        "max_file_descriptor_count",
        Kind::Gauge,
        "ZooKeeperServer gauge",
    ),
    (
        "readlatency",
        Kind::Summary(ADVANCED),
        "ServerMetrics ADVANCED summary",
    ),
    (
        "updatelatency",
        Kind::Summary(ADVANCED),
        "ServerMetrics ADVANCED summary",
    ),
    (
        "sync_processor_batch_size",
        Kind::Summary(BASIC),
        "ServerMetrics BASIC summary",
    ),
    (
        "bytes_received_count",
        Kind::Counter,
        "ServerMetrics counter",
    ),
    ("response_bytes", Kind::Counter, "ServerMetrics counter"),
    ("watch_bytes", Kind::Counter, "ServerMetrics counter"),
    (
        "connection_request_count",
        Kind::Counter,
        "ServerMetrics counter",
    ),
    ("looking_count", Kind::Counter, "ServerMetrics counter"),
    // zlock's own (README, "Metrics"):
    ("zlock_native_lock_waiters", Kind::Gauge, "zlock"),
    ("zlock_lock_paths", Kind::Gauge, "zlock"),
    ("zlock_lock_delays_running", Kind::Gauge, "zlock"),
    ("zlock_lock_holders", Kind::Gauge, "zlock"),
    ("zlock_lock_longest_wait_ms", Kind::Gauge, "zlock"),
    ("zlock_native_lock_requests_total", Kind::Counter, "zlock"),
    ("zlock_native_lock_grants_total", Kind::Counter, "zlock"),
    ("zlock_native_lock_failures_total", Kind::Counter, "zlock"),
    ("zlock_lock_handover_ms", Kind::Summary(ADVANCED), "zlock"),
];

/// Exported by ZooKeeper only on an ensemble member (quorum_size: Grafana's quorum
/// size panel) or its leader (leader_uptime: Grafana's role map): absent here.
const ENSEMBLE_ONLY: &[&str] = &[
    "quorum_size",
    "leader_uptime",
    "learners",
    "synced_followers",
];

/// One HTTP exchange: `request` as sent, the answer's status, headers and body.
async fn http(addr: SocketAddr, request: &[u8]) -> (u16, String, String) {
    let a = crate::common::http::send(addr, request).await;
    let body = a.text();
    (a.status, a.head, body)
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: zlock\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Scrapes `/metrics` and parses it.
async fn scrape(addr: SocketAddr) -> Scrape {
    let (status, head, body) = http(addr, &get("/metrics")).await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The value of a gauge, counter or untyped sample (`_sum`, `_count`) by name.
fn value(s: &Scrape, name: &str) -> f64 {
    let sample = s
        .samples
        .iter()
        .find(|x| x.metric == name)
        .unwrap_or_else(|| panic!("{name} not exported"));
    match &sample.value {
        Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

fn lock_req(guid: &str) -> LockRequest {
    LockRequest::exclusive("/locks/l", format!("_c_{guid}-lock-"))
}

async fn connect(s: &TestServer) -> Client {
    Client::connect(&s.connect_string(), 10_000)
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn zookeeper_names_and_values_after_real_traffic() {
    let s = TestServer::start_with(with_metrics).await.unwrap();
    let m = s.metrics_addr().unwrap();
    let c = connect(&s).await;
    let w = connect(&s).await;

    let before = scrape(m).await;
    // Writes, reads, a watch, an ephemeral.
    c.create("/a", b"hello", CreateMode::Persistent)
        .await
        .unwrap();
    c.create("/a/b", b"world", CreateMode::Persistent)
        .await
        .unwrap();
    c.create("/e", b"", CreateMode::Ephemeral).await.unwrap();
    assert_eq!(c.get_data("/a", true).await.unwrap().0, b"hello");
    assert!(w.exists("/a/b", true).await.unwrap().is_some());
    // A native lock with a waiter, and its hand-over.
    let NativeLock::Granted { node, .. } = c.lock_native(lock_req("h")).await.unwrap() else {
        panic!("an uncontended lock is granted at once");
    };
    let queued = std::time::Instant::now();
    let NativeLock::Queued { grant, .. } = w.lock_native(lock_req("w")).await.unwrap() else {
        panic!("a second contender waits");
    };
    // The waiter has waited at least this long when the scrape reads it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mid = scrape(m).await;
    let waited = queued.elapsed().as_millis() as f64;
    assert_eq!(value(&mid, "zlock_native_lock_waiters"), 1.0);
    assert_eq!(value(&mid, "zlock_lock_paths"), 1.0);
    assert_eq!(value(&mid, "zlock_lock_holders"), 1.0);
    let longest = value(&mid, "zlock_lock_longest_wait_ms");
    assert!(
        longest >= 50.0 && longest <= waited + 100.0,
        "longest wait {longest} ms, waited {waited} ms"
    );
    c.delete(&node, -1).await.unwrap();
    tokio::time::timeout(T, grant).await.unwrap().unwrap();
    // A failed native lock request: an ephemeral node cannot hold contenders.
    assert!(c
        .lock_native(LockRequest {
            path: "/e".into(),
            ..lock_req("x")
        })
        .await
        .is_err());
    // Fires the watch on /a (a watch event: watch_bytes).
    c.set_data("/a", b"again", -1).await.unwrap();
    c.get_data("/a", false).await.unwrap();

    let after = scrape(m).await;
    // Every required name, with its type (and a summary's quantiles).
    for (name, kind, from) in REQUIRED {
        match kind {
            Kind::Summary(qs) => {
                let sample = after
                    .samples
                    .iter()
                    .find(|x| x.metric == *name && matches!(x.value, Value::Summary(_)))
                    .unwrap_or_else(|| panic!("{name} ({from}): no summary"));
                let Value::Summary(got) = &sample.value else {
                    unreachable!()
                };
                let got: Vec<f64> = got.iter().map(|q| q.quantile).collect();
                assert_eq!(&got[..], *qs, "{name} ({from}): quantiles");
                value(&after, &format!("{name}_sum"));
                value(&after, &format!("{name}_count"));
            }
            Kind::Gauge | Kind::Counter => {
                let sample = after
                    .samples
                    .iter()
                    .find(|x| x.metric == *name)
                    .unwrap_or_else(|| panic!("{name} ({from}) not exported"));
                let ok = match kind {
                    Kind::Gauge => matches!(sample.value, Value::Gauge(_)),
                    _ => matches!(sample.value, Value::Counter(_)),
                };
                assert!(ok, "{name} ({from}): {:?}, expected {kind:?}", sample.value);
            }
        }
    }
    for name in ENSEMBLE_ONLY {
        assert!(
            after.samples.iter().all(|x| x.metric != *name),
            "{name} exported by a single node"
        );
    }
    // No JVM.
    assert!(after.samples.iter().all(|x| !x.metric.starts_with("jvm_")));

    // Values consistent with the traffic, and with mntr.
    let mn = zlock_testkit::mntr(s.addr).await;
    let again = scrape(m).await;
    for (metric, key) in [
        ("znode_count", "zk_znode_count"),
        ("ephemerals_count", "zk_ephemerals_count"),
        ("watch_count", "zk_watch_count"),
        ("global_sessions", "zk_global_sessions"),
        ("approximate_data_size", "zk_approximate_data_size"),
        ("zlock_native_lock_grants_total", "zlock_native_lock_grants"),
    ] {
        assert_eq!(
            value(&again, metric).to_string(),
            mn[key],
            "{metric} and mntr's {key}"
        );
    }
    assert_eq!(value(&after, "global_sessions"), 2.0);
    assert!(
        value(&after, "ephemerals_count") >= 2.0,
        "/e and the lock node"
    );
    assert!(
        value(&after, "watch_count") >= 1.0,
        "the exists watch on /a/b"
    );
    let rose = |name: &str| {
        let (b, a) = (value(&before, name), value(&after, name));
        assert!(a > b, "{name}: {b} then {a}");
    };
    for name in [
        "packets_received",
        "packets_sent",
        "bytes_received_count",
        "response_bytes",
        "watch_bytes",
        "updatelatency_count",
        "readlatency_count",
        "fsynctime_count",
        "sync_processor_batch_size_count",
        "zlock_native_lock_grants_total",
        "zlock_native_lock_requests_total",
        "zlock_native_lock_failures_total",
        "zlock_lock_handover_ms_count",
    ] {
        rose(name);
    }
    assert_eq!(value(&after, "zlock_native_lock_requests_total"), 3.0);
    assert_eq!(value(&after, "zlock_native_lock_waiters"), 0.0);
    assert_eq!(value(&after, "zlock_lock_longest_wait_ms"), 0.0);
    assert_eq!(
        value(&after, "connection_request_count"),
        2.0,
        "two clients' connect requests (four-letter words are not counted, as in ZooKeeper)"
    );
    assert_eq!(
        value(&after, "election_time_count"),
        0.0,
        "a single node elects nobody"
    );
    assert_eq!(value(&after, "local_sessions"), 0.0);
    assert!(value(&after, "open_file_descriptor_count") > 0.0);
    assert!(value(&after, "uptime") > 0.0);
}

#[tokio::test]
async fn bad_http_is_answered_cleanly_and_clients_keep_being_served() {
    let s = TestServer::start_with(with_metrics).await.unwrap();
    let m = s.metrics_addr().unwrap();
    let c = connect(&s).await;
    c.create("/x", b"", CreateMode::Persistent).await.unwrap();
    scrape(m).await;

    // A client that connects and never finishes its request holds nothing up.
    let mut slow = TcpStream::connect(m).await.unwrap();
    slow.write_all(b"GET /metr").await.unwrap();

    assert_eq!(http(m, &get("/")).await.0, 404);
    assert_eq!(http(m, &get("/metrics/extra")).await.0, 404);
    let post =
        b"POST /metrics HTTP/1.1\r\nHost: z\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let (status, head, _) = http(m, post).await;
    assert_eq!(status, 405);
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let head_req = b"HEAD /metrics HTTP/1.1\r\nHost: z\r\nConnection: close\r\n\r\n";
    let (status, _, body) = http(m, head_req).await;
    assert_eq!((status, body.as_str()), (200, ""));
    // Malformed.
    assert_eq!(http(m, b"GARBAGE\r\n\r\n").await.0, 400);
    assert_eq!(
        http(m, b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n")
            .await
            .0,
        400
    );
    // A request head past the bound.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: z\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let status = http(m, huge.as_bytes()).await.0;
    assert!((400..500).contains(&status), "oversized head: {status}");
    // Not HTTP at all, then closed.
    {
        let mut junk = TcpStream::connect(m).await.unwrap();
        junk.write_all(&[0u8, 159, 146, 150, 255, 0, 1])
            .await
            .unwrap();
        drop(junk);
    }

    // Still serving: scrapes, and ZooKeeper clients.
    let after = scrape(m).await;
    assert_eq!(value(&after, "num_alive_connections"), 1.0);
    c.create("/y", b"", CreateMode::Persistent).await.unwrap();
    assert_eq!(
        c.get_children("/", false).await.unwrap().len(),
        3,
        "/x, /y, /zookeeper"
    );
    let fresh = connect(&s).await;
    assert!(fresh.exists("/y", false).await.unwrap().is_some());
    drop(slow);
}
