//! Preallocated segments: zeros after the last record are the end of the records, the
//! writer writes over them and grows the file in whole steps, a roll cuts them off, and
//! recovery still tells torn tails from corruption when zeros follow.

use std::fs;
use std::path::Path;

use super::format::{HEADER_LEN, RECORD_HEADER_LEN};
use super::recovery_tests::{append_bytes, expect_corrupt, file_len, flip_byte};
use super::tests::{expected, open, payload, segment_files, write_range};
use super::*;

/// The preallocation step of these tests: small, so that a few hundred records grow a
/// segment several times.
const STEP: u64 = 4096;

/// Segments of about 10 KB, grown 4 KiB at a time.
fn padded() -> WalOptions {
    WalOptions {
        segment_bytes: 10_000,
        preallocate_bytes: STEP,
    }
}

/// One segment that never rolls in these tests, grown 4 KiB at a time.
fn one_segment() -> WalOptions {
    WalOptions {
        segment_bytes: 1 << 30,
        preallocate_bytes: STEP,
    }
}

/// Walks the records of a segment file by their lengths, up to the end of the file or
/// to a header whose index is 0: (offset of each record, end of the records).
pub(super) fn walk(path: &Path) -> (Vec<u64>, u64) {
    let data = fs::read(path).unwrap();
    let mut offsets = Vec::new();
    let mut off = HEADER_LEN;
    while off + RECORD_HEADER_LEN <= data.len() && data[off + 8..off + 16] != [0; 8] {
        offsets.push(off as u64);
        let n = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        off += RECORD_HEADER_LEN + n;
    }
    (offsets, off as u64)
}

/// Asserts that `path` holds records and then only zeros, and returns the records' end.
fn assert_zeros_after_records(path: &Path) -> u64 {
    let (_, end) = walk(path);
    let data = fs::read(path).unwrap();
    assert!(
        data[end as usize..].iter().all(|&b| b == 0),
        "{}: non-zero bytes after the records end at {end}",
        path.display()
    );
    end
}

#[test]
fn records_survive_reopen_over_growth_and_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, padded(), 0).unwrap();
    write_range(&mut wal, 1..=1000, 7);
    drop(wal);

    let files = segment_files(dir);
    assert!(files.len() >= 3, "segments must roll: {files:?}");
    // A rolled segment was grown past one step several times, then cut to its records.
    for f in &files[..files.len() - 1] {
        assert!(file_len(f) > 2 * STEP, "{}", f.display());
        assert_eq!(walk(f).1, file_len(f), "zeros left in {}", f.display());
    }
    // The active one is grown in whole steps from 0 and ends in zeros.
    let last = files.last().unwrap();
    assert_eq!(file_len(last) % STEP, 0);
    assert!(assert_zeros_after_records(last) < file_len(last));
    let sizes: Vec<u64> = files.iter().map(|f| file_len(f)).collect();

    let (mut wal, seen) = open(dir, padded(), 0).unwrap();
    assert_eq!(seen, expected(1..=1000));
    assert_eq!(wal.last_index(), 1000);
    // Open neither cut the zeros (they are not a torn tail) nor touched anything else.
    let after_open: Vec<u64> = files.iter().map(|f| file_len(f)).collect();
    assert_eq!(after_open, sizes);

    // A snapshot inside the second segment: replay starts in a rolled segment.
    let in_first = walk(&files[0]).0.len() as u64;
    let (_, seen) = open(dir, padded(), in_first + 3).unwrap();
    assert_eq!(seen, expected(in_first + 4..=1000));

    write_range(&mut wal, 1001..=1100, 3);
    drop(wal);
    let (wal, seen) = open(dir, padded(), 0).unwrap();
    assert_eq!(seen, expected(1..=1100));
    assert_eq!(wal.last_index(), 1100);
}

/// Write, reopen, write more, reopen: every record in order and nothing after them. If
/// the writer appended after the zeros instead of writing over them, the file would grow
/// past one step and recovery would find zeros followed by a record (corruption).
#[test]
fn reopen_writes_over_the_zeros_not_after_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    write_range(&mut wal, 1..=5, 2);
    drop(wal);
    let seg = segment_files(dir)[0].clone();
    assert_eq!(file_len(&seg), STEP);
    let first_end = assert_zeros_after_records(&seg);

    for (round, range) in [6..=9, 10..=10, 11..=20].into_iter().enumerate() {
        let (mut wal, seen) = open(dir, one_segment(), 0).unwrap();
        assert_eq!(seen, expected(1..=*range.start() - 1), "round {round}");
        write_range(&mut wal, range.clone(), 3);
        drop(wal);
        assert_eq!(file_len(&seg), STEP, "round {round}: wrote after the zeros");
        let (offsets, _) = walk(&seg);
        assert_eq!(offsets.len() as u64, *range.end(), "round {round}");
    }
    assert!(assert_zeros_after_records(&seg) > first_end);

    // Past the zeros: the file grows by whole steps, and reopening still finds it all.
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    write_range(&mut wal, 21..=300, 9);
    drop(wal);
    assert!(file_len(&seg) > STEP);
    assert_eq!(file_len(&seg) % STEP, 0);
    assert_zeros_after_records(&seg);
    let (wal, seen) = open(dir, one_segment(), 0).unwrap();
    assert_eq!(seen, expected(1..=300));
    assert_eq!(wal.last_index(), 300);
    assert_eq!(segment_files(dir).len(), 1);
}

/// A batch that a crash tore while writing it over the zeros leaves part of a record and
/// then zeros: a torn tail, cut as without preallocation. The next sync grows the file
/// again from the cut.
#[test]
fn torn_record_followed_by_zeros_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    write_range(&mut wal, 1..=9, 4);
    write_range(&mut wal, 10..=10, 1);
    drop(wal);
    let seg = segment_files(dir)[0].clone();
    let (offsets, end) = walk(&seg);
    let start = offsets[9];
    let whole = fs::read(&seg).unwrap();

    for cut in start + 1..end {
        let mut torn = whole.clone();
        torn[cut as usize..end as usize].fill(0);
        fs::write(&seg, &torn).unwrap();
        let (mut wal, seen) = open(dir, one_segment(), 0).unwrap();
        assert_eq!(seen, expected(1..=9), "cut at {cut}");
        assert_eq!(wal.last_index(), 9);
        assert_eq!(
            file_len(&seg),
            start,
            "cut at {cut}: torn bytes are truncated"
        );
        wal.append(10, b"rewritten").unwrap();
        wal.sync().unwrap();
        drop(wal);
        assert_eq!(file_len(&seg), start + STEP, "cut at {cut}: grown again");
        let (_, seen) = open(dir, one_segment(), 0).unwrap();
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[9], (10, b"rewritten".to_vec()), "cut at {cut}");
    }

    // Record 10 entirely zero is no damage at all: the records end before it.
    let mut lost = whole.clone();
    lost[start as usize..end as usize].fill(0);
    fs::write(&seg, &lost).unwrap();
    let (wal, seen) = open(dir, one_segment(), 0).unwrap();
    assert_eq!(seen, expected(1..=9));
    assert_eq!(wal.last_index(), 9);
    assert_eq!(file_len(&seg), whole.len() as u64, "the zeros are kept");
}

/// Damage followed by an intact record is corruption, zeros after them or not, and
/// zeros where a record should be are damage too when a record follows.
#[test]
fn damage_before_an_intact_record_is_still_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    write_range(&mut wal, 1..=3, 3);
    write_range(&mut wal, 4..=4, 1);
    write_range(&mut wal, 5..=8, 2);
    drop(wal);
    let seg = segment_files(dir)[0].clone();
    let (offsets, _) = walk(&seg);
    let (start, next) = (offsets[3], offsets[4]);
    let pristine = fs::read(&seg).unwrap();

    flip_byte(&seg, start + RECORD_HEADER_LEN as u64);
    let msg = expect_corrupt(dir, 0, &seg, start);
    assert!(msg.contains("not a torn tail"), "{msg}");

    let mut zeroed = pristine.clone();
    zeroed[start as usize..next as usize].fill(0);
    fs::write(&seg, &zeroed).unwrap();
    let msg = expect_corrupt(dir, 0, &seg, start);
    assert!(msg.contains("not a torn tail"), "{msg}");
}

/// A roll cuts the old segment to its records, so zeros after the records of a segment
/// that is not the last are damage, as before preallocation.
#[test]
fn zeros_after_a_rolled_segment_are_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, padded(), 0).unwrap();
    write_range(&mut wal, 1..=600, 5);
    drop(wal);
    let files = segment_files(dir);
    assert!(files.len() >= 2);
    let end = file_len(&files[0]);
    append_bytes(&files[0], &[0; STEP as usize]);
    let msg = expect_corrupt(dir, 0, &files[0], end);
    assert!(msg.contains("not the last"), "{msg}");
}

/// A roll writes the new header and the first batch over a file grown to one step;
/// a crash may leave any prefix of them followed by zeros. A torn header deletes the
/// segment, anything else keeps it (cut to its header), and the log goes on.
#[test]
fn torn_new_segment_followed_by_zeros() {
    let opts = WalOptions {
        segment_bytes: 100,
        preallocate_bytes: STEP,
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, opts.clone(), 0).unwrap();
    write_range(&mut wal, 1..=12, 12);
    write_range(&mut wal, 13..=13, 1);
    drop(wal);
    let files = segment_files(dir);
    assert_eq!(files.len(), 2);
    let newest = files[1].clone();
    let whole = fs::read(&newest).unwrap();
    assert_eq!(whole.len() as u64, STEP);
    let (_, end) = walk(&newest);

    for cut in 0..end as usize {
        let mut torn = whole.clone();
        torn[cut..].fill(0);
        fs::write(&newest, &torn).unwrap();
        let (mut wal, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, expected(1..=12), "cut at {cut}");
        assert_eq!(wal.last_index(), 12);
        assert_eq!(newest.exists(), cut >= HEADER_LEN, "cut at {cut}");
        write_range(&mut wal, 13..=14, 2);
        drop(wal);
        let (_, seen) = open(dir, opts.clone(), 0).unwrap();
        assert_eq!(seen, expected(1..=14), "cut at {cut}");
    }
}

/// Preallocation can be turned off and on between runs: off, open cuts the zeros and
/// writes append; on again, the next sync grows the file by one step.
#[test]
fn preallocation_can_be_switched_off_and_on() {
    let off = WalOptions {
        preallocate_bytes: 0,
        ..one_segment()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    write_range(&mut wal, 1..=10, 4);
    drop(wal);
    let seg = segment_files(dir)[0].clone();
    assert_eq!(file_len(&seg), STEP);

    let (mut wal, seen) = open(dir, off.clone(), 0).unwrap();
    assert_eq!(seen, expected(1..=10));
    assert_eq!(file_len(&seg), walk(&seg).1, "zeros cut at open");
    write_range(&mut wal, 11..=20, 4);
    drop(wal);
    let records_end = walk(&seg).1;
    assert_eq!(file_len(&seg), records_end);

    let (mut wal, seen) = open(dir, one_segment(), 0).unwrap();
    assert_eq!(seen, expected(1..=20));
    assert_eq!(file_len(&seg), records_end);
    wal.append(21, &payload(21)).unwrap();
    wal.sync().unwrap();
    drop(wal);
    assert_eq!(file_len(&seg), records_end + STEP);
    assert_zeros_after_records(&seg);
    let (_, seen) = open(dir, off, 0).unwrap();
    assert_eq!(seen, expected(1..=21));
}

/// A record whose payload ends in zeros (a Txn often does: an int field 0 last), an
/// all-zero payload and an empty one, each the last record before the preallocated
/// zeros: the clean end is after them, not inside them.
#[test]
fn payloads_ending_in_zeros_are_not_mistaken_for_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let payloads: Vec<Vec<u8>> = vec![
        b"ends in zeros\0\0\0\0".to_vec(),
        vec![0; 40],
        Vec::new(),
        vec![0; 3],
    ];
    let (mut wal, _) = open(dir, one_segment(), 0).unwrap();
    for (i, p) in payloads.iter().enumerate() {
        wal.append(i as u64 + 1, p).unwrap();
        wal.sync().unwrap();
        drop(wal);
        // Reopen after each one: it is the last record before the zeros every time.
        let (w, seen) = open(dir, one_segment(), 0).unwrap();
        let want: Vec<(u64, Vec<u8>)> = payloads[..=i]
            .iter()
            .enumerate()
            .map(|(j, p)| (j as u64 + 1, p.clone()))
            .collect();
        assert_eq!(seen, want, "after record {}", i + 1);
        assert_eq!(w.last_index(), i as u64 + 1);
        wal = w;
    }
}
