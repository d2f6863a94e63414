//! The zlock server: a ZooKeeper-wire-compatible, durable coordination server.
//!
//! Start with `ARCHITECTURE.md` at the repository's root: the stages, the threads, and
//! which state is replicated and which member-local.
//!
//! [`serve`] takes a bound listener and a shutdown future, so tests bind port 0 and run
//! the real server in-process; [`bind`] makes a listener with a large backlog.
//!
//! # Layout
//! - [`config`]: defaults, `zoo.cfg` keys, validation.
//! - `net`: accept loop, one task per connection, four-letter words, outgoing queues.
//! - `pipeline`: the sequencer thread (requests become Txns with their origin), the core
//!   (state machine host: applies committed entries; the router answers this member's
//!   requests and pushes events and grants), and the ticker (session expiry through the
//!   core's session tracker). See its module doc for the stage diagram.
//! - `clock`: the monotonic clock the session tracker reads and the wall clock proposers
//!   fix into Txns.
//! - [`commit`]: the commit-stage trait, its contract, and the WAL implementation.
//! - [`recovery`]: snapshot + log replay at startup.
//! - `snapshot`: background snapshot writer.
//! - `admin`, `stats`: four-letter-word answers and counters.
//!
//! # Data directory
//! `<dataDir>/snapshots/snapshot.<index>` and `<dataLogDir or dataDir>/wal/log.<first
//! index>`; formats are documented in the `zlock-store` crate.

mod clock;
pub mod commit;
pub mod config;
pub mod recovery;

mod admin;
mod net;
mod pipeline;
mod snapshot;
mod stats;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use zlock_core::LogIndex;

pub use admin::VERSION;
pub use config::ServerConfig;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("recovery failed: {0}")]
    Recovery(#[from] recovery::RecoveryError),
    #[error("the write-ahead log failed: {0}")]
    Log(String),
    #[error("cannot start a server thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
}

/// Binds the client port with `clientPortListenBacklog` (ZooKeeper's default of 50 makes a burst
/// of clients wait for SYN retries).
pub fn bind(addr: SocketAddr, backlog: u32) -> Result<TcpListener, ServerError> {
    let err = |source| ServerError::Bind { addr, source };
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
        .map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    sock.bind(&addr.into()).map_err(err)?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)
        .map_err(err)?;
    TcpListener::from_std(sock.into()).map_err(err)
}

/// Runs the server on `listener` until `shutdown` completes (or the log fails).
/// Recovers the data directory first. On return the log is flushed, every thread has
/// stopped and the port is closed.
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    config.validate()?;
    config.check_standalone()?;
    let config = Arc::new(config);
    let cfg = config.clone();
    let recovered = tokio::task::spawn_blocking(move || recovery::recover(&cfg))
        .await
        .map_err(|e| ServerError::Thread(std::io::Error::other(e.to_string())))??;
    let last = LogIndex(recovered.wal.last_index());

    let (commit_tx, commit_rx) = mpsc::channel(config.global_outstanding_limit.max(1));
    let (fatal_tx, mut fatal_rx) = watch::channel(None::<String>);
    let stats = Arc::new(stats::Stats::default());

    let snapshots = snapshot::SnapshotWorker::start(config.snapshot_dir(), commit_tx.clone())
        .map_err(ServerError::Thread)?;
    let mut core = pipeline::core::Core {
        state: recovered.state,
        router: pipeline::router::Router::new(
            pipeline::core::STANDALONE,
            stats.clone(),
            pipeline::long_read::LongReads::start().map_err(ServerError::Thread)?,
        ),
        sessions: zlock_core::sessions::SessionTracker::new(
            pipeline::ticker::TICK.as_millis() as u64
        ),
        clock: clock::Clock::start(),
        config: config.clone(),
        snapshots,
        since_snapshot: 0,
        next_container_check: Instant::now()
            + Duration::from_millis(config.container_check_interval_ms),
        stopped: false,
    };
    core.start_clocks();
    let core = Arc::new(std::sync::Mutex::new(core));

    let apply = pipeline::core::CoreApply {
        core: core.clone(),
        dirty: Vec::new(),
    };
    let sequencer = pipeline::sequencer::Sequencer {
        commit: commit::WalCommit::new(recovered.wal, last, apply),
        rx: commit_rx,
        core: core.clone(),
        spin: config.commit_spin(),
        fatal: fatal_tx,
    };
    let commit_thread = std::thread::Builder::new()
        .name("zlock-commit".into())
        .spawn(move || sequencer.run())
        .map_err(ServerError::Thread)?;

    let (tick_stop, ticker) = pipeline::ticker::start_ticker(core.clone(), commit_tx.clone())
        .map_err(ServerError::Thread)?;

    let shared = Arc::new(net::Shared {
        config: config.clone(),
        commit: commit_tx.clone(),
        core,
        stats,
        next_conn_id: AtomicU64::new(1),
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "zlock serving");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let accept = tokio::spawn(net::listener::accept_loop(listener, shared, stop_rx));

    let fatal = tokio::select! {
        _ = shutdown => None,
        _ = fatal_rx.changed() => fatal_rx.borrow().clone(),
    };
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = accept.await;
    let _ = commit_tx.send(pipeline::Item::Shutdown).await;
    drop(commit_tx);
    drop(tick_stop);
    let _ = tokio::task::spawn_blocking(move || {
        let _ = commit_thread.join();
        let _ = ticker.join();
    })
    .await;
    match fatal {
        Some(e) => Err(ServerError::Log(e)),
        None => Ok(()),
    }
}
