//! `zlock-bench`, run as the built binary: the lock scenarios' own checks against an
//! in-process zlock server, the same over TLS (`--tls-ca`/`--tls-cert`/`--tls-key`
//! against a `secureClientPort`), and one failover round against a three-process
//! ensemble.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use zlock_testkit::pki::Pki;
use zlock_testkit::{ChildEnsemble, TestServer};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn bench(args: &[&str]) -> Out {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_zlock-bench"));
    cmd.args(args).kill_on_drop(true);
    let o = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("zlock-bench {args:?} did not finish in 120 s"))
        .expect("run zlock-bench");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `zlock-bench lock`'s own checks through the real protocol: C's counter ends at the
/// number of clients with no duplicate and no overlap, both with the counter write and
/// the release as separate requests and combined in one multi (`--reacquire`, the
/// MutexGuard::release_with path); D's hand-overs are counted and none overlaps, with
/// and without `Mutex::reacquire`.
#[tokio::test]
async fn bench_lock_scenarios_check_exclusion() {
    let srv = TestServer::start().await.unwrap();
    let cs = srv.connect_string();
    for combined in [false, true] {
        let mut args = vec!["lock", "--server", &cs, "--json"];
        if combined {
            args.push("--reacquire");
        }
        let c = [&args[..], &["--scenario", "c", "--clients", "12"]].concat();
        let o = bench(&c).await;
        assert_eq!(o.code, 0, "{c:?}: {}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
        assert_eq!(v["final_counter"], 12, "{c:?}: {v}");
        assert_eq!(v["duplicates"], 0, "{c:?}: {v}");
        assert_eq!(v["violations"], 0, "{c:?}: {v}");
        assert_eq!(v["ok"], true, "{c:?}: {v}");

        let d = [
            &args[..],
            &["--scenario", "d", "--clients", "6", "--cycles", "5"],
        ]
        .concat();
        let o = bench(&d).await;
        assert_eq!(o.code, 0, "{d:?}: {}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
        assert_eq!(v["handovers"], 30, "{d:?}: {v}");
        assert_eq!(v["violations"], 0, "{d:?}: {v}");
    }
}

/// `zlock-bench lock` over TLS (the lock benchmark's `zlock-tls` systems): D against a
/// `secureClientPort` with `ssl.clientAuth=need`, the sessions presenting a client
/// certificate, on the native path; without the client certificate the server refuses
/// them and the run fails.
#[tokio::test]
async fn bench_lock_over_tls_with_a_client_certificate() {
    let pki = Pki::make().unwrap();
    let srv = pki.start_server("server.pem").unwrap();
    let cs = srv.secure.to_string();
    let ca = pki.path("ca.pem").to_string_lossy().into_owned();
    let cert = pki.path("alice.crt").to_string_lossy().into_owned();
    let key = pki.path("alice.key").to_string_lossy().into_owned();
    let d = [
        "lock",
        "--server",
        &cs,
        "--json",
        "--scenario",
        "d",
        "--clients",
        "6",
        "--cycles",
        "5",
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    let o = bench(&d).await;
    assert_eq!(o.code, 0, "{d:?}: {}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    assert_eq!(v["tls"], true, "{v}");
    assert_eq!(v["handovers"], 30, "{v}");
    assert_eq!(v["violations"], 0, "{v}");

    let no_cert = &d[..d.len() - 4];
    let o = bench(no_cert).await;
    assert_ne!(o.code, 0, "{no_cert:?} should fail: {}", o.stdout);
}

/// One failover round: the leader is killed by the tool, a write and a lock grant
/// (native lock path) succeed afterwards, both timed.
#[tokio::test]
async fn failover_round_against_a_zlock_ensemble() {
    let ens = ChildEnsemble::start().await.unwrap();
    let leader = ens.leader().await.unwrap();
    let pid = ens.pid(leader).unwrap().to_string();
    let cs = ens.connect_string();
    let args = [
        "failover",
        "--server",
        &cs,
        "--kill-pid",
        &pid,
        "--warmup-secs",
        "0.5",
        "--timeout-secs",
        "30",
    ];
    let o = bench(&args).await;
    assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    assert!(v["write_ms"].as_f64().is_some(), "{v}");
    assert!(v["grant_ms"].as_f64().is_some(), "{v}");
    assert!(v["writes_before"].as_u64().unwrap() > 0, "{v}");
}
