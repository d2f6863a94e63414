//! The write-ahead log: opaque payloads with consecutive indexes, in CRC-checked segment
//! files, written in fsynced batches.
//!
//! # On-disk format (version 1)
//!
//! A WAL directory holds segment files named `log.<index>`, where `<index>` is the index
//! of the segment's first record as 20 zero-padded decimal digits
//! (`log.00000000000000000001`), so name order is log order. Other files are ignored.
//! All integers are **little-endian**. A segment file is:
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------------
//!      0     8  magic, the ASCII bytes "ZLOCKWAL" (never changes)
//!      8     4  u32 format version (1; see WalVersion)
//!     12     8  u64 first index: index of the first record; always equals the name
//!     20     4  u32 CRC32C (Castagnoli) of bytes 0..20
//!     24        records, back to back: no padding between them
//!               (last segment only) zeros to the end of the file: preallocated space
//! ```
//!
//! and each record is:
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------------
//!      0     4  u32 payload length N
//!      4     4  u32 CRC32C of bytes 8..16+N (the index, then the payload)
//!      8     8  u64 index
//!     16     N  payload: opaque to this crate (the server's serialized Txn)
//! ```
//!
//! The segment header carries its own CRC so that a header torn by a crash is told apart
//! from a valid one; the record CRC covers the index so a record read at the wrong place
//! or with a flipped index fails too. The length field is not covered: a damaged length
//! makes the CRC fail on whatever bytes it then selects.
//!
//! ## End of the records
//!
//! The records of the last segment end at the first record boundary from which every
//! byte to the end of the file is zero (or at the end of the file). Read as a record
//! header, such bytes say length 0, CRC 0 and index 0. A zero-length payload is legal,
//! so a length of 0 alone would be ambiguous, but index 0 never is, so no record looks
//! like this. The zeros are the writer's preallocated space (below) and are overwritten
//! by the next records. Every other segment ends exactly at its last record: zeros after
//! it are damage.
//!
//! # Invariants
//!
//! - Index 0 is never used. Within a segment the indexes are consecutive, starting at the
//!   header's first index. The next segment starts at the index after the previous one's
//!   last, except across a gap that a snapshot covers (below).
//! - Only the last segment is ever written to (it is the *active* segment). Every other
//!   segment was completely written, cut to the end of its last record and fsynced before
//!   the next one was created. Truncation (below) cuts a segment only once it is the last.
//! - A record is durable, and may be acknowledged, once the [`Wal::sync`] that wrote it
//!   has returned `Ok`.
//!
//! # Writing: group commit
//!
//! [`Wal::append`] only encodes into a memory buffer. [`Wal::sync`] writes the whole buffer
//! with one positioned write at the end of the last record (`pwrite`, through
//! [`std::os::unix::fs::FileExt`]; the WAL is Unix-only, as is the directory fsync it
//! relies on) and calls `fdatasync` ([`std::fs::File::sync_data`]) once, so the caller
//! gets group commit by appending everything that queued up during the previous sync and
//! then syncing once. `sync` with nothing buffered does no system call.
//!
//! Segments roll *before* a batch: when the active segment's records have reached
//! [`WalOptions::segment_bytes`], the next batch goes to a new file whose header is
//! written by the same write as the batch, and the directory is fsynced after the file.
//! A segment therefore exceeds `segment_bytes` by at most one batch, and no empty segment
//! is left behind in normal operation.
//!
//! # Preallocation
//!
//! Appending changes a file's size, and then ext4's `fdatasync` writes the inode as well
//! as the data: a second I/O in every sync, which every acknowledged write waits for.
//! So the writer keeps the active segment's file zero-filled
//! [`WalOptions::preallocate_bytes`] ahead of its last record, as ZooKeeper pads its
//! transaction log (`preAllocSize`). The zeros are really written, not `fallocate`d: an
//! allocated but unwritten extent is converted on its first write, which is a metadata
//! change again. Measured with `examples/wal_sync_latency.rs` (2,000 syncs of one
//! 100-byte record, ext4 on a virtio disk with a write-back cache): p50 115 µs and p99
//! 148 µs without preallocation, 83 µs and 119 µs with 4 MiB; the one sync that grows
//! the file by 4 MiB takes 2 to 3 ms.
//!
//! When a batch would go past the zero-filled end, that sync first grows the file with
//! zeros, in whole `preallocate_bytes` steps (enough to hold the batch), then writes the
//! batch at its offset, then calls `fdatasync` once: the size change is paid in that sync
//! only, once per `preallocate_bytes` of log. A new segment is created already grown.
//!
//! Before a roll makes a new segment active, the old one is cut to the end of its last
//! record (`ftruncate` + `fsync`, once per segment). Zeros therefore only ever follow the
//! last record of the last segment, and every other segment keeps its exact meaning: its
//! file ends at its last record, and anything wrong in it, zeros included, is corruption.
//! Accepting a zero tail in every segment would save that fsync per roll, but it would
//! leave up to `preallocate_bytes` of zeros on disk per segment and would make "zeros
//! after the last record" acceptable in files no crash can have touched.
//!
//! After recovery, writing continues at the end of the last intact record, over the
//! zeros, and the file grows again when the zeros run out (at once if recovery cut a torn
//! tail). With `preallocate_bytes` 0, [`Wal::open`] cuts zeros after the last record off,
//! and every file ends at its last record as before.
//!
//! # Recovery and snapshots
//!
//! [`Wal::open`] replays every record with an index above `after_index` (the index of
//! the snapshot the caller loaded, or 0) and then continues after the highest index
//! known, so [`Wal::last_index`] is `max(last record on disk, after_index)`. A snapshot
//! may be newer than the log (the log was purged or lost its unsynced tail after the
//! snapshot was taken from memory): then nothing is replayed, the next append index is
//! `after_index + 1`, and the first sync starts a new segment at that index, leaving a
//! gap that the snapshot covers. A later recovery from that snapshot (or a newer one)
//! accepts such a gap; one from an older snapshot reports it as corruption, because the
//! records in it are truly gone. The rules for torn tails versus corruption are in the
//! `recovery` module and summarised on [`Wal::open`].
//!
//! # Truncation
//!
//! [`Wal::truncate_from`] removes every record from an index on, as a Raft follower must
//! when a new leader's log conflicts with its uncommitted entries. It deletes the later
//! segments newest first, fsyncing the directory after each deletion, and then cuts the
//! segment that holds the index at the offset of that record (`ftruncate`, then `fsync`).
//! Every state a crash can leave on the way is therefore a prefix of the old log, without
//! a hole, that recovery accepts as it is; after the call returns, nothing of the cut
//! records can come back. The cut segment ends at its last record, like a segment
//! recovery cut a torn tail from: if it is the active one, the next sync grows it with
//! zeros again. The on-disk format does not change: a truncated log reads exactly like a
//! log that was never longer. Records that a snapshot covers (at or below the
//! `after_index` of [`Wal::open`] or an index given to [`Wal::purge_through`]) are
//! committed and are never cut: [`StoreError::TruncateCovered`]. The steps, and why each
//! state between them is valid, are in the `truncate` module.
//!
//! # Failure
//!
//! After a failed write or fsync (or a failed deletion, cut or fsync in a truncation) the
//! `Wal` is poisoned: every later `append`, `sync` and `truncate_from` returns
//! [`StoreError::Poisoned`]. Retrying an fsync after an error can report success
//! for data the kernel already dropped, so the server must restart and let recovery read
//! what really is on disk.

mod format;
#[cfg(test)]
mod prealloc_tests;
pub mod read_only;
#[cfg(test)]
mod read_only_tests;
mod recovery;
#[cfg(test)]
mod recovery_tests;
mod scan;
#[cfg(test)]
mod tests;
mod truncate;
#[cfg(test)]
mod truncate_tests;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub use format::WalVersion;
use format::{encode_header, encode_record, HEADER_LEN, MAX_PAYLOAD};

use crate::error::{Result, StoreError};
use crate::fsutil::{ensure_dir, fsync_dir, indexed_name, remove_file};

/// File-name prefix of segment files.
const SEGMENT_PREFIX: &str = "log.";

/// Above this capacity the write buffer is given back to the allocator after a sync,
/// so one huge batch does not pin its memory forever.
const KEEP_BUFFER_CAPACITY: usize = 8 << 20;

/// Zeros are written in blocks of at most this size when a segment grows.
const ZERO_BLOCK: u64 = 1 << 20;

/// Tuning of a [`Wal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Once the active segment holds this many bytes, the next batch starts a new
    /// segment. Smaller segments let [`Wal::purge_through`] reclaim space sooner; larger
    /// ones mean fewer files and fewer directory fsyncs. Default 64 MiB.
    pub segment_bytes: u64,
    /// How far, and in what steps, the active segment's file is kept zero-filled ahead of
    /// its last record, so that a sync overwrites space already on disk and `fdatasync`
    /// flushes the data alone (see "Preallocation" in the module doc). Larger steps mean
    /// fewer syncs that also grow the file, which take longer; the cost is up to this many
    /// bytes of zeros on disk in the active segment. 0 turns preallocation off: every
    /// write appends and grows the file. Default 4 MiB.
    pub preallocate_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_bytes: 64 << 20,
            preallocate_bytes: 4 << 20,
        }
    }
}

/// One segment file as recovery found it or the writer made it.
#[derive(Debug)]
struct Segment {
    /// Index of its first record (also in its name and header).
    first: u64,
    /// Index after its last record (`first` when it holds none).
    next: u64,
    path: PathBuf,
    /// Bytes written and synced, header included: where the next record goes.
    len: u64,
    /// Length of the file: `len` bytes, then zeros (preallocated space) up to here. Only
    /// the active segment has zeros; for every other one this equals `len`.
    file_len: u64,
}

impl Segment {
    /// Writes `bytes` at the end of the records and makes them durable with one
    /// `fdatasync`. When they would go past the zero-filled end of the file, the file is
    /// first grown with zeros by whole `step`s, enough to hold them, so that the size
    /// change is paid in this sync and not in the next ones. `step` 0 just appends.
    fn write_synced(&mut self, file: &File, bytes: &[u8], step: u64) -> Result<()> {
        let end = self.len + bytes.len() as u64;
        if step > 0 && end > self.file_len {
            let grown = self.file_len + (end - self.file_len).div_ceil(step) * step;
            write_zeros(file, end, grown).map_err(|e| StoreError::io(&self.path, e))?;
            self.file_len = grown;
        }
        file.write_all_at(bytes, self.len)
            .map_err(|e| StoreError::io(&self.path, e))?;
        file.sync_data()
            .map_err(|e| StoreError::io(&self.path, e))?;
        self.len = end;
        self.file_len = self.file_len.max(end);
        Ok(())
    }

    /// Cuts the zeros after the last record off and makes the new size durable.
    fn cut_zeros(&mut self, file: &File) -> Result<()> {
        if self.file_len > self.len {
            file.set_len(self.len)
                .map_err(|e| StoreError::io(&self.path, e))?;
            file.sync_all().map_err(|e| StoreError::io(&self.path, e))?;
            self.file_len = self.len;
        }
        Ok(())
    }
}

/// Writes zeros over `from..to` of `file`, in blocks of at most [`ZERO_BLOCK`].
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; to.saturating_sub(from).min(ZERO_BLOCK) as usize];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZERO_BLOCK);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// An open write-ahead log. Single writer: one `Wal` per directory at a time (nothing
/// locks the directory against a second process; the server's data-dir handling must).
///
/// Records appended but not yet synced are lost when the `Wal` is dropped; they were
/// never acknowledged.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    /// Segments on disk, oldest first. The last one is the active segment.
    segments: Vec<Segment>,
    /// Write handle to the last segment (positioned writes, not append mode: the file
    /// may be longer than its records); `None` until the first segment exists.
    active: Option<File>,
    /// `HEADER_LEN` reserved bytes, then the encoded records not yet written. The reserve
    /// lets a segment roll put the new header in front of the batch and still write both
    /// with one write, without copying the batch.
    buf: Vec<u8>,
    /// Index of the first buffered record; meaningful only while records are buffered.
    pending_first: u64,
    /// Highest index appended (synced or not), or `after_index` if that is higher.
    last_index: u64,
    /// Highest index known to be durable.
    synced_index: u64,
    /// Highest index a snapshot is known to cover: `after_index` at open, raised by
    /// [`Wal::purge_through`]. [`Wal::truncate_from`] never cuts at or below it.
    floor: u64,
    /// Set by the first failed write or fsync; see "Failure" in the module doc.
    poisoned: Option<String>,
}

impl Wal {
    /// Opens the log in `dir` (creating the directory if needed), recovers it and replays
    /// every intact record with an index above `after_index`, in index order.
    ///
    /// Recovery cuts away a torn tail: damage (a record cut short, a CRC mismatch) in the
    /// last segment with no intact record after it, or a last segment whose header is cut
    /// short or damaged with no intact record after it (deleted). Each cut is logged with
    /// `tracing::warn`. Zeros from a record boundary to the end of the last segment are
    /// the end of the records, not damage: they are kept and written over, or, with
    /// [`WalOptions::preallocate_bytes`] 0, cut off without a warning.
    ///
    /// # Errors
    ///
    /// - [`StoreError::Corrupt`], naming the file and offset, for damage followed by an
    ///   intact record, damage in any segment but the last, indexes that are not
    ///   consecutive, or a log that does not reach back to `after_index + 1`. Startup
    ///   must stop: acknowledged writes may be missing.
    /// - [`StoreError::UnsupportedVersion`] for a segment of a newer format.
    /// - [`StoreError::Replay`], wrapping the error `replay` returned (use
    ///   [`StoreError::rejected`] to return your own), with the record's file and offset.
    /// - [`StoreError::Io`] when the directory or a file cannot be read or changed.
    pub fn open(
        dir: &Path,
        opts: WalOptions,
        after_index: u64,
        mut replay: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<Wal> {
        ensure_dir(dir)?;
        let recovered = recovery::recover(dir, after_index, &mut replay)?;
        let mut segments = recovered.segments;
        let last_index = recovered.last_record.max(after_index);

        // An empty last segment that cannot take the next index (the snapshot is newer)
        // would only sit there forever; drop it so the next sync starts a fresh one.
        if segments
            .last()
            .is_some_and(|s| s.first == s.next && s.first != last_index.saturating_add(1))
        {
            if let Some(empty) = segments.pop() {
                remove_file(&empty.path)?;
                fsync_dir(dir)?;
            }
        }

        let active = match segments.last_mut() {
            Some(seg) => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&seg.path)
                    .map_err(|e| StoreError::io(&seg.path, e))?;
                if opts.preallocate_bytes == 0 && seg.file_len > seg.len {
                    tracing::info!(
                        file = %seg.path.display(),
                        bytes = seg.file_len - seg.len,
                        "cutting zeros after the last WAL record: preallocation is off"
                    );
                    seg.cut_zeros(&file)?;
                }
                Some(file)
            }
            None => None,
        };

        Ok(Wal {
            dir: dir.to_path_buf(),
            opts,
            segments,
            active,
            buf: vec![0; HEADER_LEN],
            pending_first: 0,
            last_index,
            synced_index: last_index,
            floor: after_index,
            poisoned: None,
        })
    }

    /// The highest index appended, synced or not; after [`Wal::open`] it is
    /// `max(last record on disk, after_index)`. 0 for an empty log opened with
    /// `after_index` 0. The next append must use `last_index() + 1`.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// The highest index that a successful [`Wal::sync`] made durable (or that recovery
    /// found, or `after_index`).
    pub fn synced_index(&self) -> u64 {
        self.synced_index
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Buffers one record in memory. Nothing reaches the disk before [`Wal::sync`].
    ///
    /// # Errors
    ///
    /// [`StoreError::OutOfOrder`] unless `index == last_index() + 1`,
    /// [`StoreError::PayloadTooLarge`] above `u32::MAX` bytes, [`StoreError::Poisoned`]
    /// after an earlier failure. The log is unchanged on error.
    pub fn append(&mut self, index: u64, payload: &[u8]) -> Result<()> {
        self.check_poisoned()?;
        let expected = self.last_index.saturating_add(1);
        if index != expected {
            return Err(StoreError::OutOfOrder {
                expected,
                got: index,
            });
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(StoreError::PayloadTooLarge {
                len: payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        if self.buf.len() == HEADER_LEN {
            self.pending_first = index;
        }
        encode_record(&mut self.buf, index, payload);
        self.last_index = index;
        Ok(())
    }

    /// Writes every buffered record with one write and makes it durable with one
    /// `fdatasync`, rolling to a new segment first if the active one is full, and growing
    /// the file with zeros first if the batch goes past them (see the module doc). Returns
    /// at once when nothing is buffered.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if the write or an fsync fails; the `Wal` is then poisoned and
    /// the buffered records must be treated as not written. [`StoreError::Poisoned`] after
    /// an earlier failure.
    pub fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        if self.buf.len() == HEADER_LEN {
            return Ok(());
        }
        if let Err(e) = self.write_batch() {
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        self.synced_index = self.last_index;
        self.buf.truncate(HEADER_LEN);
        if self.buf.capacity() > KEEP_BUFFER_CAPACITY {
            self.buf.shrink_to(KEEP_BUFFER_CAPACITY);
        }
        Ok(())
    }

    fn write_batch(&mut self) -> Result<()> {
        let first = self.pending_first;
        let step = self.opts.preallocate_bytes;
        let roll = match (self.active.as_ref(), self.segments.last()) {
            (Some(_), Some(seg)) => {
                // A segment that holds no record yet is never "full"; it is only left
                // when the next index does not continue it (after a newer snapshot).
                let full = seg.first != seg.next && seg.len >= self.opts.segment_bytes;
                full || seg.next != first
            }
            _ => true,
        };

        if roll {
            // Only the last segment may end in zeros (see "Preallocation").
            if let (Some(old), Some(seg)) = (self.active.take(), self.segments.last_mut()) {
                seg.cut_zeros(&old)?;
            }
            let path = self.dir.join(indexed_name(SEGMENT_PREFIX, first));
            self.buf[..HEADER_LEN].copy_from_slice(&encode_header(first));
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| StoreError::io(&path, e))?;
            let mut seg = Segment {
                first,
                next: first,
                path,
                len: 0,
                file_len: 0,
            };
            seg.write_synced(&file, &self.buf, step)?;
            fsync_dir(&self.dir)?;
            seg.next = self.last_index.saturating_add(1);
            self.active = Some(file);
            self.segments.push(seg);
            return Ok(());
        }

        let (Some(file), Some(seg)) = (self.active.as_ref(), self.segments.last_mut()) else {
            // `roll` is true whenever either is missing.
            return Err(StoreError::Poisoned {
                cause: "internal error: no active segment".to_owned(),
            });
        };
        seg.write_synced(file, &self.buf[HEADER_LEN..], step)?;
        seg.next = self.last_index.saturating_add(1);
        Ok(())
    }

    /// Deletes, oldest first, every segment whose records all have an index `<= index`.
    /// The active segment is never deleted, and deletion stops at the first segment that
    /// still holds a record above `index`, so the remaining log stays contiguous.
    ///
    /// Call it with the index of the oldest snapshot you keep: recovery from that snapshot
    /// needs every record after it. From then on [`Wal::truncate_from`] refuses to cut at
    /// or below `index`, which that snapshot covers.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] if a file cannot be deleted or the directory not fsynced; the
    /// segments deleted before the failure stay deleted.
    pub fn purge_through(&mut self, index: u64) -> Result<()> {
        self.floor = self.floor.max(index);
        let removable = self.segments.len().saturating_sub(1);
        let mut removed = 0;
        let mut result = Ok(());
        for seg in &self.segments[..removable] {
            if seg.next > index.saturating_add(1) {
                break;
            }
            if let Err(e) = remove_file(&seg.path) {
                result = Err(e);
                break;
            }
            removed += 1;
        }
        self.segments.drain(..removed);
        if removed > 0 {
            fsync_dir(&self.dir)?;
        }
        result
    }

    /// Drops every record and continues the log after `index`: for a snapshot newer
    /// than everything logged (a Raft follower that installed its leader's snapshot).
    /// The next append is `index + 1`. Segments are deleted newest first with a
    /// directory fsync after each, so a crash leaves a shorter valid log; reopen with
    /// `after_index` = `index` (which the caller must have made durable first, for
    /// example in a [`crate::MetaFile`]), and an empty or shorter log opens as ending
    /// at `index`.
    ///
    /// # Errors
    ///
    /// [`StoreError::TruncateCovered`] when `index` is below the last record (use
    /// [`Wal::purge_through`]); [`StoreError::Io`] if a file cannot be deleted (the log
    /// is poisoned then).
    pub fn restart_after(&mut self, index: u64) -> Result<()> {
        self.check_poisoned()?;
        if index < self.last_index {
            return Err(StoreError::TruncateCovered {
                index,
                floor: self.last_index,
            });
        }
        self.active = None;
        while let Some(seg) = self.segments.pop() {
            let done = remove_file(&seg.path).and_then(|()| fsync_dir(&self.dir));
            if let Err(e) = done {
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        self.buf.truncate(HEADER_LEN);
        self.last_index = index;
        self.synced_index = index;
        self.floor = index;
        Ok(())
    }

    /// Paths of the segment files, oldest first (the last is the active one).
    pub fn segment_paths(&self) -> impl Iterator<Item = &Path> {
        self.segments.iter().map(|s| s.path.as_path())
    }

    fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(StoreError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }
}
