//! `zlock server --config`, run as the built binary: an ensemble's configuration is
//! refused at startup (non-zero exit, the offending lines named), and a single node's
//! sample configuration still starts, with its ignored keys logged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Long enough for a slow shared CI machine; a refusal takes milliseconds.
const DEADLINE: Duration = Duration::from_secs(30);

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

/// A config that, were it not refused, would start harmlessly: port 0 on loopback, data
/// in `dir`.
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

#[test]
fn server_lines_are_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(
        dir.path(),
        "server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\nserver.3=10.0.0.3:2888:3888\n",
    );
    let (code, err) = exit_of(zlock_server(&["--config", &cfg]));
    assert_eq!(code, Some(1), "stderr: {err}");
    for want in [
        "refusing to start: this configuration describes a ZooKeeper ensemble, and zlock \
         does not replicate yet:"
            .to_owned(),
        format!("  {cfg}:7: server.1=10.0.0.1:2888:3888\n"),
        format!("  {cfg}:8: server.2=10.0.0.2:2888:3888\n"),
        format!("  {cfg}:9: server.3=10.0.0.3:2888:3888\n"),
        "A single-node zlock server needs no server.N lines".to_owned(),
    ] {
        assert!(err.contains(&want), "{want:?} not in stderr: {err}");
    }
    assert!(!err.contains("starting zlock server"), "{err}");
    assert!(
        !dir.path().join("data").exists(),
        "the data dir was touched"
    );
}

#[test]
fn myid_in_the_data_dir_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("myid"), "2\n").unwrap();
    let cfg = write_cfg(dir.path(), "");
    let (code, err) = exit_of(zlock_server(&["--config", &cfg]));
    assert_eq!(code, Some(1), "stderr: {err}");
    let myid = data.join("myid").display().to_string();
    assert!(
        err.contains(&format!("refusing to start: {myid} exists")),
        "stderr: {err}"
    );
    assert!(err.contains("needs no myid file"), "stderr: {err}");
    // The flag that overrides dataDir is what is checked.
    let (code, err) = exit_of(zlock_server(&[
        "--port",
        "0",
        "--data-dir",
        &data.display().to_string(),
    ]));
    assert_eq!(code, Some(1), "stderr: {err}");
    assert!(err.contains(&myid), "stderr: {err}");
}

#[test]
fn a_single_node_config_starts_and_logs_ignored_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), "autopurge.purgeInterval=1\n");
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
        log.contains(&format!("{cfg}:2: ignoring initLimit")),
        "{log}"
    );
}
