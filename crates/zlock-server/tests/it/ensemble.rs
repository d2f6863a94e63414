//! Three zlock servers in one process forming an ensemble on loopback ports, driven by
//! an independent client (the `zookeeper-client` crate): writes through the leader and
//! through followers, reads served by the member a client is connected to, `sync`
//! making a follower's reads current, a watch
//! event pushed by a follower, and a session that keeps its ephemeral node while its
//! member (the leader) stops and the client moves to another member.
//!
//! Stopping here is a clean shutdown of one member inside the process; `kill -9` of
//! member processes is for the fault tests.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::rawclient::RawClient;
use tokio::sync::oneshot;
use zlock_server::config::{EnsembleConfig, MemberSpec};
use zlock_server::ServerConfig;
use zookeeper_client as zk;

const DEADLINE: Duration = Duration::from_secs(20);

struct Member {
    client: SocketAddr,
    /// The AdminServer's address.
    admin: SocketAddr,
    quorum: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<Result<(), zlock_server::ServerError>>>,
    _dir: tempfile::TempDir,
}

/// The tests here run one at a time, as they always have: each starts three members with
/// short election timeouts (150-300 ms), and they were proven so under load.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A port for a member to bind later. Not a port-0 bind released at once: the tests of
/// the other modules in this process bind port 0 and connect meanwhile, and the kernel
/// may hand them the released port before the member binds it. The testkit's ports lie
/// below the kernel's ephemeral range, and successive calls in a process get different ones.
fn free_port() -> u16 {
    zlock_testkit::free_port()
}

async fn start_ensemble(n: u64) -> Vec<Member> {
    start_first(n, n).await
}

/// Members 1 to `started` of an ensemble of `n`; the others never start.
async fn start_first(n: u64, started: u64) -> Vec<Member> {
    // Shown for a failing test only (the test writer): errors, and what the peer link
    // and the writers decide (a connection closed, a frame given up on), unless RUST_LOG
    // says otherwise.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "error,zlock_server::commit::raft::peer=info,zlock_server::commit::raft::write=info",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
    let members: BTreeMap<u64, MemberSpec> = (1..=n)
        .map(|id| {
            (
                id,
                MemberSpec {
                    id,
                    host: "127.0.0.1".into(),
                    quorum_port: free_port(),
                    election_port: free_port(),
                    observer: false,
                    client: None,
                },
            )
        })
        .collect();
    let mut out = Vec::new();
    for id in 1..=started {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig {
            data_dir: dir.path().to_path_buf(),
            four_letter_words: vec!["*".into()],
            ensemble: Some(EnsembleConfig {
                me: id,
                members: members.clone(),
                heartbeat_ms: 50,
                election_min_ms: 150,
                election_max_ms: 300,
            }),
            ..ServerConfig::default()
        };
        config.admin.enabled = true;
        config.admin.server_address = std::net::IpAddr::from([127, 0, 0, 1]);
        config.admin.server_port = free_port();
        let admin = SocketAddr::new(config.admin.server_address, config.admin.server_port);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(zlock_server::serve(config, listener, async {
            let _ = rx.await;
        }));
        out.push(Member {
            client,
            admin,
            quorum: format!("127.0.0.1:{}", members[&id].quorum_port)
                .parse()
                .unwrap(),
            stop: Some(tx),
            done: Some(done),
            _dir: dir,
        });
    }
    out
}

async fn connect(addrs: &[SocketAddr]) -> zk::Client {
    let s = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    tokio::time::timeout(
        DEADLINE,
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&s),
    )
    .await
    .expect("connect timed out")
    .expect("connect")
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

/// Waits (bounded) until `path` exists as seen by `c` with data `want`.
async fn eventually_data(c: &zk::Client, path: &str, want: &[u8]) {
    let until = Instant::now() + DEADLINE;
    loop {
        if let Ok((d, _)) = c.get_data(path).await {
            assert_eq!(d, want, "{path}");
            return;
        }
        assert!(Instant::now() < until, "{path} never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A four-letter word's answer; it must come within the deadline.
async fn four(addr: SocketAddr, word: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(word.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    tokio::time::timeout(DEADLINE, ask)
        .await
        .unwrap_or_else(|_| panic!("{addr} did not answer {word} in {DEADLINE:?}"))
}

/// `key\tvalue` of `mntr`.
fn mntr_value(out: &str, key: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('\t').map(str::to_string))
}

async fn mode(addr: SocketAddr) -> String {
    let out = four(addr, "srvr").await;
    out.lines()
        .find_map(|l| l.strip_prefix("Mode: ").map(str::to_string))
        .unwrap_or_default()
}

/// The member index that reports `Mode: leader`, once every other running member
/// reports `Mode: follower` (bounded wait): until a member has started and heard from
/// the leader it serves nobody (its `srvr` says so), and a client's connection to it
/// is closed.
async fn leader(ms: &[Member]) -> usize {
    let until = Instant::now() + DEADLINE;
    loop {
        let mut modes = Vec::new();
        for (i, m) in ms.iter().enumerate() {
            if m.stop.is_some() {
                modes.push((i, mode(m.client).await));
            }
        }
        let leaders: Vec<usize> = modes
            .iter()
            .filter(|(_, m)| m == "leader")
            .map(|(i, _)| *i)
            .collect();
        let followers = modes.iter().filter(|(_, m)| m == "follower").count();
        if leaders.len() == 1 && followers + 1 == modes.len() {
            return leaders[0];
        }
        assert!(
            Instant::now() < until,
            "not one leader and the others following: {modes:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ensemble_serves_zookeeper_clients_through_a_leader_change() {
    let _one_at_a_time = SERIAL.lock().await;
    let mut ms = start_ensemble(3).await;
    let l = leader(&ms).await;
    let f = (l + 1) % 3;
    let modes: Vec<String> = futures_modes(&ms).await;
    assert_eq!(
        modes.iter().filter(|m| *m == "leader").count(),
        1,
        "{modes:?}"
    );
    assert_eq!(
        modes.iter().filter(|m| *m == "follower").count(),
        2,
        "{modes:?}"
    );

    // mntr and conf as ZooKeeper's in an ensemble (the leader's view is sampled every
    // 100 ms, so wait for it).
    let until = Instant::now() + DEADLINE;
    loop {
        let m = four(ms[l].client, "mntr").await;
        if mntr_value(&m, "zk_synced_followers").as_deref() == Some("2") {
            assert_eq!(mntr_value(&m, "zk_server_state").as_deref(), Some("leader"));
            assert_eq!(mntr_value(&m, "zk_followers").as_deref(), Some("2"));
            assert_eq!(mntr_value(&m, "zk_quorum_size").as_deref(), Some("3"));
            assert!(mntr_value(&m, "zk_pending_syncs").is_some());
            break;
        }
        assert!(
            Instant::now() < until,
            "the leader never saw two synced followers:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fm = four(ms[f].client, "mntr").await;
    assert_eq!(
        mntr_value(&fm, "zk_server_state").as_deref(),
        Some("follower")
    );
    assert_eq!(mntr_value(&fm, "zk_followers"), None, "leader-only keys");
    let conf = four(ms[f].client, "conf").await;
    assert!(conf.contains(&format!("serverId={}", f + 1)), "{conf}");
    assert_eq!(
        conf.lines().filter(|l| l.starts_with("server.")).count(),
        3,
        "{conf}"
    );

    // A write through the leader, read on a follower; a write through a follower
    // (forwarded), read on the leader.
    let on_leader = connect(&[ms[l].client]).await;
    let on_follower = connect(&[ms[f].client]).await;
    on_leader.create("/a", b"1", &persistent()).await.unwrap();
    eventually_data(&on_follower, "/a", b"1").await;
    on_follower.create("/b", b"2", &persistent()).await.unwrap();
    // Read-your-writes on the follower: its own write is applied there when answered.
    assert_eq!(on_follower.get_data("/b").await.unwrap().0, b"2");
    eventually_data(&on_leader, "/b", b"2").await;

    // sync on a follower: afterwards it has everything the leader had committed
    // (linearizable; ZooKeeper's sync promises less), so no waiting is needed.
    for i in 0..20 {
        let p = format!("/s{i}");
        on_leader.create(&p, b"x", &persistent()).await.unwrap();
        on_follower.sync("/").await.unwrap();
        assert_eq!(
            on_follower.get_data(&p).await.unwrap().0,
            b"x",
            "{p} after sync"
        );
    }

    // A watch set on a follower fires for a change made through the leader.
    let (_, w) = on_follower.check_and_watch_stat("/c").await.unwrap();
    on_leader.create("/c", b"", &persistent()).await.unwrap();
    let ev = tokio::time::timeout(DEADLINE, w.changed())
        .await
        .expect("watch event");
    assert_eq!(ev.event_type, zk::EventType::NodeCreated);

    // A session on the leader with an ephemeral node, told of every member: the
    // leader stops; the client moves to another member and keeps its session.
    let all: Vec<SocketAddr> = ms.iter().map(|m| m.client).collect();
    let mover = {
        // Connect to the leader first so that its stop moves the session.
        // Detached: dropped without closing its session, which the next client takes
        // over as a client moving to the next server does.
        let c = tokio::time::timeout(
            DEADLINE,
            zk::Client::connector()
                .with_detached()
                .with_session_timeout(Duration::from_secs(10))
                .connect(&ms[l].client.to_string()),
        )
        .await
        .unwrap()
        .unwrap();
        let session = c.session().clone();
        drop(c);
        tokio::time::timeout(
            DEADLINE,
            zk::Client::connector().with_session(session).connect(
                &all.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        )
        .await
        .unwrap()
        .unwrap()
    };
    mover.create("/eph", b"mine", &ephemeral()).await.unwrap();
    let sid = mover.session_id();
    ms[l].stop.take().unwrap().send(()).unwrap();
    let stopped = tokio::time::timeout(DEADLINE, ms[l].done.take().unwrap()).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the leader stopped cleanly: {stopped:?}"
    );
    let nl = leader(&ms).await;
    assert_ne!(nl, l);
    // The session goes on at another member: a write through it succeeds.
    let until = Instant::now() + DEADLINE;
    loop {
        match mover.create("/after", b"", &persistent()).await {
            Ok(_) => break,
            Err(zk::Error::ConnectionLoss) | Err(zk::Error::Timeout) => {}
            Err(e) => panic!("after failover: {e:?}"),
        }
        assert!(Instant::now() < until, "the session never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(mover.session_id(), sid, "the same session");
    let other = connect(&[ms[nl].client]).await;
    eventually_data(&other, "/eph", b"mine").await;
    let (_, st) = other.get_data("/eph").await.unwrap();
    assert_eq!(
        st.ephemeral_owner, sid.0,
        "still owned by the moved session"
    );

    stop_all(ms).await;
}

/// A member that loses its quorum (here the leader, both followers stopped) closes its
/// clients' connections once a follower would have given up on it (lease plus election
/// timeout), and starts no session, as a ZooKeeper server that lost its quorum does: a
/// client that can reach only it gets no possibly stale reads from it. Four-letter
/// words still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_without_its_quorum_serves_no_client() {
    let _serial = SERIAL.lock().await;
    let mut ms = start_ensemble(3).await;
    let l = leader(&ms).await;
    let c = connect(&[ms[l].client]).await;
    c.create("/before", b"x", &persistent()).await.unwrap();
    let mut state = c.state_watcher();
    for (i, m) in ms.iter_mut().enumerate() {
        if i != l {
            stop_one(m).await;
        }
    }
    let closed = tokio::time::timeout(DEADLINE, async {
        while state.changed().await != zk::SessionState::Disconnected {}
    })
    .await;
    assert!(
        closed.is_ok(),
        "the member kept its client without a quorum"
    );
    let read = tokio::time::timeout(Duration::from_secs(3), c.get_data("/before")).await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "a read was served without a quorum: {read:?}"
    );
    let fresh = tokio::time::timeout(
        Duration::from_secs(3),
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&ms[l].client.to_string()),
    )
    .await;
    assert!(
        !matches!(fresh, Ok(Ok(_))),
        "a session was started without a quorum"
    );
    // Four-letter words still answer, as on a ZooKeeper server that lost its quorum:
    // it is not serving, and claims to be neither leader nor follower.
    assert_eq!(four(ms[l].client, "ruok").await, "imok");
    answers_not_serving(ms[l].client).await;
    // The AdminServer likewise: `ruok` answers, the commands that read the server's
    // state give ZooKeeper's error.
    assert_eq!(admin_error(ms[l].admin, "ruok").await, "null");
    for command in ["monitor", "server_stats", "stat_reset"] {
        assert_eq!(
            admin_error(ms[l].admin, command).await,
            "\"This ZooKeeper instance is not currently serving requests\"",
            "{command}"
        );
    }
    stop_one(&mut ms[l]).await;
}

/// A session that resumes at another member moves there (a MoveSession through the
/// log): a request that the member it left still sends for it is refused with
/// SessionMoved (-118), as ZooKeeper's leader refuses one from a server that no longer
/// owns the session, so it cannot land after what the client does at its new member.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_from_the_member_a_session_left_is_refused() {
    let _serial = SERIAL.lock().await;
    let ms = start_ensemble(3).await;
    let l = leader(&ms).await;
    // Both followers: their writes are forwarded.
    let (a, b) = ((l + 1) % 3, (l + 2) % 3);
    let old = RawClient::connect(ms[a].client).await.unwrap();
    assert!(old.create("/before", b"1").await.unwrap().is_ok());
    let moved = RawClient::resume(ms[b].client, old.session_id, &old.passwd)
        .await
        .unwrap();
    assert_eq!(moved.session_id, old.session_id);
    // The old connection is still open at `a`, which forwards this for the session.
    let late = old.create("/late", b"2").await.unwrap();
    assert_eq!(
        late.err, -118,
        "SessionMoved for a write from the old member"
    );
    assert!(moved.create("/after", b"3").await.unwrap().is_ok());
    let check = connect(&[ms[l].client]).await;
    eventually_data(&check, "/after", b"3").await;
    assert!(
        matches!(check.get_data("/late").await, Err(zk::Error::NoNode)),
        "the refused write left no node"
    );
    drop((old, moved));
    stop_all(ms).await;
}

/// The ensemble's name in the peer protocol's hello: its member lines
/// (`EnsembleConfig::member_lines`), as `start_first` makes them.
fn peer_name(ms: &[Member]) -> String {
    ms.iter()
        .enumerate()
        .map(|(i, m)| format!("{}=127.0.0.1:{}", i + 1, m.quorum.port()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Stops one member and checks that it stopped cleanly.
async fn stop_one(m: &mut Member) {
    m.stop.take().unwrap().send(()).unwrap();
    let d = tokio::time::timeout(DEADLINE, m.done.take().unwrap()).await;
    assert!(matches!(d, Ok(Ok(Ok(())))), "stopped cleanly: {d:?}");
}

/// Stops every member still running, all at once, and checks that each stopped cleanly.
async fn stop_all(mut ms: Vec<Member>) {
    for m in &mut ms {
        if let Some(s) = m.stop.take() {
            let _ = s.send(());
        }
    }
    for m in ms {
        if let Some(d) = m.done {
            let r = tokio::time::timeout(DEADLINE, d).await;
            assert!(matches!(r, Ok(Ok(Ok(())))), "stopped cleanly: {r:?}");
        }
    }
}

/// Opens a connection to a member's quorum port and sends `hello`: the connection, and
/// the member's answer.
async fn greet(
    quorum: SocketAddr,
    hello: &zlock_server::commit::raft::peer::Hello,
) -> (
    tokio::net::TcpStream,
    Result<zlock_server::commit::raft::peer::Reply, zlock_server::commit::raft::peer::FrameError>,
) {
    use zlock_server::commit::raft::peer::{read_frame, write_frame, Reply};
    let mut s = tokio::net::TcpStream::connect(quorum).await.unwrap();
    write_frame(&mut s, hello).await.unwrap();
    let answer = read_frame::<Reply>(&mut s).await;
    (s, answer)
}

/// The `error` field (as JSON) of AdminServer command `command`'s answer.
async fn admin_error(addr: SocketAddr, command: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET /commands/{command} HTTP/1.0\r\nHost: zlock\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let out = tokio::time::timeout(DEADLINE, ask)
        .await
        .unwrap_or_else(|_| panic!("{addr} did not answer {command} in {DEADLINE:?}"));
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{command}: {e}: {out}"));
    json["error"].to_string()
}

/// ZooKeeper's answer to `srvr`, `stat`, `mntr` and `conf` on a server that is not
/// serving (no `Mode:` line, no `zk_server_state`), and `isro`'s.
async fn answers_not_serving(addr: SocketAddr) {
    const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests\n";
    for word in ["srvr", "stat", "mntr", "conf"] {
        assert_eq!(four(addr, word).await, NOT_SERVING, "{word}");
    }
    assert_eq!(four(addr, "isro").await, "null");
}

/// Member 1 of three, started alone: its peers never start, so it waits for them (a
/// blank member asks them where they stand before it takes part). Meanwhile its client
/// port answers four-letter words as a ZooKeeper server that looks for a leader does,
/// and no client can use it: a session does not start (its connection waits until the
/// member runs, as in the accept queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_waiting_for_its_peers_answers_four_letter_words() {
    let _serial = SERIAL.lock().await;
    let mut ms = start_first(3, 1).await;
    let addr = ms[0].client;
    assert_eq!(four(addr, "ruok").await, "imok");
    answers_not_serving(addr).await;
    assert!(four(addr, "envi").await.starts_with("Environment:\n"));
    let fresh = tokio::time::timeout(
        Duration::from_secs(3),
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&addr.to_string()),
    )
    .await;
    assert!(
        !matches!(fresh, Ok(Ok(_))),
        "a session was started on a member waiting for its peers"
    );
    // Still waiting, still answering.
    answers_not_serving(addr).await;
    ms[0].stop.take().unwrap().send(()).unwrap();
    let d = tokio::time::timeout(DEADLINE, ms[0].done.take().unwrap()).await;
    assert!(d.is_ok(), "stopped while waiting for its peers: {d:?}");
}

async fn futures_modes(ms: &[Member]) -> Vec<String> {
    let mut out = Vec::new();
    for m in ms {
        out.push(mode(m.client).await);
    }
    out
}

/// What strangers send to a member's quorum port: garbage, an oversized frame, a hello
/// from another ensemble, from an unknown member, or meant for another member, and
/// requests before any hello. Each is refused or closed, and the ensemble goes on with
/// its tree unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_on_the_peer_port_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use zlock_server::commit::raft::peer::{
        read_frame, write_frame, Hello, Reply, Request, PROTOCOL,
    };

    let _one_at_a_time = SERIAL.lock().await;
    let ms = start_ensemble(3).await;
    let l = leader(&ms).await;
    let c = connect(&[ms[l].client]).await;
    c.create("/before", b"", &persistent()).await.unwrap();
    let ensemble = peer_name(&ms);

    /// Reads until the peer closes (bounded); returns what it sent.
    async fn closed(s: &mut tokio::net::TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let r = tokio::time::timeout(DEADLINE, s.read_to_end(&mut got)).await;
        assert!(r.is_ok(), "the member did not close the connection");
        got
    }

    for m in &ms {
        // Garbage.
        let mut s = tokio::net::TcpStream::connect(m.quorum).await.unwrap();
        s.write_all(b"\x00\x00\x00\x05hello garbage that is not postcard")
            .await
            .unwrap();
        closed(&mut s).await;
        // A length beyond the limit.
        let mut s = tokio::net::TcpStream::connect(m.quorum).await.unwrap();
        s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        closed(&mut s).await;
        // The hello of an older zlock (peer protocol 1: no version in it), refused
        // with a reason that names it.
        #[derive(serde::Serialize)]
        struct HelloV1 {
            ensemble: String,
            from: u64,
            to: u64,
        }
        let mut s = tokio::net::TcpStream::connect(m.quorum).await.unwrap();
        let v1 = HelloV1 {
            ensemble: ensemble.clone(),
            from: 1,
            to: 2,
        };
        write_frame(&mut s, &v1).await.unwrap();
        match read_frame::<Reply>(&mut s).await {
            Ok(Reply::Hello(Err(why))) => assert!(why.contains("peer protocol 1"), "{why}"),
            other => panic!("a version 1 hello: {other:?}"),
        }
        closed(&mut s).await;
        // Hellos that do not fit.
        for hello in [
            Hello {
                ensemble: "another".into(),
                from: 1,
                to: 2,
                protocol: PROTOCOL,
            },
            Hello {
                ensemble: ensemble.clone(),
                from: 9,
                to: 2,
                protocol: PROTOCOL,
            },
            Hello {
                ensemble: ensemble.clone(),
                from: 1,
                to: 7,
                protocol: PROTOCOL,
            },
            Hello {
                ensemble: ensemble.clone(),
                from: 1,
                to: 2,
                protocol: PROTOCOL + 1,
            },
        ] {
            let (mut s, answer) = greet(m.quorum, &hello).await;
            match answer {
                Ok(Reply::Hello(Err(why))) => assert!(!why.is_empty()),
                // The hello was meant for another member id than this one's: refused
                // the same way, or (for member 7) refused as not this member.
                other => panic!("{hello:?}: {other:?}"),
            }
            closed(&mut s).await;
        }
        // A request in place of the hello.
        let mut s = tokio::net::TcpStream::connect(m.quorum).await.unwrap();
        write_frame(&mut s, &Request::Touch(vec![1, 2, 3]))
            .await
            .unwrap();
        closed(&mut s).await;
    }

    // Still one ensemble, serving, with its tree as it was plus the next write.
    c.create("/after", b"", &persistent()).await.unwrap();
    let kids = c.list_children("/").await.unwrap();
    assert!(
        kids.contains(&"before".to_string()) && kids.contains(&"after".to_string()),
        "{kids:?}"
    );
    stop_all(ms).await;
}

/// A leader takes a member's forwarded frames over the member's newest connection only
/// (`commit::raft::submit::Fence`), through the real peer protocol: two forwarding
/// connections of one follower to the leader, both accepted before either forwards.
/// The older may forward until the newer has had a frame taken (its frames are then in
/// the log first); after that, a frame on the older is not taken, and the leader closes
/// it. This is what keeps a frame that TCP delivers late, on a connection its member
/// gave up on, from landing after the session's newer requests.
///
/// The test's connections speak for the follower that has no client (`g`), so that
/// nothing that member's own writer forwards can fence them off midway; the requests
/// they carry act for a session the other follower (`f`) owns, made by a real client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_frame_on_a_members_older_connection_is_refused_once_a_newer_one_forwards() {
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    use zlock_core::{MemberId, Origin, SessionId, Txn};
    use zlock_proto::records::{Acl, CreateRequest};
    use zlock_proto::{OpCode, Request as ZkRequest};
    use zlock_server::commit::raft::peer::{
        read_frame, write_frame, Hello, Reply, Request, PROTOCOL,
    };
    use zlock_server::commit::raft::types::Proposal;

    let _serial = SERIAL.lock().await;
    let ms = start_ensemble(3).await;
    let l = leader(&ms).await;
    let (f, g) = ((l + 1) % 3, (l + 2) % 3);
    let (leader_id, follower_id, speaker_id) = (l as u64 + 1, f as u64 + 1, g as u64 + 1);
    let ensemble = peer_name(&ms);
    // A session whose owner is the follower: the requests it forwards act for it.
    let client = RawClient::connect(ms[f].client).await.unwrap();
    let mut xid = 1_000;
    let mut create = |path: &str| {
        xid += 1;
        let origin = Origin {
            member: MemberId(follower_id),
            session: SessionId(client.session_id),
            xid,
        };
        let req = ZkRequest::Create(
            OpCode::Create,
            CreateRequest {
                path: path.into(),
                data: Some(b"x".to_vec()),
                acl: Acl::open_unsafe(),
                flags: 0,
            },
        );
        Request::Forward(Proposal::split([Txn::request(
            origin,
            0,
            Arc::new(Vec::new()),
            req,
        )]))
    };
    // Two connections of member g's, the older accepted first.
    let mut conns = Vec::new();
    for _ in 0..2 {
        let hello = Hello {
            ensemble: ensemble.clone(),
            from: speaker_id,
            to: leader_id,
            protocol: PROTOCOL,
        };
        match greet(ms[l].quorum, &hello).await {
            (s, Ok(Reply::Hello(Ok(())))) => conns.push(s),
            (_, other) => panic!("hello: {other:?}"),
        }
    }
    let (older, newer) = conns.split_at_mut(1);
    let (older, newer) = (&mut older[0], &mut newer[0]);
    async fn forward(s: &mut tokio::net::TcpStream, req: Request, what: &str) -> Reply {
        write_frame(s, &req).await.unwrap();
        match tokio::time::timeout(DEADLINE, read_frame::<Reply>(s)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => panic!("{what}: no answer: {e}"),
            Err(_) => panic!("{what}: no answer in time"),
        }
    }
    let r = forward(older, create("/by-older-first"), "older, first").await;
    assert!(
        matches!(r, Reply::Forward(Ok(_))),
        "older, before the newer forwards: {r:?}"
    );
    let r = forward(newer, create("/by-newer"), "newer").await;
    assert!(matches!(r, Reply::Forward(Ok(_))), "newer: {r:?}");
    // The older again: not taken, and closed without an answer.
    write_frame(older, &create("/by-older-late")).await.unwrap();
    let mut rest = Vec::new();
    let r = tokio::time::timeout(DEADLINE, older.read_to_end(&mut rest)).await;
    assert!(r.is_ok(), "the leader did not close the older connection");
    assert!(
        rest.is_empty(),
        "no answer on the older connection: {rest:?}"
    );
    // The newer goes on.
    let r = forward(newer, create("/by-newer-after"), "newer, after").await;
    assert!(matches!(r, Reply::Forward(Ok(_))), "newer, after: {r:?}");

    let check = connect(&[ms[l].client]).await;
    let kids = check.list_children("/").await.unwrap();
    for taken in ["by-older-first", "by-newer", "by-newer-after"] {
        assert!(
            kids.contains(&taken.to_string()),
            "{taken} missing: {kids:?}"
        );
    }
    assert!(
        !kids.contains(&"by-older-late".to_string()),
        "the stale connection's frame was taken: {kids:?}"
    );
    drop((client, conns));
    stop_all(ms).await;
}
