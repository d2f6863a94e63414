//! ZooKeeper's dynamic reconfiguration (`reconfig`, opcode 16) on openraft's
//! membership changes.
//!
//! A member that takes a `reconfig` from a client hands it to the leader
//! ([`Reconfigurer::run`]: in place if it leads, else over the peer link,
//! `Request::Reconfig`), then waits until it has applied the membership entry that
//! made the new configuration, so that the client reads it there at once.
//!
//! The leader ([`Leader::apply`]) checks the request as ZooKeeper's leader does, in its
//! order: a change already under way (`ReconfigInProgress`), `fromConfig` against the
//! current version (`BadVersion`), the request's form (`BadArguments`: incremental
//! `joining`/`leaving`, or a whole new member list), at least two voters left (as
//! ZooKeeper with `standaloneEnabled`), and only then whether the asker may write
//! `/zookeeper/config` (`NoAuth`: a super user), before anything changes. Then:
//!
//! 1. members new to the membership join as openraft learners (observers join as
//!    learners and stay so); a member whose address changes gets its new node;
//!    observers that leave are removed;
//! 2. the new voters must hold a *synced quorum* (ZooKeeper's check), and every joining
//!    voter must be synced too (stricter than ZooKeeper, which may promote a joiner
//!    that is down): the leader waits, within its patience, until they have the log up
//!    to where the leader's was once the learners were added. A joining member so
//!    catches up as a learner before it votes. Not in time: `NewConfigNoQuorum`, and
//!    the learners added for it are removed again;
//! 3. the voters change in one openraft `change_membership` (joint consensus, then the
//!    new configuration; a removed leader steps down once it is committed).
//!
//! The configuration's version is the log position of the membership entry that made
//! it (ZooKeeper's is the zxid of its reconfig Txn; both only tell configurations apart
//! and order them). One reconfiguration at a time per leader.

mod change;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{ChangeMembershipError, ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, ChangeMembers};
use tokio::sync::watch;

use super::leader::{known_leader, other_leader, LeaderLink};
use super::members::{self, node_text, ConfigView};
use super::peer::{Identity, Reply, Request};
use super::types::WatchReceiver as _;
use super::types::{Membership, Metrics, Raft, Zraft};
use super::RaftFailure;
use crate::config::{MemberSpec, MAX_MEMBER_ID};
use change::next_config;
pub use change::{Change, NoQuorum, ReconfigError};

/// The leader's side: one reconfiguration at a time.
pub struct Leader {
    raft: Raft,
    me: u64,
    /// Members' `server.N` values from the static configuration (for nodes that hold
    /// only an address).
    fixed: Arc<BTreeMap<u64, MemberSpec>>,
    busy: tokio::sync::Mutex<()>,
    patience: Duration,
}

fn raft_err(e: RaftError<Zraft, ClientWriteError<Zraft>>) -> ReconfigError {
    match e {
        RaftError::APIError(
            ClientWriteError::ForwardToLeader(f) | ClientWriteError::LogEntryDiscarded(f),
        ) => ReconfigError::NotLeader(f.leader_id.unwrap_or(0)),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_),
        )) => ReconfigError::InProgress,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            ReconfigError::BadArguments(c.to_string())
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(p)) => {
            ReconfigError::BadArguments(p.to_string())
        }
        RaftError::Fatal(Fatal::Stopped) => ReconfigError::NoQuorum(NoQuorum::Stopped),
        RaftError::Fatal(f) => ReconfigError::NoQuorum(NoQuorum::Raft(RaftFailure::Fatal(f))),
    }
}

impl Leader {
    pub fn new(raft: Raft, me: u64, fixed: BTreeMap<u64, MemberSpec>, patience: Duration) -> Self {
        Leader {
            raft,
            me,
            fixed: Arc::new(fixed),
            busy: tokio::sync::Mutex::new(()),
            patience,
        }
    }

    /// The configuration in force; `InProgress` while a change is under way (a joint
    /// configuration), `NotLeader` unless this member leads.
    fn current(&self) -> Result<ConfigView, ReconfigError> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        if !super::types::leads(&m, self.me) {
            return Err(ReconfigError::NotLeader(self.me));
        }
        members::view(&m.membership_config, &self.fixed).ok_or(ReconfigError::InProgress)
    }

    /// One membership change, within the patience.
    async fn change(
        &self,
        what: ChangeMembers<u64, BasicNode>,
        retain: bool,
    ) -> Result<u64, ReconfigError> {
        match tokio::time::timeout(self.patience, self.raft.change_membership(what, retain)).await {
            Ok(Ok(r)) => Ok(r.log_id.index),
            Ok(Err(e)) => Err(raft_err(e)),
            Err(_) => Err(ReconfigError::NoQuorum(NoQuorum::NotCommitted)),
        }
    }

    /// Carries `change` out; returns the configuration it made (its version the log
    /// position of the membership entry).
    pub async fn apply(&self, change: Change) -> Result<ConfigView, ReconfigError> {
        let Ok(_busy) = self.busy.try_lock() else {
            return Err(ReconfigError::InProgress);
        };
        let current = self.current()?;
        if change.from_config != -1 && change.from_config as u64 != current.version {
            return Err(ReconfigError::BadVersion(format!(
                "reconfiguration from version {:x}, the current one is {:x}",
                change.from_config, current.version
            )));
        }
        let next = next_config(&current, &change)?;
        if !change.authorized {
            return Err(ReconfigError::NoAuth);
        }
        if let Some(m) = next.values().find(|m| !(1..=MAX_MEMBER_ID).contains(&m.id)) {
            return Err(ReconfigError::BadArguments(format!(
                "server id {} is out of range: zlock's member ids are 1 to {MAX_MEMBER_ID} \
                 (a member's id is the top byte of the session ids it makes)",
                m.id
            )));
        }
        let now: BTreeMap<u64, &MemberSpec> = current.members.iter().map(|m| (m.id, m)).collect();
        let old_voters: BTreeSet<u64> = current.voters().collect();
        let new_voters: BTreeSet<u64> = next
            .values()
            .filter(|m| !m.observer)
            .map(|m| m.id)
            .collect();
        let mut version = current.version;

        // 1. Nodes: new ones as learners, moved ones updated, leaving observers removed.
        let added: BTreeMap<u64, BasicNode> = next
            .values()
            .filter(|m| !now.contains_key(&m.id))
            .map(|m| (m.id, BasicNode::new(node_text(m))))
            .collect();
        let moved: BTreeMap<u64, BasicNode> = next
            .values()
            .filter(|m| {
                now.get(&m.id).is_some_and(|n| {
                    MemberSpec {
                        observer: m.observer,
                        ..(*n).clone()
                    } != **m
                })
            })
            .map(|m| (m.id, BasicNode::new(node_text(m))))
            .collect();
        let gone_learners: BTreeSet<u64> = now
            .keys()
            .filter(|id| !next.contains_key(id) && !old_voters.contains(id))
            .copied()
            .collect();
        if !added.is_empty() {
            version = self
                .change(ChangeMembers::AddNodes(added.clone()), true)
                .await?;
            tracing::info!(members = ?added.keys().collect::<Vec<_>>(), "reconfig: learners added");
        }
        if !moved.is_empty() {
            version = self.change(ChangeMembers::SetNodes(moved), true).await?;
        }
        if !gone_learners.is_empty() {
            version = self
                .change(ChangeMembers::RemoveNodes(gone_learners), false)
                .await?;
        }

        // 2. A synced quorum of the new voters.
        if new_voters != old_voters {
            let joining: BTreeSet<u64> = new_voters.difference(&old_voters).copied().collect();
            if let Err(e) = self.synced_quorum(&new_voters, &joining).await {
                let undo: BTreeSet<u64> = added
                    .keys()
                    .filter(|id| new_voters.contains(id))
                    .copied()
                    .collect();
                if !undo.is_empty() {
                    let _ = self.change(ChangeMembers::RemoveNodes(undo), false).await;
                }
                return Err(e);
            }
            // 3. The voters. Voters that stay as observers are kept as learners.
            let demoted = old_voters
                .iter()
                .any(|id| !new_voters.contains(id) && next.contains_key(id));
            version = self
                .change(ChangeMembers::ReplaceAllVoters(new_voters.clone()), demoted)
                .await?;
            // With `retain`, voters that leave altogether are learners now: removed
            // too, if this member still leads (a leader that left steps down).
            let gone: BTreeSet<u64> = old_voters
                .iter()
                .filter(|id| !next.contains_key(id))
                .copied()
                .collect();
            if demoted && !gone.is_empty() {
                version = self.change(ChangeMembers::RemoveNodes(gone), false).await?;
            }
        }
        tracing::info!(version, voters = ?new_voters, "reconfig: committed");
        let mut members: Vec<MemberSpec> = next.into_values().collect();
        members.sort_by_key(|m| m.id);
        Ok(ConfigView { members, version })
    }

    /// Waits, within the patience, until a majority of `voters` and every one of
    /// `joining` have the log up to the leader's end as it is now. Err if they do not.
    async fn synced_quorum(
        &self,
        voters: &BTreeSet<u64>,
        joining: &BTreeSet<u64>,
    ) -> Result<(), ReconfigError> {
        let mut metrics = self.raft.metrics();
        let target = metrics.borrow_watched().last_log_index.unwrap_or(0);
        let need = voters.len() / 2 + 1;
        let synced = |m: &Metrics| -> BTreeSet<u64> {
            voters
                .iter()
                .filter(|&&id| {
                    id == self.me
                        || m.replication.as_ref().is_some_and(|r| {
                            r.get(&id)
                                .and_then(|l| l.as_ref())
                                .is_some_and(|l| l.index >= target)
                        })
                })
                .copied()
                .collect()
        };
        let deadline = tokio::time::Instant::now() + self.patience;
        loop {
            let (now, leads) = {
                let m = metrics.borrow_and_update();
                (synced(&m), m.current_leader == Some(self.me))
            };
            if !leads {
                return Err(ReconfigError::NotLeader(self.me));
            }
            if now.len() >= need && joining.is_subset(&now) {
                return Ok(());
            }
            tokio::select! {
                r = metrics.changed() => if r.is_err() {
                    return Err(ReconfigError::NoQuorum(NoQuorum::Stopped));
                },
                () = tokio::time::sleep_until(deadline) => {
                    return Err(ReconfigError::NoQuorum(NoQuorum::NotSynced {
                        voters: voters.clone(),
                        synced: now,
                    }));
                }
            }
        }
    }
}

/// A member's side: hands a change to the leader and waits until it applied the result.
pub struct Reconfigurer {
    pub(super) raft: Raft,
    pub(super) id: Arc<Identity>,
    pub(super) link: tokio::sync::Mutex<LeaderLink>,
    pub(super) leader: Arc<Leader>,
    pub(super) membership: watch::Receiver<Membership>,
    pub(super) patience: Duration,
}

impl Reconfigurer {
    /// Carries `change` out through the leader; returns the configuration it made,
    /// once this member has applied it (a member the change removed does not wait: it
    /// gets no more of the log).
    pub async fn run(&self, change: Change) -> Result<ConfigView, ReconfigError> {
        let work = async {
            let view = loop {
                let leader = known_leader(&self.raft)
                    .await
                    .map_err(|e| ReconfigError::NoQuorum(NoQuorum::Raft(e)))?;
                let r = if leader == self.id.me {
                    self.leader.apply(change.clone()).await
                } else {
                    match self.ask(leader, &change).await {
                        Some(r) => r,
                        None => continue,
                    }
                };
                match r {
                    // Deposed meanwhile: the next leader is asked.
                    Err(ReconfigError::NotLeader(_)) => {
                        tokio::select! {
                            () = other_leader(&self.raft, leader) => {}
                            () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        }
                    }
                    r => break r?,
                }
            };
            if view.members.iter().any(|m| m.id == self.id.me) {
                let mut m = self.membership.clone();
                m.wait_for(|m| m.log_id().is_some_and(|l| l.index >= view.version))
                    .await
                    .map_err(|_| ReconfigError::NoQuorum(NoQuorum::Stopped))?;
            }
            Ok(view)
        };
        // Each step has the patience; the whole, a few.
        tokio::time::timeout(self.patience * 4, work)
            .await
            .unwrap_or_else(|_| Err(ReconfigError::NoQuorum(NoQuorum::NoAnswer)))
    }

    /// Asks member `leader` to carry `change` out; `None` if this member learns of
    /// another leader first.
    async fn ask(&self, leader: u64, change: &Change) -> Option<Result<ConfigView, ReconfigError>> {
        let req = Request::Reconfig(change.clone());
        let mut link = self.link.lock().await;
        match link.ask(leader, &req, self.patience * 3).await {
            Ok(Some(Reply::Reconfig(r))) => Some(r),
            Ok(Some(_)) => Some(Err(ReconfigError::NoQuorum(NoQuorum::UnexpectedReply))),
            Ok(None) => None,
            Err(e) => Some(Err(ReconfigError::NoQuorum(NoQuorum::Link(Arc::new(e))))),
        }
    }
}
