//! Faults in an ensemble of three `zlock server` processes ([`ChildEnsemble`]), under
//! lock and write traffic from the `zlock` client, every client given all three members:
//!
//! 1. `kill -9` of the leader during native-lock and during recipe-lock traffic.
//! 2. `kill -9` of a follower.
//! 3. `SIGSTOP` of the leader shorter than the election timeout, then longer; of both
//!    followers while a client syncs on the leader.
//! 4. All three members killed at once and restarted: the sessions resume.
//! 5. A member's data directory wiped: it rejoins by snapshot and serves the same data.
//! 6. A client whose member dies moves to another one, keeping its session, its
//!    ephemeral node and its watch.
//! 7. A restarted member gives new clients new sessions (not those it replays).
//! 8. The leader cut off from the other members (network namespaces; needs root) while
//!    its clients stay connected: it acknowledges no write and grants no lock
//!    (`partition.rs`).
//! 9. Three voters and an observer: the observer serves reads, forwards writes, pushes
//!    watches and locks, and never counts in a quorum (`observers.rs`).
//! 10. `reconfig`: grow 3 -> 5 and shrink 5 -> 3 under traffic, a member replaced by an
//!     empty one, bad requests and their codes (`reconfig.rs`).
//! 11. The leader of five members stopped with SIGTERM: it hands leadership over first.
//! 12. A member's disk lost while the leader's log is ahead of the third member's, the
//!     leader killed as it comes back blank: the two others elect (`rejoin.rs`).
//! 13. A follower's wall clock 120 s ahead or behind (libfaketime): a lock-delay is
//!     neither shortened nor stretched, whether that member holds the waiter, forwards
//!     writes during the delay or sequences the holder's close (`clock.rs`).
//! 14. TLS between members (`sslQuorum`): a leader `kill -9`ed over TLS links, a member
//!     of another CA kept out, and the rolling switch from plain to TLS links under
//!     traffic (`quorum_tls.rs`).
//!
//! Under faults 1 to 4 and 8 the load of `traffic.rs` runs: four lock workers (overlap
//! detector, fencing tokens, a compare-and-set counter inside the critical section) and
//! plain writers; traffic must resume (bounded wait), and afterwards, on every member
//! after `sync`, every acknowledged write is there and the members agree. Failover
//! times (from the fault to the first answer to a request made after it: an
//! acknowledged create, a lock grant, an acknowledged increment) are printed, not
//! asserted: run with `--nocapture` to see them (`FAILOVER` lines).
//!
//! Deadlines only bound a broken run; nothing asserts on timing but 13, whose subject is
//! a duration (a lock-delay lasts at least its length, and not 120 s more). The servers run from
//! `zlock_testkit::zlock_bin` (built for this test process, or `ZLOCK_BIN`); their logs
//! are printed when a test fails, and kept with `ZLOCK_TEST_KEEP=1`.

mod clock;
mod observers;
mod partition;
mod quorum_tls;
mod reconfig;
mod rejoin;
mod traffic;

use std::future::Future;
use std::time::{Duration, Instant};

use zlock::{Client, ConnectionState, CreateMode, Error, ErrorCode, EventType, LockPath};
use zlock_testkit::{ChildEnsemble, EnsembleOptions};

use traffic::{verify, Traffic};

/// The session timeout every client asks for.
const SESSION_MS: i32 = 10_000;
/// The lock the workers contend for.
const LOCK: &str = "/locks/faults";
/// Where the plain writers create their nodes.
const PLAIN: &str = "/plain";
/// Bounds one step, so that a hang fails with a name.
const T: Duration = Duration::from_secs(30);

/// Bounds a whole test (its ensemble is stopped when the future is dropped).
async fn bounded<F: Future<Output = ()>>(test: F) {
    // Built before the clock starts: a first build may take longer than a test.
    zlock_testkit::zlock_bin().unwrap_or_else(|e| panic!("{e:#}"));
    if tokio::time::timeout(Duration::from_secs(120), test)
        .await
        .is_err()
    {
        panic!("the test did not finish within 120 s");
    }
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(T, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out after {T:?}"))
}

/// Connects (session timeout [`SESSION_MS`]), retrying while no member takes the new
/// session yet (e.g. no leader elected).
async fn connect(hosts: &str) -> Client {
    let start = Instant::now();
    loop {
        let attempt =
            tokio::time::timeout(Duration::from_secs(10), Client::connect(hosts, SESSION_MS));
        match attempt.await.unwrap_or(Err(Error::ConnectionLoss)) {
            Ok((c, _)) => return c,
            Err(e) if start.elapsed() < T => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("connect {hosts}: {e}"),
        }
    }
}

/// `sync("/")`: afterwards the client's member has applied everything committed before.
async fn sync(zk: &Client) -> zlock::Result<()> {
    zk.sync("/").await
}

/// The counter's value and version.
async fn read_counter(zk: &Client) -> zlock::Result<(u64, i32)> {
    let (d, st) = zk.get_data(traffic::COUNTER, false).await?;
    let v = std::str::from_utf8(&d)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("counter holds {d:?}"));
    Ok((v, st.version))
}

/// The children of `path` (none if it does not exist), retried after a connection loss.
async fn children(zk: &Client, path: &str) -> Vec<String> {
    within(&format!("children of {path}"), async {
        loop {
            match zk.get_children(path, false).await {
                Ok(c) => return c,
                Err(Error::Server(ErrorCode::NoNode)) => return Vec::new(),
                Err(Error::ConnectionLoss) => continue,
                Err(e) => panic!("get_children {path}: {e}"),
            }
        }
    })
    .await
}

/// Waits (bounded) until every member that is up reports the same zxid and node count
/// (`srvr`): one history. Call it once the load has stopped.
async fn converged(ens: &ChildEnsemble) {
    let fact = |out: &str, key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
    };
    let mut seen = Vec::new();
    let done = tokio::time::timeout(T, async {
        loop {
            seen.clear();
            for i in (0..ens.len()).filter(|i| ens.is_up(*i)) {
                let out = ens.four_letters(i, "srvr", Duration::from_secs(1)).await;
                let out = out.unwrap_or_default();
                seen.push((fact(&out, "Zxid:"), fact(&out, "Node count:")));
            }
            if seen[0].0.is_some() && seen.iter().all(|s| *s == seen[0]) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "members never agreed on (zxid, nodes): {seen:?}"
    );
}

/// No traffic session expired (a worker's own failure would have panicked already);
/// then the traffic stops and every member up has every acknowledged write, one
/// history.
async fn no_session_lost_then_verify(ens: &ChildEnsemble, t: Traffic) {
    for c in t.lock_clients.iter().chain(&t.writer_clients) {
        assert_ne!(c.state(), ConnectionState::Lost, "a session expired");
    }
    let rec = t.stop().await;
    verify(ens, &rec).await;
    converged(ens).await;
}

async fn start() -> (ChildEnsemble, usize) {
    let ens = ChildEnsemble::start().await.unwrap();
    let l = ens.leader().await.unwrap();
    // Every member applies Txns made now (a session opened and closed) before a test
    // kills one: a member that started after the others had elected rejoins
    // (`commit::raft::rejoin`), and if it asked before the leader had committed an
    // entry of its term without it, it grants no vote until its log reaches the
    // furthest one it was told of, so with the leader killed before that the two left
    // cannot elect (CI caught `client_moves_when_its_member_dies` so, once in many
    // runs, before the leader could lift that gate; test 12 is about the gap). These
    // tests are about other faults.
    let c = connect(&ens.client_addr(l).to_string()).await;
    c.close().await.unwrap();
    converged(&ens).await;
    (ens, l)
}

/// 1: the leader is SIGKILLed while four sessions take turns on a lock; writers on the
/// leader and on a follower. Traffic resumes under the new leader; the killed member,
/// restarted, catches up; nothing acknowledged is lost, no overlap.
async fn leader_killed(path: LockPath, name: &str) {
    let (mut ens, l) = start().await;
    let t = Traffic::start(&ens, path, 4, &[l, (l + 1) % 3]).await;
    ens.kill9(l);
    let fault = Instant::now();
    t.progress_since(fault, 20, 20).await;
    let new = ens.leader().await.unwrap();
    assert_ne!(new, l);
    eprintln!(
        "FAILOVER leader kill -9 ({name} locks): {}",
        t.failover(fault)
    );
    ens.restart(l).await.unwrap();
    let rec = t.stop().await;
    verify(&ens, &rec).await;
    converged(&ens).await;
}

/// 11: the leader of five members stopped as an operator stops it (SIGTERM) while four
/// sessions take turns on a lock: before it exits it hands leadership to the voter
/// furthest along, which campaigns at once with the leader's leave, and the other
/// voters grant it although their lease of the old leader (which heartbeats until the
/// handover) still runs. Shown by the stopped member's log (it saw the named member
/// take over while it still led) and the named member's (it led at that term); traffic
/// resumes, the
/// member restarted catches up, nothing acknowledged is lost, no session expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigterm_hands_leadership_over() {
    bounded(async {
        let mut ens = ChildEnsemble::start_with(EnsembleOptions {
            members: 5,
            ..EnsembleOptions::default()
        })
        .await
        .unwrap();
        let l = ens.leader().await.unwrap();
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, (l + 1) % 5]).await;
        let fault = Instant::now();
        ens.stop(l).unwrap();
        t.progress_since(fault, 20, 20).await;
        eprintln!(
            "FAILOVER leader of 5 stopped (SIGTERM, handover): {}",
            t.failover(fault)
        );
        let new = ens.leader().await.unwrap();
        assert_ne!(new, l);
        let log = ens.log(l);
        let handed = log
            .lines()
            .find(|x| x.contains("leadership handed over"))
            .unwrap_or_else(|| panic!("the stopped leader handed nothing over; its log:\n{log}"));
        // The member it named took over at the handover's term (its own log says it
        // led then). If another member leads now, that is a later election (a term
        // after it): on a loaded machine (the flake hunt's two CPU hogs) the new leader
        // can miss its heartbeats once and be replaced, which is not what is tested.
        let field = |line: &str, key: &str| -> Option<u64> {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse().ok())
        };
        let named = field(handed, "leader=").expect("the handover names a leader");
        let term = field(handed, "term=").expect("the handover names a term");
        assert_ne!(named, l as u64 + 1, "handed over to itself: {handed}");
        let leading_terms = |i: usize| -> Vec<u64> {
            ens.log(i)
                .lines()
                .filter(|x| x.contains("leading the ensemble"))
                .filter_map(|x| field(x, "term="))
                .collect()
        };
        assert!(
            leading_terms(named as usize - 1).contains(&term),
            "member {named}, named by the handover at term {term}, never led at that \
             term: {handed}"
        );
        if new as u64 + 1 != named {
            assert!(
                leading_terms(new).iter().any(|t| *t > term),
                "member {} leads, neither the one the handover named ({named}) nor \
                 after a later election: {handed}",
                new + 1
            );
        }
        ens.start_again(l).await.unwrap();
        no_session_lost_then_verify(&ens, t).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill9_during_native_lock_traffic() {
    bounded(leader_killed(LockPath::Native, "native")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill9_during_recipe_lock_traffic() {
    bounded(leader_killed(LockPath::Recipe, "recipe")).await;
}

/// 2: a follower is SIGKILLed; the two others go on; a session that was on it moves
/// with its ephemeral node; restarted, it catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_kill9() {
    bounded(async {
        let (mut ens, l) = start().await;
        let f = (l + 1) % 3;
        let mover = connect(&ens.connect_string_from(f)).await;
        mover
            .create("/on-follower", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, f]).await;
        ens.kill9(f);
        let fault = Instant::now();
        t.progress_since(fault, 20, 20).await;
        eprintln!("FAILOVER follower kill -9: {}", t.failover(fault));
        moved_with_its_node(&ens, &mover, "/on-follower").await;
        ens.restart(f).await.unwrap();
        let rec = t.stop().await;
        verify(&ens, &rec).await;
        converged(&ens).await;
    })
    .await;
}

/// `mover` reconnected (same session) and its ephemeral `node` is still its own, as
/// every member up sees it after `sync`.
async fn moved_with_its_node(ens: &ChildEnsemble, mover: &Client, node: &str) {
    let mut st = mover.state_stream();
    within(
        "the session to resume elsewhere",
        st.wait_for(|s| *s == ConnectionState::Reconnected),
    )
    .await
    .unwrap();
    for i in (0..ens.len()).filter(|i| ens.is_up(*i)) {
        let zk = connect(&ens.client_addr(i).to_string()).await;
        within("sync", sync(&zk)).await.unwrap();
        let owner = zk
            .exists(node, false)
            .await
            .unwrap()
            .map(|s| s.ephemeral_owner);
        assert_eq!(
            owner,
            Some(mover.session_id()),
            "member {i}: {node} still owned by the moved session"
        );
        zk.close().await.unwrap();
    }
}

/// 3: the leader is SIGSTOPped for 100 ms (under the 250 ms election timeout: no new
/// election is needed), then for 2 s (the others elect a new leader; the old one comes
/// back as a follower). One history afterwards, no overlap, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigstop_short_and_long() {
    bounded(async {
        let (mut ens, l) = start().await;
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, (l + 1) % 3]).await;
        for pause in [Duration::from_millis(100), Duration::from_secs(2)] {
            let l = ens.leader().await.unwrap();
            ens.sigstop(l).unwrap();
            let fault = Instant::now();
            tokio::time::sleep(pause).await;
            ens.sigcont(l).unwrap();
            t.progress_since(fault, 20, 20).await;
            let now = ens.leader().await.unwrap();
            eprintln!(
                "FAILOVER leader SIGSTOP {pause:?} (leader {}): {}",
                if now == l { "kept" } else { "changed" },
                t.failover(fault)
            );
        }
        let rec = t.stop().await;
        verify(&ens, &rec).await;
        converged(&ens).await;
    })
    .await;
}

/// 3b: a `sync` on the leader while both followers are SIGSTOPped for 300 ms: the
/// leader cannot confirm its leadership until they run again, and the sync answers
/// then. Before d097c0d the member gave up on the first failed confirmation (a round
/// of heartbeats timing out) and closed the client's connection; through a follower,
/// it waited its whole patience for a new leader that was never elected, then closed
/// it (seen in `lock_suite` against an ensemble on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_while_the_followers_pause() {
    bounded(async {
        let (mut ens, l) = start().await;
        let zk = connect(&ens.client_addr(l).to_string()).await;
        let followers: Vec<usize> = (0..ens.len()).filter(|&i| i != l).collect();
        for &f in &followers {
            ens.sigstop(f).unwrap();
        }
        let asked = tokio::spawn({
            let zk = zk.clone();
            async move { sync(&zk).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for &f in &followers {
            ens.sigcont(f).unwrap();
        }
        let r = within("sync", asked).await.unwrap();
        assert_eq!(r, Ok(()), "sync while the followers paused");
        zk.close().await.unwrap();
    })
    .await;
}

/// 4: all three members SIGKILLed at once and restarted 1 s later. Every acknowledged
/// write is there; the sessions alive before resume (within their 10 s timeout; a new
/// leader gives every session a full timeout) with their ephemeral nodes, and the load
/// goes on in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_members_kill9_and_restart() {
    bounded(async {
        let (mut ens, l) = start().await;
        let mover = on_member(&ens, l).await;
        mover
            .create("/before-power-cut", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, (l + 1) % 3]).await;
        for i in 0..ens.len() {
            ens.kill9(i);
        }
        let fault = Instant::now();
        // Down for a while: every client finds every member gone.
        tokio::time::sleep(Duration::from_secs(1)).await;
        ens.restart_all().await.unwrap();
        t.progress_since(fault, 20, 20).await;
        eprintln!(
            "FAILOVER all members kill -9, restarted after 1 s: {}",
            t.failover(fault)
        );
        // Every session lives on (a lost one would fail its worker's next call).
        for c in t.lock_clients.iter().chain(&t.writer_clients) {
            assert_ne!(c.state(), ConnectionState::Lost, "a session expired");
        }
        moved_with_its_node(&ens, &mover, "/before-power-cut").await;
        let rec = t.stop().await;
        verify(&ens, &rec).await;
        converged(&ens).await;
    })
    .await;
}

/// 5: with snapshots every 50 Txns (and so 50 entries kept behind a snapshot), and
/// more than that written (four writers one create at a time, so at least 300
/// entries however the leader merges them), a follower's data directory is wiped: it rejoins by installing
/// the leader's snapshot, serves the same data to a client connected to it alone, and
/// counts in the quorum (a write succeeds with the third member killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_member_rejoins_by_snapshot() {
    bounded(async {
        let mut ens = ChildEnsemble::start_with(EnsembleOptions {
            snap_count: 50,
            ..EnsembleOptions::default()
        })
        .await
        .unwrap();
        let l = ens.leader().await.unwrap();
        let (f, other) = ((l + 1) % 3, (l + 2) % 3);
        let zk = connect(&ens.connect_string_from(l)).await;
        zk.create("/data", b"", CreateMode::Persistent)
            .await
            .unwrap();
        const N: usize = 1_200;
        within("the writes", async {
            let mut set = tokio::task::JoinSet::new();
            for lane in 0..4 {
                let zk = zk.clone();
                set.spawn(async move {
                    for i in (lane..N).step_by(4) {
                        let p = format!("/data/n{i:05}");
                        zk.create(&p, i.to_string().as_bytes(), CreateMode::Persistent)
                            .await
                            .unwrap();
                    }
                });
            }
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
        })
        .await;
        ens.wipe_and_restart(f).await.unwrap();
        let own = connect(&ens.client_addr(f).to_string()).await;
        within("sync on the wiped member", sync(&own))
            .await
            .unwrap();
        let mut kids = children(&own, "/data").await;
        kids.sort();
        assert_eq!(kids.len(), N, "the wiped member serves every node");
        for (i, k) in kids.iter().enumerate() {
            assert_eq!(*k, format!("n{i:05}"));
        }
        let (d, _) = own.get_data("/data/n01199", false).await.unwrap();
        assert_eq!(d, b"1199");
        let log = ens.log(f);
        let this_run = log.rsplit("==== testkit: starting").next().unwrap_or("");
        assert!(
            this_run.contains("installed a snapshot from the leader"),
            "the wiped member caught up without a snapshot (the log was not purged?)"
        );
        // It is a voter again: with the third member gone, the leader and it make the quorum.
        ens.kill9(other);
        let fault = Instant::now();
        within(
            "a write with the wiped member in the quorum",
            own.create("/after-wipe", b"", CreateMode::Persistent),
        )
        .await
        .unwrap();
        eprintln!(
            "  wiped member: a write with it in the quorum took {:?}",
            fault.elapsed()
        );
        own.close().await.unwrap();
        zk.close().await.unwrap();
        converged(&ens).await;
    })
    .await;
}

/// 6: a client connected to the leader, holding an ephemeral node and a watch: the
/// leader is SIGKILLed; the client resumes its session at another member within the
/// session timeout, keeps the node, its watch fires for a change made elsewhere, and
/// it writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_moves_when_its_member_dies() {
    bounded(async {
        let (mut ens, l) = start().await;
        let mover = on_member(&ens, l).await;
        mover
            .create("/mine", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        let (none, watch) = mover.exists_watch("/watched").await.unwrap();
        assert!(none.is_none());
        let other = connect(&ens.connect_string_from((l + 1) % 3)).await;
        ens.kill9(l);
        let fault = Instant::now();
        moved_with_its_node(&ens, &mover, "/mine").await;
        eprintln!(
            "FAILOVER client's member (leader) kill -9: session resumed after {:?}",
            fault.elapsed()
        );
        within(
            "a write from another session",
            other.create("/watched", b"", CreateMode::Persistent),
        )
        .await
        .unwrap();
        let ev = within("the watch set before the move", watch)
            .await
            .unwrap();
        assert_eq!(ev.event_type, EventType::NodeCreated);
        within(
            "a write from the moved session",
            mover.create("/moved", b"", CreateMode::Persistent),
        )
        .await
        .unwrap();
        mover.close().await.unwrap();
        other.close().await.unwrap();
    })
    .await;
}

/// A session whose connection is on member `i` (asked of `i`'s `cons`), given every
/// member from `i` on: its first host may not take it (a handshake that outlasts the
/// client's wait while an election settles goes to the next host), and a test of what
/// happens to `i`'s clients needs one there.
async fn on_member(ens: &ChildEnsemble, i: usize) -> Client {
    let until = Instant::now() + T;
    loop {
        let c = connect(&ens.connect_string_from(i)).await;
        let cons = ens.four_letters(i, "cons", Duration::from_secs(5)).await;
        let sid = format!("sid={:#x})", c.session_id());
        if cons.is_some_and(|out| out.contains(&sid)) {
            return c;
        }
        assert!(
            Instant::now() < until,
            "no session of member {i} within {T:?}"
        );
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
}

/// A member restarted on its data replays its log, the CreateSessions it proposed
/// before included: new clients connecting to it meanwhile must get new sessions, not
/// the sessions those replayed entries created (a handshake is matched to its
/// CreateSession by a per-process ticket that restarts from 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_gives_new_clients_new_sessions() {
    bounded(async {
        let (mut ens, l) = start().await;
        let f = (l + 1) % 3;
        let only_f = ens.client_addr(f).to_string();
        let mut before = Vec::new();
        for _ in 0..3 {
            let c = connect(&only_f).await;
            before.push(c.session_id());
            c.close().await.unwrap();
        }
        ens.restart(f).await.unwrap();
        for _ in 0..3 {
            let c = connect(&only_f).await;
            assert!(
                !before.contains(&c.session_id()),
                "a new client got the session {:#x} created before the restart ({before:x?})",
                c.session_id()
            );
            c.close().await.unwrap();
        }
    })
    .await;
}

/// 13. A follower's wall clock 120 s ahead: no lock-delay shortened or stretched
/// (`clock.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_with_a_follower_clock_120s_ahead() {
    clock::lock_delay_with_a_skewed_follower("+120s").await;
}

/// 13. The same with the follower's clock 120 s behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_with_a_follower_clock_120s_behind() {
    clock::lock_delay_with_a_skewed_follower("-120s").await;
}

/// The pipelined write path (`zlock-server`'s `commit/raft/write.rs`): one session on a
/// follower keeps thousands of creates in flight (sent without waiting, in order) while
/// the leader is killed (-9). Whatever the session sent that was applied is applied once
/// (a frame whose outcome was unknown is never sent again), in the order it was sent,
/// and every create acknowledged is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_on_a_follower_through_a_leader_kill9() {
    use zlock_proto::records::{Acl, CreateRequest};
    use zlock_proto::{OpCode, Request};
    bounded(async {
        let (mut ens, l) = start().await;
        let f = (l + 1) % 3;
        let zk = on_member(&ens, f).await;
        within("/pipe", zk.create("/pipe", b"", CreateMode::Persistent))
            .await
            .unwrap();
        const N: usize = 3000;
        let started = Instant::now();
        let mut killed = false;
        let mut sent = Vec::with_capacity(N);
        for i in 0..N {
            if !killed && started.elapsed() >= Duration::from_millis(40) {
                ens.kill9(l);
                killed = true;
            }
            let req = Request::Create(
                OpCode::Create,
                CreateRequest {
                    path: "/pipe/n-".into(),
                    data: Some(i.to_string().into_bytes()),
                    acl: Acl::open_unsafe(),
                    flags: 2, // PERSISTENT_SEQUENTIAL
                },
            );
            // Queued on the session's connection now, in this order.
            sent.push(zk.send(&req));
            if i % 20 == 19 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        assert!(killed, "the leader was killed while the creates went out");
        let mut acked = Vec::new();
        for (i, s) in sent.into_iter().enumerate() {
            match within("a create's answer", s).await {
                Ok((h, _)) if h.err == 0 => acked.push(i),
                Ok(_) | Err(_) => {} // ConnectionLoss: applied or not
            }
        }
        // What was applied, read from a survivor after a sync.
        let reader = connect(&ens.connect_string_from(f)).await;
        within("sync", sync(&reader)).await.unwrap();
        let mut nodes = children(&reader, "/pipe").await;
        nodes.sort(); // the sequence suffix: the order they were applied in
        let mut applied = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let (d, _) = within("get", reader.get_data(&format!("/pipe/{n}"), false))
                .await
                .unwrap();
            applied.push(String::from_utf8(d).unwrap().parse::<usize>().unwrap());
        }
        eprintln!(
            "PIPELINE {} creates sent, {} acknowledged, {} applied",
            N,
            acked.len(),
            applied.len()
        );
        assert!(
            applied.windows(2).all(|w| w[0] < w[1]),
            "applied out of order or twice: {:?}",
            applied.windows(2).find(|w| w[0] >= w[1])
        );
        for i in &acked {
            assert!(
                applied.binary_search(i).is_ok(),
                "acknowledged create {i} lost"
            );
        }
        ens.restart(l).await.unwrap();
        converged(&ens).await;
    })
    .await;
}
