//! openraft's type configuration for zlock, and the Txn as Raft application data.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zlock_core::Txn;

openraft::declare_raft_types!(
    /// zlock's Raft: one Txn per log entry (so a Txn's log position is its Raft index),
    /// members named by their `server.N` id, snapshots streamed from files.
    pub Zraft:
        D = Proposal,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = tokio::fs::File,
);

pub type Raft = openraft::Raft<Zraft>;
pub type LogId = openraft::LogId<u64>;
pub type Entry = openraft::Entry<Zraft>;
pub type Vote = openraft::Vote<u64>;
pub type Membership = openraft::StoredMembership<u64, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
pub type StorageError = openraft::StorageError<u64>;

/// A proposed Txn. On the wire and in the log it is the Txn's own encoding (the one the
/// standalone WAL stores), carried as bytes inside openraft's serde types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal(pub Txn);

impl Serialize for Proposal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = Vec::with_capacity(64);
        self.0.encode(&mut buf);
        s.serialize_bytes(&buf)
    }
}

impl<'de> Deserialize<'de> for Proposal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(d)?;
        Txn::decode(&bytes)
            .map(Proposal)
            .map_err(serde::de::Error::custom)
    }
}
