//! The zlock server: a ZooKeeper-wire-compatible, durable coordination server.
//!
//! Start with `ARCHITECTURE.md` at the repository's root: the stages, the threads, and
//! which state is replicated and which member-local.
//!
//! [`serve`] takes a bound listener and a shutdown future, so tests bind port 0 and run
//! the real server in-process; [`bind`] makes a listener with a large backlog.
//!
//! # Layout
//! - `server`: the start and the stop, phase by phase (what [`serve`] calls, in order).
//! - [`config`]: defaults, `zoo.cfg` keys, validation.
//! - [`tls`]: the client port's TLS (`secureClientPort`, `ssl.*`): stores, the rustls
//!   configuration, a client certificate's x509 identity; `net::tls` carries the bytes.
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
//! - `admin::http`, `admin::json`: ZooKeeper's AdminServer (`admin.*`), the
//!   commands as JSON over HTTP, and zlock's `locks` and `sessions`.
//! - `http`: the small bounded HTTP/1 server under the metrics endpoint and the
//!   AdminServer.
//! - [`zk_import`]: `zlock import --from-zookeeper`: ZooKeeper's snapshot and logs
//!   replayed as ZooKeeper recovers them, written as a zlock snapshot.
//! - `metrics`: Prometheus metrics over HTTP (`metricsProvider.*`), ZooKeeper's names
//!   and zlock's own; the list of what is exported and what not is its module doc.
//!
//! # Data directory
//! `<dataDir>/snapshots/snapshot.<index>` and `<dataLogDir or dataDir>/wal/log.<first
//! index>`; formats are documented in the `zlock-store` crate.

mod clock;
pub mod commit;
pub mod config;
mod conn;
pub mod recovery;
pub mod restore;

mod admin;
pub mod backup;
mod ensemble;
mod free;
mod http;
mod metrics;
mod net;
mod pipeline;
mod server;
mod snapshot;
pub mod stages;
mod stats;
pub mod tls;
pub mod zk_import;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

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
    Log(#[source] Fatal),
    #[error("cannot start a server thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    DataDir(#[from] DataDirMix),
    #[error("the ensemble could not start: {0}")]
    Ensemble(#[from] ensemble::StartError),
    #[error("TLS on the client port: {0}")]
    Tls(#[from] tls::TlsError),
    /// `sslQuorum` or `portUnification` with a quorum store that cannot be read.
    #[error("TLS between members: {0}")]
    QuorumTls(#[source] tls::TlsError),
}

/// Why the commit stage stopped the server (shared: the sequencer sends it, the
/// server's shell returns it).
pub type Fatal = Arc<commit::CommitError>;

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
/// stopped and the port is closed. With [`ServerConfig::ensemble`] set, this server is
/// a member of a replicated ensemble (see [`commit::raft`]).
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    tokio::pin!(shutdown);
    config.validate()?;
    config.check_standalone()?;
    let config = Arc::new(config);
    check_data_dir(&config)?;
    stages::start(config.ensemble.as_ref().map_or(0, |e| e.me));
    let ports = server::Ports::bind(&config).await?;

    let (items, items_rx) = mpsc::channel(config.global_outstanding_limit.max(1));
    let (fatal, mut fatal_rx) = watch::channel(None::<Fatal>);
    let timings = ports.timings();
    let stats = Arc::new(stats::Stats::with_timings(timings.clone()));
    let snapshots = snapshot::SnapshotWorker::start(
        config.snapshot_dir(),
        items.clone(),
        timings.as_ref().map(|t| t.snapshot.clone()),
    )
    .map_err(ServerError::Thread)?;
    let (state, recovered) = server::recover(&config).await?;
    let long_reads = pipeline::long_read::LongReads::start().map_err(ServerError::Thread)?;
    let mut core =
        pipeline::core::Core::new(config.clone(), state, stats.clone(), snapshots, long_reads);
    core.start_clocks();
    let p = server::Pipeline {
        config,
        core: Arc::new(std::sync::Mutex::new(core)),
        stats,
        timings,
        items,
        fatal,
    };

    let started = server::start_commit(
        &p,
        recovered,
        items_rx,
        (listener, ports.links.clone()),
        shutdown.as_mut(),
    )
    .await?;
    let Some((sequencing, member, listener, held)) = started else {
        tracing::info!("stopped before the member started");
        return Ok(());
    };
    let running = server::Running::serve(&p, (sequencing, member), ports, (listener, held))?;
    drop(p);

    let fatal = tokio::select! {
        _ = &mut shutdown => None,
        _ = fatal_rx.changed() => fatal_rx.borrow().clone(),
    };
    tracing::info!("shutting down");
    running.stop(fatal.is_some()).await;
    stages::dump();
    match fatal {
        Some(e) => Err(ServerError::Log(e)),
        None => Ok(()),
    }
}

/// A data directory written by the other kind of server.
#[derive(Debug, Error)]
pub enum DataDirMix {
    #[error(
        "{} holds a standalone server's log; an ensemble member starts on an empty \
         dataDir (its state comes from the ensemble)",
        .0.display()
    )]
    StandaloneLog(std::path::PathBuf),
    #[error(
        "{} holds an ensemble member's Raft log; start it with its server.N lines and \
         myid, or use another dataDir for a standalone server",
        .0.display()
    )]
    MemberLog(std::path::PathBuf),
}

/// Refuses a data directory written by the other kind of server: a standalone
/// server's log is not a Raft log, and a member's Raft log is not a standalone log.
fn check_data_dir(config: &ServerConfig) -> Result<(), ServerError> {
    let has_files =
        |dir: &std::path::Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
    match &config.ensemble {
        Some(_) if has_files(&config.wal_dir()) => {
            Err(DataDirMix::StandaloneLog(config.wal_dir()).into())
        }
        None if has_files(&ensemble::raft_dir(config)) => {
            Err(DataDirMix::MemberLog(ensemble::raft_dir(config)).into())
        }
        _ => Ok(()),
    }
}
