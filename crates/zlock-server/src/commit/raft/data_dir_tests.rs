//! Data written by an earlier build still reads: `golden/data/<build>/` holds a
//! member's Raft directory (the WAL's segments under `log/`, the `vote` and `purged`
//! files, a snapshot under `snapshots/`) as a build wrote it, through the server's own
//! code ([`RaftLog`], [`StateMachine`], with the core's `State` as host), for the
//! history [`history`] builds. The test opens every such directory with today's code and
//! finds the same entries, vote, purge point, snapshot and state.
//!
//! A directory is written once and never regenerated: it stands for what members of
//! that build have on disk. A build that changes a format adds its own directory
//! (`ZLOCK_WRITE_DATA_DIR=<name> cargo test -p zlock-server --lib data_dir`, which
//! refuses a name that exists), and every older one must still read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::{EntryPayload, Membership as Config, RaftSnapshotBuilder};
use zlock_core::{LogIndex, MemberId, Origin, SessionId, State, Txn, TxnBody, TxnClock};
use zlock_proto::records::{Acl, CreateRequest, Id, LockRequest, SetDataRequest};
use zlock_proto::{OpCode, Request as ZkRequest};

use super::log::{open_wal, RaftLog};
use super::sm::StateMachine;
use super::types::{log_id, Entry, Membership, Proposal, Vote, Zraft};
use crate::commit::{Apply, Entry as CommitEntry, SnapshotJob, Snapshots};

fn data_dirs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commit/raft/golden/data")
}

/// The entry the snapshot is taken at, and the last one purged behind it.
const SNAPSHOT_AT: usize = 4;
const PURGED_THROUGH: usize = 3;

fn vote() -> Vote {
    Vote::new_committed(2, 2)
}

fn voters(ids: &[u64]) -> Config<u64, openraft::BasicNode> {
    let nodes: std::collections::BTreeMap<u64, openraft::BasicNode> = ids
        .iter()
        .map(|i| {
            (
                *i,
                openraft::BasicNode::new(format!("127.0.0.1:{}", 2887 + i)),
            )
        })
        .collect();
    Config::new(vec![ids.iter().copied().collect()], nodes).unwrap()
}

/// The directories written before leaders stamped Txn time (Txn encoding 2): their
/// Txns read as [`TxnClock::Proposer`]. Every later one holds [`TxnClock::Leader`] Txns.
const PROPOSER_TIME_DIRS: &[&str] = &["zlock-0.1.0-openraft-0.10.0-alpha.37"];

fn clock_of(dir_name: &str) -> TxnClock {
    if PROPOSER_TIME_DIRS.contains(&dir_name) {
        TxnClock::Proposer
    } else {
        TxnClock::Leader
    }
}

/// The history the directories hold: the initial membership, a leader's blank entry,
/// sessions created, nodes and native locks (one held, one waiting), a new leader, a
/// membership change, writes, and the holder's session expired (the waiter granted);
/// its Txns of `clock`, as the build that wrote a directory logged them.
fn history(clock: TxnClock) -> Vec<Entry> {
    let mut entries = history_txns();
    for e in &mut entries {
        if let EntryPayload::Normal(Proposal(txns, _)) = &mut e.payload {
            for t in txns {
                t.clock = clock;
            }
        }
    }
    entries
}

fn history_txns() -> Vec<Entry> {
    let t0 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let auth = Arc::new(vec![Id::new("ip", "127.0.0.1")]);
    // Sessions take their ids from the member and the zxid that created them.
    let s1 = State::session_id_for(MemberId(1), zlock_core::Zxid(1));
    let s2 = State::session_id_for(MemberId(2), zlock_core::Zxid(2));
    let at = |m: u64, s: SessionId, xid: i32| Origin {
        member: MemberId(m),
        session: s,
        xid,
    };
    let req = |o, dt: i64, r| Txn::request(o, t0 + dt, auth.clone(), r);
    let create = |path: &str, flags| CreateRequest {
        path: path.into(),
        data: Some(path.as_bytes().to_vec()),
        acl: Acl::open_unsafe(),
        flags,
    };
    let lock = |m, s, xid, dt| {
        req(
            at(m, s, xid),
            dt,
            ZkRequest::Lock(LockRequest::exclusive("/app/lock", "_c_0f1e-lock-")),
        )
    };
    let session = |m: u64, dt: i64| {
        let body = TxnBody::CreateSession {
            passwd: vec![m as u8; 16],
            timeout_ms: 10_000,
        };
        Txn::new(at(m, SessionId::NONE, 1), t0 + dt, body)
    };
    let normal = |term, node, index, txns| Entry {
        log_id: log_id(term, node, index),
        payload: EntryPayload::Normal(Proposal::from(txns)),
    };
    let blank = |term, node, index| Entry {
        log_id: log_id(term, node, index),
        payload: EntryPayload::Blank,
    };
    let membership = |term, node, index, ids: &[u64]| Entry {
        log_id: log_id(term, node, index),
        payload: EntryPayload::Membership(voters(ids)),
    };
    let ephemeral = 1;
    let sequential = 2;
    vec![
        membership(0, 0, 0, &[1, 2, 3]),
        blank(1, 1, 1),
        normal(1, 1, 2, vec![session(1, 0), session(2, 1)]),
        normal(
            1,
            1,
            3,
            vec![
                req(
                    at(1, s1, 1),
                    2,
                    ZkRequest::Create(OpCode::Create, create("/app", 0)),
                ),
                req(
                    at(1, s1, 2),
                    3,
                    ZkRequest::Create(OpCode::Create2, create("/app/e", ephemeral)),
                ),
                lock(1, s1, 3, 4),
                lock(2, s2, 1, 5),
            ],
        ),
        blank(2, 2, 4),
        membership(2, 2, 5, &[1, 2, 3, 4]),
        normal(
            2,
            2,
            6,
            vec![
                req(
                    at(2, s2, 2),
                    6,
                    ZkRequest::SetData(SetDataRequest {
                        path: "/app".into(),
                        data: Some(b"v1".to_vec()),
                        version: 0,
                    }),
                ),
                req(
                    at(2, s2, 3),
                    7,
                    ZkRequest::Create(OpCode::Create, create("/app/q-", sequential)),
                ),
            ],
        ),
        normal(
            2,
            2,
            7,
            vec![Txn::new(
                at(2, SessionId::NONE, 0),
                t0 + 20_000,
                TxnBody::CloseSession { session_id: s1 },
            )],
        ),
    ]
}

/// The core's state as the server's host keeps it.
#[derive(Clone)]
struct Host(Arc<Mutex<State>>);

impl Host {
    fn new() -> Host {
        Host(Arc::new(Mutex::new(State::new(
            zlock_core::Config::default(),
        ))))
    }
}

impl Apply for Host {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, CommitEntry<'_>)>) {
        let mut s = self.0.lock().unwrap();
        for (index, e) in entries {
            s.enter(index).unwrap();
            if let CommitEntry::Txns(txns) = e {
                for t in txns {
                    s.apply_txn(t);
                }
            }
        }
    }
}

impl Snapshots for Host {
    fn image(&mut self) -> SnapshotJob {
        let image = zlock_core::snapshot::Image::of(&self.0.lock().unwrap());
        Box::new(move |w| zlock_core::snapshot::write_image(&image, w))
    }

    fn install(
        &mut self,
        index: LogIndex,
        payload: &[u8],
    ) -> Result<(), crate::commit::InstallError> {
        let mut state = zlock_core::snapshot::decode(payload, zlock_core::Config::default())
            .map_err(|e| e.to_string())?;
        state.applied = index;
        *self.0.lock().unwrap() = state;
        Ok(())
    }
}

/// What a state holds, to compare two: its positions, sessions and every node.
fn facts(s: &State) -> Vec<String> {
    let mut f = vec![format!(
        "zxid {:?}, applied {:?}, time {}",
        s.zxid, s.applied, s.time_ms
    )];
    f.extend(
        s.sessions
            .iter()
            .map(|(id, s)| format!("session {id:?}: {s:?}")),
    );
    let mut nodes: Vec<String> = s.tree.iter().map(|(p, n)| format!("{p}: {n:?}")).collect();
    nodes.sort();
    f.extend(nodes);
    f
}

async fn apply(sm: &mut StateMachine, entries: &[Entry]) {
    let items: Vec<_> = entries.iter().map(|e| Ok((e.clone(), None))).collect();
    sm.apply(futures_util::stream::iter(items)).await.unwrap();
}

fn state_machine(dir: &Path, host: Host) -> StateMachine {
    let due = Arc::new(tokio::sync::Notify::new());
    StateMachine::open(host, dir.join("snapshots"), None, due)
        .unwrap()
        .0
}

/// Writes a member's directory for [`history`] into `dir`, as the server does.
async fn write(dir: &Path) {
    let opts = zlock_store::WalOptions {
        // No zeros ahead of the records: the directory is checked in.
        preallocate_bytes: 0,
        ..zlock_store::WalOptions::default()
    };
    let (wal, records) = open_wal(&dir.join("log"), dir, opts).unwrap();
    let mut log = RaftLog::open(wal, records, dir).unwrap();
    let closer = log.closer();
    log.save_vote(&vote()).await.unwrap();
    let entries = history(TxnClock::Leader);
    for e in &entries {
        let (tx, rx) = Zraft::oneshot();
        log.append([e.clone()], IOFlushed::signal(tx))
            .await
            .unwrap();
        rx.await.unwrap().unwrap();
    }
    let mut sm = state_machine(dir, Host::new());
    apply(&mut sm, &entries[..=SNAPSHOT_AT]).await;
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    log.purge(entries[PURGED_THROUGH].log_id).await.unwrap();
    closer.close().await;
}

/// Opens a copy of `dir` (whose Txns are of `clock`) with today's code and checks what
/// it finds; the problems.
async fn check(dir: &Path, clock: TxnClock) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    zlock_testkit::copy_dir(dir, tmp.path());
    let dir = tmp.path();
    let entries = history(clock);
    let mut bad = Vec::new();
    let mut expect = |what: &str, got: String, want: String| {
        if got != want {
            bad.push(format!("{what}:\n  found: {got}\n  want:  {want}"));
        }
    };

    let (wal, records) = open_wal(&dir.join("log"), dir, Default::default()).unwrap();
    let (mut log, _writer) = RaftLog::open_with_writer(wal, records, dir).unwrap();
    let state = log.get_log_state().await.unwrap();
    let want_purged = entries[PURGED_THROUGH].log_id;
    expect(
        "log state",
        format!("{:?} .. {:?}", state.last_purged_log_id, state.last_log_id),
        format!(
            "{:?} .. {:?}",
            Some(want_purged),
            entries.last().map(|e| e.log_id)
        ),
    );
    expect(
        "vote",
        format!("{:?}", log.read_vote().await.unwrap()),
        format!("{:?}", Some(vote())),
    );
    let in_log = log.try_get_log_entries(0..).await.unwrap();
    expect(
        "entries",
        format!("{in_log:?}"),
        format!("{:?}", &entries[PURGED_THROUGH + 1..]),
    );

    // The state: the snapshot, then the log after it, as a restarted member rebuilds it,
    // against the whole history applied here and now.
    let host = Host::new();
    let mut sm = state_machine(dir, host.clone());
    let (applied, membership) = sm.applied_state().await.unwrap();
    expect(
        "snapshot",
        format!("{applied:?}, {membership:?}"),
        format!(
            "{:?}, {:?}",
            Some(entries[SNAPSHOT_AT].log_id),
            Membership::new(Some(entries[0].log_id), voters(&[1, 2, 3]))
        ),
    );
    apply(&mut sm, &in_log[SNAPSHOT_AT - PURGED_THROUGH..]).await;
    let fresh = Host::new();
    let mut fresh_sm = state_machine(tempfile::tempdir().unwrap().path(), fresh.clone());
    apply(&mut fresh_sm, &entries).await;
    let (got, want) = (host.0.lock().unwrap(), fresh.0.lock().unwrap());
    expect(
        "state",
        facts(&got).join("\n         "),
        facts(&want).join("\n         "),
    );
    bad
}

#[tokio::test]
async fn data_written_by_earlier_builds_still_reads() {
    if let Some(name) = std::env::var_os("ZLOCK_WRITE_DATA_DIR") {
        let dir = data_dirs().join(name);
        assert!(
            !dir.exists(),
            "{} exists: a data directory is written once",
            dir.display()
        );
        write(&dir).await;
        eprintln!("wrote {}", dir.display());
    }
    let mut names = BTreeSet::new();
    let mut bad = Vec::new();
    for d in std::fs::read_dir(data_dirs()).unwrap() {
        let d = d.unwrap();
        let name = d.file_name().to_string_lossy().into_owned();
        bad.extend(
            check(&d.path(), clock_of(&name))
                .await
                .into_iter()
                .map(|b| format!("{name}: {b}")),
        );
        names.insert(name);
    }
    assert!(
        !names.is_empty(),
        "no data directory under {}",
        data_dirs().display()
    );
    assert!(
        bad.is_empty(),
        "data written by an earlier zlock no longer reads the same (a format changed without \
         a reader for the old bytes?):\n{}",
        bad.join("\n")
    );
}

/// The check reads what [`write`] writes, and notices what is missing: a directory
/// whose vote file is gone fails on the vote.
#[tokio::test]
async fn the_check_finds_a_damaged_directory() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path()).await;
    assert!(
        check(tmp.path(), TxnClock::Leader).await.is_empty(),
        "a fresh directory reads"
    );
    std::fs::remove_file(tmp.path().join("vote")).unwrap();
    let bad = check(tmp.path(), TxnClock::Leader).await;
    assert!(bad.iter().any(|b| b.starts_with("vote")), "{bad:?}");
}
