//! `zlock import --from-zookeeper`: the command line of `zlock_server::zk_import`.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use zlock_server::zk_import::{self, ImportOptions, Progress};

#[derive(clap::Args, Debug, Clone)]
pub struct ImportArgs {
    /// Apache ZooKeeper's dataDir (the directory holding `version-2`). Only read.
    #[arg(long = "from-zookeeper", value_name = "ZK_DATADIR")]
    pub from_zookeeper: PathBuf,
    /// ZooKeeper's dataLogDir, if its transaction logs are kept apart from dataDir.
    #[arg(long = "data-log-dir", value_name = "ZK_LOGDIR")]
    pub data_log_dir: Option<PathBuf>,
    /// The zlock data directory to create (it must not exist, or be empty).
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: PathBuf,
}

pub const AFTER_HELP: &str = "\
Example (stop ZooKeeper first: a running server keeps writing its log):
  zlock import --from-zookeeper /var/lib/zookeeper --data-dir /var/lib/zlock
  zlock server --data-dir /var/lib/zlock --port 2181

The import recovers the state exactly as ZooKeeper would on a restart: its newest
snapshot that reads (a snapshot whose checksum fails is skipped for the one before it,
with a warning), then every logged transaction after it (a torn last entry ends the log,
as ZooKeeper reads it; a damaged entry before the end stops the import, naming the file
and the byte). ZooKeeper's directory is left unchanged; the new directory appears only
once complete.

Carried over: every znode with its path, data (null kept apart from empty), ACLs in
order, and every Stat field (czxid, mzxid, pzxid, ctime, mtime, version, cversion,
aversion, ephemeralOwner, numChildren, dataLength); ephemeral, sequential, container and
TTL nodes (the next sequence number under each parent included); the sessions with their
timeouts and passwords; the last zxid (zlock's next zxid follows it).

Sessions and ephemeral nodes behave as when ZooKeeper restarts on its directory: each
session gets one full timeout from zlock's start; a client that reconnects in time with
its session id and password (a ZooKeeper client still running does so by itself once zlock
listens where ZooKeeper did) keeps its session and its ephemeral nodes; the other
sessions expire and their ephemeral nodes go.

Not carried over: watches (clients set them again on reconnect, as with any restart),
quotas' usage counters under /zookeeper/quota (copied as plain nodes), ZooKeeper's tree
digests (not checked), an ensemble's membership (the result is a single-node directory),
and snappy-compressed snapshots (refused: set snapshot.compression.method=gz or remove it,
restart ZooKeeper once to write a new snapshot, and import again).";

/// Runs the import; the process's exit code.
pub fn run(a: ImportArgs) -> i32 {
    let opts = ImportOptions {
        zk_data_dir: a.from_zookeeper,
        zk_log_dir: a.data_log_dir,
        data_dir: a.data_dir,
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut on_progress = |p: Progress<'_>| match p {
        Progress::Snapshot { file, done, total } | Progress::Log { file, done, total } => {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            bar.set_message(name.into_owned());
            bar.set_length(total);
            bar.set_position(done);
        }
        Progress::Writing => bar.set_message("writing zlock's snapshot"),
    };
    let mut on_warning = |w: &str| bar.suspend(|| eprintln!("zlock import: warning: {w}"));
    let result = zk_import::import(&opts, &mut on_progress, &mut on_warning);
    bar.finish_and_clear();
    match result {
        Ok(s) => {
            eprintln!(
                "zlock import: {} nodes, {} sessions, last zxid 0x{:x}, {:.1} s \
                 (snapshot {}, {} txns replayed from {} log files) -> {}",
                s.nodes,
                s.sessions,
                s.last_zxid,
                s.elapsed.as_secs_f64(),
                s.snapshot.display(),
                s.replayed,
                s.logs.len(),
                opts.data_dir.display(),
            );
            0
        }
        Err(e) => {
            eprintln!("zlock import: error: {e}");
            1
        }
    }
}
