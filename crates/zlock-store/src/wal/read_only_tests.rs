//! The read-only scanner: it finds what recovery finds, reports what recovery would cut,
//! and leaves every byte, length and modification time as it was.

use std::fs::{self, OpenOptions};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::read_only::{scan, ScanEnd, ScanReport};
use super::recovery_tests::flip_byte;
use super::tests::{expected, open, payload, segment_files, tiny, write_range, Replayed};
use super::*;

/// Every file of `dir` with its bytes and modification time.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, Vec<u8>, SystemTime)> {
    let mut all: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = fs::metadata(&p).unwrap().modified().unwrap();
            (p.clone(), fs::read(&p).unwrap(), m)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn scan_all(dir: &Path, after: u64) -> Result<(ScanReport, Replayed)> {
    let mut seen = Vec::new();
    let report = scan(dir, after, |r| {
        seen.push((r.index, r.payload.to_vec()));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok((report, seen))
}

#[test]
fn reads_every_record_across_segments_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=40, 3);
    drop(wal);
    let before = fingerprint(dir);

    let (report, seen) = scan_all(dir, 0).unwrap();
    assert_eq!(seen, expected(1..=40));
    assert_eq!(report.end, ScanEnd::Clean);
    assert_eq!(report.last_index, Some(40));
    assert_eq!(report.segments.len(), segment_files(dir).len());
    assert_eq!(report.segments[0].first, 1);

    let (_, seen) = scan_all(dir, 25).unwrap();
    assert_eq!(seen, expected(26..=40));
    assert_eq!(fingerprint(dir), before);
}

#[test]
fn preallocated_zeros_are_a_clean_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    write_range(&mut wal, 1..=5, 5);
    drop(wal);
    let (report, seen) = scan_all(tmp.path(), 0).unwrap();
    assert_eq!(seen, expected(1..=5));
    assert_eq!(report.end, ScanEnd::Clean);
}

#[test]
fn a_torn_tail_is_reported_where_recovery_would_cut_and_left_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=20, 4);
    drop(wal);
    let last = segment_files(dir).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    // The last record is 16 header bytes plus its payload; cut it in its middle.
    let cut_at = len - (16 + payload(20).len() as u64);
    OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let before = fingerprint(dir);

    let (report, seen) = scan_all(dir, 0).unwrap();
    assert_eq!(seen, expected(1..=19));
    let ScanEnd::Torn { file, offset, .. } = &report.end else {
        panic!("expected a torn tail: {report:?}");
    };
    assert_eq!((file, *offset), (&last, cut_at));
    assert_eq!(report.last_index, Some(19));
    assert_eq!(fingerprint(dir), before, "the scan changed a file");

    // Recovery agrees: it cuts exactly there and finds the same records.
    let (_, replayed) = open(dir, tiny(), 0).unwrap();
    assert_eq!(replayed, seen);
    assert_eq!(fs::metadata(&last).unwrap().len(), cut_at);
}

#[test]
fn corruption_in_the_middle_is_an_error_naming_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=30, 2);
    drop(wal);
    let first = segment_files(dir)[0].clone();
    // Inside the payload of the first record (header 24 bytes, record header 16).
    flip_byte(&first, 24 + 16 + 2);
    let before = fingerprint(dir);

    let mut seen = 0;
    let err = scan(dir, 0, |_| {
        seen += 1;
        Ok(ControlFlow::Continue(()))
    })
    .unwrap_err();
    let StoreError::Corrupt { file, offset, .. } = &err else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!((file, *offset), (&first, 24));
    assert_eq!(seen, 0);
    assert_eq!(fingerprint(dir), before);
}

#[test]
fn a_purged_log_starts_at_its_first_segment_and_break_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=40, 2);
    wal.purge_through(20).unwrap();
    drop(wal);
    let start = scan_all(dir, 0).unwrap().0.segments[0].first;
    assert!(start > 1, "the purge removed no segment");

    let (report, seen) = scan_all(dir, 0).unwrap();
    assert_eq!(seen, expected(start..=40));
    assert_eq!(report.end, ScanEnd::Clean);

    let mut taken = Vec::new();
    let report = scan(dir, 30, |r| {
        taken.push(r.index);
        Ok(if taken.len() == 3 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })
    .unwrap();
    assert_eq!(taken, vec![31, 32, 33]);
    assert!(matches!(report.end, ScanEnd::Stopped { .. }), "{report:?}");
}

#[test]
fn a_missing_directory_is_an_error_and_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nope");
    assert!(matches!(scan_all(&dir, 0), Err(StoreError::Io { .. })));
    assert!(!dir.exists());
}

#[test]
fn a_visitor_error_names_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), tiny(), 0).unwrap();
    write_range(&mut wal, 1..=3, 3);
    drop(wal);
    let err = scan(tmp.path(), 0, |r| {
        if r.index == 2 {
            Err(StoreError::rejected("does not decode"))
        } else {
            Ok(ControlFlow::Continue(()))
        }
    })
    .unwrap_err();
    assert!(matches!(err, StoreError::Replay { index: 2, .. }), "{err}");
}
