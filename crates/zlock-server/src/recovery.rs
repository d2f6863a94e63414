//! Startup: the newest valid snapshot, then every logged Txn after it.

use std::time::Instant;

use thiserror::Error;
use zlock_core::{Config, LogIndex, State, Txn};
use zlock_store::wal::{Wal, WalOptions};
use zlock_store::StoreError;

use crate::config::ServerConfig;

#[derive(Debug, Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("snapshot {index} does not decode: {source}")]
    Snapshot {
        index: u64,
        source: zlock_core::snapshot::SnapshotError,
    },
    #[error("log record {index} does not follow the snapshot or the record before it")]
    OutOfOrder { index: u64 },
}

/// The recovered state and the log, ready to append after it.
pub struct Recovered {
    pub state: State,
    pub wal: Wal,
}

pub fn recover(cfg: &ServerConfig) -> Result<Recovered, RecoveryError> {
    let started = Instant::now();
    let core_cfg = Config {
        extended_types: cfg.extended_types,
    };
    let mut state = match zlock_store::snapshot::load_latest(&cfg.snapshot_dir())? {
        Some((index, bytes)) => {
            let mut st = zlock_core::snapshot::decode(&bytes, core_cfg.clone())
                .map_err(|source| RecoveryError::Snapshot { index, source })?;
            // The file is named by the log position it was taken at.
            st.applied = LogIndex(index);
            tracing::info!(
                index,
                zxid = %st.zxid,
                nodes = st.tree.len(),
                "loaded snapshot"
            );
            st
        }
        None => State::new(core_cfg),
    };
    let after = state.applied.0;
    let mut replayed = 0u64;
    let wal = Wal::open(
        &cfg.wal_dir(),
        WalOptions {
            preallocate_bytes: cfg.wal_preallocate_bytes,
            ..WalOptions::default()
        },
        after,
        |index, payload| {
            let txn = Txn::decode(payload).map_err(StoreError::rejected)?;
            state
                .apply(LogIndex(index), &txn)
                .map_err(StoreError::rejected)?;
            replayed += 1;
            Ok(())
        },
    )?;
    tracing::info!(
        zxid = %state.zxid,
        replayed,
        nodes = state.tree.len(),
        sessions = state.sessions.len(),
        ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Recovered { state, wal })
}
