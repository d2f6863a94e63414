//! Writing a committed configuration back, as a ZooKeeper 3.5+ server does after a
//! reconfiguration (`QuorumPeer.setQuorumVerifier`): the members go into
//! `<zoo.cfg>.dynamic.<version hex>`, and `zoo.cfg` loses its `server.N`, `group.`,
//! `weight.` and `peerType` lines (and `clientPort`/`clientPortAddress` when this
//! member's line names its client address) for a `dynamicConfigFile=` line pointing
//! at the new file. A restart then reads the configuration in force, not the one the
//! member first started with. Both files are replaced atomically (written beside,
//! fsynced, renamed, the directory fsynced). Unlike ZooKeeper, comments and blank
//! lines of `zoo.cfg` are kept. Written only when the server was started from a file
//! (`--config`), as ZooKeeper writes nothing without one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Keys that belong to the dynamic configuration, not the static file.
fn moved(key: &str, erase_client: bool) -> bool {
    key.starts_with("server.")
        || key.starts_with("group.")
        || key.starts_with("weight.")
        || key == "dynamicConfigFile"
        || key == "peerType"
        || (erase_client && (key == "clientPort" || key == "clientPortAddress"))
}

/// Replaces `path` by `contents`, atomically and durably.
fn replace(path: &Path, contents: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} has no file name", path.display())))?;
    // Unique: members that share a configuration file (one machine, one zoo.cfg) may
    // write the same text back at the same moment.
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u64>()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(&dir)?.sync_all()
}

/// Writes configuration `text` (ZooKeeper's dynamic-config text) at `version` for the
/// static file `config_file`, and points `config_file` at it. `client_in_line`: this
/// member's `server.N` line gives its client address. Returns the dynamic file's path.
pub fn write_back(
    config_file: &Path,
    version: u64,
    text: &str,
    client_in_line: bool,
) -> std::io::Result<PathBuf> {
    let dynamic = PathBuf::from(format!("{}.dynamic.{version:x}", config_file.display()));
    replace(&dynamic, &format!("{text}\n"))?;
    let absolute = std::fs::canonicalize(&dynamic)?;
    let old = std::fs::read_to_string(config_file)?;
    let mut out = String::with_capacity(old.len());
    for line in old.lines() {
        let key = line.split(['=', ':']).next().unwrap_or_default().trim();
        let comment = line.trim_start().starts_with('#') || line.trim_start().starts_with('!');
        if !comment && moved(key, client_in_line) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("dynamicConfigFile={}\n", absolute.display()));
    replace(config_file, &out)?;
    Ok(dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerConfig;

    #[test]
    fn the_static_file_points_at_the_new_members() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            "# an ensemble\ntickTime=2000\ndataDir=/var/lib/zk\nclientPort=2181\n\
             server.1=127.0.0.1:2888:3888;2181\nserver.2=127.0.0.1:2889:3889;2182\n\
             server.3=127.0.0.1:2890:3890;2183\npeerType=participant\nreconfigEnabled=true\n",
        )
        .unwrap();
        let text = "server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\n\
                    server.2=127.0.0.1:2889:3889:participant;0.0.0.0:2182\n\
                    version=1c";
        let written = write_back(&cfg, 0x1c, text, true).unwrap();
        assert_eq!(written, dir.path().join("zoo.cfg.dynamic.1c"));
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            format!("{text}\n")
        );
        let now = std::fs::read_to_string(&cfg).unwrap();
        assert_eq!(
            now,
            format!(
                "# an ensemble\ntickTime=2000\ndataDir=/var/lib/zk\nreconfigEnabled=true\n\
                 dynamicConfigFile={}\n",
                std::fs::canonicalize(&written).unwrap().display()
            )
        );
        // zlock reads it back: two members from the dynamic file.
        let back = ServerConfig::from_file(&cfg).unwrap();
        assert_eq!(back.declared.members.len(), 2);
        // Again, for a later version: the pointer moves, nothing else changes.
        let later = write_back(&cfg, 0x2a, text, true).unwrap();
        let again = std::fs::read_to_string(&cfg).unwrap();
        assert!(again.ends_with(&format!(
            "dynamicConfigFile={}\n",
            std::fs::canonicalize(&later).unwrap().display()
        )));
        assert_eq!(again.matches("dynamicConfigFile=").count(), 1);
    }
}
