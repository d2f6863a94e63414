//! Which member leads, as this member sees it.

use super::types::Raft;
use super::types::WatchReceiver as _;
use super::CommitError;

/// The leader this member knows of, once it knows one.
pub(super) async fn known_leader(raft: &Raft) -> Result<u64, CommitError> {
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
