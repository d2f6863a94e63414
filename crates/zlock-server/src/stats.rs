//! Counters shared by the connection tasks and the core, for the four-letter
//! words and metrics.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// One connection's counters.
#[derive(Debug)]
pub struct ConnInfo {
    pub addr: SocketAddr,
    pub received: AtomicU64,
    pub sent: AtomicU64,
    /// 0 until the handshake completes.
    pub session: AtomicI64,
    pub since: SystemTime,
}

/// This member's counters. Each is one relaxed atomic add where it happens; the
/// metrics endpoint (`crate::metrics`) reads them at scrape time. The byte and
/// connection counters are ZooKeeper's `ServerMetrics` counters of the same names.
#[derive(Debug, Default)]
pub struct Stats {
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    /// Bytes of client frames read (ZooKeeper's `bytes_received_count`: every whole
    /// frame, length prefix included).
    pub bytes_received: AtomicU64,
    /// Bytes of replies queued (ZooKeeper's `response_bytes`), length prefix included.
    pub response_bytes: AtomicU64,
    /// Bytes of watch events and native lock grants queued (ZooKeeper's `watch_bytes`
    /// counts watch events; a grant is zlock's notification of the same kind).
    pub watch_bytes: AtomicU64,
    /// Connect requests (session handshakes) received: ZooKeeper's
    /// `connection_request_count`, which four-letter words do not count.
    pub connect_requests: AtomicU64,
    /// Client connections refused by `maxClientCnxns` (`connection_rejected`).
    pub connections_rejected: AtomicU64,
    /// Native lock grants pushed (each one hand-over).
    pub lock_grants: AtomicU64,
    /// Native lock requests received (opcode Lock, with or without a release).
    pub lock_requests: AtomicU64,
    /// Native lock requests from this member answered with an error.
    pub lock_failures: AtomicU64,
    /// Sessions expired by this member's tracker (ZooKeeper's `stale_sessions_expired`).
    pub sessions_expired: AtomicU64,
    /// Times this ensemble member found itself without a known leader (`looking_count`).
    pub looking: AtomicU64,
    /// AdminServer `snapshot` commands that failed (`snapshot_error_count`).
    pub snapshot_errors: AtomicU64,
    /// AdminServer `snapshot` commands refused by the rate limit
    /// (`snapshot_rate_limited_count`).
    pub snapshots_rate_limited: AtomicU64,
    /// AdminServer `restore` commands that failed (`restore_error_count`).
    pub restore_errors: AtomicU64,
    /// AdminServer `restore` commands refused by the rate limit
    /// (`restore_rate_limited_count`).
    pub restores_rate_limited: AtomicU64,
    pub started: Started,
    /// The summaries recorded on the request path; `None` while metrics are off.
    pub timings: Option<Timings>,
    conns: Mutex<HashMap<u64, Arc<ConnInfo>>>,
}

/// When the server started (a newtype so that [`Stats`] can derive `Default`).
#[derive(Debug, Clone, Copy)]
pub struct Started(pub Instant);

impl Default for Started {
    fn default() -> Self {
        Started(Instant::now())
    }
}

impl Started {
    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }
}

/// Summaries observed where they happen, all in ms as in ZooKeeper. Recording one is a
/// lock-free append to the exporter's bucket (see `crate::metrics`); the summaries are
/// computed at scrape time.
#[derive(Debug, Clone)]
pub struct Timings {
    /// A write's latency: received to answered (`updatelatency`).
    pub update: metrics::Histogram,
    /// A read's latency: received to answered (`readlatency`).
    pub read: metrics::Histogram,
    /// One snapshot written (`snapshottime`).
    pub snapshot: metrics::Histogram,
    /// One lock hand-over: from the releasing Txn's time (when this member sequenced
    /// it) to the grant queued to the waiter's connection (`zlock_lock_handover_ms`).
    pub handover: metrics::Histogram,
    /// Txns written by one fsync of the log: the group commit's batch
    /// (`sync_processor_batch_size`, ZooKeeper's requests per flush).
    pub batch: metrics::Histogram,
    /// One fsync of the log (`fsynctime`); handed to the log writer.
    pub fsync: metrics::Histogram,
    /// Without a known leader until one is known (`election_time`; ensemble members).
    pub election: metrics::Histogram,
}

impl Stats {
    /// Counters with the request-path summaries of `timings` (metrics on).
    pub fn with_timings(timings: Option<Timings>) -> Stats {
        Stats {
            timings,
            ..Stats::default()
        }
    }
}

impl Stats {
    pub fn add_conn(&self, id: u64, addr: SocketAddr) -> Arc<ConnInfo> {
        let info = Arc::new(ConnInfo {
            addr,
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            session: AtomicI64::new(0),
            since: SystemTime::now(),
        });
        if let Ok(mut m) = self.conns.lock() {
            m.insert(id, info.clone());
        }
        info
    }

    pub fn remove_conn(&self, id: u64) {
        if let Ok(mut m) = self.conns.lock() {
            m.remove(&id);
        }
    }

    /// Connections, oldest first.
    pub fn conns(&self) -> Vec<Arc<ConnInfo>> {
        let mut v: Vec<_> = self
            .conns
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|c| c.since);
        v
    }

    pub fn conn_count(&self) -> usize {
        self.conns.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Connections from one IP (for maxClientCnxns).
    pub fn conns_from(&self, ip: std::net::IpAddr) -> usize {
        self.conns
            .lock()
            .map(|m| m.values().filter(|c| c.addr.ip() == ip).count())
            .unwrap_or(0)
    }

    pub fn reset(&self) {
        self.packets_received.store(0, Ordering::Relaxed);
        self.packets_sent.store(0, Ordering::Relaxed);
        for c in self.conns() {
            c.received.store(0, Ordering::Relaxed);
            c.sent.store(0, Ordering::Relaxed);
        }
    }
}

/// Request latency, ms, as ZooKeeper reports it (min/avg/max).
#[derive(Debug, Default, Clone)]
pub struct Latency {
    pub min: Option<f64>,
    pub max: f64,
    pub total: f64,
    pub count: u64,
}

impl Latency {
    pub fn record(&mut self, ms: f64) {
        self.min = Some(self.min.map_or(ms, |m| m.min(ms)));
        self.max = self.max.max(ms);
        self.total += ms;
        self.count += 1;
    }

    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total / self.count as f64
        }
    }
}
