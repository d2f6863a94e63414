//! The admin server over HTTPS (`admin.forceHttps`, `admin.portUnification`,
//! `admin.needClientAuth`, the `ssl.quorum.*` stores, as ZooKeeper's Jetty serves it),
//! with the commands' credentials (`zlock.adminAuthRequired`): digest over HTTPS, and
//! `x509` from the client's certificate, checked against ALL on `/`; and the metrics
//! endpoint over HTTPS (`metricsProvider.httpsPort` and its `ssl.*` keys).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zlock::Client;
use zlock_proto::records::{perms, Acl, Id};
use zlock_testkit::pki::Pki;

use crate::common::http::{connect, request};
use zlock_testkit::{with_admin, TestServer};

const T: Duration = Duration::from_secs(30);

/// Plain HTTP: the answer's status line, or what came back instead.
async fn plain(addr: SocketAddr, path: &str) -> String {
    let mut s = connect(addr).await;
    s.write_all(&request("GET", path, None, b"")).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(T, s.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// HTTPS trusting `ca`, with a client certificate `(cert, key)` if given: the status,
/// or the handshake's error.
async fn https(
    pki: &Pki,
    addr: SocketAddr,
    ca: &str,
    client: Option<(&str, &str)>,
    path: &str,
    auth: Option<&str>,
) -> Result<u16, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.path(ca)).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.path(cert))
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
            let key = PrivateKeyDer::from_pem_file(pki.path(key)).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = connect(addr).await;
    let name = ServerName::try_from("localhost").unwrap();
    let mut s = tokio::time::timeout(T, tls.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    s.write_all(&request("GET", path, auth, b""))
        .await
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&got);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_only_serves_tls_and_digest_credentials() {
    let pki = Pki::make().unwrap();
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.force_https = true;
        cfg.admin.auth_required = true;
        cfg.tls.quorum_key_store.location = Some(pki.path("server.pem"));
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    assert_eq!(
        https(&pki, a, "ca.pem", None, "/commands/ruok", None).await,
        Ok(200)
    );
    assert!(
        !plain(a, "/commands/ruok").await.starts_with("HTTP/"),
        "plain HTTP is not served"
    );
    assert_eq!(
        https(&pki, a, "ca.pem", None, "/commands/locks", None).await,
        Ok(401)
    );
    assert_eq!(
        https(
            &pki,
            a,
            "ca.pem",
            None,
            "/commands/locks",
            Some("digest ops:pw")
        )
        .await,
        Ok(200)
    );
    let e = https(&pki, a, "other-ca.pem", None, "/commands/ruok", None).await;
    assert!(
        e.is_err(),
        "a client that does not trust the server's CA: {e:?}"
    );
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unified_port_and_x509_credentials() {
    let pki = Pki::make().unwrap();
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.port_unification = true;
        cfg.admin.need_client_auth = true;
        cfg.admin.auth_required = true;
        cfg.tls.quorum_key_store.location = Some(pki.path("server.pem"));
        cfg.tls.quorum_trust_store.location = Some(pki.path("ca.pem"));
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    assert!(
        plain(a, "/commands/ruok").await.starts_with("HTTP/1.1 200"),
        "plain HTTP on the unified port"
    );
    let alice = Some(("alice.crt", "alice.key"));
    let bob = Some(("bob.crt", "bob.key"));
    assert_eq!(
        https(&pki, a, "ca.pem", alice, "/commands/ruok", None).await,
        Ok(200)
    );
    let e = https(&pki, a, "ca.pem", None, "/commands/ruok", None).await;
    assert!(
        e.is_err(),
        "needClientAuth: no certificate, no answer: {e:?}"
    );
    let e = https(
        &pki,
        a,
        "ca.pem",
        Some(("mallory.crt", "mallory.key")),
        "/commands/ruok",
        None,
    )
    .await;
    assert!(e.is_err(), "a certificate of another CA: {e:?}");

    // `/` now: ALL for alice's certificate only.
    let (c, _ev) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    let acl = vec![
        Acl {
            perms: perms::ALL,
            id: Id::new("x509", "CN=alice,O=zlock"),
        },
        Acl {
            perms: perms::READ,
            id: Id::new("world", "anyone"),
        },
    ];
    c.set_acl("/", acl, -1).await.unwrap();
    assert_eq!(
        https(&pki, a, "ca.pem", alice, "/commands/sessions", Some("x509")).await,
        Ok(200)
    );
    assert_eq!(
        https(&pki, a, "ca.pem", bob, "/commands/sessions", Some("x509")).await,
        Ok(403)
    );
    assert_eq!(
        https(
            &pki,
            a,
            "ca.pem",
            alice,
            "/commands/sessions",
            Some("digest ops:pw")
        )
        .await,
        Ok(403)
    );
    // Over plain HTTP there is no certificate to name.
    let mut p = connect(a).await;
    p.write_all(&request("GET", "/commands/sessions", Some("x509"), b""))
        .await
        .unwrap();
    let mut got = String::new();
    let _ = tokio::time::timeout(T, p.read_to_string(&mut got)).await;
    assert!(got.starts_with("HTTP/1.1 401"), "{got}");
    s.stop().await.unwrap();
}

/// HTTPS without its store stops the start, naming the key.
#[tokio::test]
async fn https_without_a_key_store_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = zlock_testkit::test_config(dir.path());
    with_admin(&mut cfg);
    cfg.admin.force_https = true;
    let listener = zlock_server::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
    let e = zlock_server::serve(cfg, listener, std::future::pending())
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("ssl.quorum.keyStore.location"),
        "{e}"
    );
}

/// The metrics endpoint over HTTPS (ZooKeeper 3.9's `metricsProvider.httpsPort` and its
/// `metricsProvider.ssl.*` keys): `httpsPort` alone serves HTTPS only, with a client
/// certificate required by default (`ssl.need.client.auth`, true as in ZooKeeper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_over_https_need_a_client_certificate_by_default() {
    let pki = Pki::make().unwrap();
    let port = zlock_testkit::free_port();
    let s = TestServer::start_with(|cfg| {
        cfg.metrics.enabled = true;
        cfg.metrics.https_port = Some(port);
        cfg.metrics.plain_http = false;
        cfg.metrics.tls.key_store.location = Some(pki.path("server.pem"));
        cfg.metrics.tls.trust_store.location = Some(pki.path("ca.pem"));
    })
    .await
    .unwrap();
    let m = SocketAddr::from(([127, 0, 0, 1], port));
    let alice = Some(("alice.crt", "alice.key"));
    assert_eq!(
        https(&pki, m, "ca.pem", alice, "/metrics", None).await,
        Ok(200)
    );
    let e = https(&pki, m, "ca.pem", None, "/metrics", None).await;
    assert!(e.is_err(), "no client certificate: {e:?}");
    let e = https(
        &pki,
        m,
        "ca.pem",
        Some(("mallory.crt", "mallory.key")),
        "/metrics",
        None,
    )
    .await;
    assert!(e.is_err(), "a certificate of another CA: {e:?}");
    assert!(
        !plain(m, "/metrics").await.starts_with("HTTP/"),
        "plain HTTP is not served on the HTTPS port"
    );
    s.stop().await.unwrap();
}

/// `httpsPort` equal to `httpPort`: one port, plain HTTP and HTTPS (ZooKeeper's unified
/// connector); without client authentication asked, a scraper with no certificate is
/// served over HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_one_port_for_http_and_https() {
    let pki = Pki::make().unwrap();
    let s = TestServer::start_with(|cfg| {
        zlock_testkit::with_metrics(cfg);
        cfg.metrics.https_port = Some(cfg.metrics.http_port);
        cfg.metrics.tls.key_store.location = Some(pki.path("server.pem"));
        cfg.metrics.tls.need_client_auth = false;
        cfg.metrics.tls.want_client_auth = false;
    })
    .await
    .unwrap();
    let m = s.metrics_addr().unwrap();
    assert!(
        plain(m, "/metrics").await.starts_with("HTTP/1.1 200"),
        "plain HTTP on the unified port"
    );
    assert_eq!(
        https(&pki, m, "ca.pem", None, "/metrics", None).await,
        Ok(200)
    );
    assert_eq!(https(&pki, m, "ca.pem", None, "/nope", None).await, Ok(404));
    s.stop().await.unwrap();
}
