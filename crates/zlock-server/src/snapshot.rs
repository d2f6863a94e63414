//! Background snapshots: the apply thread takes a cheap copy-on-write image of the state
//! (pointer copies, see `zlock_core::tree::DataTree`), a worker thread encodes it
//! straight into the file, then lets the commit stage drop log segments older than the
//! previous snapshot (one older snapshot and its log are kept as a fallback). Neither the
//! commit stage nor the apply thread waits for the encoding or the disk.

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use zlock_core::snapshot::Image;
use zlock_core::State;

use crate::pipeline::Item;

/// Snapshot files kept on disk.
const KEEP: usize = 2;

pub(crate) struct SnapshotWorker {
    tx: Option<std_mpsc::SyncSender<Image>>,
    handle: Option<JoinHandle<()>>,
}

impl SnapshotWorker {
    pub fn start(dir: PathBuf, commit: mpsc::UnboundedSender<Item>) -> std::io::Result<Self> {
        let (tx, rx) = std_mpsc::sync_channel::<Image>(1);
        let handle = std::thread::Builder::new()
            .name("zlock-snapshot".into())
            .spawn(move || {
                let mut previous: Option<u64> = None;
                while let Ok(image) = rx.recv() {
                    let started = std::time::Instant::now();
                    let index = image.zxid as u64;
                    let written = zlock_store::snapshot::write_with(&dir, index, KEEP, |w| {
                        zlock_core::snapshot::write_image(&image, w)
                    });
                    // Free the image (and the node copies it pins) before logging.
                    drop(image);
                    match written {
                        Ok(path) => {
                            tracing::info!(
                                path = %path.display(),
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

    /// Takes an image of `state` and hands it to the worker; skipped if the previous
    /// snapshot is still being written.
    pub fn submit(&mut self, state: &State) {
        let Some(tx) = &self.tx else { return };
        let started = std::time::Instant::now();
        let image = Image::of(state);
        tracing::debug!(
            us = started.elapsed().as_micros() as u64,
            "snapshot image taken"
        );
        match tx.try_send(image) {
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
