//! What the TLS tests share: the certificates they make (rcgen; PEM and PKCS12 stores),
//! the zlock server they start, the kazoo script they drive, and zlock's own TLS client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p12_keystore::{Certificate, KeyStoreEntry, PrivateKeyChain};
use rcgen::ExtendedKeyUsagePurpose;
use tempfile::TempDir;
use tokio::net::TcpStream;
use zlock_proto::records::ConnectResponse;
use zlock_proto::{Reader, Record};
use zlock_testkit::pki::{ca, leaf, pkcs12};
use zlock_testkit::{free_port, zlock_bin, ChildServer, ZooKeeper};

use crate::common::rawclient::{connect_frame, read_frame, STUCK};

/// The kazoo side: one mode per run, its findings on stdout, one per line.
pub const KAZOO: &str = r#"
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
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    pub fn make() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &[u8]| std::fs::write(dir.path().join(name), text).unwrap();
        let other = ca("another CA").unwrap();
        let ca = ca("zlock test CA").unwrap();
        write("ca.pem", ca.pem().as_bytes());
        write("other-ca.pem", other.pem().as_bytes());
        let (server, key) = leaf(
            &ca,
            "zlock server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
        .unwrap();
        // ZooKeeper's PEM key store: the chain and the key in one file.
        write(
            "server.pem",
            format!("{}{}", server.pem(), key.serialize_pem()).as_bytes(),
        );
        // The same with the key encrypted under "serverpw".
        let encrypted =
            zlock_testkit::pki::encrypted_pem_key(&key.serialize_der(), "serverpw").unwrap();
        write(
            "server-encrypted.pem",
            format!("{}{encrypted}", server.pem()).as_bytes(),
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
                [("server", KeyStoreEntry::PrivateKeyChain(chain))],
                "serverpw",
            )
            .unwrap(),
        );
        write(
            "trust.p12",
            &pkcs12(
                [(
                    "ca",
                    KeyStoreEntry::Certificate(Certificate::from_der(ca.der()).unwrap()),
                )],
                "trustpw",
            )
            .unwrap(),
        );
        write("trustpw", b"trustpw\n");
        for (who, issuer) in [
            ("alice", &ca),
            ("bob", &ca),
            ("carol", &ca),
            ("mallory", &other),
        ] {
            let (cert, key) = leaf(issuer, who, &[], ExtendedKeyUsagePurpose::ClientAuth).unwrap();
            write(&format!("{who}.crt"), cert.pem().as_bytes());
            write(&format!("{who}.key"), key.serialize_pem().as_bytes());
        }
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The stores as PEM files.
    pub fn pem_stores(&self) -> String {
        format!(
            "ssl.keyStore.location={}\nssl.trustStore.location={}\n",
            self.path("server.pem").display(),
            self.path("ca.pem").display()
        )
    }

    /// The stores as PKCS12 files, the trust store's password from a file.
    pub fn pkcs12_stores(&self) -> String {
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
pub struct Server {
    _child: Running,
    /// The plain client port.
    pub plain: SocketAddr,
    pub secure: SocketAddr,
    /// Its zoo.cfg and data, where the test wrote them (ZooKeeper keeps its own).
    _dir: Option<TempDir>,
}

/// The server process behind a [`Server`]; stopped by pid on drop.
enum Running {
    Zlock(#[allow(dead_code)] ChildServer),
    ZooKeeper(#[allow(dead_code)] ZooKeeper),
    Process(#[allow(dead_code)] Killed),
}

/// A child process SIGKILLed (by pid) and reaped on drop.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `zlock server --config <cfg>` logging at `level`: no `--port`, the file says which
/// client ports are served.
pub fn zlock_on(cfg: &Path, level: &str) -> Command {
    let mut cmd = Command::new(zlock_bin().unwrap());
    cmd.args(["server", "--config"])
        .arg(cfg)
        .env("ZLOCK_LOG", level);
    cmd
}

/// zlock on a zoo.cfg with `secureClientPort` and no `clientPort` (nor `--port`): TLS
/// is the only way in. [`Server::plain`] is the secure port too.
pub fn start_tls_only(keys: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "dataDir={}
secureClientPort={}
4lw.commands.whitelist=*
{keys}",
            dir.path().join("data").display(),
            secure.port()
        ),
    )
    .unwrap();
    let child = zlock_on(&cfg, "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let running = Running::Process(Killed(child));
    zlock_testkit::wait_for_port(secure, Duration::from_secs(60)).unwrap();
    Server {
        plain: secure,
        _child: running,
        secure,
        _dir: Some(dir),
    }
}

/// Apache ZooKeeper 3.8 on the same TLS keys as [`start`] gives zlock: the same
/// `secureClientPort`, `serverCnxnFactory` and `keys` lines in its zoo.cfg.
pub fn start_zookeeper(keys: &str) -> Server {
    let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let zk = ZooKeeper::start_on(
        None,
        &format!(
            "secureClientPort={}
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
{keys}",
            secure.port()
        ),
    )
    .unwrap();
    zlock_testkit::wait_for_port(secure, Duration::from_secs(60)).unwrap();
    Server {
        plain: zk.addr,
        _child: Running::ZooKeeper(zk),
        secure,
        _dir: None,
    }
}

pub fn start(keys: &str) -> Server {
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
        _child: Running::Zlock(child),
        secure,
        _dir: Some(dir),
    }
}

/// Runs `cmd`, killing it after `within`: (exit success, stdout, stderr).
pub fn run_bounded(mut cmd: Command, within: Duration) -> (bool, String, String) {
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
pub fn kazoo(py: &Path, pki: &Pki, server: &Server, mode: &str, args: serde_json::Value) -> String {
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

pub fn connect(py: &Path, pki: &Pki, server: &Server, args: serde_json::Value) -> String {
    kazoo(py, pki, server, "connect", args)
}

/// The `zlock server` binary on a zoo.cfg: (exit success, stderr).
pub fn start_binary(keys: &str) -> (bool, String) {
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
    let cmd = zlock_on(&cfg, "warn");
    // A start that is not refused serves until killed: 30 s is a refusal's ample time.
    let (ok, _, err) = run_bounded(cmd, Duration::from_secs(30));
    (ok, err)
}

/// A TLS client of zlock's own (tokio-rustls) with `who`'s certificate, trusting the
/// test CA: connected and through the ZooKeeper handshake.
pub async fn rust_client(
    pki: &Pki,
    addr: SocketAddr,
    who: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut s = tls_stream(pki, addr, who).await;
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

/// A TLS connection to `addr` as `who`, the handshake done, nothing sent yet.
pub async fn tls_stream(
    pki: &Pki,
    addr: SocketAddr,
    who: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

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
    connector.connect(name, tcp).await.unwrap()
}
