//! The single node's commit stage: the local write-ahead log with group commit.
//!
//! [`WalCommit::propose`] appends the whole batch, fsyncs once and then applies it on
//! the calling thread: the fused fsync-then-apply fast path. On the small machines zlock
//! runs on, a wake-up between threads costs about as much as applying a whole batch, and
//! every acknowledged write already waits for its fsync; applying right after it keeps
//! thread hand-offs out of every write's path. Under Raft the same two steps are the
//! log store's flush and the state machine's apply, run where openraft runs them.

use zlock_core::{LogIndex, Txn};

use super::{Apply, Commit, CommitError, Entry};

/// The storage a [`WalCommit`] writes to: consecutive indexes, buffered appends, one
/// sync for all of them.
///
/// - `append` takes consecutive indexes (each one more than the last) and may buffer;
/// - after `sync` returns Ok, every appended payload survives a crash and is replayed by
///   recovery;
/// - after an error the store is not used again.
pub trait LogStore: Send + 'static {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError>;
    fn sync(&mut self) -> Result<(), CommitError>;
    /// Drops records up to `index` that a snapshot has made unnecessary. An `index` at
    /// or past the last record empties the log, which then continues at `index + 1`.
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError>;
    /// Drops every record at `index` or later, durably (a Raft follower's suffix that
    /// conflicts with its new leader's log).
    fn truncate_from(&mut self, index: u64) -> Result<(), CommitError>;
}

impl LogStore for zlock_store::wal::Wal {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::append(self, index, payload)?)
    }
    fn sync(&mut self) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::sync(self)?)
    }
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        if index >= self.last_index() && index > 0 {
            // A snapshot newer than the whole log (installed from a Raft leader).
            return Ok(self.restart_after(index)?);
        }
        Ok(zlock_store::wal::Wal::purge_through(self, index)?)
    }
    fn truncate_from(&mut self, index: u64) -> Result<(), CommitError> {
        Ok(zlock_store::wal::Wal::truncate_from(self, index)?)
    }
}

pub struct WalCommit<L: LogStore, A: Apply> {
    log: L,
    apply: A,
    /// The position of the last appended record.
    last: LogIndex,
    /// Set by the first failure: nothing is appended or applied after it.
    failed: bool,
    /// Encoding buffer, reused.
    buf: Vec<u8>,
}

/// A [`LogStore`] that observes each sync, for the metrics: its time (ms, ZooKeeper's
/// `fsynctime`) and the records it made durable (`sync_processor_batch_size`: Txns
/// in the WAL; log entries, each a proposed batch of Txns, in a Raft log).
pub struct Timed<L: LogStore> {
    pub inner: L,
    pub fsync_ms: metrics::Histogram,
    pub batch_size: metrics::Histogram,
    /// Records appended since the last sync.
    appended: u64,
}

impl<L: LogStore> Timed<L> {
    pub fn new(inner: L, fsync_ms: metrics::Histogram, batch_size: metrics::Histogram) -> Self {
        Timed {
            inner,
            fsync_ms,
            batch_size,
            appended: 0,
        }
    }
}

impl<L: LogStore> LogStore for Timed<L> {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        self.appended += 1;
        self.inner.append(index, payload)
    }
    fn sync(&mut self) -> Result<(), CommitError> {
        let started = std::time::Instant::now();
        self.inner.sync()?;
        self.fsync_ms
            .record(started.elapsed().as_secs_f64() * 1000.0);
        self.batch_size
            .record(std::mem::take(&mut self.appended) as f64);
        Ok(())
    }
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        self.inner.purge_through(index)
    }
    fn truncate_from(&mut self, index: u64) -> Result<(), CommitError> {
        self.inner.truncate_from(index)
    }
}

impl<L: LogStore, A: Apply> WalCommit<L, A> {
    /// A commit stage appending after `last` (the last record the log holds, which
    /// recovery has applied).
    pub fn new(log: L, last: LogIndex, apply: A) -> Self {
        WalCommit {
            log,
            apply,
            last,
            failed: false,
            buf: Vec::with_capacity(4096),
        }
    }

    fn write(&mut self, batch: &[Txn]) -> Result<(), CommitError> {
        let mut index = self.last;
        for txn in batch {
            index = index.next();
            self.buf.clear();
            txn.encode(&mut self.buf);
            self.log.append(index.0, &self.buf)?;
        }
        self.log.sync()?;
        Ok(())
    }
}

impl<L: LogStore, A: Apply> Commit for WalCommit<L, A> {
    fn propose(&mut self, batch: &mut Vec<Txn>) -> Result<(), CommitError> {
        if self.failed {
            return Err(CommitError::Stopped);
        }
        if batch.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.write(batch) {
            self.failed = true;
            return Err(e);
        }
        let first = self.last.next();
        self.last = LogIndex(self.last.0 + batch.len() as u64);
        let mut entries = batch.iter().enumerate().map(|(i, t)| {
            (
                LogIndex(first.0 + i as u64),
                Entry::Txns(std::slice::from_ref(t)),
            )
        });
        self.apply.apply(&mut entries);
        batch.clear();
        Ok(())
    }

    fn purge_through(&mut self, index: LogIndex) -> Result<(), CommitError> {
        if self.failed {
            return Err(CommitError::Stopped);
        }
        self.log.purge_through(index.0)
    }
}
