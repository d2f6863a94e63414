//! Meta files: round trips across reopen, the documented layout, damage of every kind
//! reported (never read as "nothing stored"), and the temp file a crash leaves.

use std::fs;
use std::path::Path;

use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Asserts that loading `dir/name` fails with `Corrupt` at `offset`, naming the file.
fn expect_corrupt(dir: &Path, name: &str, offset: u64) -> String {
    let err = MetaFile::open(dir, name).unwrap().load().unwrap_err();
    let StoreError::Corrupt {
        file, offset: o, ..
    } = &err
    else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!(
        (file.as_path(), *o),
        (dir.join(name).as_path(), offset),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains(name), "{msg}");
    msg
}

#[test]
fn round_trip_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("raft");
    let mut vote = MetaFile::open(&dir, "vote").unwrap();
    assert!(dir.is_dir());
    assert_eq!(vote.load().unwrap(), None, "nothing stored yet");
    assert_eq!(vote.path(), dir.join("vote"));

    vote.store(b"term 3, voted for 2").unwrap();
    assert_eq!(vote.load().unwrap(), Some(b"term 3, voted for 2".to_vec()));
    drop(vote);
    let mut vote = MetaFile::open(&dir, "vote").unwrap();
    assert_eq!(vote.load().unwrap(), Some(b"term 3, voted for 2".to_vec()));

    // Replaced, shorter and then empty: each store replaces the whole payload.
    vote.store(b"term 4").unwrap();
    drop(vote);
    let mut vote = MetaFile::open(&dir, "vote").unwrap();
    assert_eq!(vote.load().unwrap(), Some(b"term 4".to_vec()));
    vote.store(b"").unwrap();
    drop(vote);
    assert_eq!(
        MetaFile::open(&dir, "vote").unwrap().load().unwrap(),
        Some(Vec::new())
    );
    // Only the file itself is left: no temp file.
    assert_eq!(names(&dir), ["vote"]);
}

#[test]
fn two_files_in_one_directory_are_independent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut vote = MetaFile::open(dir, "vote").unwrap();
    let mut committed = MetaFile::open(dir, "committed").unwrap();
    vote.store(b"v").unwrap();
    committed.store(b"c1").unwrap();
    committed.store(b"c2").unwrap();
    drop((vote, committed));
    assert_eq!(
        MetaFile::open(dir, "vote").unwrap().load().unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(
        MetaFile::open(dir, "committed").unwrap().load().unwrap(),
        Some(b"c2".to_vec())
    );
    assert_eq!(names(dir), ["committed", "vote"]);
}

#[test]
fn layout_is_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let mut meta = MetaFile::open(tmp.path(), "vote").unwrap();
    meta.store(b"xyz").unwrap();
    let data = fs::read(meta.path()).unwrap();
    assert_eq!(data.len(), 20 + 3);
    assert_eq!(&data[0..8], b"ZLOCKMET");
    assert_eq!(&data[8..12], &1u32.to_le_bytes());
    assert_eq!(&data[12..16], &3u32.to_le_bytes());
    assert_eq!(&data[16..19], b"xyz");
    assert_eq!(&data[19..23], &crc32c::crc32c(&data[0..19]).to_le_bytes());
}

/// A file cut at any length, even to nothing, is corruption: never "no vote".
#[test]
fn a_torn_file_is_corruption_at_every_length() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut meta = MetaFile::open(dir, "vote").unwrap();
    meta.store(b"term 7, voted for 1").unwrap();
    let whole = fs::read(meta.path()).unwrap();
    for cut in 0..whole.len() {
        fs::write(meta.path(), &whole[..cut]).unwrap();
        let offset = if cut < HEADER_LEN + TRAILER_LEN {
            0
        } else {
            LENGTH_OFFSET
        };
        let msg = expect_corrupt(dir, "vote", offset);
        assert!(msg.contains("cut short"), "cut at {cut}: {msg}");
    }
    // Bytes after the CRC are damage too.
    let mut longer = whole.clone();
    longer.push(0);
    fs::write(meta.path(), &longer).unwrap();
    expect_corrupt(dir, "vote", LENGTH_OFFSET);
}

/// Any single flipped byte is reported: as corruption, or, in the version field, as an
/// unsupported version. None of them loads.
#[test]
fn a_flipped_byte_anywhere_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut meta = MetaFile::open(dir, "vote").unwrap();
    meta.store(b"term 7, voted for 1").unwrap();
    let whole = fs::read(meta.path()).unwrap();
    for at in 0..whole.len() {
        let mut damaged = whole.clone();
        damaged[at] ^= 0x40;
        fs::write(meta.path(), &damaged).unwrap();
        let err = meta.load().unwrap_err();
        match (at, &err) {
            (8..=11, StoreError::UnsupportedVersion { .. }) => {}
            (0..=7, StoreError::Corrupt { offset: 0, .. })
            | (12..=15, StoreError::Corrupt { offset: 12, .. }) => {}
            (16.., StoreError::Corrupt { offset, .. }) => {
                assert_eq!(*offset, whole.len() as u64 - 4, "byte {at}: {err}")
            }
            _ => panic!("byte {at}: {err}"),
        }
        assert!(err.to_string().contains("vote"), "{err}");
    }
}

#[test]
fn an_unknown_version_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut data = encode(b"from the future");
    data[8..12].copy_from_slice(&2u32.to_le_bytes());
    fs::write(dir.join("vote"), &data).unwrap();
    let err = MetaFile::open(dir, "vote").unwrap().load().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::UnsupportedVersion {
                version: 2,
                supported: 1,
                offset: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("vote"), "{err}");
}

/// A crash during a store leaves `<name>.tmp`, complete or not, next to the old file
/// (or none): it is ignored, the old payload (or none) loads, and open deletes it.
#[test]
fn a_leftover_temp_file_is_ignored_and_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let torn = encode(b"term 9")[..10].to_vec();

    // No file stored yet: the interrupted first store leaves nothing stored.
    fs::write(dir.join("vote.tmp"), &torn).unwrap();
    let mut meta = MetaFile::open(dir, "vote").unwrap();
    assert!(names(dir).is_empty(), "{:?}", names(dir));
    assert_eq!(meta.load().unwrap(), None);

    // A stored file and a complete temp file the rename never reached.
    meta.store(b"term 8").unwrap();
    drop(meta);
    fs::write(dir.join("vote.tmp"), encode(b"term 9")).unwrap();
    let meta = MetaFile::open(dir, "vote").unwrap();
    assert_eq!(names(dir), ["vote"]);
    assert_eq!(meta.load().unwrap(), Some(b"term 8".to_vec()));
}

#[test]
fn a_failed_store_keeps_the_old_payload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut meta = MetaFile::open(dir, "vote").unwrap();
    meta.store(b"term 8").unwrap();
    // A directory where the temp file must go: writing it fails.
    fs::create_dir(dir.join("vote.tmp")).unwrap();
    let err = meta.store(b"term 9").unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(err.to_string().contains("vote.tmp"), "{err}");
    assert_eq!(meta.load().unwrap(), Some(b"term 8".to_vec()));
}

#[test]
fn names_must_be_plain_file_names() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["", ".", "..", "raft/vote", "/vote"] {
        let err = MetaFile::open(tmp.path(), name).unwrap_err();
        let StoreError::Io { source, .. } = &err else {
            panic!("{name:?}: expected Io, got {err}");
        };
        assert_eq!(source.kind(), io::ErrorKind::InvalidInput, "{name:?}");
    }
}
