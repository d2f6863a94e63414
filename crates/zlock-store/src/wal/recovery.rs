//! Recovery: reads every segment at open, replays the records the caller needs, cuts a
//! torn tail away and stops at anything else that is wrong.
//!
//! The rules, and why:
//! - In the last segment, a record boundary from which every byte to the end of the file
//!   is zero is the clean end of the records: the writer's preallocated space (see "End
//!   of the records" in the parent module). It is neither damage nor a torn tail, so it
//!   is kept as it is (no warning, no truncation) and the writer overwrites it. Where
//!   preallocation is off, [`super::Wal::open`] trims it instead. Such zeros are also what
//!   a crash leaves when a size update got ahead of the data, with the same outcome:
//!   nothing after that boundary was acknowledged.
//! - Damage in a segment that is not the last one is corruption, and so are zeros after
//!   its last record. The writer only starts a new segment after the previous one was
//!   fully written, cut to the end of its last record and fsynced, so a crash cannot have
//!   torn it and no preallocated space is left in it.
//! - Damage in the last segment is a torn tail only if no intact record follows it. A
//!   crash interrupts the last write, so whatever it left behind (a short record, a CRC
//!   mismatch, part of a record followed by the zeros it was written over) is the end of
//!   the file, and it is cut away. An intact record after the damage means bytes in the
//!   middle changed after they were written, and cutting there would silently drop
//!   acknowledged writes.
//! - A last segment whose header is short or damaged, with no intact record after it, is
//!   the remains of a roll interrupted by a crash: the writer puts the header and the
//!   first batch in one write and acknowledges nothing before its fsync. It is deleted.
//! - Indexes are consecutive inside a segment, and each segment's first index is in its
//!   header and its name. Between segments a gap is allowed only where the snapshot covers
//!   it (every missing index <= `after_index`): the writer leaves one when a snapshot is
//!   newer than the log (see the parent module). Any other gap, or an overlap, is
//!   corruption.
//!
//! Known limit: if a crash hit while the last batch was being written and the file system
//! persisted a later page of that batch but not an earlier one, an intact record follows
//! the damage and recovery reports corruption instead of guessing. None of the records
//! in that batch had been acknowledged, so an operator may truncate the file at the
//! reported offset. Telling this case apart automatically would need batch boundaries on
//! disk; version 1 does not record them.
//!
//! Each segment is read into memory whole while it is checked, so recovery needs memory
//! for one segment (`WalOptions::segment_bytes` plus at most one batch, or the
//! preallocated length of the last segment if that is larger) at a time. Finding where
//! the trailing zeros start is one vectorised pass from the end of the file, and the
//! search for an intact record after damage stops where they start, so a preallocated
//! tail does not slow the open down noticeably.

use std::fs::{self, OpenOptions};
use std::ops::ControlFlow;
use std::path::Path;

use tracing::warn;

use super::scan::{check_header, check_linkage, walk_segment, End, HeaderCheck, RecordRef};
use super::{Segment, SEGMENT_PREFIX};
use crate::error::{Result, StoreError};
use crate::fsutil::{fsync_dir, list_indexed, remove_file};

/// What recovery found on disk.
pub(super) struct Recovered {
    /// Segments left after recovery, oldest first; the last one becomes the active one.
    pub segments: Vec<Segment>,
    /// Index of the last intact record, 0 if the log holds none.
    pub last_record: u64,
}

type Replay<'a> = dyn FnMut(u64, &[u8]) -> Result<()> + 'a;

/// Checks every segment (the shared rules of [`super::scan`]), replays the records after
/// `after_index`, deletes a last segment whose header a crash tore and cuts a torn tail.
pub(super) fn recover(dir: &Path, after_index: u64, replay: &mut Replay<'_>) -> Result<Recovered> {
    let files = list_indexed(dir, SEGMENT_PREFIX)?;
    let count = files.len();
    let mut segments: Vec<Segment> = Vec::with_capacity(count);
    let mut dir_changed = false;
    let mut visit =
        |r: RecordRef<'_>| replay(r.index, r.payload).map(|()| ControlFlow::Continue(()));

    for (pos, (name_index, path)) in files.into_iter().enumerate() {
        let is_last = pos + 1 == count;
        let data = fs::read(&path).map_err(|e| StoreError::io(&path, e))?;

        let first = match check_header(&path, &data, name_index, is_last)? {
            HeaderCheck::First(first) => first,
            HeaderCheck::Torn(reason) => {
                warn!(
                    file = %path.display(),
                    %reason,
                    "deleting last WAL segment whose header was torn by a crash"
                );
                remove_file(&path)?;
                dir_changed = true;
                break;
            }
        };
        let prev = segments.last().map(|s| (s.path.as_path(), s.next));
        check_linkage(prev, first, after_index, &path)?;

        let walked = walk_segment(&path, &data, first, is_last, after_index, &mut visit)?;
        let file_len = match walked.end {
            End::Torn { offset, reason } => {
                warn!(
                    file = %path.display(),
                    offset,
                    dropped_bytes = data.len() as u64 - offset,
                    %reason,
                    "truncating torn WAL tail"
                );
                truncate(&path, offset)?;
                offset
            }
            End::Clean | End::Stopped => data.len() as u64,
        };
        segments.push(Segment {
            first,
            next: walked.next,
            path,
            len: walked.len,
            file_len,
        });
    }

    if dir_changed {
        fsync_dir(dir)?;
    }
    let last_record = segments.last().map_or(0, |s| s.next - 1);
    Ok(Recovered {
        segments,
        last_record,
    })
}

/// Cuts `path` to `len` bytes and makes the new size durable before anything is appended
/// after it.
fn truncate(path: &Path, len: u64) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    file.set_len(len).map_err(|e| StoreError::io(path, e))?;
    file.sync_all().map_err(|e| StoreError::io(path, e))
}
