//! The ensemble's commit stage: the Raft log on openraft, the second implementation of
//! [`Commit`](super::Commit).
//!
//! Every member runs one [`openraft::Raft`]. [`RaftCommit`] is what the sequencer sees:
//! it hands each batch to the member's writer task ([`write`]), which takes it into
//! openraft while this member leads and forwards it to the leader otherwise, several
//! batches in flight; a reply leaves once its Txn is committed (durable on a majority)
//! and applied here, as with the WAL.
//!
//! One idea per file:
//!
//! - starting: [`options`] (what a member starts with), `start` (the log, the state
//!   machine, openraft and the tasks around them);
//! - the log and the state: [`log`] (entries in the WAL's segment format, group commit on
//!   a writer thread), [`sm`] (committed entries to the host, in order; the host's
//!   snapshots as Raft snapshots), [`codec`] (the records on disk), [`types`];
//! - writing: [`write`] (the pipelined write path: submitter, forwarding, writer);
//! - the peer link: [`peer`] (frames, the peer server, the client to one member),
//!   [`wire`] (openraft's messages on it), [`stream`] (pipelined appends);
//! - the leader: [`leader`] (which member leads), [`barrier`] (the read index, for
//!   `sync` and session resumes), [`reporter`] (session activity to the leader, the
//!   ensemble's facts), [`handover`] (leadership handed over when a leader stops);
//! - quorum contact: [`touch`] (in touch with a quorum or not), [`failover`] (a dead
//!   leader noticed before the election timeout), [`rejoin`] (a member that lost its
//!   disk rejoins without voting twice);
//! - membership: [`members`], [`observers`], [`reconfig`];
//! - [`runtime`]: the async runtime openraft runs on.
//!
//! Raft index 0 is openraft's initial membership entry; the host never sees it, so a
//! host's first position is 1 as with the WAL.

// openraft's error types are large by design (its examples allow the same).
#![allow(clippy::result_large_err)]

mod barrier;
pub mod codec;
#[cfg(test)]
mod data_dir_tests;
mod error;
mod failover;
#[cfg(test)]
mod golden_tests;
mod handover;
mod leader;
pub mod log;
pub mod members;
mod observers;
mod options;
pub mod peer;
#[cfg(test)]
mod peer_tests;
pub mod reconfig;
pub mod rejoin;
mod reporter;
pub mod runtime;
pub mod seed;
pub mod sm;
mod start;
#[cfg(test)]
mod storage_suite_tests;
pub mod stream;
#[cfg(test)]
mod stream_tests;
pub mod submit;
mod touch;
pub mod types;
mod wire;
pub mod write;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use zlock_core::{LogIndex, Txn};

pub use self::barrier::{Barrier, BarrierError};
pub use self::error::{RaftFailure, Unknown};
pub use self::handover::HandOver;
use self::leader::{known_leader, other_leader, LeaderLink};
pub use self::options::RaftOptions;
use self::options::FORWARD_PROPOSALS;
use self::peer::Identity;
pub use self::reporter::{RaftFacts, Reporter};
use self::touch::leader_in_touch;
use self::types::{Proposal, Raft};
use super::{Commit, CommitError};

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
    /// ([`touch::watch_touch`]).
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

    /// A new connection to whichever member leads.
    fn leader_link(&self) -> LeaderLink {
        LeaderLink::new(self.raft.clone(), self.id.clone(), self.addrs.clone())
    }

    /// A handle that reports this member's session activity to the leader.
    pub fn reporter(&self) -> Reporter {
        Reporter {
            raft: self.raft.clone(),
            id: self.id.clone(),
            link: self.leader_link(),
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
            me: self.id.me,
            link: tokio::sync::Mutex::new(self.leader_link()),
            applied: self.applied.clone(),
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
            Ok(Err(_)) => Err(RaftFailure::Stopped.into()),
            Err(_) => Err(Unknown::NotApplied(last).into()),
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
