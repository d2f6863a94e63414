//! The one error type of the store.
//!
//! Every variant that concerns a file names it, and every variant that concerns a place
//! in a file names the byte offset, so that an operator reading the startup failure knows
//! which file to inspect (or move away) and where.

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Anything the WAL, the snapshot store or a meta file can fail with.
///
/// Storage errors are fatal to the server: none of them is ever turned into a ZooKeeper
/// error code for a client (see STYLE.md habit 5).
#[derive(Debug, Error)]
pub enum StoreError {
    /// An operating-system I/O call failed on `path`.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The bytes at `offset` in `file` are not what the format says they must be, and the
    /// damage is not a torn tail that recovery may cut away. Startup must stop here.
    #[error("corrupt {} at offset {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A file was written by a format version this build does not know (a newer zlock,
    /// most likely). The version field sits at `offset`.
    #[error(
        "{} at offset {offset}: unsupported format version {version} (this build reads version {supported})",
        file.display()
    )]
    UnsupportedVersion {
        file: PathBuf,
        offset: u64,
        version: u32,
        supported: u32,
    },

    /// `Wal::append` was called with an index that does not follow the last one.
    #[error("WAL append out of order: expected index {expected}, got {got}")]
    OutOfOrder { expected: u64, got: u64 },

    /// A WAL record or meta file payload longer than its `u32` length field can describe.
    #[error("payload of {len} bytes exceeds the maximum of {max} bytes")]
    PayloadTooLarge { len: usize, max: usize },

    /// `Wal::truncate_from(index)` would remove records at or below `floor`: the
    /// `after_index` the log was opened with, raised by every `Wal::purge_through`. A
    /// snapshot covers those records, so they are committed and must never be cut (and
    /// index 0 is never used, so truncating from 0 is refused as well). The log is
    /// unchanged.
    #[error(
        "WAL truncation from index {index} refused: every index up to {floor} is covered by \
         a snapshot (or is 0, which is never used) and may not be cut"
    )]
    TruncateCovered { index: u64, floor: u64 },

    /// An earlier write or fsync of the WAL failed. After a failed fsync the kernel may
    /// have dropped the dirty pages and cleared the error, so nothing the process believes
    /// about the file can be trusted any more: the only safe way on is a restart, whose
    /// recovery reads what actually reached the disk.
    #[error("WAL is unusable after an earlier failure ({cause}); restart to recover")]
    Poisoned { cause: String },

    /// The replay callback of `Wal::open` rejected the record at `offset` in `file`.
    #[error("replaying record {index} at {} offset {offset}: {source}", file.display())]
    Replay {
        file: PathBuf,
        offset: u64,
        index: u64,
        #[source]
        source: Box<StoreError>,
    },

    /// A payload the caller could not use (a Txn that does not decode, say). The store
    /// never produces this itself; it lets a replay callback report its own failure
    /// through the `StoreError` it must return.
    #[error("payload rejected: {0}")]
    Rejected(#[source] Box<dyn StdError + Send + Sync>),
}

impl StoreError {
    /// Wraps a caller's own error, typically from inside a replay callback.
    pub fn rejected(err: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StoreError::Rejected(err.into())
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        StoreError::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
