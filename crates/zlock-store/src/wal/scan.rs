//! The checks of a WAL directory that recovery ([`super::recovery`]) and the read-only
//! reader ([`super::read_only`]) share: what a segment's header says, whether a segment
//! may follow the one before it, and the walk over one segment's records that tells a
//! clean end, a torn tail and corruption apart (the rules are in the recovery module's
//! doc).
//!
//! Nothing here changes a file. Where recovery must act (delete a segment whose header
//! a crash tore, cut a torn tail), these functions say so and the caller acts; the
//! read-only reader reports it instead. Keeping the decisions in one place means a dump
//! of a directory calls a tail torn exactly when a restart on it would cut it.

use std::ops::ControlFlow;
use std::path::Path;

use super::format::{
    decode_header, find_valid_record, parse_record, zero_tail_start, HeaderProblem, WalVersion,
    FIRST_INDEX_OFFSET, HEADER_LEN, VERSION_OFFSET,
};
use crate::error::{Result, StoreError};

/// One intact record, where it was found.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The segment file that holds it.
    pub file: &'a Path,
    /// Byte offset of its record header in that file.
    pub offset: u64,
    pub index: u64,
    pub payload: &'a [u8],
}

/// Called for each intact record the caller asked for, in index order. `Break` stops
/// the walk after this record; an error stops it and is reported as
/// [`StoreError::Replay`] with the record's file and offset.
pub(super) type Visit<'a> = dyn FnMut(RecordRef<'_>) -> Result<ControlFlow<()>> + 'a;

/// What a segment's header allows.
pub(super) enum HeaderCheck {
    /// An intact header: the index of the segment's first record.
    First(u64),
    /// The last segment's header is cut short or damaged and no intact record follows:
    /// the remains of a roll a crash interrupted (nothing in it was acknowledged).
    Torn(String),
}

/// Checks the header of segment `path` (named by `name_index`), whose bytes are `data`.
///
/// # Errors
///
/// [`StoreError::UnsupportedVersion`] for a newer format; [`StoreError::Corrupt`] for a
/// damaged header that is not the last segment's, or is followed by an intact record,
/// and for a first index that disagrees with the name or is 0.
pub(super) fn check_header(
    path: &Path,
    data: &[u8],
    name_index: u64,
    is_last: bool,
) -> Result<HeaderCheck> {
    let first = match decode_header(data) {
        Ok(first) => first,
        Err(HeaderProblem::Version(version)) => {
            return Err(StoreError::UnsupportedVersion {
                file: path.to_path_buf(),
                offset: VERSION_OFFSET,
                version,
                supported: WalVersion::CURRENT as u32,
            });
        }
        Err(HeaderProblem::Short(n)) => {
            return torn_or_corrupt(
                path,
                data,
                name_index,
                is_last,
                format!("segment header cut short: {n} of {HEADER_LEN} bytes present"),
            );
        }
        Err(HeaderProblem::Damaged(what)) => {
            return torn_or_corrupt(
                path,
                data,
                name_index,
                is_last,
                format!("segment header damaged: {what}"),
            );
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
    Ok(HeaderCheck::First(first))
}

fn torn_or_corrupt(
    path: &Path,
    data: &[u8],
    name_index: u64,
    is_last: bool,
    reason: String,
) -> Result<HeaderCheck> {
    if is_last && find_valid_record(data, 0, name_index).is_none() {
        Ok(HeaderCheck::Torn(reason))
    } else {
        Err(StoreError::corrupt(path, 0, reason))
    }
}

/// Where a segment starting at `first` may follow one whose records end before
/// `prev_next` (`None`: it is the first segment): see the recovery module's doc. `prev`
/// names the previous segment in the message.
pub(super) fn check_linkage(
    prev: Option<(&Path, u64)>,
    first: u64,
    after_index: u64,
    path: &Path,
) -> Result<()> {
    let needed = after_index.saturating_add(1);
    let problem = match prev {
        None if first > needed => Some(format!(
            "the log starts at index {first}, but recovery needs every record after {after_index}: \
             records {needed}..={} are missing",
            first - 1
        )),
        None => None,
        Some((prev_path, prev_next)) if first < prev_next => Some(format!(
            "segment starts at index {first}, but the previous segment {} already holds records \
             up to {}",
            prev_path.display(),
            prev_next - 1
        )),
        Some((prev_path, prev_next)) if first > prev_next && first > needed => Some(format!(
            "records {prev_next}..={} are missing between {} and this segment, and the snapshot at \
             index {after_index} does not cover them",
            first - 1,
            prev_path.display()
        )),
        Some(_) => None,
    };
    match problem {
        Some(reason) => Err(StoreError::corrupt(path, FIRST_INDEX_OFFSET, reason)),
        None => Ok(()),
    }
}

/// How the walk over a segment's records ended.
#[derive(Debug)]
pub(super) enum End {
    /// At the end of the file, or (last segment) where only zeros follow.
    Clean,
    /// Damage in the last segment with no intact record after it: a torn tail starting
    /// at `offset`. Recovery cuts it; a reader reports it.
    Torn { offset: u64, reason: String },
    /// The visitor asked to stop after the record that ends at the walk's `len`.
    Stopped,
}

/// A segment as the walk found it.
#[derive(Debug)]
pub(super) struct Walked {
    /// Index after its last intact record (`first` if it holds none).
    pub next: u64,
    /// Offset just past its last intact record walked.
    pub len: u64,
    pub end: End,
}

/// Walks the records of one segment (its header checked, `first` its first index) and
/// visits those with an index above `after_index`.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for damage that is not a torn tail (see the recovery module's
/// doc), indexes that do not follow each other, or an index that overflows;
/// [`StoreError::Replay`] when `visit` fails.
pub(super) fn walk_segment(
    path: &Path,
    data: &[u8],
    first: u64,
    is_last: bool,
    after_index: u64,
    visit: &mut Visit<'_>,
) -> Result<Walked> {
    // Only the last segment may end in zeros; in any other, zeros are damage.
    let records_end = if is_last {
        zero_tail_start(data)
    } else {
        data.len()
    };
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
                return Ok(Walked {
                    next,
                    len: off as u64,
                    end: End::Torn {
                        offset: off as u64,
                        reason,
                    },
                });
            }
        };
        if record.index != next {
            return Err(StoreError::corrupt(
                path,
                off as u64,
                format!("expected record index {next}, found {}", record.index),
            ));
        }
        let at = off as u64;
        next = next
            .checked_add(1)
            .ok_or_else(|| StoreError::corrupt(path, at, "record index overflows u64"))?;
        off = record.end;
        if record.index > after_index {
            let found = RecordRef {
                file: path,
                offset: at,
                index: record.index,
                payload: record.payload,
            };
            let flow = visit(found).map_err(|source| StoreError::Replay {
                file: path.to_path_buf(),
                offset: at,
                index: record.index,
                source: Box::new(source),
            })?;
            if flow.is_break() {
                return Ok(Walked {
                    next,
                    len: off as u64,
                    end: End::Stopped,
                });
            }
        }
    }
    Ok(Walked {
        next,
        len: off as u64,
        end: End::Clean,
    })
}
