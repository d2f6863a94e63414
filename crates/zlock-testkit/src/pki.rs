//! [`Pki`]: throwaway certificates for TLS tests, made with rcgen and written as PEM
//! files into a temporary directory: a test CA, a server certificate for `localhost`
//! and `127.0.0.1`, client certificates for alice, bob and carol (subjects
//! `CN=<name>,O=zlock`), and mallory's from another CA that nobody trusts.
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `other-ca.pem` | the test CA, another CA |
//! | `server.pem` | the server's certificate then its key (ZooKeeper's PEM key store) |
//! | `misnamed.pem` | as `server.pem`, for `elsewhere.example` only |
//! | `member.pem` | an ensemble member's (`ssl.quorum.keyStore`): `localhost` and `127.0.0.1`, server and client use, test CA |
//! | `rogue-member.pem` | as `member.pem`, signed by the other CA |
//! | `member-misnamed.pem` | as `member.pem`, for `elsewhere.example` only |
//! | `<who>.crt`, `<who>.key` | alice, bob, carol (test CA), mallory (other CA) |
//! | `alice.p12` | alice's key, certificate and the CA's, PKCS12, password `alicepw` |
//! | `alice-encrypted.key` | alice's key encrypted under `alicepw` ([`encrypted_pem_key`]) |
//! | `trust.p12` | the test CA marked trusted (as keytool makes it), PKCS12, `trustpw` |

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKeyChain};
use rcgen::{DistinguishedName, ExtendedKeyUsagePurpose, KeyPair};
use tempfile::TempDir;
use zlock_server::tls::throwaway::{self, Issuer};

use crate::{free_port, wait_for_port, ChildServer};

/// The certificates, on disk until dropped.
pub struct Pki {
    dir: TempDir,
}

/// A subject `CN=<cn>,O=zlock` (Java's form of it).
pub fn subject(cn: &str) -> DistinguishedName {
    throwaway::subject("zlock", cn)
}

/// A self-signed CA named `CN=<cn>,O=zlock`.
pub fn ca(cn: &str) -> anyhow::Result<Issuer> {
    Ok(throwaway::ca(subject(cn))?)
}

/// A certificate `issuer` signs for `names` (DNS names or IP addresses): (certificate,
/// key).
pub fn leaf(
    issuer: &Issuer,
    cn: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<(rcgen::Certificate, KeyPair)> {
    Ok(throwaway::leaf(issuer, subject(cn), names, usage)?)
}

/// A PKCS#8 key (DER) encrypted under `password`, in PEM (`ENCRYPTED PRIVATE KEY`):
/// PBES2 with PBKDF2-SHA256 and AES-256-CBC, as `openssl pkcs8 -topk8 -v2 aes-256-cbc`
/// writes it (with fewer PBKDF2 rounds, 2,048: a test's debug build decrypts it).
pub fn encrypted_pem_key(der: &[u8], password: &str) -> anyhow::Result<String> {
    let (salt, iv) = (rand::random::<[u8; 16]>(), rand::random::<[u8; 16]>());
    let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, &salt, &iv)
        .map_err(|e| anyhow::anyhow!("PBES2 parameters: {e}"))?;
    let pem = pkcs8::PrivateKeyInfo::try_from(der)
        .map_err(|e| anyhow::anyhow!("not a PKCS#8 key: {e}"))?
        .encrypt_with_params(params, password)
        .map_err(|e| anyhow::anyhow!("encrypting: {e}"))?
        .to_pem("ENCRYPTED PRIVATE KEY", pkcs8::der::pem::LineEnding::LF)
        .map_err(|e| anyhow::anyhow!("PEM: {e}"))?;
    Ok(pem.to_string())
}

/// A PKCS12 store as keytool makes one: its entries, under `password`.
pub fn pkcs12<const N: usize>(
    entries: [(&str, KeyStoreEntry); N],
    password: &str,
) -> anyhow::Result<Vec<u8>> {
    let mut ks = KeyStore::new();
    for (alias, e) in entries {
        ks.add_entry(alias, e);
    }
    Ok(ks.writer(password).write()?)
}

impl Pki {
    /// Makes and writes every file of the table above.
    pub fn make() -> anyhow::Result<Pki> {
        let dir = tempfile::tempdir()?;
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        let other = ca("another CA")?;
        let ca = ca("zlock test CA")?;
        write("ca.pem", ca.pem())?;
        write("other-ca.pem", other.pem())?;
        let (server, key) = leaf(
            &ca,
            "zlock server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        write("server.pem", server.pem() + &key.serialize_pem())?;
        let (misnamed, key) = leaf(
            &ca,
            "zlock server",
            &["elsewhere.example"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        write("misnamed.pem", misnamed.pem() + &key.serialize_pem())?;
        for (file, issuer, names) in [
            ("member.pem", &ca, &["localhost", "127.0.0.1"][..]),
            ("rogue-member.pem", &other, &["localhost", "127.0.0.1"][..]),
            ("member-misnamed.pem", &ca, &["elsewhere.example"][..]),
        ] {
            let (cert, key) = throwaway::member(issuer, subject("zlock member"), names)?;
            write(file, cert.pem() + &key.serialize_pem())?;
        }
        for (who, issuer) in [
            ("alice", &ca),
            ("bob", &ca),
            ("carol", &ca),
            ("mallory", &other),
        ] {
            let (cert, key) = leaf(issuer, who, &[], ExtendedKeyUsagePurpose::ClientAuth)?;
            write(&format!("{who}.crt"), cert.pem())?;
            write(&format!("{who}.key"), key.serialize_pem())?;
            if who == "alice" {
                write(
                    "alice-encrypted.key",
                    encrypted_pem_key(&key.serialize_der(), "alicepw")?,
                )?;
                let chain = PrivateKeyChain::new(
                    key.serialize_der(),
                    [2u8; 20],
                    [
                        Certificate::from_der(cert.der())?,
                        Certificate::from_der(ca.der())?,
                    ],
                );
                let store = [("alice", KeyStoreEntry::PrivateKeyChain(chain))];
                std::fs::write(dir.path().join("alice.p12"), pkcs12(store, "alicepw")?)?;
            }
        }
        let trusted = KeyStoreEntry::Certificate(Certificate::from_der(ca.der())?);
        std::fs::write(
            dir.path().join("trust.p12"),
            pkcs12([("ca", trusted)], "trustpw")?,
        )?;
        Ok(Pki { dir })
    }

    /// The file `name` of the table above.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `zoo.cfg` lines of a server that presents `key_store` (`server.pem`, say)
    /// and takes client certificates of the test CA (`ssl.clientAuth=need`, ZooKeeper's
    /// default).
    pub fn server_keys(&self, key_store: &str) -> String {
        format!(
            "ssl.keyStore.location={}\nssl.trustStore.location={}\nssl.clientAuth=need\n",
            self.path(key_store).display(),
            self.path("ca.pem").display()
        )
    }
}

/// zlock as a child process (stopped by its pid when dropped) with a plain client port
/// and a secure one ([`Pki::start_server`]).
pub struct TlsServer {
    pub child: ChildServer,
    /// `clientPort`.
    pub plain: SocketAddr,
    /// `secureClientPort`.
    pub secure: SocketAddr,
    _dir: TempDir,
}

impl Pki {
    /// The `zoo.cfg` lines of an ensemble member whose links are TLS (`sslQuorum=true`),
    /// presenting `key_store` (`member.pem`, say) and trusting the test CA.
    pub fn quorum_keys(&self, key_store: &str) -> Vec<String> {
        vec![
            "sslQuorum=true".into(),
            format!(
                "ssl.quorum.keyStore.location={}",
                self.path(key_store).display()
            ),
            format!(
                "ssl.quorum.trustStore.location={}",
                self.path("ca.pem").display()
            ),
        ]
    }

    /// Starts zlock with [`Pki::server_keys`]`(key_store)` on a `secureClientPort`, and
    /// waits (at most 60 s) until that port accepts connections.
    pub fn start_server(&self, key_store: &str) -> anyhow::Result<TlsServer> {
        let dir = tempfile::tempdir()?;
        let secure = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "clientPort={}\nsecureClientPort={}\n{}",
                free_port(),
                secure.port(),
                self.server_keys(key_store)
            ),
        )?;
        let cfg = cfg.to_string_lossy().into_owned();
        let child = ChildServer::start(&dir.path().join("data"), &["--config", &cfg])?;
        wait_for_port(secure, Duration::from_secs(60))?;
        Ok(TlsServer {
            plain: child.addr,
            child,
            secure,
            _dir: dir,
        })
    }
}
