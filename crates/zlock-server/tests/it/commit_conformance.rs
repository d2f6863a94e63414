//! The commit-stage conformance suite: what any implementation of
//! `zlock_server::commit::Commit` must do (the contract in that module's doc), in the
//! style of openraft's `testing/log` suite. Each check is a function generic over a
//! [`Fixture`]; the WAL implementation and the Raft implementation (a one-member
//! ensemble on its own loopback port, the log in the WAL's format) run them all here.
//! `tests/it/raft_ensemble.rs` checks what only an ensemble of several members can show.
//!
//! 1. order: entries applied at consecutive positions, in proposal order, exactly once
//!    (each Txn as proposed, but for its time: a Raft leader stamps its own clock's,
//!    never an earlier one here, see `commit::raft::peer::write_as_leader`);
//! 2. nothing visible before durable: at every apply, the entry is already durable;
//! 3. crash and restart: a copy of the log taken at any moment (what a `kill -9` leaves)
//!    replays every applied entry, and proposals after a restart continue the log;
//! 4. a failure stops: after a failed proposal nothing more is applied, every later call
//!    fails;
//! 5. concurrency: proposers on several threads, each one's order kept, nothing lost or
//!    doubled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::common;
use zlock_core::{LogIndex, MemberId, Origin, SessionId, Txn, TxnBody};
use zlock_server::commit::raft::{RaftCommit, RaftOptions};
use zlock_server::commit::{
    Apply, Commit, CommitError, Entry, LogStore, SnapshotJob, Snapshots, WalCommit,
};
use zlock_store::wal::{Wal, WalOptions};

/// What an applier saw: (position, Txn) in the order `apply` was called.
type Seen = Arc<Mutex<Vec<(LogIndex, Txn)>>>;

/// How far the implementation's entries are durable right now.
type Probe = Arc<dyn Fn() -> LogIndex + Send + Sync>;

/// The applier the suite hands to an implementation: records every entry and checks,
/// at the moment it is applied, that the implementation says it is durable.
#[derive(Default)]
struct Recorder {
    seen: Seen,
    /// Every applied position, Txn or not.
    positions: Arc<Mutex<Vec<u64>>>,
    /// Set once the implementation is open (it is built with this recorder).
    probe: Arc<OnceLock<Probe>>,
    /// Entries applied before the probe covered them (must stay 0).
    early: Arc<AtomicUsize>,
}

/// An open implementation with its recorder's views.
struct Opened<C> {
    commit: C,
    seen: Seen,
    positions: Arc<Mutex<Vec<u64>>>,
    early: Arc<AtomicUsize>,
    replayed: Vec<(LogIndex, Txn)>,
}

fn open<F: Fixture>(f: &F, dir: &Path) -> Opened<F::C> {
    let rec = Recorder::default();
    let (seen, early, slot) = (rec.seen.clone(), rec.early.clone(), rec.probe.clone());
    let positions = rec.positions.clone();
    let (commit, probe, replayed) = f.open(dir, rec);
    let _ = slot.set(probe);
    Opened {
        commit,
        seen,
        positions,
        early,
        replayed,
    }
}

impl Apply for Recorder {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        for (index, e) in entries {
            self.positions.lock().unwrap().push(index.0);
            if let Some(p) = self.probe.get() {
                if p() < index {
                    self.early.fetch_add(1, Ordering::SeqCst);
                }
            }
            match e {
                Entry::Txns(ts) => {
                    let mut seen = self.seen.lock().unwrap();
                    seen.extend(ts.iter().map(|t| (index, t.clone())));
                }
                Entry::Blank => {}
            }
        }
    }
}

impl Snapshots for Recorder {
    fn image(&mut self) -> SnapshotJob {
        let seen = self.seen.lock().unwrap().clone();
        Box::new(move |w| common::write_history(&seen, w))
    }
    fn install(
        &mut self,
        _index: LogIndex,
        payload: &[u8],
    ) -> Result<(), zlock_server::commit::InstallError> {
        *self.seen.lock().unwrap() = common::read_history(payload)?;
        Ok(())
    }
}

/// What the suite needs from an implementation.
trait Fixture {
    type C: Commit;
    /// Opens the log in `dir` (new, or as a restart after a crash), applying into
    /// `apply`. Returns the commit stage, a probe of how far it is durable, and the
    /// Txns the restart replayed (taken out of `apply`'s record if they went through
    /// it), once it has replayed all it will before new proposals.
    fn open(&self, dir: &Path, apply: Recorder) -> (Self::C, Probe, Vec<(LogIndex, Txn)>);
    /// As [`Fixture::open`], with storage whose next sync fails once the returned flag
    /// is set.
    fn open_failing(&self, dir: &Path, apply: Recorder) -> (Self::C, Arc<AtomicBool>);
}

fn txn(proposer: i64, seq: i32) -> Txn {
    let origin = Origin {
        member: MemberId(1),
        session: SessionId(proposer),
        xid: seq,
    };
    let paths = vec![format!("/p{proposer}/{seq}")];
    Txn::new(
        origin,
        1_700_000_000_000 + i64::from(seq),
        TxnBody::DeleteExpired { paths },
    )
}

fn opened<F: Fixture>(f: &F, dir: &Path) -> (F::C, Seen, Arc<AtomicUsize>) {
    let o = open(f, dir);
    assert!(o.replayed.is_empty(), "a new log replays nothing");
    (o.commit, o.seen, o.early)
}

/// Positions applied are consecutive from 1, each once (Txns or not).
fn assert_consecutive(positions: &Mutex<Vec<u64>>) {
    let p = positions.lock().unwrap().clone();
    assert_eq!(
        p,
        (1..=p.len() as u64).collect::<Vec<_>>(),
        "consecutive positions from 1"
    );
}

// ---- the checks --------------------------------------------------------------------

fn order<F: Fixture>(f: &F) {
    let dir = tempfile::tempdir().unwrap();
    let o = open(f, dir.path());
    assert!(o.replayed.is_empty(), "a new log replays nothing");
    let (mut c, seen, early) = (o.commit, o.seen, o.early);
    let mut want = Vec::new();
    let mut seq = 0;
    for size in [1, 7, 0, 64, 3] {
        let mut batch: Vec<Txn> = (0..size)
            .map(|_| {
                seq += 1;
                txn(1, seq)
            })
            .collect();
        want.extend(batch.iter().cloned());
        c.propose(&mut batch).unwrap();
        assert!(batch.is_empty(), "propose empties the batch");
    }
    let got = seen.lock().unwrap().clone();
    assert_consecutive(&o.positions);
    let positions: Vec<u64> = got.iter().map(|(i, _)| i.0).collect();
    // A Raft entry holds a whole proposal: its Txns share the entry's position.
    assert!(
        positions.windows(2).all(|w| w[0] <= w[1]),
        "Txn positions never fall"
    );
    let txns: Vec<Txn> = got.into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        txns.iter().map(common::but_time).collect::<Vec<_>>(),
        want.iter().map(common::but_time).collect::<Vec<_>>(),
        "applied in proposal order, each once"
    );
    assert!(
        txns.iter().zip(&want).all(|(t, w)| t.time_ms >= w.time_ms),
        "stamped no earlier than proposed"
    );
    assert_eq!(early.load(Ordering::SeqCst), 0, "applied before durable");
}

fn crash_and_restart<F: Fixture>(f: &F) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, seen, _) = opened(f, dir.path());
    for s in 1..=20 {
        c.propose(&mut vec![txn(1, s), txn(2, s)]).unwrap();
    }
    // What a kill -9 leaves: the files as they are now, the process still running.
    let crashed = tempfile::tempdir().unwrap();
    zlock_testkit::copy_dir(dir.path(), crashed.path());
    let applied = seen.lock().unwrap().clone();
    drop(c);

    let Opened {
        commit: mut c2,
        seen: seen2,
        positions,
        early,
        replayed,
    } = open(f, crashed.path());
    assert_eq!(
        replayed, applied,
        "a restart replays every applied entry, in place"
    );
    c2.propose(&mut vec![txn(3, 1), txn(3, 2)]).unwrap();
    let after = seen2.lock().unwrap().clone();
    let last = applied.last().map_or(0, |(i, _)| i.0);
    assert_eq!(
        after
            .iter()
            .map(|(_, t)| common::but_time(t))
            .collect::<Vec<_>>(),
        [txn(3, 1), txn(3, 2)]
            .iter()
            .map(common::but_time)
            .collect::<Vec<_>>(),
        "proposals after a restart are applied"
    );
    assert!(
        after[0].0 .0 > last && after[1].0 .0 >= after[0].0 .0,
        "and continue the log: {after:?} after {last}"
    );
    let p = positions.lock().unwrap().clone();
    assert!(
        p.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive positions after a restart: {p:?}"
    );
    assert_eq!(early.load(Ordering::SeqCst), 0);
    drop(c2);
    // And a second restart sees both runs.
    assert_eq!(open(f, crashed.path()).replayed.len(), applied.len() + 2);
}

fn failure_stops<F: Fixture>(f: &F) {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::default();
    let seen = rec.seen.clone();
    let (mut c, fail_next) = f.open_failing(dir.path(), rec);
    c.propose(&mut vec![txn(1, 1), txn(1, 2)]).unwrap();
    fail_next.store(true, Ordering::SeqCst);
    assert!(
        c.propose(&mut vec![txn(1, 3)]).is_err(),
        "the failing sync fails the proposal"
    );
    assert!(matches!(
        c.propose(&mut vec![txn(1, 4)]),
        Err(CommitError::Stopped)
    ));
    assert!(c.purge_through(LogIndex(1)).is_err(), "stopped for good");
    let got: Vec<i32> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| t.origin.xid)
        .collect();
    assert_eq!(got, vec![1, 2], "nothing applied after the failure");
}

fn concurrent_proposers<F: Fixture>(f: &F)
where
    F::C: Send,
{
    const PROPOSERS: i64 = 4;
    const EACH: i32 = 150;
    let dir = tempfile::tempdir().unwrap();
    let o = open(f, dir.path());
    let (c, seen, early, positions) = (o.commit, o.seen, o.early, o.positions);
    let c = Arc::new(Mutex::new(c));
    std::thread::scope(|s| {
        for p in 1..=PROPOSERS {
            let c = c.clone();
            s.spawn(move || {
                let mut seq = 0;
                while seq < EACH {
                    // Batches of 1..=5, as a sequencer gathers them.
                    let n = 1 + (seq as i64 + p) % 5;
                    let mut batch = Vec::new();
                    for _ in 0..n {
                        if seq < EACH {
                            seq += 1;
                            batch.push(txn(p, seq));
                        }
                    }
                    c.lock().unwrap().propose(&mut batch).unwrap();
                }
            });
        }
    });
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), (PROPOSERS * i64::from(EACH)) as usize);
    assert_consecutive(&positions);
    for p in 1..=PROPOSERS {
        let mine: Vec<i32> = got
            .iter()
            .filter(|(_, t)| t.origin.session == SessionId(p))
            .map(|(_, t)| t.origin.xid)
            .collect();
        assert_eq!(mine, (1..=EACH).collect::<Vec<_>>(), "proposer {p}'s order");
    }
    assert_eq!(early.load(Ordering::SeqCst), 0);
}

// ---- the WAL implementation ------------------------------------------------------------

/// The WAL with its durable position observable: updated only after a sync returned
/// Ok, and able to fail its syncs from a moment on.
struct Observed {
    wal: Wal,
    synced: Arc<AtomicU64>,
    appended: u64,
    fail_next: Arc<AtomicBool>,
}

impl LogStore for Observed {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        self.appended = index;
        LogStore::append(&mut self.wal, index, payload)
    }
    fn sync(&mut self) -> Result<(), CommitError> {
        if self.fail_next.load(Ordering::SeqCst) {
            return Err(zlock_store::StoreError::rejected("injected sync failure").into());
        }
        LogStore::sync(&mut self.wal)?;
        self.synced.store(self.appended, Ordering::SeqCst);
        Ok(())
    }
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        LogStore::purge_through(&mut self.wal, index)
    }
    fn truncate_from(&mut self, index: u64) -> Result<(), CommitError> {
        self.appended = self.appended.min(index.saturating_sub(1));
        LogStore::truncate_from(&mut self.wal, index)
    }
}

/// A WAL opened for a fixture: wrapped, its probe, its fail switch, its records.
struct OpenedWal {
    store: Observed,
    probe: Probe,
    fail: Arc<AtomicBool>,
    records: zlock_server::commit::raft::log::Records,
}

/// An implementation opened by a fixture, with its probe, fail switch and replay.
struct Opening<C> {
    commit: C,
    probe: Probe,
    fail: Arc<AtomicBool>,
    replayed: Vec<(LogIndex, Txn)>,
}

/// Opens the WAL in `dir` wrapped so its durable position is observable.
fn observed(dir: &Path) -> OpenedWal {
    let mut records = Vec::new();
    let wal = Wal::open(dir, WalOptions::default(), 0, |i, payload| {
        records.push((i, payload.to_vec()));
        Ok(())
    })
    .unwrap();
    let last = wal.last_index();
    let synced = Arc::new(AtomicU64::new(last));
    let probe_synced = synced.clone();
    let probe: Probe = Arc::new(move || LogIndex(probe_synced.load(Ordering::SeqCst)));
    let fail_next = Arc::new(AtomicBool::new(false));
    let store = Observed {
        wal,
        synced,
        appended: last,
        fail_next: fail_next.clone(),
    };
    OpenedWal {
        store,
        probe,
        fail: fail_next,
        records,
    }
}

struct WalFixture;

impl WalFixture {
    fn open_observed(dir: &Path, apply: Recorder) -> Opening<WalCommit<Observed, Recorder>> {
        let OpenedWal {
            store,
            probe,
            fail,
            records,
        } = observed(dir);
        let replayed: Vec<(LogIndex, Txn)> = records
            .iter()
            .map(|(i, p)| (LogIndex(*i), Txn::decode(p).unwrap()))
            .collect();
        let last = store.appended;
        Opening {
            commit: WalCommit::new(store, LogIndex(last), apply),
            probe,
            fail,
            replayed,
        }
    }
}

impl Fixture for WalFixture {
    type C = WalCommit<Observed, Recorder>;
    fn open(&self, dir: &Path, apply: Recorder) -> (Self::C, Probe, Vec<(LogIndex, Txn)>) {
        let o = WalFixture::open_observed(dir, apply);
        (o.commit, o.probe, o.replayed)
    }
    fn open_failing(&self, dir: &Path, apply: Recorder) -> (Self::C, Arc<AtomicBool>) {
        let o = WalFixture::open_observed(dir, apply);
        (o.commit, o.fail)
    }
}

#[test]
fn wal_order() {
    order(&WalFixture);
}

#[test]
fn wal_crash_and_restart() {
    crash_and_restart(&WalFixture);
}

#[test]
fn wal_failure_stops() {
    failure_stops(&WalFixture);
}

#[test]
fn wal_concurrent_proposers() {
    concurrent_proposers(&WalFixture);
}

// ---- the Raft implementation -----------------------------------------------------------

/// The runtime openraft runs on in these tests (proposals block on it from test
/// threads, as the sequencer thread does in the server).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A one-member ensemble: durable means on this member's disk.
struct RaftFixture;

impl RaftFixture {
    fn open_raft(dir: &Path, apply: Recorder) -> Opening<RaftCommit> {
        let seen = apply.seen.clone();
        let OpenedWal {
            store,
            probe,
            fail,
            records,
        } = observed(&dir.join("log"));
        let last_record = records.last().map_or(0, |(i, _)| *i);
        let rt = runtime();
        let commit = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let opts = RaftOptions {
                me: 1,
                members: [(1, addr)].into_iter().collect(),
                observers: Default::default(),
                specs: Default::default(),
                reconfig: false,
                ensemble: "conformance".into(),
                heartbeat_ms: 50,
                election_min_ms: 150,
                election_max_ms: 300,
                snapshot_every: None,
                keep_behind_snapshot: 1_000,
                snapshot_dir: dir.join("snapshots"),
                meta_dir: dir.to_path_buf(),
                links: Default::default(),
            };
            let c = RaftCommit::start(opts, apply, store, records, listener)
                .await
                .unwrap();
            // Leader, and everything in the log applied (Raft entry i is WAL record
            // i + 1; a fresh member's first entry to apply is the leader's blank at 1).
            c.raft()
                .wait(Some(std::time::Duration::from_secs(20)))
                .applied_index_at_least(Some(last_record.saturating_sub(1).max(1)), "replayed")
                .await
                .unwrap();
            c
        });
        let replayed = std::mem::take(&mut *seen.lock().unwrap());
        // The WAL's durable record is one past the Raft entry it holds.
        let probe: Probe = Arc::new(move || LogIndex(probe().0.saturating_sub(1)));
        Opening {
            commit,
            probe,
            fail,
            replayed,
        }
    }
}

impl Fixture for RaftFixture {
    type C = RaftCommit;
    fn open(&self, dir: &Path, apply: Recorder) -> (Self::C, Probe, Vec<(LogIndex, Txn)>) {
        let o = RaftFixture::open_raft(dir, apply);
        (o.commit, o.probe, o.replayed)
    }
    fn open_failing(&self, dir: &Path, apply: Recorder) -> (Self::C, Arc<AtomicBool>) {
        let o = RaftFixture::open_raft(dir, apply);
        (o.commit, o.fail)
    }
}

#[test]
fn raft_order() {
    order(&RaftFixture);
}

#[test]
fn raft_crash_and_restart() {
    crash_and_restart(&RaftFixture);
}

#[test]
fn raft_failure_stops() {
    failure_stops(&RaftFixture);
}

#[test]
fn raft_concurrent_proposers() {
    concurrent_proposers(&RaftFixture);
}
