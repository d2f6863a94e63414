//! The read-index barrier: caught up with the leader before a `sync` answers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::leader::{known_leader, other_leader};
use super::members;
use super::peer::{self, Identity, Peer, Reply, Request};
use super::types::Raft;

/// Waits until this member has caught up with the leader: for `sync`, and before a
/// session resumes here.
pub struct Barrier {
    pub(super) raft: Raft,
    pub(super) id: Arc<Identity>,
    pub(super) addrs: members::Addrs,
    pub(super) applied: watch::Receiver<u64>,
    pub(super) peer: tokio::sync::Mutex<Option<Peer>>,
    pub(super) patience: Duration,
    pub(super) pending: Arc<std::sync::atomic::AtomicUsize>,
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
