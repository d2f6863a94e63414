//! A member's disk in memory: what the Raft log's writer appends is lost on a crash
//! until the writer has synced it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use zlock_server::commit::raft::RaftFailure;
use zlock_server::commit::{CommitError, LogStore};

#[derive(Default)]
struct Platter {
    /// Synced records, by WAL index: what survives a crash.
    durable: BTreeMap<u64, Vec<u8>>,
    /// Appended since the last sync, in order.
    unsynced: Vec<(u64, Vec<u8>)>,
    /// The index the next append must take.
    next: u64,
    /// Set by a crash that happens during the writer's next sync: that sync fails.
    power_failing: bool,
    /// Contract breaches by the writer (checked by the simulation after each step).
    errors: Vec<String>,
}

/// Why the in-memory disk failed an append or a sync.
#[derive(Debug, thiserror::Error)]
pub enum DiskFault {
    /// The writer skipped or repeated an index (a contract breach).
    #[error("append at {index}, expected {expected}")]
    OutOfOrder { index: u64, expected: u64 },
    /// The simulation crashed the member during this sync.
    #[error("power failure during fsync")]
    PowerFailure,
}

fn failed(f: DiskFault) -> CommitError {
    RaftFailure::Disk(Arc::new(f)).into()
}

/// The in-memory `LogStore` handed to `RaftLog::open_with_writer`; clones share it.
#[derive(Clone, Default)]
pub struct MemDisk(Arc<Mutex<Platter>>);

fn lock(d: &MemDisk) -> std::sync::MutexGuard<'_, Platter> {
    d.0.lock().unwrap()
}

impl MemDisk {
    /// A disk holding `records` (what a crash left of an earlier one).
    pub fn with(records: &[(u64, Vec<u8>)]) -> MemDisk {
        let d = MemDisk::default();
        {
            let mut p = lock(&d);
            p.durable = records.iter().cloned().collect();
            p.next = records.last().map_or(1, |(i, _)| i + 1);
        }
        d
    }

    /// The writer's next sync fails, as if the power went during it.
    pub fn fail_next_sync(&self) {
        lock(self).power_failing = true;
    }

    /// What a crash leaves: every synced record, and the first `keep` of those appended
    /// since (a torn tail keeps some of what was written before the fsync).
    pub fn crash(&self, keep: usize) -> Vec<(u64, Vec<u8>)> {
        let p = lock(self);
        let mut out: Vec<(u64, Vec<u8>)> = p.durable.iter().map(|(i, b)| (*i, b.clone())).collect();
        out.extend(p.unsynced.iter().take(keep).cloned());
        out
    }

    /// The synced record at WAL index `index`: what a crash now would keep there.
    pub fn durable_at(&self, index: u64) -> Option<Vec<u8>> {
        lock(self).durable.get(&index).cloned()
    }

    pub fn unsynced(&self) -> usize {
        lock(self).unsynced.len()
    }

    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut lock(self).errors)
    }
}

impl LogStore for MemDisk {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        let mut p = lock(self);
        if index != p.next {
            let e = DiskFault::OutOfOrder {
                index,
                expected: p.next,
            };
            p.errors.push(e.to_string());
            return Err(failed(e));
        }
        p.next = index + 1;
        p.unsynced.push((index, payload.to_vec()));
        Ok(())
    }

    fn sync(&mut self) -> Result<(), CommitError> {
        let mut p = lock(self);
        if p.power_failing {
            return Err(failed(DiskFault::PowerFailure));
        }
        let written = std::mem::take(&mut p.unsynced);
        p.durable.extend(written);
        Ok(())
    }

    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        let mut p = lock(self);
        p.durable = p.durable.split_off(&(index + 1));
        p.next = p.next.max(index + 1);
        Ok(())
    }

    fn truncate_from(&mut self, index: u64) -> Result<(), CommitError> {
        let mut p = lock(self);
        if !p.unsynced.is_empty() {
            p.errors
                .push(format!("truncate from {index} with unsynced appends"));
        }
        p.durable.split_off(&index);
        p.unsynced.retain(|(i, _)| *i < index);
        p.next = p.next.min(index);
        Ok(())
    }
}
