//! `server.N` lines, `myid` and the Raft timing, through [`ServerConfig`] as the CLI
//! drives it: `apply_text` (or `from_file`), then `resolve_ensemble`.

use std::path::{Path, PathBuf};

use super::*;

const ENSEMBLE: &str = "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=/var/lib/zk\n\
    clientPort=2181\n# members\nserver.1=10.0.0.1:2888:3888\n\
    server.2=10.0.0.2:2888:3888;2181\nserver.3=10.0.0.3:2888:3888:participant;10.0.0.3:2182\n";

/// `text` applied over the defaults, with `dataDir` a fresh directory holding `myid`
/// (if given).
fn config(text: &str, myid: Option<&str>) -> (tempfile::TempDir, ServerConfig) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ServerConfig::default();
    c.apply_text(Path::new("zoo.cfg"), text).unwrap();
    c.data_dir = dir.path().to_owned();
    if let Some(id) = myid {
        std::fs::write(dir.path().join("myid"), id).unwrap();
    }
    (dir, c)
}

fn apply_err(text: &str) -> ConfigError {
    ServerConfig::default()
        .apply_text(Path::new("zoo.cfg"), text)
        .unwrap_err()
}

fn line(n: usize) -> Origin {
    Origin::Line {
        path: PathBuf::from("zoo.cfg"),
        line: n,
    }
}

#[test]
fn server_lines_are_declared_with_their_lines() {
    let mut c = ServerConfig::default();
    let ignored = c.apply_text(Path::new("zoo.cfg"), ENSEMBLE).unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    let at: Vec<(Origin, u64, &str)> = c
        .declared
        .members
        .iter()
        .map(|(at, m)| (at.clone(), m.id, m.host.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            (line(7), 1, "10.0.0.1"),
            (line(8), 2, "10.0.0.2"),
            (line(9), 3, "10.0.0.3"),
        ]
    );
    // Not an ensemble until myid is known.
    assert_eq!(c.ensemble, None);
    assert!(matches!(c.check_standalone(), Err(ConfigError::Unresolved)));
}

#[test]
fn resolve_reads_myid_and_derives_the_timing() {
    let (_dir, mut c) = config(ENSEMBLE, Some("2\n"));
    c.resolve_ensemble().unwrap();
    let e = c.ensemble.clone().unwrap();
    assert_eq!(e.me, 2);
    assert_eq!(e.members.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(e.members[&1].quorum_addr(), "10.0.0.1:2888");
    assert_eq!(
        (e.heartbeat_ms, e.election_min_ms, e.election_max_ms),
        (50, 150, 200)
    );
    assert_eq!((c.init_limit, c.sync_limit), (10, 5));
    c.validate().unwrap();
    // A myid file is this member's own now, not a refusal.
    c.check_standalone().unwrap();
    // Member 2's line gives a client port only: the address stays loopback.
    assert_eq!(c.client_port, 2181);
    assert_eq!(c.client_port_address, IpAddr::from([127, 0, 0, 1]));
}

#[test]
fn this_members_line_sets_the_client_address() {
    let (_dir, mut c) = config(ENSEMBLE, Some("3"));
    c.resolve_ensemble().unwrap();
    assert_eq!(c.client_port, 2182);
    assert_eq!(c.client_port_address, IpAddr::from([10, 0, 0, 3]));
}

#[test]
fn missing_myid_says_where_to_write_it() {
    let (dir, mut c) = config(ENSEMBLE, None);
    let e = c.resolve_ensemble().unwrap_err();
    let path = dir.path().join("myid");
    assert!(
        matches!(&e, ConfigError::MissingMyId { path: p, .. } if *p == path),
        "{e}"
    );
    let msg = e.to_string();
    for want in [
        "lists ensemble members (server.1, server.2, server.3)".to_owned(),
        format!("echo 1 > {}", path.display()),
        "--myid".to_owned(),
    ] {
        assert!(msg.contains(&want), "{want:?} not in {msg}");
    }
    assert_eq!(c.ensemble, None);
}

#[test]
fn myid_not_a_member_names_the_id_and_the_members() {
    let (dir, mut c) = config(ENSEMBLE, Some("4"));
    let e = c.resolve_ensemble().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "this server's id is 4 (in {}), which is not among the ensemble's members: \
             server.1, server.2, server.3",
            dir.path().join("myid").display()
        )
    );
    std::fs::write(dir.path().join("myid"), "two").unwrap();
    let e = c.resolve_ensemble().unwrap_err();
    assert!(matches!(e, ConfigError::BadMyId { .. }), "{e}");
}

#[test]
fn the_myid_flag_replaces_the_file() {
    let (_dir, mut c) = config(ENSEMBLE, None);
    c.declared.myid = Some(1);
    c.resolve_ensemble().unwrap();
    assert_eq!(c.ensemble.as_ref().unwrap().me, 1);
    let (_dir, mut c) = config(ENSEMBLE, Some("1"));
    c.declared.myid = Some(3);
    c.resolve_ensemble().unwrap();
    assert_eq!(c.ensemble.as_ref().unwrap().me, 3);
    c.declared.myid = Some(9);
    let e = c.resolve_ensemble().unwrap_err();
    assert!(e.to_string().contains("is 9 (from --myid)"), "{e}");
}

#[test]
fn observers_are_members_that_do_not_vote() {
    let text = format!("{ENSEMBLE}server.4=10.0.0.4:2888:3888:observer;2184\n");
    let (_dir, mut c) = config(&text, Some("1"));
    assert!(c.declared.members[3].1.observer, "parsed and kept");
    c.resolve_ensemble().unwrap();
    let e = c.ensemble.as_ref().unwrap();
    assert_eq!(e.members.len(), 4);
    assert_eq!(
        e.participants().map(|m| m.id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(e.observers().map(|m| m.id).collect::<Vec<_>>(), [4]);
    assert!(!e.is_observer());
    assert_eq!(
        e.members[&4].to_string(),
        "10.0.0.4:2888:3888:observer;2184"
    );

    // The observer itself, with or without peerType=observer: its line decides.
    for extra in ["", "peerType=observer\n", "peerType=participant\n"] {
        let (_dir, mut c) = config(&format!("{text}{extra}"), Some("4"));
        c.resolve_ensemble().unwrap();
        assert!(c.ensemble.as_ref().unwrap().is_observer(), "{extra:?}");
        assert_eq!(c.client_port, 2184);
    }
    // peerType=observer on a participant's line: a participant (ZooKeeper warns too).
    let (_dir, mut c) = config(&format!("{ENSEMBLE}peerType=observer\n"), Some("1"));
    c.resolve_ensemble().unwrap();
    assert!(!c.ensemble.as_ref().unwrap().is_observer());

    let e = apply_err("peerType=leader\n");
    assert!(
        e.to_string().contains("expected participant or observer"),
        "{e}"
    );
    let (_dir, mut c) = config(&format!("{ENSEMBLE}peerType=Participant\n"), Some("1"));
    c.resolve_ensemble().unwrap();
}

#[test]
fn only_observers_is_no_ensemble() {
    let (_dir, mut c) = config(
        "server.1=a:1:2:observer\nserver.2=b:1:2:observer\n",
        Some("1"),
    );
    let e = c.resolve_ensemble().unwrap_err();
    assert!(matches!(e, ConfigError::NoParticipants), "{e}");
}

#[test]
fn one_and_two_members_are_ensembles() {
    let (_dir, mut c) = config("server.7=127.0.0.1:2888:3888\n", Some("7"));
    c.resolve_ensemble().unwrap();
    assert_eq!(c.ensemble.as_ref().unwrap().members.len(), 1);
    // Allowed, with a warning in the log that 2 members tolerate no failure.
    let (_dir, mut c) = config("server.1=a:1:2\nserver.2=b:1:2\n", Some("2"));
    c.resolve_ensemble().unwrap();
}

#[test]
fn bad_lines_name_the_file_and_line() {
    for (text, want) in [
        (
            "tickTime=2000\nserver.1=10.0.0.1:2888\n",
            "zoo.cfg:2: invalid \"server.1=10.0.0.1:2888\": expected host:quorumPort:electionPort",
        ),
        (
            "server.1=h:2888:99999\n",
            "zoo.cfg:1: invalid \"server.1=h:2888:99999\": the election port \"99999\" is not a \
             port number",
        ),
        (
            "server.0=h:2888:3888\n",
            "zoo.cfg:1: invalid \"server.0=h:2888:3888\": the id \"0\" is not an integer from 1 \
             to 255",
        ),
        ("server.x=h:2888:3888\n", "the id \"x\" is not an integer"),
        (
            "server.1=a:2888:3888\n\nserver.1=b:2888:3888\n",
            "zoo.cfg:3: server.1 is listed twice (first at zoo.cfg:1)",
        ),
        (
            "server.1=a:2888:3888\nserver.2=a:2888:3889\n",
            "zoo.cfg:2: server.2 uses a:2888, as server.1 (zoo.cfg:1) does",
        ),
    ] {
        let msg = apply_err(text).to_string();
        assert!(
            msg.starts_with(want) || msg.contains(want),
            "{want:?} not in {msg}"
        );
    }
}

#[test]
fn ipv6_members() {
    let (_dir, mut c) = config("server.1=[::1]:2888:3888;[::1]:2181\n", Some("1"));
    c.resolve_ensemble().unwrap();
    let e = c.ensemble.unwrap();
    assert_eq!(e.members[&1].quorum_addr(), "[::1]:2888");
    assert_eq!(c.client_port_address, "::1".parse::<IpAddr>().unwrap());
}

#[test]
fn dynamic_config_file_holds_the_members() {
    let dir = tempfile::tempdir().unwrap();
    let dynamic = dir.path().join("zoo.cfg.dynamic.100000000");
    std::fs::write(
        &dynamic,
        "version=100000000\nserver.1=a:2888:3888;2181\nserver.2=b:2888:3888;2181\n",
    )
    .unwrap();
    let text = format!("dataDir=/x\ndynamicConfigFile={}\n", dynamic.display());
    let mut c = ServerConfig::default();
    let ignored = c.apply_text(Path::new("zoo.cfg"), &text).unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    let (at, m) = &c.declared.members[1];
    assert_eq!(m.host, "b");
    assert_eq!(
        at.to_string(),
        format!("{}:3", dynamic.display()),
        "named by the dynamic file's line"
    );

    // Members in both places: refused, as ZooKeeper refuses them.
    let e = apply_err(&format!("server.1=a:2888:3888\n{text}"));
    assert!(matches!(e, ConfigError::ServersBesideDynamic { .. }), "{e}");
    assert!(e
        .to_string()
        .starts_with("zoo.cfg:1: server.N lines must be in the dynamicConfigFile"));

    // Its errors name it.
    std::fs::write(&dynamic, "server.1=a:2888:3888\nserver.1=b:2888:3888\n").unwrap();
    let e = apply_err(&text);
    let want = format!("{}:2: server.1 is listed twice", dynamic.display());
    assert!(e.to_string().starts_with(&want), "{e}");
    std::fs::write(&dynamic, "tickTime=1\n").unwrap();
    let e = apply_err(&text);
    assert!(e.to_string().contains("holds only server.N lines"), "{e}");

    // Without members the server is a single node; unreadable, the file cannot be told
    // apart from an ensemble's and is an error.
    std::fs::write(&dynamic, "# empty\n").unwrap();
    let mut c = ServerConfig::default();
    c.apply_text(Path::new("zoo.cfg"), &text).unwrap();
    assert!(c.declared.is_empty());
    std::fs::remove_file(&dynamic).unwrap();
    let e = apply_err(&text);
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
}

#[test]
fn myid_without_members_is_refused() {
    let (dir, c) = config("tickTime=2000\n", None);
    c.check_standalone().unwrap();
    std::fs::write(dir.path().join("myid"), "1\n").unwrap();
    let msg = c.check_standalone().unwrap_err().to_string();
    let named = format!(
        "refusing to start: {} exists",
        dir.path().join("myid").display()
    );
    assert!(msg.starts_with(&named), "{msg}");
    assert!(msg.contains("lists no members"), "{msg}");
    assert!(
        msg.contains("remove the myid file to run a single node"),
        "{msg}"
    );
}

#[test]
fn raft_timing_keys() {
    let (_dir, mut c) = config(&format!("{ENSEMBLE}zlock.raftHeartbeatMs=20\n"), Some("1"));
    c.resolve_ensemble().unwrap();
    let e = c.ensemble.as_ref().unwrap();
    assert_eq!(
        (e.heartbeat_ms, e.election_min_ms, e.election_max_ms),
        (20, 60, 80)
    );

    let (_dir, mut c) = config(
        &format!("{ENSEMBLE}zlock.electionTimeoutMs=1000\n"),
        Some("1"),
    );
    c.tick_time_ms = 4000; // as --tick-time would, after the file
    c.resolve_ensemble().unwrap();
    let e = c.ensemble.as_ref().unwrap();
    assert_eq!(
        (e.heartbeat_ms, e.election_min_ms, e.election_max_ms),
        (100, 1000, 1333)
    );

    // An election timeout within a heartbeat would depose every healthy leader.
    let (_dir, mut c) = config(
        &format!("{ENSEMBLE}zlock.electionTimeoutMs=50\n"),
        Some("1"),
    );
    let e = c.resolve_ensemble().unwrap_err();
    assert!(matches!(e, ConfigError::RaftTiming(_)), "{e}");
    assert!(e
        .to_string()
        .contains("(50-66 ms) must be longer than its heartbeat (50 ms)"));

    for bad in [
        "zlock.raftHeartbeatMs=0",
        "zlock.electionTimeoutMs=x",
        "initLimit=0",
        "syncLimit=-1",
        "initLimit=99999999999",
    ] {
        let e = apply_err(&format!("{bad}\n"));
        assert!(
            matches!(e, ConfigError::Value { line: 1, .. }),
            "{bad}: {e}"
        );
    }
    let mut c = ServerConfig::default();
    c.apply_text(Path::new("zoo.cfg"), "initLimit=20\nsyncLimit=2\n")
        .unwrap();
    assert_eq!((c.init_limit, c.sync_limit), (20, 2));
}

#[test]
fn without_members_nothing_changes() {
    let (dir, mut c) = config("tickTime=2000\n", None);
    c.resolve_ensemble().unwrap();
    assert_eq!(c.ensemble, None);
    let mut with_id = c.clone();
    with_id.declared.myid = Some(2);
    let e = with_id.resolve_ensemble().unwrap_err();
    assert!(
        matches!(e, ConfigError::MyIdWithoutMembers { id: 2 }),
        "{e}"
    );
    // An ensemble built in code is left alone, and needs no myid file.
    let e = EnsembleConfig {
        me: 1,
        members: [(1, "1=127.0.0.1:2888:3888".parse::<MemberSpec>().unwrap())].into(),
        heartbeat_ms: 50,
        election_min_ms: 150,
        election_max_ms: 300,
    };
    c.ensemble = Some(e.clone());
    c.resolve_ensemble().unwrap();
    assert_eq!(c.ensemble, Some(e));
    c.validate().unwrap();
    c.check_standalone().unwrap();
    assert!(!dir.path().join("myid").exists());
}

/// One line at a time: `MemberSpec::parse`, `DeclaredEnsemble`, `myid`, the timing.
mod members {
    use super::*;

    fn spec(id: u64, host: &str, q: u16, e: u16) -> MemberSpec {
        MemberSpec {
            id,
            host: host.into(),
            quorum_port: q,
            election_port: e,
            observer: false,
            client: None,
        }
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(
            MemberSpec::parse("1", "10.0.0.1:2888:3888"),
            Ok(spec(1, "10.0.0.1", 2888, 3888))
        );
        let m = MemberSpec::parse("2", " zk2.example:2888:3888:participant;2181 ").unwrap();
        assert_eq!(m.host, "zk2.example");
        assert!(!m.observer);
        assert_eq!(m.client, Some((None, 2181)));
        let m = MemberSpec::parse("3", "h:2888:3888:Observer;0.0.0.0:2181").unwrap();
        assert!(m.observer);
        assert_eq!(m.client, Some((Some("0.0.0.0".into()), 2181)));
        let m = MemberSpec::parse("4", "[::1]:2888:3888;[::1]:2181").unwrap();
        assert_eq!(m.host, "::1");
        assert_eq!(m.quorum_addr(), "[::1]:2888");
        assert_eq!(m.election_addr(), "[::1]:3888");
        assert_eq!(m.client, Some((Some("::1".into()), 2181)));
        assert_eq!(
            m.quorum_addr()
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .port(),
            2888
        );
    }

    #[test]
    fn display_is_zookeepers_conf_form_and_parses_back() {
        for (id, value, shown) in [
            ("1", "a:1:2", "a:1:2:participant"),
            ("2", "a:3:4:observer;2181", "a:3:4:observer;2181"),
            (
                "3",
                "[fe80::1]:5:6;[::]:7",
                "[fe80::1]:5:6:participant;[::]:7",
            ),
        ] {
            let m = MemberSpec::parse(id, value).unwrap();
            assert_eq!(m.to_string(), shown);
            assert_eq!(MemberSpec::parse(id, shown), Ok(m));
        }
    }

    #[test]
    fn flag_form() {
        let m: MemberSpec = "2=127.0.0.1:2889:3889;2182".parse().unwrap();
        assert_eq!(m.id, 2);
        assert_eq!(m.client, Some((None, 2182)));
        assert_eq!(
            "127.0.0.1:2889:3889".parse::<MemberSpec>(),
            Err(MemberSyntax::FlagForm)
        );
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        use MemberSyntax::*;
        let port = |which, value: &str| Port {
            which,
            value: value.into(),
        };
        for (id, value, want) in [
            ("0", "h:1:2", Id("0".into())),
            ("-1", "h:1:2", Id("-1".into())),
            ("x", "h:1:2", Id("x".into())),
            ("256", "h:1:2", Id("256".into())),
            ("1", "h:2888", Form),
            ("1", "h", Form),
            ("1", "h:1:2:observer:x", Form),
            ("1", "::1:2888:3888", Host),
            ("1", "[::1:2888:3888", Form),
            ("1", ":2888:3888", Host),
            ("1", "h:0:3888", port("quorum port", "0")),
            ("1", "h:2888:70000", port("election port", "70000")),
            ("1", "h:2888:x", port("election port", "x")),
            ("1", "h:1:2:leader", Role("leader".into())),
            ("1", "h:1:2;x", port("client port", "x")),
            ("1", "h:1:2;", Form),
            ("1", "h:1:2;:2181", Host),
            ("1", "h:1:2;2181;2182", SecurePort),
            ("1", "a:1:2|b:1:2", MultiAddress),
        ] {
            assert_eq!(
                MemberSpec::parse(id, value),
                Err(want),
                "server.{id}={value}"
            );
        }
    }

    fn at(line: usize) -> Origin {
        Origin::Line {
            path: "zoo.cfg".into(),
            line,
        }
    }

    #[test]
    fn duplicates_name_both_lines() {
        let mut d = DeclaredEnsemble::default();
        d.add(at(1), spec(1, "a", 2888, 3888)).unwrap();
        let e = d.add(at(2), spec(1, "b", 2888, 3888)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "zoo.cfg:2: server.1 is listed twice (first at zoo.cfg:1)"
        );
        // Another host may use the same ports; the same host may not.
        d.add(at(3), spec(2, "b", 2888, 3888)).unwrap();
        let e = d.add(at(4), spec(3, "A", 3888, 4888)).unwrap_err();
        assert!(
            matches!(&e, ConfigError::DuplicateAddress { addr, id: 3, other: 1, .. } if addr == "a:3888"),
            "{e}"
        );
        assert!(
            e.to_string().starts_with("zoo.cfg:4: server.3 uses a:3888"),
            "{e}"
        );
        assert!(e.to_string().contains("server.1 (zoo.cfg:1)"), "{e}");
        let e = d.add(at(5), spec(4, "c", 2888, 2888)).unwrap_err();
        assert!(e.to_string().contains("uses c:2888 twice"), "{e}");
        // Client ports too: on their host, or on the member's host.
        let mut c = spec(5, "d", 1, 2);
        c.client = Some((Some("a".into()), 2888));
        assert!(d.add(at(6), c.clone()).is_err());
        c.client = Some((None, 2));
        assert!(d.add(at(6), c.clone()).is_err());
        c.client = Some((None, 2181));
        d.add(at(6), c).unwrap();
        assert_eq!(d.by_id().keys().copied().collect::<Vec<_>>(), [1, 2, 5]);
    }

    #[test]
    fn myid_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_myid(dir.path()).unwrap(), None);
        let path = dir.path().join("myid");
        std::fs::write(&path, " 3\n").unwrap();
        assert_eq!(read_myid(dir.path()).unwrap(), Some((3, path.clone())));
        for bad in ["", "three", "0", "1 2", "300"] {
            std::fs::write(&path, bad).unwrap();
            let e = read_myid(dir.path()).unwrap_err();
            assert!(matches!(e, ConfigError::BadMyId { .. }), "{bad:?}: {e}");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
    }

    #[test]
    fn timing_from_tick_time() {
        let t = RaftTiming::derive(2000, None, None);
        assert_eq!(
            (t.heartbeat_ms, t.election_min_ms, t.election_max_ms),
            (50, 150, 200)
        );
        assert_eq!(RaftTiming::derive(100, None, None).heartbeat_ms, 10);
        assert_eq!(RaftTiming::derive(3000, None, None).heartbeat_ms, 75);
        let t = RaftTiming::derive(2000, Some(20), None);
        assert_eq!((t.election_min_ms, t.election_max_ms), (60, 80));
        let t = RaftTiming::derive(2000, None, Some(500));
        assert_eq!(
            (t.heartbeat_ms, t.election_min_ms, t.election_max_ms),
            (50, 500, 666)
        );
    }

    fn ensemble(members: &[MemberSpec]) -> EnsembleConfig {
        EnsembleConfig {
            me: 1,
            members: members.iter().map(|m| (m.id, m.clone())).collect(),
            heartbeat_ms: 50,
            election_min_ms: 150,
            election_max_ms: 300,
        }
    }

    #[test]
    fn validate_an_ensemble_built_in_code() {
        let a = spec(1, "a", 1, 2);
        let b = spec(2, "b", 1, 2);
        let e = ensemble(&[a.clone(), b.clone()]);
        e.validate().unwrap();
        assert_eq!(e.this_member(), Some(&a));
        let mut other = e.clone();
        other.me = 3;
        let err = other.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "this server's id is 3 (as configured), which is not among the ensemble's \
             members: server.1, server.2"
        );
        let mut obs = b.clone();
        obs.observer = true;
        ensemble(&[a.clone(), obs.clone()]).validate().unwrap();
        let mut me_obs = ensemble(&[a.clone(), obs.clone()]);
        me_obs.me = 2;
        me_obs.validate().unwrap();
        assert!(me_obs.is_observer());
        let mut lone = a.clone();
        lone.observer = true;
        let err = ensemble(&[lone]).validate().unwrap_err();
        assert!(matches!(err, ConfigError::NoParticipants), "{err}");
        let mut slow = e.clone();
        slow.election_min_ms = 50;
        assert!(matches!(slow.validate(), Err(ConfigError::RaftTiming(_))));
        let mut wrong_key = e;
        wrong_key.members.insert(7, b);
        assert!(matches!(
            wrong_key.validate(),
            Err(ConfigError::MemberId { id: 2, key: 7 })
        ));
    }
}

/// `/zookeeper/config`'s text, as ZooKeeper 3.8 writes it for a 3-member ensemble from a
/// static zoo.cfg (checked by hand against one: `zkCli config`).
#[test]
fn dynamic_config_text() {
    let members = [
        "server.1=127.0.0.1:2888:3888;127.0.0.1:2181",
        "server.2=127.0.0.1:2889:3889:participant;2182",
        "server.3=127.0.0.1:2890:3890:observer",
        "server.4=[::1]:2891:3891:observer;[::1]:2184",
    ];
    let mut e = EnsembleConfig {
        me: 1,
        members: Default::default(),
        heartbeat_ms: 50,
        election_min_ms: 150,
        election_max_ms: 200,
    };
    for l in members {
        let (k, v) = l.split_once('=').unwrap();
        let m = MemberSpec::parse(k.trim_start_matches("server."), v).unwrap();
        e.members.insert(m.id, m);
    }
    assert_eq!(
        e.dynamic_config(0),
        "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
         server.2=127.0.0.1:2889:3889:participant;0.0.0.0:2182\n\
         server.3=127.0.0.1:2890:3890:observer\n\
         server.4=[::1]:2891:3891:observer;[::1]:2184\n\
         version=0"
    );
    assert!(e
        .dynamic_config(0x1_0000_0003)
        .ends_with("\nversion=100000003"));
}
