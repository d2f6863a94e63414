//! Finding ZooKeeper's files: `snapshot.<zxid hex>[.gz|.snappy]` and `log.<zxid hex>`
//! in a `version-2` directory, named by the first zxid they hold (a log) or the last
//! zxid applied when the snapshot began (a snapshot).

use std::path::{Path, PathBuf};

use super::error::ImportError;

/// How a snapshot file is compressed, from its name's last extension as ZooKeeper's
/// `SnapStream.getStreamMode` decides it (`snapshot.compression.method`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    /// Snappy, or an extension ZooKeeper would not know either.
    Unsupported(String),
}

/// One snapshot or log file and the zxid its name carries.
#[derive(Debug, Clone)]
pub(crate) struct ZkFile {
    pub zxid: i64,
    pub path: PathBuf,
    pub compression: Compression,
}

/// ZooKeeper keeps its files in `<dir>/version-2`; a directory given that already is
/// one (or holds the files itself) is taken as it is.
pub(crate) fn version_dir(dir: &Path) -> PathBuf {
    let v2 = dir.join("version-2");
    if v2.is_dir() {
        v2
    } else {
        dir.to_owned()
    }
}

/// The files of `dir` named `<prefix>.<hex zxid>[.<ext>]`, oldest (lowest zxid) first.
/// Names that do not parse are not ZooKeeper's and are left alone, as ZooKeeper does.
pub(crate) fn list(dir: &Path, prefix: &str) -> Result<Vec<ZkFile>, ImportError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ImportError::io(dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ImportError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(f) = parse_name(name, prefix) {
            out.push(ZkFile {
                path: entry.path(),
                ..f
            });
        }
    }
    out.sort_by_key(|f| f.zxid);
    Ok(out)
}

fn parse_name(name: &str, prefix: &str) -> Option<ZkFile> {
    let mut parts = name.split('.');
    if parts.next()? != prefix {
        return None;
    }
    let zxid = i64::from_str_radix(parts.next()?, 16).ok()?;
    let compression = match parts.next_back() {
        None => Compression::None,
        Some("gz") => Compression::Gzip,
        Some(other) => Compression::Unsupported(other.to_owned()),
    };
    Some(ZkFile {
        zxid,
        path: PathBuf::new(),
        compression,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_zookeeper_reads_them() {
        let f = parse_name("snapshot.1a2b", "snapshot").map(|f| (f.zxid, f.compression));
        assert_eq!(f, Some((0x1a2b, Compression::None)));
        let f = parse_name("snapshot.10.gz", "snapshot").map(|f| f.compression);
        assert_eq!(f, Some(Compression::Gzip));
        let f = parse_name("snapshot.10.snappy", "snapshot").map(|f| f.compression);
        assert_eq!(f, Some(Compression::Unsupported("snappy".into())));
        assert!(parse_name("log.zz", "log").is_none());
        assert!(parse_name("snapshot.10", "log").is_none());
    }
}
