//! `LockMetrics::export`: a service's own Prometheus exporter publishes the lock
//! metrics with one call. Real lock traffic against a zlock server, the exporter's
//! text parsed with a Prometheus text-format parser.

use std::collections::HashMap;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use zlock::recipes::{LockMetrics, Mutex};
use zlock::{Client, CreateMode};
use zlock_testkit::TestServer;

/// Every sample of the text, by name and `lock` label.
fn samples(text: &str) -> HashMap<(String, String), prometheus_parse::Value> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    scrape
        .samples
        .into_iter()
        .map(|s| {
            let lock = s.labels.get("lock").unwrap_or_default().to_owned();
            ((s.metric, lock), s.value)
        })
        .collect()
}

fn counter(m: &HashMap<(String, String), prometheus_parse::Value>, name: &str) -> f64 {
    match m.get(&(name.to_owned(), "orders".to_owned())) {
        Some(prometheus_parse::Value::Counter(v)) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_metrics_exported_through_the_metrics_facade() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let s = TestServer::start().await.unwrap();
    let (zk, _) = Client::connect(&s.connect_string(), 10_000).await.unwrap();
    let (other, _) = Client::connect(&s.connect_string(), 10_000).await.unwrap();
    let lm = LockMetrics::new();
    let lock = Mutex::new(zk.clone(), "/m/orders").with_metrics(lm.clone());
    // Counted before the export: the counters start there.
    lock.acquire().await.unwrap().release().await.unwrap();
    assert!(metrics::with_local_recorder(&recorder, || lm.export("orders")));
    assert!(!lm.export("again"), "exported once");

    lock.acquire().await.unwrap().release().await.unwrap();
    let held = Mutex::new(other.clone(), "/m/orders")
        .acquire()
        .await
        .unwrap();
    assert!(lock
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
    held.release().await.unwrap();
    // A failure: contenders cannot live under an ephemeral node.
    zk.create("/m/eph", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let bad = Mutex::new(zk.clone(), "/m/eph/l").with_metrics(lm.clone());
    assert!(bad.acquire().await.is_err());

    let m = samples(&handle.render());
    let snap = lm.snapshot();
    assert_eq!(
        (
            snap.acquisitions,
            snap.timeouts,
            snap.failures,
            snap.releases
        ),
        (2, 1, 1, 2)
    );
    assert_eq!(counter(&m, "zlock_client_lock_acquisitions_total"), 2.0);
    assert_eq!(counter(&m, "zlock_client_lock_timeouts_total"), 1.0);
    assert_eq!(counter(&m, "zlock_client_lock_failures_total"), 1.0);
    assert_eq!(counter(&m, "zlock_client_lock_releases_total"), 2.0);
    // The wait summary counts the waits since the export: one acquisition. (The
    // exporter renders a histogram without buckets as a summary: quantiles, then
    // `_sum` and `_count` samples of their own.)
    let key = |name: &str| (name.to_owned(), "orders".to_owned());
    match m.get(&key("zlock_client_lock_wait_seconds")) {
        Some(prometheus_parse::Value::Summary(q)) => assert!(!q.is_empty()),
        Some(prometheus_parse::Value::Histogram(b)) => assert!(!b.is_empty()),
        other => panic!("zlock_client_lock_wait_seconds: {other:?}"),
    }
    let count = match m.get(&key("zlock_client_lock_wait_seconds_count")) {
        Some(
            prometheus_parse::Value::Untyped(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v),
        ) => *v,
        other => panic!("zlock_client_lock_wait_seconds_count: {other:?}"),
    };
    assert_eq!(count, 1.0, "one wait recorded since the export");
    zk.close().await.unwrap();
    other.close().await.unwrap();
}
