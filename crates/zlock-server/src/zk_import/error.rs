//! What can stop an import, each naming the file (and the byte) it is about, so an
//! operator knows which of ZooKeeper's files to look at.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ImportError {
    /// Reading one of ZooKeeper's files, or writing the new directory, failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No `snapshot.<zxid>` in the directory given (nor in its `version-2`).
    #[error(
        "{}: no ZooKeeper snapshot (snapshot.<zxid>) here; give ZooKeeper's dataDir, \
         the directory holding version-2",
        dir.display()
    )]
    NoSnapshot { dir: PathBuf },
    /// Every snapshot failed to read; each reason is listed.
    #[error("{}: no valid snapshot: {}", dir.display(), reasons.join("; "))]
    NoValidSnapshot { dir: PathBuf, reasons: Vec<String> },
    /// Damage that ZooKeeper itself would refuse to start on.
    #[error("{} at byte {offset}: {what}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    /// A snapshot compressed in a way this build does not read.
    #[error(
        "{}: compressed with {method}, which zlock does not read (it reads uncompressed \
         and gzip snapshots); set snapshot.compression.method=gz (or remove it) in \
         zoo.cfg, start ZooKeeper once so that it writes a new snapshot, stop it and \
         import again",
        path.display()
    )]
    UnsupportedCompression { path: PathBuf, method: String },
    /// The target already holds something: an import never writes over data.
    #[error(
        "{} already holds data: import writes a new data directory only \
         (give a path that does not exist, or an empty directory)",
        .0.display()
    )]
    TargetNotEmpty(PathBuf),
    /// Writing zlock's snapshot failed.
    #[error("writing the zlock snapshot into {}: {source}", dir.display())]
    Store {
        dir: PathBuf,
        source: zlock_store::StoreError,
    },
}

impl ImportError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ImportError {
        ImportError::Io {
            path: path.into(),
            source,
        }
    }
}
