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

#[derive(Debug)]
pub struct Stats {
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    /// Native lock grants pushed (each one hand-over).
    pub lock_grants: AtomicU64,
    pub started: Instant,
    conns: Mutex<HashMap<u64, Arc<ConnInfo>>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            packets_received: AtomicU64::new(0),
            packets_sent: AtomicU64::new(0),
            lock_grants: AtomicU64::new(0),
            started: Instant::now(),
            conns: Mutex::new(HashMap::new()),
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
