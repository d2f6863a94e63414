//! A member of an ensemble: the Raft commit stage started over the core, and the three
//! member tasks beside it (leadership into the core, session activity to the leader,
//! whether a quorum answers).
//!
//! Data directory: `<dataDir>/raft/` holds the vote, the purge point and
//! `snapshots/`; the log is `<dataLogDir or dataDir>/raft/log/`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use zlock_core::SessionId;
use zlock_store::WalOptions;

use crate::commit::raft::{log, peer, RaftCommit, RaftOptions, Reporter};
use crate::config::ServerConfig;
use crate::pipeline::core::{locked, Core, CoreApply};
use crate::pipeline::Item;
use crate::pipeline::TICK;
use crate::ServerError;

/// Writes configuration `v` back beside `file` (see `config::dynamic`), logging the
/// outcome: a failure only means a restart reads the older member list (the log still
/// holds the membership).
async fn write_config_back(file: PathBuf, v: &crate::commit::raft::members::ConfigView, me: u64) {
    let client = v.members.iter().any(|m| m.id == me && m.client.is_some());
    let (text, version) = (v.text(), v.version);
    let done = tokio::task::spawn_blocking(move || {
        crate::config::dynamic::write_back(&file, version, &text, client)
    })
    .await;
    match done {
        Ok(Ok(path)) => tracing::info!(
            version = format!("{version:x}"),
            file = %path.display(),
            "the configuration written back (the static file points at it)"
        ),
        Ok(Err(e)) => tracing::warn!(
            error = %e,
            "cannot write the configuration back: a restart reads the older member list"
        ),
        Err(e) => tracing::warn!(error = %e, "writing the configuration back"),
    }
}

/// Where a member keeps its Raft state (the vote, snapshots).
pub(crate) fn raft_dir(config: &ServerConfig) -> PathBuf {
    config.data_dir.join("raft")
}

pub(crate) fn raft_log_dir(config: &ServerConfig) -> PathBuf {
    config
        .data_log_dir
        .as_ref()
        .unwrap_or(&config.data_dir)
        .join("raft")
        .join("log")
}

/// Whether this member is in touch with a quorum (see [`Reporter::touch`]), and how
/// long it may go without before it is not.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Touch {
    pub in_touch: bool,
    pub silent: Duration,
}

/// A started member: the commit stage for the sequencer, the tasks to stop at
/// shutdown, and whether a quorum answers it.
pub(crate) struct Member {
    pub raft: RaftCommit,
    pub tasks: Vec<JoinHandle<()>>,
    pub touch: watch::Receiver<Touch>,
}

/// Why this member could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no ensemble configured")]
    NotConfigured,
    #[error("member {0} is not in the ensemble")]
    NotAMember(u64),
    #[error("cannot create {}: {source}", .path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the Raft log: {0}")]
    Log(#[source] std::io::Error),
    #[error("cannot listen on {addr} (the quorum port): {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("the member's Raft could not start: {0}")]
    Raft(#[source] crate::commit::CommitError),
    #[error("reading or keeping the ensemble's identity: {0}")]
    Identity(#[source] zlock_store::StoreError),
    #[error(
        "this member's data directory belongs to ensemble {stored}, but zlock.ensembleId \
         says {configured}: a member joins only the ensemble its directory was made for"
    )]
    OtherIdentity { stored: String, configured: String },
}

/// The file in a member's Raft directory that holds its ensemble's identity.
pub(crate) const IDENTITY_FILE: &str = "ensemble-id";

/// This member's ensemble identity: its directory's (`zlock snapshot restore` wrote it),
/// else `zlock.ensembleId`'s, which is then kept in the directory; none for an ensemble
/// that was not restored.
fn identity(config: &ServerConfig, dir: &std::path::Path) -> Result<Option<String>, StartError> {
    let io = StartError::Identity;
    let mut file = zlock_store::MetaFile::open(dir, IDENTITY_FILE).map_err(io)?;
    let stored = file
        .load()
        .map_err(io)?
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    match (stored, &config.ensemble_id) {
        (Some(stored), Some(configured)) if &stored != configured => {
            Err(StartError::OtherIdentity {
                stored,
                configured: configured.clone(),
            })
        }
        (Some(stored), _) => Ok(Some(stored)),
        (None, Some(configured)) => {
            file.store(configured.as_bytes()).map_err(io)?;
            Ok(Some(configured.clone()))
        }
        (None, None) => Ok(None),
    }
}

/// How this member's links with the others are secured: plain, or TLS from the
/// `ssl.quorum.*` stores, which are read here (a store that cannot be read stops the
/// start, naming its key and file). Called when the ports are bound, before anything
/// starts, standalone too.
pub(crate) fn links(config: &ServerConfig) -> Result<peer::Links, crate::tls::TlsError> {
    let q = &config.tls.quorum;
    if !q.enabled() {
        return Ok(peer::Links::default());
    }
    let links = peer::Links::tls(
        q.ssl_quorum,
        q.port_unification,
        crate::tls::quorum::server_config(&config.tls)?,
        crate::tls::quorum::client_config(&config.tls)?,
        Duration::from_millis(q.handshake_timeout_ms),
    );
    tracing::info!(
        dial = if q.ssl_quorum { "tls" } else { "plain" },
        accept = match (q.ssl_quorum, q.port_unification) {
            (_, true) => "tls and plain (portUnification)",
            (true, false) => "tls only",
            (false, false) => "plain only",
        },
        hostname_verification = q.hostname_verification,
        "links between members"
    );
    Ok(links)
}

/// Starts this member's Raft over `apply` and the member tasks, its links with the
/// others secured as `links` says.
pub(crate) async fn start(
    config: &ServerConfig,
    links: peer::Links,
    apply: CoreApply,
    core: Arc<Mutex<Core>>,
    items: mpsc::Sender<Item>,
    timings: &Option<crate::stats::Timings>,
) -> Result<Member, ServerError> {
    let Some(e) = &config.ensemble else {
        return Err(StartError::NotConfigured.into());
    };
    let me = e.members.get(&e.me).ok_or(StartError::NotAMember(e.me))?;
    let addrs = |observers: bool| {
        e.members
            .values()
            .filter(|m| m.observer == observers)
            .map(|m| (m.id, m.quorum_addr()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (members, observers) = (addrs(false), addrs(true));
    // Every member's line, observers included: members that disagree about who
    // observes do not talk. With reconfiguration the members' lists legitimately differ
    // (a member being added lists itself, the others do not yet), so the name is
    // fixed: the Raft log, not the files, says who the members are then.
    let ensemble = match config.reconfig_enabled {
        true => "zlock-reconfigurable".to_owned(),
        false => e.member_lines(),
    };
    let dir = raft_dir(config);
    std::fs::create_dir_all(&dir).map_err(|source| StartError::Dir {
        path: dir.clone(),
        source,
    })?;
    // An ensemble made by a restore has an identity of its own, in its name: members of
    // another identity (the ensemble the backup came from, whose member lines may be
    // the same) are refused at the hello, both ways.
    let ensemble = match identity(config, &dir)? {
        Some(id) => format!("{ensemble} (ensemble id {id})"),
        None => ensemble,
    };
    let opts = RaftOptions {
        me: e.me,
        members,
        observers,
        specs: e.members.clone(),
        reconfig: config.reconfig_enabled,
        ensemble,
        heartbeat_ms: e.heartbeat_ms,
        election_min_ms: e.election_min_ms,
        election_max_ms: e.election_max_ms,
        snapshot_every: Some(config.snap_count.max(1)),
        // Entries kept behind a snapshot for a follower a little behind (it catches up
        // from the log; one further behind gets the snapshot, as ZooKeeper's followers
        // get a SNAP past the leader's committed log). An entry holds at least one Txn,
        // so this keeps at least a snapshot interval's worth of Txns, up to 1,000
        // entries.
        keep_behind_snapshot: config.snap_count.clamp(1, 1_000),
        snapshot_dir: dir.join("snapshots"),
        meta_dir: dir.clone(),
        links,
    };
    let wal_opts = WalOptions {
        preallocate_bytes: config.wal_preallocate_bytes,
        ..WalOptions::default()
    };
    let (log_dir, meta_dir) = (raft_log_dir(config), dir.clone());
    let (wal, records) =
        tokio::task::spawn_blocking(move || log::open_wal(&log_dir, &meta_dir, wal_opts))
            .await
            .map_err(|x| StartError::Log(std::io::Error::other(x)))?
            .map_err(StartError::Log)?;
    let listener = tokio::net::TcpListener::bind(me.quorum_addr())
        .await
        .map_err(|source| StartError::Listen {
            addr: me.quorum_addr(),
            source,
        })?;
    let touch_core = core.clone();
    let hooks = peer::Hooks {
        touch: Arc::new(move |sessions: Vec<i64>| {
            let ids: Vec<SessionId> = sessions.into_iter().map(SessionId).collect();
            locked(&touch_core, |c| c.touched_elsewhere(&ids));
        }),
    };
    tracing::info!(
        member = e.me,
        quorum = %me.quorum_addr(),
        members = e.members.len(),
        observer = e.is_observer(),
        "starting as an ensemble member"
    );
    let mut raft = match timings {
        None => RaftCommit::start_with(opts, apply, wal, records, listener, hooks).await,
        Some(t) => {
            let wal = crate::commit::Timed::new(wal, t.fsync.clone(), t.batch.clone());
            RaftCommit::start_with(opts, apply, wal, records, listener, hooks).await
        }
    }
    .map_err(StartError::Raft)?;

    // With reconfiguration, `/zookeeper/config` follows the committed membership (see
    // `commit::raft::members`), its version the log position of the membership entry
    // that made it. Without, the membership is zoo.cfg's (observers are added to it as
    // learners once, which changes nothing a client sees), shown at version 0 as
    // ZooKeeper shows a static configuration.
    let config_view = config.reconfig_enabled.then(|| {
        let mut membership = raft.membership();
        let fixed = e.members.clone();
        let core = core.clone();
        let write_back = config.config_file.clone();
        let me = e.me;
        let mut written = 0;
        tokio::spawn(async move {
            loop {
                let view =
                    crate::commit::raft::members::view(&membership.borrow_and_update(), &fixed);
                if let Some(v) = view {
                    locked(&core, |c| c.set_config_view(v.text(), v.version));
                    // A configuration a reconfiguration made (not the first one, version
                    // 0) goes back to the file this member starts from.
                    if let Some(file) = write_back.clone().filter(|_| v.version > written) {
                        written = v.version;
                        write_config_back(file, &v, me).await;
                    }
                }
                if membership.changed().await.is_err() {
                    return;
                }
            }
        })
    });
    let leadership = {
        let r = raft.reporter();
        let core = core.clone();
        tokio::spawn(async move {
            r.on_leadership(|leads| {
                locked(&core, |c| c.set_leader(leads));
            })
            .await
        })
    };
    // What the writer could not carry through reaches the sequencer in order with the
    // items queued meanwhile (see `Item::Trouble`).
    let troubles = {
        let mut rx = raft.troubles();
        let items = items.clone();
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if items.send(Item::Trouble(e)).await.is_err() {
                    return; // stopping
                }
            }
        })
    };
    let (touch_tx, touch) = watch::channel(Touch {
        in_touch: false,
        silent: raft.reporter().silent(),
    });
    let quorum = {
        let r = raft.reporter();
        let core = core.clone();
        tokio::spawn(watch_quorum(r, core, items, touch_tx))
    };
    let reports = {
        let mut r = raft.reporter();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(TICK);
            let mut pending: Vec<i64> = Vec::new();
            let stats = locked(&core, |c| c.stats());
            let mut leaderless = Leaderless::default();
            loop {
                every.tick().await;
                let facts = r.facts();
                leaderless.saw(facts.leader.is_some(), &stats);
                let fresh = locked(&core, |c| {
                    c.saw_ensemble(facts);
                    c.take_touched()
                });
                if r.leads() {
                    pending.clear();
                    continue;
                }
                pending.extend(fresh.into_iter().map(|s| s.0));
                pending.sort_unstable();
                pending.dedup();
                if pending.is_empty() {
                    continue;
                }
                if r.report(&pending, TICK * 5).await {
                    pending.clear();
                }
            }
        })
    };
    Ok(Member {
        raft,
        tasks: [leadership, reports, quorum, troubles]
            .into_iter()
            .chain(config_view)
            .collect(),
        touch,
    })
}

/// Follows whether a quorum answers this member ([`Reporter::touch`]; a member that a
/// `reconfig` removed never is in touch). On losing touch the
/// member stops expiring sessions (if it leads) and closes every client connection
/// ([`Item::OutOfTouch`], in order with its proposals) so they move to a member that
/// can serve them, as from a ZooKeeper server that lost its quorum; new sessions wait
/// for touch (see `net::connection`).
async fn watch_quorum(
    r: Reporter,
    core: Arc<Mutex<Core>>,
    items: mpsc::Sender<Item>,
    tx: watch::Sender<Touch>,
) {
    let mut touch = r.touch();
    let mut was = false;
    loop {
        let now = *touch.borrow_and_update();
        if now == was {
            if touch.changed().await.is_err() {
                return; // stopping
            }
            continue;
        }
        was = now;
        locked(&core, |c| c.set_in_touch(now));
        if !now && items.send(Item::OutOfTouch).await.is_err() {
            return; // stopping
        }
        if now {
            tracing::info!("in touch with a quorum");
        } else if r.removed() {
            tracing::warn!(
                "removed from the ensemble's configuration: serving nobody, closing client \
                 connections (stop this member, or add it again with reconfig)"
            );
        } else {
            tracing::warn!(
                silent = ?r.silent(),
                "out of touch with the quorum: closing client connections"
            );
        }
        tx.send_modify(|t| t.in_touch = now);
    }
}

/// Elections as ZooKeeper's metrics count them, seen every [`TICK`]: each time this
/// member knows no leader counts one `looking_count`, and the time until it knows one
/// again is an `election_time` (ms).
#[derive(Default)]
struct Leaderless {
    since: Option<std::time::Instant>,
}

impl Leaderless {
    fn saw(&mut self, leader_known: bool, stats: &crate::stats::Stats) {
        match (leader_known, self.since) {
            (false, None) => {
                self.since = Some(std::time::Instant::now());
                stats
                    .looking
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (true, Some(t)) => {
                self.since = None;
                if let Some(timings) = &stats.timings {
                    timings.election.record(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            _ => {}
        }
    }
}
