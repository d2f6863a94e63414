//! `zlock server --config` and its ensemble flags, run as the built binary: a
//! configuration whose ensemble is wrong (no myid, myid not a member, observers only, a member
//! listed twice, a myid file with no members) is refused at startup with a non-zero exit
//! and a message that names the file, line or path; a single node's sample
//! configuration still starts, with its ignored keys logged. (A valid ensemble is only
//! parsed here, in the unit tests of `zlock_server::config`: starting one is the
//! server's business.)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Long enough for a slow shared CI machine; a refusal takes milliseconds.
const DEADLINE: Duration = Duration::from_secs(30);

const MEMBERS: &str =
    "server.1=127.0.0.1:2888:3888;2181\nserver.2=127.0.0.1:2889:3889;2182\nserver.3=127.0.0.1:2890:3890;2183\n";

fn zlock_server(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_zlock"))
        .arg("server")
        .args(args)
        .env_remove("ZLOCK_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zlock server")
}

/// Waits (bounded) for `zlock server` to exit; returns its exit code and stderr.
fn exit_of(mut child: Child) -> (Option<i32>, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zlock server still running after {DEADLINE:?}: it was not refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.code(), err)
}

/// Runs `zlock server args`, expecting a refusal: exit code 1, nothing started, and
/// each of `want` in stderr. Returns stderr.
fn refused(args: &[&str], want: &[String]) -> String {
    let (code, err) = exit_of(zlock_server(args));
    assert_eq!(code, Some(1), "stderr: {err}");
    for w in want {
        assert!(err.contains(w.as_str()), "{w:?} not in stderr: {err}");
    }
    assert!(!err.contains("starting zlock server"), "{err}");
    err
}

/// A config that, were it not refused, would start harmlessly: port 0 on loopback, data
/// in `dir/data`. `extra` comes from line 7 on.
fn write_cfg(dir: &Path, extra: &str) -> String {
    let path = dir.join("zoo.cfg");
    let text = format!(
        "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort=0\n\
         clientPortAddress=127.0.0.1\n{extra}",
        dir.join("data").display()
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `dir/data` holding a myid file with `id`; returns the myid file's path.
fn write_myid(dir: &Path, id: &str) -> String {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("myid"), id).unwrap();
    data.join("myid").display().to_string()
}

#[test]
fn members_without_myid_say_where_to_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), MEMBERS);
    let myid = dir.path().join("data").join("myid").display().to_string();
    refused(
        &["--config", &cfg],
        &[
            "this server's id is not known: the configuration lists ensemble members \
             (server.1, server.2, server.3)"
                .to_owned(),
            format!("echo 1 > {myid}"),
            "or pass --myid".to_owned(),
        ],
    );
    assert!(
        !dir.path().join("data").exists(),
        "the data dir was touched"
    );
}

#[test]
fn myid_not_among_the_members_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), MEMBERS);
    let myid = write_myid(dir.path(), "4\n");
    refused(
        &["--config", &cfg],
        &[format!(
            "this server's id is 4 (in {myid}), which is not among the ensemble's members: \
             server.1, server.2, server.3"
        )],
    );
    // --myid replaces the file, and is checked the same way.
    refused(
        &["--config", &cfg, "--myid", "5"],
        &["this server's id is 5 (from --myid)".to_owned()],
    );
}

/// Observers follow a leader, which only a participant can be.
#[test]
fn observers_only_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(
        dir.path(),
        "server.1=127.0.0.1:2888:3888:observer;2181\nserver.2=127.0.0.1:2889:3889:observer;2182\n",
    );
    write_myid(dir.path(), "1");
    refused(
        &["--config", &cfg],
        &["the ensemble has no participants: every server.N line is an observer".to_owned()],
    );
}

#[test]
fn a_member_listed_twice_is_refused_naming_both_lines() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(
        dir.path(),
        "server.1=10.0.0.1:2888:3888\nserver.1=10.0.0.2:2888:3888\n",
    );
    write_myid(dir.path(), "1");
    refused(
        &["--config", &cfg],
        &[format!(
            "{cfg}:8: server.1 is listed twice (first at {cfg}:7)"
        )],
    );
    let bad = write_cfg(dir.path(), "server.1=10.0.0.1:2888\n");
    refused(
        &["--config", &bad],
        &[format!(
            "{bad}:7: invalid \"server.1=10.0.0.1:2888\": expected \
             host:quorumPort:electionPort"
        )],
    );
}

#[test]
fn server_flags_are_checked_like_lines() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    // A malformed flag is clap's usage error (exit 2), with the reason.
    let (code, err) = exit_of(zlock_server(&["--server", "1=127.0.0.1:2888"]));
    assert_eq!(code, Some(2), "stderr: {err}");
    assert!(
        err.contains("expected host:quorumPort:electionPort"),
        "stderr: {err}"
    );
    let (code, err) = exit_of(zlock_server(&["--myid", "0"]));
    assert_eq!(code, Some(2), "stderr: {err}");
    refused(
        &[
            "--data-dir",
            &data,
            "--myid",
            "1",
            "--server",
            "1=127.0.0.1:2888:3888",
            "--server",
            "1=127.0.0.1:2889:3889",
        ],
        &[
            "--server '1=127.0.0.1:2889:3889': server.1 is listed twice (first at --server \
           '1=127.0.0.1:2888:3888')"
                .to_owned(),
        ],
    );
    refused(
        &["--data-dir", &data, "--myid", "2"],
        &["--myid 2 gives this server's id in an ensemble, but no members are listed".to_owned()],
    );
    assert!(
        !dir.path().join("data").exists(),
        "the data dir was touched"
    );
}

#[test]
fn myid_without_members_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let myid = write_myid(dir.path(), "2\n");
    let cfg = write_cfg(dir.path(), "");
    let want = [
        format!("refusing to start: {myid} exists"),
        "the configuration lists no members".to_owned(),
        "remove the myid file to run a single node".to_owned(),
    ];
    refused(&["--config", &cfg], &want);
    // The flag that overrides dataDir is what is checked.
    let data = dir.path().join("data").display().to_string();
    refused(&["--port", "0", "--data-dir", &data], &want);
}

#[test]
fn help_teaches_a_local_ensemble() {
    let out = Command::new(env!("CARGO_BIN_EXE_zlock"))
        .args(["server", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for want in [
        "zlock server --myid 1 --data-dir /tmp/zl1",
        "--server '2=127.0.0.1:2889:3889;2182'",
        "--myid <N>",
        "--server <N=HOST:PORT:PORT[;PORT]>",
        "<dataDir>/myid",
    ] {
        assert!(help.contains(want), "{want:?} not in: {help}");
    }
}

#[test]
fn a_single_node_config_starts_and_logs_ignored_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), "autopurge.purgeInterval=1\ncnxTimeout=5000\n");
    let mut child = zlock_server(&["--config", &cfg]);
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut seen = Vec::new();
    let started = loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains("starting zlock server");
                seen.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let log = seen.join("\n");
    assert!(started, "did not start within {DEADLINE:?}: {log}");
    let warn = format!("{cfg}:7: ignoring unknown configuration key autopurge.purgeInterval");
    assert!(log.contains(&warn), "{warn:?} not in: {log}");
    assert!(
        log.contains(&format!("{cfg}:8: ignoring cnxTimeout")),
        "{log}"
    );
    // initLimit and syncLimit (lines 2 and 3) are read, not ignored.
    assert!(!log.contains("ignoring initLimit"), "{log}");
}
