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
//! - `metrics`: Prometheus metrics over HTTP (`metricsProvider.*`), ZooKeeper's names
//!   and zlock's own; the list of what is exported and what not is its module doc.
//!
//! # Data directory
//! `<dataDir>/snapshots/snapshot.<index>` and `<dataLogDir or dataDir>/wal/log.<first
//! index>`; formats are documented in the `zlock-store` crate.

mod clock;
pub mod commit;
pub mod config;
pub mod recovery;

mod admin;
mod ensemble;
mod http;
mod metrics;
mod net;
mod pipeline;
mod snapshot;
pub mod stages;
mod stats;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

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
    #[error("{0}")]
    DataDir(String),
    #[error("the ensemble could not start: {0}")]
    Ensemble(String),
    #[error("TLS on the client port: {0}")]
    Tls(#[from] tls::TlsError),
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
/// stopped and the port is closed. With [`ServerConfig::ensemble`] set, this server is
/// a member of a replicated ensemble (see [`commit::raft`]).
pub async fn serve(
    config: ServerConfig,
    mut listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    tokio::pin!(shutdown);
    config.validate()?;
    config.check_standalone()?;
    let config = Arc::new(config);
    check_data_dir(&config)?;
    stages::start(config.ensemble.as_ref().map_or(0, |e| e.me));

    let (commit_tx, commit_rx) = mpsc::channel(config.global_outstanding_limit.max(1));
    let (fatal_tx, mut fatal_rx) = watch::channel(None::<String>);
    // Bound first: a port in use stops the start, as in ZooKeeper.
    let metrics_listener = match config.metrics.enabled {
        true => {
            let addr = SocketAddr::new(config.metrics.http_host, config.metrics.http_port);
            Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServerError::Bind { addr, source })?,
            )
        }
        false => None,
    };
    let admin_listener = match config.admin.enabled {
        true => {
            let addr = SocketAddr::new(config.admin.server_address, config.admin.server_port);
            Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServerError::Bind { addr, source })?,
            )
        }
        false => None,
    };
    // TLS on the client port: the stores are read now, so a bad one stops the start.
    let acceptor = match config.tls.enabled() {
        true => Some(tokio_rustls::TlsAcceptor::from(tls::server_config(
            &config.tls,
        )?)),
        false => None,
    };
    let secure = match (config.tls.secure_client_port, &acceptor) {
        (Some(port), Some(acceptor)) => {
            let ip = config
                .tls
                .secure_client_port_address
                .unwrap_or(config.client_port_address);
            let listener = bind(SocketAddr::new(ip, port), config.listen_backlog)?;
            Some((listener, acceptor.clone()))
        }
        _ => None,
    };
    let plain_port = match acceptor {
        Some(a) if config.tls.port_unification => net::tls::Port::Unified(a),
        _ => net::tls::Port::Plain,
    };
    let registry = metrics::registry(&config.metrics);
    let timings = registry.as_ref().map(|r| r.timings());
    let stats = Arc::new(stats::Stats::with_timings(timings.clone()));
    let snapshots = snapshot::SnapshotWorker::start(
        config.snapshot_dir(),
        commit_tx.clone(),
        timings.as_ref().map(|t| t.snapshot.clone()),
    )
    .map_err(ServerError::Thread)?;

    let (state, recovered) = match &config.ensemble {
        None => {
            let cfg = config.clone();
            let r = tokio::task::spawn_blocking(move || recovery::recover(&cfg))
                .await
                .map_err(|e| ServerError::Thread(std::io::Error::other(e.to_string())))??;
            let last = LogIndex(r.wal.last_index());
            (r.state, Some((r.wal, last)))
        }
        // A member's state comes from its Raft snapshot and log (below).
        Some(e) => {
            let mut st = zlock_core::State::new(zlock_core::Config {
                extended_types: config.extended_types,
            });
            // `/zookeeper/config` shows this member's configuration, as each ZooKeeper
            // server writes its own into its DataTree at startup: a member-local view
            // at read time, never logged (see `zlock_core::ConfigNode` for why). The
            // configuration is the static one from zoo.cfg, so its version is 0.
            st.config_node = Some(zlock_core::ConfigNode {
                data: e.dynamic_config(0).into_bytes(),
                version: 0,
                mtime: clock::now_ms(),
            });
            (st, None)
        }
    };
    let long_reads = pipeline::long_read::LongReads::start().map_err(ServerError::Thread)?;
    let mut core =
        pipeline::core::Core::new(config.clone(), state, stats.clone(), snapshots, long_reads);
    core.start_clocks();
    let core = Arc::new(std::sync::Mutex::new(core));

    let apply = pipeline::core::CoreApply {
        core: core.clone(),
        dirty: Vec::new(),
    };
    let spin = config.commit_spin();
    let mut member_tasks = Vec::new();
    let mut barrier = None;
    let mut reconfig = None;
    let mut quorum = None;
    let mut raft_handle = None;
    let mut handover = None;
    let mut held = Vec::new();
    let mut commit_thread = match recovered {
        Some((wal, last)) => Sequencing::Thread(match &timings {
            None => spawn_sequencer(
                commit::WalCommit::new(wal, last, apply),
                commit_rx,
                core.clone(),
                spin,
                fatal_tx,
            )?,
            Some(t) => spawn_sequencer(
                commit::WalCommit::new(
                    commit::Timed::new(wal, t.fsync.clone(), t.batch.clone()),
                    last,
                    apply,
                ),
                commit_rx,
                core.clone(),
                spin,
                fatal_tx,
            )?,
        }),
        None => {
            // Until the member runs (a blank one waits for its peers), the client port
            // answers four-letter words as a member that serves nobody, and holds the
            // clients' connections for the accept loop.
            let (started, starting) = tokio::sync::oneshot::channel();
            let waiting = tokio::spawn(net::listener::while_starting(
                listener,
                config.clone(),
                starting,
            ));
            // Stopped meanwhile (a blank member may wait for its peers for as long as
            // they are down): nothing has been served, nothing is lost.
            let member = tokio::select! {
                m = ensemble::start(&config, apply, core.clone(), commit_tx.clone(), &timings) => Some(m),
                () = &mut shutdown => None,
            };
            let _ = started.send(());
            (listener, held) = waiting
                .await
                .map_err(|e| ServerError::Thread(std::io::Error::other(e.to_string())))?;
            let Some(member) = member else {
                tracing::info!("stopped before the member started");
                return Ok(());
            };
            let ensemble::Member { raft, tasks, touch } = member?;
            member_tasks = tasks;
            quorum = Some(touch);
            barrier = Some(Arc::new(raft.barrier()));
            reconfig = Some(raft.reconfigurer());
            raft_handle = Some(raft.raft().clone());
            handover = Some(raft.hand_over_handle());
            // On the member's runtime: see `RaftSequencer`.
            let sequencer = pipeline::sequencer::RaftSequencer {
                commit: raft,
                rx: commit_rx,
                core: core.clone(),
                fatal: fatal_tx,
            };
            Sequencing::Task(tokio::spawn(sequencer.run()))
        }
    };

    let (tick_stop, ticker) = pipeline::ticker::start_ticker(core.clone(), commit_tx.clone())
        .map_err(ServerError::Thread)?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let metrics_task = match (metrics_listener, registry) {
        (Some(listener), Some(registry)) => {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(%addr, "serving Prometheus metrics at /metrics");
            }
            let ctx = metrics::http::Context {
                registry,
                stats: stats.clone(),
                commit: commit_tx.clone(),
            };
            Some(tokio::spawn(metrics::serve(listener, ctx, stop_rx.clone())))
        }
        _ => None,
    };
    let admin_task = admin_listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, url = %config.admin.command_url, "serving the admin server");
        }
        let ctx = admin::http::Context {
            config: config.clone(),
            commit: commit_tx.clone(),
            quorum: quorum.clone(),
        };
        tokio::spawn(admin::http::serve(listener, ctx, stop_rx.clone()))
    });
    let shared = Arc::new(net::Shared {
        config: config.clone(),
        commit: commit_tx.clone(),
        core,
        stats,
        next_conn_id: AtomicU64::new(1),
        barrier,
        reconfig,
        quorum,
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "zlock serving");
    }
    let secure_accept = secure.map(|(listener, acceptor)| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "zlock serving TLS clients");
        }
        tokio::spawn(net::listener::accept_loop(
            listener,
            Vec::new(),
            shared.clone(),
            stop_rx.clone(),
            net::tls::Port::Secure(acceptor),
        ))
    });
    let accept = tokio::spawn(net::listener::accept_loop(
        listener, held, shared, stop_rx, plain_port,
    ));

    let fatal = tokio::select! {
        _ = &mut shutdown => None,
        _ = fatal_rx.changed() => fatal_rx.borrow().clone(),
    };
    tracing::info!("shutting down");
    if let (Some(h), None) = (&handover, &fatal) {
        // A leader hands over first, while its clients are still connected: they
        // find the new leader as soon as they move.
        h.run().await;
    }
    let _ = stop_tx.send(true);
    let _ = accept.await;
    if let Some(t) = secure_accept {
        let _ = t.await;
    }
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    let _ = commit_tx.send(pipeline::Item::Shutdown).await;
    drop(commit_tx);
    drop(tick_stop);
    for t in &member_tasks {
        t.abort();
    }
    if let Sequencing::Task(t) = &mut commit_thread {
        let _ = t.await;
    }
    let _ = tokio::task::spawn_blocking(move || {
        if let Sequencing::Thread(t) = commit_thread {
            let _ = t.join();
        }
        let _ = ticker.join();
    })
    .await;
    if let Some(raft) = raft_handle {
        // openraft's tasks apply into the core: they stop before serve returns.
        let _ = raft.shutdown().await;
    }
    stages::dump();
    match fatal {
        Some(e) => Err(ServerError::Log(e)),
        None => Ok(()),
    }
}

/// Refuses a data directory written by the other kind of server: a standalone
/// server's log is not a Raft log, and a member's Raft log is not a standalone log.
fn check_data_dir(config: &ServerConfig) -> Result<(), ServerError> {
    let has_files =
        |dir: &std::path::Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
    match &config.ensemble {
        Some(_) if has_files(&config.wal_dir()) => Err(ServerError::DataDir(format!(
            "{} holds a standalone server's log; an ensemble member starts on an empty \
             dataDir (its state comes from the ensemble)",
            config.wal_dir().display()
        ))),
        None if has_files(&ensemble::raft_dir(config)) => Err(ServerError::DataDir(format!(
            "{} holds an ensemble member's Raft log; start it with its server.N lines and \
             myid, or use another dataDir for a standalone server",
            ensemble::raft_dir(config).display()
        ))),
        _ => Ok(()),
    }
}

/// Where the sequencer runs: its own thread beside the WAL (the fused fast path), or a
/// task on an ensemble member's runtime.
enum Sequencing {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

fn spawn_sequencer<C: commit::Commit>(
    commit: C,
    rx: mpsc::Receiver<pipeline::Item>,
    core: Arc<std::sync::Mutex<pipeline::core::Core>>,
    spin: Duration,
    fatal: watch::Sender<Option<String>>,
) -> Result<std::thread::JoinHandle<()>, ServerError> {
    let sequencer = pipeline::sequencer::Sequencer {
        commit,
        rx,
        core,
        spin,
        fatal,
    };
    std::thread::Builder::new()
        .name("zlock-commit".into())
        .spawn(move || sequencer.run())
        .map_err(ServerError::Thread)
}
