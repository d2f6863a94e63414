//! The read-index barrier: caught up with the leader before a `sync` answers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::leader::{known_leader, other_leader, LeaderLink, LinkError};
use super::peer::{self, Reply, Request};
use super::types::Raft;

/// Waits until this member has caught up with the leader: for `sync`, and before a
/// session resumes here.
pub struct Barrier {
    pub(super) raft: Raft,
    /// This member's id.
    pub(super) me: u64,
    /// Held through one ask: concurrent waits on a follower ask one at a time.
    pub(super) link: tokio::sync::Mutex<LeaderLink>,
    pub(super) applied: watch::Receiver<u64>,
    pub(super) patience: Duration,
    pub(super) pending: Arc<std::sync::atomic::AtomicUsize>,
}

/// Why a barrier wait failed: the client's `sync` fails, or its session does not resume
/// here.
#[derive(Debug, thiserror::Error)]
pub enum BarrierError {
    #[error("raft stopped")]
    Stopped,
    #[error("no leader gave its read index within {0:?}")]
    NoAnswer(Duration),
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
    pub async fn wait(&self) -> Result<(), BarrierError> {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _counted = Pending(&self.pending);
        let work = async {
            let index = loop {
                let leader = known_leader(&self.raft)
                    .await
                    .map_err(|_| BarrierError::Stopped)?;
                if leader == self.me {
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
                .map_err(|_| BarrierError::Stopped)
        };
        tokio::time::timeout(self.patience, work)
            .await
            .unwrap_or(Err(BarrierError::NoAnswer(self.patience)))
    }

    /// Asks member `leader` for its read index; `None` if this member learns of another
    /// leader first.
    async fn ask(&self, leader: u64) -> Option<Result<u64, AskError>> {
        let mut link = self.link.lock().await;
        match link.ask(leader, &Request::ReadIndex, self.patience).await {
            Ok(Some(Reply::ReadIndex(r))) => Some(r.map_err(AskError::Refused)),
            Ok(Some(_)) => Some(Err(AskError::Unexpected)),
            Ok(None) => None,
            Err(e) => Some(Err(AskError::Link(e))),
        }
    }
}

/// Why one leader gave no read index (logged; the next leader is asked).
#[derive(Debug, thiserror::Error)]
enum AskError {
    #[error(transparent)]
    Link(LinkError),
    /// Its reason, as it sent it (deposed, or no quorum answered it in time).
    #[error("refused: {0}")]
    Refused(String),
    #[error("a reply of another kind")]
    Unexpected,
}
