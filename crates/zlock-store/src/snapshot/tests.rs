use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn snap_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(indexed_name(PREFIX, index))
}

fn flip_byte(path: &Path, offset: u64) {
    let mut data = fs::read(path).unwrap();
    data[offset as usize] ^= 0x01;
    fs::write(path, data).unwrap();
}

fn read_all(dir: &Path) -> Option<(u64, Vec<u8>)> {
    let mut reader = open_latest(dir).unwrap()?;
    let mut payload = Vec::new();
    reader.read_to_end(&mut payload).unwrap();
    assert_eq!(payload.len() as u64, reader.payload_len());
    Some((reader.index(), payload))
}

#[test]
fn write_then_load() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snapshots");
    assert_eq!(load_latest(&dir).unwrap(), None, "missing dir");
    assert!(open_latest(&dir).unwrap().is_none());

    let path = write(&dir, 7, b"state at 7", 3).unwrap();
    assert_eq!(path, snap_path(&dir, 7));
    assert_eq!(fs::metadata(&path).unwrap().len(), 36 + 10);
    assert_eq!(
        load_latest(&dir).unwrap(),
        Some((7, b"state at 7".to_vec()))
    );

    write(&dir, 12, b"", 3).unwrap();
    assert_eq!(load_latest(&dir).unwrap(), Some((12, Vec::new())));
    assert_eq!(read_all(&dir), Some((12, Vec::new())));
    assert_eq!(
        list(&dir).unwrap().iter().map(|s| s.0).collect::<Vec<_>>(),
        [7, 12]
    );

    // Same index again replaces the snapshot.
    write(&dir, 12, b"again", 3).unwrap();
    assert_eq!(load_latest(&dir).unwrap(), Some((12, b"again".to_vec())));
}

#[test]
fn header_layout_is_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), 0x0102, b"xyz", 1).unwrap();
    let data = fs::read(path).unwrap();
    assert_eq!(&data[0..8], b"ZLOCKSNP");
    assert_eq!(&data[8..12], &1u32.to_le_bytes());
    assert_eq!(&data[12..20], &0x0102u64.to_le_bytes());
    assert_eq!(&data[20..28], &3u64.to_le_bytes());
    assert_eq!(&data[28..32], &crc32c::crc32c(&data[0..28]).to_le_bytes());
    assert_eq!(&data[32..35], b"xyz");
    assert_eq!(&data[35..39], &crc32c::crc32c(b"xyz").to_le_bytes());
    assert_eq!(data.len(), 39);
}

#[test]
fn streaming_write_and_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // ~3 MB in many small writes, spanning several buffer and read chunks.
    let chunk: Vec<u8> = (0..=250u8).collect();
    let path = write_with(dir, 99, 2, |w| {
        for _ in 0..12_000 {
            w.write_all(&chunk)?;
        }
        Ok(())
    })
    .unwrap();
    let expected: Vec<u8> = chunk.repeat(12_000);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        36 + expected.len() as u64
    );

    let mut reader = open_latest(dir).unwrap().unwrap();
    assert_eq!(reader.index(), 99);
    assert_eq!(reader.path(), path.as_path());
    assert_eq!(reader.payload_len(), expected.len() as u64);
    let mut got = Vec::new();
    // Odd-sized reads.
    let mut buf = [0u8; 777];
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == expected);
    assert_eq!(load_latest(dir).unwrap(), Some((99, expected)));
}

#[test]
fn failed_fill_leaves_no_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, 1, b"old", 2).unwrap();
    let err = write_with(dir, 2, 2, |w| {
        w.write_all(b"partial")?;
        Err(io::Error::other("serializer failed"))
    })
    .unwrap_err();
    assert!(err.to_string().contains("serializer failed"), "{err}");
    assert_eq!(names(dir), [indexed_name(PREFIX, 1)]);
    assert_eq!(load_latest(dir).unwrap(), Some((1, b"old".to_vec())));
}

#[test]
fn keep_limit_is_honored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for i in 1..=5 {
        write(dir, i * 10, format!("s{i}").as_bytes(), 2).unwrap();
    }
    assert_eq!(
        names(dir),
        [indexed_name(PREFIX, 40), indexed_name(PREFIX, 50)]
    );
    // keep 0 still keeps the snapshot just written.
    write(dir, 60, b"s6", 0).unwrap();
    assert_eq!(names(dir), [indexed_name(PREFIX, 60)]);
    // An older index written late is kept too, beside the newest `keep`.
    write(dir, 70, b"s7", 1).unwrap();
    write(dir, 65, b"late", 1).unwrap();
    assert_eq!(
        names(dir),
        [indexed_name(PREFIX, 65), indexed_name(PREFIX, 70)]
    );
}

#[test]
fn damaged_newest_falls_back_to_older() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, 1, b"one", 5).unwrap();
    write(dir, 2, b"two", 5).unwrap();
    let newest = write(dir, 3, b"three", 5).unwrap();
    let pristine = fs::read(&newest).unwrap();

    // Every single flipped byte (header, payload, trailer) is caught.
    for offset in 0..pristine.len() as u64 {
        fs::write(&newest, &pristine).unwrap();
        flip_byte(&newest, offset);
        assert_eq!(
            load_latest(dir).unwrap(),
            Some((2, b"two".to_vec())),
            "flip at {offset}"
        );
        assert_eq!(
            read_all(dir),
            Some((2, b"two".to_vec())),
            "flip at {offset}"
        );
    }
    // Cut short anywhere, or grown.
    for cut in 0..pristine.len() {
        fs::write(&newest, &pristine[..cut]).unwrap();
        assert_eq!(
            load_latest(dir).unwrap().map(|s| s.0),
            Some(2),
            "cut at {cut}"
        );
        assert_eq!(read_all(dir).map(|s| s.0), Some(2), "cut at {cut}");
    }
    fs::write(&newest, [&pristine[..], b"extra"].concat()).unwrap();
    assert_eq!(load_latest(dir).unwrap().map(|s| s.0), Some(2));

    // A file renamed to another index does not pass for it.
    fs::remove_file(&newest).unwrap();
    fs::copy(snap_path(dir, 1), snap_path(dir, 9)).unwrap();
    assert_eq!(load_latest(dir).unwrap(), Some((2, b"two".to_vec())));

    // Nothing valid at all.
    for (_, path) in list(dir).unwrap() {
        fs::write(path, b"junk").unwrap();
    }
    assert_eq!(load_latest(dir).unwrap(), None);
    assert!(open_latest(dir).unwrap().is_none());
}

#[test]
fn unknown_version_is_an_error_not_a_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, 1, b"one", 5).unwrap();
    let newest = write(dir, 2, b"two", 5).unwrap();
    let mut data = fs::read(&newest).unwrap();
    data[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&data[0..28]);
    data[28..32].copy_from_slice(&crc.to_le_bytes());
    fs::write(&newest, data).unwrap();
    let err = load_latest(dir).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedVersion { version: 2, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("snapshot.00000000000000000002"),
        "{err}"
    );
    assert!(open_latest(dir).is_err());
}

#[test]
fn temp_file_from_a_crash_is_ignored_then_cleaned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, 5, b"five", 2).unwrap();
    let temp = dir.join(format!("{}{TEMP_SUFFIX}", indexed_name(PREFIX, 8)));
    fs::write(&temp, b"half a snapshot").unwrap();
    assert_eq!(load_latest(dir).unwrap(), Some((5, b"five".to_vec())));
    assert_eq!(read_all(dir), Some((5, b"five".to_vec())));
    assert!(temp.exists(), "readers do not delete");

    write(dir, 9, b"nine", 2).unwrap();
    assert!(!temp.exists());
    assert_eq!(
        names(dir),
        [indexed_name(PREFIX, 5), indexed_name(PREFIX, 9)]
    );
}

#[test]
fn reader_detects_a_change_after_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = write(dir, 4, &[7u8; 5000], 1).unwrap();
    let mut reader = open_latest(dir).unwrap().unwrap();
    // Damage the payload in place after the validation pass.
    let mut f = OpenOptions::new().write(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(HEADER_LEN as u64 + 4000)).unwrap();
    f.write_all(&[8]).unwrap();
    drop(f);
    let mut sink = Vec::new();
    let err = reader.read_to_end(&mut sink).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(
        err.to_string().contains("snapshot.00000000000000000004"),
        "{err}"
    );
}

#[test]
fn corrupt_error_names_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), 3, b"abc", 1).unwrap();
    flip_byte(&path, 33);
    let data = fs::read(&path).unwrap();
    let err = read::check_header(&path, 3, &data, data.len() as u64)
        .and_then(|len| {
            let payload = &data[HEADER_LEN..HEADER_LEN + len as usize];
            let stored = crate::le::u32_at(&data[HEADER_LEN + len as usize..]);
            read::check_payload_crc(&path, len, crc32c::crc32c(payload), stored)
        })
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("snapshot.00000000000000000003"), "{msg}");
    assert!(msg.contains("offset 35"), "{msg}");
}
