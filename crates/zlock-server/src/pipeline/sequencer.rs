//! The sequencer thread: gathers a batch, turns its writes into Txns and proposes them.
//!
//! It blocks for the first item, then takes every item that queued up meanwhile (up to
//! [`MAX_BATCH`]). Under the core's lock it sequences each one in arrival order
//! ([`Core::sequence`]: origin, time and passwords fixed into each Txn, each request
//! registered with the router, member-local items handled), then releases the lock and
//! proposes the Txns to the commit stage. With the WAL, the proposal is appended,
//! fsynced once (group commit) and applied on this same thread before `propose`
//! returns; while one fsync runs, the next batch gathers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use zlock_core::{LogIndex, Txn};

use super::core::{locked, with_core, Core, Flow, APPLY_CHUNK};
use super::Item;
use crate::commit::{Commit, CommitError};

/// Most items in one batch; bounds the latency one batch adds to the next.
pub const MAX_BATCH: usize = 4096;

pub(crate) struct Sequencer<C: Commit> {
    pub commit: C,
    pub rx: mpsc::Receiver<Item>,
    pub core: Arc<Mutex<Core>>,
    /// How long to poll for the next item before sleeping.
    pub spin: Duration,
    /// Set when the log fails: the server must stop (nothing after a failed write may
    /// be acknowledged).
    pub fatal: tokio::sync::watch::Sender<Option<crate::Fatal>>,
}

impl<C: Commit> Sequencer<C> {
    pub fn run(mut self) {
        self.serve();
        // Stopped, or the log failed: nothing more is applied.
        locked(&self.core, Core::finish);
    }

    fn serve(&mut self) {
        let mut step = Step::default();
        loop {
            let Some(first) = self.next_item() else {
                break;
            };
            if let Err(e) = step.gather(first, &mut self.rx, |t| self.commit.purge_through(t)) {
                return self.fail(e);
            }
            if step.batch.is_empty() {
                continue;
            }
            let (flow, dropped) = step.sequence(&self.core);
            if dropped {
                // Every client was dropped: the batches handed over before hold
                // nothing anybody waits for (a pipelining log that stopped taking
                // batches takes them again from here).
                self.commit.dropped_all();
            }
            match self.commit.submit(&mut step.txns) {
                Ok(()) => {}
                Err(CommitError::Unavailable(why)) => {
                    // Committed or not, nobody can say: drop every client here (they
                    // reconnect and resume), and go on with the next batch.
                    tracing::warn!(reason = %why, "no answer from the leader; closing client connections");
                    step.txns.clear();
                    locked(&self.core, Core::drop_all_clients);
                }
                Err(e) => return self.fail(e),
            }
            // Everything before a restore is applied by now (the WAL applies before
            // `submit` returns).
            locked(&self.core, Core::restore);
            if flow == Flow::Stop {
                break;
            }
        }
    }

    /// The next item: polled for up to `spin` first (yielding the CPU between polls),
    /// then waited for. See `ServerConfig::commit_spin_us`.
    fn next_item(&mut self) -> Option<Item> {
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            loop {
                match self.rx.try_recv() {
                    Ok(item) => return Some(item),
                    Err(mpsc::error::TryRecvError::Disconnected) => return None,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
                if Instant::now() >= until {
                    break;
                }
                std::thread::yield_now();
            }
        }
        self.rx.blocking_recv()
    }

    fn fail(&self, e: CommitError) {
        tracing::error!(error = %e, "write-ahead log failed; stopping the server");
        let _ = self.fatal.send(Some(std::sync::Arc::new(e)));
    }
}

/// One batch's way through the sequencer, the same whichever loop runs it (the thread
/// beside the WAL, or the ensemble's task).
#[derive(Default)]
struct Step {
    batch: Vec<Item>,
    txns: Vec<Txn>,
    dirty: Vec<crate::conn::ConnHandle>,
}

impl Step {
    /// Takes `first` and every item queued behind it (up to [`MAX_BATCH`]); the log's
    /// own items are handled here (`purge`). Err: the commit stage failed.
    fn gather(
        &mut self,
        first: Item,
        rx: &mut mpsc::Receiver<Item>,
        mut purge: impl FnMut(LogIndex) -> Result<(), CommitError>,
    ) -> Result<(), CommitError> {
        let mut next = Some(first);
        while let Some(it) = next.take() {
            match it {
                // The log's own business: nothing to sequence.
                Item::Purge { through } => {
                    if let Err(e) = purge(LogIndex(through)) {
                        // Failing to delete old segments loses nothing; keep serving.
                        tracing::warn!(error = %e, "could not remove old log segments");
                    }
                }
                Item::Trouble(e) if !matches!(e, CommitError::Unavailable(_)) => return Err(e),
                // A restore ends the batch: what comes after it applies to the
                // restored state (`Core::restore`).
                it @ Item::Restore { .. } => {
                    self.batch.push(it);
                    break;
                }
                it => self.batch.push(it),
            }
            if self.batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        Ok(())
    }

    /// Sequences the batch into `txns`, in chunks under the core's lock (a connection
    /// task waiting for the lock waits for a few items, not a whole batch). Returns
    /// whether an item stopped the server, and whether every client was dropped
    /// (`OutOfTouch`, `Trouble`).
    fn sequence(&mut self, core: &Arc<Mutex<Core>>) -> (Flow, bool) {
        let mut flow = Flow::Go;
        let mut dropped = false;
        let txns = &mut self.txns;
        let mut items = self.batch.drain(..);
        while flow == Flow::Go && items.len() > 0 {
            with_core(core, &mut self.dirty, |c| {
                for it in items.by_ref().take(APPLY_CHUNK) {
                    dropped |= matches!(it, Item::OutOfTouch | Item::Trouble(_));
                    if c.sequence(it, txns) == Flow::Stop {
                        flow = Flow::Stop;
                        break;
                    }
                }
            });
            crate::conn::out::flush(&mut self.dirty);
        }
        (flow, dropped)
    }
}

/// The ensemble's sequencer: the same steps as [`Sequencer`], run as a task on the
/// member's runtime, where the connections, openraft and the writer run. A write then
/// reaches the sequencer and the writer without waking another thread (on a thread of
/// its own, each write woke the sequencer, and the sequencer woke the runtime for the
/// writer).
pub(crate) struct RaftSequencer {
    pub commit: crate::commit::raft::RaftCommit,
    pub rx: mpsc::Receiver<Item>,
    pub core: Arc<Mutex<Core>>,
    pub fatal: tokio::sync::watch::Sender<Option<crate::Fatal>>,
}

impl RaftSequencer {
    pub async fn run(mut self) {
        if let Err(e) = self.serve().await {
            tracing::error!(error = %e, "the ensemble's log failed; stopping the server");
            let _ = self.fatal.send(Some(std::sync::Arc::new(e)));
        }
        locked(&self.core, Core::finish);
    }

    async fn serve(&mut self) -> Result<(), CommitError> {
        let mut step = Step::default();
        while let Some(first) = self.rx.recv().await {
            step.gather(first, &mut self.rx, |t| self.commit.purge_through(t))?;
            if step.batch.is_empty() {
                continue;
            }
            let (flow, dropped) = step.sequence(&self.core);
            if dropped {
                self.commit.dropped_all_async().await;
            }
            self.commit.submit_async(&mut step.txns).await?;
            if flow == Flow::Stop {
                break;
            }
            // Let the connections and openraft run between batches (a busy sequencer
            // always finds the next item queued).
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}
