//! Golden bytes: what zlock writes to disk ([`codec`]: log entries, the vote, the
//! purge point, a snapshot's head) and sends between members ([`peer`]'s frames), for
//! fixed values, checked against the files in `golden/` (one file per record, its
//! exact bytes). The values are built here; their encodings must equal the files, and
//! the files must decode to the values again.
//!
//! The disk records (`codec::v1`) and openraft's messages inside the frames (`wire`)
//! are zlock's own types, laid out as openraft's serde types were when zlock first
//! wrote and sent them, converted to openraft's in those two modules only. An edit to
//! one of them changes these bytes; this test is what notices. When it fails, do not just regenerate the
//! files: data already on disk, and members still running the older build, have the old
//! bytes. Give the format a new version (the peer `PROTOCOL`; a version of the record
//! in `codec.rs` with a reader for the old one), then regenerate the files:
//!
//! ```text
//! ZLOCK_BLESS=1 cargo test -p zlock-server --lib golden
//! ```
//!
//! and commit them with the change. Nothing regenerates them without `ZLOCK_BLESS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::errors::Fatal;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, EntryPayload, Membership as Config};
use zlock_core::{MemberId, Origin, SessionId, Txn, TxnBody};
use zlock_proto::records::{Acl, CreateRequest, Id, LockRequest, SetDataRequest};
use zlock_proto::{OpCode, Request as ZkRequest};

use super::codec;
use super::members::ConfigView;
use super::peer::{self, ForwardError, Hello, Reply, Request};
use super::reconfig::{Change, ReconfigError};
use super::rejoin::Standing;
use super::types::{log_id, Entry, Membership, Proposal, SnapshotMeta, Vote};
use crate::config::MemberSpec;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/commit/raft/golden")
}

fn origin(member: u64, session: i64, xid: i32) -> Origin {
    Origin {
        member: MemberId(member),
        session: SessionId(session),
        xid,
    }
}

/// A batch with each kind of Txn body, as a member's sequencer proposes it.
fn proposal() -> Proposal {
    let t = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let auth = Arc::new(vec![Id::new("ip", "127.0.0.1")]);
    let session = 0x0100_0000_0000_0001;
    Proposal::from(vec![
        Txn {
            origin: origin(1, 0, 0),
            time_ms: t,
            clock: zlock_core::TxnClock::Leader,
            body: TxnBody::CreateSession {
                passwd: (0..16).collect(),
                timeout_ms: 30_000,
            },
        },
        Txn::request(
            origin(1, session, 1),
            t + 1,
            auth.clone(),
            ZkRequest::Create(
                OpCode::Create2,
                CreateRequest {
                    path: "/locks/orders".into(),
                    data: Some(b"owner=a".to_vec()),
                    acl: Acl::open_unsafe(),
                    flags: 0,
                },
            ),
        ),
        Txn::request(
            origin(2, session + 1, 7),
            t + 2,
            auth.clone(),
            ZkRequest::Lock(LockRequest {
                path: "/locks/orders".into(),
                prefix: "_c_0f1e2d3c-lock-".into(),
                data: None,
                acl: Acl::open_unsafe(),
                mode: 0,
                leases: 1,
                flags: 0,
                release: String::new(),
                lock_delay_ms: 5_000,
            }),
        ),
        Txn::request(
            origin(1, session, 2),
            t + 3,
            auth,
            ZkRequest::SetData(SetDataRequest {
                path: "/locks/orders".into(),
                data: Some(vec![0, 1, 2, 255]),
                version: 0,
            }),
        ),
        Txn {
            origin: origin(1, 0, 0),
            time_ms: t + 4,
            clock: zlock_core::TxnClock::Leader,
            body: TxnBody::DeleteExpired {
                paths: vec!["/ttl/a".into(), "/containers/b".into()],
            },
        },
        Txn {
            origin: origin(3, session, 3),
            time_ms: t + 5,
            clock: zlock_core::TxnClock::Leader,
            body: TxnBody::MoveSession {
                session_id: SessionId(session),
                passwd: (16..32).collect(),
            },
        },
        Txn {
            origin: origin(1, 0, 0),
            time_ms: t + 6,
            clock: zlock_core::TxnClock::Leader,
            body: TxnBody::CloseSession {
                session_id: SessionId(session + 1),
            },
        },
    ])
}

fn spec(id: u64, observer: bool) -> MemberSpec {
    MemberSpec {
        id,
        host: "127.0.0.1".into(),
        quorum_port: 2887 + id as u16,
        election_port: 3887 + id as u16,
        observer,
        client: Some((None, 2180 + id as u16)),
    }
}

/// A joint membership (voters {1,2,3} then {2,3,4}) with an observer (5) as a learner,
/// each node holding its `server.N` value.
fn config() -> Config<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = (1..=5)
        .map(|i| {
            (
                i,
                BasicNode::new(super::members::node_text(&spec(i, i == 5))),
            )
        })
        .collect();
    let configs = vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])];
    Config::new(configs, nodes).unwrap()
}

fn entries() -> [Entry; 3] {
    [
        Entry {
            log_id: log_id(4, 2, 41),
            payload: EntryPayload::Normal(proposal()),
        },
        Entry {
            log_id: log_id(5, 3, 42),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(5, 3, 43),
            payload: EntryPayload::Membership(config()),
        },
    ]
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(5, 3, 300)),
        last_membership: Membership::new(Some(log_id(5, 3, 43)), config()),
    }
}

/// Checks each record's bytes against its file (or, blessing, writes the file).
struct Golden {
    bless: bool,
    checked: BTreeSet<String>,
    failures: Vec<String>,
}

impl Golden {
    fn check<T: Debug>(
        &mut self,
        name: &str,
        value: &T,
        encode: impl Fn(&T) -> Vec<u8>,
        decode: impl Fn(&[u8]) -> Result<T, String>,
    ) {
        assert!(self.checked.insert(name.to_owned()), "{name} checked twice");
        let bytes = encode(value);
        let path = golden_dir().join(format!("{name}.bin"));
        if self.bless {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            return;
        }
        let Ok(file) = std::fs::read(&path) else {
            self.failures
                .push(format!("{name}: no file {}", path.display()));
            return;
        };
        if file != bytes {
            self.failures.push(format!(
                "{name}: the bytes changed\n  file: {}\n  now:  {}",
                hex(&file),
                hex(&bytes)
            ));
        }
        match decode(&file) {
            Ok(v) if format!("{v:?}") == format!("{value:?}") => {}
            Ok(v) => self.failures.push(format!(
                "{name}: the file decodes to another value\n  file: {v:?}\n  want: {value:?}"
            )),
            Err(e) => self
                .failures
                .push(format!("{name}: the file no longer decodes: {e}")),
        }
    }

    fn disk<T: Debug>(
        &mut self,
        name: &str,
        value: &T,
        encode: fn(&T) -> std::io::Result<Vec<u8>>,
        decode: fn(&[u8]) -> std::io::Result<T>,
    ) {
        self.check(
            name,
            value,
            |v| encode(v).unwrap(),
            |b| decode(b).map_err(|e| e.to_string()),
        );
    }

    fn frame<T: Debug + serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        name: &str,
        value: &T,
    ) {
        self.check(
            &format!("frame_{name}"),
            value,
            |v| peer::encode_frame(v).unwrap(),
            |b| {
                let (len, body) = b.split_at_checked(4).ok_or("no length")?;
                if u32::from_be_bytes(len.try_into().unwrap()) as usize != body.len() {
                    return Err("the length does not match the body".into());
                }
                peer::decode_body(body).map_err(|e| e.to_string())
            },
        );
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn disk_records(g: &mut Golden) {
    let [normal, blank, membership] = entries();
    let (enc, dec) = (codec::encode_entry, codec::decode_entry);
    g.disk("entry_normal", &normal, enc, dec);
    g.disk("entry_blank", &blank, enc, dec);
    g.disk("entry_membership", &membership, enc, dec);
    let (enc, dec) = (codec::encode_vote, codec::decode_vote);
    g.disk("vote_committed", &Vote::new_committed(9, 3), enc, dec);
    g.disk("vote_uncommitted", &Vote::new(10, 2), enc, dec);
    g.disk(
        "purged",
        &log_id(9, 3, 1000),
        codec::encode_purged,
        codec::decode_purged,
    );
    let (enc, dec) = (codec::encode_gate, codec::decode_gate);
    g.disk("gate_closed", &Some(log_id(9, 3, 1200)), enc, dec);
    g.disk("gate_open", &None, enc, dec);
    g.check(
        "snapshot_head",
        &snapshot_meta(),
        |m| codec::encode_snapshot_head(m).unwrap(),
        |b| match codec::split_snapshot(b) {
            Ok((m, [])) => Ok(m),
            Ok((_, rest)) => Err(format!("{} bytes after the meta", rest.len())),
            Err(e) => Err(e.to_string()),
        },
    );
}

fn requests(g: &mut Golden) {
    g.frame(
        "hello",
        &Hello {
            ensemble: "1=127.0.0.1:2888,2=127.0.0.1:2889,3=127.0.0.1:2890".into(),
            from: 2,
            to: 1,
            protocol: peer::PROTOCOL,
        },
    );
    g.frame(
        "request_append",
        &Request::Append(AppendEntriesRequest {
            vote: Vote::new_committed(5, 3),
            prev_log_id: Some(log_id(4, 2, 40)),
            entries: entries().into(),
            leader_commit: Some(log_id(4, 2, 40)),
        }),
    );
    g.frame(
        "request_append_heartbeat",
        &Request::Append(AppendEntriesRequest {
            vote: Vote::new_committed(5, 3),
            prev_log_id: Some(log_id(5, 3, 43)),
            entries: Vec::new(),
            leader_commit: Some(log_id(5, 3, 43)),
        }),
    );
    g.frame(
        "request_vote",
        &Request::Vote(VoteRequest::new(Vote::new(6, 1), Some(log_id(5, 3, 43)))),
    );
    let mut transfer_vote = VoteRequest::new(Vote::new(6, 2), Some(log_id(5, 3, 43)));
    transfer_vote.leadership_transfer = true;
    g.frame("request_vote_transfer", &Request::Vote(transfer_vote));
    g.frame(
        "request_snapshot_chunk",
        &Request::SnapshotChunk {
            offset: 4 << 20,
            data: (0..=255).collect(),
        },
    );
    g.frame(
        "request_snapshot_done",
        &Request::SnapshotDone {
            vote: Vote::new_committed(5, 3),
            meta: snapshot_meta(),
        },
    );
    g.frame(
        "request_transfer_leader",
        &Request::TransferLeader(TransferLeaderRequest::new(
            Vote::new_committed(5, 3),
            1,
            Some(log_id(5, 3, 43)),
        )),
    );
    g.frame(
        "request_forward",
        &Request::Forward(vec![proposal(), Proposal::from(Vec::new())]),
    );
    g.frame(
        "request_touch",
        &Request::Touch(vec![0x0100_0000_0000_0001, 0x0200_0000_0000_0002, -1]),
    );
    g.frame("request_read_index", &Request::ReadIndex);
    g.frame("request_standing", &Request::Standing);
    g.frame("request_leader_in_touch", &Request::LeaderInTouch);
    g.frame("request_forget", &Request::Forget);
    g.frame(
        "request_reconfig",
        &Request::Reconfig(Change {
            joining: Some("server.4=127.0.0.1:2891:3891:participant;2184".into()),
            leaving: Some("1".into()),
            new_members: None,
            from_config: 0x1_0000_002b,
            authorized: true,
        }),
    );
}

fn standing() -> Standing {
    Standing {
        vote: Some(Vote::new_committed(5, 3)),
        last_log_id: Some(log_id(5, 3, 43)),
        leads: true,
        voters: [0b1110, 0, 0, 1 << 63],
    }
}

fn replies(g: &mut Golden) {
    g.frame("reply_hello_ok", &Reply::Hello(Ok(())));
    g.frame(
        "reply_hello_refused",
        &Reply::Hello(Err("this is member 1, not 4".into())),
    );
    let append = |r| Reply::Append(Ok(r));
    g.frame(
        "reply_append_success",
        &append(AppendEntriesResponse::Success),
    );
    g.frame(
        "reply_append_partial",
        &append(AppendEntriesResponse::PartialSuccess(Some(log_id(
            5, 3, 42,
        )))),
    );
    g.frame(
        "reply_append_conflict",
        &append(AppendEntriesResponse::Conflict),
    );
    g.frame(
        "reply_append_higher_vote",
        &append(AppendEntriesResponse::HigherVote(Vote::new(7, 2))),
    );
    g.frame(
        "reply_append_stopped",
        &Reply::Append(Err(Fatal::Stopped.into())),
    );
    g.frame(
        "reply_vote",
        &Reply::Vote(Ok(VoteResponse::new(
            Vote::new(6, 1),
            Some(log_id(5, 3, 43)),
            true,
        ))),
    );
    g.frame("reply_snapshot_chunk", &Reply::SnapshotChunk(Ok(())));
    g.frame(
        "reply_snapshot",
        &Reply::Snapshot(Ok(SnapshotResponse::new(Vote::new_committed(5, 3)))),
    );
    g.frame("reply_transfer_leader", &Reply::TransferLeader(Ok(Ok(()))));
    g.frame(
        "reply_transfer_leader_not_flushed",
        &Reply::TransferLeader(Ok(Err(
            openraft::raft::TransferLeaderError::LogNotFlushed {
                expected: Some(log_id(5, 3, 43)),
                actual: Some(log_id(5, 3, 41)),
            },
        ))),
    );
    g.frame("reply_forward", &Reply::Forward(Ok(43)));
    g.frame(
        "reply_forward_not_leader",
        &Reply::Forward(Err(ForwardError::NotLeader(2))),
    );
    g.frame("reply_touch", &Reply::Touch);
    g.frame("reply_read_index", &Reply::ReadIndex(Ok(43)));
    g.frame("reply_standing", &Reply::Standing(standing()));
    g.frame("reply_leader_in_touch", &Reply::LeaderInTouch(true));
    g.frame(
        "reply_forgotten",
        &Reply::Forgotten(Some(Vote::new_committed(5, 3))),
    );
    g.frame("reply_forgotten_none", &Reply::Forgotten(None));
    g.frame(
        "reply_reconfig",
        &Reply::Reconfig(Ok(ConfigView {
            members: (1..=5).map(|i| spec(i, i == 5)).collect(),
            version: 43,
        })),
    );
    g.frame(
        "reply_reconfig_refused",
        &Reply::Reconfig(Err(ReconfigError::NotLeader(2))),
    );
}

#[test]
fn what_zlock_writes_and_sends_has_not_changed() {
    let mut g = Golden {
        bless: std::env::var_os("ZLOCK_BLESS").is_some_and(|v| v == "1"),
        checked: BTreeSet::new(),
        failures: Vec::new(),
    };
    disk_records(&mut g);
    requests(&mut g);
    replies(&mut g);
    if g.bless {
        eprintln!(
            "ZLOCK_BLESS=1: wrote {} golden files to {}",
            g.checked.len(),
            golden_dir().display()
        );
        return;
    }
    // A file no record is checked against is a record that lost its check.
    let files = std::fs::read_dir(golden_dir()).into_iter().flatten();
    for f in files {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".bin") {
            if !g.checked.contains(stem) {
                g.failures
                    .push(format!("{name}: a golden file that nothing checks"));
            }
        }
    }
    assert!(
        g.failures.is_empty(),
        "zlock's on-disk or peer-wire format changed (an openraft upgrade, or a changed \
         serde type). Data already written, and members on the older build, have the old \
         bytes: bump the format's version (peer PROTOCOL; a record version in codec.rs) and \
         keep a reader for the old bytes, then regenerate the files with \
         `ZLOCK_BLESS=1 cargo test -p zlock-server --lib golden` (see golden_tests.rs).\n{}",
        g.failures.join("\n")
    );
}
