//! Which files a path given to the dumps means, and reading them without changing
//! anything: a data directory of either layout, a snapshot directory, one snapshot
//! file, a backup file; a log directory of either kind.
//!
//! The layouts (README "Data directory", "An ensemble"):
//!
//! ```text
//! single node   <dataDir>/snapshots/snapshot.<index>      payload: the state
//!               <dataLogDir>/wal/log.<first index>        record: one Txn
//! member        <dataDir>/raft/snapshots/snapshot.<index> payload: Raft meta, the state
//!               <dataLogDir>/raft/log/log.<first index>   record: one Raft entry
//! backup        any file starting with ZLOCKBAK           (zlock snapshot save)
//! ```
//!
//! Every file is read with `fs::read` (opened read-only); nothing is created, cut or
//! deleted, so the dumps may run on a live server's directory.

use std::fs;
use std::path::{Path, PathBuf};

use thiserror::Error;
use zlock_core::snapshot::{SnapshotError, SNAPSHOT_VERSION};
use zlock_core::{Config, State};
use zlock_server::backup::{self, BackupError, Header};
use zlock_server::commit::raft::codec::{read_snapshot_head, v1};
use zlock_store::StoreError;

/// Why a dump could not read what it was given.
#[derive(Debug, Error)]
pub enum DumpError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no snapshot in {} (looked in raft/snapshots/, snapshots/ and the directory itself)",
        .0.display()
    )]
    NoSnapshot(PathBuf),
    #[error(
        "no log in {} (looked in raft/log/, wal/ and for log.* files in the directory itself)",
        .0.display()
    )]
    NoLog(PathBuf),
    #[error("{}: {source}", path.display())]
    Backup { path: PathBuf, source: BackupError },
    #[error("{}: the state does not decode: {source}", path.display())]
    State {
        path: PathBuf,
        source: SnapshotError,
    },
    #[error("{}: the Raft meta at the start of the payload does not decode: {source}", path.display())]
    Meta {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What kind of file a snapshot came from, with what that kind adds to the state.
pub enum SnapshotKind {
    /// A single node's snapshot.
    Single,
    /// An ensemble member's Raft snapshot: its last log id and membership.
    Member(v1::SnapshotMeta),
    /// A backup file (`zlock snapshot save`).
    Backup(Header),
}

/// One snapshot, checked and decoded.
pub struct Loaded {
    pub file: PathBuf,
    /// The log position it holds everything up to (a backup: the member's applied one).
    pub index: u64,
    pub kind: SnapshotKind,
    pub state: State,
}

/// What the state decodes with: TTL nodes allowed, so a snapshot of a server that
/// allows them reads (the setting decides what a server accepts, not what it stored).
fn config() -> Config {
    Config {
        extended_types: true,
    }
}

/// The snapshot `path` means: the file itself, or the newest valid snapshot of a data
/// directory (a member's or a single node's) or of a snapshot directory. A damaged newer
/// snapshot is skipped with a warning on stderr, as a server starting there would.
pub fn load_snapshot(path: &Path) -> Result<Loaded, DumpError> {
    if path.is_file() {
        return load_file(path);
    }
    for dir in [path.join("raft").join("snapshots"), path.join("snapshots")] {
        if dir.is_dir() {
            return newest_in(&dir);
        }
    }
    newest_in(path)
}

fn newest_in(dir: &Path) -> Result<Loaded, DumpError> {
    let files = zlock_store::snapshot::list(dir)?;
    for (_, file) in files.iter().rev() {
        match load_file(file) {
            Ok(loaded) => return Ok(loaded),
            Err(DumpError::Store(e @ StoreError::Corrupt { .. })) => {
                eprintln!("warning: skipping a damaged snapshot: {e}");
            }
            Err(e) => return Err(e),
        }
    }
    Err(DumpError::NoSnapshot(dir.to_path_buf()))
}

fn load_file(path: &Path) -> Result<Loaded, DumpError> {
    let bytes = fs::read(path).map_err(|source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file = path.to_path_buf();
    if bytes.starts_with(&backup::MAGIC) {
        let (header, payload) = backup::read(&bytes).map_err(|source| DumpError::Backup {
            path: file.clone(),
            source,
        })?;
        let state = decode_state(path, payload)?;
        return Ok(Loaded {
            file,
            index: header.applied,
            kind: SnapshotKind::Backup(header),
            state,
        });
    }
    let (index, payload) = zlock_store::snapshot::check_file(path, &bytes)?;
    // A single node's payload starts with the state's version (a big-endian i32, 2 to
    // the current one: bytes 0 0 0 v); a member's with the length of its Raft meta, a
    // little-endian u32 that those bytes would make v << 24, far longer than any meta.
    let version = payload
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (kind, state_bytes) = match version {
        Some(v) if (2..=SNAPSHOT_VERSION).contains(&v) => (SnapshotKind::Single, payload),
        _ => {
            let (meta, rest) = read_snapshot_head(payload).map_err(|source| DumpError::Meta {
                path: file.clone(),
                source,
            })?;
            (SnapshotKind::Member(meta), rest)
        }
    };
    let state = decode_state(path, state_bytes)?;
    Ok(Loaded {
        file,
        index,
        kind,
        state,
    })
}

fn decode_state(path: &Path, bytes: &[u8]) -> Result<State, DumpError> {
    zlock_core::snapshot::decode(bytes, config()).map_err(|source| DumpError::State {
        path: path.to_path_buf(),
        source,
    })
}

/// What a log's records hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// A single node's WAL: one Txn per record.
    Wal,
    /// An ensemble member's Raft log: one Raft entry per record.
    Raft,
    /// A directory of segments that does not say: the first record decides.
    Unknown,
}

/// The log directory `path` means: a member's data (or data log) directory, a single
/// node's, or a directory of segments itself.
pub fn find_log(path: &Path) -> Result<(PathBuf, LogKind), DumpError> {
    let raft = path.join("raft").join("log");
    if raft.is_dir() {
        return Ok((raft, LogKind::Raft));
    }
    let wal = path.join("wal");
    if wal.is_dir() {
        return Ok((wal, LogKind::Wal));
    }
    let has_segments = fs::read_dir(path)
        .map_err(|source| DumpError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("log."));
    if !has_segments {
        return Err(DumpError::NoLog(path.to_path_buf()));
    }
    let named = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let kind = match (
        named(path).as_deref(),
        path.parent().and_then(named).as_deref(),
    ) {
        (Some("log"), Some("raft")) => LogKind::Raft,
        (Some("wal"), _) => LogKind::Wal,
        _ => LogKind::Unknown,
    };
    Ok((path.to_path_buf(), kind))
}
