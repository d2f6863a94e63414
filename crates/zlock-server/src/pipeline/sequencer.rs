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

use super::core::{with_core, Core, Flow, APPLY_CHUNK};
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
    pub fatal: tokio::sync::watch::Sender<Option<String>>,
}

impl<C: Commit> Sequencer<C> {
    pub fn run(mut self) {
        self.serve();
        // Stopped, or the log failed: nothing more is applied.
        let mut dirty = Vec::new();
        with_core(&self.core, &mut dirty, Core::finish);
        crate::net::out::flush(&mut dirty);
    }

    fn serve(&mut self) {
        let mut dirty = Vec::new();
        let mut txns: Vec<Txn> = Vec::with_capacity(16);
        let mut batch: Vec<Item> = Vec::with_capacity(16);
        loop {
            let Some(first) = self.next_item() else {
                break;
            };
            let mut next = Some(first);
            while let Some(it) = next.take() {
                match it {
                    // The log's own business: nothing to sequence.
                    Item::Purge { through } => self.purge(through),
                    Item::Trouble(e) if !matches!(e, CommitError::Unavailable(_)) => {
                        return self.fail(e)
                    }
                    it => batch.push(it),
                }
                if batch.len() < MAX_BATCH {
                    next = self.rx.try_recv().ok();
                }
            }
            if batch.is_empty() {
                continue;
            }
            let mut flow = Flow::Go;
            let mut dropped = false;
            // In chunks, as the core applies: a connection task waiting for the lock
            // waits for a few items, not a whole batch.
            let mut items = batch.drain(..);
            while flow == Flow::Go && items.len() > 0 {
                with_core(&self.core, &mut dirty, |c| {
                    for it in items.by_ref().take(APPLY_CHUNK) {
                        dropped |= matches!(it, Item::OutOfTouch | Item::Trouble(_));
                        if c.sequence(it, &mut txns) == Flow::Stop {
                            flow = Flow::Stop;
                            break;
                        }
                    }
                });
                crate::net::out::flush(&mut dirty);
            }
            drop(items);
            if dropped {
                // Every client was dropped: the batches handed over before hold
                // nothing anybody waits for (a pipelining log that stopped taking
                // batches takes them again from here).
                self.commit.dropped_all();
            }
            match self.commit.submit(&mut txns) {
                Ok(()) => {}
                Err(CommitError::Unavailable(why)) => {
                    // Committed or not, nobody can say: drop every client here (they
                    // reconnect and resume), and go on with the next batch.
                    tracing::warn!(reason = %why, "no answer from the leader; closing client connections");
                    txns.clear();
                    with_core(&self.core, &mut dirty, |c| c.router.drop_all());
                    crate::net::out::flush(&mut dirty);
                }
                Err(e) => return self.fail(e),
            }
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

    fn purge(&mut self, through: u64) {
        if let Err(e) = self.commit.purge_through(LogIndex(through)) {
            // Failing to delete old segments loses nothing; keep serving.
            tracing::warn!(error = %e, "could not remove old log segments");
        }
    }

    fn fail(&self, e: CommitError) {
        tracing::error!(error = %e, "write-ahead log failed; stopping the server");
        let _ = self.fatal.send(Some(e.to_string()));
    }
}
