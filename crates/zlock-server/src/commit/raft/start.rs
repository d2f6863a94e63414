//! Starting a member: the log, the state machine, openraft and the tasks around it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::leader::LeaderLink;
use super::peer::{self, Identity};
use super::touch::watch_touch;
use super::types::Raft;
use super::{failover, log, members, observers, reconfig, rejoin, sm, write};
use super::{CommitError, RaftCommit, RaftFailure, RaftOptions};
use crate::commit::{LogStore, Snapshots};

impl RaftCommit {
    /// Starts this member: opens the log over `disk` (whose `records` recovery read),
    /// restores `host` from the newest snapshot, serves peers on `listener` and, on a
    /// fresh member, initializes the ensemble's membership. Must be called within a
    /// tokio runtime (which then runs openraft).
    pub async fn start<H: Snapshots + Sync, D: LogStore>(
        opts: RaftOptions,
        host: H,
        disk: D,
        records: log::Records,
        listener: TcpListener,
    ) -> Result<RaftCommit, CommitError> {
        Self::start_with(opts, host, disk, records, listener, peer::Hooks::default()).await
    }

    /// As [`RaftCommit::start`], with what peers' reports are handed to.
    pub async fn start_with<H: Snapshots + Sync, D: LogStore>(
        opts: RaftOptions,
        host: H,
        disk: D,
        records: log::Records,
        listener: TcpListener,
        hooks: peer::Hooks,
    ) -> Result<RaftCommit, CommitError> {
        let mut config = opts.config()?;
        let io = |e: std::io::Error| CommitError::from(RaftFailure::Open(Arc::new(e)));
        let mut log = log::RaftLog::open(disk, records, &opts.meta_dir).map_err(io)?;
        let log_closer = log.closer();
        let gate = Arc::new(rejoin::Gate::open(&opts.meta_dir).map_err(io)?);
        let id = Arc::new(Identity {
            ensemble: opts.ensemble.clone(),
            me: opts.me,
            // Observers too: they forward writes and report sessions to the leader,
            // and the leader replicates to them.
            members: opts
                .members
                .keys()
                .chain(opts.observers.keys())
                .copied()
                .collect::<BTreeSet<_>>(),
            open: opts.reconfig,
            links: opts.links.clone(),
        });
        let observer = opts.observers.contains_key(&opts.me);
        let mut bootstrap = false;
        // A blank observer asks nobody where they stand: the question protects a vote
        // and acknowledgements that count for a quorum, and an observer has neither
        // (openraft's leader counts voters' acknowledgements only). Waiting for the
        // voters' answers would only delay its start, and the voters never wait for an
        // observer's answer (they ask `members`, the voters). It proposes no initial
        // membership either: a leader adds it once it leads.
        if !observer && log.is_blank().map_err(io)? {
            match rejoin::settle(&listener, id.clone(), &opts.members).await {
                rejoin::Found::Bootstrap => bootstrap = true,
                rejoin::Found::Join { floor, target } => {
                    // The gate first: a crash between the two leaves a blank member,
                    // which asks again.
                    gate.close_until(target).map_err(io)?;
                    log.set_vote(&floor).map_err(io)?;
                }
            }
        }
        let acks = Arc::new(rejoin::Acks::default());
        let local = peer::Local {
            view: log.view(),
            gate,
            acks: acks.clone(),
            snapshot_dir: opts.snapshot_dir.clone(),
            forwards: Arc::default(),
        };
        let snapshot_due = Arc::new(tokio::sync::Notify::new());
        let (sm, applied) = sm::StateMachine::open(
            host,
            opts.snapshot_dir.clone(),
            opts.snapshot_every,
            snapshot_due.clone(),
        )
        .map_err(io)?;
        let membership = sm.membership();
        let network = peer::Network {
            id: id.clone(),
            acks,
        };
        // A member whose catch-up gate is closed does not campaign until it opens
        // (`rejoin::open_when_caught_up` turns openraft's election timer on then).
        config.enable_elect = local.may_campaign();
        let raft = Raft::new(opts.me, Arc::new(config), network, log, sm)
            .await
            .map_err(RaftFailure::Fatal)?;
        let (stop, stopped) = watch::channel(false);
        let addrs = members::Addrs::new(
            raft.clone(),
            opts.members
                .iter()
                .chain(&opts.observers)
                .map(|(id, a)| (*id, a.clone()))
                .collect(),
        );
        let leader = Arc::new(reconfig::Leader::new(
            raft.clone(),
            opts.me,
            opts.specs.clone(),
            opts.patience(),
        ));
        let reconfigurer = Arc::new(reconfig::Reconfigurer {
            raft: raft.clone(),
            id: id.clone(),
            link: tokio::sync::Mutex::new(LeaderLink::new(raft.clone(), id.clone(), addrs.clone())),
            leader: leader.clone(),
            membership,
            patience: opts.patience(),
        });
        let silent = Duration::from_millis(opts.election_max_ms * 2);
        let (contact, broke) = failover::Contact::new(silent);
        if local.gate.target().is_some() {
            tokio::spawn(rejoin::open_when_caught_up(
                local.clone(),
                raft.clone(),
                stopped.clone(),
            ));
        }
        let watcher_local = local.clone();
        let server = tokio::spawn(peer::serve(
            listener,
            raft.clone(),
            (local, leader),
            id.clone(),
            hooks,
            contact.clone(),
            stopped.clone(),
        ));
        let watcher = failover::Watcher {
            raft: raft.clone(),
            id: id.clone(),
            addrs: addrs.clone(),
            voters: opts.members.clone(),
            contact: contact.clone(),
            lease: Duration::from_millis(opts.election_max_ms),
            heartbeat: Duration::from_millis(opts.heartbeat_ms),
            local: watcher_local,
        };
        tokio::spawn(watcher.run(broke, stopped.clone()));
        if observer {
            tokio::spawn(observers::confirm_leader(
                LeaderLink::new(raft.clone(), id.clone(), addrs.clone()),
                contact.clone(),
                Duration::from_millis(opts.heartbeat_ms),
                stopped.clone(),
            ));
        }
        let (touch_tx, touch) = watch::channel(false);
        tokio::spawn(watch_touch(
            raft.clone(),
            (contact, observer),
            (silent, Duration::from_millis(opts.heartbeat_ms)),
            touch_tx,
            stopped.clone(),
        ));
        // With reconfiguration, the configured observers are the first configuration's
        // (added by its first leaders); after that `reconfig` alone changes membership.
        if !opts.reconfig || bootstrap {
            let nodes = opts
                .observers
                .iter()
                .map(|(id, addr)| (*id, node_of(&opts, *id, addr)))
                .collect();
            tokio::spawn(observers::add_when_leading(
                raft.clone(),
                opts.me,
                nodes,
                opts.reconfig,
                (Duration::from_millis(opts.heartbeat_ms), opts.patience()),
                stopped.clone(),
            ));
        }
        tokio::spawn(snapshots_when_due(raft.clone(), snapshot_due, stopped));
        if bootstrap {
            let nodes: BTreeMap<u64, BasicNode> = opts
                .members
                .iter()
                .map(|(id, addr)| (*id, node_of(&opts, *id, addr)))
                .collect();
            // Every member that starts first proposes the same initial membership:
            // openraft accepts that, and no member has to be started first.
            if let Err(e) = raft.initialize(nodes).await {
                tracing::debug!(error = %e, "ensemble already initialized");
            }
        }
        let (orders, orders_rx) = tokio::sync::mpsc::channel(2);
        let (troubles_tx, troubles) = tokio::sync::mpsc::unbounded_channel();
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(
            write::Writer {
                raft: raft.clone(),
                me: opts.me,
                id: id.clone(),
                addrs: addrs.clone(),
                patience: opts.patience(),
                silent,
                touch: touch.clone(),
                orders: orders_rx,
                troubles: troubles_tx,
                failed: failed.clone(),
                wall: Arc::new(crate::clock::now_ms),
                dial: None,
            }
            .run(),
        );
        Ok(RaftCommit {
            raft,
            rt: tokio::runtime::Handle::current(),
            id,
            addrs,
            reconfigurer,
            orders,
            troubles,
            applied,
            patience: opts.patience(),
            failed,
            pending_syncs: Arc::default(),
            silent,
            touch,
            stop,
            server: std::sync::Mutex::new(Some(server)),
            log_closer,
        })
    }
}

/// Asks openraft for a snapshot each time the state machine says one is due, until
/// `stopped`.
async fn snapshots_when_due(
    raft: Raft,
    due: Arc<tokio::sync::Notify>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = due.notified() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
    }
}

/// Member `id`'s node for the membership: its `server.N` value if configured, else
/// its quorum address `addr`.
fn node_of(opts: &RaftOptions, id: u64, addr: &str) -> BasicNode {
    BasicNode::new(
        opts.specs
            .get(&id)
            .map_or_else(|| addr.to_owned(), members::node_text),
    )
}
