//! Background snapshots: the core takes an image of the state under its lock, O(1) in
//! the number of znodes and sessions (both are persistent maps shared with the live
//! state, see `zlock_core::tree::Nodes`; only the lock waiters are copied), a worker
//! thread encodes it straight into the file, then lets the commit stage drop log segments older than the
//! previous snapshot (one older snapshot and its log are kept as a fallback). Neither the
//! commit stage nor the core waits for the encoding or the disk.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use zlock_core::snapshot::Image;
use zlock_core::State;

use crate::pipeline::Item;

/// Snapshot files kept on disk.
const KEEP: usize = 2;

pub(crate) struct SnapshotWorker {
    tx: Option<std_mpsc::SyncSender<(u64, Image)>>,
    dir: PathBuf,
    /// Bumped by [`SnapshotWorker::write_now`]: an image taken before is not written
    /// (it would replace, at the same log position, the state written now).
    generation: Arc<AtomicU64>,
    /// Held while a snapshot is written, by the worker or by `write_now`.
    busy: Arc<std::sync::Mutex<()>>,
    handle: Option<JoinHandle<()>>,
    /// Set at shutdown: a snapshot still being written is abandoned (the log holds
    /// everything it would have), so stopping does not wait for hundreds of MB.
    stopping: Arc<AtomicBool>,
}

/// A writer that fails once the server is stopping.
struct Cancellable<'a> {
    inner: &'a mut dyn Write,
    stopping: &'a AtomicBool,
}

impl Write for Cancellable<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("server stopping"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl SnapshotWorker {
    /// Starts the worker; `timer` (metrics on) observes each snapshot written, ms
    /// (ZooKeeper's `snapshottime`).
    pub fn start(
        dir: PathBuf,
        commit: mpsc::Sender<Item>,
        timer: Option<metrics::Histogram>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std_mpsc::sync_channel::<(u64, Image)>(1);
        let stopping = Arc::new(AtomicBool::new(false));
        let stop_flag = stopping.clone();
        let generation = Arc::new(AtomicU64::new(0));
        let busy = Arc::new(std::sync::Mutex::new(()));
        let (current, held) = (generation.clone(), busy.clone());
        let worker_dir = dir.clone();
        let handle = std::thread::Builder::new()
            .name("zlock-snapshot".into())
            .spawn(move || {
                let dir = worker_dir;
                let mut previous: Option<u64> = None;
                while let Ok((taken, image)) = rx.recv() {
                    let _busy = held
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if taken != current.load(Ordering::SeqCst) {
                        tracing::info!(
                            index = image.applied.0,
                            "snapshot image from before a restore: not written"
                        );
                        continue;
                    }
                    let started = std::time::Instant::now();
                    let index = image.applied.0;
                    let written = zlock_store::snapshot::write_with(&dir, index, KEEP, |w| {
                        let mut w = Cancellable {
                            inner: w,
                            stopping: &stop_flag,
                        };
                        zlock_core::snapshot::write_image(&image, &mut w)
                    });
                    // Free the image (and the node copies it pins) before logging.
                    drop(image);
                    match written {
                        Ok(path) => {
                            if let Some(t) = &timer {
                                t.record(started.elapsed().as_secs_f64() * 1000.0);
                            }
                            tracing::info!(
                                path = %path.display(),
                                ms = started.elapsed().as_millis() as u64,
                                "snapshot written"
                            );
                            if let Some(p) = previous {
                                // Never waits: a purge skipped now is done by
                                // the next snapshot's, and the sequencer may be
                                // waiting for this thread at shutdown.
                                let _ = commit.try_send(Item::Purge { through: p });
                            }
                            previous = Some(index);
                        }
                        Err(_) if stop_flag.load(Ordering::Relaxed) => {
                            tracing::info!(index, "snapshot abandoned at shutdown");
                        }
                        Err(e) => tracing::error!(error = %e, "snapshot failed"),
                    }
                }
            })?;
        Ok(SnapshotWorker {
            tx: Some(tx),
            dir,
            generation,
            busy,
            handle: Some(handle),
            stopping,
        })
    }

    /// Writes `payload` as the snapshot of log position `index` now, durably, and
    /// removes every older snapshot; an image the worker took before is not written
    /// after it (for a restore: a restart must find this state, not one before it).
    pub fn write_now(&mut self, index: u64, payload: &[u8]) -> zlock_store::Result<PathBuf> {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _busy = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        zlock_store::snapshot::write(&self.dir, index, payload, 1)
    }

    /// Takes an image of `state` and hands it to the worker; skipped if the previous
    /// snapshot is still being written.
    pub fn submit(&mut self, state: &State) {
        let Some(tx) = &self.tx else { return };
        let started = std::time::Instant::now();
        let image = (self.generation.load(Ordering::SeqCst), Image::of(state));
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

    /// Abandons the snapshot in progress (if any) and stops the worker.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
