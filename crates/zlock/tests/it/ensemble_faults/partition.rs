//! 8: the leader cut off from the other members while its clients stay connected to it;
//! 9: a follower cut off the same way.
//!
//! Each member runs in a network namespace of its own ([`EnsembleOptions::netns`]; the
//! test needs root: `zlock_testkit::require(Peer::Root)`); the clients, in the test
//! process, reach every member over a bridge. [`ChildEnsemble::cut`] drops the packets between the leader and the others,
//! both ways, silently; the leader's link to its clients stays up. Under the load of
//! `traffic.rs` (lock workers and writers on the leader and on a follower), and with
//! clients that know only the leader (so whatever they get comes from it):
//!
//! - the cut-off leader acknowledges no write and grants no lock while cut off;
//! - a lock its client held before the cut, idle, is handed to a client of the
//!   majority only after that holder's `lost()` has fired;
//! - the expiries the cut-off leader decides (it hears of no session) never reach
//!   the majority: no session of the traffic is lost;
//! - the majority elects a new leader and the traffic goes on (failover printed);
//! - healed, the old leader rejoins as a follower; every acknowledged write is there,
//!   no overlap, fencing tokens rise, and the members agree.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zlock::recipes::Mutex;
use zlock::{Client, ConnectionState, CreateMode, Error, ErrorCode, LockPath};
use zlock_testkit::{require, ChildEnsemble, EnsembleOptions, Peer};

use super::traffic::{synced, verify, Traffic};
use super::{bounded, children, connect, converged, moved_with_its_node, within, LOCK, SESSION_MS};

/// A lock held, idle, by a client of the leader across the cut.
const HELD: &str = "/locks/held-across-cut";
/// Where the clients of the leader alone write.
const CUT_OFF: &str = "/cut-off";

/// What the clients that know only the cut-off leader were given, and when.
#[derive(Default)]
struct CutOffSide {
    /// Acknowledged creates: (path, when acknowledged).
    acked: StdMutex<Vec<(String, Instant)>>,
    /// Grants of [`LOCK`].
    granted: StdMutex<Vec<Instant>>,
    stop: AtomicBool,
}

impl CutOffSide {
    /// The acknowledged creates, once checked that none came before `healed` (the cut
    /// was at `fault`; `who` is the member cut off, for the message).
    fn acked_after(&self, healed: Instant, fault: Instant, who: &str) -> Vec<(String, Instant)> {
        let acked = self.acked.lock().unwrap().clone();
        let early: Vec<_> = acked.iter().filter(|(_, at)| *at < healed).collect();
        assert!(
            early.is_empty(),
            "the cut-off {who} acknowledged writes: {:?}",
            early
                .iter()
                .map(|(p, at)| (p, *at - fault))
                .collect::<Vec<_>>()
        );
        acked
    }
}

/// Creates under [`CUT_OFF`] one after another through `zk`, each given 2 s.
async fn write_probe(zk: Client, side: Arc<CutOffSide>) {
    let mut n = 0u64;
    while !side.stop.load(Ordering::SeqCst) {
        n += 1;
        let path = format!("{CUT_OFF}/p{n:06}");
        let sent = zk.create(&path, b"", CreateMode::Persistent);
        match tokio::time::timeout(Duration::from_secs(2), sent).await {
            Ok(Ok(_)) => side.acked.lock().unwrap().push((path, Instant::now())),
            Ok(Err(Error::Server(ErrorCode::NodeExists))) => {} // an earlier attempt landed
            Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Asks for [`LOCK`] through `zk` (the workers' lock), each attempt given 2 s; a
/// grant is recorded and released at once.
async fn lock_probe(zk: Client, side: Arc<CutOffSide>) {
    let lock = Mutex::new(zk, LOCK).without_metrics();
    while !side.stop.load(Ordering::SeqCst) {
        match lock.acquire_timeout(Duration::from_secs(2)).await {
            Ok(Some(g)) => {
                side.granted.lock().unwrap().push(Instant::now());
                let _ = tokio::time::timeout(Duration::from_secs(5), g.release()).await;
            }
            Ok(None) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Member `i`'s Raft term (`mntr`'s `zlock_raft_term`).
async fn raft_term(ens: &ChildEnsemble, i: usize) -> u64 {
    let out = ens.four_letters(i, "mntr", Duration::from_secs(5)).await;
    let out = out.unwrap_or_else(|| panic!("member {i}: no mntr"));
    out.lines()
        .find_map(|l| l.strip_prefix("zlock_raft_term\t"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("member {i}: no zlock_raft_term in mntr: {out}"))
}

/// Three members, each in a network namespace of its own (so one can be cut off);
/// `None` if not root and missing peers are allowed.
async fn netns_ensemble() -> Option<ChildEnsemble> {
    require(Peer::Root)?;
    let opts = EnsembleOptions {
        netns: true,
        ..EnsembleOptions::default()
    };
    let ens = ChildEnsemble::start_with(opts)
        .await
        .unwrap_or_else(|e| panic!("an ensemble in network namespaces: {e:#}"));
    Some(ens)
}

async fn leader_cut_off(path: LockPath, name: &str) {
    let Some(mut ens) = netns_ensemble().await else {
        return;
    };
    let l = ens.leader().await.unwrap();
    let f = (l + 1) % 3;
    let setup = connect(&ens.connect_string()).await;
    setup.ensure_path(CUT_OFF).await.unwrap();
    setup.ensure_path("/locks").await.unwrap();
    setup.close().await.unwrap();
    let t = Traffic::start(&ens, path, 4, &[l, f]).await;

    // Clients that know only the leader (asked again: the traffic's start may have
    // seen an election), and a holder among them, idle under its lock.
    let l = ens.leader().await.unwrap();
    let f = (l + 1) % 3;
    let only_l = ens.client_addr(l).to_string();
    let holder = connect(&only_l).await.with_lock_path(path);
    let held = within("the lock held across the cut", async {
        Mutex::new(holder.clone(), HELD)
            .without_metrics()
            .acquire()
            .await
    })
    .await
    .unwrap();
    let holder_lost = tokio::spawn({
        let lost = held.lost();
        async move {
            let state = lost.await;
            (state, Instant::now())
        }
    });
    let probe_clients = [connect(&only_l).await, connect(&only_l).await];

    let term = raft_term(&ens, l).await;
    ens.cut(l).unwrap();
    let fault = Instant::now();
    // From now on, what the clients of the leader alone are given.
    let side = Arc::new(CutOffSide::default());
    let mut probes = JoinSet::new();
    probes.spawn(write_probe(probe_clients[0].clone(), side.clone()));
    let locker = probe_clients[1].clone().with_lock_path(path);
    probes.spawn(lock_probe(locker, side.clone()));
    // A client of the majority asks for the idle holder's lock.
    let contender = connect(&ens.client_addr(f).to_string())
        .await
        .with_lock_path(path);
    let contended = tokio::spawn({
        let lock = Mutex::new(contender.clone(), HELD).without_metrics();
        async move {
            let g = lock.acquire().await.unwrap();
            let at = Instant::now();
            g.release().await.unwrap();
            at
        }
    });

    t.progress_since(fault, 20, 20).await;
    let new = ens.leader().await.unwrap();
    assert_ne!(new, l, "the majority elected a new leader");
    // A new election, so what was cut off led (the lead did not move just before).
    // `mntr`'s term is refreshed every 100 ms, so it may lag the new leader's `srvr`.
    let until = Instant::now() + Duration::from_secs(5);
    let now = loop {
        let now = raft_term(&ens, new).await;
        if now > term || Instant::now() > until {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        now > term,
        "member {l} was cut off as a follower (term {term}, then {now})"
    );
    eprintln!(
        "FAILOVER leader cut off ({name} locks): {}",
        t.failover(fault)
    );
    // Cut off until the majority has expired the idle holder's session and handed its
    // lock on (a session timeout after the election).
    let handed_on = within("the held lock to be handed on", contended)
        .await
        .unwrap();
    assert!(
        holder_lost.is_finished(),
        "the majority granted {HELD} {:?} after the cut while its holder, a client of the \
         cut-off leader, was not told it may have lost it",
        handed_on - fault
    );
    let (state, lost_at) = holder_lost.await.unwrap();
    assert!(
        lost_at < handed_on,
        "the holder learned ({state:?}) only after the lock was handed on"
    );
    eprintln!(
        "  idle holder on the cut-off leader: lost() ({state:?}) {:?} after the cut, its lock \
         handed on after {:?}",
        lost_at - fault,
        handed_on - fault
    );
    // Cut off past a session timeout of silence: the cut-off leader's own tracker has
    // expired every session it stopped hearing of, and those expiries must stay there.
    let quiet = Duration::from_millis(SESSION_MS as u64 + 1_000);
    tokio::time::sleep((fault + quiet).saturating_duration_since(Instant::now())).await;

    ens.heal(l).unwrap();
    let healed = Instant::now();
    within("the old leader to rejoin as a follower", async {
        while ens.leader().await.unwrap() == l || ens.mode(l).await.as_deref() != Some("follower") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    side.stop.store(true, Ordering::SeqCst);
    within("the probes to stop", async {
        while let Some(r) = probes.join_next().await {
            r.unwrap();
        }
    })
    .await;
    let acked = side.acked_after(healed, fault, "leader");
    let granted = side.granted.lock().unwrap().clone();
    assert!(
        granted.iter().all(|at| *at >= healed),
        "the cut-off leader granted {LOCK} {:?} after the cut",
        granted.iter().map(|at| *at - fault).collect::<Vec<_>>()
    );
    // What the old leader acknowledged after the heal is in the one history.
    let reader = connect(&ens.client_addr(f).to_string()).await;
    within("sync", synced(&reader)).await;
    let present = children(&reader, CUT_OFF).await;
    for (p, _) in &acked {
        let node = p.rsplit('/').next().unwrap();
        assert!(
            present.iter().any(|c| c == node),
            "{p} acknowledged, then lost"
        );
    }
    eprintln!(
        "  cut-off side: nothing acknowledged or granted while cut off; {} creates \
         acknowledged and {} grants after the heal",
        acked.len(),
        granted.len()
    );
    for c in probe_clients.iter().chain([&holder, &contender, &reader]) {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
    drop(held);
    for c in t.lock_clients.iter().chain(&t.writer_clients) {
        assert_ne!(
            c.state(),
            ConnectionState::Lost,
            "a session of the majority expired"
        );
    }
    let rec = t.stop().await;
    verify(&ens, &rec).await;
    converged(&ens).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_during_native_lock_traffic() {
    bounded(leader_cut_off(LockPath::Native, "native")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_during_recipe_lock_traffic() {
    bounded(leader_cut_off(LockPath::Recipe, "recipe")).await;
}

/// 9: a follower cut off from the other two while its clients stay connected to it,
/// under native lock traffic on the leader and on that follower (its workers know every
/// member):
///
/// - the leader keeps its quorum: the traffic goes on (its pause printed);
/// - the cut-off follower acknowledges no write while cut off to a client that knows
///   only it;
/// - a client that knows every member, on that follower, moves to another member with
///   its session and its ephemeral node;
/// - healed, the follower catches up; every acknowledged write is there, no overlap,
///   fencing tokens rise, and the members agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_cut_off_during_native_lock_traffic() {
    bounded(async {
        let Some(mut ens) = netns_ensemble().await else {
            return;
        };
        let l = ens.leader().await.unwrap();
        let setup = connect(&ens.connect_string()).await;
        setup.ensure_path(CUT_OFF).await.unwrap();
        setup.close().await.unwrap();
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, (l + 1) % 3]).await;
        // Asked again: the traffic's start may have seen an election.
        let l = ens.leader().await.unwrap();
        let f = (l + 1) % 3;
        let mover = connect(&ens.connect_string_from(f)).await;
        mover
            .create("/on-cut-follower", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        let probe = connect(&ens.client_addr(f).to_string()).await;

        ens.cut(f).unwrap();
        let fault = Instant::now();
        let side = Arc::new(CutOffSide::default());
        let probing = tokio::spawn(write_probe(probe.clone(), side.clone()));
        t.progress_since(fault, 20, 20).await;
        eprintln!("FAILOVER follower cut off: {}", t.failover(fault));
        let mut moved = mover.state_stream();
        within(
            "the session on the cut-off follower to resume elsewhere",
            moved.wait_for(|s| *s == ConnectionState::Reconnected),
        )
        .await
        .unwrap();
        // Cut off a while longer, the probe still knocking.
        tokio::time::sleep(
            (fault + Duration::from_secs(2)).saturating_duration_since(Instant::now()),
        )
        .await;

        ens.heal(f).unwrap();
        let healed = Instant::now();
        side.stop.store(true, Ordering::SeqCst);
        within("the probe to stop", probing).await.unwrap();
        side.acked_after(healed, fault, "follower");
        within("the follower to serve again", async {
            while !matches!(ens.mode(f).await.as_deref(), Some("follower" | "leader")) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // Every member, the healed one included, has the moved session's node as its own.
        moved_with_its_node(&ens, &mover, "/on-cut-follower").await;
        let rec = t.stop().await;
        verify(&ens, &rec).await;
        converged(&ens).await;
        for c in [&mover, &probe] {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
        }
    })
    .await;
}
