//! `zlock-bench lock`: lock scenarios against a ZooKeeper-protocol server (zlock or
//! Apache ZooKeeper, through the zlock client and its recipes), Redis (`SET NX PX` +
//! Lua compare-and-delete, waiters poll with backoff) or etcd (Lock API with a lease).
//!
//! Scenarios (one per invocation; `bench/compare` runs them all):
//! - A: 1 client, one lock, uncontended acquire+release for `--secs`.
//! - B: 16 clients on 16 different locks for `--secs`.
//! - C: 101 clients, one lock, one cycle each, incrementing a counter stored in the
//!   system under test; connect time and wall time apart, mutual exclusion and the
//!   final counter checked.
//! - D: 101 clients, one lock, 20 cycles each: hand-overs/s and the spread of waits.
//! - E: herd: N waiters through a counting proxy: messages and bytes per hand-over.
//! - F: scale: many sessions queued on one lock: server memory, hand-over cost.
//!
//! # Layout
//! - `backend`: the systems under test behind `Target` / `Session` / `Lock` (the
//!   failover benchmark uses them too).
//! - `scenarios`: A to E. `scale`: F. `proxy`: the counting TCP proxy of E.

pub(crate) mod backend;
mod proxy;
mod scale;
mod scenarios;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

pub use backend::{Recipe, System};

/// `--lock-path`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockPathArg {
    Auto,
    Native,
    Recipe,
}

impl From<LockPathArg> for zlock::LockPath {
    fn from(a: LockPathArg) -> zlock::LockPath {
        match a {
            LockPathArg::Auto => zlock::LockPath::Auto,
            LockPathArg::Native => zlock::LockPath::Native,
            LockPathArg::Recipe => zlock::LockPath::Recipe,
        }
    }
}

/// Scenario letters.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    A,
    B,
    C,
    D,
    E,
    F,
    /// The seeds' scale: 1,000 sessions on 1,000 locks, for `--secs`.
    G,
    /// 1,000 sessions on 10 locks (100 contenders on each), for `--secs`.
    H,
}

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
    zlock-bench lock --scenario a --server 127.0.0.1:2181\n  \
    zlock-bench lock --scenario d --system redis --server 127.0.0.1:6379 --json\n  \
    zlock-bench lock --scenario e --recipe naive --clients 33\n  \
    zlock-bench lock --scenario f --clients 10000 --server-pid 1234\n\n\
    Defaults per scenario: A 1 client, B 16, C 101, D 101 x 20 cycles, E 33 clients\n\
    (32 waiters) x 5 cycles, F 10000 sessions and 200 measured hand-overs, G 1000\n\
    sessions on 1000 locks, H 1000 sessions on 10 locks (--locks changes B's, G's and\n\
    H's number of locks).")]
pub struct LockArgs {
    /// Scenario: a, b, c, d, e, f, g, h
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// System under test
    #[arg(long, value_enum, default_value = "zk")]
    pub system: System,
    /// Address, host:port (a ZooKeeper connect string for --system zk)
    #[arg(long, short = 's', default_value = "127.0.0.1:2181")]
    pub server: String,
    /// ZooKeeper lock recipe
    #[arg(long, value_enum, default_value = "mutex")]
    pub recipe: Recipe,
    /// ZooKeeper protocol: `auto` takes zlock's one-round-trip native lock when the
    /// server offers it (Apache ZooKeeper does not), `recipe` always the standard recipe
    #[arg(long, value_enum, default_value = "auto")]
    pub lock_path: LockPathArg,
    /// The ZooKeeper `Mutex`'s combined requests. A, B, D: after a contender's first
    /// acquire, each cycle is `Mutex::reacquire` (release and queue again; on zlock's
    /// native path one request and one commit) and counts as acquire time; release times
    /// are not kept. C: the counter's write and the release are one multi
    /// (`MutexGuard::release_with`, the write fenced by the lock node)
    #[arg(long)]
    pub reacquire: bool,
    /// Clients (sessions); the default depends on the scenario
    #[arg(long, short = 'c')]
    pub clients: Option<usize>,
    /// Locks the sessions spread over in B, G and H (default: B and G one per session,
    /// H 10)
    #[arg(long)]
    pub locks: Option<usize>,
    /// Seconds to run A, B, G and H
    #[arg(long, default_value_t = 3.0)]
    pub secs: f64,
    /// Cycles per client for D (default 20); E: hand-overs counted = cycles x clients
    /// (default 5 x clients)
    #[arg(long)]
    pub cycles: Option<u64>,
    /// F: hand-overs measured from the full queue
    #[arg(long, default_value_t = 200)]
    pub handovers: usize,
    /// F: pid of the server process, to read its VmRSS
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Redis waiters: first retry delay, microseconds (doubles, with jitter)
    #[arg(long, default_value_t = 500)]
    pub redis_backoff_min_us: u64,
    /// Redis waiters: longest retry delay, milliseconds
    #[arg(long, default_value_t = 20)]
    pub redis_backoff_max_ms: u64,
    /// Redis: after each lock write (an acquire that took the lock, a release), `WAIT`
    /// until this many replicas have it (as Redisson does with replicas), failing the
    /// run if fewer do within 5 s. 0: no WAIT
    #[arg(long, default_value_t = 0)]
    pub redis_wait_replicas: u32,
    /// ZooKeeper protocol over TLS (the servers' secure client ports): the CAs (PEM) the
    /// server's certificate must chain to; as the `zlock` CLI's flag
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls-ca: the client certificate to present (PEM; the chain, or chain then key)
    #[arg(long, value_name = "PEM", requires = "tls_ca", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// With --tls-cert: its private key (PEM; may be the same file)
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Print one line of JSON instead of an indented object
    #[arg(long)]
    pub json: bool,
}

impl LockArgs {
    /// The TLS options of --tls-ca/--tls-cert/--tls-key; `None`: plain TCP.
    fn tls(&self) -> Option<zlock::TlsOptions> {
        let ca = self.tls_ca.as_ref()?;
        let tls = zlock::TlsOptions::new(ca);
        Some(match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => tls.client_cert(cert, key),
            _ => tls,
        })
    }
}

/// Runs one scenario and prints its figures.
pub async fn run(a: LockArgs) -> anyhow::Result<()> {
    let nonce = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
    let ns = match a.system {
        System::Zk => format!("/zlock-bench-lock/r{nonce}"),
        System::Redis => format!("zlock-bench-lock:r{nonce}"),
        System::Etcd => format!("/zlock-bench-lock/r{nonce}"),
    };
    let target = backend::Target {
        system: a.system,
        addr: a.server.clone(),
        recipe: a.recipe,
        lock_path: a.lock_path.into(),
        reacquire: a.reacquire,
        ns,
        redis_backoff_min: Duration::from_micros(a.redis_backoff_min_us.max(1)),
        redis_backoff_max: Duration::from_millis(a.redis_backoff_max_ms.max(1)),
        redis_wait_replicas: a.redis_wait_replicas,
        tls: a.tls(),
        stats: Arc::default(),
    };
    let mut out = match a.scenario {
        Scenario::A => scenarios::throughput(&target, a.clients.unwrap_or(1), 1, a.secs).await?,
        Scenario::B => {
            let n = a.clients.unwrap_or(16);
            scenarios::throughput(&target, n, a.locks.unwrap_or(n), a.secs).await?
        }
        Scenario::G => {
            let n = a.clients.unwrap_or(1000);
            scenarios::throughput(&target, n, a.locks.unwrap_or(n), a.secs).await?
        }
        Scenario::H => {
            let n = a.clients.unwrap_or(1000);
            scenarios::throughput(&target, n, a.locks.unwrap_or(10), a.secs).await?
        }
        Scenario::C => scenarios::orders(&target, a.clients.unwrap_or(101)).await?,
        Scenario::D => {
            scenarios::handovers(&target, a.clients.unwrap_or(101), a.cycles.unwrap_or(20)).await?
        }
        Scenario::E => {
            let n = a.clients.unwrap_or(33);
            let h = a.cycles.unwrap_or(5) * n as u64;
            scenarios::herd(&target, n, h).await?
        }
        Scenario::F => {
            scale::scale(
                &target,
                a.clients.unwrap_or(10_000),
                a.handovers,
                a.server_pid,
            )
            .await?
        }
    };
    if let Value::Object(m) = &mut out {
        let mut head = serde_json::Map::new();
        head.insert("scenario".into(), json!(format!("{:?}", a.scenario)));
        head.insert(
            "system".into(),
            json!(format!("{:?}", a.system).to_lowercase()),
        );
        if a.system == System::Zk {
            head.insert(
                "recipe".into(),
                json!(format!("{:?}", a.recipe).to_lowercase()),
            );
            head.insert(
                "lock_path".into(),
                json!(format!("{:?}", a.lock_path).to_lowercase()),
            );
            head.insert("reacquire".into(), json!(a.reacquire));
            head.insert("tls".into(), json!(a.tls_ca.is_some()));
        }
        head.append(m);
        out = Value::Object(head);
    }
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

/// A latency histogram in microseconds (1 µs to 10 min, 3 significant digits).
pub(crate) fn histogram() -> Histogram<u64> {
    #[allow(clippy::expect_used)]
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant bounds are valid")
}

pub(crate) fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

/// p50 / p99 / p99.9 / max / mean of a histogram, microseconds.
pub(crate) fn summary(h: &Histogram<u64>) -> Value {
    json!({
        "count": h.len(),
        "p50": h.value_at_quantile(0.5),
        "p99": h.value_at_quantile(0.99),
        "p999": h.value_at_quantile(0.999),
        "max": h.max(),
        "mean": (h.mean() * 10.0).round() / 10.0,
    })
}

/// The distribution as `[percentile, µs]` pairs, for plots.
pub(crate) fn distribution(h: &Histogram<u64>) -> Value {
    const PCT: [f64; 20] = [
        0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.0, 99.0, 99.5, 99.7,
        99.9, 99.95, 99.97, 99.99, 100.0,
    ];
    Value::Array(
        PCT.iter()
            .map(|&p| json!([p, h.value_at_quantile(p / 100.0)]))
            .collect(),
    )
}

/// Opens `n` sessions, at most `parallel` connects in flight; returns them in order
/// and the seconds it took.
pub(crate) async fn connect_all(
    t: &backend::Target,
    n: usize,
    parallel: usize,
) -> anyhow::Result<(Vec<backend::Session>, f64)> {
    let started = std::time::Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let t = t.clone();
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await?;
            t.connect().await
        }));
    }
    let mut out = Vec::with_capacity(n);
    for task in tasks {
        out.push(task.await??);
    }
    Ok((out, started.elapsed().as_secs_f64()))
}

/// Closes sessions, `parallel` at a time.
pub(crate) async fn close_all(sessions: Vec<backend::Session>, parallel: usize) {
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut tasks = Vec::with_capacity(sessions.len());
    for s in sessions {
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await;
            s.close().await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
