//! The commit-stage conformance suite: what any implementation of
//! `zlock_server::commit::Commit` must do (the contract in that module's doc), in the
//! style of openraft's `testing/log` suite. Each check is a function generic over a
//! [`Fixture`]; the WAL implementation runs them all here, and the Raft log store will
//! run the same functions with a fixture of its own.
//!
//! 1. order: entries applied at consecutive positions, in proposal order, exactly once;
//! 2. nothing visible before durable: at every apply, the entry is already durable;
//! 3. crash and restart: a copy of the log taken at any moment (what a `kill -9` leaves)
//!    replays every applied entry, and proposals after a restart continue the log;
//! 4. a failure stops: after a failed proposal nothing more is applied, every later call
//!    fails;
//! 5. concurrency: proposers on several threads, each one's order kept, nothing lost or
//!    doubled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use zlock_core::{LogIndex, MemberId, Origin, SessionId, Txn, TxnBody};
use zlock_server::commit::{Apply, Commit, CommitError, Entry, LogStore, WalCommit};
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
    /// Set once the implementation is open (it is built with this recorder).
    probe: Arc<OnceLock<Probe>>,
    /// Entries applied before the probe covered them (must stay 0).
    early: Arc<AtomicUsize>,
}

/// An open implementation with its recorder's views.
struct Opened<C> {
    commit: C,
    seen: Seen,
    early: Arc<AtomicUsize>,
    replayed: Vec<(LogIndex, Txn)>,
}

fn open<F: Fixture>(f: &F, dir: &Path) -> Opened<F::C> {
    let rec = Recorder::default();
    let (seen, early, slot) = (rec.seen.clone(), rec.early.clone(), rec.probe.clone());
    let (commit, probe, replayed) = f.open(dir, rec);
    let _ = slot.set(probe);
    Opened {
        commit,
        seen,
        early,
        replayed,
    }
}

impl Apply for Recorder {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        for (index, e) in entries {
            if let Some(p) = self.probe.get() {
                if p() < index {
                    self.early.fetch_add(1, Ordering::SeqCst);
                }
            }
            match e {
                Entry::Txn(t) => self.seen.lock().unwrap().push((index, t.clone())),
                Entry::Blank => {}
            }
        }
    }
}

/// What the suite needs from an implementation.
trait Fixture {
    type C: Commit;
    /// Opens the log in `dir` (new, or as a restart after a crash), applying into
    /// `apply`. Returns the commit stage, a probe of how far it is durable, and the
    /// entries the restart replayed.
    fn open(&self, dir: &Path, apply: Recorder) -> (Self::C, Probe, Vec<(LogIndex, Txn)>);
    /// As [`Fixture::open`], with storage that fails at its `n`th sync (1-based).
    fn open_failing(&self, dir: &Path, apply: Recorder, n: usize) -> Self::C;
}

fn txn(proposer: i64, seq: i32) -> Txn {
    Txn {
        origin: Origin {
            member: MemberId(1),
            session: SessionId(proposer),
            xid: seq,
        },
        time_ms: 1_700_000_000_000 + i64::from(seq),
        body: TxnBody::DeleteExpired {
            paths: vec![format!("/p{proposer}/{seq}")],
        },
    }
}

fn opened<F: Fixture>(f: &F, dir: &Path) -> (F::C, Seen, Arc<AtomicUsize>) {
    let o = open(f, dir);
    assert!(o.replayed.is_empty(), "a new log replays nothing");
    (o.commit, o.seen, o.early)
}

// ---- the checks --------------------------------------------------------------------

fn order<F: Fixture>(f: &F) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, seen, early) = opened(f, dir.path());
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
    let positions: Vec<u64> = got.iter().map(|(i, _)| i.0).collect();
    assert_eq!(positions, (1..=want.len() as u64).collect::<Vec<_>>());
    let txns: Vec<Txn> = got.into_iter().map(|(_, t)| t).collect();
    assert_eq!(txns, want, "applied in proposal order, each once");
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
    common::copy_dir(dir.path(), crashed.path());
    let applied = seen.lock().unwrap().clone();
    drop(c);

    let Opened {
        commit: mut c2,
        seen: seen2,
        early,
        replayed,
    } = open(f, crashed.path());
    assert_eq!(
        replayed, applied,
        "a restart replays every applied entry, in place"
    );
    c2.propose(&mut vec![txn(3, 1), txn(3, 2)]).unwrap();
    let after = seen2.lock().unwrap().clone();
    let next = applied.len() as u64 + 1;
    assert_eq!(
        after,
        vec![(LogIndex(next), txn(3, 1)), (LogIndex(next + 1), txn(3, 2))],
        "proposals after a restart continue the log"
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
    let mut c = f.open_failing(dir.path(), rec, 2);
    c.propose(&mut vec![txn(1, 1), txn(1, 2)]).unwrap();
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
    let (c, seen, early) = opened(f, dir.path());
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
    for (i, (index, _)) in got.iter().enumerate() {
        assert_eq!(index.0, i as u64 + 1, "consecutive positions");
    }
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
/// Ok, and able to fail its `n`th sync.
struct Observed {
    wal: Wal,
    synced: Arc<AtomicU64>,
    appended: u64,
    syncs: usize,
    fail_at: Option<usize>,
}

impl LogStore for Observed {
    fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), CommitError> {
        self.appended = index;
        LogStore::append(&mut self.wal, index, payload)
    }
    fn sync(&mut self) -> Result<(), CommitError> {
        self.syncs += 1;
        if self.fail_at == Some(self.syncs) {
            return Err(zlock_store::StoreError::rejected("injected sync failure").into());
        }
        LogStore::sync(&mut self.wal)?;
        self.synced.store(self.appended, Ordering::SeqCst);
        Ok(())
    }
    fn purge_through(&mut self, index: u64) -> Result<(), CommitError> {
        LogStore::purge_through(&mut self.wal, index)
    }
}

struct WalFixture;

impl WalFixture {
    fn open_observed(
        dir: &Path,
        apply: Recorder,
        fail_at: Option<usize>,
    ) -> (WalCommit<Observed, Recorder>, Probe, Vec<(LogIndex, Txn)>) {
        let mut replayed = Vec::new();
        let wal = Wal::open(dir, WalOptions::default(), 0, |i, payload| {
            let t = Txn::decode(payload).map_err(zlock_store::StoreError::rejected)?;
            replayed.push((LogIndex(i), t));
            Ok(())
        })
        .unwrap();
        let last = wal.last_index();
        let synced = Arc::new(AtomicU64::new(last));
        let probe_synced = synced.clone();
        let probe: Probe = Arc::new(move || LogIndex(probe_synced.load(Ordering::SeqCst)));
        let store = Observed {
            wal,
            synced,
            appended: last,
            syncs: 0,
            fail_at,
        };
        (
            WalCommit::new(store, LogIndex(last), apply),
            probe,
            replayed,
        )
    }
}

impl Fixture for WalFixture {
    type C = WalCommit<Observed, Recorder>;
    fn open(&self, dir: &Path, apply: Recorder) -> (Self::C, Probe, Vec<(LogIndex, Txn)>) {
        WalFixture::open_observed(dir, apply, None)
    }
    fn open_failing(&self, dir: &Path, apply: Recorder, n: usize) -> Self::C {
        WalFixture::open_observed(dir, apply, Some(n)).0
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
