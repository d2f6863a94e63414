//! Truncation: removing the end of the log, every record from some index on, as a Raft
//! follower must when a new leader's log conflicts with its uncommitted entries.
//!
//! # Order of the steps on disk, and why it is crash-safe
//!
//! Say record `index` lives in segment S_j of S_0 ..= S_k (S_k the active one), and
//! take S_j to be the segment that *starts* at `index` when one does. The steps are:
//!
//! 1. Delete S_k, fsync the directory; then S_(k-1), fsync; and so on, newest first,
//!    down to S_(j+1), or down to S_j itself when it starts at `index`.
//! 2. If record `index` is not the first of S_j, cut S_j to the offset where record
//!    `index` starts (`ftruncate`), and fsync it.
//!
//! Every state a crash can leave is then a valid log that recovery reads without a
//! warning: the log as it was before the truncation, up to some record `m >= index - 1`.
//! Only the newest file is ever removed, and the directory is fsynced before the next one
//! goes, so the files left are always a prefix of the segments and never have a hole.
//! Each of them ends exactly at its last record (every segment but the active one was
//! cut to its records and fsynced when the next was created), or, for the active segment
//! not yet touched, in its preallocated zeros; both are a clean end for the last segment.
//! A segment is cut only once it is the last file, because a cut segment with a later
//! one after it would be a gap (corruption); and `ftruncate` leaves either the old length
//! or the new one, both clean ends. A state with some of the records at `index` and
//! after still there is a log the truncation had not finished with: nothing relied on
//! those records being gone, since `truncate_from` had not returned.
//!
//! Once `truncate_from` returns, every step is durable, so the old records cannot come
//! back: records appended at `index` again go over the cut end of S_j (growing the file
//! with fresh zeros first when preallocation is on, as after recovery cut a torn tail),
//! or into a new segment `log.<index>` created after the old file of that name, if there
//! was one, was durably deleted. This relies, like the rest of the WAL, on the file
//! system never showing a crashed file's freed blocks with their old contents (true of
//! ext4 in its default `data=ordered` mode, of XFS and of btrfs; not of ext4
//! `data=writeback`).
//!
//! Records buffered by [`Wal::append`] and not yet synced are simply dropped from the
//! buffer; they never reached the disk.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::Path;

use super::format::{HEADER_LEN, RECORD_HEADER_LEN};
use super::{Segment, Wal};
use crate::error::{Result, StoreError};
use crate::fsutil::{fsync_dir, remove_file};
use crate::le::{u32_at, u64_at};

/// Read buffer for the walk over a segment's record headers.
const WALK_BUFFER: usize = 64 << 10;

impl Wal {
    /// Removes every record with an index `>= index`, synced or only buffered, and makes
    /// the removal durable before it returns: a crash at any point leaves either the log
    /// as it was or a shorter one, never one with a hole, and after `Ok` the removed
    /// records cannot come back. Afterwards [`Wal::last_index`] is `index - 1` (and
    /// [`Wal::synced_index`] at most that), so the next append is `index` again.
    ///
    /// An `index` past [`Wal::last_index`] removes nothing. The steps on disk, and why
    /// each state between them is a valid log, are in the `truncate` module; in short,
    /// later segments are deleted newest first, then the segment holding `index` is cut
    /// at that record. When preallocation is on, the cut segment ends at its last record
    /// until the next sync grows it again.
    ///
    /// Reading where record `index` starts costs one sequential pass over the record
    /// headers of its segment.
    ///
    /// # Errors
    ///
    /// - [`StoreError::TruncateCovered`] when `index` is at or below the highest index a
    ///   snapshot is known to cover (the `after_index` of [`Wal::open`], raised by
    ///   [`Wal::purge_through`]), or is 0. The log is unchanged.
    /// - [`StoreError::Corrupt`] or [`StoreError::Io`] if the segment holding `index`
    ///   cannot be read, or does not hold the records it should (something changed the
    ///   file underneath the log). The log is unchanged.
    /// - [`StoreError::Io`] if deleting a segment, cutting one or an fsync fails. The
    ///   `Wal` is then poisoned; what is on disk is a valid log, and a restart recovers
    ///   it.
    /// - [`StoreError::Poisoned`] after an earlier failure.
    pub fn truncate_from(&mut self, index: u64) -> Result<()> {
        self.check_poisoned()?;
        if index <= self.floor {
            return Err(StoreError::TruncateCovered {
                index,
                floor: self.floor,
            });
        }
        if index > self.last_index {
            return Ok(());
        }
        if index > self.synced_index {
            // Records up to `synced_index` are on disk and stay; the buffered ones start
            // right after them (an empty buffer means `last_index == synced_index`).
            self.cut_buffer(index);
        } else {
            // The buffer is dropped only once the disk is cut: a refusal leaves it be.
            self.cut_segments(index)?;
            self.buf.truncate(HEADER_LEN);
            self.synced_index = index - 1;
        }
        self.last_index = index - 1;
        Ok(())
    }

    /// Drops the buffered records from `index` on. `pending_first <= index <= last_index`.
    fn cut_buffer(&mut self, index: u64) {
        let mut off = HEADER_LEN;
        for _ in self.pending_first..index {
            off += RECORD_HEADER_LEN + u32_at(&self.buf[off..off + 4]) as usize;
        }
        self.buf.truncate(off);
    }

    /// Removes the records from `index` on from disk, in the order the module doc gives.
    /// A record `index` exists on disk: `floor < index <= synced_index`, and the only
    /// gaps between segments are at or below the floor.
    fn cut_segments(&mut self, index: u64) -> Result<()> {
        // Segments [..keep] start before `index` and stay; the last of them may hold
        // `index` and is cut there. Everything that can fail without changing the disk
        // comes first, so such a failure leaves the log as it was.
        let keep = self.segments.partition_point(|s| s.first < index);
        let cut_at = match keep.checked_sub(1).map(|k| &self.segments[k]) {
            Some(seg) if seg.next > index => Some(record_offset(seg, index)?),
            _ => None,
        };
        let handle = match keep.checked_sub(1) {
            Some(k) if k + 1 == self.segments.len() && self.active.is_some() => self.active.take(),
            Some(k) => Some(open_for_write(&self.segments[k].path)?),
            None => None,
        };
        // From here on the disk changes, and an error leaves memory and disk apart.
        let result = self.delete_and_cut(keep, cut_at, handle.as_ref(), index);
        match result {
            Ok(()) => self.active = handle,
            Err(ref e) => self.poisoned = Some(e.to_string()),
        }
        result
    }

    fn delete_and_cut(
        &mut self,
        keep: usize,
        cut_at: Option<u64>,
        handle: Option<&File>,
        index: u64,
    ) -> Result<()> {
        // The active segment's handle goes before its file does.
        if self.segments.len() > keep {
            self.active = None;
        }
        // Newest first, each deletion durable before the next: the files left are always
        // a prefix of the log.
        while self.segments.len() > keep {
            if let Some(seg) = self.segments.last() {
                remove_file(&seg.path)?;
                fsync_dir(&self.dir)?;
            }
            self.segments.pop();
        }
        let Some(off) = cut_at else {
            return Ok(());
        };
        let (Some(seg), Some(file)) = (self.segments.last_mut(), handle) else {
            // `cut_at` is only found in a kept segment, and a kept segment has a handle.
            return Err(StoreError::Poisoned {
                cause: "internal error: no segment to cut".to_owned(),
            });
        };
        file.set_len(off)
            .map_err(|e| StoreError::io(&seg.path, e))?;
        file.sync_all().map_err(|e| StoreError::io(&seg.path, e))?;
        seg.len = off;
        seg.file_len = off;
        seg.next = index;
        Ok(())
    }
}

fn open_for_write(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(path, e))
}

/// The offset in `seg` where record `index` starts (`seg.first <= index < seg.next`),
/// found by walking the record headers from the first one. The records were checked by
/// recovery or written by this process, so only the index fields are checked on the way,
/// as a guard against a file that changed underneath the log.
fn record_offset(seg: &Segment, index: u64) -> Result<u64> {
    let path = seg.path.as_path();
    let file = File::open(path).map_err(|e| StoreError::io(path, e))?;
    let mut reader = BufReader::with_capacity(WALK_BUFFER, file);
    reader
        .seek_relative(HEADER_LEN as i64)
        .map_err(|e| StoreError::io(path, e))?;
    let mut header = [0u8; RECORD_HEADER_LEN];
    let mut off = HEADER_LEN as u64;
    for expected in seg.first..=index {
        let found = match reader.read_exact(&mut header) {
            Ok(()) => u64_at(&header[8..16]),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(StoreError::io(path, e)),
        };
        if found != expected || off >= seg.len {
            return Err(StoreError::corrupt(
                path,
                off,
                format!(
                    "looking for record {index} to truncate from: expected record {expected} \
                     here, found {found} (did the file change underneath the log?)"
                ),
            ));
        }
        if expected == index {
            break;
        }
        let len = u32_at(&header[0..4]);
        reader
            .seek_relative(i64::from(len))
            .map_err(|e| StoreError::io(path, e))?;
        off += RECORD_HEADER_LEN as u64 + u64::from(len);
    }
    Ok(off)
}
