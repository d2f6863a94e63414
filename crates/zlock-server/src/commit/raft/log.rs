//! The Raft log store: entries on disk in the WAL's segment format (a CRC per record;
//! the payload is the entry with its term), group commit on a writer thread, the vote
//! and the purge point in small checked files beside the segments.
//!
//! openraft calls [`RaftLogStorage::append`] from its core task and expects two things
//! of it: the entries are readable when it returns, and the callback runs once they are
//! on disk. So `append` puts the entries in the in-memory tail (which the replication
//! streams read) and hands the encoded records to the writer thread; the writer appends
//! whatever has queued, fsyncs once and then runs every waiting callback: one fsync for
//! all the appends that arrived while the previous one ran. Truncations and purges go
//! through the same queue, so every change reaches the disk in the order openraft asked
//! for it, and the writer syncs the appends before them first. The writer is a
//! [`Writer`] that [`RaftLog::open`] starts on its thread; [`RaftLog::open_with_writer`]
//! hands it to the caller instead, who then decides when it runs (the simulation).
//!
//! Raft indexes start at 0 (openraft's initial membership entry) and the WAL's at 1
//! (a zero index marks its clean end), so the record of Raft entry `i` has WAL index
//! `i + 1` ([`disk_index`]).
//!
//! The in-memory tail holds every entry after the last purge. openraft purges behind
//! each snapshot (keeping `max_in_snapshot_log_to_keep` entries), so it stays bounded
//! by the snapshot interval.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use tokio::sync::oneshot;

use super::codec;
use super::types::{AppendNote, Entry, LogId, Proposal, Vote, Zraft};
use crate::commit::LogStore;
use zlock_store::MetaFile;

/// The entries after the last purge, shared by the store and its readers.
#[derive(Default)]
struct Tail {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    /// The vote last saved (openraft's replication reads it to stop when it changes).
    vote: Option<Vote>,
}

impl Tail {
    /// Copies of the entries in `range` (what openraft's log readers ask for).
    fn range(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        self.entries.range(range).map(|(_, e)| e.clone()).collect()
    }

    fn last_log_id(&self) -> Option<LogId> {
        let last = self.entries.values().next_back().map(|e| e.log_id);
        last.or(self.last_purged)
    }
}

/// Where a member's log ends, read by its peer server (a cheap clone of the store's
/// tail).
#[derive(Clone)]
pub struct LogView {
    tail: Arc<Mutex<Tail>>,
}

impl LogView {
    /// The last entry's id (appended, perhaps not yet on disk), or the purge point.
    pub fn last_log_id(&self) -> Option<LogId> {
        lock(&self.tail).last_log_id()
    }
}

/// Work for the writer thread, in the order openraft submitted it.
enum Op {
    Append {
        records: Vec<(u64, Vec<u8>)>,
        done: IOFlushed<Zraft>,
    },
    /// Drop every record at `from` or later.
    Truncate {
        from: u64,
        done: oneshot::Sender<std::io::Result<()>>,
    },
    /// Save the purge point `point`, then drop records through `through`.
    Purge { through: u64, point: Vec<u8> },
    /// Sync what was appended, then answer ([`RaftLog::save_vote`] waits for it).
    Sync(oneshot::Sender<std::io::Result<()>>),
    /// Sync what was appended, then stop: nothing is written after it.
    Stop(oneshot::Sender<()>),
}

/// Stops a log's writer ([`LogCloser::close`]), kept by the member once openraft owns
/// the log.
pub struct LogCloser {
    ops: std_mpsc::Sender<Op>,
    failed: Arc<AtomicBool>,
}

impl LogCloser {
    /// Refuses every later change to the log, and returns once the writer has synced
    /// what was queued before and stopped. openraft may drop its log store after its
    /// `shutdown` returns; a member started again on the same directory must not meet
    /// the old writer there.
    pub async fn close(&self) {
        self.failed.store(true, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        if self.ops.send(Op::Stop(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// openraft's log store for one member.
pub struct RaftLog {
    tail: Arc<Mutex<Tail>>,
    ops: std_mpsc::Sender<Op>,
    /// Set when the writer failed: nothing is accepted after it.
    failed: Arc<AtomicBool>,
    vote: MetaFile,
}

/// A cheap reader for replication streams.
pub struct TailReader {
    tail: Arc<Mutex<Tail>>,
}

/// The WAL index of Raft entry `raft`.
fn disk_index(raft: u64) -> u64 {
    raft + 1
}

/// An I/O error carrying `e`'s message (the raft module's store, gate and snapshot
/// files report their failures so).
pub(super) fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn lock(tail: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(|p| p.into_inner())
}

/// A log's records as recovery read them: (WAL index, payload), in order.
pub type Records = Vec<(u64, Vec<u8>)>;

/// Opens the WAL in `wal_dir` for a Raft log whose small files are in `meta_dir`:
/// from the purge point on (a log emptied by a snapshot install opens as ending there).
/// Returns it with its records, for [`RaftLog::open`].
pub fn open_wal(
    wal_dir: &Path,
    meta_dir: &Path,
    opts: zlock_store::WalOptions,
) -> std::io::Result<(zlock_store::Wal, Records)> {
    let purged = MetaFile::open(meta_dir, "purged").map_err(io_err)?;
    let purged = decode_opt(&purged.load().map_err(io_err)?, codec::decode_purged)?;
    let after = purged.map_or(0, |p| disk_index(p.index));
    let mut records = Vec::new();
    let wal = zlock_store::Wal::open(wal_dir, opts, after, |i, p| {
        records.push((i, p.to_vec()));
        Ok(())
    })
    .map_err(io_err)?;
    Ok((wal, records))
}

impl RaftLog {
    /// A log store over `disk`, which recovery opened and read: `records` are its
    /// (index, payload) records in order. `meta_dir` holds the vote and purge files.
    /// Its writer runs on the `zlock-raft-log` thread.
    pub fn open<D: LogStore>(
        disk: D,
        records: Records,
        meta_dir: &Path,
    ) -> std::io::Result<RaftLog> {
        let (log, writer) = Self::open_with_writer(disk, records, meta_dir)?;
        std::thread::Builder::new()
            .name("zlock-raft-log".into())
            .spawn(move || writer.run())?;
        Ok(log)
    }

    /// As [`RaftLog::open`], but the writer is handed to the caller instead of being
    /// started on its thread: nothing reaches `disk` (and no append is reported
    /// flushed) until the caller runs it ([`Writer::run_queued`]). The deterministic
    /// simulation (`tests/raft_sim`) does this, to decide itself when each member's
    /// fsync happens, on its one thread.
    pub fn open_with_writer<D: LogStore>(
        disk: D,
        records: Records,
        meta_dir: &Path,
    ) -> std::io::Result<(RaftLog, Writer<D>)> {
        let vote = MetaFile::open(meta_dir, "vote").map_err(io_err)?;
        let purged = MetaFile::open(meta_dir, "purged").map_err(io_err)?;
        let mut tail = Tail {
            last_purged: decode_opt(&purged.load().map_err(io_err)?, codec::decode_purged)?,
            vote: decode_opt(&vote.load().map_err(io_err)?, codec::decode_vote)?,
            ..Tail::default()
        };
        for (record, payload) in records {
            let index = record - 1;
            if tail.last_purged.is_some_and(|p| index <= p.index) {
                continue;
            }
            let e = codec::decode_entry(&payload)?;
            if e.log_id.index != index {
                return Err(io_err(format!(
                    "raft log record {index} holds entry {}",
                    e.log_id.index
                )));
            }
            tail.entries.insert(index, e);
        }
        let tail = Arc::new(Mutex::new(tail));
        let failed = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std_mpsc::channel();
        let writer = Writer {
            disk,
            rx,
            failed: failed.clone(),
            purged,
            waiting: Vec::new(),
            appended: Vec::new(),
            broken: None,
        };
        let log = RaftLog {
            tail,
            ops: tx,
            failed,
            vote,
        };
        Ok((log, writer))
    }

    /// What stops the writer once openraft owns the log.
    pub fn closer(&self) -> LogCloser {
        LogCloser {
            ops: self.ops.clone(),
            failed: self.failed.clone(),
        }
    }

    /// A reader of where the log ends.
    pub fn view(&self) -> LogView {
        LogView {
            tail: self.tail.clone(),
        }
    }

    /// Whether nothing was ever kept: no entry, no purge point, no vote (a member's
    /// first start, or one whose data was lost: see [`super::rejoin`]).
    pub fn is_blank(&self) -> std::io::Result<bool> {
        let t = lock(&self.tail);
        Ok(t.entries.is_empty()
            && t.last_purged.is_none()
            && self.vote.load().map_err(io_err)?.is_none())
    }

    /// Saves `vote` before openraft starts over this log (a rejoining member's floor).
    pub fn set_vote(&mut self, vote: &Vote) -> std::io::Result<()> {
        let bytes = codec::encode_vote(vote)?;
        self.vote.store(&bytes).map_err(io_err)?;
        lock(&self.tail).vote = Some(*vote);
        Ok(())
    }

    fn send(&self, op: Op) -> std::io::Result<()> {
        if self.failed.load(Ordering::SeqCst) || self.ops.send(op).is_err() {
            return Err(io_err("the raft log failed earlier"));
        }
        Ok(())
    }
}

fn decode_opt<T>(
    bytes: &Option<Vec<u8>>,
    decode: fn(&[u8]) -> std::io::Result<T>,
) -> std::io::Result<Option<T>> {
    bytes.as_deref().map(decode).transpose()
}

/// The log's writer: appends what openraft queued, syncs once, then reports it flushed.
/// [`RaftLog::open`] runs it on its own thread.
pub struct Writer<D: LogStore> {
    disk: D,
    rx: std_mpsc::Receiver<Op>,
    failed: Arc<AtomicBool>,
    /// The purge point's file, written before records are dropped.
    purged: MetaFile,
    /// Appends written but not synced yet.
    waiting: Vec<IOFlushed<Zraft>>,
    /// Their disk indexes, while stage marks are taken (`crate::stages`).
    appended: Vec<u64>,
    /// The first failure: nothing is written after it, every later callback fails.
    broken: Option<String>,
}

impl<D: LogStore> Writer<D> {
    /// The writer thread: waits for work, then does everything queued by then.
    fn run(mut self) {
        while let Ok(first) = self.rx.recv() {
            if !self.drain(first) {
                return;
            }
        }
    }

    /// Does everything queued now, as one wake-up of the writer thread does: appends
    /// it all, syncs once, runs the callbacks. Returns whether anything was queued.
    pub fn run_queued(&mut self) -> bool {
        match self.rx.try_recv() {
            Ok(first) => {
                self.drain(first);
                true
            }
            Err(_) => false,
        }
    }

    /// Does `first` and everything queued after it; `false` once told to stop.
    fn drain(&mut self, first: Op) -> bool {
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                Op::Stop(done) => {
                    self.settle();
                    self.broken
                        .get_or_insert_with(|| "the raft log was closed".into());
                    let _ = done.send(());
                    return false;
                }
                Op::Append { records, done } => {
                    if crate::stages::on() {
                        self.appended.extend(records.iter().map(|(i, _)| *i));
                    }
                    if self.broken.is_none() {
                        for (index, payload) in &records {
                            if let Err(e) = self.disk.append(*index, payload) {
                                tracing::error!(error = %e, "raft log append failed");
                                self.broken = Some(e.to_string());
                                break;
                            }
                        }
                    }
                    self.waiting.push(done);
                }
                Op::Truncate { from, done } => {
                    self.settle();
                    let r = health(&self.broken)
                        .and_then(|()| self.disk.truncate_from(from).map_err(io_err));
                    if let Err(e) = &r {
                        self.broken.get_or_insert_with(|| e.to_string());
                    }
                    let _ = done.send(r);
                }
                Op::Sync(done) => {
                    self.settle();
                    let _ = done.send(health(&self.broken));
                }
                Op::Purge { through, point } => {
                    self.settle();
                    if self.broken.is_none() {
                        // The purge point first: a crash after it leaves records that
                        // are skipped at open, never a log that seems to start later
                        // than it does. Old segments left behind lose nothing.
                        if let Err(e) = self.purged.store(&point) {
                            tracing::warn!(error = %e, "could not save the raft log's purge point");
                        } else if let Err(e) = self.disk.purge_through(through) {
                            tracing::warn!(error = %e, "could not remove old raft log segments");
                        }
                    }
                }
            }
            if self.broken.is_some() {
                self.failed.store(true, Ordering::SeqCst);
            }
            next = self.rx.try_recv().ok();
        }
        self.settle();
        if self.broken.is_some() {
            self.failed.store(true, Ordering::SeqCst);
        }
        true
    }

    /// Syncs what was appended and answers its callbacks.
    fn settle(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        if self.broken.is_none() {
            if let Err(e) = self.disk.sync() {
                tracing::error!(error = %e, "raft log sync failed");
                self.broken = Some(e.to_string());
            }
        }
        for i in self.appended.drain(..) {
            // A disk record's index is the Raft index plus one.
            crate::stages::mark_index("flushed", i.saturating_sub(1));
        }
        // Newest first: openraft keeps only the newest flushed position (an older one
        // reported after it changes nothing), so one fsync wakes its forwarder once.
        // Oldest first, each callback moved the position again, and the forwarder, woken
        // by the first, found the next change pending and slept until its batching
        // deadline, which tokio rounds up to the next millisecond: up to 1 ms on every
        // fsync that covered two appends or more (a follower's, once appends are
        // pipelined, often does).
        for cb in self.waiting.drain(..).rev() {
            cb.io_completed(health(&self.broken));
        }
    }
}

/// `Ok` until the writer's first failure, then that failure: the answer to everything
/// asked of it after.
fn health(broken: &Option<String>) -> std::io::Result<()> {
    match broken {
        None => Ok(()),
        Some(e) => Err(io_err(e.clone())),
    }
}

impl RaftLogReader<Zraft> for TailReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> std::io::Result<Vec<Entry>> {
        Ok(lock(&self.tail).range(range))
    }

    async fn read_vote(&mut self) -> std::io::Result<Option<Vote>> {
        Ok(lock(&self.tail).vote)
    }
}

impl RaftLogReader<Zraft> for RaftLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> std::io::Result<Vec<Entry>> {
        Ok(lock(&self.tail).range(range))
    }

    async fn read_vote(&mut self) -> std::io::Result<Option<Vote>> {
        Ok(lock(&self.tail).vote)
    }
}

impl RaftLogStorage<Zraft> for RaftLog {
    type LogReader = TailReader;

    async fn get_log_state(&mut self) -> std::io::Result<LogState<Zraft>> {
        let t = lock(&self.tail);
        Ok(LogState {
            last_purged_log_id: t.last_purged,
            last_log_id: t.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        TailReader {
            tail: self.tail.clone(),
        }
    }

    /// Syncs every append queued before it, then saves `vote`. openraft counts a saved
    /// vote as having flushed all I/O submitted before it (its I/O id is the vote and
    /// the log position together), and answers the appends waiting on that flush: had
    /// the vote file been written at once, ahead of appends still queued for the
    /// writer thread, a follower that voted in an election would have acknowledged
    /// entries not yet on its disk, and a leader could commit on that acknowledgement
    /// (found by the simulation's "nothing applied before a majority has it on disk"
    /// check, seed 6). A vote is saved only around elections, so the wait costs
    /// nothing on the write path.
    async fn save_vote(&mut self, vote: &Vote) -> std::io::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Op::Sync(tx))?;
        rx.await.map_err(io_err)??;
        self.set_vote(vote)
    }

    // The committed position is not saved: storing it would cost an fsync per commit.
    // After a restart openraft finds it again as leader (from the log) or from the
    // leader's next message, and applies from there; the server serves no client
    // before its state has caught up.

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<Zraft>) -> std::io::Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut records = Vec::new();
        {
            let mut t = lock(&self.tail);
            // openraft's contract: no hole. The WAL's records are consecutive too, and
            // would refuse a hole on the writer thread; refused here, the tail never
            // holds (and replication never reads) an entry the disk will not take.
            let entries: Vec<Entry> = entries.into_iter().collect();
            let next = t.last_log_id().map_or(0, |l| l.index + 1);
            for (e, want) in entries.iter().zip(next..) {
                if e.log_id.index != want {
                    return Err(io_err(format!(
                        "raft log entry {} appended where {want} comes next",
                        e.log_id.index
                    )));
                }
            }
            for mut e in entries {
                if let openraft::EntryPayload::Normal(p) = &mut e.payload {
                    if !p.1.keep() {
                        // Its proposer's earlier write was refused: appended empty, a
                        // blank every member applies as nothing (`submit::Submitter`).
                        *p = Proposal::default();
                    }
                    // Asked once: the entry kept here, which replication reads, does not
                    // carry it.
                    p.1 = AppendNote::default();
                    crate::stages::mark_appended(e.log_id.index, &p.0);
                }
                let bytes = codec::encode_entry(&e)?;
                records.push((disk_index(e.log_id.index), bytes));
                t.entries.insert(e.log_id.index, e);
            }
        }
        self.send(Op::Append {
            records,
            done: callback,
        })
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> std::io::Result<()> {
        // Entries after `last` go: from its successor on (all of them after none).
        let from = last.map_or(0, |l| l.index + 1);
        lock(&self.tail).entries.split_off(&from);
        let (tx, rx) = oneshot::channel();
        self.send(Op::Truncate {
            from: disk_index(from),
            done: tx,
        })?;
        rx.await.map_err(io_err)?
    }

    /// Takes the entries through `log_id` out of the tail at once (openraft reads none
    /// of them again), frees them on a thread of their own, and leaves the files to the
    /// writer thread, in order with the appends: the purge point saved, then old
    /// segments removed (a purge point not yet saved when the member stops only leaves
    /// more log to read at open). A purge after a snapshot under load takes out 20,000
    /// to 37,000 entries, and freeing them took 12 to 20 ms on openraft's core task
    /// (the member's runtime: its every connection, its sequencer, its apply, all
    /// held up) and 35 to 43 ms on the writer thread (every fsync held up);
    /// scenario B's slowest acquires on three members were these stalls.
    async fn purge(&mut self, log_id: LogId) -> std::io::Result<()> {
        let point = codec::encode_purged(&log_id)?;
        let dropped = {
            let mut t = lock(&self.tail);
            let keep = t.entries.split_off(&(log_id.index + 1));
            t.last_purged = Some(log_id);
            std::mem::replace(&mut t.entries, keep)
        };
        crate::free::elsewhere(dropped);
        self.send(Op::Purge {
            through: disk_index(log_id.index),
            point,
        })
    }
}
