//! Opt-in timing of each write's way through the server, for the per-stage breakdown of
//! a write (`bench/stages.sh`): with `ZLOCK_STAGES=<dir>` in a server's environment,
//! each write is marked as it passes each stage, in memory, and the marks are written to
//! `<dir>/stages-<member>.csv` (member, stage, session, xid, wall-clock nanoseconds)
//! when the server stops. Off (one relaxed atomic load per mark) otherwise. The members of an ensemble
//! on one machine share its wall clock, so their marks line up.
//!
//! The stages, for a write whose client is connected to member O, led by member L:
//! `in` (O read its frame), `seq` (O's sequencer made it a Txn), `sent` (O's writer
//! handed it to its Raft, or wrote it to the leader), `fwd` (L read it from O's
//! forwarding connection; only when O is not L), `append` (each member's Raft appended
//! it to its log; `ix` says which entry holds it), `flushed` (marked by entry: the
//! member's fsync of it ended), `applied` (each member applied it; on O the reply is
//! queued then). Replication, marked by entry and peer on the peer link
//! (`commit::raft::stream`): `rsent` (the leader wrote an append frame ending at the
//! entry to a follower), `rread` (the follower read it), `ranswered` (the follower wrote
//! its answer), `racked` (the leader read that answer).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zlock_core::Txn;

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());
static MEMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Mark {
    stage: &'static str,
    session: i64,
    xid: i32,
    ns: u64,
}

/// Starts marking if `ZLOCK_STAGES` is set; `member`: this server's id (0 standalone).
pub fn start(member: u64) {
    if std::env::var_os("ZLOCK_STAGES").is_some() {
        MEMBER.store(member, Ordering::Relaxed);
        ON.store(true, Ordering::Relaxed);
    }
}

/// Whether marks are taken (to skip building them).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// Marks one write at `stage`, `ago` before now.
pub fn mark(stage: &'static str, session: i64, xid: i32, ago: Duration) {
    if !on() {
        return;
    }
    let ns = now_ns().saturating_sub(ago.as_nanos() as u64);
    if let Ok(mut m) = MARKS.lock() {
        m.push(Mark {
            stage,
            session,
            xid,
            ns,
        });
    }
}

/// Marks every client write among `txns` at `stage`.
pub fn mark_txns<'a>(stage: &'static str, txns: impl IntoIterator<Item = &'a Txn>) {
    if !on() {
        return;
    }
    for t in txns {
        if t.origin.session.0 != 0 {
            mark(stage, t.origin.session.0, t.origin.xid, Duration::ZERO);
        }
    }
}

/// Marks log entry `index` at `stage` (appended, flushed), on this member.
pub fn mark_index(stage: &'static str, index: u64) {
    if on() {
        mark(stage, index as i64, i32::MIN, Duration::ZERO);
    }
}

/// Marks log entry `index` at `stage` on this member's link with `peer` (an append
/// written to it, its answer read): the xid field is `i32::MIN + 1 + peer`.
pub fn mark_index_peer(stage: &'static str, index: u64, peer: u64) {
    if on() {
        let xid = i32::MIN.saturating_add(1).saturating_add(peer as i32);
        mark(stage, index as i64, xid, Duration::ZERO);
    }
}

/// Marks every client write in log entry `index` as appended to this member's log, and
/// which entry holds it (stage `ix`, whose time field is the index).
pub fn mark_appended(index: u64, txns: &[Txn]) {
    if !on() {
        return;
    }
    for t in txns.iter().filter(|t| t.origin.session.0 != 0) {
        let (s, x) = (t.origin.session.0, t.origin.xid);
        mark("append", s, x, Duration::ZERO);
        if let Ok(mut m) = MARKS.lock() {
            m.push(Mark {
                stage: "ix",
                session: s,
                xid: x,
                ns: index,
            });
        }
    }
}

/// Writes the marks to `ZLOCK_STAGES`'s directory (on stop).
pub fn dump() {
    let (Some(dir), true) = (std::env::var_os("ZLOCK_STAGES"), on()) else {
        return;
    };
    let marks = MARKS
        .lock()
        .map(|mut m| std::mem::take(&mut *m))
        .unwrap_or_default();
    let member = MEMBER.load(Ordering::Relaxed);
    let path = std::path::Path::new(&dir).join(format!("stages-{member}.csv"));
    let write = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for m in &marks {
            writeln!(f, "{member},{},{},{},{}", m.stage, m.session, m.xid, m.ns)?;
        }
        f.flush()
    };
    if let Err(e) = write() {
        tracing::warn!(error = %e, "could not write the stage marks");
    }
}
