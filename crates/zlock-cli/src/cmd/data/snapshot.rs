//! `zlock data dump-snapshot`: what one snapshot holds, as ZooKeeper's
//! `zkSnapShotToolkit` (SnapshotFormatter) shows a snapshot: a header, every znode in
//! path order with its Stat and ACL (and its data with `--data`), the sessions, then
//! zlock's own part, the native lock queues.

use std::io::{self, Write};

use serde_json::{json, Map, Value};
use zlock_core::locks::{LockView, Standing};
use zlock_core::tree::{Node, NodeKind};
use zlock_core::State;
use zlock_proto::lock_order::Mode;

use super::fmt::{
    acl_json, acl_text, data_json, data_text, hex, log_id_json, log_id_text, membership_json,
    membership_text, time,
};
use super::source::{Loaded, SnapshotKind};
use crate::cmd::zk::format_stat;

/// Every znode path, sorted (the tree keeps them by a hash of the path).
fn sorted_paths(st: &State) -> Vec<&str> {
    let mut paths: Vec<&str> = st.tree.iter().map(|(p, _)| p).collect();
    paths.sort_unstable();
    paths
}

fn format_name(kind: &SnapshotKind) -> &'static str {
    match kind {
        SnapshotKind::Single => "single node snapshot",
        SnapshotKind::Member(_) => "ensemble member's Raft snapshot",
        SnapshotKind::Backup(_) => "backup (zlock snapshot save)",
    }
}

fn kind_name(kind: NodeKind) -> (&'static str, Option<i64>) {
    match kind {
        NodeKind::Persistent => ("persistent", None),
        NodeKind::Ephemeral(_) => ("ephemeral", None),
        NodeKind::Container => ("container", None),
        NodeKind::Ttl(ms) => ("ttl", Some(ms)),
    }
}

fn standing_name(s: Standing) -> String {
    let mode = |m: Mode| format!("{m:?}").to_lowercase();
    match s {
        Standing::Holds => "holds".into(),
        Standing::Queued => "queued".into(),
        Standing::Waiting(m) => format!("waiting ({})", mode(m)),
    }
}

fn stat_json(n: &Node) -> Value {
    let s = n.stat();
    json!({
        "czxid": hex(s.czxid), "mzxid": hex(s.mzxid), "pzxid": hex(s.pzxid),
        "ctime": s.ctime, "mtime": s.mtime,
        "version": s.version, "cversion": s.cversion, "aversion": s.aversion,
        "ephemeralOwner": hex(s.ephemeral_owner),
        "dataLength": s.data_length, "numChildren": s.num_children,
    })
}

/// The whole snapshot as one JSON document.
pub fn json(l: &Loaded, with_data: bool) -> Value {
    let st = &l.state;
    let mut doc = Map::new();
    doc.insert("file".into(), l.file.display().to_string().into());
    doc.insert("format".into(), format_name(&l.kind).into());
    doc.insert("index".into(), l.index.into());
    doc.insert("last_zxid".into(), hex(st.zxid.0).into());
    doc.insert("time_ms".into(), st.time_ms.into());
    doc.insert("znode_count".into(), st.tree.len().into());
    doc.insert("session_count".into(), st.sessions.len().into());
    match &l.kind {
        SnapshotKind::Single => {}
        SnapshotKind::Member(meta) => {
            let raft = json!({
                "last_log_id": log_id_json(&meta.last),
                "membership_log_id": log_id_json(&meta.config_at),
                "membership": membership_json(&meta.config),
            });
            doc.insert("raft".into(), raft);
        }
        SnapshotKind::Backup(h) => {
            doc.insert("backup".into(), json!({"source": h.source}));
        }
    }
    let znodes: Vec<Value> = sorted_paths(st)
        .into_iter()
        .filter_map(|p| st.tree.get(p).map(|n| (p, n)))
        .map(|(p, n)| {
            let (kind, ttl) = kind_name(n.kind);
            let mut z =
                json!({"path": p, "kind": kind, "stat": stat_json(n), "acl": acl_json(&n.acl)});
            if let Some(ttl) = ttl {
                z["ttl_ms"] = ttl.into();
            }
            if with_data {
                z["data"] = data_json(n.data.as_deref());
            }
            z
        })
        .collect();
    doc.insert("znodes".into(), znodes.into());
    let sessions: Vec<Value> = st
        .sessions
        .iter()
        .map(|(id, s)| {
            json!({
                "id": hex(id.0), "timeout_ms": s.timeout_ms, "owner": s.owner.0,
                "ephemerals": st.tree.ephemerals_of(*id).len(),
            })
        })
        .collect();
    doc.insert("sessions".into(), sessions.into());
    let locks: Vec<Value> = st.locks.view().iter().map(lock_json).collect();
    doc.insert("locks".into(), locks.into());
    Value::Object(doc)
}

fn lock_json(l: &LockView) -> Value {
    let entries: Vec<Value> = l
        .entries
        .iter()
        .map(|e| {
            json!({
                "name": &*e.name, "owner": hex(e.owner.0), "read": e.read,
                "standing": standing_name(e.standing), "lock_delay_ms": e.delay_ms,
            })
        })
        .collect();
    json!({"path": &*l.path, "held_until_ms": l.held_until, "entries": entries})
}

/// The snapshot as text, ZooKeeper's SnapshotFormatter style: the Stat of each znode
/// as zkCli's `stat` prints it, indented under its path.
pub fn text(l: &Loaded, with_data: bool, out: &mut dyn Write) -> io::Result<()> {
    let st = &l.state;
    writeln!(out, "file          {}", l.file.display())?;
    writeln!(out, "format        {}", format_name(&l.kind))?;
    writeln!(out, "log index     {}", l.index)?;
    writeln!(out, "last zxid     {}", hex(st.zxid.0))?;
    writeln!(out, "time          {}", time(st.time_ms))?;
    writeln!(out, "znodes        {}", st.tree.len())?;
    writeln!(out, "sessions      {}", st.sessions.len())?;
    match &l.kind {
        SnapshotKind::Single => {}
        SnapshotKind::Member(meta) => {
            writeln!(out, "raft last     {}", log_id_text(&meta.last))?;
            writeln!(
                out,
                "membership    {} (entry {})",
                membership_text(&meta.config),
                log_id_text(&meta.config_at)
            )?;
        }
        SnapshotKind::Backup(h) => writeln!(out, "source        {}", h.source)?,
    }
    writeln!(out, "----")?;
    for p in sorted_paths(st) {
        let Some(n) = st.tree.get(p) else { continue };
        writeln!(out, "{p}")?;
        for line in format_stat(&n.stat()).lines() {
            writeln!(out, "  {line}")?;
        }
        let (kind, ttl) = kind_name(n.kind);
        match ttl {
            Some(ms) => writeln!(out, "  kind = {kind} ({ms} ms)")?,
            None => writeln!(out, "  kind = {kind}")?,
        }
        writeln!(out, "  acl = {}", acl_text(&n.acl))?;
        if with_data {
            writeln!(out, "  data = {}", data_text(n.data.as_deref()))?;
        }
    }
    writeln!(out, "----")?;
    writeln!(out, "Sessions ({}):", st.sessions.len())?;
    for (id, s) in st.sessions.iter() {
        writeln!(
            out,
            "  {} timeout {} ms, owner member {}, {} ephemeral node(s)",
            hex(id.0),
            s.timeout_ms,
            s.owner.0,
            st.tree.ephemerals_of(*id).len()
        )?;
    }
    let locks = st.locks.view();
    writeln!(out, "----")?;
    writeln!(out, "Native lock queues ({}):", locks.len())?;
    for l in &locks {
        match l.held_until {
            Some(t) => writeln!(out, "  {} (lock-delay until {})", l.path, time(t))?,
            None => writeln!(out, "  {}", l.path)?,
        }
        for e in &l.entries {
            writeln!(
                out,
                "    {} owner {} {}{}",
                e.name,
                hex(e.owner.0),
                standing_name(e.standing),
                if e.delay_ms > 0 {
                    format!(", lock-delay {} ms", e.delay_ms)
                } else {
                    String::new()
                }
            )?;
        }
    }
    Ok(())
}
