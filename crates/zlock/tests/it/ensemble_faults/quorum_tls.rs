//! 14: TLS between members (`sslQuorum`), with certificates made by rcgen at test time
//! ([`Pki`]: `member.pem` of the test CA, `rogue-member.pem` of another CA):
//!
//! - a TLS ensemble under lock traffic, its leader `kill -9`ed: a new leader is elected
//!   over TLS links, traffic resumes, nothing acknowledged is lost;
//! - a member whose certificate another CA signed never joins: the two others serve,
//!   it never follows anyone, and each of them says why in a line or two, not a flood;
//! - ZooKeeper's rolling switch from plain to TLS links under traffic, each member
//!   restarted in turn with `portUnification=true`, then `sslQuorum=true`, then
//!   `portUnification=false`: nothing acknowledged lost, no session lost, and a plain
//!   connection to a quorum port refused at the end.

use std::time::{Duration, Instant};

use zlock::{CreateMode, LockPath};
use zlock_testkit::pki::Pki;
use zlock_testkit::{ChildEnsemble, EnsembleOptions};

use super::{connect, converged, no_session_lost_then_verify, sync, within, Traffic};

/// The log line of a link refused at its handshake (or of the wrong kind).
const REFUSED: &str = "refused the link with a peer";

/// Bounds a test longer than [`super::bounded`]'s 120 s: the rolling switch restarts
/// nine members one after another.
async fn bounded_for<F: std::future::Future<Output = ()>>(limit: Duration, test: F) {
    zlock_testkit::zlock_bin().unwrap_or_else(|e| panic!("{e:#}"));
    if tokio::time::timeout(limit, test).await.is_err() {
        panic!("the test did not finish within {limit:?}");
    }
}

/// Starts `opts`, waits for a leader among `members` and for every one of them to have
/// applied a first session (see `super::start`).
async fn start(opts: EnsembleOptions, members: &[usize]) -> (ChildEnsemble, usize) {
    let ens = ChildEnsemble::start_with(opts).await.unwrap();
    let l = ens
        .leader_among(members, Duration::from_secs(30))
        .await
        .unwrap();
    let c = connect(&ens.client_addr(l).to_string()).await;
    c.close().await.unwrap();
    (ens, l)
}

/// Member `i`'s quorum port, from its `server.N` line.
fn quorum_port(ens: &ChildEnsemble, i: usize) -> u16 {
    let line = ens.server_line(i);
    let spec = line.split_once('=').map(|(_, s)| s).unwrap_or(&line);
    spec.split(':')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no quorum port in {line}"))
}

/// How many times member `i` logged a refused link.
fn refusals(ens: &ChildEnsemble, i: usize) -> usize {
    ens.log(i).lines().filter(|l| l.contains(REFUSED)).count()
}

/// (a) Three members with `sslQuorum=true` under native-lock traffic (a counter that
/// must end exact, plain writers); the leader `kill -9`ed; the two others elect over
/// their TLS links and traffic resumes; the killed member, restarted, rejoins over TLS;
/// every acknowledged write is on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_links_carry_an_ensemble_through_a_leader_kill9() {
    super::bounded(async {
        let pki = Pki::make().unwrap();
        let opts = EnsembleOptions {
            extra: pki.quorum_keys("member.pem"),
            ..EnsembleOptions::default()
        };
        let (mut ens, l) = start(opts, &[0, 1, 2]).await;
        for i in 0..3 {
            let log = ens.log(i);
            assert!(
                log.lines()
                    .any(|x| x.contains("links between members") && x.contains("tls only")),
                "member {i} did not start with TLS links; its log:\n{log}"
            );
        }
        converged(&ens).await;
        let t = Traffic::start(&ens, LockPath::Native, 4, &[l, (l + 1) % 3]).await;
        ens.kill9(l);
        let fault = Instant::now();
        t.progress_since(fault, 20, 20).await;
        let new = ens.leader().await.unwrap_or_else(|e| panic!("{e:#}"));
        assert_ne!(new, l);
        eprintln!("FAILOVER leader kill -9 (TLS links): {}", t.failover(fault));
        ens.restart(l).await.unwrap();
        // Back as a follower: linked to the leader again, over TLS.
        ens.leader().await.unwrap();
        no_session_lost_then_verify(&ens, t).await;
        for i in 0..3 {
            assert_eq!(refusals(&ens, i), 0, "member {i} refused a link");
        }
    })
    .await;
}

/// (b) Member 3 of a TLS ensemble is restarted (its data kept) with a quorum
/// certificate that a CA the others do not trust signed: the two others go on serving
/// (a lock taken and handed over between their clients, writes acknowledged), while
/// member 3 never follows anyone again (its `srvr` says it serves nobody) although it
/// dials them and they dial it; each of them logs the refusal, at most once a minute on
/// each side, naming the address. Without TLS enforced member 3 would be back as a
/// follower at once. (Not a fresh ensemble: a blank member waits to hear from every
/// other member before it starts, so a fresh ensemble with a member refused never
/// forms; see `commit::raft::rejoin`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_ca_cannot_join() {
    super::bounded(async {
        let pki = Pki::make().unwrap();
        let rogue = pki.path("rogue-member.pem");
        let opts = EnsembleOptions {
            extra: pki.quorum_keys("member.pem"),
            ..EnsembleOptions::default()
        };
        let (mut ens, _) = start(opts, &[0, 1, 2]).await;
        converged(&ens).await;
        let started = Instant::now();
        ens.set_member_extra(
            2,
            vec![format!("ssl.quorum.keyStore.location={}", rogue.display())],
        );
        ens.restart(2).await.unwrap();
        let leader = ens
            .leader_among(&[0, 1], Duration::from_secs(30))
            .await
            .unwrap();
        let good = format!("{},{}", ens.client_addr(0), ens.client_addr(1));
        let a = connect(&good).await;
        let b = connect(&format!("{},{}", ens.client_addr(1), ens.client_addr(0))).await;
        let lock_a = zlock::recipes::Mutex::new(a.clone(), "/locks/tls").without_metrics();
        let lock_b = zlock::recipes::Mutex::new(b.clone(), "/locks/tls").without_metrics();
        a.create("/tls-b", b"", CreateMode::Persistent)
            .await
            .unwrap();
        for n in 0..10 {
            let g = within("lock a", lock_a.acquire()).await.unwrap();
            a.create(&format!("/tls-b/a{n}"), b"", CreateMode::Persistent)
                .await
                .unwrap();
            within("release a", g.release()).await.unwrap();
            let g = within("lock b", lock_b.acquire()).await.unwrap();
            b.create(&format!("/tls-b/b{n}"), b"", CreateMode::Persistent)
                .await
                .unwrap();
            within("release b", g.release()).await.unwrap();
        }
        // Both good members refused member 3's links (it campaigns: it dials both),
        // and the leader could not dial it (it replicates to every member).
        let rogue_quorum = format!("127.0.0.1:{}", quorum_port(&ens, 2));
        within("both good members to refuse member 3", async {
            loop {
                let said = |i: usize| {
                    let log = ens.log(i);
                    let dialled = log
                        .lines()
                        .any(|l| l.contains(REFUSED) && l.contains(&rogue_quorum));
                    let accepted = log
                        .lines()
                        .any(|l| l.contains(REFUSED) && l.contains("accepting a member"));
                    (dialled || i != leader) && accepted
                };
                if said(0) && said(1) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        within("sync", sync(&a)).await.unwrap();
        assert_eq!(a.get_children("/tls-b", false).await.unwrap().len(), 20);
        converged_among(&ens, &[0, 1]).await;
        // Member 3 serves nobody: it has no leader, having no link to anyone.
        let srvr = ens
            .four_letters(2, "srvr", Duration::from_secs(2))
            .await
            .unwrap_or_default();
        assert!(
            srvr.contains("not currently serving"),
            "member 3 serves: {srvr}"
        );
        assert_eq!(ens.mode(2).await, None);
        // One line a minute at most per peer and side, not one per retry.
        let minutes = started.elapsed().as_secs() / 60 + 1;
        for i in 0..2 {
            let n = refusals(&ens, i) as u64;
            assert!(
                n <= 2 * minutes,
                "member {i} logged {n} refusals in {minutes} minute(s); its log:\n{}",
                ens.log_tail(i, 40)
            );
        }
        a.close().await.unwrap();
        b.close().await.unwrap();
    })
    .await;
}

/// `converged` for some members only (member 3 of (b) never agrees).
async fn converged_among(ens: &ChildEnsemble, members: &[usize]) {
    let zxid = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("Zxid:").map(|v| v.trim().to_owned()))
    };
    within("the good members to agree", async {
        loop {
            let mut seen = Vec::new();
            for &i in members {
                let out = ens.four_letters(i, "srvr", Duration::from_secs(1)).await;
                seen.push(zxid(&out.unwrap_or_default()));
            }
            if seen[0].is_some() && seen.iter().all(|s| *s == seen[0]) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// (c) ZooKeeper's documented switch of a running ensemble from plain to TLS links,
/// without downtime: three rolling restarts, each member stopped and started again in
/// turn, first with the quorum stores and `portUnification=true` (it takes both, still
/// dials plain), then with `sslQuorum=true` too (it dials TLS), then without
/// `portUnification` (TLS only). Under native-lock traffic and plain writers all along,
/// with a session held open throughout (its ephemeral node): after each restart the
/// member is back as a follower or leader and traffic goes on; at the end every
/// acknowledged write is on every member, the counter is exact, no session was lost,
/// the held session still works with its node, and a member's quorum port closes a
/// plain connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_switch_from_plain_to_tls_links_under_traffic() {
    bounded_for(Duration::from_secs(400), async {
        let pki = Pki::make().unwrap();
        let (mut ens, l) = start(EnsembleOptions::default(), &[0, 1, 2]).await;
        converged(&ens).await;
        let held = connect(&ens.connect_string()).await;
        held.create("/held", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        let t = Traffic::start(&ens, LockPath::Native, 3, &[l, (l + 1) % 3]).await;
        let stores = pki.quorum_keys("member.pem")[1..].to_vec();
        let steps: [(&str, &[&str]); 3] = [
            ("portUnification=true", &["portUnification=true"]),
            (
                "sslQuorum=true",
                &["portUnification=true", "sslQuorum=true"],
            ),
            ("portUnification=false", &["sslQuorum=true"]),
        ];
        for (step, lines) in steps {
            for i in 0..3 {
                let mut own = stores.clone();
                own.extend(lines.iter().map(|s| s.to_string()));
                ens.set_member_extra(i, own);
                ens.stop(i).unwrap();
                ens.start_again(i).await.unwrap();
                let back = Instant::now();
                ens.leader()
                    .await
                    .unwrap_or_else(|e| panic!("after {step} on member {i}: {e:#}"));
                t.progress_since(back, 3, 3).await;
                eprintln!("rolled member {i} to {step}");
            }
        }
        // Every member now dials and takes TLS only.
        for i in 0..3 {
            let log = ens.log(i);
            let last = log.lines().rfind(|x| x.contains("links between members"));
            assert!(
                last.is_some_and(|x| x.contains("tls only") && x.contains("dial=\"tls\"")),
                "member {i} last started with {last:?}"
            );
        }
        no_session_lost_then_verify(&ens, t).await;
        within("sync", sync(&held)).await.unwrap();
        let st = held.exists("/held", false).await.unwrap();
        assert_eq!(
            st.map(|s| s.ephemeral_owner),
            Some(held.session_id()),
            "the held session's node"
        );
        held.create("/held-after", b"", CreateMode::Ephemeral)
            .await
            .unwrap();
        // A plain member is closed on now: the quorum port takes TLS only.
        plain_hello_is_closed(&ens, 0).await;
        held.close().await.unwrap();
    })
    .await;
}

/// A plain connection to member `i`'s quorum port (bytes that are no TLS record) is
/// closed without an answer, and the member says why.
async fn plain_hello_is_closed(ens: &ChildEnsemble, i: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let before = refusals(ens, i);
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", quorum_port(ens, i)))
        .await
        .unwrap();
    // A frame's length first: never 0x16, a TLS handshake record's first byte.
    s.write_all(&[0, 0, 0, 4, 1, 2, 3, 4]).await.unwrap();
    let mut buf = [0u8; 16];
    let n = within("the plain connection to be closed", s.read(&mut buf)).await;
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "the TLS-only quorum port answered a plain connection: {n:?}"
    );
    // Logged at warn once a minute per host: this probe's line, or, if a plain
    // connection from this host was refused less than a minute ago in the member's
    // current run, that one's (this probe's is then at debug).
    let plain_refused_this_run = || {
        let log = ens.log(i);
        let run = log
            .rfind("links between members")
            .map_or(&log[..], |at| &log[at..]);
        run.lines()
            .any(|l| l.contains(REFUSED) && l.contains("does not speak TLS"))
    };
    within("the refusal to be logged", async {
        while refusals(ens, i) == before && !plain_refused_this_run() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
