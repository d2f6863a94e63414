//! TLS on the secure client port (`secureClientPort`, ZooKeeper's `ssl.*` keys), through
//! the real server process and kazoo (`use_ssl=True`), with certificates made here: a CA,
//! a server certificate for 127.0.0.1 and localhost, client certificates for alice, bob
//! and carol, and mallory's from a second CA.
//!
//! kazoo is a peer (`zlock_testkit::require(Peer::Kazoo)`): missing, these tests fail
//! unless `ZLOCK_TEST_ALLOW_MISSING=1`. Every wait is bounded (kazoo's own timeouts, the
//! child processes' deadline, the raw client's `STUCK`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKeyChain};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;
use tokio::net::TcpStream;
use zlock_testkit::{free_port, require, zlock_bin, ChildServer, Peer};

use zlock_proto::records::ConnectResponse;
use zlock_proto::{Reader, Record};
use zlock_testkit::TestServer;

use crate::common::rawclient::{
    connect_frame, create_req, expect_closed, get_data_req, read_frame, request_frame, send_bytes,
    set_data_req, STUCK,
};

/// The kazoo side: one mode per run, its findings on stdout, one per line.
const KAZOO: &str = r#"
import json, os, sys, threading
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl
from kazoo.protocol.serialization import int_struct, read_string

class WhoAmI(object):
    """ZooKeeper 3.7's whoami (opcode 107): the session's (scheme, user) pairs."""
    type = 107
    def serialize(self):
        return bytearray()
    @classmethod
    def deserialize(cls, b, offset):
        n = int_struct.unpack_from(b, offset)[0]
        offset += int_struct.size
        out = []
        for _ in range(n):
            scheme, offset = read_string(b, offset)
            user, offset = read_string(b, offset)
            out.append("%s:%s" % (scheme, user))
        return out

def client(a, who, ca=None):
    kw = dict(use_ssl=True, ca=ca or a["ca"], verify_certs=True)
    if who:
        kw.update(certfile=a[who + "_cert"], keyfile=a[who + "_key"])
    return KazooClient(hosts=a["hosts"], timeout=10, **kw)

def whoami(zk):
    r = zk.handler.async_result()
    zk._call(WhoAmI(), r)
    return " ".join(r.get(timeout=10))

def out(*words):
    print(*words, flush=True)

mode, a = sys.argv[1], json.loads(sys.argv[2])
if mode == "connect":
    zk = client(a, a.get("who"), a.get("client_ca"))
    try:
        zk.start(timeout=a.get("timeout", 5))
        out("connected")
        out("whoami", whoami(zk))
    except Exception as e:
        out("failed", type(e).__name__)
    zk.stop()
elif mode == "work":
    alice, bob = client(a, "alice"), client(a, "bob")
    alice.start(timeout=10)
    bob.start(timeout=10)
    alice.ensure_path("/tls")
    alice.create("/tls/n", b"v1")
    fired, seen = threading.Event(), []
    def watch(ev):
        seen.append("%s %s" % (ev.type, ev.path))
        fired.set()
    data, _ = alice.get("/tls/n", watch=watch)
    out("get", data.decode())
    bob.set("/tls/n", b"v2")
    out("watch", fired.wait(10), *seen)
    mine, theirs = alice.Lock("/tls/lock", "alice"), bob.Lock("/tls/lock", "bob")
    out("alice-lock", mine.acquire(timeout=10))
    out("bob-while-held", theirs.acquire(blocking=False))
    mine.release()
    out("bob-after-release", theirs.acquire(timeout=10))
    theirs.release()
    out("whoami", whoami(alice))
    alice.stop()
    bob.stop()
elif mode == "acl":
    alice, bob, carol = client(a, "alice"), client(a, "bob"), client(a, "carol")
    for zk in (alice, bob, carol):
        zk.start(timeout=10)
    alice.create("/secret", b"s", acl=[make_acl("x509", "CN=alice,O=zlock", all=True)])
    for name, zk in (("alice", alice), ("bob", bob), ("carol", carol)):
        try:
            out(name, zk.get("/secret")[0].decode())
        except NoAuthError:
            out(name, "noauth")
    out("carol-whoami", whoami(carol))
    for zk in (alice, bob, carol):
        zk.stop()
sys.stdout.flush()
os._exit(0)
"#;

/// What the tests' certificates are, on disk.
struct Pki {
    dir: TempDir,
}

/// A subject `CN=<cn>,O=zlock` (Java's form).
fn subject(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "zlock");
    dn.push(DnType::CommonName, cn);
    dn
}

fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::default();
    p.distinguished_name = subject(cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate `issuer` signs: (certificate, key).
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    cn: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (rcgen::Certificate, KeyPair) {
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name = subject(cn);
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    (p.signed_by(&key, issuer).unwrap(), key)
}

/// A PKCS12 store as keytool makes one: `password`, a key entry or trusted certificates.
fn pkcs12(entries: Vec<(&str, KeyStoreEntry)>, password: &str) -> Vec<u8> {
    let mut ks = KeyStore::new();
    for (alias, e) in entries {
        ks.add_entry(alias, e);
    }
    ks.writer(password).write().unwrap()
}

impl Pki {
    fn make() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &[u8]| std::fs::write(dir.path().join(name), text).unwrap();
        let other = ca("another CA");
        let ca = ca("zlock test CA");
        write("ca.pem", ca.pem().as_bytes());
        write("other-ca.pem", other.pem().as_bytes());
        let (server, key) = leaf(
            &ca,
            "zlock server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        // ZooKeeper's PEM key store: the chain and the key in one file.
        write(
            "server.pem",
            format!("{}{}", server.pem(), key.serialize_pem()).as_bytes(),
        );
        let chain = PrivateKeyChain::new(
            key.serialize_der(),
            [1u8; 20],
            [
                Certificate::from_der(server.der()).unwrap(),
                Certificate::from_der(ca.der()).unwrap(),
            ],
        );
        write(
            "server.p12",
            &pkcs12(
                vec![("server", KeyStoreEntry::PrivateKeyChain(chain))],
                "serverpw",
            ),
        );
        write(
            "trust.p12",
            &pkcs12(
                vec![(
                    "ca",
                    KeyStoreEntry::Certificate(Certificate::from_der(ca.der()).unwrap()),
                )],
                "trustpw",
            ),
        );
        write("trustpw", b"trustpw\n");
        for (who, issuer) in [
            ("alice", &ca),
            ("bob", &ca),
            ("carol", &ca),
            ("mallory", &other),
        ] {
            let (cert, key) = leaf(issuer, who, &[], ExtendedKeyUsagePurpose::ClientAuth);
            write(&format!("{who}.crt"), cert.pem().as_bytes());
            write(&format!("{who}.key"), key.serialize_pem().as_bytes());
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The stores as PEM files.
    fn pem_stores(&self) -> String {
        format!(
            "ssl.keyStore.location={}\nssl.trustStore.location={}\n",
            self.path("server.pem").display(),
            self.path("ca.pem").display()
        )
    }

    /// The stores as PKCS12 files, the trust store's password from a file.
    fn pkcs12_stores(&self) -> String {
        format!(
            "ssl.keyStore.location={}\nssl.keyStore.password=serverpw\n\
             ssl.trustStore.location={}\nssl.trustStore.passwordPath={}\n\
             ssl.trustStore.type=PKCS12\n",
            self.path("server.p12").display(),
            self.path("trust.p12").display(),
            self.path("trustpw").display()
        )
    }
}

/// zlock with a plain and a secure client port; `keys` are the rest of its zoo.cfg.
struct Server {
    _child: ChildServer,
    /// The plain client port.
    plain: SocketAddr,
    secure: SocketAddr,
    _dir: TempDir,
}

fn start(keys: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "clientPort={}\nsecureClientPort={}\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n{keys}",
            free_port(),
            secure.port()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let cfg = cfg.to_string_lossy().into_owned();
    let child = ChildServer::start(&data, &["--config", &cfg]).unwrap();
    zlock_testkit::wait_for_port(secure, Duration::from_secs(60)).unwrap();
    Server {
        plain: child.addr,
        _child: child,
        secure,
        _dir: dir,
    }
}

/// Runs `cmd`, killing it after `within`: (exit success, stdout, stderr).
fn run_bounded(mut cmd: Command, within: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the kazoo script in `mode` against `server`; its stdout. Extra `args` join the
/// paths of the certificates.
fn kazoo(py: &Path, pki: &Pki, server: &Server, mode: &str, args: serde_json::Value) -> String {
    let script = pki.path("tls_client.py");
    std::fs::write(&script, KAZOO).unwrap();
    let mut a = serde_json::json!({
        "hosts": server.secure.to_string(),
        "ca": pki.path("ca.pem"),
    });
    for who in ["alice", "bob", "carol", "mallory"] {
        a[format!("{who}_cert")] = pki.path(&format!("{who}.crt")).to_string_lossy().into();
        a[format!("{who}_key")] = pki.path(&format!("{who}.key")).to_string_lossy().into();
    }
    if let (Some(a), Some(extra)) = (a.as_object_mut(), args.as_object()) {
        a.extend(extra.clone());
    }
    let mut cmd = Command::new(py);
    cmd.arg(&script).arg(mode).arg(a.to_string());
    let (ok, out, err) = run_bounded(cmd, Duration::from_secs(120));
    assert!(ok, "kazoo {mode} failed:\n{out}\n{err}");
    out
}

fn connect(py: &Path, pki: &Pki, server: &Server, args: serde_json::Value) -> String {
    kazoo(py, pki, server, "connect", args)
}

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
         carol-whoami ip:127.0.0.1 super:CN=carol,O=zlock x509:CN=carol,O=zlock\n"
    );
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

/// The `zlock server` binary on a zoo.cfg: (exit success, stderr).
fn start_binary(keys: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "clientPort={}\ndataDir={}\n{keys}",
            free_port(),
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(zlock_bin().unwrap());
    cmd.arg("server")
        .arg("--config")
        .arg(&cfg)
        .env("ZLOCK_LOG", "warn");
    // A start that is not refused serves until killed: 30 s is a refusal's ample time.
    let (ok, _, err) = run_bounded(cmd, Duration::from_secs(30));
    (ok, err)
}

#[test]
fn tls_keys_zlock_does_not_implement_stop_the_start() {
    let pki = Pki::make();
    let secure = format!("secureClientPort={}\n{}", free_port(), pki.pem_stores());
    for (keys, named) in [
        (
            format!("{secure}ssl.quorum.keyStore.location=/etc/zk/q.pem\n"),
            "ssl.quorum.keyStore.location",
        ),
        ("sslQuorum=true\n".to_owned(), "sslQuorum"),
        (
            format!("{secure}client.certReload=true\n"),
            "client.certReload",
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

/// A TLS client of zlock's own (tokio-rustls) with `who`'s certificate, trusting the
/// test CA: connected and through the ZooKeeper handshake.
async fn rust_client(
    pki: &Pki,
    addr: SocketAddr,
    who: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::AsyncWriteExt;

    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(pki.path(&format!("{who}.crt")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{who}.key"))).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let mut s = connector.connect(name, tcp).await.unwrap();
    s.write_all(&connect_frame(30_000)).await.unwrap();
    s.flush().await.unwrap();
    let body = tokio::time::timeout(STUCK, read_frame(&mut s))
        .await
        .expect("no handshake reply")
        .unwrap();
    let resp = ConnectResponse::decode(&mut Reader::new(&body)).unwrap();
    assert!(resp.time_out > 0, "session refused");
    s
}

/// Replies that the socket cannot take at once wait, as records, inside the
/// connection's rustls state and leave through the writer task in order, with reads
/// answered by the connection task and writes by the commit thread on the same
/// connection (as `pipelined::a_client_that_reads_late_gets_every_reply_in_order`
/// proves for a plain one); the plain port serves meanwhile (mixed mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_reads_late_gets_every_reply_in_order() {
    use tokio::io::AsyncWriteExt;
    use zlock_proto::records::{GetDataResponse, ReplyHeader};

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

    let big = vec![b'x'; 64 * 1024];
    let mut xid = 0;
    let mut frames = Vec::new();
    let mut next = |req: zlock_proto::Request, frames: &mut Vec<u8>| {
        xid += 1;
        let mut body = Vec::new();
        req.encode(&mut body);
        frames.extend_from_slice(&request_frame(xid, req.op_code() as i32, &body));
        xid
    };
    next(create_req("/big", &big), &mut frames);
    next(create_req("/n", b"0"), &mut frames);
    let mut expect: Vec<(i32, Option<Vec<u8>>)> = vec![(1, None), (2, None)];
    for i in 1..=200 {
        let x = next(get_data_req("/big"), &mut frames);
        expect.push((x, Some(big.clone())));
        if i % 3 == 0 {
            let v = i.to_string().into_bytes();
            let x = next(set_data_req("/n", &v, -1), &mut frames);
            expect.push((x, None));
            let x = next(get_data_req("/n"), &mut frames);
            expect.push((x, Some(v)));
        }
    }
    s.write_all(&frames).await.unwrap();
    s.flush().await.unwrap();
    // The plain port meanwhile.
    let plain = crate::common::rawclient::RawClient::connect(server.addr)
        .await
        .unwrap();
    assert!(plain.exists("/").await.unwrap().is_ok());
    // Let the server run into the full socket buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (want_xid, want_data) in expect {
        let body = tokio::time::timeout(STUCK, read_frame(&mut s))
            .await
            .expect("reply did not arrive")
            .unwrap();
        let mut r = Reader::new(&body);
        let hdr = ReplyHeader::decode(&mut r).unwrap();
        assert_eq!(hdr.xid, want_xid, "replies out of order");
        assert_eq!(hdr.err, 0, "xid {want_xid} failed");
        if let Some(data) = want_data {
            let resp = GetDataResponse::decode(&mut r).unwrap();
            assert_eq!(resp.data.as_deref(), Some(&data[..]), "xid {want_xid}");
        }
    }
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
/// `CLIENT_JVMFLAGS` would configure zkCli: create, get, and whoami showing x509.
#[test]
fn zookeepers_java_client_over_tls() {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let mut class_path = Vec::new();
    for jar in [
        "zookeeper",
        "zookeeper-jute",
        "slf4j-api",
        "slf4j-simple",
        "netty-buffer",
        "netty-codec",
        "netty-common",
        "netty-handler",
        "netty-resolver",
        "netty-transport",
        "netty-transport-native-epoll",
        "netty-transport-native-unix-common",
    ] {
        let path = format!("/usr/share/java/{jar}.jar");
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
    let server = start(&pki.pem_stores());
    let zkcli = |args: &[&str]| {
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
    let out = zkcli(&["create", "/fromjava", "hello"]);
    assert!(out.contains("Created /fromjava"), "{out}");
    let out = zkcli(&["get", "/fromjava"]);
    assert!(out.lines().any(|l| l == "hello"), "{out}");
    let out = zkcli(&["whoami"]);
    assert!(out.contains("x509: CN=alice,O=zlock"), "{out}");
}
