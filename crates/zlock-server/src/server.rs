//! The server's start and stop, phase by phase: [`crate::serve`] calls these in order.
//!
//! 1. [`Ports::bind`]: every port but the client port (which the caller bound), and the
//!    TLS stores, so that a port in use or a bad store stops the start before anything
//!    runs, as in ZooKeeper.
//! 2. [`recover`]: the state to serve from (the single node's snapshot and log; a
//!    member's empty state, which its Raft restores).
//! 3. [`start_commit`]: the commit stage and the sequencer: the WAL's thread, or an
//!    ensemble member's Raft and its sequencer task (a blank member may wait for its
//!    peers; meanwhile the client port answers four-letter words and holds clients).
//! 4. [`Running::serve`]: the ticker, the HTTP endpoints and the accept loops.
//! 5. [`Running::stop`]: a leader hands over, then everything stops in order.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use zlock_core::{LogIndex, State};

use crate::commit::raft::reconfig::Reconfigurer;
use crate::commit::raft::types::Raft;
use crate::commit::raft::{Barrier, HandOver};
use crate::config::ServerConfig;
use crate::pipeline::core::{Core, CoreApply};
use crate::pipeline::Item;
use crate::stats::{Stats, Timings};
use crate::{admin, clock, commit, ensemble, metrics, net, pipeline, recovery, tls, ServerError};

/// The ports bound before anything starts.
pub(crate) struct Ports {
    /// The metrics endpoint's ports (plain HTTP, HTTPS, or one for both) and registry
    /// (the server's timings live in it).
    pub metrics: Option<(MetricsPorts, Arc<metrics::Registry>)>,
    pub admin: Option<(TcpListener, Option<crate::http::Https>)>,
    /// `secureClientPort`'s listener, with its TLS acceptor.
    pub secure: Option<(TcpListener, tls::reload::Acceptor)>,
    /// The client port's TLS acceptor when `client.certReload` asks that its stores
    /// be read again as they change.
    pub reload: Option<tls::reload::Acceptor>,
    /// What the plain client port does about TLS (`client.portUnification`).
    pub plain: net::tls::Port,
    /// How an ensemble member's links are secured (`sslQuorum`, `portUnification`).
    pub links: crate::commit::raft::peer::Links,
}

impl Ports {
    /// The server's timings, kept in the metrics registry (none without one).
    pub fn timings(&self) -> Option<Timings> {
        self.metrics.as_ref().map(|(_, r)| r.timings())
    }

    pub async fn bind(config: &ServerConfig) -> Result<Ports, ServerError> {
        let metrics = match config.metrics.enabled {
            true => Some(metrics_ports(config).await?).zip(metrics::registry(&config.metrics)),
            false => None,
        };
        let admin = listen(
            config.admin.enabled,
            SocketAddr::new(config.admin.server_address, config.admin.server_port),
        )
        .await?;
        // The admin server's HTTPS: its stores are read now too.
        let admin = match admin {
            Some(l) if config.admin.https() => {
                let tls = tls::admin_config(&config.tls, config.admin.need_client_auth)?;
                let https = crate::http::Https {
                    acceptor: tokio_rustls::TlsAcceptor::from(tls),
                    unified: !config.admin.force_https,
                    tls: Arc::new(config.tls.clone()),
                };
                Some((l, Some(https)))
            }
            other => other.map(|l| (l, None)),
        };
        // The stores are read now, so a bad one stops the start.
        let acceptor = match config.tls.enabled() {
            true => Some(tls::reload::acceptor(tls::server_config(&config.tls)?)),
            false => None,
        };
        let reload = acceptor.clone().filter(|_| config.tls.cert_reload);
        // TLS only: the caller's client listener is the secure port (see
        // `ServerConfig::client_listen_addr`), so no second listener here.
        let secure = match (config.tls.secure_client_port, &acceptor) {
            (Some(port), Some(acceptor)) if !config.tls.tls_only => {
                let ip = config
                    .tls
                    .secure_client_port_address
                    .unwrap_or(config.client_port_address);
                let listener = crate::bind(SocketAddr::new(ip, port), config.listen_backlog)?;
                Some((listener, acceptor.clone()))
            }
            _ => None,
        };
        let plain = match acceptor {
            Some(a) if config.tls.tls_only => net::tls::Port::Secure(a),
            Some(a) if config.tls.port_unification => net::tls::Port::Unified(a),
            _ => net::tls::Port::Plain,
        };
        // The quorum stores too (standalone as well: a bad store is a bad start).
        let links = ensemble::links(config).map_err(ServerError::QuorumTls)?;
        Ok(Ports {
            metrics,
            admin,
            secure,
            plain,
            reload,
            links,
        })
    }
}

/// The metrics endpoint's listeners, each with its HTTPS if it has one.
type MetricsPorts = Vec<(TcpListener, Option<crate::http::Https>)>;

/// Binds the metrics endpoint's ports: `httpPort` (plain), `httpsPort` (HTTPS, its
/// stores read now so a bad one stops the start), or one port for both when they are
/// the same (ZooKeeper 3.9's unified connector).
async fn metrics_ports(config: &ServerConfig) -> Result<MetricsPorts, ServerError> {
    let m = &config.metrics;
    let at = |port| SocketAddr::new(m.http_host, port);
    let https = match m.https_port {
        Some(port) => Some((
            port,
            crate::http::Https {
                acceptor: tokio_rustls::TlsAcceptor::from(tls::metrics_config(&m.tls)?),
                unified: false,
                tls: Arc::new(config.tls.clone()),
            },
        )),
        None => None,
    };
    let plain = m.plain_http.then_some(m.http_port);
    let mut ports = Vec::new();
    match (plain, https) {
        (Some(p), Some((q, mut h))) if p == q => {
            h.unified = true;
            ports.extend(listen(true, at(p)).await?.map(|l| (l, Some(h))));
        }
        (plain, https) => {
            if let Some(p) = plain {
                ports.extend(listen(true, at(p)).await?.map(|l| (l, None)));
            }
            if let Some((q, h)) = https {
                ports.extend(listen(true, at(q)).await?.map(|l| (l, Some(h))));
            }
        }
    }
    Ok(ports)
}

async fn listen(enabled: bool, addr: SocketAddr) -> Result<Option<TcpListener>, ServerError> {
    if !enabled {
        return Ok(None);
    }
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|source| ServerError::Bind { addr, source })
}

/// The single node's log after recovery, and its last position.
pub(crate) type Recovered = (zlock_store::Wal, LogIndex);

/// The state to serve from: the single node's recovered state and log; a member's
/// empty state (its Raft snapshot and log restore it once it starts).
pub(crate) async fn recover(
    config: &Arc<ServerConfig>,
) -> Result<(State, Option<Recovered>), ServerError> {
    let Some(e) = &config.ensemble else {
        let cfg = config.clone();
        let r = tokio::task::spawn_blocking(move || recovery::recover(&cfg))
            .await
            .map_err(|e| ServerError::Thread(std::io::Error::other(e.to_string())))??;
        let last = LogIndex(r.wal.last_index());
        return Ok((r.state, Some((r.wal, last))));
    };
    let mut st = State::new(zlock_core::Config {
        extended_types: config.extended_types,
    });
    // `/zookeeper/config` shows this member's configuration, as each ZooKeeper server
    // writes its own into its DataTree at startup: a member-local view at read time,
    // never logged (see `zlock_core::ConfigNode` for why). The configuration is the
    // static one from zoo.cfg, so its version is 0.
    st.config_node = Some(zlock_core::ConfigNode {
        data: e.dynamic_config(0).into_bytes(),
        version: 0,
        mtime: clock::now_ms(),
    });
    Ok((st, None))
}

/// Where the sequencer runs: its own thread beside the WAL (the fused fast path), or a
/// task on an ensemble member's runtime.
pub(crate) enum Sequencing {
    Thread(std::thread::JoinHandle<()>),
    Task(JoinHandle<()>),
}

/// What an ensemble member adds to the server (all empty on the single node).
#[derive(Default)]
pub(crate) struct MemberParts {
    pub tasks: Vec<JoinHandle<()>>,
    /// Whether this member is in touch with a quorum.
    pub quorum: Option<watch::Receiver<ensemble::Touch>>,
    pub barrier: Option<Arc<Barrier>>,
    pub reconfig: Option<Arc<Reconfigurer>>,
    /// openraft, stopped last (its tasks apply into the core).
    pub raft: Option<Raft>,
    /// A leader hands leadership over first thing when it stops.
    pub handover: Option<HandOver>,
}

/// What the pipeline's stages share once they run.
pub(crate) struct Pipeline {
    pub config: Arc<ServerConfig>,
    pub core: Arc<Mutex<Core>>,
    pub stats: Arc<Stats>,
    pub timings: Option<Timings>,
    pub items: mpsc::Sender<Item>,
    /// Set once, with why, if the commit stage fails (the server then stops).
    pub fatal: watch::Sender<Option<crate::Fatal>>,
}

/// The commit stage and the sequencer, started; the client listener comes back with
/// the connections a starting member held. `None`: `shutdown` came first (a blank
/// member may wait for its peers as long as they are down; nothing was served).
pub(crate) async fn start_commit(
    p: &Pipeline,
    recovered: Option<Recovered>,
    rx: mpsc::Receiver<Item>,
    (listener, links): (TcpListener, crate::commit::raft::peer::Links),
    shutdown: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<
    Option<(
        Sequencing,
        MemberParts,
        TcpListener,
        Vec<net::listener::Held>,
    )>,
    ServerError,
> {
    let apply = CoreApply {
        core: p.core.clone(),
        dirty: Vec::new(),
    };
    if let Some((wal, last)) = recovered {
        let (core, spin, fatal) = (p.core.clone(), p.config.commit_spin(), p.fatal.clone());
        let thread = match &p.timings {
            None => spawn_sequencer(
                commit::WalCommit::new(wal, last, apply),
                rx,
                core,
                spin,
                fatal,
            )?,
            Some(t) => {
                let timed = commit::Timed::new(wal, t.fsync.clone(), t.batch.clone());
                spawn_sequencer(
                    commit::WalCommit::new(timed, last, apply),
                    rx,
                    core,
                    spin,
                    fatal,
                )?
            }
        };
        let parts = MemberParts::default();
        return Ok(Some((
            Sequencing::Thread(thread),
            parts,
            listener,
            Vec::new(),
        )));
    }
    // Until the member runs, the client port answers four-letter words as a member that
    // serves nobody, and holds the clients' connections for the accept loop.
    let (started, starting) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(net::listener::while_starting(
        listener,
        p.config.clone(),
        starting,
    ));
    let member = tokio::select! {
        m = ensemble::start(&p.config, links, apply, p.core.clone(), p.items.clone(), &p.timings) => Some(m),
        () = shutdown => None,
    };
    let _ = started.send(());
    let (listener, held) = waiting
        .await
        .map_err(|e| ServerError::Thread(std::io::Error::other(e.to_string())))?;
    let Some(member) = member else {
        return Ok(None);
    };
    let ensemble::Member { raft, tasks, touch } = member?;
    let parts = MemberParts {
        tasks,
        quorum: Some(touch),
        barrier: Some(Arc::new(raft.barrier())),
        reconfig: Some(raft.reconfigurer()),
        raft: Some(raft.raft().clone()),
        handover: Some(raft.hand_over_handle()),
    };
    // On the member's runtime: see `RaftSequencer`.
    let sequencer = pipeline::sequencer::RaftSequencer {
        commit: raft,
        rx,
        core: p.core.clone(),
        fatal: p.fatal.clone(),
    };
    Ok(Some((
        Sequencing::Task(tokio::spawn(sequencer.run())),
        parts,
        listener,
        held,
    )))
}

fn spawn_sequencer<C: commit::Commit>(
    commit: C,
    rx: mpsc::Receiver<Item>,
    core: Arc<Mutex<Core>>,
    spin: Duration,
    fatal: watch::Sender<Option<crate::Fatal>>,
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

/// The tasks that read TLS stores again as their files change: the client port's
/// acceptor (`client.certReload`) and the peer links' (`sslQuorumReloadCertFiles`).
fn watch_tls_stores(
    p: &Pipeline,
    reload: Option<tls::reload::Acceptor>,
    links: &crate::commit::raft::peer::Links,
    stopping: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(acceptor) = reload {
        tasks.push(tokio::spawn(tls::reload::watch_stores(
            acceptor,
            p.config.tls.clone(),
            stopping.clone(),
        )));
    }
    let q = &p.config.tls.quorum;
    if q.enabled() && q.reload_cert_files {
        let cfg = p.config.tls.clone();
        let files = tls::reload::store_files(&[&cfg.quorum_key_store, &cfg.quorum_trust_store]);
        let links = links.clone();
        tasks.push(tokio::spawn(tls::reload::watch_files(
            "sslQuorumReloadCertFiles",
            files,
            move || links.reload(&cfg),
            stopping.clone(),
        )));
    }
    tasks
}

/// The Prometheus endpoint, if configured.
fn serve_metrics(
    p: &Pipeline,
    metrics: Option<(MetricsPorts, Arc<metrics::Registry>)>,
    stopping: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let (listeners, registry) = metrics?;
    for (listener, https) in &listeners {
        if let Ok(addr) = listener.local_addr() {
            let scheme = match https {
                None => "http",
                Some(h) if h.unified => "http and https",
                Some(_) => "https",
            };
            tracing::info!(%addr, scheme, "serving Prometheus metrics at /metrics");
        }
    }
    let ctx = metrics::http::Context {
        registry,
        stats: p.stats.clone(),
        commit: p.items.clone(),
    };
    Some(tokio::spawn(metrics::serve(listeners, ctx, stopping)))
}

/// The admin server, if configured.
fn serve_admin(
    p: &Pipeline,
    member: &MemberParts,
    admin: Option<(TcpListener, Option<crate::http::Https>)>,
    stopping: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let (listener, https) = admin?;
    if let Ok(addr) = listener.local_addr() {
        let scheme = match (&https, p.config.admin.force_https) {
            (None, _) => "http",
            (Some(_), true) => "https",
            (Some(_), false) => "http and https",
        };
        tracing::info!(%addr, url = %p.config.admin.command_url, scheme, "serving the admin server");
    }
    let ctx = admin::http::Context {
        config: p.config.clone(),
        commit: p.items.clone(),
        quorum: member.quorum.clone(),
        stats: p.stats.clone(),
        last_snapshot: std::sync::Mutex::new(None),
        last_restore: std::sync::Mutex::new(None),
    };
    Some(tokio::spawn(admin::http::serve(
        listener, ctx, https, stopping,
    )))
}

/// A running server: what [`Running::stop`] stops, in order.
pub(crate) struct Running {
    items: mpsc::Sender<Item>,
    sequencing: Sequencing,
    member: MemberParts,
    tick_stop: std::sync::mpsc::Sender<()>,
    ticker: std::thread::JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// The accept loops, then the HTTP endpoints.
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts the ticker, the HTTP endpoints and the accept loops (the plain client
    /// port on `listener`, with the connections `held` while a member started).
    pub fn serve(
        p: &Pipeline,
        (sequencing, member): (Sequencing, MemberParts),
        ports: Ports,
        (listener, held): (TcpListener, Vec<net::listener::Held>),
    ) -> Result<Running, ServerError> {
        let (tick_stop, ticker) = pipeline::ticker::start_ticker(p.core.clone(), p.items.clone())
            .map_err(ServerError::Thread)?;
        let (stop, stopping) = watch::channel(false);
        let shared = Arc::new(net::Shared {
            config: p.config.clone(),
            commit: p.items.clone(),
            core: p.core.clone(),
            stats: p.stats.clone(),
            next_conn_id: AtomicU64::new(1),
            barrier: member.barrier.clone(),
            reconfig: member.reconfig.clone(),
            quorum: member.quorum.clone(),
        });
        let mut tasks = Vec::new();
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "zlock serving");
        }
        if let Some((listener, acceptor)) = ports.secure {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(%addr, "zlock serving TLS clients");
            }
            let port = net::tls::Port::Secure(acceptor);
            let (shared, stopping) = (shared.clone(), stopping.clone());
            tasks.push(tokio::spawn(net::listener::accept_loop(
                listener,
                Vec::new(),
                shared,
                stopping,
                port,
            )));
        }
        tasks.extend(watch_tls_stores(p, ports.reload, &ports.links, &stopping));
        let plain =
            net::listener::accept_loop(listener, held, shared, stopping.clone(), ports.plain);
        tasks.push(tokio::spawn(plain));
        tasks.extend(serve_metrics(p, ports.metrics, stopping.clone()));
        tasks.extend(serve_admin(p, &member, ports.admin, stopping));
        Ok(Running {
            items: p.items.clone(),
            sequencing,
            member,
            tick_stop,
            ticker,
            stop,
            tasks,
        })
    }

    /// Stops the server: a leader hands leadership over first (unless the commit stage
    /// failed), while its clients are still connected, so that they find the new leader
    /// as soon as they move; then the ports close, the sequencer and the ticker stop,
    /// and openraft last (its tasks apply into the core).
    pub async fn stop(self, failed: bool) {
        if let (Some(h), false) = (&self.member.handover, failed) {
            h.run().await;
        }
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.items.send(Item::Shutdown).await;
        drop(self.items);
        drop(self.tick_stop);
        for t in &self.member.tasks {
            t.abort();
        }
        let mut sequencing = self.sequencing;
        if let Sequencing::Task(t) = &mut sequencing {
            let _ = t.await;
        }
        let ticker = self.ticker;
        let _ = tokio::task::spawn_blocking(move || {
            if let Sequencing::Thread(t) = sequencing {
                let _ = t.join();
            }
            let _ = ticker.join();
        })
        .await;
        if let Some(raft) = self.member.raft {
            let _ = raft.shutdown().await;
        }
    }
}
