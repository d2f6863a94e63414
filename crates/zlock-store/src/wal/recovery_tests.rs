//! Recovery from damage: torn tails are cut, corruption stops the open with the file and
//! offset in the message.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use super::format::{encode_header, encode_record, HEADER_LEN, RECORD_HEADER_LEN};
use super::tests::{expected, no_prealloc, open, payload, segment_files, tiny, write_range};
use super::*;

pub(super) fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

pub(super) fn flip_byte(path: &Path, offset: u64) {
    let mut data = fs::read(path).unwrap();
    data[offset as usize] ^= 0x40;
    fs::write(path, data).unwrap();
}

pub(super) fn append_bytes(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// Offset of the last record of an intact segment, found by walking the lengths.
fn last_record_offset(data: &[u8]) -> u64 {
    let mut off = HEADER_LEN;
    loop {
        let n = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        let end = off + RECORD_HEADER_LEN + n;
        if end == data.len() {
            return off as u64;
        }
        off = end;
    }
}

pub(super) fn expect_corrupt(dir: &Path, after: u64, file: &Path, offset: u64) -> String {
    let err = open(dir, WalOptions::default(), after).unwrap_err();
    let StoreError::Corrupt {
        file: f, offset: o, ..
    } = &err
    else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!((f.as_path(), *o), (file, offset), "{err}");
    let msg = err.to_string();
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(msg.contains(name), "{msg}");
    assert!(msg.contains(&format!("offset {offset}")), "{msg}");
    msg
}

/// Cutting the last record anywhere loses exactly that record; appending then continues
/// with its index and survives another reopen.
#[test]
fn torn_last_record_at_every_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (mut wal, _) = open(&dir, no_prealloc(), 0).unwrap();
    write_range(&mut wal, 1..=9, 4);
    let seg = segment_files(&dir)[0].clone();
    let before_last = file_len(&seg);
    write_range(&mut wal, 10..=10, 1);
    drop(wal);
    let whole = fs::read(&seg).unwrap();
    assert!(whole.len() as u64 > before_last + RECORD_HEADER_LEN as u64);

    for cut in before_last..whole.len() as u64 {
        fs::write(&seg, &whole[..cut as usize]).unwrap();
        let (mut wal, seen) = open(&dir, no_prealloc(), 0).unwrap();
        assert_eq!(seen, expected(1..=9), "cut at {cut}");
        assert_eq!(wal.last_index(), 9);
        assert_eq!(file_len(&seg), before_last, "torn bytes are truncated");
        wal.append(10, b"rewritten").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, seen) = open(&dir, no_prealloc(), 0).unwrap();
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[9], (10, b"rewritten".to_vec()), "cut at {cut}");
    }
}

/// A roll writes the new header and the batch together; cut anywhere in them, the new
/// segment is deleted (header torn) or left with just its header, and the log continues.
#[test]
fn torn_new_segment_at_every_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=12, 12);
    write_range(&mut wal, 13..=13, 1);
    drop(wal);
    let files = segment_files(dir);
    assert_eq!(files.len(), 2);
    let newest = files[1].clone();
    let whole = fs::read(&newest).unwrap();

    for cut in 0..whole.len() {
        fs::write(&newest, &whole[..cut]).unwrap();
        let (mut wal, seen) = open(dir, tiny(), 0).unwrap();
        assert_eq!(seen, expected(1..=12), "cut at {cut}");
        assert_eq!(wal.last_index(), 12);
        // A partial header is deleted; a whole one (a segment with only a header) stays.
        assert_eq!(newest.exists(), cut >= HEADER_LEN, "cut at {cut}");
        write_range(&mut wal, 13..=14, 2);
        drop(wal);
        let (_, seen) = open(dir, tiny(), 0).unwrap();
        assert_eq!(seen, expected(1..=14), "cut at {cut}");
    }
}

#[test]
fn zero_filled_and_garbage_tails_are_truncated() {
    for (name, tail) in [("zeros", vec![0u8; 4096]), ("garbage", vec![0xA5u8; 333])] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut wal, _) = open(dir, no_prealloc(), 0).unwrap();
        write_range(&mut wal, 1..=5, 2);
        drop(wal);
        let seg = segment_files(dir)[0].clone();
        let good_len = file_len(&seg);
        append_bytes(&seg, &tail);

        let (mut wal, seen) = open(dir, no_prealloc(), 0).unwrap();
        assert_eq!(seen, expected(1..=5), "{name}");
        assert_eq!(file_len(&seg), good_len, "{name}");
        write_range(&mut wal, 6..=6, 1);
        drop(wal);
        let (_, seen) = open(dir, no_prealloc(), 0).unwrap();
        assert_eq!(seen, expected(1..=6), "{name}");
    }
}

#[test]
fn zero_filled_last_segment_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=12, 12);
    write_range(&mut wal, 13..=13, 1);
    drop(wal);
    let newest = segment_files(dir)[1].clone();
    let len = file_len(&newest) as usize;
    fs::write(&newest, vec![0u8; len]).unwrap();
    let (wal, seen) = open(dir, tiny(), 0).unwrap();
    assert_eq!(seen, expected(1..=12));
    assert_eq!(wal.last_index(), 12);
    assert!(!newest.exists());
}

/// Any single flipped byte in a record that is followed by intact records is corruption,
/// reported at that record's offset, wherever in the record the byte is.
#[test]
fn corrupt_middle_record_stops_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, no_prealloc(), 0).unwrap();
    write_range(&mut wal, 1..=3, 10);
    let seg = segment_files(dir)[0].clone();
    let start = file_len(&seg);
    write_range(&mut wal, 4..=4, 1);
    let end = file_len(&seg);
    write_range(&mut wal, 5..=8, 2);
    drop(wal);
    let pristine = fs::read(&seg).unwrap();

    for offset in start..end {
        fs::write(&seg, &pristine).unwrap();
        flip_byte(&seg, offset);
        let msg = expect_corrupt(dir, 0, &seg, start);
        assert!(msg.contains("not a torn tail"), "{msg}");
    }
    // Corruption is reported even when the snapshot already covers the damaged record:
    // the file is damaged either way and an operator should know.
    fs::write(&seg, &pristine).unwrap();
    flip_byte(&seg, start + RECORD_HEADER_LEN as u64);
    expect_corrupt(dir, 6, &seg, start);
}

#[test]
fn damage_in_a_non_last_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=30, 3);
    drop(wal);
    let files = segment_files(dir);
    assert!(files.len() >= 3);
    // The last byte of the first segment: its last record, with nothing after it in that
    // file. That would be a torn tail in the last segment; here it is not.
    let first = &files[0];
    let first_pristine = fs::read(first).unwrap();
    let len = file_len(first);
    flip_byte(first, len - 1);
    let msg = expect_corrupt(dir, 0, first, {
        // The offset of that last record: walk the records.
        let data = fs::read(first).unwrap();
        let mut off = HEADER_LEN;
        loop {
            let n = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
            let end = off + RECORD_HEADER_LEN + n;
            if end == data.len() {
                break off as u64;
            }
            off = end;
        }
    });
    assert!(msg.contains("not the last"), "{msg}");

    // A cut-short non-last segment is corruption too.
    fs::write(first, &first_pristine).unwrap();
    let second = &files[1];
    let data = fs::read(second).unwrap();
    fs::write(second, &data[..data.len() - 3]).unwrap();
    let msg = expect_corrupt(dir, 0, second, last_record_offset(&data));
    assert!(msg.contains("not the last"), "{msg}");
}

#[test]
fn missing_segments_are_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, tiny(), 0).unwrap();
    write_range(&mut wal, 1..=40, 4);
    drop(wal);
    let files = segment_files(dir);
    assert!(files.len() >= 4);

    // A segment missing in the middle.
    let middle = files[1].clone();
    let saved = fs::read(&middle).unwrap();
    fs::remove_file(&middle).unwrap();
    let msg = expect_corrupt(dir, 0, &files[2], super::format::FIRST_INDEX_OFFSET);
    assert!(msg.contains("missing"), "{msg}");
    fs::write(&middle, saved).unwrap();

    // The oldest segments purged, and no snapshot to cover them.
    fs::remove_file(&files[0]).unwrap();
    let msg = expect_corrupt(dir, 0, &files[1], super::format::FIRST_INDEX_OFFSET);
    assert!(msg.contains("missing"), "{msg}");
}

/// Builds a segment by hand: `log.<first>` with the given record indexes.
fn handmade_segment(dir: &Path, first: u64, indexes: &[u64]) {
    let mut bytes = encode_header(first).to_vec();
    for &i in indexes {
        encode_record(&mut bytes, i, &payload(i));
    }
    fs::write(dir.join(crate::fsutil::indexed_name("log.", first)), bytes).unwrap();
}

#[test]
fn non_consecutive_indexes_are_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    handmade_segment(dir, 1, &[1, 2, 4, 5]);
    let offset = {
        let mut off = HEADER_LEN;
        for i in [1, 2] {
            off += RECORD_HEADER_LEN + payload(i).len();
        }
        off as u64
    };
    let file = dir.join("log.00000000000000000001");
    let msg = expect_corrupt(dir, 0, &file, offset);
    assert!(msg.contains("expected record index 3, found 4"), "{msg}");

    // Overlapping segments.
    fs::remove_file(&file).unwrap();
    handmade_segment(dir, 1, &[1, 2, 3]);
    handmade_segment(dir, 3, &[3, 4]);
    let second = dir.join("log.00000000000000000003");
    expect_corrupt(dir, 0, &second, super::format::FIRST_INDEX_OFFSET);

    // A name that disagrees with the header.
    fs::remove_file(&second).unwrap();
    fs::rename(&file, dir.join("log.00000000000000000002")).unwrap();
    expect_corrupt(
        dir,
        0,
        &dir.join("log.00000000000000000002"),
        super::format::FIRST_INDEX_OFFSET,
    );
}

#[test]
fn unknown_version_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut header = encode_header(1);
    header[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..20]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    fs::write(dir.join("log.00000000000000000001"), header).unwrap();
    let err = open(dir, WalOptions::default(), 0).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::UnsupportedVersion {
                version: 2,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("log.00000000000000000001"),
        "{err}"
    );
}

#[test]
fn replay_errors_name_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut wal, _) = open(dir, WalOptions::default(), 0).unwrap();
    write_range(&mut wal, 1..=5, 5);
    drop(wal);
    let err = Wal::open(dir, WalOptions::default(), 0, |i, _| {
        if i == 3 {
            Err(StoreError::rejected("txn does not decode"))
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    let StoreError::Replay { index, offset, .. } = &err else {
        panic!("expected Replay, got {err}");
    };
    assert_eq!(*index, 3);
    let expected_offset = HEADER_LEN + 2 * RECORD_HEADER_LEN + payload(1).len() + payload(2).len();
    assert_eq!(*offset, expected_offset as u64);
    let msg = err.to_string();
    assert!(msg.contains("log.00000000000000000001"), "{msg}");
    assert!(msg.contains("txn does not decode"), "{msg}");
}

#[test]
fn foreign_files_are_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::write(dir.join("log.1"), b"not ours").unwrap();
    fs::write(dir.join("README"), b"hello").unwrap();
    let (mut wal, seen) = open(dir, WalOptions::default(), 0).unwrap();
    assert!(seen.is_empty());
    write_range(&mut wal, 1..=2, 1);
    drop(wal);
    let (_, seen) = open(dir, WalOptions::default(), 0).unwrap();
    assert_eq!(seen, expected(1..=2));
}
