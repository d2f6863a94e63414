//! `zlock data dump-snapshot | dump-log`: what a data directory holds, read offline and
//! read-only, as ZooKeeper's `zkSnapShotToolkit` and `zkTxnLogToolkit` show its files.
//!
//! One idea per file: [`source`] (which files a path means, read without changing
//! them), [`snapshot`] (a snapshot's header, znodes, sessions and lock queues),
//! [`log`] (a log's records), [`txn`] (one Txn's fields), [`fmt`] (how values print).

mod fmt;
mod log;
mod snapshot;
mod source;
mod txn;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum DataCmd {
    /// Print what a snapshot holds: header, every znode with its Stat and ACL (and data
    /// with --data), the sessions, the native lock queues. Read-only.
    #[command(after_help = SNAPSHOT_HELP)]
    DumpSnapshot(SnapshotArgs),
    /// Print every record of a log: each Txn's time, origin and operation; for an
    /// ensemble member each Raft entry's log id and kind. Read-only.
    #[command(after_help = LOG_HELP)]
    DumpLog(LogArgs),
}

#[derive(Args)]
pub struct SnapshotArgs {
    /// A data directory (a single node's or an ensemble member's: its newest valid
    /// snapshot), a snapshot directory, one snapshot file, or a backup file.
    pub path: PathBuf,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Show each znode's data too (UTF-8 when printable, else base64).
    #[arg(long)]
    pub data: bool,
}

#[derive(Args)]
pub struct LogArgs {
    /// A data (or data log) directory, a single node's or an ensemble member's, or a
    /// directory of log segments.
    pub path: PathBuf,
    /// One JSON object per line (NDJSON), the last one {"type":"end",...}.
    #[arg(long)]
    pub json: bool,
    /// Show records from this log index on (the ones before are still checked)
    /// [default: the first]
    #[arg(long, value_name = "INDEX")]
    pub from: Option<u64>,
    /// Show at most N records.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

const SNAPSHOT_HELP: &str = "\
Examples:
  zlock data dump-snapshot /var/lib/zlock                 newest snapshot of a data dir
  zlock data dump-snapshot /var/lib/zlock --data --json   everything, as one JSON document
  zlock data dump-snapshot /data/zl1/raft/snapshots/snapshot.00000000000000001234
  zlock data dump-snapshot backup.zlock                   a file of `zlock snapshot save`

Read-only: every file is opened for reading; nothing is created, cut or deleted, so it is
safe on a copy of a member's directory and on a running server's.

What it prints:
  header     the file, its format (single node, ensemble member, backup), the log index
             it holds everything up to, the last zxid (0x<hex>), the state's time (the
             last Txn's), the znode and session counts; for a member the Raft last log id
             (term, leader, index) and the membership (voter sets, members' addresses)
  znodes     in path order, each with zkCli's Stat fields: cZxid/mZxid/pZxid (the zxid
             that created it, last set its data, last changed its children), ctime/mtime
             (ms since the epoch), dataVersion, cversion (changes to its children),
             aclVersion, ephemeralOwner (the session of an ephemeral node, else 0x0),
             dataLength, numChildren; its kind (persistent, ephemeral, container, ttl),
             its ACL (scheme:id:perms, perms from cdrwa), and with --data its data
  sessions   id (0x<hex>), timeout, the member whose requests act for it, how many
             ephemeral nodes it owns
  locks      each lock path the native lock index follows, its entries in queue order:
             name, owner session, holds / waiting (mode) / queued, lock-delay

--json gives the same fields: {file, format, index, last_zxid, time_ms, znode_count,
session_count, raft?, backup?, znodes: [{path, kind, stat, acl, data?}], sessions,
locks}; zxids and session ids as \"0x<hex>\" strings, data as {\"utf8\": ...} or
{\"base64\": ...} (null for a null data).";

const LOG_HELP: &str = "\
Examples:
  zlock data dump-log /var/lib/zlock                   a single node's WAL (<dir>/wal)
  zlock data dump-log /data/zl1 --from 5000 --limit 20 a member's Raft log (<dir>/raft/log)
  zlock data dump-log /var/lib/zlock --json | jq 'select(.type == \"record\")'

Read-only: segments are opened for reading and never cut, even where a server starting on
the directory would cut a torn tail. On a running server the last record may be one
being written: it shows as a torn tail.

Each record, one line (a multi's ops and a Raft entry's Txns on the lines under it):
  index      the record's log index (a member's: the Raft log index; its WAL record
             number, one more, is \"record\" in --json)
  time       the Txn's time, ms since the epoch (the leader's clock), and as a date
  origin     member (that proposed it), session 0x<hex> (0x0: none, e.g. an expiry), xid
  operation  createSession (timeout), closeSession (session, expiry or not),
             deleteExpired (paths), moveSession, or the client's request: create (path,
             data_length, flags and mode, acl), delete and setData (path, version;
             data_length), setACL (path, acl, version), check, multi (each op), lock
             (zlock's native lock: path, prefix, mode, leases, flags, release,
             lock_delay_ms)
  Raft       for a member: the entry's log id (term, leader, index) and kind: blank (a new
             leader's first entry), membership (voter sets and members) or normal (a batch
             of Txns)
A failed write is logged like any other: its outcome is decided when it is applied.

No zxid: the log does not store it. A zxid is a counter of applied Txns kept in the
state (a Raft log also holds entries that are not Txns); a snapshot holds the last one
(dump-snapshot), and each Txn after it takes the next.

The end: a torn last record (what a crash, or a write in progress, leaves) ends the dump
with \"torn record at FILE offset N: the log ends here\" on stderr, exit 0, every whole
record before it printed. Damage before the end (a record whose checksum fails with an
intact one after it, a segment out of order) is an error naming the file and the
offset, exit 1. --json ends with {\"type\":\"end\",\"end\":\"clean\"|\"torn\"|\"limit\",...}.";

/// Runs a `zlock data` command; the process's exit code.
pub fn run(cmd: DataCmd) -> i32 {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cmd {
        DataCmd::DumpSnapshot(a) => dump_snapshot(&a, &mut out),
        DataCmd::DumpLog(a) => dump_log(&a, &mut out),
    };
    let _ = out.flush();
    code
}

fn dump_snapshot(a: &SnapshotArgs, out: &mut dyn Write) -> i32 {
    let loaded = match source::load_snapshot(&a.path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("zlock data dump-snapshot: {e}");
            return 1;
        }
    };
    let written = if a.json {
        writeln!(out, "{}", snapshot::json(&loaded, a.data))
    } else {
        snapshot::text(&loaded, a.data, out)
    };
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("zlock data dump-snapshot: writing the dump: {e}");
            1
        }
        _ => 0,
    }
}

fn dump_log(a: &LogArgs, out: &mut dyn Write) -> i32 {
    let opts = log::Options {
        json: a.json,
        from: a.from,
        limit: a.limit,
    };
    match log::dump(&a.path, &opts, out) {
        Ok(report) => {
            if let Some(notice) = log::torn_notice(&report) {
                let _ = out.flush();
                eprintln!("{notice}");
            }
            0
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("zlock data dump-log: {e}");
            1
        }
    }
}
