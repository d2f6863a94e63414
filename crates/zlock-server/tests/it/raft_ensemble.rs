//! The Raft commit stage with three members in one process, on loopback ports: what
//! the one-member conformance run cannot show. Proposals through the leader and
//! through followers (forwarded) make one history on every member; the leader stopped,
//! the two others elect a new one and go on, losing no acknowledged Txn; a member whose
//! data is wiped rejoins from the leader's snapshot and ends with the same history.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::common;
use zlock_core::{LogIndex, MemberId, Origin, SessionId, Txn, TxnBody};
use zlock_server::commit::raft::types::WatchReceiver as _;
use zlock_server::commit::raft::{RaftCommit, RaftOptions};
use zlock_server::commit::{Apply, Commit, CommitError, Entry, SnapshotJob, Snapshots};
use zlock_store::wal::WalOptions;

/// The Txns one member applied, in order (restored from snapshots too).
type History = Arc<Mutex<Vec<(LogIndex, Txn)>>>;

#[derive(Default, Clone)]
struct Member {
    history: History,
    /// Snapshots installed.
    installs: Arc<std::sync::atomic::AtomicUsize>,
}

impl Apply for Member {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        let mut h = self.history.lock().unwrap();
        for (i, e) in entries {
            if let Some((last, _)) = h.last() {
                assert!(i > *last, "position {} after {}", i.0, last.0);
            }
            if let Entry::Txns(ts) = e {
                h.extend(ts.iter().map(|t| (i, t.clone())));
            }
        }
    }
}

impl Snapshots for Member {
    fn image(&mut self) -> SnapshotJob {
        let h = self.history.lock().unwrap().clone();
        Box::new(move |w| common::write_history(&h, w))
    }
    fn install(
        &mut self,
        _index: LogIndex,
        p: &[u8],
    ) -> Result<(), zlock_server::commit::InstallError> {
        *self.history.lock().unwrap() = common::read_history(p)?;
        self.installs
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

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

fn txn(member: u64, seq: i32) -> Txn {
    let origin = Origin {
        member: MemberId(member),
        session: SessionId(member as i64),
        xid: seq,
    };
    let paths = vec![format!("/m{member}/{seq}")];
    Txn::new(origin, 1_700_000_000_000, TxnBody::DeleteExpired { paths })
}

fn start(
    me: u64,
    dir: &Path,
    addrs: &BTreeMap<u64, String>,
    listener: std::net::TcpListener,
    member: Member,
) -> RaftCommit {
    start_snapshotting(me, dir, addrs, listener, member, 40)
}

/// [`start`], with a snapshot every `snapshot_every` Txns.
fn start_snapshotting(
    me: u64,
    dir: &Path,
    addrs: &BTreeMap<u64, String>,
    listener: std::net::TcpListener,
    member: Member,
    snapshot_every: u64,
) -> RaftCommit {
    runtime().block_on(start_async(
        me,
        dir.to_path_buf(),
        addrs.clone(),
        listener,
        member,
        snapshot_every,
        HEARTBEAT_MS,
    ))
}

/// The members' Raft heartbeat, ms (elections after 3 to 6 of them), as a test server's.
const HEARTBEAT_MS: u64 = 50;

async fn start_async(
    me: u64,
    dir: std::path::PathBuf,
    addrs: BTreeMap<u64, String>,
    listener: std::net::TcpListener,
    member: Member,
    snapshot_every: u64,
    heartbeat_ms: u64,
) -> RaftCommit {
    let (wal, records) =
        zlock_server::commit::raft::log::open_wal(&dir.join("log"), &dir, WalOptions::default())
            .unwrap();
    let opts = RaftOptions {
        me,
        members: addrs,
        observers: Default::default(),
        specs: Default::default(),
        reconfig: false,
        ensemble: "test".into(),
        heartbeat_ms,
        election_min_ms: 3 * heartbeat_ms,
        election_max_ms: 6 * heartbeat_ms,
        snapshot_every: Some(snapshot_every),
        keep_behind_snapshot: 5,
        snapshot_dir: dir.join("snapshots"),
        meta_dir: dir.clone(),
        links: Default::default(),
    };
    listener.set_nonblocking(true).unwrap();
    let l = tokio::net::TcpListener::from_std(listener).unwrap();
    RaftCommit::start(opts, member, wal, records, l)
        .await
        .unwrap()
}

/// Three members on loopback ports, each on its own temp dir, with a snapshot every
/// `snapshot_every` Txns and a Raft heartbeat of `heartbeat_ms`.
struct Three {
    dirs: Vec<tempfile::TempDir>,
    addrs: BTreeMap<u64, String>,
    members: Vec<Member>,
    commits: Vec<Option<RaftCommit>>,
}

fn three(snapshot_every: u64, heartbeat_ms: u64) -> Three {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // Ports below the kernel's ephemeral range (`zlock_testkit::free_port`), not port 0:
    // a stopped member binds its address again, and meanwhile the connections of other
    // tests in this process could take a port of that range as their local port.
    let listeners: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", zlock_testkit::free_port())).unwrap())
        .collect();
    let addrs: BTreeMap<u64, String> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string()))
        .collect();
    let members: Vec<Member> = (0..3).map(|_| Member::default()).collect();
    // Started together: a member starting blank waits for a majority to answer
    // (`commit::raft::rejoin`).
    let commits = runtime().block_on(async {
        let starting: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                tokio::spawn(start_async(
                    i as u64 + 1,
                    dirs[i].path().to_path_buf(),
                    addrs.clone(),
                    l,
                    members[i].clone(),
                    snapshot_every,
                    heartbeat_ms,
                ))
            })
            .collect();
        let mut commits = Vec::new();
        for s in starting {
            commits.push(Some(s.await.unwrap()));
        }
        commits
    });
    Three {
        dirs,
        addrs,
        members,
        commits,
    }
}

/// Waits (bounded) until every history in `members` has `n` Txns.
fn settle(members: &[&Member], n: usize) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let lens: Vec<usize> = members
            .iter()
            .map(|m| m.history.lock().unwrap().len())
            .collect();
        if lens.iter().all(|l| *l >= n) {
            return;
        }
        assert!(
            Instant::now() < until,
            "histories stuck at {lens:?}, want {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `members` all hold one history of at least `n` Txns, and
/// returns it. (A proposal that failed may still be committed a moment later, so how
/// many there will be is not known in advance.)
fn one_history(members: &[&Member], n: usize) -> Vec<(LogIndex, Txn)> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let hs: Vec<Vec<(LogIndex, Txn)>> = members
            .iter()
            .map(|m| m.history.lock().unwrap().clone())
            .collect();
        if hs[0].len() >= n && hs.iter().all(|h| *h == hs[0]) {
            return hs.into_iter().next().unwrap();
        }
        let lens: Vec<usize> = hs.iter().map(Vec::len).collect();
        assert!(
            Instant::now() < until,
            "no one history of {n} or more: {lens:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until every running member knows the same leader.
fn agreed_leader(commits: &[Option<RaftCommit>]) -> u64 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let known: Vec<Option<u64>> = commits.iter().flatten().map(leader_of).collect();
        if let Some(Some(l)) = known.first() {
            if known.iter().all(|k| *k == Some(*l)) {
                return *l;
            }
        }
        assert!(Instant::now() < until, "no agreed leader: {known:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `c` is in touch with its quorum, as a server waits before it
/// serves a client (`Reporter::touch`).
fn in_touch(c: &RaftCommit) {
    let mut touch = c.reporter().touch();
    runtime()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), touch.wait_for(|t| *t)).await
        })
        .expect("the member is in touch within 30 s")
        .expect("the member is running");
}

fn leader_of(c: &RaftCommit) -> Option<u64> {
    c.raft().metrics().borrow_watched().current_leader
}

/// Every acknowledged Txn applied, nothing applied that was not proposed, nothing twice
/// (each compared but for its time).
fn check_history(applied: &[Txn], acked: &[Txn], maybe: &[Txn]) {
    let applied: Vec<_> = applied.iter().map(common::but_time).collect();
    let acked: Vec<_> = acked.iter().map(common::but_time).collect();
    let maybe: Vec<_> = maybe.iter().map(common::but_time).collect();
    for t in &acked {
        assert!(applied.contains(t), "acknowledged {t:?} lost");
    }
    for t in &applied {
        assert!(
            acked.contains(t) || maybe.contains(t),
            "{t:?} never proposed"
        );
    }
    let mut names: Vec<String> = applied.iter().map(|t| format!("{:?}", t.1)).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "a Txn applied twice");
}

#[test]
fn three_members_one_history_through_failover_and_a_wiped_member() {
    let Three {
        dirs: _dirs,
        addrs,
        members,
        mut commits,
    } = three(40, HEARTBEAT_MS);

    // Every member proposes once the ensemble is up; followers forward to the leader.
    // (Fresh members all campaign at once, and one that led for a moment may step down
    // with entries that the next leader truncates: those proposals would fail.)
    //
    // With no fault injected a proposal can still fail as Unavailable: a member that
    // goes the silent time (600 ms here) without its quorum gives up on its batch
    // (`RaftCommit::write`), and on a loaded machine (two CPU hogs beside the test, as
    // in the flake hunt) the members, all in this one process, can be starved that long;
    // the election timeout is shorter, so a new leader is usually elected then too.
    // Such a proposal may or may not be applied, as a client's request in flight when
    // its server loses the quorum; the history check below takes it as such.
    agreed_leader(&commits);
    let mut acked: Vec<Txn> = Vec::new();
    let mut maybe: Vec<Txn> = Vec::new();
    let mut unavailable = 0;
    for round in 0..30 {
        for (i, c) in commits.iter_mut().enumerate() {
            let m = i as u64 + 1;
            let mut batch = vec![txn(m, round * 2 + 1), txn(m, round * 2 + 2)];
            let sent = batch.clone();
            match c.as_mut().unwrap().propose(&mut batch) {
                Ok(()) => acked.extend(sent),
                Err(CommitError::Unavailable(_)) => {
                    unavailable += 1;
                    maybe.extend(sent)
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(unavailable < 90, "no proposal went through");
    let h0 = one_history(&members.iter().collect::<Vec<_>>(), acked.len());
    // Each member's proposals applied in the order it made them (with no gap when
    // none failed).
    for (i, m) in (1..=3u64).enumerate() {
        let mine: Vec<i32> = h0
            .iter()
            .filter(|(_, t)| t.origin.member == MemberId(m))
            .map(|(_, t)| t.origin.xid)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "member {m}'s order ({i}): {mine:?}"
        );
        if unavailable == 0 {
            assert_eq!(mine, (1..=60).collect::<Vec<_>>(), "member {m} ({i})");
        }
    }
    let applied: Vec<Txn> = h0.iter().map(|(_, t)| t.clone()).collect();
    check_history(&applied, &acked, &maybe);

    // The leader stops; the others elect a new one and keep taking proposals.
    let leader = leader_of(commits[0].as_ref().unwrap()).expect("a leader");
    let li = (leader - 1) as usize;
    let old = commits[li].take().unwrap();
    runtime().block_on(old.shutdown());
    drop(old);
    let survivors: Vec<usize> = (0..3).filter(|i| *i != li).collect();
    // A proposal that meets the failover fails as Unavailable (it may or may not have
    // been committed, as a ZooKeeper client's request in flight when its server
    // dies); the proposer goes on with the next one, as a reconnecting client would.
    let mut unavailable = 0;
    for round in 0..30 {
        for &i in &survivors {
            let m = i as u64 + 1;
            let mut batch = vec![txn(m, 100 + round)];
            let sent = batch.clone();
            match commits[i].as_mut().unwrap().propose(&mut batch) {
                Ok(()) => acked.extend(sent),
                Err(CommitError::Unavailable(_)) => {
                    unavailable += 1;
                    maybe.extend(sent)
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(
        unavailable < 60,
        "no proposal went through after the failover"
    );
    let surv: Vec<&Member> = survivors.iter().map(|i| &members[*i]).collect();
    let h = one_history(&surv, acked.len());
    let applied: Vec<Txn> = h.iter().map(|(_, t)| t.clone()).collect();
    check_history(&applied, &acked, &maybe);

    // The old leader comes back with its data wiped: it catches up from the leader's
    // snapshot (the log behind it is purged) and the entries after it.
    let wiped = tempfile::tempdir().unwrap();
    let back = Member::default();
    let listener = std::net::TcpListener::bind(addrs[&leader].as_str()).unwrap();
    let mut c = start(leader, wiped.path(), &addrs, listener, back.clone());
    // It lost its vote with its disk: it starts from the highest vote among the others
    // (`commit::raft::rejoin`), not from nothing.
    let highest = survivors
        .iter()
        .map(|&i| {
            commits[i]
                .as_ref()
                .unwrap()
                .raft()
                .metrics()
                .borrow_watched()
                .vote
                .leader_id
        })
        .max()
        .unwrap();
    // (Asked of openraft's core: its metrics may not have been published yet.)
    let own = runtime()
        .block_on(c.raft().with_raft_state(|s| s.vote_ref().leader_id))
        .unwrap();
    assert!(
        own >= highest,
        "the wiped member restarted with vote {own}, below the others' {highest}"
    );
    // A member out of touch with its quorum takes no client (and so proposes nothing)
    // until it is in touch: the wiped one is, once the snapshot makes it a member again.
    in_touch(&c);
    let mut batch = vec![txn(leader, 1000)];
    acked.extend(batch.clone());
    c.propose(&mut batch).unwrap();
    let mut all = surv.clone();
    all.push(&back);
    // (One history on all three is what `one_history` waits for.)
    let total = back.history.lock().unwrap().len();
    let h = one_history(&all, total);
    assert!(
        back.installs.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the wiped member caught up from a snapshot"
    );
    let applied: Vec<Txn> = h.iter().map(|(_, t)| t.clone()).collect();
    check_history(&applied, &acked, &maybe);
    // And it restarts from what the install left on its disk (the snapshot, the purge
    // point, the log after it).
    runtime().block_on(c.shutdown());
    drop(c);
    let again = Member::default();
    let listener = std::net::TcpListener::bind(addrs[&leader].as_str()).unwrap();
    let mut c = start(leader, wiped.path(), &addrs, listener, again.clone());
    in_touch(&c);
    let mut batch = vec![txn(leader, 1001)];
    acked.extend(batch.clone());
    c.propose(&mut batch).unwrap();
    // The same history after a restart.
    let total = again.history.lock().unwrap().len();
    one_history(&[&members[survivors[0]], &again], total);
    commits[li] = Some(c);
    for c in commits.into_iter().flatten() {
        runtime().block_on(c.shutdown());
    }
}

/// A follower's batch larger than one peer frame (`MAX_FRAME`, 64 MiB) reaches the
/// leader in several frames, in order, and is applied whole on every member. (Before
/// the batch was cut into frames, it was refused as one oversized frame every time.)
#[test]
fn a_follower_batch_larger_than_a_peer_frame_is_forwarded_in_order() {
    // No snapshot of these 72 MiB: a debug build would spend the test's time writing
    // and sending it. A 500 ms heartbeat (openraft's append timeout): at 50 ms a loaded
    // machine's debug build missed appends of the 1 MiB entries, a follower campaigned,
    // and the forwarded batch ended with its leader replaced (an unknown outcome) before
    // it was whole: what is tested here is the framing, not a failover. (At 250 ms, with
    // two CPU hogs beside it, the batch outlasted the proposal's patience, 8 s, once in
    // nine runs; at 500 ms the patience is 14 s.)
    let Three {
        dirs: _dirs,
        members,
        mut commits,
        ..
    } = three(1000, 500);
    let leader = agreed_leader(&commits);
    let follower = (1..=3u64).find(|m| *m != leader).unwrap();

    // 72 Txns of 1 MiB each: one proposal each, 72 MiB in all.
    let big = |seq: i32| Txn {
        body: TxnBody::DeleteExpired {
            paths: vec![format!("/m{follower}/{seq}/{}", "x".repeat(1 << 20))],
        },
        ..txn(follower, seq)
    };
    let mut batch: Vec<Txn> = (1..=72).map(big).collect();
    let c = commits[(follower - 1) as usize].as_mut().unwrap();
    c.propose(&mut batch)
        .expect("a 72 MiB batch proposed on a follower");
    settle(&members.iter().collect::<Vec<_>>(), 72);
    let h0 = members[0].history.lock().unwrap().clone();
    let order: Vec<i32> = h0.iter().map(|(_, t)| t.origin.xid).collect();
    assert_eq!(order, (1..=72).collect::<Vec<_>>(), "the batch's order");
    assert!(
        h0.iter()
            .all(|(_, t)| common::but_time(t) == common::but_time(&big(t.origin.xid))),
        "each Txn applied as proposed"
    );
    for m in &members[1..] {
        assert_eq!(
            *m.history.lock().unwrap(),
            h0,
            "one history on every member"
        );
    }
    for c in commits.iter_mut() {
        runtime().block_on(c.take().unwrap().shutdown());
    }
}

/// What one member submitted without waiting (`Commit::submit`), cut into epochs where
/// its writer reported an unknown outcome (the server drops every client then, and the
/// test, standing in for the sequencer, says so with `dropped_all`).
#[derive(Default)]
struct Submitted {
    epochs: Vec<Vec<i32>>,
    troubles: usize,
}

impl Submitted {
    /// Submits one single-Txn batch `seq` on member `m`, after taking in any trouble
    /// its writer reported.
    fn submit(
        &mut self,
        c: &mut RaftCommit,
        troubles: &mut tokio::sync::mpsc::UnboundedReceiver<CommitError>,
        m: u64,
        seq: i32,
    ) {
        self.take_troubles(c, troubles);
        if self.epochs.is_empty() {
            self.epochs.push(Vec::new());
        }
        c.submit(&mut vec![txn(m, seq)]).expect("submitted");
        self.epochs.last_mut().unwrap().push(seq);
    }

    /// Takes in every trouble `c`'s writer reported: each starts a new epoch, after
    /// `dropped_all` (as the server's sequencer drops every client).
    fn take_troubles(
        &mut self,
        c: &mut RaftCommit,
        troubles: &mut tokio::sync::mpsc::UnboundedReceiver<CommitError>,
    ) {
        while let Ok(e) = troubles.try_recv() {
            assert!(matches!(e, CommitError::Unavailable(_)), "{e}");
            self.troubles += 1;
            c.dropped_all();
            self.epochs.push(Vec::new());
        }
    }

    /// Member `m`'s Txns in `history` are in the order it submitted them, and within
    /// each epoch what was applied is a prefix of what was submitted: a batch is never
    /// applied after a batch before it was lost.
    fn check(&self, m: u64, history: &[(LogIndex, Txn)]) {
        let applied: Vec<i32> = history
            .iter()
            .filter(|(_, t)| t.origin.member == MemberId(m))
            .map(|(_, t)| t.origin.xid)
            .collect();
        assert!(
            applied.windows(2).all(|w| w[0] < w[1]),
            "member {m}'s order: {applied:?}"
        );
        for e in &self.epochs {
            let got: Vec<bool> = e.iter().map(|s| applied.contains(s)).collect();
            assert!(
                !got.windows(2).any(|w| !w[0] && w[1]),
                "member {m}: a batch applied after an earlier one of its epoch was lost: \
                 submitted {e:?}, applied {applied:?}"
            );
        }
    }
}

/// The pipelined write path: every member hands batches to its writer without waiting
/// (`Commit::submit`, as the server's sequencer does), several in flight at once on the
/// leader and on the followers' forwarding connections; one history on all three, each
/// member's batches in order. Then the leader stops while the two others have batches in
/// flight: each survivor's applied batches are still in order, and where an outcome was
/// unknown, what was applied of that epoch is a prefix of what was submitted.
#[test]
fn pipelined_batches_keep_each_members_order_through_a_failover() {
    let Three {
        dirs: _dirs,
        members,
        mut commits,
        ..
    } = three(1000, HEARTBEAT_MS);
    let leader = agreed_leader(&commits);
    let mut troubles: Vec<_> = commits
        .iter_mut()
        .map(|c| c.as_mut().unwrap().troubles())
        .collect();
    let mut submitted: Vec<Submitted> = (0..3).map(|_| Submitted::default()).collect();
    const FIRST: i32 = 300;
    for seq in 1..=FIRST {
        for i in 0..3 {
            let c = commits[i].as_mut().unwrap();
            submitted[i].submit(c, &mut troubles[i], i as u64 + 1, seq);
        }
    }
    // A synchronous proposal after them returns once everything before it is settled.
    for (i, c) in commits.iter_mut().enumerate() {
        let m = i as u64 + 1;
        let _ = c.as_mut().unwrap().propose(&mut vec![txn(m, FIRST + 1)]);
    }
    let all: Vec<&Member> = members.iter().collect();
    let n = members
        .iter()
        .map(|m| m.history.lock().unwrap().len())
        .max()
        .unwrap();
    let h = one_history(&all, n);
    for (i, s) in submitted.iter().enumerate() {
        s.check(i as u64 + 1, &h);
        if s.troubles == 0 {
            let mine = h
                .iter()
                .filter(|(_, t)| t.origin.member == MemberId(i as u64 + 1))
                .count();
            assert_eq!(
                mine,
                FIRST as usize + 1,
                "member {}: every batch applied",
                i + 1
            );
        }
    }

    // The leader stops a quarter of the way through the survivors' next batches.
    let li = (leader - 1) as usize;
    let survivors: Vec<usize> = (0..3).filter(|i| *i != li).collect();
    const SECOND: i32 = 400;
    let mut old = None;
    for seq in FIRST + 2..=FIRST + 1 + SECOND {
        if seq == FIRST + 1 + SECOND / 4 {
            // Stopped while the survivors go on submitting.
            let c = commits[li].take().unwrap();
            old = Some(runtime().spawn(async move {
                c.shutdown().await;
                c
            }));
        }
        for &i in &survivors {
            let c = commits[i].as_mut().unwrap();
            submitted[i].submit(c, &mut troubles[i], i as u64 + 1, seq);
        }
    }
    drop(
        runtime()
            .block_on(old.expect("the leader stopped"))
            .unwrap(),
    );
    // Settled: a synchronous proposal from each survivor, retried until one goes
    // through (the first ones may meet the election).
    let until = Instant::now() + Duration::from_secs(60);
    for &i in &survivors {
        let m = i as u64 + 1;
        let mut seq = 10_000;
        loop {
            let c = commits[i].as_mut().unwrap();
            submitted[i].take_troubles(c, &mut troubles[i]);
            match c.propose(&mut vec![txn(m, seq)]) {
                Ok(()) => break,
                Err(CommitError::Unavailable(_)) => {}
                Err(e) => panic!("{e}"),
            }
            assert!(
                Instant::now() < until,
                "member {m} never wrote after the failover"
            );
            seq += 1;
        }
    }
    let surv: Vec<&Member> = survivors.iter().map(|i| &members[*i]).collect();
    let n = surv
        .iter()
        .map(|m| m.history.lock().unwrap().len())
        .max()
        .unwrap();
    let h = one_history(&surv, n);
    for &i in &survivors {
        let s = &submitted[i];
        let applied = h
            .iter()
            .filter(|(_, t)| t.origin.member == MemberId(i as u64 + 1))
            .count();
        eprintln!(
            "member {}: {} epochs, {} troubles, {applied} of its Txns applied",
            i + 1,
            s.epochs.len(),
            s.troubles
        );
        s.check(i as u64 + 1, &h);
    }
    for c in commits.into_iter().flatten() {
        runtime().block_on(c.shutdown());
    }
}
