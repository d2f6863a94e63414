//! Restoring a backup (`crate::backup`) into a new data directory, offline, before the
//! server starts on it: `zlock snapshot restore FILE --data-dir D`.
//!
//! What a restore does to the state:
//! - **The zxid moves to the next epoch** (`(epoch + 1) << 32`, where the epoch is the
//!   zxid's upper 32 bits, as a new ZooKeeper leader starts one). A client that saw a
//!   change made after the backup holds a zxid above the file's; a ZooKeeper client
//!   refuses a server whose last zxid is below the one it saw, so without the move it
//!   could not reconnect until as many changes were made again. Past the move every
//!   zxid the old server gave is below the restored one (unless it made 4 billion
//!   changes after the backup).
//! - **No session survives**: the clients of the backed-up server are not connected to
//!   the restored one, and a session cannot be resumed across the move anyway. Each
//!   session is closed as an expiry closes it (one CloseSession Txn each, applied right
//!   after the move): its ephemeral nodes are deleted, its lock entries leave their
//!   queues (the next waiter is granted), and the parents' Stats move as they would.
//! - The tree, ACLs, every Stat field of the nodes not deleted, TTL and container nodes
//!   and the lock-delays are the file's.
//!
//! For a single node the directory gets the state as a snapshot, its log empty. For a
//! member of a new ensemble (`server.N` lines and a `myid`), run on every member with
//! the same file and configuration, it gets the same Raft directory on each
//! (`crate::commit::raft::seed`): the state as a snapshot at one log position, the new
//! ensemble's membership, the log purged through there. The members then elect a
//! leader and serve the restored state; no session and the moved zxid as above.

use std::path::{Path, PathBuf};

use thiserror::Error;
use zlock_core::txn::{Origin, TxnBody};
use zlock_core::{LogIndex, SessionId, State, Txn, Zxid};

use crate::backup::{BackupError, Header};
use crate::config::ServerConfig;

/// Snapshot files a restored directory starts with.
const KEEP: usize = 2;

/// Why a restore did not happen. Nothing is written then.
#[derive(Debug, Error)]
pub enum RestoreError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Backup { path: PathBuf, source: BackupError },
    #[error(
        "{} already holds data: a restore writes a new data directory (move it aside, \
         or give another --data-dir)",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("writing the restored snapshot: {0}")]
    Store(#[from] zlock_store::StoreError),
    #[error("writing the member's Raft directory: {0}")]
    Seed(#[from] std::io::Error),
}

/// What a restore wrote.
#[derive(Debug, Clone)]
pub struct Restored {
    pub header: Header,
    /// The zxid the server starts from (after the move and the sessions' closes).
    pub zxid: i64,
    pub sessions_closed: usize,
    pub ephemerals_deleted: usize,
    /// The snapshot file written.
    pub snapshot: PathBuf,
    /// For a member of a new ensemble: its identity (`zlock.ensembleId`), the same on
    /// every member restored from this file into this member list.
    pub ensemble_id: Option<String>,
}

/// The first zxid of the epoch after `zxid`'s.
pub fn next_epoch(zxid: i64) -> i64 {
    ((zxid >> 32) + 1) << 32
}

/// Restores the backup at `file` into `cfg`'s (empty) data directory.
pub fn restore(file: &Path, cfg: &ServerConfig) -> Result<Restored, RestoreError> {
    for dir in [
        cfg.snapshot_dir(),
        cfg.wal_dir(),
        crate::ensemble::raft_dir(cfg),
        crate::ensemble::raft_log_dir(cfg),
    ] {
        if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(RestoreError::NotEmpty(dir));
        }
    }
    let bytes = std::fs::read(file).map_err(|source| RestoreError::Read {
        path: file.to_owned(),
        source,
    })?;
    let config = zlock_core::Config {
        extended_types: cfg.extended_types,
    };
    // A single node's log positions go on from the file's; a new ensemble's log starts
    // over (its first entry after the seed's position).
    let first = cfg.ensemble.as_ref().map(|_| 1);
    let Prepared {
        header,
        state,
        sessions_closed,
        ephemerals_deleted,
    } = prepare(&bytes, config, first).map_err(|source| RestoreError::Backup {
        path: file.to_owned(),
        source,
    })?;
    let mut payload = Vec::new();
    zlock_core::snapshot::encode(&state, &mut payload);
    let mut ensemble_id = None;
    let snapshot = match &cfg.ensemble {
        None => zlock_store::snapshot::write(&cfg.snapshot_dir(), state.applied.0, &payload, KEEP)?,
        Some(e) => {
            let dir = crate::ensemble::raft_dir(cfg);
            let id = identity(&bytes, e);
            let path = crate::commit::raft::seed::seed(
                &dir.join("snapshots"),
                &dir,
                &e.members,
                (state.applied.0, &id),
                &payload,
            )?;
            ensemble_id = Some(id);
            path
        }
    };
    Ok(Restored {
        header,
        zxid: state.zxid.0,
        sessions_closed,
        ephemerals_deleted,
        snapshot,
        ensemble_id,
    })
}

/// A new ensemble's identity: the backup file's checksum and the member list's, so that
/// every member restored from one file into one member list gets the same one, and any
/// other ensemble (the backup's own among them) another.
fn identity(file: &[u8], e: &crate::config::EnsembleConfig) -> String {
    format!(
        "{:08x}-{:08x}",
        crc32c::crc32c(file),
        crc32c::crc32c(e.member_lines().as_bytes())
    )
}

/// A backup's state made ready to serve: the zxid moved, every session closed.
pub struct Prepared {
    pub header: Header,
    pub state: State,
    pub sessions_closed: usize,
    pub ephemerals_deleted: usize,
}

/// Decodes the backup in `bytes` and prepares its state (see the module doc). The
/// state's log position is `applied`, else the file's.
pub fn prepare(
    bytes: &[u8],
    config: zlock_core::Config,
    applied: Option<u64>,
) -> Result<Prepared, BackupError> {
    let (header, mut state) = crate::backup::decode(bytes, config)?;
    state.applied = LogIndex(applied.unwrap_or(header.applied));
    state.zxid = Zxid(next_epoch(state.zxid.0));
    let before = state.tree.ephemeral_count();
    let sessions_closed = close_sessions(&mut state);
    let ephemerals_deleted = before - state.tree.ephemeral_count();
    Ok(Prepared {
        header,
        state,
        sessions_closed,
        ephemerals_deleted,
    })
}

/// Closes every session of `state` as its expiry would, each in an entry of its own
/// after the last applied one; how many.
fn close_sessions(state: &mut State) -> usize {
    let sessions: Vec<SessionId> = state.sessions.keys().copied().collect();
    let time = state.time_ms;
    for &session_id in &sessions {
        let txn = Txn::new(
            Origin::default(),
            time,
            TxnBody::CloseSession { session_id },
        );
        let index = state.applied.next();
        // In order by construction: each entry follows the one before.
        let _ = state.apply(index, &txn);
    }
    sessions.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_epoch_is_above_every_zxid_of_this_one() {
        assert_eq!(next_epoch(0), 1 << 32);
        assert_eq!(next_epoch(0x1234), 1 << 32);
        assert_eq!(next_epoch((3 << 32) + 7), 4 << 32);
        assert!(next_epoch(u32::MAX as i64) > u32::MAX as i64);
    }
}
