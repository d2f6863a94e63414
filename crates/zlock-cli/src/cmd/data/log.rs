//! `zlock data dump-log`: every record of a log, as ZooKeeper's `zkTxnLogToolkit`
//! (TxnLogToolkit) prints one line per transaction: for a single node's WAL one Txn per
//! record; for a member's Raft log one entry per record with its log id and kind (a
//! normal entry's Txns each on a line under it).
//!
//! The log is read with `zlock_store::wal::read_only::scan`, by recovery's rules and
//! without changing a file: a torn tail ends the dump with a notice (exit 0), damage
//! before the end is an error naming the file and the offset (exit 1).

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Value};
use zlock_core::Txn;
use zlock_server::commit::raft::codec::{read_entry, v1};
use zlock_store::wal::read_only::{scan, RecordRef, ScanEnd, ScanReport};
use zlock_store::StoreError;

use super::fmt::{membership_json, membership_text};
use super::source::{find_log, DumpError, LogKind};
use super::txn;

/// What to show of the log.
pub struct Options {
    pub json: bool,
    /// The first index shown (records before it are read and checked, not shown);
    /// `None`: from the first record.
    pub from: Option<u64>,
    /// Records shown at most.
    pub limit: Option<u64>,
}

/// Dumps the log `path` means (see [`find_log`]) to `out`; how the log ended. A closed
/// `out` (`| head`) stops the dump early, which is no error.
pub fn dump(path: &Path, opts: &Options, out: &mut dyn Write) -> Result<ScanReport, DumpError> {
    let (dir, kind) = find_log(path)?;
    let kind = match kind {
        LogKind::Unknown => sniff(&dir)?,
        known => known,
    };
    // A Raft entry's record has WAL index Raft index + 1 (the WAL never uses 0, Raft
    // starts at its initial membership entry 0); --from is the index shown.
    let after = match (kind, opts.from) {
        (_, None) => 0,
        (LogKind::Raft, Some(from)) => from,
        (_, Some(from)) => from.saturating_sub(1),
    };
    let mut shown = 0u64;
    let mut closed = false;
    let report = scan(&dir, after, |r| {
        if opts.limit.is_some_and(|n| shown >= n) {
            return Ok(ControlFlow::Break(()));
        }
        let written = match kind {
            LogKind::Raft => raft_record(&r, opts.json, out)?,
            _ => wal_record(&r, opts.json, out)?,
        };
        if let Err(e) = written {
            if e.kind() == io::ErrorKind::BrokenPipe {
                closed = true;
                return Ok(ControlFlow::Break(()));
            }
            return Err(StoreError::rejected(e));
        }
        shown += 1;
        Ok(if opts.limit.is_some_and(|n| shown >= n) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    if opts.json && !closed {
        let _ = writeln!(out, "{}", end_json(&report, shown));
    }
    Ok(report)
}

/// What a directory of segments that its path does not name holds: its first record
/// decides (a Txn, or else a Raft entry).
fn sniff(dir: &Path) -> Result<LogKind, DumpError> {
    let mut kind = LogKind::Wal;
    scan(dir, 0, |r| {
        if Txn::decode(r.payload).is_err() {
            kind = LogKind::Raft;
        }
        Ok(ControlFlow::Break(()))
    })?;
    Ok(kind)
}

/// A record's payload that does not decode: reported by the scan as the record's file,
/// offset and index (its checksum held, so the writer wrote it so).
fn undecodable(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::rejected(format!("{what} does not decode: {e}"))
}

fn wal_record(
    r: &RecordRef<'_>,
    json: bool,
    out: &mut dyn Write,
) -> Result<io::Result<()>, StoreError> {
    let t = Txn::decode(r.payload).map_err(|e| undecodable("the Txn", e))?;
    Ok(if json {
        let v = json!({
            "type": "record", "index": r.index, "file": r.file.display().to_string(),
            "offset": r.offset, "txn": txn::json(&t),
        });
        writeln!(out, "{v}")
    } else {
        writeln!(out, "index {} {}", r.index, txn::text(&t, "      "))
    })
}

fn raft_record(
    r: &RecordRef<'_>,
    json: bool,
    out: &mut dyn Write,
) -> Result<io::Result<()>, StoreError> {
    let e = read_entry(r.payload).map_err(|e| undecodable("the Raft entry", e))?;
    let id = e.log_id;
    if json {
        let mut v = json!({
            "type": "record", "index": id.index, "record": r.index,
            "file": r.file.display().to_string(), "offset": r.offset,
            "log_id": {"term": id.term, "leader": id.leader, "index": id.index},
        });
        match &e.payload {
            v1::Payload::Blank => v["kind"] = "blank".into(),
            v1::Payload::Config(c) => {
                v["kind"] = "membership".into();
                v["membership"] = membership_json(c);
            }
            v1::Payload::Batch(p) => {
                v["kind"] = "normal".into();
                v["txns"] = p.0.iter().map(txn::json).collect::<Vec<Value>>().into();
            }
        }
        return Ok(writeln!(out, "{v}"));
    }
    let head = format!("index {} term {} leader {}", id.index, id.term, id.leader);
    Ok(match &e.payload {
        v1::Payload::Blank => writeln!(out, "{head} blank (a new leader's first entry)"),
        v1::Payload::Config(c) => writeln!(out, "{head} membership {}", membership_text(c)),
        v1::Payload::Batch(p) => {
            let mut text = format!("{head} normal, {} txn(s)", p.0.len());
            for t in &p.0 {
                text.push_str(&format!("\n    {}", txn::text(t, "        ")));
            }
            writeln!(out, "{text}")
        }
    })
}

/// The closing line of `--json`: how the log ended.
fn end_json(report: &ScanReport, shown: u64) -> Value {
    let mut v = json!({"type": "end", "shown": shown, "last_record": report.last_index});
    match &report.end {
        ScanEnd::Clean => v["end"] = "clean".into(),
        ScanEnd::Stopped { .. } => v["end"] = "limit".into(),
        ScanEnd::Torn {
            file,
            offset,
            reason,
        } => {
            v["end"] = "torn".into();
            v["file"] = file.display().to_string().into();
            v["offset"] = (*offset).into();
            v["reason"] = reason.clone().into();
        }
    }
    v
}

/// The notice for stderr when the log ends in a torn record.
pub fn torn_notice(report: &ScanReport) -> Option<String> {
    match &report.end {
        ScanEnd::Torn {
            file,
            offset,
            reason,
        } => Some(format!(
            "torn record at {} offset {offset}: the log ends here ({reason}; a server \
             starting on this directory would cut it; nothing was changed)",
            file.display()
        )),
        _ => None,
    }
}
