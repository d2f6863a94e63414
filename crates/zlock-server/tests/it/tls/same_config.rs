//! The same zoo.cfg TLS keys given to Apache ZooKeeper 3.8 (Debian's package, with
//! Netty) and to zlock: each kazoo case of the TLS tests run against both, and their
//! answers compared line by line. Stores as PEM and as PKCS12, `ssl.clientAuth` need
//! (the default), want and none, a client with no certificate, one from another CA, one
//! that does not trust the server's CA, x509 ACLs and the x509 super user.
//!
//! A `whoami` line's identities are compared as a set: ZooKeeper keeps a connection's
//! in a hash set (`ServerCnxn.authInfo`), so their order is no contract (it gave `ip`
//! first for alice and `x509` first for bob); zlock lists them as they were added.
//!
//! Not compared: an encrypted PEM key (`tls.rs`,
//! `an_encrypted_pem_key_is_read_with_the_key_store_password`). ZooKeeper 3.8 on the
//! JDK 17 here cannot read one as OpenSSL writes it (PBES2): it logs "PBES2
//! SecretKeyFactory not available" and closes every TLS connection (checked live).
//!
//! ZooKeeper, kazoo and the JDK are peers: missing, this test fails (unless
//! `ZLOCK_TEST_ALLOW_MISSING=1`).

use serde_json::{json, Value};
use zlock_testkit::{require, Peer};

use super::support::{kazoo, start, start_zookeeper, Pki, Server};

/// One configuration and the kazoo runs made against it: (mode, arguments).
struct Case {
    name: &'static str,
    keys: String,
    runs: Vec<(&'static str, Value)>,
}

/// A kazoo run's output with each `whoami` line's identities sorted.
fn comparable(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| match l.split_once("whoami ") {
            Some((head, ids)) => {
                let mut ids: Vec<&str> = ids.split(' ').collect();
                ids.sort_unstable();
                format!("{head}whoami {}", ids.join(" "))
            }
            None => l.to_owned(),
        })
        .collect()
}

#[test]
fn the_same_tls_config_behaves_the_same_on_zookeeper_and_zlock() {
    let Some(py) = require(Peer::Kazoo) else {
        return;
    };
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let pki = Pki::make();
    let connect = |args: Value| ("connect", args);
    let cases = [
        Case {
            name: "PEM stores, clientAuth need (the default)",
            keys: pki.pem_stores(),
            runs: vec![
                ("work", json!({})),
                connect(json!({})),
                connect(json!({"who": "mallory"})),
                connect(json!({"who": "bob"})),
                connect(json!({"who": "bob", "client_ca": pki.path("other-ca.pem")})),
            ],
        },
        Case {
            name: "PEM stores, clientAuth want",
            keys: format!("{}ssl.clientAuth=want\n", pki.pem_stores()),
            runs: vec![connect(json!({})), connect(json!({"who": "alice"}))],
        },
        Case {
            name: "a key store only, clientAuth none",
            keys: format!(
                "ssl.keyStore.location={}\nssl.clientAuth=none\n",
                pki.path("server.pem").display()
            ),
            runs: vec![connect(json!({})), connect(json!({"who": "alice"}))],
        },
        Case {
            name: "x509 ACLs and the x509 super user",
            keys: format!(
                "{}authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n\
                 ssl.authProvider=x509\nX509AuthenticationProvider.superUser=CN=carol,O=zlock\n",
                pki.pem_stores()
            ),
            runs: vec![("acl", json!({}))],
        },
        Case {
            name: "PKCS12 stores, a password file",
            keys: pki.pkcs12_stores(),
            runs: vec![
                connect(json!({"who": "alice"})),
                connect(json!({"who": "mallory"})),
            ],
        },
    ];
    let mut differences = Vec::new();
    let mut compared = 0;
    for case in &cases {
        let run_all = |server: &Server| -> Vec<String> {
            case.runs
                .iter()
                .map(|(mode, args)| kazoo(&py, &pki, server, mode, args.clone()))
                .collect()
        };
        let zookeeper = run_all(&start_zookeeper(&case.keys));
        let zlock = run_all(&start(&case.keys));
        for (((mode, args), zk), zl) in case.runs.iter().zip(&zookeeper).zip(&zlock) {
            compared += 1;
            if comparable(zk) != comparable(zl) {
                differences.push(format!(
                    "{}: kazoo {mode} {args}\n  ZooKeeper: {zk:?}\n  zlock:     {zl:?}",
                    case.name
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {compared} answers differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert_eq!(compared, 12);
}
