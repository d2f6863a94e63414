//! The peer protocol: openraft's RPCs and forwarded proposals between members, over
//! TCP (or TLS, with `sslQuorum`) on each member's quorum port.
//!
//! A connection starts with a [`Hello`] naming the ensemble, the sender and the member
//! it means to reach; the receiver refuses (with a reason, then closes) a stranger, a
//! member of another ensemble, or a hello meant for another id. After that each request
//! frame gets one reply frame, in order; appends may be several in flight (the leader
//! writes the next before the last is answered, see [`crate::commit::raft::stream`]), any other
//! request is answered once the appends before it are. A frame is `u32 length (big-endian) |
//! postcard`; one longer than [`MAX_FRAME`] or one that does not decode closes the
//! connection with a log line. Nothing a peer sends can reach the tree except through
//! openraft (which checks terms and log positions) or as a forwarded proposal, which is
//! validated at apply like any other Txn.
//!
//! The files: this one (the protocol: hello, requests, replies, who may talk),
//! [`link`] (the bytes under it: plain TCP or TLS, `sslQuorum`), [`frame`] (how a
//! message is framed on the wire), [`server`] (answering peers) and [`client`] (a
//! connection to one member, and openraft's network over it).

mod client;
mod frame;
mod link;
mod server;

use std::collections::BTreeSet;

use openraft::errors::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

pub(in crate::commit::raft) use self::client::rpc_err;
pub use self::client::{knock, Knock, Network, Peer};
pub use self::frame::{decode_body, encode_frame, read_frame, write_frame, FrameError};
pub use self::link::{Link, LinkError, LinkRead, LinkWrite, Links};
pub use self::server::{answer_blank, read_index, serve, write_as_leader, Hooks, Local};
use super::rejoin::Standing;
use super::types::{Proposal, SnapshotMeta, Vote, Zraft};

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 64 << 20;

/// The bytes of a snapshot file one [`Request::SnapshotChunk`] carries.
const SNAPSHOT_CHUNK: usize = 4 << 20;

/// The peer protocol's version, in every [`Hello`]. 2: openraft 0.10's messages
/// (leadership transfer, snapshots sent as a file in chunks). 3: the leader stamps the
/// time of every Txn it takes (Txn encoding 3, which a member of version 2 cannot read,
/// and whose time it would not apply the same way). Members of different versions do
/// not talk: the newer one refuses the older one's hello, naming both.
pub const PROTOCOL: u32 = 3;

/// The first frame on a connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub ensemble: String,
    pub from: u64,
    pub to: u64,
    pub protocol: u32,
}

/// The hello of version 1 (no version in it), to name what refused it.
#[derive(Debug, Deserialize)]
struct HelloV1 {
    _ensemble: String,
    from: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Append(#[serde(with = "super::wire::append")] AppendEntriesRequest<Zraft>),
    Vote(#[serde(with = "super::wire::vote_request")] VoteRequest<Zraft>),
    /// Part of a snapshot file, at `offset` (0 starts a new file on this connection).
    SnapshotChunk {
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The snapshot file sent on this connection is whole: install it.
    SnapshotDone {
        #[serde(with = "super::wire::vote")]
        vote: Vote,
        #[serde(with = "super::wire::snapshot_meta")]
        meta: SnapshotMeta,
    },
    /// The leader hands leadership to the named member (see [`crate::commit::raft::HandOver`]).
    TransferLeader(#[serde(with = "super::wire::transfer")] TransferLeaderRequest<Zraft>),
    /// Proposals from a member that is not the leader, in order.
    Forward(Vec<Proposal>),
    /// Sessions active at the sending member since its last report (to the leader,
    /// whose session tracker expires).
    Touch(Vec<i64>),
    /// The leader's committed position, confirmed by a quorum (a read index).
    ReadIndex,
    /// Where the member stands: asked by a member starting blank ([`crate::commit::raft::rejoin`]).
    Standing,
    /// Whether the member leads and a quorum of voters answered it within the silent
    /// time: asked of the leader by an observer every heartbeat ([`crate::commit::raft::observers`]).
    LeaderInTouch,
    /// A client's `reconfig`, for the leader to carry out ([`crate::commit::raft::reconfig`]).
    Reconfig(super::reconfig::Change),
    /// Asked of a member that leads by a member starting blank: forget what the asker
    /// acknowledged before, and say whether the leader needs it ([`Local::forget`]).
    /// Last of the requests, so that a member that does not know it fails to decode
    /// it and closes the connection (the asker is then gated, as before).
    Forget,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Hello(Result<(), String>),
    Append(
        #[serde(with = "super::wire::append_reply")]
        Result<AppendEntriesResponse<Zraft>, RaftError<Zraft>>,
    ),
    Vote(#[serde(with = "super::wire::vote_reply")] Result<VoteResponse<Zraft>, RaftError<Zraft>>),
    /// A chunk written (`Ok`), or why not.
    SnapshotChunk(Result<(), String>),
    Snapshot(
        #[serde(with = "super::wire::snapshot_reply")] Result<SnapshotResponse<Zraft>, String>,
    ),
    TransferLeader(
        #[serde(with = "super::wire::transfer_reply")]
        Result<TransferLeaderResponse<Zraft>, String>,
    ),
    /// The last forwarded proposal's log index once all are committed and applied on the
    /// leader, or why not (possibly committed: the caller treats it as lost).
    Forward(Result<u64, ForwardError>),
    Touch,
    ReadIndex(Result<u64, String>),
    Standing(Standing),
    LeaderInTouch(bool),
    /// The configuration made, or why none was.
    Reconfig(Result<super::members::ConfigView, super::reconfig::ReconfigError>),
    /// The leader vote under which none of the asker's earlier acknowledgements are
    /// needed; `None`: they may be (see [`crate::commit::raft::rejoin`]).
    Forgotten(#[serde(with = "super::wire::opt_vote")] Option<Vote>),
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum ForwardError {
    #[error("member {0} is not the leader")]
    NotLeader(u64),
    #[error("{0}")]
    Failed(String),
    /// Never reached the member: safe to send elsewhere.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The leader's Raft stopped (its log failed).
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// Who this member is and who may talk to it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub ensemble: String,
    pub me: u64,
    pub members: BTreeSet<u64>,
    /// Any member id may talk, not only `members` (reconfiguration: a member being
    /// added, or one added since this member started, is not in its configuration).
    pub open: bool,
    /// How connections to and from other members are secured (`sslQuorum`).
    pub links: Links,
}

#[cfg(test)]
mod link_tests;
