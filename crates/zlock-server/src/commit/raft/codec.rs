//! How the Raft module's records are encoded on disk: log entries (a WAL record's
//! payload), the vote, the log's purge point and a snapshot's Raft meta. One place, so
//! that what reaches the disk is decided here and pinned by the golden files
//! (`golden_tests.rs`, `golden/`).
//!
//! Today each is the postcard encoding of openraft 0.10.0-alpha.37's own serde type
//! (as openraft 0.9's were: `types.rs` checks that 0.9's data reads). An openraft
//! upgrade that changes one of those types changes these bytes; the golden files then
//! fail, and the change needs a version of its own here, with a reader for what was
//! written before.

use super::log::io_err;
use super::types::{Entry, LogId, SnapshotMeta, Vote};

/// A log entry as its WAL record's payload.
pub fn encode_entry(e: &Entry) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(e).map_err(io_err)
}

pub fn decode_entry(bytes: &[u8]) -> std::io::Result<Entry> {
    postcard::from_bytes(bytes).map_err(io_err)
}

/// The vote, as its file (`vote`) holds it.
pub fn encode_vote(v: &Vote) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(io_err)
}

pub fn decode_vote(bytes: &[u8]) -> std::io::Result<Vote> {
    postcard::from_bytes(bytes).map_err(io_err)
}

/// The log's purge point, as its file (`purged`) holds it.
pub fn encode_purged(l: &LogId) -> std::io::Result<Vec<u8>> {
    postcard::to_allocvec(l).map_err(io_err)
}

pub fn decode_purged(bytes: &[u8]) -> std::io::Result<LogId> {
    postcard::from_bytes(bytes).map_err(io_err)
}

/// What a snapshot file's payload starts with: `u32 meta length (little-endian) |
/// meta`, the snapshot's Raft meta (last log id, membership); the host's payload
/// follows (see `sm.rs`).
pub fn encode_snapshot_head(m: &SnapshotMeta) -> std::io::Result<Vec<u8>> {
    let meta = postcard::to_allocvec(m).map_err(io_err)?;
    let mut head = Vec::with_capacity(4 + meta.len());
    head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    head.extend_from_slice(&meta);
    Ok(head)
}

/// Splits a snapshot file's payload into its Raft meta and the host's payload.
pub fn split_snapshot(payload: &[u8]) -> std::io::Result<(SnapshotMeta, &[u8])> {
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
