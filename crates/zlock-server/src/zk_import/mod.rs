//! `zlock import --from-zookeeper`: Apache ZooKeeper's data files (3.5-3.9) become a
//! zlock single-node data directory holding the same state.
//!
//! It recovers exactly as ZooKeeper does when it starts on that directory: the newest
//! snapshot that reads ([`snap`]), then every logged transaction after the snapshot's
//! zxid ([`log`], [`txn`]), replayed with ZooKeeper's rules ([`replay`]). The result is
//! a zlock state (tree, sessions, last zxid), written as a zlock snapshot through
//! zlock's own writers (`zlock_core::snapshot::write_image` into
//! `zlock_store::snapshot::write_with`), so `zlock server --data-dir D` recovers it like
//! any snapshot of its own. Nothing else is needed: a single node's directory is its
//! snapshots and its WAL, and the WAL starts empty after the snapshot.
//!
//! ZooKeeper's files are only read. The new directory is written under a temporary name
//! beside the target and renamed into place at the end, so a failed import leaves
//! nothing behind.

mod error;
mod files;
mod log;
mod passwd;
mod replay;
mod snap;
#[cfg(test)]
mod tests;
mod txn;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zlock_core::snapshot::Image;
use zlock_core::{Config, LogIndex};

pub use error::ImportError;

/// The log position of the imported snapshot: the first, as in a fresh directory.
const IMPORT_INDEX: u64 = 1;

/// What to import and where.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// ZooKeeper's `dataDir` (or its `version-2`).
    pub zk_data_dir: PathBuf,
    /// ZooKeeper's `dataLogDir`, if its logs are not in `dataDir`.
    pub zk_log_dir: Option<PathBuf>,
    /// The zlock data directory to create.
    pub data_dir: PathBuf,
}

/// What the import is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Reading a snapshot: bytes read of its bytes.
    Snapshot {
        file: &'a Path,
        done: u64,
        total: u64,
    },
    /// Replaying a log file: bytes replayed of its bytes.
    Log {
        file: &'a Path,
        done: u64,
        total: u64,
    },
    /// Writing zlock's snapshot.
    Writing,
}

/// What was imported.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The ZooKeeper snapshot the import started from.
    pub snapshot: PathBuf,
    /// The log files replayed.
    pub logs: Vec<PathBuf>,
    /// Transactions replayed after the snapshot.
    pub replayed: u64,
    pub nodes: usize,
    pub sessions: usize,
    /// ZooKeeper's last processed zxid: zlock goes on after it.
    pub last_zxid: i64,
    /// Snapshots skipped and logs cut at a torn entry, one line each.
    pub warnings: Vec<String>,
    pub elapsed: Duration,
    /// The zlock snapshot written.
    pub written: PathBuf,
}

/// Imports `opts.zk_data_dir` into a new zlock data directory `opts.data_dir`.
/// `progress` hears what is being read; `warn` hears each warning as it happens (they
/// are in the summary too).
///
/// # Errors
/// [`ImportError`]: the target holds data, no snapshot reads, a log entry is damaged
/// (file and offset named), or reading or writing fails. Nothing is created then.
pub fn import(
    opts: &ImportOptions,
    progress: &mut dyn FnMut(Progress<'_>),
    warn: &mut dyn FnMut(&str),
) -> Result<Summary, ImportError> {
    let started = Instant::now();
    refuse_data(&opts.data_dir)?;
    let mut warnings = Vec::new();
    let mut warned = |w: String| {
        warn(&w);
        warnings.push(w);
    };

    let snap_dir = files::version_dir(&opts.zk_data_dir);
    let log_dir = files::version_dir(opts.zk_log_dir.as_ref().unwrap_or(&opts.zk_data_dir));
    let snapshots = files::list(&snap_dir, "snapshot")?;
    // TTL and container nodes are carried over whatever zlock is started with; the
    // state's configuration is not part of its snapshot.
    let config = Config {
        extended_types: true,
    };
    let loaded = snap::load_newest(
        &snap_dir,
        &snapshots,
        config,
        &mut warned,
        &mut |f, d, t| {
            progress(Progress::Snapshot {
                file: f,
                done: d,
                total: t,
            })
        },
    )?;
    let snapshot = snapshots
        .iter()
        .find(|f| f.zxid == loaded.zxid)
        .map(|f| f.path.clone())
        .unwrap_or_default();

    let mut state = loaded.state;
    let mut replay = replay::Replay {
        state: &mut state,
        last_zxid: loaded.zxid,
        max_time: loaded.max_time,
        applied: 0,
    };
    let logs = logs_from(&files::list(&log_dir, "log")?, loaded.zxid);
    for f in &logs {
        let bytes = std::fs::read(f).map_err(|e| ImportError::io(f, e))?;
        let total = bytes.len() as u64;
        let mut n = 0u64;
        let end = log::entries(f, &bytes, &mut |offset, h, t| {
            // The first file may begin before the snapshot: ZooKeeper starts after it.
            if h.zxid > loaded.zxid {
                replay.apply(&h, &t);
            }
            n += 1;
            if n & 0xfff == 0 {
                progress(Progress::Log {
                    file: f,
                    done: offset,
                    total,
                });
            }
            Ok(())
        })?;
        if let log::End::Torn { offset } = end {
            warned(format!(
                "{} ends in a torn entry at byte {offset}: the log ends there, as \
                 ZooKeeper reads it (the whole entries before it are imported)",
                f.display()
            ));
        }
        progress(Progress::Log {
            file: f,
            done: total,
            total,
        });
    }
    let orphans = replay.drop_orphan_ephemerals();
    if orphans > 0 {
        warned(format!(
            "{orphans} ephemeral nodes belonged to no session: deleted, as ZooKeeper \
             deletes them when it starts"
        ));
    }
    let (last_zxid, max_time, replayed) = (replay.last_zxid, replay.max_time, replay.applied);
    state.zxid = zlock_core::Zxid(last_zxid);
    state.time_ms = max_time;
    state.applied = LogIndex(IMPORT_INDEX);

    progress(Progress::Writing);
    let written = write(&opts.data_dir, &state)?;
    Ok(Summary {
        snapshot,
        logs,
        replayed,
        nodes: state.tree.len(),
        sessions: state.sessions.len(),
        last_zxid,
        warnings,
        elapsed: started.elapsed(),
        written,
    })
}

/// The logs ZooKeeper reads after a snapshot of `zxid` (`FileTxnLog.getLogFiles`): the
/// last one starting at or before `zxid`, and every one after it.
fn logs_from(logs: &[files::ZkFile], zxid: i64) -> Vec<PathBuf> {
    let first = logs.iter().rposition(|f| f.zxid <= zxid).unwrap_or(0);
    logs[first.min(logs.len())..]
        .iter()
        .map(|f| f.path.clone())
        .collect()
}

/// An import never writes over anything: the target must be missing or empty.
fn refuse_data(dir: &Path) -> Result<(), ImportError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(ImportError::TargetNotEmpty(dir.to_owned())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if dir.exists() => Err(ImportError::TargetNotEmpty(dir.to_owned())),
        Err(e) => Err(ImportError::io(dir, e)),
    }
}

/// Writes `state` as the snapshot of a new data directory at `target`: into a
/// temporary directory beside it, renamed into place once complete.
fn write(target: &Path, state: &zlock_core::State) -> Result<PathBuf, ImportError> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "zlock-data".into());
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| ImportError::io(&parent, e))?;
    let temp = parent.join(format!(".{name}.import-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&temp);
    let result = (|| {
        let snapshots = temp.join("snapshots");
        let image = Image::of(state);
        let written = zlock_store::snapshot::write_with(&snapshots, IMPORT_INDEX, 2, |w| {
            zlock_core::snapshot::write_image(&image, w)
        })
        .map_err(|source| ImportError::Store {
            dir: snapshots.clone(),
            source,
        })?;
        // A target that exists is empty (checked first); rename replaces an empty
        // directory.
        std::fs::rename(&temp, target).map_err(|e| ImportError::io(target, e))?;
        sync_dir(&parent)?;
        let file = written.file_name().map(PathBuf::from).unwrap_or_default();
        Ok(target.join("snapshots").join(file))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result
}

/// Makes the rename durable.
fn sync_dir(dir: &Path) -> Result<(), ImportError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ImportError::io(dir, e))
}
