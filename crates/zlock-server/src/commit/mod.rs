//! The commit stage: where a Txn becomes durable and ordered. One trait, two
//! implementations: the local write-ahead log ([`WalCommit`], the single node) and, to
//! come, the Raft log on openraft (an ensemble). The state machine, the router, sessions,
//! watches and lock queues do not know which one is in use.
//!
//! # The contract
//!
//! An implementation of [`Commit`] is built with an [`Apply`], the receiving end (the
//! server's state-machine host), and must guarantee:
//!
//! 1. **Order.** Committed entries reach [`Apply::apply`] in log order, each exactly
//!    once, at consecutive positions starting right after the position the log was
//!    opened at. Txns proposed in one call, or in successive calls from one proposer,
//!    keep their order in the log.
//!    An entry holds one or more Txns (a Raft entry holds a proposed batch: one
//!    append and one fsync for all of them); its Txns are applied in order, in one
//!    call.
//! 2. **Nothing visible before durable.** An entry reaches `apply` only once it survives
//!    a crash (`kill -9`, power loss within what fdatasync guarantees): on the local disk
//!    for the WAL, on a majority for Raft. Whatever `apply` reveals (a reply, a watch
//!    event, a lock grant) is therefore never un-done.
//! 3. **Crash and restart.** Reopening the log after a crash replays at least every
//!    entry that was applied, in the same order at the same positions; new proposals
//!    continue after the last one.
//! 4. **A failure stops.** After an error from [`Commit::propose`] nothing more is
//!    applied and every later call fails: the server stops rather than acknowledge
//!    anything after a write that may be lost.
//! 5. **Entries that are not Txns** (a Raft leader's blank entry, a membership change)
//!    still reach `apply`, as [`Entry::Blank`], so the state's log position advances
//!    with the log.
//!
//! The conformance suite in `tests/it/commit_conformance.rs` checks these for every
//! implementation.

pub mod raft;
mod wal;

pub use wal::{LogStore, Timed, WalCommit};

use std::sync::Arc;

use thiserror::Error;
use zlock_core::{LogIndex, Txn};

#[derive(Debug, Error)]
pub enum CommitError {
    #[error(transparent)]
    Store(#[from] zlock_store::StoreError),
    #[error("the commit log failed earlier and is stopped")]
    Stopped,
    /// The ensemble's Raft failed on this member: the server stops. (Typed where it is
    /// made: `raft::RaftFailure`; the server needs only the kind.)
    #[error("the ensemble failed: {0}")]
    Raft(Arc<dyn std::error::Error + Send + Sync>),
    /// The proposal may or may not have been committed (the leader changed or could
    /// not be reached). The commit stage is not stopped; the requests waiting for
    /// these Txns must be treated as lost (their clients see a connection loss).
    /// (Typed where it is made: `raft::Unknown`.)
    #[error("no answer from the ensemble's leader: {0}")]
    Unavailable(Arc<dyn std::error::Error + Send + Sync>),
}

/// One committed log entry.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// The Txns of one proposal, in order (one, in the WAL; a batch, in the Raft log);
    /// each takes its own zxid.
    Txns(&'a [Txn]),
    /// A position in the log that holds no Txn.
    Blank,
}

/// The receiving end of the commit stage: applies committed entries in order.
pub trait Apply: Send + 'static {
    /// `entries` are committed and durable, in log order (see the module contract).
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>);
}

/// What a replicated commit stage needs of its applier beyond [`Apply`]: the applied
/// state as a snapshot (to bring a lagging member up to date), and a snapshot put in its
/// place.
pub trait Snapshots: Apply {
    /// Takes an image of the state after the last applied entry (cheap: it must not
    /// hold up `apply`) and returns the job that encodes it, to be run off any lock.
    fn image(&mut self) -> SnapshotJob;
    /// Replaces the state by a snapshot payload that includes every entry through
    /// `index`.
    fn install(&mut self, index: LogIndex, payload: &[u8]) -> Result<(), InstallError>;
}

/// Why a snapshot payload could not be installed: the implementation's own error
/// (the server's is `zlock_core::snapshot::SnapshotError`), kept whole for the log line.
pub type InstallError = Box<dyn std::error::Error + Send + Sync>;

/// Encodes a snapshot image into a writer.
pub type SnapshotJob = Box<dyn FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send>;

/// The commit stage: makes proposals durable and ordered, then hands them to its
/// [`Apply`].
pub trait Commit: Send + 'static {
    /// Proposes `batch` (emptied), in order. An implementation may apply before it
    /// returns (the WAL does: fsync, then apply, on the calling thread) or later (Raft:
    /// once a majority has the entries).
    fn propose(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError>;

    /// Proposes `batch` (emptied) without waiting for it where the implementation
    /// pipelines (Raft: several batches replicate at once, and what fails one is
    /// reported later, on the implementation's own channel); the order and durability
    /// rules are [`Commit::propose`]'s. By default, `propose`.
    fn submit(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError> {
        self.propose(batch)
    }

    /// Every client connection was dropped: the requests in batches submitted before
    /// now have nobody waiting for them (a pipelining implementation that stopped
    /// taking batches after an unknown outcome takes them again from here).
    fn dropped_all(&mut self) {}

    /// Drops entries through `index` that a snapshot has made unnecessary. Failing to
    /// drop them loses nothing.
    fn purge_through(&mut self, index: LogIndex) -> Result<(), CommitError>;
}
