//! Which member leads, as this member sees it, and the one connection a member keeps
//! to it for what only the leader answers.

use std::sync::Arc;
use std::time::Duration;

use super::members::Addrs;
use super::peer::{FrameError, Identity, Peer, Reply, Request};
use super::types::Raft;
use super::types::WatchReceiver as _;
use super::RaftFailure;

/// A connection to whichever member leads, for the requests only the leader answers:
/// the read index ([`super::Barrier`]), session reports ([`super::Reporter`]), an
/// observer's check that its leader has a quorum ([`super::observers`]) and a
/// reconfiguration ([`super::reconfig`]). It connects to the leader named in each call
/// and keeps the connection while that member leads. (The write path keeps its own,
/// streaming one: [`super::write`].)
pub(super) struct LeaderLink {
    raft: Raft,
    id: Arc<Identity>,
    addrs: Addrs,
    peer: Option<Peer>,
}

/// Why the leader gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("member {0} leads, but the membership holds no address for it")]
    UnknownLeader(u64),
    #[error("leader {leader}: {source}")]
    Call {
        leader: u64,
        #[source]
        source: FrameError,
    },
}

impl LeaderLink {
    pub(super) fn new(raft: Raft, id: Arc<Identity>, addrs: Addrs) -> LeaderLink {
        LeaderLink {
            raft,
            id,
            addrs,
            peer: None,
        }
    }

    /// The leader as this member sees it now, if it knows one.
    pub(super) fn current(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// Whether member `leader` is this one.
    pub(super) fn is_me(&self, leader: u64) -> bool {
        leader == self.id.me
    }

    /// Sends `req` to member `leader` and waits for its reply, within `ttl`; `Ok(None)`
    /// if this member learns of another leader first (ask that one).
    pub(super) async fn ask(
        &mut self,
        leader: u64,
        req: &Request,
        ttl: Duration,
    ) -> Result<Option<Reply>, LinkError> {
        if self.peer.as_ref().is_none_or(|p| p.target() != leader) {
            // Looked up (in the membership) only for a new connection.
            let addr = self
                .addrs
                .get(leader)
                .ok_or(LinkError::UnknownLeader(leader))?;
            self.peer = Some(Peer::new(self.id.clone(), leader, addr));
        }
        let Some(peer) = self.peer.as_mut() else {
            return Err(LinkError::UnknownLeader(leader));
        };
        tokio::select! {
            r = peer.call(req, ttl) => r.map(Some).map_err(|source| LinkError::Call { leader, source }),
            () = other_leader(&self.raft, leader) => Ok(None),
        }
    }
}

/// The leader this member knows of, once it knows one.
pub(super) async fn known_leader(raft: &Raft) -> Result<u64, RaftFailure> {
    // Woken by openraft's server metrics, which change with the vote, the state, the
    // leader or the membership: its full metrics change on every turn of its core loop,
    // several times per write (see `on_leadership`).
    let mut m = raft.server_metrics();
    loop {
        if let Err(e) = &raft.metrics().borrow_watched().running_state {
            return Err(RaftFailure::Fatal(e.clone()));
        }
        if let Some(l) = m.borrow_and_update().current_leader {
            return Ok(l);
        }
        if m.changed().await.is_err() {
            return Err(RaftFailure::Stopped);
        }
    }
}

/// Resolves once this member knows of a leader other than `leader` (elected in a later
/// term: `leader` can commit nothing more of its own). Never, if openraft stops.
pub(super) async fn other_leader(raft: &Raft, leader: u64) {
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
