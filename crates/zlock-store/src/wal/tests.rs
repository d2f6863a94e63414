//! WAL tests: round trips, segment rolls, purge, and the writer-side contract. Recovery
//! from damage is in `recovery_tests.rs`.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

pub(super) type Replayed = Vec<(u64, Vec<u8>)>;

/// A payload whose length varies with the index, so records straddle segment limits.
pub(super) fn payload(index: u64) -> Vec<u8> {
    format!("txn-{index};")
        .repeat((index % 5 + 1) as usize)
        .into_bytes()
}

/// Default segments, no preallocation: files hold exactly their records, so a test can
/// find records by file length.
pub(super) fn no_prealloc() -> WalOptions {
    WalOptions {
        preallocate_bytes: 0,
        ..WalOptions::default()
    }
}

/// Tiny segments, no preallocation: files hold exactly their records.
pub(super) fn tiny() -> WalOptions {
    WalOptions {
        segment_bytes: 100,
        preallocate_bytes: 0,
    }
}

pub(super) fn open(dir: &Path, opts: WalOptions, after: u64) -> Result<(Wal, Replayed)> {
    let mut seen = Vec::new();
    let wal = Wal::open(dir, opts, after, |i, p| {
        seen.push((i, p.to_vec()));
        Ok(())
    })?;
    Ok((wal, seen))
}

/// Appends `range` with [`payload`], syncing after every `batch` records.
pub(super) fn write_range(wal: &mut Wal, range: std::ops::RangeInclusive<u64>, batch: u64) {
    for i in range {
        wal.append(i, &payload(i)).unwrap();
        if i % batch == 0 {
            wal.sync().unwrap();
        }
    }
    wal.sync().unwrap();
}

pub(super) fn expected(range: std::ops::RangeInclusive<u64>) -> Replayed {
    range.map(|i| (i, payload(i))).collect()
}

pub(super) fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("log."))
        .collect();
    files.sort();
    files
}

fn first_index_of(path: &Path) -> u64 {
    path.file_name().unwrap().to_str().unwrap()["log.".len()..]
        .parse()
        .unwrap()
}

#[test]
fn empty_dir_is_created_and_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("wal");
    let (mut wal, seen) = open(&dir, WalOptions::default(), 0).unwrap();
    assert!(seen.is_empty());
    assert_eq!(wal.last_index(), 0);
    // Nothing buffered: sync touches nothing, not even to create a segment.
    wal.sync().unwrap();
    assert!(dir.is_dir());
    assert!(segment_files(&dir).is_empty());
    drop(wal);
    let (wal, seen) = open(&dir, WalOptions::default(), 0).unwrap();
    assert!(seen.is_empty());
    assert_eq!(wal.last_index(), 0);
}

#[test]
fn round_trip_over_syncs_and_segment_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=60, 7);
    assert_eq!(wal.last_index(), 60);
    assert_eq!(wal.synced_index(), 60);
    drop(wal);

    let files = segment_files(dir);
    assert!(files.len() > 3, "tiny segments must roll: {files:?}");
    assert_eq!(first_index_of(&files[0]), 1);
    // A segment rolls only once past the limit, so it exceeds it by at most one batch.
    for f in &files[..files.len() - 1] {
        assert!(fs::metadata(f).unwrap().len() >= 100);
    }

    let (mut wal, seen) = open(dir, tiny(), 0).unwrap();
    assert_eq!(seen, expected(1..=60));
    assert_eq!(wal.last_index(), 60);
    assert_eq!(wal.segment_paths().count(), files.len());

    // Keep going after a reopen, into the same active segment and beyond.
    write_range(&mut wal, 61..=80, 3);
    drop(wal);
    let (_, seen) = open(dir, tiny(), 0).unwrap();
    assert_eq!(seen, expected(1..=80));

    // after_index skips what the snapshot already holds, across segment boundaries.
    for after in [1, 17, 59, 79, 80] {
        let (wal, seen) = open(dir, tiny(), after).unwrap();
        assert_eq!(seen, expected(after + 1..=80), "after_index {after}");
        assert_eq!(wal.last_index(), 80);
    }
}

#[test]
fn one_batch_is_one_write_and_sync_of_many_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    for i in 1..=1000 {
        wal.append(i, &payload(i)).unwrap();
    }
    assert_eq!(wal.last_index(), 1000);
    assert_eq!(wal.synced_index(), 0);
    wal.sync().unwrap();
    assert_eq!(wal.synced_index(), 1000);
    assert_eq!(segment_files(tmp.path()).len(), 1);
    let (_, seen) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    assert_eq!(seen, expected(1..=1000));
}

#[test]
fn append_must_continue_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    let err = wal.append(2, b"x").unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfOrder {
                expected: 1,
                got: 2
            }
        ),
        "{err}"
    );
    wal.append(1, b"x").unwrap();
    assert!(matches!(
        wal.append(1, b"x"),
        Err(StoreError::OutOfOrder {
            expected: 2,
            got: 1
        })
    ));
    assert!(matches!(
        wal.append(0, b"x"),
        Err(StoreError::OutOfOrder {
            expected: 2,
            got: 0
        })
    ));
    // The rejected appends left no trace.
    wal.sync().unwrap();
    drop(wal);
    let (_, seen) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    assert_eq!(seen, vec![(1, b"x".to_vec())]);
}

#[test]
fn unsynced_records_are_not_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    write_range(&mut wal, 1..=3, 10);
    wal.append(4, b"never synced").unwrap();
    drop(wal);
    let (wal, seen) = open(tmp.path(), WalOptions::default(), 0).unwrap();
    assert_eq!(seen, expected(1..=3));
    assert_eq!(wal.last_index(), 3);
}

#[test]
fn empty_payloads_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(tmp.path(), tiny(), 0).unwrap();
    for i in 1..=30 {
        wal.append(i, b"").unwrap();
        wal.sync().unwrap();
    }
    drop(wal);
    let (_, seen) = open(tmp.path(), tiny(), 0).unwrap();
    assert_eq!(
        seen,
        (1..=30).map(|i| (i, Vec::new())).collect::<Replayed>()
    );
}

#[test]
fn snapshot_newer_than_log_continues_after_the_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=10, 4);
    drop(wal);

    // The snapshot at 25 holds everything the log has and more.
    let (mut wal, seen) = open(dir, tiny(), 25).unwrap();
    assert!(seen.is_empty());
    assert_eq!(wal.last_index(), 25);
    assert!(matches!(
        wal.append(11, b"x"),
        Err(StoreError::OutOfOrder { expected: 26, .. })
    ));
    write_range(&mut wal, 26..=30, 2);
    drop(wal);
    assert!(segment_files(dir).iter().any(|f| first_index_of(f) == 26));

    // From that snapshot (or a newer one) the gap 11..=25 is covered.
    let (_, seen) = open(dir, tiny(), 25).unwrap();
    assert_eq!(seen, expected(26..=30));
    let (_, seen) = open(dir, tiny(), 27).unwrap();
    assert_eq!(seen, expected(28..=30));
    // From an older snapshot it is not: those records are gone.
    let err = open(dir, tiny(), 5).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("11..=25"), "{err}");
}

#[test]
fn purge_through_deletes_only_covered_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=60, 5);
    let firsts: Vec<u64> = segment_files(dir)
        .iter()
        .map(|f| first_index_of(f))
        .collect();
    assert!(firsts.len() >= 4, "{firsts:?}");

    // An index inside the third segment: the first two are fully covered.
    let inside_third = firsts[2] + 1;
    assert!(inside_third < firsts[3]);
    wal.purge_through(inside_third).unwrap();
    let left: Vec<u64> = segment_files(dir)
        .iter()
        .map(|f| first_index_of(f))
        .collect();
    assert_eq!(left, firsts[2..]);

    // Exactly the last index of a segment covers that segment.
    wal.purge_through(firsts[3] - 1).unwrap();
    let left: Vec<u64> = segment_files(dir)
        .iter()
        .map(|f| first_index_of(f))
        .collect();
    assert_eq!(left, firsts[3..]);

    // An index below every remaining segment's end deletes nothing.
    wal.purge_through(firsts[3]).unwrap();
    assert_eq!(segment_files(dir).len(), firsts.len() - 3);

    // Recovery from a snapshot at the purge point still works.
    drop(wal);
    let (mut wal, seen) = open(dir, tiny(), firsts[3]).unwrap();
    assert_eq!(seen, expected(firsts[3] + 1..=60));

    // Everything covered: the active segment still stays.
    wal.purge_through(u64::MAX).unwrap();
    let left = segment_files(dir);
    assert_eq!(left.len(), 1);
    assert_eq!(
        wal.segment_paths().collect::<Vec<_>>(),
        vec![left[0].as_path()]
    );
    write_range(&mut wal, 61..=62, 1);
    drop(wal);
    let last_first = first_index_of(&segment_files(dir)[0]);
    let (_, seen) = open(dir, tiny(), last_first - 1).unwrap();
    assert_eq!(seen, expected(last_first..=62));
}

#[test]
fn failed_sync_poisons_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (mut wal, _) = open(&dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=20, 20);
    // The next batch must roll (the segment is over 100 bytes), and creating the new
    // segment fails because the directory is gone.
    fs::remove_dir_all(&dir).unwrap();
    wal.append(21, b"lost").unwrap();
    let err = wal.sync().unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(matches!(
        wal.append(22, b"x"),
        Err(StoreError::Poisoned { .. })
    ));
    let err = wal.sync().unwrap_err();
    assert!(matches!(err, StoreError::Poisoned { .. }));
    assert!(err.to_string().contains("restart"), "{err}");
}

#[test]
fn empty_segment_that_cannot_continue_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=3, 3);
    drop(wal);
    // A roll to index 4 that a crash interrupted right after the header.
    let header_only = dir.join("log.00000000000000000004");
    fs::write(&header_only, super::format::encode_header(4)).unwrap();

    // Continuing at 4, the empty segment is simply used.
    let (wal, seen) = open(dir, tiny(), 0).unwrap();
    assert_eq!(seen, expected(1..=3));
    assert_eq!(wal.last_index(), 3);
    assert!(header_only.exists());
    drop(wal);

    // With a snapshot at 10 the next index is 11, so the empty segment goes.
    let (mut wal, seen) = open(dir, tiny(), 10).unwrap();
    assert!(seen.is_empty());
    assert!(!header_only.exists());
    write_range(&mut wal, 11..=12, 2);
    drop(wal);
    let (_, seen) = open(dir, tiny(), 10).unwrap();
    assert_eq!(seen, expected(11..=12));
}
