//! openraft's state machine: committed entries go to the member's [`Snapshots`] host
//! (the server's core, or the conformance suite's recorder) in order; snapshots are the
//! host's snapshot, in zlock's checked snapshot files.
//!
//! A snapshot file's payload is `u32 meta length | meta | host payload` (`codec.rs`): the
//! Raft facts of the snapshot (last log id, membership) travel with the state, so a
//! file received from the leader is complete, and its checksums cover both.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use zlock_core::LogIndex;

use super::codec::{encode_snapshot_head, split_snapshot};
use super::log::io_err;
use super::types::{LogId, Membership, Snapshot, SnapshotMeta, Zraft};
use crate::commit::{Entry as CommitEntry, Snapshots};

/// Snapshot files kept.
const KEEP: usize = 2;

/// The host and the Raft facts of what it has applied, under one lock so a snapshot's
/// image and its meta always agree.
pub(crate) struct Hosted {
    pub host: Box<dyn Snapshots>,
    applied: Option<LogId>,
    membership: Membership,
}

pub struct StateMachine {
    inner: Arc<Mutex<Hosted>>,
    dir: PathBuf,
    /// The last applied index, for proposers waiting to see their entries applied here.
    applied_tx: Arc<watch::Sender<u64>>,
    /// The membership of the last applied membership entry (or snapshot): the
    /// ensemble's committed configuration, which `/zookeeper/config` shows.
    membership_tx: Arc<watch::Sender<Membership>>,
    /// Snapshot after this many Txns (ZooKeeper's snapCount counts Txns, and a Raft
    /// entry holds a batch of them, so openraft's own count of entries is not used).
    snap_every: Option<u64>,
    /// Txns applied since the last snapshot was asked for, or installed.
    since_snapshot: u64,
    /// Txns after which the next snapshot is asked for: half of `snap_every` plus a
    /// random part of the other half, rolled again each time, as ZooKeeper does, so
    /// that the members (which apply the same Txns) do not all write a snapshot, purge
    /// their logs and fall behind their heartbeats at the same moment.
    snapshot_at: u64,
    /// Told when a snapshot is due; [`RaftCommit`](super::RaftCommit) asks openraft.
    snapshot_due: Arc<tokio::sync::Notify>,
}

fn lock(m: &Mutex<Hosted>) -> std::sync::MutexGuard<'_, Hosted> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StateMachine {
    /// A state machine over `host`, restored from the newest snapshot in `dir` (if any),
    /// that tells `snapshot_due` once every `snap_every` Txns applied.
    pub fn open<H: Snapshots>(
        mut host: H,
        dir: PathBuf,
        snap_every: Option<u64>,
        snapshot_due: Arc<tokio::sync::Notify>,
    ) -> std::io::Result<(Self, watch::Receiver<u64>)> {
        let mut applied = None;
        let mut membership = Membership::default();
        if let Some((index, bytes)) = zlock_store::snapshot::load_latest(&dir).map_err(io_err)? {
            let (meta, payload) = split_snapshot(&bytes)?;
            host.install(LogIndex(index), payload)
                .map_err(std::io::Error::other)?;
            applied = meta.last_log_id;
            membership = meta.last_membership;
            tracing::info!(index, "raft state restored from snapshot");
        }
        let (tx, rx) = watch::channel(applied.map_or(0, |l| l.index));
        let membership_tx = Arc::new(watch::channel(membership.clone()).0);
        Ok((
            StateMachine {
                inner: Arc::new(Mutex::new(Hosted {
                    host: Box::new(host),
                    applied,
                    membership,
                })),
                dir,
                applied_tx: Arc::new(tx),
                membership_tx,
                snap_every,
                since_snapshot: 0,
                snapshot_at: roll(snap_every),
                snapshot_due,
            },
            rx,
        ))
    }
}

impl StateMachine {
    /// The committed membership as this member applies it (see `membership_tx`).
    pub fn membership(&self) -> watch::Receiver<Membership> {
        self.membership_tx.subscribe()
    }
}

/// Where the next snapshot falls, for a snapshot every `every` Txns: in
/// `[every / 2, every]`, at random.
fn roll(every: Option<u64>) -> u64 {
    use rand::Rng;
    every.map_or(u64::MAX, |n| {
        let half = n / 2;
        n - half + rand::thread_rng().gen_range(0..=half)
    })
}

/// Builds a snapshot: the image is taken under the lock, encoded outside it.
pub struct Builder {
    inner: Arc<Mutex<Hosted>>,
    dir: PathBuf,
}

impl RaftSnapshotBuilder<Zraft> for Builder {
    type SnapshotData = tokio::fs::File;

    async fn build_snapshot(&mut self) -> Result<Snapshot, std::io::Error> {
        let (job, meta) = {
            let mut h = lock(&self.inner);
            let job = h.host.image();
            let meta = SnapshotMeta {
                last_log_id: h.applied,
                last_membership: h.membership.clone(),
            };
            (job, meta)
        };
        let index = meta.last_log_id.as_ref().map_or(0, |l| l.index);
        let dir = self.dir.clone();
        let head = encode_snapshot_head(&meta)?;
        let path = tokio::task::spawn_blocking(move || {
            zlock_store::snapshot::write_with(&dir, index, KEEP, |w| {
                w.write_all(&head)?;
                job(w)
            })
        })
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
        tracing::info!(index, path = %path.display(), "raft snapshot written");
        let file = tokio::fs::File::open(&path).await?;
        Ok(Snapshot {
            meta,
            snapshot: file,
        })
    }
}

impl RaftStateMachine<Zraft> for StateMachine {
    type SnapshotData = tokio::fs::File;
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), std::io::Error> {
        let h = lock(&self.inner);
        Ok((h.applied, h.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), std::io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<Zraft>, std::io::Error>>
            + Unpin
            + Send,
    {
        // What the stream has ready now, applied under one hold of the host's lock.
        let mut ready = Vec::new();
        while let Some(first) = entries.next().await {
            ready.push(first?);
            while let Some(Some(more)) = futures_util::FutureExt::now_or_never(entries.next()) {
                ready.push(more?);
            }
            self.apply_ready(&mut ready);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        Builder {
            inner: self.inner.clone(),
            dir: self.dir.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: tokio::fs::File,
    ) -> Result<(), std::io::Error> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        snapshot.flush().await.map_err(io_err)?;
        snapshot
            .seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(io_err)?;
        let mut data = Vec::new();
        snapshot.read_to_end(&mut data).await.map_err(io_err)?;
        let dir = self.dir.clone();
        let (index, payload) =
            zlock_store::snapshot::check_file(&dir.join("received"), &data).map_err(io_err)?;
        let (inner_meta, host_payload) = split_snapshot(payload).map_err(io_err)?;
        if inner_meta.last_log_id != meta.last_log_id
            || Some(index) != meta.last_log_id.as_ref().map(|l| l.index)
        {
            return Err(io_err("the received snapshot is not the one announced"));
        }
        // Durable first: once the state is replaced, a restart must find this snapshot.
        let keep = payload.to_vec();
        tokio::task::spawn_blocking(move || zlock_store::snapshot::write(&dir, index, &keep, KEEP))
            .await
            .map_err(io_err)?
            .map_err(io_err)?;
        {
            let mut h = lock(&self.inner);
            h.host
                .install(LogIndex(index), host_payload)
                .map_err(std::io::Error::other)?;
            h.applied = meta.last_log_id;
            h.membership = meta.last_membership.clone();
        }
        self.since_snapshot = 0;
        self.applied_tx.send_replace(index);
        self.membership_tx
            .send_replace(meta.last_membership.clone());
        tracing::info!(index, "installed a snapshot from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, std::io::Error> {
        let list = zlock_store::snapshot::list(&self.dir).map_err(io_err)?;
        let Some((_, path)) = list.last() else {
            return Ok(None);
        };
        let data = tokio::fs::read(path).await?;
        let (_, payload) = zlock_store::snapshot::check_file(path, &data).map_err(io_err)?;
        let (meta, _) = split_snapshot(payload)?;
        let file = tokio::fs::File::open(path).await?;
        Ok(Some(Snapshot {
            meta,
            snapshot: file,
        }))
    }
}

impl StateMachine {
    /// Applies the entries in `ready` (emptied) to the host, in order, and answers
    /// their responders once the host has them.
    fn apply_ready(&mut self, ready: &mut Vec<EntryResponder<Zraft>>) {
        let Some(last) = ready.last().map(|(e, _)| e.log_id) else {
            return;
        };
        let mut changed = None;
        {
            let mut guard = lock(&self.inner);
            let h = &mut *guard;
            for (e, _) in ready.iter() {
                match &e.payload {
                    EntryPayload::Membership(m) => {
                        h.membership = Membership::new(Some(e.log_id), m.clone());
                        changed = Some(h.membership.clone());
                    }
                    EntryPayload::Normal(p) => self.since_snapshot += p.0.len() as u64,
                    EntryPayload::Blank => {}
                }
            }
            // Index 0 is openraft's initial membership: nothing for the host.
            let mut it = ready
                .iter()
                .map(|(e, _)| e)
                .filter(|e| e.log_id.index > 0)
                .map(|e| {
                    let entry = match &e.payload {
                        EntryPayload::Normal(p) => CommitEntry::Txns(&p.0),
                        _ => CommitEntry::Blank,
                    };
                    (LogIndex(e.log_id.index), entry)
                });
            h.host.apply(&mut it);
            h.applied = Some(last);
        }
        if self.snap_every.is_some() && self.since_snapshot >= self.snapshot_at {
            self.since_snapshot = 0;
            self.snapshot_at = roll(self.snap_every);
            self.snapshot_due.notify_one();
        }
        self.applied_tx.send_replace(last.index);
        if let Some(m) = changed {
            self.membership_tx.send_replace(m);
        }
        for (_, responder) in ready.drain(..) {
            if let Some(r) = responder {
                r.send(());
            }
        }
    }
}

/// A file to receive a snapshot from the leader into (see [`super::peer`]): open,
/// unlinked, in the snapshot directory `dir`.
pub async fn receiving_file(dir: &std::path::Path) -> std::io::Result<tokio::fs::File> {
    // Names only have to differ while files are being created.
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("receiving.{n}"));
    tokio::fs::create_dir_all(&dir).await?;
    let f = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .await?;
    // Unlinked now: the open handle is all that is needed, and a crash leaves nothing.
    let _ = tokio::fs::remove_file(&path).await;
    Ok(f)
}
