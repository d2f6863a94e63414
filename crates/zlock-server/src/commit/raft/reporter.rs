//! Session activity to the leader, the ensemble's facts, leadership changes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::leader::LeaderLink;
use super::peer::{Identity, Reply, Request};
use super::touch::{is_learner, removed};
use super::types::WatchReceiver as _;
use super::types::{self, Raft};

/// Sends session activity to the leader (see [`super::RaftCommit::reporter`]).
pub struct Reporter {
    pub(super) raft: Raft,
    pub(super) id: Arc<Identity>,
    pub(super) link: LeaderLink,
    pub(super) pending_syncs: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) silent: Duration,
    pub(super) touch: watch::Receiver<bool>,
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
        let Some(leader) = self.link.current() else {
            return false;
        };
        if self.link.is_me(leader) {
            return true;
        }
        let req = Request::Touch(sessions.to_vec());
        matches!(
            self.link.ask(leader, &req, ttl).await,
            Ok(Some(Reply::Touch))
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
