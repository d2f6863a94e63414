//! How the Raft module's records are encoded on disk: log entries (a WAL record's
//! payload), the vote, the log's purge point, the catch-up gate and a snapshot's Raft
//! meta. One place, so that what reaches the disk is decided here, by zlock's own
//! types, and pinned by the golden files (`golden_tests.rs`, `golden/`) and the data directories of earlier
//! builds (`data_dir_tests.rs`).
//!
//! The records are zlock's own serde types ([`v1`]), postcard-encoded, converted to and
//! from openraft's in this module only. openraft 0.10 is an alpha whose types change
//! between releases (0.10's `SnapshotMeta` dropped its `snapshot_id` and keeps an empty
//! slot for it on the wire); with records of our own, such a change cannot alter what
//! is on disk: the conversions below stop compiling instead, and are fixed here.
//!
//! Version 1 is laid out field for field as openraft's own serde types were (0.9 and
//! 0.10.0-alpha.37: the same postcard bytes), so every data directory written before
//! these types existed is version 1 and reads unchanged. The version of a record is the
//! version of the file that holds it: the WAL segment's and the small files' headers
//! (`zlock_store`, which refuses a version it does not know with the offset of the
//! field). A change to a record's layout is a new module here (`v2`), a new file version
//! for new files, and a reader kept for `v1`; the golden files then change in the same
//! commit, and a data directory of the older build stays under `golden/data`.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{BasicNode, EntryPayload};
use serde::{Deserialize, Serialize};

use super::log::io_err;
use super::types::{CommittedLeaderId, Entry, LogId, Proposal, SnapshotMeta, Vote};

/// A configuration as openraft holds it.
type Membership = openraft::Membership<u64, BasicNode>;

/// Version 1 of each record: the layouts every zlock build so far has written.
pub mod v1 {
    use super::*;

    /// A log entry's position: the term and member of the leader that wrote it, and its
    /// index.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct LogId {
        pub term: u64,
        pub leader: u64,
        pub index: u64,
    }

    /// A member's vote: for `member` in `term`; `committed` once a quorum granted it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Vote {
        pub term: u64,
        pub member: u64,
        pub committed: bool,
    }

    /// A member's address in the configuration (`host:peerPort:electionPort;role`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Node {
        pub addr: String,
    }

    /// A configuration: the voter sets (two during a joint change) and every member's
    /// address (a member in `nodes` but in no voter set is an observer).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Config {
        pub voters: Vec<BTreeSet<u64>>,
        pub nodes: BTreeMap<u64, Node>,
    }

    /// What an entry carries. The variants' order is their tag on disk.
    #[derive(Debug, Serialize)]
    pub enum PayloadRef<'a> {
        /// A new leader's first entry.
        Blank,
        /// A batch of Txns (its own versioned encoding, `types::Proposal`).
        Batch(&'a Proposal),
        Config(Config),
    }

    #[derive(Debug, Deserialize)]
    pub enum Payload {
        Blank,
        Batch(Proposal),
        Config(Config),
    }

    /// An entry as written; [`EntryOwned`] as read.
    #[derive(Debug, Serialize)]
    pub struct EntryRef<'a> {
        pub log_id: LogId,
        pub payload: PayloadRef<'a>,
    }

    #[derive(Debug, Deserialize)]
    pub struct EntryOwned {
        pub log_id: LogId,
        pub payload: Payload,
    }

    /// A snapshot's Raft meta: the last entry it holds, the configuration in force
    /// there and the entry that made it. `reserved` is an identifier openraft 0.9 wrote
    /// (`"<term>-<index>"`); written empty, ignored on read.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct SnapshotMeta {
        pub last: Option<LogId>,
        pub config_at: Option<LogId>,
        pub config: Config,
        pub reserved: String,
    }
}

pub(super) fn to_v1_id(l: &LogId) -> v1::LogId {
    v1::LogId {
        term: l.leader_id.term,
        leader: l.leader_id.node_id,
        index: l.index,
    }
}

pub(super) fn from_v1_id(l: v1::LogId) -> LogId {
    LogId::new(
        CommittedLeaderId {
            term: l.term,
            node_id: l.leader,
        },
        l.index,
    )
}

fn to_v1_config(m: &Membership) -> v1::Config {
    v1::Config {
        voters: m.get_joint_config().clone(),
        nodes: m
            .nodes()
            .map(|(id, n)| {
                let addr = n.addr.clone();
                (*id, v1::Node { addr })
            })
            .collect(),
    }
}

fn from_v1_config(c: v1::Config) -> std::io::Result<Membership> {
    let nodes: BTreeMap<u64, BasicNode> = c
        .nodes
        .into_iter()
        .map(|(id, n)| (id, BasicNode { addr: n.addr }))
        .collect();
    Membership::new(c.voters, nodes).map_err(io_err)
}

pub(super) fn to_v1_entry(e: &Entry) -> v1::EntryRef<'_> {
    let payload = match &e.payload {
        EntryPayload::Blank => v1::PayloadRef::Blank,
        EntryPayload::Normal(p) => v1::PayloadRef::Batch(p),
        EntryPayload::Membership(m) => v1::PayloadRef::Config(to_v1_config(m)),
    };
    v1::EntryRef {
        log_id: to_v1_id(&e.log_id),
        payload,
    }
}

pub(super) fn from_v1_entry(record: v1::EntryOwned) -> std::io::Result<Entry> {
    let payload = match record.payload {
        v1::Payload::Blank => EntryPayload::Blank,
        v1::Payload::Batch(p) => EntryPayload::Normal(p),
        v1::Payload::Config(c) => EntryPayload::Membership(from_v1_config(c)?),
    };
    Ok(Entry {
        log_id: from_v1_id(record.log_id),
        payload,
    })
}

pub(super) fn to_v1_vote(v: &Vote) -> v1::Vote {
    v1::Vote {
        term: v.leader_id.term,
        member: v.leader_id.node_id,
        committed: v.committed,
    }
}

pub(super) fn from_v1_vote(v: v1::Vote) -> Vote {
    if v.committed {
        Vote::new_committed(v.term, v.member)
    } else {
        Vote::new(v.term, v.member)
    }
}

pub(super) fn to_v1_meta(m: &SnapshotMeta) -> v1::SnapshotMeta {
    v1::SnapshotMeta {
        last: m.last_log_id.as_ref().map(to_v1_id),
        config_at: m.last_membership.log_id().as_ref().map(to_v1_id),
        config: to_v1_config(m.last_membership.membership()),
        reserved: String::new(),
    }
}

pub(super) fn from_v1_meta(m: v1::SnapshotMeta) -> std::io::Result<SnapshotMeta> {
    Ok(SnapshotMeta {
        last_log_id: m.last.map(from_v1_id),
        last_membership: openraft::StoredMembership::new(
            m.config_at.map(from_v1_id),
            from_v1_config(m.config)?,
        ),
    })
}

/// A log entry as its WAL record's payload.
pub fn encode_entry(e: &Entry) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(&to_v1_entry(e)).map_err(io_err)
}

pub fn decode_entry(bytes: &[u8]) -> std::io::Result<Entry> {
    from_v1_entry(read_entry(bytes)?)
}

/// A log entry's WAL record payload as zlock's own record, unconverted: for tools that
/// show what is on disk (`zlock data dump-log`) without going through openraft's types.
pub fn read_entry(bytes: &[u8]) -> std::io::Result<v1::EntryOwned> {
    postcard::from_bytes(bytes).map_err(io_err)
}

/// The vote, as its file (`vote`) holds it.
pub fn encode_vote(v: &Vote) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(&to_v1_vote(v)).map_err(io_err)
}

pub fn decode_vote(bytes: &[u8]) -> std::io::Result<Vote> {
    postcard::from_bytes(bytes)
        .map(from_v1_vote)
        .map_err(io_err)
}

/// The log's purge point, as its file (`purged`) holds it.
pub fn encode_purged(l: &LogId) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(&to_v1_id(l)).map_err(io_err)
}

pub fn decode_purged(bytes: &[u8]) -> std::io::Result<LogId> {
    postcard::from_bytes(bytes).map(from_v1_id).map_err(io_err)
}

/// The catch-up gate's target, as its file (`rejoin`) holds it (`None`: open).
pub fn encode_gate(target: &Option<LogId>) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(&target.as_ref().map(to_v1_id)).map_err(io_err)
}

pub fn decode_gate(bytes: &[u8]) -> std::io::Result<Option<LogId>> {
    let target: Option<v1::LogId> = postcard::from_bytes(bytes).map_err(io_err)?;
    Ok(target.map(from_v1_id))
}

/// What a snapshot file's payload starts with: `u32 meta length (little-endian) |
/// meta`, the snapshot's Raft meta (last log id, membership); the host's payload
/// follows (see `sm.rs`).
pub fn encode_snapshot_head(m: &SnapshotMeta) -> std::io::Result<Vec<u8>> {
    let meta = postcard::to_allocvec(&to_v1_meta(m)).map_err(io_err)?;
    let mut head = Vec::with_capacity(4 + meta.len());
    head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    head.extend_from_slice(&meta);
    Ok(head)
}

/// Splits a snapshot file's payload into its Raft meta and the host's payload.
pub fn split_snapshot(payload: &[u8]) -> std::io::Result<(SnapshotMeta, &[u8])> {
    let (meta, host) = read_snapshot_head(payload)?;
    Ok((from_v1_meta(meta)?, host))
}

/// Like [`split_snapshot`], with the meta as zlock's own record, unconverted (for tools
/// that show it, `zlock data dump-snapshot`).
pub fn read_snapshot_head(payload: &[u8]) -> std::io::Result<(v1::SnapshotMeta, &[u8])> {
    if payload.len() < 4 {
        return Err(io_err("snapshot payload cut short"));
    }
    let n = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
    let rest = &payload[4..];
    if rest.len() < n {
        return Err(io_err("snapshot meta cut short"));
    }
    let meta = postcard::from_bytes(&rest[..n]).map_err(io_err)?;
    Ok((meta, &rest[n..]))
}
