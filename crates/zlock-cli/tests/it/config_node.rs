//! `/zookeeper/config`, ZooKeeper's `getConfig`, zkCli's `config` and `zlock config`
//! against a zlock ensemble (three voters and an observer, each a child process), and
//! against standalone zlock and Apache ZooKeeper 3.8.
//!
//! What Apache ZooKeeper 3.8 shows, from a 3-member ensemble started from a static
//! zoo.cfg (`bench/lib/systems.sh`, `sys_start z zk-ens`) and `zkCli.sh config -s`:
//!
//! ```text
//! server.1=127.0.0.1:41777:53347:participant;127.0.0.1:39451
//! server.2=127.0.0.1:33167:43311:participant;127.0.0.1:37947
//! server.3=127.0.0.1:39633:42125:participant;127.0.0.1:55013
//! version=0
//! cZxid = 0x0
//! ctime = Thu Jan 01 00:00:00 UTC 1970
//! mZxid = 0x0
//! mtime = Wed Dec 02 07:23:16 UTC 2026
//! pZxid = 0x0
//! cversion = 0
//! dataVersion = -1
//! aclVersion = -1
//! ephemeralOwner = 0x0
//! dataLength = 186
//! numChildren = 0
//! ```
//!
//! One line per member in id order (`host:quorumPort:electionPort:role;clientHost:
//! clientPort`), then `version=<hex>` (0 for a static configuration) with no newline
//! after it (186 bytes); dataVersion -1 (ZooKeeper sets the node with version -1), mZxid
//! the configuration's version, mtime when the server started. `config -c` printed
//! `0 127.0.0.1:37947,127.0.0.1:39451,127.0.0.1:55013` (a hash table's order; zlock
//! keeps id order); `set /zookeeper/config x` printed `Insufficient permission :
//! /zookeeper/config` (NOAUTH); getAcl `'world,'anyone : r`. With
//! `standaloneEnabled=false`, `server.1=127.0.0.1:24888:24889;24181` and
//! `server.2=127.0.0.1:24890:24891:observer`, ZooKeeper 3.8 showed
//! `server.1=127.0.0.1:24888:24889:participant;0.0.0.0:24181`,
//! `server.2=127.0.0.1:24890:24891:observer`, `version=0`, and `config -c` printed
//! `0 ,0.0.0.0:24181` (an empty item for the member without a client address). The testkit has no
//! ZooKeeper ensemble launcher, so the ensemble side is checked here against these
//! rules; the standalone side (an empty node, dataVersion 0) is compared live.
//!
//! `reconfig` from zkCli against Apache ZooKeeper 3.8's 3-member ensemble with
//! `reconfigEnabled=true` and the super user `super:test` (`sys_start z zk-ens` with
//! both in `SYS_CFG_EXTRA`, 2026-12-02): `config` showed `version=100000000` (ZooKeeper
//! writes the first dynamic file at its first epoch's zxid; zlock shows 0, and later
//! versions are log positions: both are only compared for equality); without
//! `addauth`, `reconfig -add server.9=127.0.0.1:30001:30002:observer;30003` printed
//! `Insufficient permission : ` (no path); with it, `Committed new configuration:`,
//! the four lines (the observer's bare `;30003` as `0.0.0.0:30003`) and
//! `version=100000007`; `reconfig -v 1 -remove 9` printed `version No is not valid : `;
//! `reconfig -remove 9` the three lines again; `reconfig -add some` and
//! `reconfig -remove 1,2` (one voter left) `Arguments are not valid : `. An observer
//! that never started was added and removed, as on zlock. `zlock reconfig` prints the
//! same messages.

use std::time::Duration;

use crate::common::{free_run, run, zlock_cmd, Interrupt, Out, Scratch, RUN_BOUND};
use zlock_testkit::{require, ChildEnsemble, EnsembleOptions, Peer, TestServer, ZooKeeper};

/// Apache ZooKeeper's zkCli (`None`: ZooKeeper is missing and missing peers are allowed;
/// missing otherwise, the test fails: [`require`]).
fn zkcli() -> Option<std::path::PathBuf> {
    require(Peer::ZooKeeper).map(|home| home.join("bin/zkCli.sh"))
}

async fn zl(server: &str, args: &[&str]) -> Out {
    let mut cmd = zlock_cmd(args);
    cmd.args(["--server", server]);
    run(cmd, &format!("zlock {args:?}"), RUN_BOUND).await
}

async fn ok(server: &str, args: &[&str]) -> String {
    let o = zl(server, args).await;
    assert_eq!(o.code, 0, "zlock {args:?}: stderr {:?}", o.stderr);
    o.stdout
}

/// The Stat block's `name = value` lines, by name.
fn stat_field<'a>(block: &'a str, name: &str) -> &'a str {
    block
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(" = "))
        .unwrap_or_else(|| panic!("{name} in {block:?}"))
}

/// The text every member should show: its `server.N` lines in id order, `version=0`.
fn expected_config(e: &ChildEnsemble) -> Vec<String> {
    (0..e.len())
        .map(|i| {
            let role = if e.is_observer(i) {
                "observer"
            } else {
                "participant"
            };
            let client = e.client_addr(i);
            format!(":{role};{client}")
        })
        .collect()
}

fn check_config_text(text: &str, e: &ChildEnsemble) {
    let lines: Vec<&str> = text.split('\n').collect();
    let want = expected_config(e);
    assert_eq!(lines.len(), want.len() + 1, "{text:?}");
    for (i, (line, tail)) in lines.iter().zip(&want).enumerate() {
        let prefix = format!("server.{}=127.0.0.1:", i + 1);
        assert!(
            line.starts_with(&prefix) && line.ends_with(tail.as_str()),
            "line {i}: {line:?}, want {prefix}<quorum>:<election>{tail}"
        );
        // host:quorumPort:electionPort:role
        let addr = line.split(';').next().unwrap();
        assert_eq!(addr.split(':').count(), 4, "{line:?}");
    }
    assert_eq!(lines[want.len()], "version=0", "{text:?}");
}

/// zkCli's output without its connection chatter: the lines from the first
/// `server.` line on, up to the end of the Stat block if any.
fn zkcli_config(stdout: &str) -> String {
    // zkCli prints its connection event ("WATCHER::", a blank line, "WatchedEvent ...")
    // from another thread, so those lines can fall anywhere in the command's output,
    // even between two lines of the stat (seen in CI): they are skipped wherever they are.
    let mut out = Vec::new();
    for l in stdout.lines() {
        if l.is_empty() || l.starts_with("WATCHER") || l.starts_with("WatchedEvent") {
            continue;
        }
        if l.starts_with("server.") || l.starts_with("version=") || !out.is_empty() {
            out.push(l);
        }
    }
    out.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_members_show_the_ensemble() {
    let e = ChildEnsemble::start_with(EnsembleOptions {
        observers: 1,
        ..EnsembleOptions::default()
    })
    .await
    .expect("ensemble");
    e.leader().await.expect("a leader");
    let clients: Vec<String> = (0..e.len()).map(|i| e.client_addr(i).to_string()).collect();

    // Every member, the observer too, shows the whole ensemble, the same text.
    let mut texts = Vec::new();
    for i in 0..e.len() {
        let s = e.client_addr(i).to_string();
        // ZooKeeper's getConfig is a getData of /zookeeper/config; zkCli's `get` of it
        // prints the same text as `config`.
        let got = ok(&s, &["get", "/zookeeper/config"]).await;
        let text = got.strip_suffix('\n').expect("a newline after the data");
        check_config_text(text, &e);
        assert_eq!(ok(&s, &["config"]).await, got, "member {i}");
        texts.push(text.to_owned());
    }
    assert!(texts.windows(2).all(|w| w[0] == w[1]), "{texts:#?}");

    // -s: ZooKeeper's ensemble Stat for the node.
    let s = &clients[0];
    let with_stat = ok(s, &["config", "-s"]).await;
    let stat = with_stat
        .strip_prefix(&format!("{}\n", texts[0]))
        .expect("the text, then the Stat");
    assert_eq!(stat_field(stat, "cZxid"), "0x0");
    assert_eq!(stat_field(stat, "mZxid"), "0x0");
    assert_eq!(stat_field(stat, "ctime"), "Thu Jan 01 00:00:00 UTC 1970");
    assert_eq!(stat_field(stat, "dataVersion"), "-1");
    assert_eq!(stat_field(stat, "aclVersion"), "-1");
    assert_eq!(stat_field(stat, "numChildren"), "0");
    assert_eq!(stat_field(stat, "dataLength"), texts[0].len().to_string());

    // -c: the version and the client connection string.
    assert_eq!(
        ok(s, &["config", "-c"]).await,
        format!("0 {}\n", clients.join(","))
    );

    // Read-only: setData is refused with NOAUTH, zkCli's message, on a voter and on the
    // observer (which forwards writes).
    for i in [0, e.len() - 1] {
        let o = zl(&clients[i], &["set", "/zookeeper/config", "x"]).await;
        assert_eq!(o.code, 1, "member {i}: {:?}", o.stdout);
        assert_eq!(o.stderr, "Insufficient permission : /zookeeper/config\n");
    }
    assert_eq!(ok(s, &["config"]).await, format!("{}\n", texts[0]));

    // Through the client library: getData with a watch (what getConfig(true) sends),
    // and setData's error code.
    let (c, _events) = zlock::Client::connect(s, 10_000).await.expect("connect");
    let (data, stat, _watch) = c.get_data_watch("/zookeeper/config").await.expect("watch");
    assert_eq!(String::from_utf8_lossy(&data), texts[0]);
    assert_eq!(stat.version, -1);
    assert!(matches!(
        c.set_data("/zookeeper/config", b"x", -1).await,
        Err(zlock::Error::Server(zlock::ErrorCode::NoAuth))
    ));
    let _ = c.close().await;

    // Apache ZooKeeper's zkCli against a zlock member prints the same text.
    if let Some(cli) = zkcli() {
        let o = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new(cli)
                .args(["-server", s, "config", "-s"])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("zkCli in 60 s")
        .expect("run zkCli");
        let out = String::from_utf8_lossy(&o.stdout);
        let got = zkcli_config(&out);
        assert!(
            got.starts_with(&format!("{}\ncZxid = 0x0\n", texts[0])),
            "zkCli config -s: {out}"
        );
        assert!(got.contains("dataVersion = -1"), "{out}");
    }
}

/// Standalone: an empty node with dataVersion 0, as a standalone Apache ZooKeeper 3.8
/// shows it (compared live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_shows_an_empty_config() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();
    let ours = ok(s, &["config", "-s"]).await;
    let stat = ours
        .strip_prefix('\n')
        .expect("an empty line, then the Stat");
    assert_eq!(stat_field(stat, "dataVersion"), "0");
    assert_eq!(stat_field(stat, "aclVersion"), "-1");
    assert_eq!(stat_field(stat, "dataLength"), "0");
    assert_eq!(ok(s, &["config", "-c"]).await, " \n");
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let zk = tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .expect("join")
        .expect("start ZooKeeper");
    let z = zk.connect_string();
    let mut theirs = None;
    for _ in 0..120 {
        let o = zl(&z, &["config", "-s"]).await;
        if o.code == 0 {
            theirs = Some(o.stdout);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let theirs = theirs.expect("Apache ZooKeeper did not start serving");
    assert_eq!(ours, theirs, "zlock vs Apache ZooKeeper, standalone");
}

/// zkCli with a script on stdin (`addauth`, then commands); its stdout, then its
/// stderr (where it prints a command's error).
async fn zkcli_script(server: &str, script: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let cli = zkcli().expect("the test checked for ZooKeeper first");
    let mut child = tokio::process::Command::new(cli)
        .args(["-server", server])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run zkCli");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(script.as_bytes()).await.expect("script");
    stdin.write_all(b"quit\n").await.expect("quit");
    drop(stdin);
    let o = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("zkCli in 90 s")
        .expect("zkCli output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `reconfig` from `zlock reconfig` and from Apache ZooKeeper's zkCli against a zlock
/// ensemble with `reconfigEnabled=true` and a super user: adding a member, removing
/// it, zkCli's messages and single-dash flags, a stale `-v`, and no permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfig_through_zlock_and_zkcli() {
    let Some(_) = zkcli() else {
        return;
    };
    let d = run(
        zlock_cmd(&["digest", "super:test"]),
        "zlock digest",
        RUN_BOUND,
    )
    .await;
    assert_eq!((d.code, d.stderr.as_str()), (0, ""));
    let digest = d.stdout;
    assert_eq!(digest, "super:D/InIHSb7yEEbrWz8b9l71RjZJU=\n");
    let mut e = ChildEnsemble::start_with(EnsembleOptions {
        spares: 1,
        extra: vec![
            "reconfigEnabled=true".into(),
            format!("DigestAuthenticationProvider.superDigest={}", digest.trim()),
        ],
        ..EnsembleOptions::default()
    })
    .await
    .expect("ensemble");
    let l = e.leader().await.expect("a leader");
    let s = e.client_addr(l).to_string();
    e.start_spare(3).await.expect("the spare");
    let line = e.server_line(3);

    // No permission: zkCli's message, nothing changed.
    let o = zl(&s, &["reconfig", "-add", &line]).await;
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(o.stderr, "Insufficient permission : \n");

    // zlock reconfig --add, with -s.
    let out = ok(
        &s,
        &[
            "reconfig",
            "--auth",
            "digest:super:test",
            "--add",
            &line,
            "-s",
        ],
    )
    .await;
    let body = out
        .strip_prefix("Committed new configuration:\n")
        .unwrap_or_else(|| panic!("{out:?}"));
    let text: Vec<&str> = body
        .lines()
        .take_while(|l| !l.starts_with("cZxid"))
        .collect();
    assert_eq!(text.len(), 5, "four members and the version: {out}");
    assert!(
        text[3].starts_with("server.4=") && text[3].ends_with(&format!(";{}", e.client_addr(3))),
        "{out}"
    );
    let version = text[4].strip_prefix("version=").expect("version line");
    assert_eq!(stat_field(body, "mZxid"), format!("0x{version}"));
    // Every member shows it, the new one too.
    for i in 0..4 {
        let shown = ok(&e.client_addr(i).to_string(), &["config"]).await;
        assert_eq!(shown, format!("{}\n", text.join("\n")), "member {i}");
    }

    // zkCli: reconfig -remove (its own single-dash flags) as a super user.
    let out = zkcli_script(
        &s,
        "addauth digest super:test\nreconfig -remove 4\nconfig\n",
    )
    .await;
    let committed = out
        .split("Committed new configuration:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("zkCli reconfig: {out}"));
    assert!(committed.starts_with("server.1="), "{out}");
    assert!(!committed.contains("server.4="), "removed: {out}");

    // A stale version: zkCli says BadVersion; zlock says zkCli's message.
    let out = zkcli_script(
        &s,
        &format!("addauth digest super:test\nreconfig -v {version} -add {line}\n"),
    )
    .await;
    assert!(
        out.contains("BadVersion") || out.contains("version No is not valid"),
        "{out}"
    );
    let o = zl(
        &s,
        &[
            "reconfig",
            "--auth",
            "digest:super:test",
            "-v",
            version,
            "-add",
            &line,
        ],
    )
    .await;
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(o.stderr, "version No is not valid : \n");

    // --file: a dynamic config file holds the whole list (here the current one, as
    // `zlock config` prints it: nothing changes, the version stays).
    let now = ok(&s, &["config"]).await;
    let v_now = now
        .lines()
        .last()
        .unwrap()
        .strip_prefix("version=")
        .unwrap()
        .to_owned();
    let scratch = Scratch::new("reconfig-file");
    let file = scratch.file("zoo.cfg.dynamic.next");
    std::fs::write(&file, &now).unwrap();
    let out = ok(
        &s,
        &[
            "reconfig",
            "--auth",
            "digest:super:test",
            "-file",
            &file,
            "-v",
            &v_now,
        ],
    )
    .await;
    assert_eq!(out, format!("Committed new configuration:\n{now}"));
    let o = zl(
        &s,
        &[
            "reconfig",
            "--auth",
            "digest:super:test",
            "--file",
            "/nonexistent/x",
        ],
    )
    .await;
    assert_eq!(o.code, 1, "{o:?}");

    // Bad flags: nothing to do, mixed modes.
    let o = zl(&s, &["reconfig"]).await;
    assert_ne!(o.code, 0);
    let o = zl(&s, &["reconfig", "--members", &line, "--remove", "1"]).await;
    assert_eq!(o.code, 2, "{o:?}");
}

/// `zlock ensemble --reconfig-enabled` prints how to add a member; the two commands
/// it prints, run as printed (the password filled in), add member 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ensemble_command_shows_how_to_add_a_member() {
    use tokio::io::AsyncBufReadExt;
    let scratch = Scratch::new("ensemble-reconfig");
    let (client, quorum) = (free_run(4), free_run(4));
    let digest = "super:D/InIHSb7yEEbrWz8b9l71RjZJU=";
    let mut ens = zlock_cmd(&[
        "ensemble",
        "--members",
        "3",
        "--data-dir",
        &scratch.file("e"),
        "--client-port",
        &client.to_string(),
        "--quorum-port",
        &quorum.to_string(),
        "--reconfig-enabled",
        "--super-digest",
        digest,
    ])
    .spawn()
    .expect("zlock ensemble");
    // Even if the test fails: Ctrl-C, which stops the members (a SIGKILL would leave
    // them running).
    let mut lines = tokio::io::BufReader::new(ens.stdout.take().unwrap()).lines();
    let _stop = Interrupt(ens);
    let printed = crate::common::ensemble_printout(&mut lines).await;
    let at = printed
        .iter()
        .position(|l| l.starts_with("add member 4 while it serves"))
        .unwrap_or_else(|| panic!("{printed:#?}"));
    let bin = env!("CARGO_BIN_EXE_zlock");
    let as_printed = |l: &str| {
        l.trim()
            .trim_end_matches('&')
            .replacen("zlock ", &format!("{bin} "), 1)
            .replace("USER:PASSWORD", "super:test")
    };
    let server_cmd = as_printed(&printed[at + 1]);
    let reconfig_cmd = as_printed(&printed[at + 2]);
    assert!(server_cmd.contains("--myid 4") && reconfig_cmd.contains("--add 'server.4="));
    let first = format!("127.0.0.1:{client}");
    // Serving (a leader elected) before the member is added.
    tokio::time::timeout(RUN_BOUND, async {
        while zl(&first, &["config"]).await.code != 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the ensemble serves");
    let mut fourth = tokio::process::Command::new("sh")
        .args(["-c", &format!("exec {server_cmd}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("member 4");
    // The members' logs, for a failure's message.
    let logs = || {
        (1..=3)
            .map(|n| {
                let path = format!("{}/member-{n}/server.log", scratch.file("e"));
                let tail = zlock_testkit::file_tail(std::path::Path::new(&path), 30);
                format!("--- {path} (last 30 lines)\n{tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // A lost connection leaves the outcome unknown, as with zkCli: a member drops its
    // clients when it loses touch with its quorum or its leader (the default timing
    // gives a leader 0.2 s, which a loaded CI machine can stall past). Then, as an
    // operator would: read the configuration, and ask again only if the change is not
    // there. Each such retry is printed; any other failure fails the test.
    let mut attempts = 0;
    let shown = loop {
        attempts += 1;
        let mut sh = tokio::process::Command::new("sh");
        sh.args(["-c", &reconfig_cmd]).kill_on_drop(true);
        let o = run(sh, "the printed reconfig", RUN_BOUND).await;
        if o.code == 0 {
            break o.stdout;
        }
        // After a lost connection the first request may still be under way there.
        let lost = o.stderr.contains("connection lost");
        let busy = attempts > 1 && o.stderr.contains("Another reconfiguration is in progress");
        assert!(
            (lost || busy) && attempts < 6,
            "{reconfig_cmd}: {o:?}\n{}",
            logs()
        );
        eprintln!("attempt {attempts}: {o:?}; reading the config");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = zl(&first, &["config"]).await;
        if now.code == 0 && now.stdout.contains("server.4=") {
            break now.stdout;
        }
    };
    assert!(shown.contains("server.4=127.0.0.1:"), "{shown}");
    // Member 4 serves once in touch with the leader.
    let fourth_addr = format!("127.0.0.1:{}", client + 3);
    let on_fourth = tokio::time::timeout(RUN_BOUND, async {
        loop {
            let o = zl(&fourth_addr, &["config"]).await;
            if o.code == 0 {
                return o.stdout;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("member 4 serves");
    assert!(
        on_fourth.contains(&format!("server.4=127.0.0.1:{}:", quorum + 3)),
        "{on_fourth}"
    );
    assert_eq!(on_fourth.matches("participant").count(), 4, "{on_fourth}");
    let _ = fourth.kill().await;
}
