//! `zlock ensemble --tls`: a throwaway CA, a certificate for the members (SANs
//! `localhost` and `127.0.0.1`) and one for a client, written as PEM into
//! `<data-dir>/tls/`, and each member's `zoo.cfg` lines for its `secureClientPort`.
//!
//! For trying TLS on one machine, not for production: the CA's key is not kept (no more
//! certificates can be signed with it), the keys are unencrypted, and the files are
//! kept across runs (a rerun on the same data directory reuses them, so clients'
//! settings stay valid).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::ExtendedKeyUsagePurpose;
use zlock_server::tls::throwaway::{ca, leaf, subject};

const ORG: &str = "zlock ensemble";

/// The client certificate's subject, as the server names it (`x509:<subject>`).
pub const CLIENT_SUBJECT: &str = "CN=zlock-client,O=zlock ensemble";

/// The files in `<data-dir>/tls/`.
pub struct Files {
    dir: PathBuf,
}

impl Files {
    /// The CA every member and client trusts.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The members' key store: certificate then key.
    fn server(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// The client's certificate then key in one file: a PEM key store, for zkCli.
    pub fn client_pem(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// zkCli's `-client-configuration` file.
    pub fn client_properties(&self) -> PathBuf {
        self.dir.join("client.properties")
    }

    /// The `zoo.cfg` of a member serving plain clients on `client_port` (as its
    /// `--server` line says: the server checks, when it reads the file, that TLS comes
    /// with a plain port) and TLS clients on `secure_port`, requiring a client
    /// certificate of the CA (`ssl.clientAuth=need`, ZooKeeper's default).
    pub fn member_config(&self, client_port: u16, secure_port: u16) -> String {
        format!(
            "clientPort={client_port}\nsecureClientPort={secure_port}\n\
             ssl.keyStore.location={}\n\
             ssl.trustStore.location={}\nssl.clientAuth=need\n",
            self.server().display(),
            self.ca().display()
        )
    }
}

/// The files in `<data_dir>/tls/`, made unless they are all there already.
pub fn files(data_dir: &Path) -> anyhow::Result<Files> {
    let f = Files {
        dir: data_dir.join("tls"),
    };
    let all = [
        f.ca(),
        f.server(),
        f.client_cert(),
        f.client_key(),
        f.client_pem(),
        f.client_properties(),
    ];
    if all.iter().all(|p| p.exists()) {
        return Ok(f);
    }
    std::fs::create_dir_all(&f.dir).with_context(|| format!("creating {}", f.dir.display()))?;
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    let ca = ca(subject(ORG, "zlock ensemble CA (throwaway)"))?;
    write(f.ca(), ca.pem())?;
    let (server, key) = leaf(
        &ca,
        subject(ORG, "zlock ensemble member"),
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    write(f.server(), server.pem() + &key.serialize_pem())?;
    let (client, key) = leaf(
        &ca,
        subject(ORG, "zlock-client"),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    write(f.client_cert(), client.pem())?;
    write(f.client_key(), key.serialize_pem())?;
    write(f.client_pem(), client.pem() + &key.serialize_pem())?;
    write(
        f.client_properties(),
        format!(
            "# zkCli.sh -server 127.0.0.1:2281 -client-configuration {props}\n\
             # (zlock commands read it too: zlock ls / -client-configuration {props})\n\
             zookeeper.client.secure=true\n\
             zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n\
             zookeeper.ssl.keyStore.location={}\nzookeeper.ssl.keyStore.type=PEM\n\
             zookeeper.ssl.trustStore.location={}\nzookeeper.ssl.trustStore.type=PEM\n",
            f.client_pem().display(),
            f.ca().display(),
            props = f.client_properties().display(),
        ),
    )?;
    Ok(f)
}

/// What a client needs, printed: zlock's flags, kazoo's arguments, zkCli's file.
pub fn print_hints(f: &Files, secure: &str) {
    let (ca, cert, key) = (f.ca(), f.client_cert(), f.client_key());
    let flags = format!(
        "--tls-ca {} --tls-cert {} --tls-key {}",
        ca.display(),
        cert.display(),
        key.display()
    );
    println!("\nTLS connect string: {secure}  (the client certificate is x509:{CLIENT_SUBJECT})");
    println!("  client flags: {flags}");
    println!("  zlock ls / --server {secure} {flags}");
    println!(
        "  kazoo: KazooClient(hosts='{secure}', use_ssl=True, ca='{}', certfile='{}', keyfile='{}')",
        ca.display(),
        cert.display(),
        key.display()
    );
    let props = f.client_properties();
    println!(
        "  zkCli.sh -server {secure} -client-configuration {}",
        props.display()
    );
    // Debian's zkEnv.sh sets the class path to ZooKeeper's jar alone: no Netty, which
    // the Java client's TLS needs.
    println!(
        "  (Debian's zkCli.sh lacks Netty; there: java -cp \"$(ls /usr/share/java/{{zookeeper,\
         zookeeper-jute,slf4j-api,netty-*}}.jar | tr '\\n' :)\" \
         org.apache.zookeeper.ZooKeeperMain -server {secure} -client-configuration {})",
        props.display()
    );
}
