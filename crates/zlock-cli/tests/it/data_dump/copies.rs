//! The dumps on files derived from a real server's: one snapshot file by itself, a
//! backup of the same state, and copies of the log with a torn tail or a flipped byte.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{fingerprint, snapshot_json, zlock};
use crate::common::Scratch;

/// The snapshot file given by itself dumps as the directory did; a backup file of the
/// same state (written by the backup writer the admin server uses) holds the same
/// znodes and says where it comes from.
pub(super) async fn one_file_and_a_backup(dir: &Scratch, doc: &Value) {
    let file = PathBuf::from(doc["file"].as_str().unwrap());
    assert_eq!(&snapshot_json(&file).await, doc);

    let bytes = std::fs::read(&file).unwrap();
    let (index, payload) = zlock_store::snapshot::check_file(&file, &bytes).unwrap();
    let mut state = zlock_core::snapshot::decode(payload, zlock_core::Config::default()).unwrap();
    state.applied = zlock_core::LogIndex(index);
    let image = zlock_core::snapshot::Image::of(&state);
    let (_, backup) = zlock_server::backup::to_vec(&image, "standalone (test)");
    let backup_file = dir.path().join("backup.zlock");
    std::fs::write(&backup_file, backup).unwrap();
    let b = snapshot_json(&backup_file).await;
    assert_eq!(b["format"], "backup (zlock snapshot save)");
    assert_eq!(b["backup"]["source"], "standalone (test)");
    for field in ["index", "last_zxid", "znodes", "sessions", "locks"] {
        assert_eq!(b[field], doc[field], "{field}");
    }
}

/// On copies of the log: a torn last record is reported (exit 0, every whole record
/// shown); a flipped byte in an earlier record is an error naming file and offset.
pub(super) async fn damaged_copies(dir: &Scratch, data: &Path, records: &[Value]) {
    let last = records.last().unwrap();
    let seg = PathBuf::from(last["file"].as_str().unwrap());
    let name = seg.file_name().unwrap().to_owned();
    let torn = dir.path().join("torn");
    zlock_testkit::copy_dir(&data.join("wal"), &torn);
    let cut_at = last["offset"].as_u64().unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(torn.join(&name))
        .unwrap();
    f.set_len(cut_at + 10).unwrap();
    drop(f);
    let before = fingerprint(&torn);
    let out = zlock(&["data", "dump-log", torn.to_str().unwrap(), "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        records.len(),
        "every whole record, then the end"
    );
    let end = lines.last().unwrap();
    assert_eq!(
        (&end["end"], &end["offset"]),
        (&"torn".into(), &cut_at.into())
    );
    let torn_file = torn.join(&name);
    let notice = format!(
        "torn record at {} offset {cut_at}: the log ends here",
        torn_file.display()
    );
    assert!(out.stderr.contains(&notice), "{}", out.stderr);
    assert_eq!(fingerprint(&torn), before, "the torn tail was changed");

    let flipped = dir.path().join("flipped");
    zlock_testkit::copy_dir(&data.join("wal"), &flipped);
    let victim = &records[records.len() / 2];
    let at = victim["offset"].as_u64().unwrap();
    let path = flipped.join(&name);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at as usize + 16 + 2] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let out = zlock(&["data", "dump-log", flipped.to_str().unwrap()]).await;
    assert_eq!(out.code, 1, "{out:?}");
    let want = format!("corrupt {} at offset {at}", path.display());
    assert!(out.stderr.contains(&want), "{want:?} not in {}", out.stderr);
    let shown = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("index "))
        .count();
    assert_eq!(shown as u64, victim["index"].as_u64().unwrap() - 1);
}
