//! A member's Raft directory made for a new ensemble from a restored state
//! (`crate::restore`), before the member first starts.
//!
//! Every member of the new ensemble gets the same directory: one snapshot at log
//! position [`SEED_TERM`]/`index` whose membership is the new ensemble's (its voters and
//! observers, from their `server.N` lines), the log purged through that position, and a
//! vote for the lowest voter in that term. Started on it, the members are not blank (no
//! `rejoin` question is asked), agree on the log's start, and elect a leader in the next
//! term; the state machine installs the snapshot as it does after a restart. The
//! directory also keeps the new ensemble's identity, which goes into the ensemble's name
//! that the peer link's hello compares: a member of the ensemble the backup came from,
//! even on the same addresses, is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::BasicNode;

use super::codec::{encode_purged, encode_snapshot_head, encode_vote};
use super::log::io_err;
use super::types::{CommittedLeaderId, LogId, SnapshotMeta, Vote};
use crate::config::MemberSpec;

/// The term of the seeded log position.
pub const SEED_TERM: u64 = 1;

/// Snapshot files kept (as the state machine keeps them).
const KEEP: usize = 2;

/// Writes member directories' Raft part: the snapshot (`snapshot_dir`) of `payload`,
/// the host's state after entry `index`, and the purge point, vote and the new
/// ensemble's `identity` (`meta_dir`). Returns the snapshot file.
pub fn seed(
    snapshot_dir: &Path,
    meta_dir: &Path,
    members: &BTreeMap<u64, MemberSpec>,
    (index, identity): (u64, &str),
    payload: &[u8],
) -> std::io::Result<PathBuf> {
    let voters: BTreeSet<u64> = members
        .values()
        .filter(|m| !m.observer)
        .map(|m| m.id)
        .collect();
    let first = *voters
        .iter()
        .next()
        .ok_or_else(|| io_err("an ensemble needs at least one participant"))?;
    let nodes: BTreeMap<u64, BasicNode> = members
        .iter()
        .map(|(id, m)| (*id, BasicNode::new(super::members::node_text(m))))
        .collect();
    let at = LogId::new(
        CommittedLeaderId {
            term: SEED_TERM,
            node_id: first,
        },
        index,
    );
    let membership = openraft::Membership::new(vec![voters], nodes).map_err(io_err)?;
    let meta = SnapshotMeta {
        last_log_id: Some(at),
        last_membership: openraft::StoredMembership::new(Some(at), membership),
    };
    let head = encode_snapshot_head(&meta)?;
    std::fs::create_dir_all(meta_dir)?;
    let path = zlock_store::snapshot::write_with(snapshot_dir, index, KEEP, |w| {
        w.write_all(&head)?;
        w.write_all(payload)
    })
    .map_err(io_err)?;
    let mut purged = zlock_store::MetaFile::open(meta_dir, "purged").map_err(io_err)?;
    purged.store(&encode_purged(&at)?).map_err(io_err)?;
    let mut vote = zlock_store::MetaFile::open(meta_dir, "vote").map_err(io_err)?;
    vote.store(&encode_vote(&Vote::new(SEED_TERM, first))?)
        .map_err(io_err)?;
    let mut id =
        zlock_store::MetaFile::open(meta_dir, crate::ensemble::IDENTITY_FILE).map_err(io_err)?;
    id.store(identity.as_bytes()).map_err(io_err)?;
    Ok(path)
}
