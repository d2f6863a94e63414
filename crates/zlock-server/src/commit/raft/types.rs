//! openraft's type configuration for zlock, and the Txn as Raft application data.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zlock_core::Txn;

openraft::declare_raft_types!(
    /// zlock's Raft: one proposed batch of Txns per log entry, members named by their `server.N` id.
    pub Zraft:
        D = Proposal,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = super::runtime::ZRuntime,
);

pub type Raft = openraft::Raft<Zraft, super::sm::StateMachine>;
pub type LogId = openraft::type_config::alias::LogIdOf<Zraft>;
pub type Entry = openraft::type_config::alias::EntryOf<Zraft>;
pub type Vote = openraft::type_config::alias::VoteOf<Zraft>;
pub type Membership = openraft::type_config::alias::StoredMembershipOf<Zraft>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<Zraft>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<Zraft, tokio::fs::File>;
pub type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<Zraft>;
pub type Metrics = openraft::RaftMetrics<Zraft>;
/// openraft's metrics channel (its runtime's watch, read through [`WatchReceiver`]).
pub type MetricsRx = openraft::type_config::alias::WatchReceiverOf<Zraft, Metrics>;
pub use openraft::async_runtime::watch::WatchReceiver;

/// Whether the member whose metrics these are, `me`, leads now.
pub fn leads(m: &Metrics, me: u64) -> bool {
    m.state == openraft::ServerState::Leader && m.current_leader == Some(me)
}

/// Waits until `f` holds of the metrics, as tokio's `watch::Receiver::wait_for`; the
/// metrics it held of. Fails once openraft has stopped.
pub async fn wait_for(
    rx: &mut MetricsRx,
    mut f: impl FnMut(&Metrics) -> bool,
) -> Result<Metrics, openraft::async_runtime::watch::RecvError> {
    loop {
        {
            let m = rx.borrow_and_update();
            if f(&m) {
                return Ok(m.clone());
            }
        }
        rx.changed().await?;
    }
}

/// A proposed batch of Txns: one Raft log entry, so one append and one fsync for the
/// whole batch (openraft 0.9 writes each entry on its own and waits for its flush). On
/// the wire and in the log it is one byte string inside openraft's serde types:
/// [`BATCH`], the count, then each Txn's own encoding (the one the standalone WAL
/// stores) behind its length. A string that starts with the Txn's version byte instead
/// is one Txn, as entries were first written.
///
/// The second field is in memory only, never encoded: see [`AppendNote`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proposal(pub Vec<Txn>, pub AppendNote);

impl From<Vec<Txn>> for Proposal {
    fn from(txns: Vec<Txn>) -> Proposal {
        Proposal(txns, AppendNote::default())
    }
}

/// Asked by this member's Raft log as it appends a proposal this member proposed as
/// leader (`log::RaftLog::append`), whether to keep it: a leader's submitter
/// (`submit::Submitter`) has the log append a write whose predecessor was refused
/// empty. Never encoded, so never on a follower; equal to every other.
#[derive(Clone, Default)]
pub struct AppendNote(Option<std::sync::Arc<dyn OnAppend>>);

/// What [`AppendNote`] asks.
pub trait OnAppend: Send + Sync {
    /// Whether the log keeps the proposal (else it appends it empty). Asked once, in
    /// log order, on the member that proposed it; the same answer if asked again.
    fn keep(&self) -> bool;
}

impl AppendNote {
    pub fn new(on_append: std::sync::Arc<dyn OnAppend>) -> AppendNote {
        AppendNote(Some(on_append))
    }

    /// Whether the log keeps the proposal (see [`OnAppend`]).
    pub fn keep(&self) -> bool {
        self.0.as_ref().is_none_or(|a| a.keep())
    }
}

impl std::fmt::Debug for AppendNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "AppendNote(asks)"
        } else {
            "AppendNote"
        })
    }
}

impl PartialEq for AppendNote {
    fn eq(&self, _: &AppendNote) -> bool {
        true
    }
}

impl Eq for AppendNote {}

/// The first byte of a batch's encoding (never a Txn encoding's version byte).
pub const BATCH: u8 = 0xB7;

/// The most Txns in one proposal, and the bytes of Txn encodings past which a proposal
/// takes no more (one larger Txn is a proposal on its own): what a member applies under
/// one hold of its core's lock, and what one entry adds to a replication frame (see
/// `MAX_PAYLOAD_ENTRIES`).
pub const PROPOSAL_TXNS: usize = 256;
pub const PROPOSAL_BYTES: usize = 1 << 20;

impl Proposal {
    /// Splits `txns` (in order) into proposals within [`PROPOSAL_TXNS`] and
    /// [`PROPOSAL_BYTES`].
    pub fn split(txns: impl IntoIterator<Item = Txn>) -> Vec<Proposal> {
        let (mut done, mut cur, mut bytes) = (Vec::new(), Vec::new(), 0);
        // A Txn's size is its encoding's; the scratch is reused.
        let mut scratch = Vec::new();
        for t in txns {
            scratch.clear();
            t.encode(&mut scratch);
            let n = scratch.len();
            if !cur.is_empty() && (cur.len() == PROPOSAL_TXNS || bytes + n > PROPOSAL_BYTES) {
                done.push(Proposal::from(std::mem::take(&mut cur)));
                bytes = 0;
            }
            bytes += n;
            cur.push(t);
        }
        if !cur.is_empty() {
            done.push(Proposal::from(cur));
        }
        done
    }

    fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(16 + 96 * self.0.len());
        buf.push(BATCH);
        buf.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        for t in &self.0 {
            // Each Txn straight into the buffer, behind its length once known.
            let at = buf.len();
            buf.extend_from_slice(&[0; 4]);
            t.encode(&mut buf);
            let len = (buf.len() - at - 4) as u32;
            buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        buf
    }

    fn decode(bytes: &[u8]) -> Result<Proposal, String> {
        let Some((&BATCH, mut rest)) = bytes.split_first() else {
            return Txn::decode(bytes)
                .map(|t| Proposal::from(vec![t]))
                .map_err(|e| e.to_string());
        };
        let mut take = |n: usize| -> Result<&[u8], String> {
            if rest.len() < n {
                return Err(format!(
                    "proposal cut short: {n} bytes wanted, {} left",
                    rest.len()
                ));
            }
            let (a, b) = rest.split_at(n);
            rest = b;
            Ok(a)
        };
        let u32_at = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let count = u32_at(take(4)?);
        let mut txns = Vec::with_capacity(count.min(PROPOSAL_TXNS));
        for _ in 0..count {
            let len = u32_at(take(4)?);
            txns.push(Txn::decode(take(len)?).map_err(|e| e.to_string())?);
        }
        if !rest.is_empty() {
            return Err(format!("{} bytes after a proposal's last Txn", rest.len()));
        }
        Ok(Proposal::from(txns))
    }
}

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proposal of {} txns", self.0.len())
    }
}

impl Serialize for Proposal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.encode())
    }
}

impl<'de> Deserialize<'de> for Proposal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(d)?;
        Proposal::decode(&bytes).map_err(serde::de::Error::custom)
    }
}

/// The log id of entry `index` written by leader `node` in `term` (for tests).
#[cfg(test)]
pub(crate) fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(
        CommittedLeaderId {
            term,
            node_id: node,
        },
        index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_core::{MemberId, Origin, SessionId, TxnBody};

    fn txn(xid: i32, path_len: usize) -> Txn {
        let origin = Origin {
            member: MemberId(2),
            session: SessionId(7),
            xid,
        };
        let paths = vec!["x".repeat(path_len)];
        Txn::new(origin, 1_700_000_000_000, TxnBody::DeleteExpired { paths })
    }

    fn round_trip(p: &Proposal) -> Proposal {
        let bytes = postcard::to_allocvec(p).unwrap();
        postcard::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn a_batch_round_trips_in_order() {
        let p = Proposal::from((0..5).map(|i| txn(i, 3)).collect::<Vec<_>>());
        assert_eq!(round_trip(&p), p);
        assert_eq!(
            round_trip(&Proposal::from(Vec::new())),
            Proposal::from(Vec::new())
        );
    }

    #[test]
    fn an_entry_written_as_one_txn_still_reads() {
        let t = txn(1, 3);
        let mut one = Vec::new();
        t.encode(&mut one);
        assert_ne!(one[0], BATCH);
        let bytes = postcard::to_allocvec(&serde_bytes::Bytes::new(&one)).unwrap();
        let p: Proposal = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(p, Proposal::from(vec![t]));
    }

    #[test]
    fn a_cut_or_padded_batch_is_refused() {
        let enc = Proposal::from(vec![txn(1, 3), txn(2, 3)]).encode();
        for cut in [1, 5, enc.len() - 1] {
            assert!(Proposal::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut padded = enc.clone();
        padded.push(0);
        assert!(Proposal::decode(&padded).is_err());
        // A count far beyond the bytes present fails on the bytes, allocating little.
        let mut huge = vec![BATCH];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(Proposal::decode(&huge).is_err());
    }

    #[test]
    fn split_keeps_order_within_the_limits() {
        let many: Vec<Txn> = (0..600).map(|i| txn(i, 3)).collect();
        let ps = Proposal::split(many.clone());
        assert_eq!(
            ps.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
            vec![PROPOSAL_TXNS, PROPOSAL_TXNS, 600 - 2 * PROPOSAL_TXNS]
        );
        let back: Vec<Txn> = ps.into_iter().flat_map(|p| p.0).collect();
        assert_eq!(back, many);

        // By bytes: two 600 KiB Txns do not share a proposal; one larger than the
        // limit is a proposal on its own.
        let big = vec![
            txn(1, 600 << 10),
            txn(2, 600 << 10),
            txn(3, 2 << 20),
            txn(4, 1),
        ];
        let ps = Proposal::split(big);
        assert_eq!(
            ps.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
            vec![1, 1, 1, 1]
        );
        assert!(Proposal::split(Vec::new()).is_empty());
    }

    /// What a member running on openraft 0.9 wrote (log entries, the vote, the log's
    /// purge point and snapshot metas, all postcard of 0.9's types) reads the same
    /// through zlock's own records (`codec`): a member upgraded in place keeps its data.
    mod written_by_openraft_09 {
        use std::collections::{BTreeMap, BTreeSet};

        use super::*;
        use crate::commit::raft::codec;
        use openraft::{BasicNode, EntryPayload};

        openraft09::declare_raft_types!(
            Old:
                D = Proposal,
                R = (),
                NodeId = u64,
                Node = openraft09::BasicNode,
                SnapshotData = tokio::fs::File,
        );

        fn old_log_id(term: u64, node: u64, index: u64) -> openraft09::LogId<u64> {
            openraft09::LogId::new(openraft09::CommittedLeaderId::new(term, node), index)
        }

        /// `old` as 0.9 wrote it (postcard), read by today's reader of that record.
        fn reread<O: serde::Serialize, N>(old: &O, read: fn(&[u8]) -> std::io::Result<N>) -> N {
            read(&postcard::to_allocvec(old).unwrap()).unwrap()
        }

        fn nodes() -> BTreeMap<u64, String> {
            (1..=4)
                .map(|i| {
                    (
                        i,
                        format!("127.0.0.1:{}:{};participant", 2887 + i, 3887 + i),
                    )
                })
                .collect()
        }

        #[test]
        fn log_entries_read_the_same() {
            let p = Proposal::from(vec![txn(7, 3), txn(8, 5)]);
            let old = openraft09::Entry::<Old> {
                log_id: old_log_id(3, 2, 41),
                payload: openraft09::EntryPayload::Normal(p.clone()),
            };
            let new: Entry = reread(&old, codec::decode_entry);
            assert_eq!(new.log_id, log_id(3, 2, 41));
            assert!(matches!(new.payload, EntryPayload::Normal(ref q) if *q == p));

            let old = openraft09::Entry::<Old> {
                log_id: old_log_id(4, 1, 42),
                payload: openraft09::EntryPayload::Blank,
            };
            let new: Entry = reread(&old, codec::decode_entry);
            assert_eq!(new.log_id, log_id(4, 1, 42));
            assert!(matches!(new.payload, EntryPayload::Blank));

            // A joint membership with a learner: voters {1,2,3} then {2,3,4}, 4 a node.
            let old_nodes: BTreeMap<u64, openraft09::BasicNode> = nodes()
                .into_iter()
                .map(|(i, a)| (i, openraft09::BasicNode::new(a)))
                .collect();
            let configs = vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])];
            let old = openraft09::Entry::<Old> {
                log_id: old_log_id(4, 1, 43),
                payload: openraft09::EntryPayload::Membership(openraft09::Membership::new(
                    configs.clone(),
                    old_nodes,
                )),
            };
            let new: Entry = reread(&old, codec::decode_entry);
            let EntryPayload::Membership(m) = new.payload else {
                panic!("not a membership: {:?}", new.payload)
            };
            assert_eq!(m.get_joint_config(), &configs);
            let got: BTreeMap<u64, String> = m
                .nodes()
                .map(|(i, n): (&u64, &BasicNode)| (*i, n.addr.clone()))
                .collect();
            assert_eq!(got, nodes());
        }

        #[test]
        fn votes_and_log_ids_read_the_same() {
            let new = reread(
                &openraft09::Vote::<u64>::new_committed(9, 3),
                codec::decode_vote,
            );
            assert_eq!(new, Vote::new_committed(9, 3));
            let new = reread(&openraft09::Vote::<u64>::new(10, 2), codec::decode_vote);
            assert_eq!(new, Vote::new(10, 2));
            let new = reread(&Some(old_log_id(9, 3, 1000)), codec::decode_gate);
            assert_eq!(new, Some(log_id(9, 3, 1000)));
            let new = reread(&old_log_id(9, 3, 1000), codec::decode_purged);
            assert_eq!(new, log_id(9, 3, 1000));
        }

        #[test]
        fn snapshot_metas_read_the_same() {
            let old_nodes: BTreeMap<u64, openraft09::BasicNode> = nodes()
                .into_iter()
                .map(|(i, a)| (i, openraft09::BasicNode::new(a)))
                .collect();
            let old = openraft09::SnapshotMeta::<u64, openraft09::BasicNode> {
                last_log_id: Some(old_log_id(5, 1, 300)),
                last_membership: openraft09::StoredMembership::new(
                    Some(old_log_id(2, 1, 7)),
                    openraft09::Membership::new(vec![BTreeSet::from([1, 2, 3])], old_nodes),
                ),
                snapshot_id: "5-300".into(),
            };
            // A snapshot file's head: the meta's length, then the meta.
            let meta = postcard::to_allocvec(&old).unwrap();
            let mut head = (meta.len() as u32).to_le_bytes().to_vec();
            head.extend_from_slice(&meta);
            let (new, rest) = codec::split_snapshot(&head).unwrap();
            assert!(rest.is_empty());
            assert_eq!(new.last_log_id, Some(log_id(5, 1, 300)));
            assert_eq!(new.last_membership.log_id(), &Some(log_id(2, 1, 7)));
            let voters: Vec<u64> = new.last_membership.membership().voter_ids().collect();
            assert_eq!(voters, vec![1, 2, 3]);
            assert_eq!(new.last_membership.membership().nodes().count(), 4);
        }
    }
}
