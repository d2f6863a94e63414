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
use std::path::Path;

use tracing::warn;

use super::format::{
    decode_header, find_valid_record, parse_record, zero_tail_start, HeaderProblem, WalVersion,
    FIRST_INDEX_OFFSET, HEADER_LEN, VERSION_OFFSET,
};
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

pub(super) fn recover(dir: &Path, after_index: u64, replay: &mut Replay<'_>) -> Result<Recovered> {
    let files = list_indexed(dir, SEGMENT_PREFIX)?;
    let count = files.len();
    let mut segments: Vec<Segment> = Vec::with_capacity(count);
    let mut dir_changed = false;

    for (pos, (name_index, path)) in files.into_iter().enumerate() {
        let is_last = pos + 1 == count;
        let data = fs::read(&path).map_err(|e| StoreError::io(&path, e))?;

        let first = match decode_header(&data) {
            Ok(first) => first,
            Err(HeaderProblem::Version(version)) => {
                return Err(StoreError::UnsupportedVersion {
                    file: path,
                    offset: VERSION_OFFSET,
                    version,
                    supported: WalVersion::CURRENT as u32,
                });
            }
            Err(problem) => {
                let reason = match problem {
                    HeaderProblem::Short(n) => {
                        format!("segment header cut short: {n} of {HEADER_LEN} bytes present")
                    }
                    HeaderProblem::Damaged(what) => format!("segment header damaged: {what}"),
                    HeaderProblem::Version(_) => String::new(), // handled above
                };
                if is_last && find_valid_record(&data, 0, name_index).is_none() {
                    warn!(
                        file = %path.display(),
                        %reason,
                        "deleting last WAL segment whose header was torn by a crash"
                    );
                    remove_file(&path)?;
                    dir_changed = true;
                    break;
                }
                return Err(StoreError::corrupt(path, 0, reason));
            }
        };
        if first != name_index {
            return Err(StoreError::corrupt(
                path,
                FIRST_INDEX_OFFSET,
                format!("header says first index {first} but the file name says {name_index}"),
            ));
        }
        if first == 0 {
            return Err(StoreError::corrupt(
                path,
                FIRST_INDEX_OFFSET,
                "first index is 0, which is never used",
            ));
        }
        check_linkage(segments.last(), first, after_index, &path)?;

        segments.push(scan_segment(
            &path,
            &data,
            first,
            is_last,
            after_index,
            replay,
        )?);
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

/// Checks that a segment starting at `first` may follow `prev` (see the module doc).
fn check_linkage(prev: Option<&Segment>, first: u64, after_index: u64, path: &Path) -> Result<()> {
    let needed = after_index.saturating_add(1);
    let problem = match prev {
        None if first > needed => Some(format!(
            "the log starts at index {first}, but recovery needs every record after {after_index}: \
             records {needed}..={} are missing",
            first - 1
        )),
        None => None,
        Some(prev) if first < prev.next => Some(format!(
            "segment starts at index {first}, but the previous segment {} already holds records \
             up to {}",
            prev.path.display(),
            prev.next - 1
        )),
        Some(prev) if first > prev.next && first > needed => Some(format!(
            "records {}..={} are missing between {} and this segment, and the snapshot at \
             index {after_index} does not cover them",
            prev.next,
            first - 1,
            prev.path.display()
        )),
        Some(_) => None,
    };
    match problem {
        Some(reason) => Err(StoreError::corrupt(path, FIRST_INDEX_OFFSET, reason)),
        None => Ok(()),
    }
}

/// Replays the records of one segment and describes what is left of it. Truncates a torn
/// tail of the last segment, and stops without complaint at the zeros after its last
/// record.
fn scan_segment(
    path: &Path,
    data: &[u8],
    first: u64,
    is_last: bool,
    after_index: u64,
    replay: &mut Replay<'_>,
) -> Result<Segment> {
    // Only the last segment may end in zeros; in any other, zeros are damage.
    let records_end = if is_last {
        zero_tail_start(data)
    } else {
        data.len()
    };
    let mut file_len = data.len() as u64;
    let mut off = HEADER_LEN;
    let mut next = first;
    while off < records_end {
        let record = match parse_record(data, off) {
            Ok(record) => record,
            Err(reason) => {
                if !is_last {
                    return Err(StoreError::corrupt(
                        path,
                        off as u64,
                        format!("{reason} (in a segment that is not the last, so not a torn tail)"),
                    ));
                }
                if let Some((at, index)) = find_valid_record(data, off + 1, next) {
                    return Err(StoreError::corrupt(
                        path,
                        off as u64,
                        format!(
                            "{reason}; an intact record (index {index}) follows at offset {at}, \
                             so this is not a torn tail"
                        ),
                    ));
                }
                warn!(
                    file = %path.display(),
                    offset = off,
                    dropped_bytes = data.len() - off,
                    %reason,
                    "truncating torn WAL tail"
                );
                truncate(path, off as u64)?;
                file_len = off as u64;
                break;
            }
        };
        if record.index != next {
            return Err(StoreError::corrupt(
                path,
                off as u64,
                format!("expected record index {next}, found {}", record.index),
            ));
        }
        if record.index > after_index {
            replay(record.index, record.payload).map_err(|source| StoreError::Replay {
                file: path.to_path_buf(),
                offset: off as u64,
                index: record.index,
                source: Box::new(source),
            })?;
        }
        next = next
            .checked_add(1)
            .ok_or_else(|| StoreError::corrupt(path, off as u64, "record index overflows u64"))?;
        off = record.end;
    }
    Ok(Segment {
        first,
        next,
        path: path.to_path_buf(),
        len: off as u64,
        file_len,
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
