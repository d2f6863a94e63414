//! Truncation: where the cut falls (active segment, older segment, segment start, past
//! the end, buffered records), the floor a snapshot sets, recovery after a cut and a
//! reappend, and every state a crash can leave between the steps.

use std::fs;
use std::path::Path;

use super::prealloc_tests::walk;
use super::recovery_tests::file_len;
use super::tests::{expected, open, payload, segment_files, tiny, write_range, Replayed};
use super::*;

/// The payload of a record appended after a truncation: different from [`payload`], so
/// a resurrected old record shows.
fn new_payload(index: u64) -> Vec<u8> {
    format!("new-{index}").into_bytes()
}

/// Appends `range` with [`new_payload`], syncing after every `batch` records.
fn write_new(wal: &mut Wal, range: std::ops::RangeInclusive<u64>, batch: u64) {
    for i in range {
        wal.append(i, &new_payload(i)).unwrap();
        if i % batch == 0 {
            wal.sync().unwrap();
        }
    }
    wal.sync().unwrap();
}

/// The old records before `cut`, then the new ones from `cut` to `end`.
fn old_then_new(cut: u64, end: u64) -> Replayed {
    let mut want = expected(1..=cut - 1);
    want.extend((cut..=end).map(|i| (i, new_payload(i))));
    want
}

/// Tiny segments grown 4 KiB at a time: rolls every few records, and the active segment
/// ends in zeros.
fn tiny_padded() -> WalOptions {
    WalOptions {
        segment_bytes: 100,
        preallocate_bytes: 4096,
    }
}

/// One segment that never rolls, grown 4 KiB at a time.
fn one_padded() -> WalOptions {
    WalOptions {
        segment_bytes: 1 << 30,
        preallocate_bytes: 4096,
    }
}

fn first_indexes(dir: &Path) -> Vec<u64> {
    segment_files(dir)
        .iter()
        .map(|f| {
            f.file_name().unwrap().to_str().unwrap()["log.".len()..]
                .parse()
                .unwrap()
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Every file of `dir` with its bytes, to show that nothing changed.
fn contents(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    segment_files(dir)
        .into_iter()
        .map(|f| {
            let bytes = fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect()
}

#[test]
fn cut_in_the_active_segment() {
    for opts in [one_padded(), one_unpadded()] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut wal, _) = open(dir, opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=20, 6);
        let seg = segment_files(dir)[0].clone();
        let (offsets, _) = walk(&seg);

        wal.truncate_from(15).unwrap();
        assert_eq!((wal.last_index(), wal.synced_index()), (14, 14));
        // The file ends exactly at record 14, preallocated zeros gone: a clean end.
        assert_eq!(file_len(&seg), offsets[14], "{opts:?}");
        assert!(matches!(
            wal.append(16, b"x"),
            Err(StoreError::OutOfOrder {
                expected: 15,
                got: 16
            })
        ));

        // Reopened straight away, the cut records are gone.
        drop(wal);
        let (mut wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, expected(1..=14), "{opts:?}");
        assert_eq!(wal.last_index(), 14);

        write_new(&mut wal, 15..=30, 4);
        drop(wal);
        let (wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, old_then_new(15, 30), "{opts:?}");
        assert_eq!(wal.last_index(), 30);
        assert_eq!(segment_files(dir), vec![seg.clone()]);
        if opts.preallocate_bytes > 0 {
            // The next sync grew the file again by whole steps from the cut.
            assert_eq!((file_len(&seg) - offsets[14]) % opts.preallocate_bytes, 0);
        }
    }
}

/// One segment that never rolls, without preallocation.
fn one_unpadded() -> WalOptions {
    WalOptions {
        preallocate_bytes: 0,
        ..one_padded()
    }
}

#[test]
fn cut_in_an_older_segment_deletes_the_later_ones() {
    for opts in [tiny(), tiny_padded()] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut wal, _) = open(dir, opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=60, 5);
        let firsts = first_indexes(dir);
        assert!(firsts.len() >= 4, "{firsts:?}");
        let cut = firsts[1] + 1;
        assert!(cut < firsts[2]);
        let second = segment_files(dir)[1].clone();
        let (offsets, _) = walk(&second);

        wal.truncate_from(cut).unwrap();
        assert_eq!((wal.last_index(), wal.synced_index()), (cut - 1, cut - 1));
        assert_eq!(first_indexes(dir), firsts[..2]);
        assert_eq!(file_len(&second), offsets[1], "{opts:?}");
        assert_eq!(
            wal.segment_paths().collect::<Vec<_>>(),
            segment_files(dir)
                .iter()
                .map(|p| p.as_path())
                .collect::<Vec<_>>()
        );

        drop(wal);
        let (mut wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, expected(1..=cut - 1), "{opts:?}");
        write_new(&mut wal, cut..=cut + 30, 3);
        drop(wal);
        let (_, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, old_then_new(cut, cut + 30), "{opts:?}");
    }
}

#[test]
fn cut_exactly_at_a_segment_start() {
    for opts in [tiny(), tiny_padded()] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut wal, _) = open(dir, opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=60, 5);
        let firsts = first_indexes(dir);
        let before = contents(dir);

        // The segment starting at the cut goes whole; the one before it is untouched.
        let cut = firsts[2];
        wal.truncate_from(cut).unwrap();
        assert_eq!(wal.last_index(), cut - 1);
        assert_eq!(first_indexes(dir), firsts[..2]);
        assert_eq!(contents(dir), before[..2], "{opts:?}");
        write_new(&mut wal, cut..=cut + 10, 4);
        drop(wal);
        let (mut wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, old_then_new(cut, cut + 10), "{opts:?}");

        // From the very first index: nothing is left, and the log starts over at 1.
        wal.truncate_from(1).unwrap();
        assert_eq!((wal.last_index(), wal.synced_index()), (0, 0));
        assert!(segment_files(dir).is_empty());
        assert_eq!(wal.segment_paths().count(), 0);
        drop(wal);
        let (mut wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert!(seen.is_empty());
        assert_eq!(wal.last_index(), 0);
        write_new(&mut wal, 1..=12, 5);
        drop(wal);
        let (_, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, old_then_new(1, 12), "{opts:?}");
    }
}

#[test]
fn cut_past_the_end_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny_padded(), 0).unwrap();
    write_range(&mut wal, 1..=30, 4);
    let before = contents(dir);
    for index in [31, 32, 1000, u64::MAX] {
        wal.truncate_from(index).unwrap();
        assert_eq!((wal.last_index(), wal.synced_index()), (30, 30));
        assert_eq!(contents(dir), before, "truncate_from({index})");
    }
    write_range(&mut wal, 31..=32, 1);
    drop(wal);
    let (_, seen) = open(dir, tiny_padded(), 0).unwrap();
    assert_eq!(seen, expected(1..=32));
}

/// Records appended but not synced are cut from the buffer; when the cut reaches synced
/// records the whole buffer goes and the disk is cut too.
#[test]
fn cut_of_buffered_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_padded(), 0).unwrap();
    write_range(&mut wal, 1..=10, 10);
    let before = contents(dir);

    // Inside the buffer: 11 and 12 stay buffered, and the disk is not touched.
    for i in 11..=15 {
        wal.append(i, &payload(i)).unwrap();
    }
    wal.truncate_from(13).unwrap();
    assert_eq!((wal.last_index(), wal.synced_index()), (12, 10));
    assert_eq!(contents(dir), before);
    write_new(&mut wal, 13..=14, 10);
    assert_eq!((wal.last_index(), wal.synced_index()), (14, 14));
    drop(wal);
    let (mut wal, seen) = open(dir, one_padded(), 0).unwrap();
    assert_eq!(seen, old_then_new(13, 14));

    // The whole buffer, exactly.
    wal.append(15, b"dropped").unwrap();
    wal.truncate_from(15).unwrap();
    assert_eq!((wal.last_index(), wal.synced_index()), (14, 14));
    wal.sync().unwrap();

    // Below the buffer: the buffer goes and the disk is cut.
    wal.append(15, b"dropped").unwrap();
    wal.append(16, b"dropped").unwrap();
    wal.truncate_from(8).unwrap();
    assert_eq!((wal.last_index(), wal.synced_index()), (7, 7));
    wal.sync().unwrap();
    drop(wal);
    let (mut wal, seen) = open(dir, one_padded(), 0).unwrap();
    assert_eq!(seen, expected(1..=7));
    write_new(&mut wal, 8..=9, 5);
    drop(wal);
    let (_, seen) = open(dir, one_padded(), 0).unwrap();
    assert_eq!(seen, old_then_new(8, 9));
}

/// Records a snapshot covers (at or below `after_index`, or purged through) are committed
/// and may not be cut; index 0 is never used. The refusal changes nothing.
#[test]
fn cut_into_what_a_snapshot_covers_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=60, 5);
    let err = wal.truncate_from(0).unwrap_err();
    assert!(
        matches!(err, StoreError::TruncateCovered { index: 0, floor: 0 }),
        "{err}"
    );
    drop(wal);

    let (mut wal, seen) = open(dir, tiny(), 20).unwrap();
    assert_eq!(seen, expected(21..=60));
    let before = contents(dir);
    for index in [1, 19, 20] {
        let err = wal.truncate_from(index).unwrap_err();
        assert!(
            matches!(err, StoreError::TruncateCovered { floor: 20, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("up to 20"), "{err}");
    }
    assert_eq!(contents(dir), before);
    assert_eq!(wal.last_index(), 60);

    // purge_through raises the floor, here to an index inside a segment it keeps.
    let firsts = first_indexes(dir);
    let purged = firsts[5] + 1;
    assert!(purged > 20 && purged + 1 < firsts[6], "{firsts:?}");
    wal.purge_through(purged).unwrap();
    assert_eq!(first_indexes(dir)[0], firsts[5]);
    let err = wal.truncate_from(purged).unwrap_err();
    assert!(
        matches!(err, StoreError::TruncateCovered { floor, .. } if floor == purged),
        "{err}"
    );
    wal.truncate_from(purged + 1).unwrap();
    assert_eq!(wal.last_index(), purged);
    // A refused truncation does not poison the log.
    write_new(&mut wal, purged + 1..=70, 4);
    drop(wal);
    let (_, seen) = open(dir, tiny(), purged).unwrap();
    assert_eq!(seen, old_then_new(purged + 1, 70)[purged as usize..]);
}

/// A log opened after a snapshot newer than its records continues in a new segment past
/// a gap; cutting that segment away leaves the old one and the snapshot's index.
#[test]
fn cut_back_to_the_snapshot_after_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=10, 10);
    drop(wal);
    let (mut wal, _) = open(dir, tiny(), 25).unwrap();
    write_range(&mut wal, 26..=40, 5);
    let firsts = first_indexes(dir);
    assert_eq!(firsts[..2], [1, 26]);

    wal.truncate_from(26).unwrap();
    assert_eq!((wal.last_index(), wal.synced_index()), (25, 25));
    assert_eq!(first_indexes(dir), [1]);
    drop(wal);
    let (mut wal, seen) = open(dir, tiny(), 25).unwrap();
    assert!(seen.is_empty());
    assert_eq!(wal.last_index(), 25);
    write_new(&mut wal, 26..=28, 2);
    drop(wal);
    let (_, seen) = open(dir, tiny(), 25).unwrap();
    assert_eq!(
        seen,
        (26..=28).map(|i| (i, new_payload(i))).collect::<Replayed>()
    );
}

/// Truncate at every index of a many-segment log, append new records in its place,
/// reopen: exactly the old records before the cut, then the new ones.
#[test]
fn recovery_after_a_cut_and_a_reappend_at_every_index() {
    for opts in [tiny(), tiny_padded()] {
        let tmp = tempfile::tempdir().unwrap();
        let pristine = tmp.path().join("pristine");
        let (mut wal, _) = open(&pristine, opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=40, 3);
        drop(wal);
        assert!(segment_files(&pristine).len() >= 5);

        for cut in 1..=41 {
            let dir = tmp.path().join(format!("cut-{cut}"));
            copy_dir(&pristine, &dir);
            let (mut wal, _) = open(&dir, opts.clone(), 0).unwrap();
            wal.truncate_from(cut).unwrap();
            assert_eq!(wal.last_index(), cut - 1, "cut {cut}");
            assert_eq!(wal.synced_index(), cut - 1, "cut {cut}");
            write_new(&mut wal, cut..=45, 4);
            drop(wal);
            let written = contents(&dir);
            let (wal, seen) = open(&dir, opts.clone(), 0).unwrap();
            assert_eq!(seen, old_then_new(cut, 45), "{opts:?}, cut {cut}");
            assert_eq!(wal.last_index(), 45);
            // The cut and the reappend left nothing for recovery to cut or delete.
            assert_eq!(contents(&dir), written, "{opts:?}, cut {cut}");
            fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// Reproduces by hand every state a crash can leave between the steps of a truncation
/// (later segments deleted newest first, then the segment holding the cut is cut) and
/// opens each: always a valid prefix of the old log, never a hole or a corruption error,
/// and truncating again from there gives the same log as an uninterrupted truncation.
#[test]
fn a_crash_between_the_steps_leaves_a_valid_log() {
    for opts in [tiny(), tiny_padded()] {
        let tmp = tempfile::tempdir().unwrap();
        let pristine = tmp.path().join("pristine");
        let (mut wal, _) = open(&pristine, opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=40, 3);
        drop(wal);
        let files = segment_files(&pristine);
        let firsts = first_indexes(&pristine);
        assert!(files.len() >= 5);
        // Cut inside the second segment: three or more later segments to delete first.
        let cut = firsts[1] + 1;
        assert!(cut < firsts[2]);
        let cut_offset = walk(&files[1]).0[1];

        // State n: the n newest segments deleted; the last state also has the cut made.
        let deletions = files.len() - 2;
        for n in 0..=deletions + 1 {
            let dir = tmp.path().join(format!("state-{n}"));
            copy_dir(&pristine, &dir);
            let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap()).collect();
            for name in names.iter().rev().take(n.min(deletions)) {
                fs::remove_file(dir.join(name)).unwrap();
            }
            if n > deletions {
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join(names[1]))
                    .unwrap();
                f.set_len(cut_offset).unwrap();
            }
            let survivors = segment_files(&dir);

            let (mut wal, seen) = open(&dir, opts.clone(), 0).unwrap_or_else(|e| {
                panic!("{opts:?}, state {n}: {e}");
            });
            let last = match n {
                0 => 40,
                n if n > deletions => cut - 1,
                n => firsts[files.len() - n] - 1,
            };
            assert_eq!(seen, expected(1..=last), "{opts:?}, state {n}");
            assert_eq!(wal.last_index(), last);
            // Recovery found nothing to cut away or delete.
            assert_eq!(segment_files(&dir), survivors, "state {n}");

            wal.truncate_from(cut).unwrap();
            write_new(&mut wal, cut..=44, 4);
            drop(wal);
            let (_, seen) = open(&dir, opts.clone(), 0).unwrap();
            assert_eq!(seen, old_then_new(cut, 44), "{opts:?}, state {n}");
            fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// Why the order matters: the segment holding the cut, cut while a later segment still
/// exists, is a hole that recovery must report as corruption.
#[test]
fn cutting_before_deleting_the_later_segments_would_be_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=40, 3);
    drop(wal);
    let files = segment_files(dir);
    let (offsets, _) = walk(&files[1]);
    let f = fs::OpenOptions::new().write(true).open(&files[1]).unwrap();
    f.set_len(offsets[1]).unwrap();
    let err = open(dir, tiny(), 0).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[test]
fn a_poisoned_log_refuses_to_truncate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (mut wal, _) = open(&dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=20, 20);
    fs::remove_dir_all(&dir).unwrap();
    wal.append(21, b"lost").unwrap();
    wal.sync().unwrap_err();
    let err = wal.truncate_from(5).unwrap_err();
    assert!(matches!(err, StoreError::Poisoned { .. }), "{err}");
}

/// A segment that changed underneath the log (here: its records swapped for others) is
/// reported, not cut at a guessed offset, and the log (buffer included) is left as it was.
#[test]
fn a_segment_changed_underneath_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_padded(), 0).unwrap();
    write_range(&mut wal, 1..=10, 10);
    let seg = segment_files(dir)[0].clone();
    let mut bytes = super::format::encode_header(1).to_vec();
    super::format::encode_record(&mut bytes, 1, b"one");
    super::format::encode_record(&mut bytes, 7, b"seven");
    fs::write(&seg, &bytes).unwrap();
    wal.append(11, b"buffered").unwrap();
    let err = wal.truncate_from(5).unwrap_err();
    let StoreError::Corrupt { file, .. } = &err else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!(file, &seg);
    assert_eq!(fs::read(&seg).unwrap(), bytes);
    // The buffered record is still there, and the log still takes appends.
    assert_eq!((wal.last_index(), wal.synced_index()), (11, 10));
    wal.sync().unwrap();
    assert_eq!(wal.synced_index(), 11);
    wal.append(12, b"x").unwrap();
}

#[test]
fn restart_after_a_newer_snapshot_continues_the_log_after_it() {
    for opts in [tiny(), tiny_padded(), one_padded()] {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=12, 4);
        assert!(
            wal.restart_after(11).is_err(),
            "below the last record: purge instead"
        );
        wal.restart_after(40).unwrap();
        assert!(segment_files(dir.path()).is_empty(), "every segment gone");
        assert_eq!((wal.last_index(), wal.synced_index()), (40, 40));
        write_new(&mut wal, 41..=45, 2);
        drop(wal);
        let (wal, seen) = open(dir.path(), opts, 40).unwrap();
        assert_eq!(
            seen,
            (41..=45).map(|i| (i, new_payload(i))).collect::<Replayed>()
        );
        assert_eq!(wal.last_index(), 45);
    }
}

#[test]
fn a_crash_during_restart_after_leaves_a_log_that_opens_after_the_snapshot() {
    for opts in [tiny(), tiny_padded(), one_padded()] {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), opts.clone(), 0).unwrap();
        write_range(&mut wal, 1..=12, 4);
        drop(wal);
        // The newest segment deleted, any older ones not yet: what a crash between the
        // deletions leaves (with one segment: the crash came before the first). Opened
        // after the snapshot, it is an empty log ending there, and appends continue.
        let files = segment_files(dir.path());
        if files.len() > 1 {
            fs::remove_file(files.last().unwrap()).unwrap();
        }
        let (mut wal, seen) = open(dir.path(), opts.clone(), 40).unwrap();
        assert!(seen.is_empty());
        assert_eq!(wal.last_index(), 40);
        write_new(&mut wal, 41..=43, 1);
        drop(wal);
        let (_, seen) = open(dir.path(), opts, 40).unwrap();
        assert_eq!(
            seen,
            (41..=43).map(|i| (i, new_payload(i))).collect::<Replayed>()
        );
    }
}
