//! `client.certReload=true`: the server's certificate renewed on disk (by a rename over
//! the old file, as certificate tools do) is what new TLS connections get, without a
//! restart; a session connected before the renewal goes on; a broken rewrite of the
//! file is logged and the certificates in use stay. Driven with zlock's own TLS client
//! against the real server process.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rcgen::ExtendedKeyUsagePurpose;
use zlock::{Client, CreateMode, TlsOptions};
use zlock_testkit::pki::{ca, leaf};
use zlock_testkit::{free_port, wait_for_port};

use super::support::{zlock_on, Killed, Pki};

/// How long any wait here may take.
const BOUND: Duration = Duration::from_secs(60);

async fn connect(at: SocketAddr, tls: TlsOptions) -> Result<Client, String> {
    let builder = Client::builder(&at.to_string())
        .session_timeout_ms(10_000)
        .tls(tls);
    let attempt = builder.connect();
    match tokio::time::timeout(Duration::from_secs(10), attempt).await {
        Ok(Ok((c, _))) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 10 s".into()),
    }
}

/// Replaces `to` with `text` as a renewal does: a new file renamed over the old one.
fn renew(to: &Path, text: &[u8]) {
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_read_again_when_their_files_change() {
    let pki = Pki::make();
    // The renewal: a server certificate from another CA, which clients trust by then.
    let ca2 = ca("renewal CA").unwrap();
    let (renewed, key) = leaf(
        &ca2,
        "zlock server, renewed",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )
    .unwrap();
    std::fs::write(pki.path("ca2.pem"), ca2.pem()).unwrap();
    let live = pki.path("live.pem");
    std::fs::copy(pki.path("server.pem"), &live).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "clientPort={}\ndataDir={}\nsecureClientPort={}\n\
             ssl.keyStore.location={}\nssl.trustStore.location={}\nclient.certReload=true\n",
            free_port(),
            dir.path().join("data").display(),
            secure.port(),
            live.display(),
            pki.path("ca.pem").display()
        ),
    )
    .unwrap();
    let log = dir.path().join("zlock.log");
    let _server = Killed(
        zlock_on(&cfg, "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_port(secure, BOUND).unwrap();
    let as_alice = |ca: &str| {
        TlsOptions::new(pki.path(ca)).client_cert(pki.path("alice.crt"), pki.path("alice.key"))
    };

    let before = connect(secure, as_alice("ca.pem"))
        .await
        .expect("connects to the first certificate");
    before
        .create("/kept", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let e = connect(secure, as_alice("ca2.pem")).await.err();
    assert!(e.is_some(), "the renewal CA is not the server's yet");

    renew(
        &live,
        format!("{}{}", renewed.pem(), key.serialize_pem()).as_bytes(),
    );
    let deadline = tokio::time::Instant::now() + BOUND;
    let after = loop {
        match connect(secure, as_alice("ca2.pem")).await {
            Ok(c) => break c,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "the renewed certificate was never served: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let old = connect(secure, as_alice("ca.pem")).await.err();
    assert!(old.is_some(), "the old certificate is still served");
    // The session from before the renewal goes on, over its connection.
    assert!(before.exists("/kept", false).await.unwrap().is_some());
    before.set_data("/kept", b"still", -1).await.unwrap();
    assert_eq!(after.get_data("/kept", false).await.unwrap().0, b"still");

    // A broken rewrite: logged, and the renewed certificate stays in use.
    renew(&live, b"-----BEGIN CERTIFICATE-----\nnot one\n");
    let deadline = tokio::time::Instant::now() + BOUND;
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("the changed stores do not build")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broken store was not reported:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    connect(secure, as_alice("ca2.pem"))
        .await
        .expect("the certificates in use stay after a broken rewrite");
    before.close().await.unwrap();
    after.close().await.unwrap();
}
