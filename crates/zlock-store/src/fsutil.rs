//! Small file-system helpers shared by the WAL and the snapshot store: index-named files,
//! directory creation and directory fsync.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// Number of decimal digits in a file-name index. `u64::MAX` has 20 digits, so every
/// index fits, and zero padding makes lexical order equal numeric order (`ls` shows the
/// files in log order).
pub(crate) const INDEX_DIGITS: usize = 20;

/// `<prefix><index as 20 zero-padded digits>`, e.g. `log.00000000000000000001`.
pub(crate) fn indexed_name(prefix: &str, index: u64) -> String {
    format!("{prefix}{index:0width$}", width = INDEX_DIGITS)
}

/// Parses a name made by [`indexed_name`]; anything else (temp files, editor backups,
/// files of the other kind) is `None`.
pub(crate) fn parse_indexed_name(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    if digits.len() != INDEX_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Every file in `dir` named `<prefix><20 digits>`, sorted by index, oldest first.
pub(crate) fn list_indexed(dir: &Path, prefix: &str) -> Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(index) = parse_indexed_name(name, prefix) {
            found.push((index, entry.path()));
        }
    }
    found.sort_by_key(|(index, _)| *index);
    Ok(found)
}

/// Creates `dir` (and its parents) if missing. When it had to be created, the parent is
/// fsynced too, so the new directory entry itself survives a crash.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fsync_dir(parent)?;
    }
    Ok(())
}

/// Makes creations, renames and deletions of entries in `dir` durable. A file's own
/// fsync does not cover the directory entry that names it.
pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(|e| StoreError::io(dir, e))?;
    handle.sync_all().map_err(|e| StoreError::io(dir, e))
}

/// Removes `path`; a file that is already gone counts as removed.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
        assert_eq!(indexed_name("log.", 1), "log.00000000000000000001");
        assert_eq!(indexed_name("log.", u64::MAX), "log.18446744073709551615");
        assert_eq!(
            parse_indexed_name("log.00000000000000000042", "log."),
            Some(42)
        );
        assert_eq!(parse_indexed_name("log.42", "log."), None);
        assert_eq!(parse_indexed_name("log.0000000000000000004x", "log."), None);
        assert_eq!(
            parse_indexed_name("snapshot.00000000000000000042.tmp", "snapshot."),
            None
        );
        // 20 digits that overflow u64 are not a name we wrote.
        assert_eq!(parse_indexed_name("log.99999999999999999999", "log."), None);
        assert!(indexed_name("log.", 9) < indexed_name("log.", 10));
    }
}
