//! Reading a WAL directory without changing it: for tools that inspect a copy of a
//! member's directory, or the directory of a server that is running.
//!
//! [`super::Wal::open`] is recovery: it cuts a torn tail, deletes a segment whose header
//! a crash tore and creates the directory if it is missing, which is right before a
//! server appends and wrong for an inspection (on a live server's directory the "torn
//! tail" may be a batch being written at that moment). [`scan`] applies the same rules
//! (the shared [`super::scan`] module) and reports what recovery would act on instead:
//! it opens every file read-only and never creates, truncates or deletes anything.

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

pub use super::scan::RecordRef;
use super::scan::{check_header, check_linkage, walk_segment, End, HeaderCheck};
use super::SEGMENT_PREFIX;
use crate::error::{Result, StoreError};
use crate::fsutil::list_indexed;

/// One segment file as [`scan`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSummary {
    pub path: PathBuf,
    /// Index of its first record (its name and header say so).
    pub first: u64,
    /// Index after its last intact record read (`first` if none).
    pub next: u64,
}

/// How the records ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every record was read and the log ends cleanly (at the end of the last file, or
    /// where only the writer's preallocated zeros follow).
    Clean,
    /// The last segment ends in a torn record (or a torn header, `offset` 0) that no
    /// intact record follows: what a crash, or a batch being written as it was read,
    /// leaves. Every record before it was visited. Recovery would cut the file here.
    Torn {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The visitor returned `Break` after the record that ends at `offset` of `file`.
    Stopped { file: PathBuf, offset: u64 },
}

/// What [`scan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// The segments read, oldest first.
    pub segments: Vec<SegmentSummary>,
    /// Index of the last intact record read, `None` if there was none.
    pub last_index: Option<u64>,
    pub end: ScanEnd,
}

/// Reads the WAL segments in `dir` in index order and calls `visit` for each intact
/// record whose index is above `after`, without changing any file.
///
/// The log may start anywhere (a purged log starts past index 1): the first segment
/// is taken as the start. After it, the checks are recovery's: indexes consecutive,
/// no gap between segments unless `after` covers it, damage in a segment other than
/// the last, or followed by an intact record, is corruption.
///
/// # Errors
///
/// - [`StoreError::Corrupt`] naming the file and the offset of the damage, after every
///   record before it was visited.
/// - [`StoreError::UnsupportedVersion`] for a segment of a newer format.
/// - [`StoreError::Replay`] wrapping the error `visit` returned, with the record's file
///   and offset.
/// - [`StoreError::Io`] when `dir` or a file cannot be read (a missing `dir` too).
pub fn scan(
    dir: &Path,
    after: u64,
    mut visit: impl FnMut(RecordRef<'_>) -> Result<ControlFlow<()>>,
) -> Result<ScanReport> {
    if !dir.is_dir() {
        return Err(StoreError::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
        ));
    }
    let files = list_indexed(dir, SEGMENT_PREFIX)?;
    let count = files.len();
    let mut segments: Vec<SegmentSummary> = Vec::with_capacity(count);
    // Gaps between segments are checked as recovery from a snapshot at `floor` would:
    // the first segment's start is where this log begins.
    let mut floor = after;
    for (pos, (name_index, path)) in files.into_iter().enumerate() {
        let is_last = pos + 1 == count;
        let data = fs::read(&path).map_err(|e| StoreError::io(&path, e))?;
        let first = match check_header(&path, &data, name_index, is_last)? {
            HeaderCheck::First(first) => first,
            HeaderCheck::Torn(reason) => {
                return Ok(report(
                    segments,
                    ScanEnd::Torn {
                        file: path,
                        offset: 0,
                        reason,
                    },
                ));
            }
        };
        if pos == 0 {
            floor = floor.max(first - 1);
        }
        let prev = segments.last().map(|s| (s.path.as_path(), s.next));
        check_linkage(prev, first, floor, &path)?;
        let walked = walk_segment(&path, &data, first, is_last, after, &mut visit)?;
        segments.push(SegmentSummary {
            path: path.clone(),
            first,
            next: walked.next,
        });
        match walked.end {
            End::Clean => {}
            End::Torn { offset, reason } => {
                let end = ScanEnd::Torn {
                    file: path,
                    offset,
                    reason,
                };
                return Ok(report(segments, end));
            }
            End::Stopped => {
                let end = ScanEnd::Stopped {
                    file: path,
                    offset: walked.len,
                };
                return Ok(report(segments, end));
            }
        }
    }
    Ok(report(segments, ScanEnd::Clean))
}

fn report(segments: Vec<SegmentSummary>, end: ScanEnd) -> ScanReport {
    let last_index = segments
        .iter()
        .rev()
        .find(|s| s.next > s.first)
        .map(|s| s.next - 1);
    ScanReport {
        segments,
        last_index,
        end,
    }
}
