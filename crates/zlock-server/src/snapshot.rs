//! Background snapshots: the apply thread encodes the state, a worker thread writes the
//! file and then lets the commit stage drop log segments older than the previous
//! snapshot (one older snapshot and its log are kept as a fallback).

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use zlock_core::State;

use crate::pipeline::Item;

/// Snapshot files kept on disk.
const KEEP: usize = 2;

pub(crate) struct SnapshotWorker {
    tx: Option<std_mpsc::SyncSender<(u64, Vec<u8>)>>,
    handle: Option<JoinHandle<()>>,
}

impl SnapshotWorker {
    pub fn start(dir: PathBuf, commit: mpsc::UnboundedSender<Item>) -> std::io::Result<Self> {
        let (tx, rx) = std_mpsc::sync_channel::<(u64, Vec<u8>)>(1);
        let handle = std::thread::Builder::new()
            .name("zlock-snapshot".into())
            .spawn(move || {
                let mut previous: Option<u64> = None;
                while let Ok((index, bytes)) = rx.recv() {
                    let started = std::time::Instant::now();
                    match zlock_store::snapshot::write(&dir, index, &bytes, KEEP) {
                        Ok(path) => {
                            tracing::info!(
                                path = %path.display(),
                                bytes = bytes.len(),
                                ms = started.elapsed().as_millis() as u64,
                                "snapshot written"
                            );
                            if let Some(p) = previous {
                                let _ = commit.send(Item::Purge { through: p });
                            }
                            previous = Some(index);
                        }
                        Err(e) => tracing::error!(error = %e, "snapshot failed"),
                    }
                }
            })?;
        Ok(SnapshotWorker {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Encodes `state` now and hands it to the worker; skipped if the previous snapshot
    /// is still being written.
    pub fn submit(&mut self, state: &State) {
        let Some(tx) = &self.tx else { return };
        let mut bytes = Vec::new();
        zlock_core::snapshot::encode(state, &mut bytes);
        match tx.try_send((state.zxid as u64, bytes)) {
            Ok(()) => {}
            Err(std_mpsc::TrySendError::Full(_)) => {
                tracing::warn!("previous snapshot still being written; skipping this one")
            }
            Err(std_mpsc::TrySendError::Disconnected(_)) => {}
        }
    }

    /// Finishes the snapshot in progress and stops the worker.
    pub fn stop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
