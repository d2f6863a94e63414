//! Client-side lock metrics shared by [`Mutex`](super::Mutex),
//! [`ReadWriteLock`](super::ReadWriteLock) and [`Semaphore`](super::Semaphore).
//!
//! What is counted, per acquire call (`acquire`, `try_acquire`, `acquire_timeout`,
//! `acquire_many`):
//! - **acquisitions**: what the call obtained: one per guard, one per semaphore lease
//!   (so at rest `acquisitions == releases`). A reentrant acquire counts too.
//! - **timeouts**: a `try_acquire` or `acquire_timeout` that returned `None`.
//! - **failures**: a call that returned an error.
//! - **releases**: one per guard or lease released, explicitly or by drop.
//! - **wait time**: from the call to the grant, for calls that obtained something, in
//!   microseconds (an HdrHistogram, 3 significant digits, up to one hour; longer waits
//!   are recorded as one hour).
//!
//! An acquire future dropped before it settled counts nowhere.
//!
//! # Exporting
//! [`LockMetrics::export`] also reports a sink through the [`metrics`] facade, so the
//! service's own exporter (`metrics-exporter-prometheus`, or any other recorder)
//! publishes it with the rest of its metrics, labelled `lock="<name>"`:
//!
//! | name | type | |
//! |---|---|---|
//! | `zlock_client_lock_acquisitions_total` | counter | guards and leases obtained |
//! | `zlock_client_lock_timeouts_total` | counter | `try_acquire` / `acquire_timeout` that got nothing |
//! | `zlock_client_lock_failures_total` | counter | acquire calls that failed |
//! | `zlock_client_lock_releases_total` | counter | guards and leases released |
//! | `zlock_client_lock_wait_seconds` | histogram | from the call to the grant |
//!
//! The failure rate to alert on is then
//! `rate(zlock_client_lock_failures_total[5m]) / (rate(zlock_client_lock_acquisitions_total[5m])
//! + rate(zlock_client_lock_timeouts_total[5m]) + rate(zlock_client_lock_failures_total[5m]))`.
//!
//! # Default
//! Every recipe reports to [`LockMetrics::global`] unless given another sink with
//! `with_metrics` (or `without_metrics`). Observability is on by default because a
//! service should not have to wire anything to see how its locks behave, and the
//! cost (a few relaxed atomic adds and one short, uncontended mutex for the histogram
//! per acquire) is negligible next to the network round trips an acquire makes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), zlock::Error> {
//! use zlock::recipes::{LockMetrics, Mutex};
//! use zlock::Client;
//!
//! let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
//! let metrics = LockMetrics::new();
//! let lock = Mutex::new(zk, "/locks/orders").with_metrics(metrics.clone());
//! lock.acquire().await?.release().await?;
//! let s = metrics.snapshot();
//! println!("acquired {} p99 wait {} µs, failure rate {}", s.acquisitions, s.wait_p99_us, s.failure_rate());
//!
//! // With the service's recorder installed (e.g. metrics-exporter-prometheus's
//! // PrometheusBuilder::new().install()), one call publishes every recipe's default
//! // sink as zlock_client_lock_*{lock="all"}:
//! LockMetrics::global().export("all");
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::Result;

/// The longest wait the histogram tells apart: one hour, in microseconds.
const MAX_WAIT_US: u64 = 3_600_000_000;

/// A sink for lock metrics. Cheap to clone (clones share the counters); safe to share
/// between recipes, tasks and threads.
#[derive(Clone)]
pub struct LockMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    acquisitions: AtomicU64,
    timeouts: AtomicU64,
    failures: AtomicU64,
    releases: AtomicU64,
    /// A std mutex: each critical section is one `record` call, never held across an
    /// await.
    wait_us: std::sync::Mutex<Histogram<u64>>,
    /// The `metrics` facade's handles, once [`LockMetrics::export`]ed.
    exported: OnceLock<Exported>,
}

/// Handles on the recorder that was installed when the sink was exported.
struct Exported {
    acquisitions: metrics::Counter,
    timeouts: metrics::Counter,
    failures: metrics::Counter,
    releases: metrics::Counter,
    wait_seconds: metrics::Histogram,
}

/// A point-in-time copy of a [`LockMetrics`], for export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockMetricsSnapshot {
    pub acquisitions: u64,
    pub timeouts: u64,
    pub failures: u64,
    pub releases: u64,
    /// Wait-time quantiles and maximum over the acquisitions, in microseconds (0 if
    /// none yet).
    pub wait_p50_us: u64,
    pub wait_p99_us: u64,
    pub wait_p999_us: u64,
    pub wait_max_us: u64,
}

impl LockMetricsSnapshot {
    /// `failures / (acquisitions + timeouts + failures)`: the share of outcomes that
    /// were errors (a semaphore lease counts as one outcome); 0.0 before any.
    pub fn failure_rate(&self) -> f64 {
        let calls = self.acquisitions + self.timeouts + self.failures;
        if calls == 0 {
            0.0
        } else {
            self.failures as f64 / calls as f64
        }
    }
}

impl Default for LockMetrics {
    fn default() -> Self {
        LockMetrics::new()
    }
}

impl std::fmt::Debug for LockMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LockMetrics")
            .field(&self.snapshot())
            .finish()
    }
}

impl LockMetrics {
    /// A fresh, zeroed sink.
    pub fn new() -> LockMetrics {
        #[allow(clippy::expect_used)] // constant bounds, valid for HdrHistogram
        let histogram =
            Histogram::new_with_bounds(1, MAX_WAIT_US, 3).expect("valid histogram bounds");
        LockMetrics {
            inner: Arc::new(Inner {
                acquisitions: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                releases: AtomicU64::new(0),
                wait_us: std::sync::Mutex::new(histogram),
                exported: OnceLock::new(),
            }),
        }
    }

    /// The process-wide sink every recipe reports to by default.
    pub fn global() -> &'static LockMetrics {
        static GLOBAL: OnceLock<LockMetrics> = OnceLock::new();
        GLOBAL.get_or_init(LockMetrics::new)
    }

    /// Also reports this sink through the [`metrics`] facade, labelled `lock="<name>"`
    /// (the names are in the module doc), to the recorder installed now: install the
    /// service's recorder (its Prometheus exporter) first. The counters start at the
    /// counts so far; waits are reported from now on. Returns false, and changes
    /// nothing, if the sink was exported already. Clones share the export.
    pub fn export(&self, name: &str) -> bool {
        let lock = name.to_owned();
        let mut fresh = false;
        let e = self.inner.exported.get_or_init(|| {
            fresh = true;
            describe();
            Exported {
                acquisitions: metrics::counter!(ACQUISITIONS, "lock" => lock.clone()),
                timeouts: metrics::counter!(TIMEOUTS, "lock" => lock.clone()),
                failures: metrics::counter!(FAILURES, "lock" => lock.clone()),
                releases: metrics::counter!(RELEASES, "lock" => lock.clone()),
                wait_seconds: metrics::histogram!(WAIT_SECONDS, "lock" => lock),
            }
        });
        if fresh {
            let i = &self.inner;
            e.acquisitions
                .absolute(i.acquisitions.load(Ordering::Relaxed));
            e.timeouts.absolute(i.timeouts.load(Ordering::Relaxed));
            e.failures.absolute(i.failures.load(Ordering::Relaxed));
            e.releases.absolute(i.releases.load(Ordering::Relaxed));
        }
        fresh
    }

    /// The current counts and wait-time quantiles.
    pub fn snapshot(&self) -> LockMetricsSnapshot {
        let i = &self.inner;
        let h = i
            .wait_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        LockMetricsSnapshot {
            acquisitions: i.acquisitions.load(Ordering::Relaxed),
            timeouts: i.timeouts.load(Ordering::Relaxed),
            failures: i.failures.load(Ordering::Relaxed),
            releases: i.releases.load(Ordering::Relaxed),
            wait_p50_us: h.value_at_quantile(0.5),
            wait_p99_us: h.value_at_quantile(0.99),
            wait_p999_us: h.value_at_quantile(0.999),
            wait_max_us: h.max(),
        }
    }

    /// The share of outcomes that were errors; see
    /// [`LockMetricsSnapshot::failure_rate`].
    pub fn failure_rate(&self) -> f64 {
        self.snapshot().failure_rate()
    }

    /// Records how an acquire call that started at `started` settled; `count` is how
    /// many guards or leases a successful call obtained.
    pub(crate) fn observe<T>(&self, started: Instant, outcome: &Result<Option<T>>, count: u64) {
        match outcome {
            Ok(Some(_)) => self.acquired(count, started.elapsed()),
            Ok(None) => {
                self.inner.timeouts.fetch_add(1, Ordering::Relaxed);
                if let Some(e) = self.inner.exported.get() {
                    e.timeouts.increment(1);
                }
            }
            Err(_) => {
                self.inner.failures.fetch_add(1, Ordering::Relaxed);
                if let Some(e) = self.inner.exported.get() {
                    e.failures.increment(1);
                }
            }
        }
    }

    fn acquired(&self, count: u64, waited: Duration) {
        self.inner.acquisitions.fetch_add(count, Ordering::Relaxed);
        if let Some(e) = self.inner.exported.get() {
            e.acquisitions.increment(count);
            e.wait_seconds.record(waited.as_secs_f64());
        }
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.inner
            .wait_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .saturating_record(us.clamp(1, MAX_WAIT_US));
    }

    pub(crate) fn released(&self) {
        self.inner.releases.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = self.inner.exported.get() {
            e.releases.increment(1);
        }
    }
}

const ACQUISITIONS: &str = "zlock_client_lock_acquisitions_total";
const TIMEOUTS: &str = "zlock_client_lock_timeouts_total";
const FAILURES: &str = "zlock_client_lock_failures_total";
const RELEASES: &str = "zlock_client_lock_releases_total";
const WAIT_SECONDS: &str = "zlock_client_lock_wait_seconds";

/// The help texts, for exporters that publish them.
fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(ACQUISITIONS, "Lock guards and semaphore leases obtained");
    metrics::describe_counter!(
        TIMEOUTS,
        "try_acquire / acquire_timeout calls that obtained nothing"
    );
    metrics::describe_counter!(FAILURES, "Lock acquire calls that returned an error");
    metrics::describe_counter!(RELEASES, "Lock guards and semaphore leases released");
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from an acquire call to the grant"
    );
}

/// Records on an optional sink (recipes built `without_metrics` have none).
pub(crate) fn observe<T>(
    metrics: Option<&LockMetrics>,
    started: Instant,
    outcome: &Result<Option<T>>,
    count: u64,
) {
    if let Some(m) = metrics {
        m.observe(started, outcome, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn counts_and_rate() {
        let m = LockMetrics::new();
        let t = Instant::now();
        m.observe(t, &Ok(Some(())), 1);
        m.observe(t, &Ok(Some(())), 2);
        m.observe::<()>(t, &Ok(None), 1);
        m.observe::<()>(t, &Err(Error::Closed), 1);
        m.released();
        let s = m.snapshot();
        assert_eq!(
            (s.acquisitions, s.timeouts, s.failures, s.releases),
            (3, 1, 1, 1)
        );
        assert!((s.failure_rate() - 0.2).abs() < 1e-9);
        assert!(s.wait_max_us >= s.wait_p50_us && s.wait_p50_us >= 1);
        assert_eq!(LockMetrics::new().failure_rate(), 0.0);
    }
}
