//! Why the ensemble's commit stage failed a batch, typed: the server branches on the
//! kind ([`super::super::CommitError::Raft`] stops it, [`super::super::CommitError::Unavailable`]
//! drops its clients), and the reasons say what happened for the log line.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::Fatal;

use super::peer::{ForwardError, FrameError};
use super::types::Zraft;
use crate::commit::CommitError;

impl From<RaftFailure> for CommitError {
    fn from(f: RaftFailure) -> CommitError {
        CommitError::Raft(Arc::new(f))
    }
}

impl From<Unknown> for CommitError {
    fn from(u: Unknown) -> CommitError {
        CommitError::Unavailable(Arc::new(u))
    }
}

/// How this member's Raft failed: it takes nothing more, and the server stops.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RaftFailure {
    #[error("raft stopped")]
    Stopped,
    /// openraft stopped with a fatal error: its log store failed, its core panicked, or
    /// it was shut down. (openraft's error, kept whole: it stays inside this module, as
    /// the server sees a [`CommitError::Raft`] only as an error to log.)
    #[error("raft failed: {0}")]
    Fatal(#[source] Fatal<Zraft>),
    /// openraft refused the configuration the options make.
    #[error("invalid raft configuration: {0}")]
    Config(#[source] Arc<openraft::ConfigError>),
    /// Opening the member's log, gate or vote failed.
    #[error("opening the member's state: {0}")]
    Open(Arc<std::io::Error>),
    /// The log store failed, with the store's own error (the simulation's disk; the
    /// real one fails with [`zlock_store::StoreError`] instead, as [`CommitError::Store`]).
    #[error("log store: {0}")]
    Disk(#[source] Arc<dyn std::error::Error + Send + Sync>),
}

/// Why a batch's outcome is unknown: it may or may not be committed. The requests waiting
/// for it are treated as lost (their clients see a connection loss and resume).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unknown {
    #[error("no leader elected within {0:?}")]
    NoLeader(Duration),
    #[error("entry {0} committed but not applied here in time")]
    NotApplied(u64),
    /// The leader took a frame after it had refused an earlier one: the order of what
    /// it took is not the order sent. Its submitter's rule (`submit::Submitter`) keeps
    /// this from happening; the writer still checks.
    #[error("a frame was taken after an earlier one was refused")]
    TakenAfterRefused,
    /// The leader's answer for the frame.
    #[error("leader {leader}: {said}")]
    Leader { leader: u64, said: ForwardError },
    /// The forwarding connection failed.
    #[error("forwarding to member {leader}: {source}")]
    Link {
        leader: u64,
        #[source]
        source: Arc<FrameError>,
    },
    #[error("member {leader} did not answer a forwarded frame within {within:?}")]
    Silent { leader: u64, within: Duration },
    #[error("member {leader} closed the forwarding connection")]
    Closed { leader: u64 },
    #[error("member {leader} answered a forwarded frame with a reply of another kind")]
    UnexpectedReply { leader: u64 },
    /// A forwarded frame's connection was gone before its answer was read.
    #[error("the connection a forwarded frame went on is gone")]
    NoLink,
    /// Another member was elected while the old leader held forwarded frames.
    #[error("member {0} was replaced as leader while it held forwarded batches")]
    Replaced(u64),
    /// This member was out of touch with its quorum while batches waited.
    #[error("out of touch with the quorum")]
    OutOfTouch,
    /// Refused by every leader tried, past the patience.
    #[error("no leader took the batch within {0:?}")]
    NotTaken(Duration),
}
