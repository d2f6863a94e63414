//! The commit trait: where a Txn becomes durable. One implementation today, the local
//! write-ahead log; the Raft log will be the second. The pipeline, tree, sessions and
//! watches do not know which one is in use.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CommitError {
    #[error(transparent)]
    Store(#[from] zlock_store::StoreError),
}

/// A durable, ordered log of Txn payloads.
///
/// Contract:
/// - `append` takes consecutive indexes (each one more than the last) and may buffer;
/// - after `sync` returns Ok, every appended payload survives a crash (`kill -9`, power
///   loss within what fdatasync guarantees) and will be replayed by recovery;
/// - after an error the log must not be used again: the server stops.
pub trait CommitLog: Send + 'static {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError>;
    fn sync(&mut self) -> Result<(), CommitError>;
    /// Drops log records up to `index` that a snapshot has made unnecessary.
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError>;
}

impl CommitLog for zlock_store::wal::Wal {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::append(self, index, payload)?)
    }
    fn sync(&mut self) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::sync(self)?)
    }
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::purge_through(self, index)?)
    }
}
