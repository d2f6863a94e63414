//! TLS on the secure client port (`secureClientPort`, ZooKeeper's `ssl.*` keys), through
//! the real server process and kazoo (`use_ssl=True`), with certificates made here: a CA,
//! a server certificate for 127.0.0.1 and localhost, client certificates for alice, bob
//! and carol, and mallory's from a second CA.
//!
//! kazoo is a peer (`zlock_testkit::require(Peer::Kazoo)`): missing, these tests fail
//! unless `ZLOCK_TEST_ALLOW_MISSING=1`. Every wait is bounded (kazoo's own timeouts, the
//! child processes' deadline, the raw client's `STUCK`).

mod reload;
mod same_config;
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::net::TcpStream;
use zlock_testkit::{free_port, require, Peer, TestServer};

use crate::common::rawclient::{
    connect_frame, expect_closed, expect_in_order, late_reader_script, read_frame, request_frame,
    send_bytes, STUCK,
};
use support::{connect, kazoo, run_bounded, rust_client, start, start_binary, Pki};

#[test]
fn kazoo_over_tls_creates_watches_and_locks() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&pki.pem_stores());
    let out = kazoo(&py, &pki, &server, "work", serde_json::json!({}));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "get v1",
            "watch True CHANGED /tls/n",
            "alice-lock True",
            "bob-while-held False",
            "bob-after-release True",
            "whoami ip:127.0.0.1 x509:CN=alice,O=zlock",
        ],
        "{out}"
    );
}

#[test]
fn client_auth_need_refuses_no_certificate_and_another_cas() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    // ssl.clientAuth unset: ZooKeeper's default, need.
    let server = start(&pki.pem_stores());
    let none = connect(&py, &pki, &server, serde_json::json!({}));
    assert!(none.starts_with("failed"), "no certificate: {none}");
    let other = connect(&py, &pki, &server, serde_json::json!({"who": "mallory"}));
    assert!(
        other.starts_with("failed"),
        "another CA's certificate: {other}"
    );
    let good = connect(&py, &pki, &server, serde_json::json!({"who": "bob"}));
    assert!(good.starts_with("connected"), "bob: {good}");
    // A client that does not trust the server's CA does not connect either.
    let distrust = connect(
        &py,
        &pki,
        &server,
        serde_json::json!({"who": "bob", "client_ca": pki.path("other-ca.pem")}),
    );
    assert!(
        distrust.starts_with("failed"),
        "untrusted server: {distrust}"
    );
}

#[test]
fn client_auth_want_serves_without_a_certificate_and_none_asks_for_none() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&format!("{}ssl.clientAuth=want\n", pki.pem_stores()));
    let anon = connect(&py, &pki, &server, serde_json::json!({}));
    assert_eq!(anon, "connected\nwhoami ip:127.0.0.1\n");
    let alice = connect(&py, &pki, &server, serde_json::json!({"who": "alice"}));
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    drop(server);
    let server = start(&format!(
        "ssl.keyStore.location={}\nssl.clientAuth=none\n",
        pki.path("server.pem").display()
    ));
    // A certificate sent unasked gives no identity: it was never asked for.
    let alice = connect(&py, &pki, &server, serde_json::json!({"who": "alice"}));
    assert_eq!(alice, "connected\nwhoami ip:127.0.0.1\n");
}

#[test]
fn x509_acls_and_the_x509_super_user() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&format!(
        "{}authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n\
         ssl.authProvider=x509\nX509AuthenticationProvider.superUser=CN=carol,O=zlock\n",
        pki.pem_stores()
    ));
    let out = kazoo(&py, &pki, &server, "acl", serde_json::json!({}));
    assert_eq!(
        out,
        "alice s\nbob noauth\ncarol s\n\
         carol-whoami ip:127.0.0.1 super: x509:CN=carol,O=zlock\n"
    );
}

/// A PEM key store whose key is encrypted (PKCS#8, PBES2 with PBKDF2-SHA256 and
/// AES-256-CBC, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it), its password in
/// `ssl.keyStore.password`, as ZooKeeper's PEM reader takes it. (ZooKeeper 3.8 on JDK 17
/// cannot read this one: "PBES2 SecretKeyFactory not available", checked live; see
/// `same_config.rs`.) Without the password, or with a wrong one, the start stops naming
/// the key store.
#[test]
fn an_encrypted_pem_key_is_read_with_the_key_store_password() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let stores = |password: &str| {
        format!(
            "ssl.keyStore.location={}\n{password}ssl.trustStore.location={}\n",
            pki.path("server-encrypted.pem").display(),
            pki.path("ca.pem").display()
        )
    };
    let server = start(&stores("ssl.keyStore.password=serverpw\n"));
    let alice = connect(&py, &pki, &server, serde_json::json!({"who": "alice"}));
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    drop(server);
    for (password, says) in [
        ("", "no password is given"),
        ("ssl.keyStore.password=wrong\n", "cannot decrypt"),
    ] {
        let keys = format!("secureClientPort={}\n{}", free_port(), stores(password));
        let (ok, err) = start_binary(&keys);
        assert!(!ok, "started with {password:?}");
        assert!(
            err.contains("ssl.keyStore.location") && err.contains(says),
            "{password:?}: {err}"
        );
    }
}

#[test]
fn pkcs12_stores_serve_as_pem_ones_do() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&pki.pkcs12_stores());
    let alice = connect(&py, &pki, &server, serde_json::json!({"who": "alice"}));
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    let other = connect(&py, &pki, &server, serde_json::json!({"who": "mallory"}));
    assert!(
        other.starts_with("failed"),
        "another CA's certificate: {other}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_clients_garbage_and_stalled_handshakes_are_closed_cleanly() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&format!(
        "{}ssl.handshakeDetectionTimeoutMillis=1500\n",
        pki.pem_stores()
    ));
    // A handshake that never starts: held while others are served, then closed.
    let mut stalled = TcpStream::connect(server.secure).await.unwrap();
    // A plain ZooKeeper client on the TLS port.
    let mut plain = TcpStream::connect(server.secure).await.unwrap();
    send_bytes(&mut plain, &connect_frame(30_000))
        .await
        .unwrap();
    expect_closed(&mut plain, "a plain client on the TLS port").await;
    // Garbage, and a four-letter word in clear.
    for bytes in [&b"\x16\x03\x01\x00\x05hello, this is not TLS"[..], b"ruok"] {
        let mut s = TcpStream::connect(server.secure).await.unwrap();
        send_bytes(&mut s, bytes).await.unwrap();
        expect_closed(&mut s, "garbage on the TLS port").await;
    }
    // A good client meanwhile: the stalled handshake holds nothing up.
    let pki_ref = &pki;
    let server_ref = &server;
    let alice = tokio::task::block_in_place(|| {
        connect(
            &py,
            pki_ref,
            server_ref,
            serde_json::json!({"who": "alice"}),
        )
    });
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    expect_closed(&mut stalled, "a handshake that never starts").await;
}

/// `secureClientPort` without `clientPort`: TLS only, as ZooKeeper serves it. kazoo
/// over TLS works; a plain client on that port is closed; `conf` (over TLS) says
/// `clientPort=-1`, as ZooKeeper's does for a port it does not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_port_alone_serves_tls_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = support::start_tls_only(&pki.pem_stores());
    let (pki_ref, server_ref) = (&pki, &server);
    let alice = tokio::task::block_in_place(|| {
        connect(
            &py,
            pki_ref,
            server_ref,
            serde_json::json!({"who": "alice"}),
        )
    });
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    let mut plain = TcpStream::connect(server.secure).await.unwrap();
    send_bytes(&mut plain, &connect_frame(30_000))
        .await
        .unwrap();
    expect_closed(&mut plain, "a plain client on the only (TLS) port").await;

    let mut tls = support::tls_stream(&pki, server.secure, "alice").await;
    tls.write_all(b"conf").await.unwrap();
    tls.flush().await.unwrap();
    let mut conf = String::new();
    tokio::time::timeout(STUCK, tls.read_to_string(&mut conf))
        .await
        .expect("conf answered")
        .ok();
    assert!(conf.contains("clientPort=-1\n"), "{conf}");
    assert!(
        conf.contains(&format!("secureClientPort={}\n", server.secure.port())),
        "{conf}"
    );
}

#[test]
fn tls_keys_zlock_does_not_implement_stop_the_start() {
    let pki = Pki::make();
    let secure = format!("secureClientPort={}\n{}", free_port(), pki.pem_stores());
    for (keys, named) in [
        // Between members: a setting zlock does not honour, no stores, a store that
        // cannot be read (standalone too: the stores are read before anything starts).
        (
            format!("{secure}ssl.quorum.clientHostnameVerification=true\n"),
            "ssl.quorum.clientHostnameVerification",
        ),
        ("sslQuorum=true\n".to_owned(), "ssl.quorum.keyStore.location"),
        (
            format!(
                "sslQuorum=true\nssl.quorum.keyStore.location=/nonexistent/member.pem\n\
                 ssl.quorum.trustStore.location={}\n",
                pki.path("ca.pem").display()
            ),
            "TLS between members: ssl.quorum.keyStore.location: cannot read /nonexistent/member.pem",
        ),
        (
            format!("{secure}ssl.ciphersuites=TLS_RSA_WITH_AES_128_CBC_SHA\n"),
            "ssl.ciphersuites",
        ),
        (
            format!(
                "secureClientPort={}\nssl.keyStore.location=/nonexistent/server.pem\n\
                 ssl.trustStore.location={}\n",
                free_port(),
                pki.path("ca.pem").display()
            ),
            "ssl.keyStore.location: cannot read /nonexistent/server.pem",
        ),
        (
            format!(
                "secureClientPort={}\nssl.keyStore.location={}\nssl.keyStore.password=wrong\n\
                 ssl.trustStore.location={}\n",
                free_port(),
                pki.path("server.p12").display(),
                pki.path("ca.pem").display()
            ),
            "ssl.keyStore.location",
        ),
    ] {
        let (ok, err) = start_binary(&keys);
        assert!(!ok, "started with {keys}");
        assert!(
            err.contains(named),
            "{keys}: stderr does not name {named}:\n{err}"
        );
    }
}

/// Replies that the socket cannot take at once wait, as records, inside the
/// connection's rustls state and leave through the writer task in order, with reads
/// answered by the connection task and writes by the commit thread on the same
/// connection (as `pipelined::a_client_that_reads_late_gets_every_reply_in_order`
/// proves for a plain one); the plain port serves meanwhile (mixed mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_reads_late_gets_every_reply_in_order() {
    use tokio::io::AsyncWriteExt;

    let pki = Pki::make();
    let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = TestServer::start_with(|c| {
        c.tls.secure_client_port = Some(secure.port());
        c.tls.key_store.location = Some(pki.path("server.pem"));
        c.tls.trust_store.location = Some(pki.path("ca.pem"));
    })
    .await
    .unwrap();
    // serve binds the secure port itself, once its task runs.
    tokio::task::spawn_blocking(move || {
        zlock_testkit::wait_for_port(secure, Duration::from_secs(60))
    })
    .await
    .unwrap()
    .unwrap();
    let mut s = rust_client(&pki, secure, "alice").await;

    let (frames, xid, expect) = late_reader_script();
    s.write_all(&frames).await.unwrap();
    s.flush().await.unwrap();
    // The plain port meanwhile.
    let plain = crate::common::rawclient::RawClient::connect(server.addr)
        .await
        .unwrap();
    assert!(plain.exists("/").await.unwrap().is_ok());
    // Let the server run into the full socket buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    expect_in_order(&mut s, expect, STUCK).await;
    // A close: the server's close_notify, then the end of the stream.
    let close = request_frame(xid + 1, -11, &[]);
    s.write_all(&close).await.unwrap();
    s.flush().await.unwrap();
    let reply = tokio::time::timeout(STUCK, read_frame(&mut s))
        .await
        .unwrap();
    assert!(reply.is_ok(), "closeSession answered");
    let mut rest = Vec::new();
    let end = tokio::time::timeout(
        STUCK,
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut rest),
    )
    .await
    .expect("the server kept the connection open");
    assert!(end.is_ok(), "a clean TLS close (close_notify): {end:?}");
    server.stop().await.unwrap();
}

/// `client.portUnification=true`: the plain client port serves a kazoo TLS client (its
/// certificate's identity included), a plain ZooKeeper client and a four-letter word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_unification_serves_tls_and_plain_clients_on_the_plain_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let server = start(&format!(
        "{}client.portUnification=true\n",
        pki.pem_stores()
    ));
    let (pki_ref, server_ref) = (&pki, &server);
    let alice = tokio::task::block_in_place(|| {
        let hosts = server_ref.plain.to_string();
        connect(
            &py,
            pki_ref,
            server_ref,
            serde_json::json!({"who": "alice", "hosts": hosts}),
        )
    });
    assert_eq!(
        alice,
        "connected\nwhoami ip:127.0.0.1 x509:CN=alice,O=zlock\n"
    );
    let plain = crate::common::rawclient::RawClient::connect(server.plain)
        .await
        .unwrap();
    assert!(plain.exists("/").await.unwrap().is_ok());
    let mut s = TcpStream::connect(server.plain).await.unwrap();
    s.write_all(b"ruok").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(STUCK, s.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, "imok");
    // The secure port is TLS only still.
    let mut p = TcpStream::connect(server.secure).await.unwrap();
    send_bytes(&mut p, &connect_frame(30_000)).await.unwrap();
    expect_closed(&mut p, "a plain client on the TLS port").await;
}

/// Apache ZooKeeper 3.8's own Java client (zkCli's `ZooKeeperMain`, Netty, TLS 1.2,
/// the server's address checked against its certificate) over TLS with PEM stores, as
/// `CLIENT_JVMFLAGS` would configure zkCli: create, get, and whoami showing x509;
/// the same run against Apache ZooKeeper 3.8 on the same zoo.cfg lines answers the same.
#[test]
fn zookeepers_java_client_over_tls() {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let mut class_path = Vec::new();
    let jars = ["zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-simple"]
        .map(|jar| format!("/usr/share/java/{jar}.jar"));
    for path in jars
        .into_iter()
        .chain(zlock_testkit::NETTY_JARS.map(String::from))
    {
        // Debian's zookeeper package brings these (libzookeeper-java, libnetty-java).
        assert!(
            Path::new(&path).is_file(),
            "{path} is missing: ZooKeeper's Java client needs it for TLS \
             (apt-get install libnetty-java libslf4j-java)"
        );
        class_path.push(path);
    }
    let pki = Pki::make();
    let alice = format!(
        "{}{}",
        std::fs::read_to_string(pki.path("alice.crt")).unwrap(),
        std::fs::read_to_string(pki.path("alice.key")).unwrap()
    );
    std::fs::write(pki.path("alice.pem"), alice).unwrap();
    // The same zoo.cfg lines for both: zkCli's answers compared after zlock's checks.
    let zlock = start(&pki.pem_stores());
    let zookeeper = support::start_zookeeper(&pki.pem_stores());
    let zkcli = |server: &support::Server, args: &[&str]| {
        let mut cmd = Command::new("java");
        cmd.arg("-Dzookeeper.client.secure=true")
            .arg("-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty")
            .arg(format!(
                "-Dzookeeper.ssl.keyStore.location={}",
                pki.path("alice.pem").display()
            ))
            .arg(format!(
                "-Dzookeeper.ssl.trustStore.location={}",
                pki.path("ca.pem").display()
            ))
            .args(["-cp", &class_path.join(":")])
            .arg("org.apache.zookeeper.ZooKeeperMain")
            .args(["-server", &server.secure.to_string()])
            .args(args);
        let (_, out, err) = run_bounded(cmd, Duration::from_secs(120));
        format!("{out}\n{err}")
    };
    let run = |server: &support::Server| -> Vec<String> {
        let mut answers = Vec::new();
        let out = zkcli(server, &["create", "/fromjava", "hello"]);
        assert!(out.contains("Created /fromjava"), "{out}");
        answers.push("Created /fromjava".to_owned());
        let out = zkcli(server, &["get", "/fromjava"]);
        assert!(out.lines().any(|l| l == "hello"), "{out}");
        answers.push("hello".to_owned());
        let out = zkcli(server, &["whoami"]);
        let mut ids: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("ip: ") || l.starts_with("x509: "))
            .map(str::to_owned)
            .collect();
        // ZooKeeper keeps a connection's identities in a hash set: no order.
        ids.sort();
        answers.extend(ids);
        answers
    };
    let on_zlock = run(&zlock);
    assert!(
        on_zlock.iter().any(|l| l == "x509: CN=alice,O=zlock"),
        "{on_zlock:?}"
    );
    assert_eq!(
        run(&zookeeper),
        on_zlock,
        "zkCli over TLS: Apache ZooKeeper 3.8 and zlock on the same zoo.cfg lines"
    );
}

/// Expired certificates are refused at the handshake, both ways: a client whose
/// certificate expired (its CA trusted), and a server whose certificate expired (a
/// client trusting its CA does not connect). A valid pair from the same CA connects.
#[test]
fn expired_certificates_are_refused_both_ways() {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let pki = Pki::make();
    let ca = zlock_testkit::pki::ca("expiry CA").unwrap();
    std::fs::write(pki.path("expiry-ca.pem"), ca.pem()).unwrap();
    // A certificate of the expiry CA: its file stem (and CN), names, usage, expired?
    let make = |stem: &str, names: &[&str], usage, expired: bool| {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name = zlock_testkit::pki::subject(stem);
        p.extended_key_usages = vec![usage];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca).unwrap();
        std::fs::write(pki.path(&format!("{stem}.crt")), cert.pem()).unwrap();
        std::fs::write(pki.path(&format!("{stem}.key")), key.serialize_pem()).unwrap();
        std::fs::write(
            pki.path(&format!("{stem}.pem")),
            format!("{}{}", cert.pem(), key.serialize_pem()),
        )
        .unwrap();
    };
    let server_names = ["localhost", "127.0.0.1"];
    make(
        "fresh-server",
        &server_names,
        ExtendedKeyUsagePurpose::ServerAuth,
        false,
    );
    make(
        "stale-server",
        &server_names,
        ExtendedKeyUsagePurpose::ServerAuth,
        true,
    );
    make(
        "fresh-client",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    );
    make(
        "stale-client",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        true,
    );
    let as_client = |who: &str| {
        serde_json::json!({
            "who": who,
            format!("{who}_cert"): pki.path(&format!("{who}.crt")),
            format!("{who}_key"): pki.path(&format!("{who}.key")),
            "client_ca": pki.path("expiry-ca.pem"),
        })
    };
    let stores = |server: &str| {
        format!(
            "ssl.keyStore.location={}\nssl.trustStore.location={}\n",
            pki.path(&format!("{server}.pem")).display(),
            pki.path("expiry-ca.pem").display()
        )
    };

    let server = start(&stores("fresh-server"));
    let fresh = connect(&py, &pki, &server, as_client("fresh-client"));
    assert!(fresh.starts_with("connected"), "a valid pair: {fresh}");
    let stale = connect(&py, &pki, &server, as_client("stale-client"));
    assert!(stale.starts_with("failed"), "an expired client: {stale}");
    drop(server);

    let server = start(&stores("stale-server"));
    let out = connect(&py, &pki, &server, as_client("fresh-client"));
    assert!(out.starts_with("failed"), "an expired server: {out}");
}
