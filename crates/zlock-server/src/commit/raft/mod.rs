//! The ensemble's commit stage: the Raft log on openraft, the second implementation of
//! [`Commit`](super::Commit).
//!
//! Every member runs one [`openraft::Raft`]: its log store ([`log`]) keeps entries in
//! the WAL's segment format with group commit on a writer thread; its state machine
//! ([`sm`]) hands committed entries to the member's host in order and turns the host's
//! snapshots into Raft snapshots; [`peer`] carries openraft's RPCs and forwarded
//! proposals over TCP.
//!
//! [`RaftCommit::propose`] writes through the leader: on the leader it hands each Txn
//! to openraft, on another member it forwards the batch to the leader. Either way it
//! returns once the batch is committed (durable on a majority) and applied on this
//! member, which is what the WAL's `propose` promises too (applied before it returns),
//! so the sequencer above it works the same on both.
//!
//! Raft index 0 is openraft's initial membership entry; the host never sees it, so a
//! host's first position is 1 as with the WAL.

// openraft's error types are large by design (its examples allow the same).
#![allow(clippy::result_large_err)]

mod codec;
#[cfg(test)]
mod data_dir_tests;
mod failover;
#[cfg(test)]
mod golden_tests;
pub mod log;
pub mod members;
mod observers;
pub mod peer;
#[cfg(test)]
mod peer_tests;
pub mod reconfig;
pub mod rejoin;
pub mod runtime;
pub mod sm;
#[cfg(test)]
mod storage_suite_tests;
pub mod stream;
#[cfg(test)]
mod stream_tests;
pub mod types;
mod wire;
pub mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use zlock_core::{LogIndex, Txn};

use self::peer::{Identity, Peer, Reply, Request};
use self::types::WatchReceiver as _;
use self::types::{Proposal, Raft};
use super::{Commit, CommitError, LogStore, Snapshots};

/// How a member takes part in an ensemble.
#[derive(Debug, Clone)]
pub struct RaftOptions {
    /// This member's id (`server.N`, `myid`).
    pub me: u64,
    /// Every voting member's id and quorum (peer) address, this one included unless it
    /// is an observer.
    pub members: BTreeMap<u64, String>,
    /// Every observer's id and quorum address (this one included if it is one):
    /// members that never vote. They are Raft learners, added by whichever voter
    /// leads ([`observers`]); the voters' membership is `members` alone, so an observer
    /// never counts towards a quorum and never campaigns (openraft elects and counts
    /// votes and acknowledgements among voters only).
    pub observers: BTreeMap<u64, String>,
    /// Each member's `server.N` value (voters and observers), which its node in the
    /// membership holds ([`members`]); a member missing here gets its quorum address.
    pub specs: BTreeMap<u64, crate::config::MemberSpec>,
    /// `reconfigEnabled`: the membership changes through `reconfig`. A peer need not be
    /// in `members` or `observers` to talk (a member being added is not, in the
    /// others' configuration), and the configured observers are added only while the
    /// ensemble is first formed (after that, only `reconfig` adds and removes).
    pub reconfig: bool,
    /// A name the members share; a peer naming another one is refused.
    pub ensemble: String,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// A snapshot after this many Txns applied (ZooKeeper's snapCount); `None`: only
    /// when asked.
    pub snapshot_every: Option<u64>,
    /// Entries kept behind a snapshot (a member lagging further gets the snapshot).
    pub keep_behind_snapshot: u64,
    /// Where snapshots are written and received.
    pub snapshot_dir: PathBuf,
    /// Where the vote and the purge point are kept.
    pub meta_dir: PathBuf,
}

/// Entries in one replication frame: with proposals of at most about 1 MiB
/// ([`types::PROPOSAL_BYTES`], or one larger Txn, within the client packet limit), a
/// frame stays well under the peer link's [`peer::MAX_FRAME`].
const MAX_PAYLOAD_ENTRIES: u64 = 16;

/// Proposals in one forwarded frame, for the same reason: a follower's batch (up to
/// 4096 requests of up to a client packet each) goes to the leader in frames of at most
/// this many, one after the other.
const FORWARD_PROPOSALS: usize = MAX_PAYLOAD_ENTRIES as usize;

impl RaftOptions {
    fn config(&self) -> Result<openraft::Config, CommitError> {
        let c = openraft::Config {
            cluster_name: self.ensemble.clone(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            // Per chunk (3 MiB), so it does not grow with the snapshot.
            install_snapshot_timeout: 2_000,
            // Asked for by the state machine, which counts Txns (`snapshot_every`).
            snapshot_policy: openraft::SnapshotPolicy::Never,
            // An entry is one proposal, at most about 1 MiB of Txns: a replication
            // frame stays within the peer link's limit.
            max_payload_entries: MAX_PAYLOAD_ENTRIES,
            max_in_snapshot_log_to_keep: self.keep_behind_snapshot,
            // A member that lost its disk rejoins blank (`rejoin`): the leader must take
            // its empty log for what it is and send everything again.
            allow_log_reversion: Some(true),
            // The state machine is rebuilt from the log after a restart and the commit
            // point is not saved, so a restarted leader must win an election (which
            // brings the commit point) before it leads again.
            enable_leader_restore: Some(false),
            ..openraft::Config::default()
        };
        c.validate().map_err(|e| CommitError::Raft(e.to_string()))
    }

    /// How long a proposal waits for a leader, and for its answer.
    fn patience(&self) -> Duration {
        Duration::from_millis(self.election_max_ms * 4 + 2_000)
    }
}

/// One member's Raft: the commit stage handed to the sequencer, plus what the server
/// needs to watch and stop it.
pub struct RaftCommit {
    raft: Raft,
    rt: tokio::runtime::Handle,
    id: Arc<Identity>,
    addrs: members::Addrs,
    /// Carries `reconfig` requests to the leader.
    reconfigurer: Arc<reconfig::Reconfigurer>,
    /// Batches for the writer task ([`write::Writer`]).
    orders: tokio::sync::mpsc::Sender<write::Order>,
    /// What the writer reports (taken by the server, [`RaftCommit::troubles`]).
    troubles: tokio::sync::mpsc::UnboundedReceiver<CommitError>,
    applied: watch::Receiver<u64>,
    patience: Duration,
    /// Set once this member's Raft failed (by the writer, or a proposal here).
    failed: Arc<std::sync::atomic::AtomicBool>,
    /// Barrier waits (syncs, session checks) in progress on this member.
    pending_syncs: Arc<std::sync::atomic::AtomicUsize>,
    /// The lease plus the longest election timeout (see [`Reporter::touch`]).
    silent: Duration,
    /// Whether this member is in touch with its quorum, looked at every heartbeat
    /// ([`watch_touch`]).
    touch: watch::Receiver<bool>,
    /// Stops the peer server and its connections.
    stop: watch::Sender<bool>,
    /// The peer server's task, awaited by [`RaftCommit::shutdown`] so that the quorum
    /// port is free once it returns.
    server: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Stops the log's writer once openraft has stopped.
    log_closer: log::LogCloser,
}

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
        let io = |e: std::io::Error| CommitError::Raft(e.to_string());
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
            .map_err(|e| CommitError::Raft(e.to_string()))?;
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
            addrs: addrs.clone(),
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
                raft.clone(),
                id.clone(),
                addrs.clone(),
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

    /// The member's Raft, for metrics and admin.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// What carries `reconfig` requests to the leader.
    pub fn reconfigurer(&self) -> Arc<reconfig::Reconfigurer> {
        self.reconfigurer.clone()
    }

    /// The committed membership as this member applies it.
    pub fn membership(&self) -> watch::Receiver<types::Membership> {
        self.reconfigurer.membership.clone()
    }

    /// A handle that reports this member's session activity to the leader.
    pub fn reporter(&self) -> Reporter {
        Reporter {
            raft: self.raft.clone(),
            id: self.id.clone(),
            addrs: self.addrs.clone(),
            peer: None,
            pending_syncs: self.pending_syncs.clone(),
            silent: self.silent,
            touch: self.touch.clone(),
        }
    }

    /// A handle that waits until this member has applied everything the leader had
    /// committed when it was called (see [`Barrier::wait`]).
    pub fn barrier(&self) -> Barrier {
        Barrier {
            raft: self.raft.clone(),
            id: self.id.clone(),
            addrs: self.addrs.clone(),
            applied: self.applied.clone(),
            peer: tokio::sync::Mutex::new(None),
            patience: self.patience,
            pending: self.pending_syncs.clone(),
        }
    }

    /// Stops openraft and the peer server; once it returns the quorum port is closed.
    /// A leader first hands leadership over ([`HandOver::run`]).
    pub async fn shutdown(&self) {
        self.hand_over_handle().run().await;
        self.stop.send_replace(true);
        let _ = self.raft.shutdown().await;
        self.log_closer.close().await;
        let server = self
            .server
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(s) = server {
            let _ = s.await;
        }
    }

    /// What hands leadership over when this member stops ([`HandOver::run`]); the
    /// server runs it first thing when it stops.
    pub fn hand_over_handle(&self) -> HandOver {
        HandOver {
            raft: self.raft.clone(),
            me: self.id.me,
            within: self.silent,
        }
    }

    /// What the writer reports that fails requests: an unknown outcome
    /// ([`CommitError::Unavailable`]: the server drops its clients) or a failed Raft
    /// (it stops). Taken once, by the server.
    pub fn troubles(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<CommitError> {
        // A second call gets a channel that never carries anything.
        std::mem::replace(&mut self.troubles, tokio::sync::mpsc::unbounded_channel().1)
    }

    fn stopped(&self) -> Result<(), CommitError> {
        if self.failed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CommitError::Stopped);
        }
        Ok(())
    }

    /// [`Commit::submit`] from a task on the member's runtime (the ensemble's
    /// sequencer): waits for room without blocking the runtime's thread.
    pub async fn submit_async(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError> {
        match self.order(batch)? {
            Some(order) => self
                .orders
                .send(order)
                .await
                .map_err(|_| CommitError::Stopped),
            None => Ok(()),
        }
    }

    /// The writer's order for `batch` (emptied); `None` if there is nothing to write.
    fn order(&self, batch: &mut Vec<Txn>) -> Result<Option<write::Order>, CommitError> {
        self.stopped()?;
        if batch.is_empty() {
            return Ok(None);
        }
        Ok(Some(write::Order::Batch {
            props: Proposal::split(batch.drain(..)),
            done: None,
        }))
    }

    /// [`Commit::dropped_all`] from a task on the member's runtime.
    pub async fn dropped_all_async(&mut self) {
        let _ = self.orders.send(write::Order::Dropped).await;
    }

    /// Waits until this member has applied through `last`.
    async fn applied_through(&self, last: u64) -> Result<(), CommitError> {
        let mut applied = self.applied.clone();
        let waited = tokio::time::timeout(self.patience, async {
            applied.wait_for(|a| *a >= last).await.map(|_| ())
        })
        .await;
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(CommitError::Raft("raft stopped".into())),
            Err(_) => Err(CommitError::Unavailable(format!(
                "entry {last} committed but not applied here in time"
            ))),
        }
    }
}

/// Hands leadership over before a member stops (see [`HandOver::run`]).
pub struct HandOver {
    raft: Raft,
    me: u64,
    within: Duration,
}

impl HandOver {
    /// If this member leads, hands leadership to the voter whose log is furthest
    /// along (openraft's leadership transfer: the leader stops taking proposals and
    /// tells the voters; that voter campaigns at once and the others vote without
    /// waiting for their lease of this leader to run out), and waits until another
    /// member leads, within twice the longest election timeout. Clients see a new leader
    /// within a round trip or two rather than after a lease and an election timeout.
    /// Nothing is lost if it does not happen in time: the member stops anyway, and the
    /// others elect a leader as they would after a crash.
    pub async fn run(&self) {
        let me = self.me;
        let to = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            if !types::leads(&m, me) {
                return;
            }
            let matched = |id: &u64| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
            };
            m.membership_config
                .membership()
                .voter_ids()
                .filter(|&v| v != me)
                .max_by_key(|v| matched(v))
        };
        let Some(to) = to else { return };
        tracing::info!(member = me, to, "stopping: handing leadership over");
        if self.raft.trigger().transfer_leader(to).await.is_err() {
            return;
        }
        let mut m = self.raft.metrics();
        let moved = tokio::time::timeout(
            self.within,
            // Until the new leader is known here (its first append comes within a round
            // trip of its election).
            types::wait_for(&mut m, |x| x.current_leader.is_some_and(|l| l != me)),
        )
        .await;
        match moved {
            Ok(Ok(x)) => tracing::info!(
                member = me,
                leader = x.current_leader.unwrap_or(0),
                term = x.current_term,
                "leadership handed over"
            ),
            _ => tracing::warn!(
                member = me,
                to,
                "no new leader known in time; stopping anyway"
            ),
        }
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

/// The leader this member knows of, once it knows one.
async fn known_leader(raft: &Raft) -> Result<u64, CommitError> {
    // Woken by openraft's server metrics, which change with the vote, the state, the
    // leader or the membership: its full metrics change on every turn of its core loop,
    // several times per write (see `on_leadership`).
    let mut m = raft.server_metrics();
    loop {
        if let Err(e) = &raft.metrics().borrow_watched().running_state {
            return Err(CommitError::Raft(e.to_string()));
        }
        if let Some(l) = m.borrow_and_update().current_leader {
            return Ok(l);
        }
        if m.changed().await.is_err() {
            return Err(CommitError::Raft("raft stopped".into()));
        }
    }
}

/// Resolves once this member knows of a leader other than `leader` (elected in a later
/// term: `leader` can commit nothing more of its own). Never, if openraft stops.
async fn other_leader(raft: &Raft, leader: u64) {
    let mut m = raft.server_metrics();
    loop {
        if m.borrow_and_update()
            .current_leader
            .is_some_and(|l| l != leader)
        {
            return;
        }
        if m.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Publishes [`in_touch`], looked at every `every` (a heartbeat), as it changes, until
/// `stopped` or nobody watches.
async fn watch_touch(
    raft: Raft,
    (contact, observer): (Arc<failover::Contact>, bool),
    (silent, every): (Duration, Duration),
    tx: watch::Sender<bool>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !tx.is_closed() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        let now = in_touch(&raft, &contact, silent, observer);
        tx.send_if_modified(|t| std::mem::replace(t, now) != now);
    }
}

/// See [`Reporter::touch`].
///
/// An observer also needs the leader to have said, within the silent time, that it is
/// in touch itself ([`observers::confirm_leader`]): a leader that lost its voters goes
/// on sending heartbeats to the observer (openraft's leader does not step down), and
/// without this the observer would go on serving reads, stale ones if the voters
/// elected another leader on the far side of a partition, where ZooKeeper's observer
/// would have lost its leader with the leader's quorum. A follower needs no such
/// answer in a three-voter ensemble (a leader that reaches it has its quorum).
///
/// A member that its membership does not hold (a `reconfig` removed it, or it has not
/// been added yet) is in touch with nobody, whatever it hears: it serves no client and
/// claims no role, not even while it is still the leader that commits the change that
/// removed it (openraft keeps such a leader a moment before it hands over, see
/// [`removed`]).
fn in_touch(raft: &Raft, contact: &failover::Contact, silent: Duration, observer: bool) -> bool {
    if !is_member(&raft.metrics().borrow_watched()) {
        return false;
    }
    if let Some(leader_in_touch) = leader_in_touch(raft, silent) {
        return leader_in_touch;
    }
    let recent = |t: Option<tokio::time::Instant>| t.is_some_and(|t| t.elapsed() <= silent);
    recent(contact.last_heard_any()) && (!observer || recent(contact.last_confirmed()))
}

/// Whether this member's membership (the effective one, committed or not: a member
/// that has seen the entry that leaves it out no longer votes) holds it, as a voter or a
/// learner (an observer, or a member being added).
fn is_member(m: &types::Metrics) -> bool {
    m.membership_config.membership().get_node(&m.id).is_some()
}

/// Whether a `reconfig` removed this member: it has a membership, one that leaves it
/// out. After the change that removes it commits, openraft's leader goes on leading for
/// a moment (`removed_leader_step_down`, 150 ms, so that the followers hear of the
/// commit), then hands leadership to the most up-to-date voter and becomes a learner.
fn removed(m: &types::Metrics) -> bool {
    m.membership_config.log_id().is_some() && !is_member(m)
}

/// `None` if this member does not lead; else whether a quorum of voters answered it
/// within `silent`. openraft's quorum acknowledgement counts voters only: an
/// observer's (a learner's) acknowledgements never count.
fn leader_in_touch(raft: &Raft, silent: Duration) -> Option<bool> {
    let m = raft.metrics();
    let m = m.borrow_watched();
    if m.state != openraft::ServerState::Leader {
        return None;
    }
    // No acknowledgement yet: it has just been elected, by a quorum.
    Some(
        m.last_quorum_acked
            .as_ref()
            .is_none_or(|at| openraft::Instant::elapsed(&**at) <= silent),
    )
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

/// Whether this member is a Raft learner now (an observer).
fn is_learner(raft: &Raft) -> bool {
    raft.metrics().borrow_watched().state == openraft::ServerState::Learner
}

/// Waits until this member has caught up with the leader: for `sync`, and before a
/// session resumes here.
pub struct Barrier {
    raft: Raft,
    id: Arc<Identity>,
    addrs: members::Addrs,
    applied: watch::Receiver<u64>,
    peer: tokio::sync::Mutex<Option<Peer>>,
    patience: Duration,
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a barrier wait while it lasts.
struct Pending<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Barrier {
    /// Returns once this member has applied every entry the leader had committed when
    /// the call was made, the leader's leadership confirmed by a quorum meanwhile (so
    /// a deposed leader cannot answer it). Linearizable, stronger than ZooKeeper's sync.
    ///
    /// A leader that fails or goes silent meanwhile is asked no more: the read index is
    /// asked again of the next leader, within the same patience.
    pub async fn wait(&self) -> Result<(), String> {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _counted = Pending(&self.pending);
        let work = async {
            let index = loop {
                let leader = known_leader(&self.raft).await.map_err(|e| e.to_string())?;
                if leader == self.id.me {
                    match peer::read_index(&self.raft).await {
                        Ok(index) => break index,
                        // Deposed, or no quorum answered in time: look again (at the
                        // next leader, if there is one by then).
                        Err(e) => {
                            tracing::debug!(error = %e, "read index not confirmed here");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    }
                }
                match self.ask(leader).await {
                    Some(Ok(index)) => break index,
                    // Replaced while asked: ask the new one.
                    None => continue,
                    Some(Err(e)) => {
                        // Failed (it is down, or lost its quorum): ask its successor
                        // once there is one, or it again a little later.
                        tracing::debug!(leader, error = %e, "read index not given");
                        tokio::select! {
                            () = other_leader(&self.raft, leader) => {}
                            () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        }
                    }
                }
            };
            let mut applied = self.applied.clone();
            applied
                .wait_for(|a| *a >= index)
                .await
                .map(|_| ())
                .map_err(|_| "raft stopped".to_string())
        };
        tokio::time::timeout(self.patience, work)
            .await
            .unwrap_or_else(|_| Err("the leader did not answer in time".into()))
    }

    /// Asks member `leader` for its read index; `None` if this member learns of another
    /// leader first.
    async fn ask(&self, leader: u64) -> Option<Result<u64, String>> {
        let mut p = self.peer.lock().await;
        if p.as_ref().is_none_or(|p| p.target() != leader) {
            let Some(addr) = self.addrs.get(leader) else {
                return Some(Err(format!("unknown leader {leader}")));
            };
            *p = Some(Peer::new(self.id.clone(), leader, addr));
        }
        let peer = p.as_mut()?;
        let answered = tokio::select! {
            r = peer.call(&Request::ReadIndex, self.patience) => Some(r),
            () = other_leader(&self.raft, leader) => None,
        };
        match answered {
            Some(Ok(Reply::ReadIndex(r))) => Some(r),
            Some(Ok(_)) => Some(Err("unexpected reply".into())),
            Some(Err(e)) => Some(Err(e.to_string())),
            None => None,
        }
    }
}

/// Sends session activity to the leader (see [`RaftCommit::reporter`]).
pub struct Reporter {
    raft: Raft,
    id: Arc<Identity>,
    addrs: members::Addrs,
    peer: Option<Peer>,
    pending_syncs: Arc<std::sync::atomic::AtomicUsize>,
    silent: Duration,
    touch: watch::Receiver<bool>,
}

/// What `mntr` and `srvr` report of the ensemble, as this member sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftFacts {
    pub term: u64,
    pub leader: Option<u64>,
    pub voters: usize,
    /// On the leader: the other voters, and those replicating close behind it.
    pub followers: usize,
    pub synced_followers: usize,
    /// On the leader: the observers (learners) in the membership, and those
    /// replicating close behind it.
    pub observers: usize,
    pub synced_observers: usize,
    pub pending_syncs: usize,
    pub last_log_index: u64,
}

/// A follower at most this many entries behind the leader counts as synced.
const SYNCED_WITHIN: u64 = 1_000;

impl Reporter {
    /// The ensemble as this member sees it now.
    pub fn facts(&self) -> RaftFacts {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        let membership = m.membership_config.membership();
        let voter_ids: BTreeSet<u64> = membership.voter_ids().collect();
        let voters = voter_ids.len();
        let observers = membership.learner_ids().count();
        let last = m.last_log_index.unwrap_or(0);
        let leads = m.state == openraft::ServerState::Leader;
        // openraft replicates to voters and learners alike: counted apart.
        let (mut synced, mut synced_observers) = (0, 0);
        for (id, matched) in m.replication.iter().flatten() {
            if *id == self.id.me || !matched.is_some_and(|l| l.index + SYNCED_WITHIN >= last) {
                continue;
            }
            match voter_ids.contains(id) {
                true => synced += 1,
                false => synced_observers += 1,
            }
        }
        RaftFacts {
            term: m.current_term,
            leader: m.current_leader,
            voters,
            followers: if leads { voters.saturating_sub(1) } else { 0 },
            synced_followers: if leads { synced } else { 0 },
            observers: if leads { observers } else { 0 },
            synced_observers: if leads { synced_observers } else { 0 },
            pending_syncs: self
                .pending_syncs
                .load(std::sync::atomic::Ordering::Relaxed),
            last_log_index: last,
        }
    }

    /// Whether this member is in touch with a quorum: as the leader, a quorum answered
    /// it within the silent time; otherwise, a leader sent to it within that time. The
    /// silent time is what a follower waits for a silent leader before it campaigns
    /// (the lease plus the longest election timeout), so an election after a leader
    /// failed does not take a member out of touch unless it fails too. A member that
    /// its membership leaves out (removed by `reconfig`, or not added yet) is out of
    /// touch whatever it hears, the leader that commits its own removal included. A
    /// member out of touch closes its clients' connections and serves no new ones, as a
    /// ZooKeeper server that lost its quorum does, so that they move to a member that
    /// can. Looked at every heartbeat; the receiver is told each change.
    pub fn touch(&self) -> watch::Receiver<bool> {
        self.touch.clone()
    }

    /// Whether a `reconfig` removed this member (see [`removed`]).
    pub fn removed(&self) -> bool {
        removed(&self.raft.metrics().borrow_watched())
    }

    /// How long a member may go without its quorum before it is out of touch.
    pub fn silent(&self) -> Duration {
        self.silent
    }

    /// Whether this member leads now.
    pub fn leads(&self) -> bool {
        types::leads(&self.raft.metrics().borrow_watched(), self.id.me)
    }

    /// Reports `sessions` to the current leader; `false` if there is none or it could
    /// not be reached (the caller keeps them for the next report).
    pub async fn report(&mut self, sessions: &[i64], ttl: Duration) -> bool {
        let Some(leader) = self.raft.metrics().borrow_watched().current_leader else {
            return false;
        };
        if leader == self.id.me {
            return true;
        }
        if self.peer.as_ref().is_none_or(|p| p.target() != leader) {
            let Some(addr) = self.addrs.get(leader) else {
                return false;
            };
            self.peer = Some(Peer::new(self.id.clone(), leader, addr));
        }
        let Some(p) = self.peer.as_mut() else {
            return false;
        };
        matches!(
            p.call(&Request::Touch(sessions.to_vec()), ttl).await,
            Ok(Reply::Touch)
        )
    }

    /// Watches leadership: `f(true)` when this member becomes the leader, `f(false)`
    /// when it stops, until openraft stops.
    pub async fn on_leadership(&self, mut f: impl FnMut(bool)) {
        // openraft's server metrics change only with the vote, the state, the leader or
        // the membership; its full metrics are rebuilt and sent on every turn of its core
        // loop, and watching them woke this task several times per write on every member.
        let mut m = self.raft.server_metrics();
        let mut leads = false;
        let mut seen: Option<(u64, Option<u64>)> = None;
        loop {
            let (now, term, leader, members) = {
                let x = m.borrow_and_update();
                (
                    x.state == openraft::ServerState::Leader,
                    x.vote.leader_id().term,
                    x.current_leader,
                    x.membership_config
                        .membership()
                        .voter_ids()
                        .collect::<Vec<_>>(),
                )
            };
            // Every election's outcome, as this member sees it, with the term.
            if seen != Some((term, leader)) {
                seen = Some((term, leader));
                match leader {
                    Some(l) if l == self.id.me => {
                        tracing::info!(member = self.id.me, term, ?members, "leading the ensemble")
                    }
                    Some(l) if is_learner(&self.raft) => {
                        tracing::info!(member = self.id.me, term, leader = l, ?members, "observing")
                    }
                    Some(l) => {
                        tracing::info!(member = self.id.me, term, leader = l, ?members, "following")
                    }
                    None => {
                        tracing::info!(member = self.id.me, term, ?members, "no leader: electing")
                    }
                }
            }
            if now != leads {
                leads = now;
                f(leads);
            }
            if m.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Commit for RaftCommit {
    /// Waits for the batch's outcome and for this member to apply it (tests, tools):
    /// the server uses [`Commit::submit`].
    fn propose(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError> {
        self.stopped()?;
        if batch.is_empty() {
            return Ok(());
        }
        let (done, outcome) = tokio::sync::oneshot::channel();
        let order = write::Order::Batch {
            props: Proposal::split(batch.drain(..)),
            done: Some(done),
        };
        self.orders
            .blocking_send(order)
            .map_err(|_| CommitError::Stopped)?;
        let r = match outcome.blocking_recv() {
            Ok(Ok(last)) => {
                let rt = self.rt.clone();
                rt.block_on(self.applied_through(last))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CommitError::Stopped),
        };
        if let Err(CommitError::Raft(_)) = &r {
            self.failed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        r
    }

    /// Hands the batch to the writer task and returns: several batches replicate at
    /// once, and what fails them comes back through [`RaftCommit::troubles`].
    fn submit(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError> {
        match self.order(batch)? {
            Some(order) => self
                .orders
                .blocking_send(order)
                .map_err(|_| CommitError::Stopped),
            None => Ok(()),
        }
    }

    fn dropped_all(&mut self) {
        let _ = self.orders.blocking_send(write::Order::Dropped);
    }

    fn purge_through(&mut self, _index: LogIndex) -> Result<(), CommitError> {
        // openraft purges its log behind its own snapshots.
        self.stopped()
    }
}

impl Drop for RaftCommit {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        let raft = self.raft.clone();
        self.rt.spawn(async move {
            let _ = raft.shutdown().await;
        });
    }
}
