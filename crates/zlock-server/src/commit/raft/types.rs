//! openraft's type configuration for zlock, and the Txn as Raft application data.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zlock_core::Txn;

openraft::declare_raft_types!(
    /// zlock's Raft: one proposed batch of Txns per log entry, members named by their `server.N` id, snapshots streamed from files.
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

/// A proposed batch of Txns: one Raft log entry, so one append and one fsync for the
/// whole batch (openraft 0.9 writes each entry on its own and waits for its flush). On
/// the wire and in the log it is one byte string inside openraft's serde types:
/// [`BATCH`], the count, then each Txn's own encoding (the one the standalone WAL
/// stores) behind its length. A string that starts with the Txn's version byte instead
/// is one Txn, as entries were first written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal(pub Vec<Txn>);

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
                done.push(Proposal(std::mem::take(&mut cur)));
                bytes = 0;
            }
            bytes += n;
            cur.push(t);
        }
        if !cur.is_empty() {
            done.push(Proposal(cur));
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
                .map(|t| Proposal(vec![t]))
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
        Ok(Proposal(txns))
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

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_core::{MemberId, Origin, SessionId, TxnBody};

    fn txn(xid: i32, path_len: usize) -> Txn {
        Txn {
            origin: Origin {
                member: MemberId(2),
                session: SessionId(7),
                xid,
            },
            time_ms: 1_700_000_000_000,
            body: TxnBody::DeleteExpired {
                paths: vec!["x".repeat(path_len)],
            },
        }
    }

    fn round_trip(p: &Proposal) -> Proposal {
        let bytes = postcard::to_allocvec(p).unwrap();
        postcard::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn a_batch_round_trips_in_order() {
        let p = Proposal((0..5).map(|i| txn(i, 3)).collect());
        assert_eq!(round_trip(&p), p);
        assert_eq!(round_trip(&Proposal(Vec::new())), Proposal(Vec::new()));
    }

    #[test]
    fn an_entry_written_as_one_txn_still_reads() {
        let t = txn(1, 3);
        let mut one = Vec::new();
        t.encode(&mut one);
        assert_ne!(one[0], BATCH);
        let bytes = postcard::to_allocvec(&serde_bytes::Bytes::new(&one)).unwrap();
        let p: Proposal = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(p, Proposal(vec![t]));
    }

    #[test]
    fn a_cut_or_padded_batch_is_refused() {
        let enc = Proposal(vec![txn(1, 3), txn(2, 3)]).encode();
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
}
