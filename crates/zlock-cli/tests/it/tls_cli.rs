//! The commands over TLS, as the built binary: `zlock lock` and the zkCli-style commands
//! with `--tls-ca/--tls-cert/--tls-key` and with ZooKeeper's client properties file
//! (`-client-configuration`, flags overriding it), against zlock's `secureClientPort`
//! with `ssl.clientAuth=need`; and `zlock ensemble --tls`, its printed flags, kazoo
//! line and zkCli line used as printed (kazoo and ZooKeeper's jars are peers:
//! `zlock_testkit::require`).

use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use zlock_testkit::pki::Pki;
use zlock_testkit::{require, Peer};

use crate::common::{free_run, run, zlock_cmd, Interrupt, Out, Scratch, RUN_BOUND};

async fn zl(args: &[&str]) -> Out {
    run(zlock_cmd(args), &format!("zlock {args:?}"), RUN_BOUND).await
}

/// alice's flags.
fn alice(pki: &Pki) -> Vec<String> {
    let p = |n: &str| pki.path(n).to_string_lossy().into_owned();
    vec![
        "--tls-ca".into(),
        p("ca.pem"),
        "--tls-cert".into(),
        p("alice.crt"),
        "--tls-key".into(),
        p("alice.key"),
    ]
}

fn with<'a>(args: &[&'a str], more: &'a [String]) -> Vec<&'a str> {
    args.iter()
        .copied()
        .chain(more.iter().map(String::as_str))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_zk_commands_over_tls_with_flags_and_the_properties_file() {
    let pki = Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    let s = server.secure.to_string();
    let flags = alice(&pki);

    let o = zl(&with(
        &["lock", "--server", &s, "/locks/x"],
        &[
            flags.clone(),
            vec![
                "--".into(),
                "sh".into(),
                "-c".into(),
                "echo held $ZLOCK_LOCK_NODE".into(),
            ],
        ]
        .concat(),
    ))
    .await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.starts_with("held /locks/x/"), "{o:?}");
    let o = zl(&with(&["create", "/over-tls", "v", "--server", &s], &flags)).await;
    assert_eq!(o.code, 0, "{o:?}");

    // ZooKeeper's client properties: a PEM key store is the chain, then the key.
    let scratch = Scratch::new("tls-props");
    let alice_pem = scratch.file("alice.pem");
    let chain_and_key = std::fs::read_to_string(pki.path("alice.crt")).unwrap()
        + &std::fs::read_to_string(pki.path("alice.key")).unwrap();
    std::fs::write(&alice_pem, chain_and_key).unwrap();
    let props = |ca: &str| {
        let path = scratch.file(&format!("client-{ca}.properties"));
        std::fs::write(
            &path,
            format!(
                "zookeeper.client.secure=true\n\
                 zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n\
                 zookeeper.ssl.keyStore.location={alice_pem}\nzookeeper.ssl.keyStore.type=PEM\n\
                 zookeeper.ssl.trustStore.location={}\n",
                pki.path(ca).display()
            ),
        )
        .unwrap();
        path
    };
    let good = props("ca.pem");
    for spelling in ["-client-configuration", "--client-configuration"] {
        let o = zl(&["ls", "/", "--server", &s, spelling, &good]).await;
        assert_eq!(o.code, 0, "{spelling}: {o:?}");
        assert!(o.stdout.contains("over-tls"), "{o:?}");
    }
    let o = zl(&[
        "lock",
        "--server",
        &s,
        "-client-configuration",
        &good,
        "/locks/x",
        "--",
        "true",
    ])
    .await;
    assert_eq!(o.code, 0, "{o:?}");

    // PKCS12 stores, as ZooKeeper's Java client takes them, the password from a file.
    let pw = scratch.file("alicepw");
    std::fs::write(&pw, "alicepw\n").unwrap();
    let p12 = scratch.file("client-p12.properties");
    std::fs::write(
        &p12,
        format!(
            "zookeeper.client.secure=true\n\
             zookeeper.ssl.keyStore.location={}\nzookeeper.ssl.keyStore.passwordPath={pw}\n\
             zookeeper.ssl.trustStore.location={}\nzookeeper.ssl.trustStore.password=trustpw\n",
            pki.path("alice.p12").display(),
            pki.path("trust.p12").display()
        ),
    )
    .unwrap();
    let o = zl(&["ls", "/", "--server", &s, "-client-configuration", &p12]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("over-tls"), "{o:?}");

    // The file trusts another CA: the handshake fails, by name; --tls-ca overrides it.
    let wrong = props("other-ca.pem");
    let o = zl(&["ls", "/", "--server", &s, "-client-configuration", &wrong]).await;
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("UnknownIssuer"), "{o:?}");
    let ca = pki.path("ca.pem").to_string_lossy().into_owned();
    let o = zl(&[
        "ls",
        "/",
        "--server",
        &s,
        "-client-configuration",
        &wrong,
        "--tls-ca",
        &ca,
    ])
    .await;
    assert_eq!(o.code, 0, "{o:?}");

    // No client certificate, against ssl.clientAuth=need.
    let o = zl(&["ls", "/", "--server", &s, "--tls-ca", &ca]).await;
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("CertificateRequired"), "{o:?}");
    // A file that cannot be read is named.
    let absent = scratch.file("absent.pem");
    let o = zl(&["ls", "/", "--server", &s, "--tls-ca", &absent]).await;
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("absent.pem"), "{o:?}");
}

/// `zlock ensemble --tls`: the members serve TLS, the printed client flags work for
/// `zlock ls /` on the printed TLS connect string, and Ctrl-C stops every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ensemble_command_serves_tls_with_the_flags_it_prints() {
    let scratch = Scratch::new("ensemble-tls");
    let (client, quorum, secure) = (free_run(3), free_run(3), free_run(3));
    let mut ens = zlock_cmd(&[
        "ensemble",
        "--members",
        "3",
        "--tls",
        "--data-dir",
        &scratch.file("e"),
        "--client-port",
        &client.to_string(),
        "--quorum-port",
        &quorum.to_string(),
        "--secure-client-port",
        &secure.to_string(),
    ])
    .spawn()
    .expect("zlock ensemble");
    let mut lines = tokio::io::BufReader::new(ens.stdout.take().unwrap()).lines();
    let mut stop = Some(Interrupt(ens));
    let printed = crate::common::ensemble_printout(&mut lines).await;
    let after = |prefix: &str| {
        printed
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {prefix:?} in {printed:#?}"))
    };
    let tls_servers = after("TLS connect string: ");
    let tls_servers = tls_servers.split_whitespace().next().unwrap().to_owned();
    assert!(
        tls_servers.starts_with(&format!("127.0.0.1:{secure},")),
        "{tls_servers}"
    );
    let flags: Vec<String> = after("client flags: ")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(flags.len(), 6, "{flags:?}");
    let pids: Vec<u32> = after("pids: ")
        .split_whitespace()
        .map(|p| p.split_once('=').unwrap().1.parse().unwrap())
        .collect();

    // Serving (a leader elected) over TLS, with the printed flags.
    let listing = tokio::time::timeout(RUN_BOUND, async {
        loop {
            let o = zl(&with(&["ls", "/", "--server", &tls_servers], &flags)).await;
            if o.code == 0 {
                return o.stdout;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("zlock ls / over TLS with the printed flags");
    assert!(listing.contains("zookeeper"), "{listing}");
    // The kazoo line, as printed.
    if let Some(python) = require(Peer::Kazoo) {
        let script = format!(
            "from kazoo.client import KazooClient\nzk = {}\nzk.start(timeout=30)\n\
             print(sorted(zk.get_children('/')))\nzk.stop()\n",
            after("kazoo: ")
        );
        let mut cmd = tokio::process::Command::new(python);
        cmd.args(["-c", &script]).kill_on_drop(true);
        let o = run(cmd, "the printed kazoo line", RUN_BOUND).await;
        assert_eq!(o.code, 0, "{o:?}");
        assert!(o.stdout.contains("'zookeeper'"), "{o:?}");
    }
    // ZooKeeper's Java CLI with the printed client configuration (Debian's way to run
    // it with Netty, as printed).
    if require(Peer::ZooKeeper).is_some() {
        let line = after("(Debian's zkCli.sh lacks Netty; there: ");
        let line = line.strip_suffix(')').unwrap();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["-c", &format!("{line} ls /")]).kill_on_drop(true);
        let o = run(cmd, "the printed zkCli line", RUN_BOUND).await;
        assert!(o.stdout.lines().any(|l| l == "[zookeeper]"), "{o:?}");
    }
    // The plain ports stay (on loopback), next to the TLS ones.
    let o = zl(&["ls", "/", "--server", &format!("127.0.0.1:{client}")]).await;
    assert_eq!(o.code, 0, "{o:?}");

    drop(stop.take());
    let alive = |pid: &u32| {
        std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let gone = tokio::time::timeout(RUN_BOUND, async {
        while pids.iter().any(alive) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "members left running: {pids:?}");
}
