//! The TLS keys through [`ServerConfig::apply_text`], as a `zoo.cfg` gives them.

use std::path::Path;

use super::*;

const BASE: &str = "clientPort=2181\nsecureClientPort=2281\n\
    ssl.keyStore.location=/etc/zk/server.pem\nssl.trustStore.location=/etc/zk/ca.pem\n";

/// `text` read as a `zoo.cfg` (the quorum TLS tests use it too).
pub(super) fn apply(text: &str) -> Result<ServerConfig, ConfigError> {
    let mut c = ServerConfig::default();
    c.apply_text(Path::new("zoo.cfg"), text)?;
    Ok(c)
}

/// The error for `text`, which must name `key`.
pub(super) fn refused(text: &str, key: &str) -> String {
    let e = apply(text).expect_err(text).to_string();
    assert!(e.contains(key), "{e:?} does not name {key}");
    e
}

#[test]
fn a_secure_port_without_a_client_port_is_the_only_client_port() {
    let c = apply(
        "secureClientPort=2281\nssl.keyStore.location=/s.pem\nssl.trustStore.location=/c.pem\n",
    )
    .unwrap();
    assert!(c.tls.tls_only);
    assert_eq!(c.client_listen_addr(), ([127, 0, 0, 1], 2281).into());
    let c = apply(BASE).unwrap();
    assert!(!c.tls.tls_only, "clientPort given: both are served");
    assert_eq!(c.client_listen_addr().port(), 2181);
}

#[test]
fn off_by_default_and_on_with_secure_client_port() {
    let c = apply("clientPort=2181\n").unwrap();
    assert!(!c.tls.enabled());
    let c = apply(BASE).unwrap();
    let t = &c.tls;
    assert_eq!(t.secure_client_port, Some(2281));
    assert_eq!(t.client_auth, ClientAuth::Need, "ZooKeeper's default");
    assert_eq!(t.protocols, [Protocol::Tls13, Protocol::Tls12]);
    assert_eq!(t.handshake_timeout_ms, 5000);
    assert_eq!(t.key_store.kind(), Ok(StoreType::Pem));
}

#[test]
fn every_key_is_read_with_or_without_the_zookeeper_prefix() {
    let c = apply(&format!(
        "{BASE}secureClientPortAddress=0.0.0.0\n\
         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
         zookeeper.ssl.keyStore.password=kpw\nssl.keyStore.type=pkcs12\n\
         ssl.trustStore.passwordPath=/etc/zk/tpw\nssl.trustStore.type=PEM\n\
         ssl.clientAuth=want\nssl.protocol=TLSv1.2\nssl.ciphersuites=\
         TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n\
         ssl.handshakeDetectionTimeoutMillis=750\n\
         authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n\
         ssl.authProvider=x509\nzookeeper.X509AuthenticationProvider.superUser=CN=root,O=zlock\n\
         client.portUnification=true\nclient.certReload=false\nsslQuorum=false\n\
         ssl.hostnameVerification=true\n"
    ))
    .unwrap();
    let t = &c.tls;
    assert_eq!(t.secure_client_port_address, Some([0, 0, 0, 0].into()));
    assert_eq!(t.key_store.password.as_deref(), Some("kpw"));
    assert_eq!(
        t.key_store.kind(),
        Ok(StoreType::Pkcs12),
        "the type wins over .pem"
    );
    assert_eq!(
        t.trust_store.password_path.as_deref(),
        Some(Path::new("/etc/zk/tpw"))
    );
    assert_eq!(t.client_auth, ClientAuth::Want);
    assert_eq!(
        t.protocols,
        [Protocol::Tls12],
        "ssl.protocol alone, as ZooKeeper"
    );
    assert_eq!(t.cipher_suites.len(), 2);
    assert_eq!(t.handshake_timeout_ms, 750);
    assert_eq!(t.x509_super_user.as_deref(), Some("CN=root,O=zlock"));
    assert!(t.port_unification);
    assert!(!t.cert_reload);
    let c = apply(&format!(
        "{BASE}zookeeper.client.certReload=true
"
    ))
    .unwrap();
    assert!(c.tls.cert_reload);
}

#[test]
fn port_unification_alone_turns_tls_on_and_needs_the_stores() {
    let c = apply(
        "clientPort=2181
client.portUnification=true
ssl.keyStore.location=/s.pem
         ssl.trustStore.location=/c.pem
",
    )
    .unwrap();
    assert!(c.tls.enabled() && c.tls.secure_client_port.is_none());
    refused(
        "client.portUnification=true
ssl.trustStore.location=/c.pem
",
        "ssl.keyStore.location",
    );
}

#[test]
fn enabled_protocols_win_over_protocol() {
    let c = apply(&format!(
        "{BASE}ssl.protocol=TLSv1.3\nssl.enabledProtocols=TLSv1.2,TLSv1.3\n"
    ))
    .unwrap();
    assert_eq!(c.tls.protocols, [Protocol::Tls12, Protocol::Tls13]);
    refused(
        &format!("{BASE}ssl.enabledProtocols=TLSv1.1\n"),
        "ssl.enabledProtocols",
    );
    refused(&format!("{BASE}ssl.protocol=SSLv3\n"), "ssl.protocol");
}

#[test]
fn store_types_are_inferred_from_the_file_name_as_zookeeper_does() {
    let store = |loc: &str| StoreConfig {
        location: Some(loc.into()),
        ..StoreConfig::default()
    };
    assert_eq!(store("a/b.pem").kind(), Ok(StoreType::Pem));
    assert_eq!(store("b.P12").kind(), Ok(StoreType::Pkcs12));
    assert_eq!(store("b.pfx").kind(), Ok(StoreType::Pkcs12));
    assert!(store("b.jks")
        .kind()
        .unwrap_err()
        .to_string()
        .contains("-deststoretype PKCS12"));
    assert!(store("b.store")
        .kind()
        .unwrap_err()
        .to_string()
        .contains(".type"));
}

#[test]
fn jks_is_refused_with_how_to_convert_it() {
    let e = refused(
        &format!("{BASE}ssl.keyStore.type=JKS\n"),
        "ssl.keyStore.type",
    );
    assert!(e.contains("keytool -importkeystore"), "{e}");
    let e = refused(
        "clientPort=2181\nsecureClientPort=2281\nssl.keyStore.location=/k.jks\n\
         ssl.trustStore.location=/ca.pem\n",
        "ssl.keyStore.location",
    );
    assert!(e.contains("-deststoretype PKCS12"), "{e}");
}

#[test]
fn an_unknown_cipher_suite_is_refused_by_name() {
    let e = refused(
        &format!("{BASE}ssl.ciphersuites=TLS_RSA_WITH_AES_128_CBC_SHA\n"),
        "ssl.ciphersuites",
    );
    assert!(e.contains("TLS_RSA_WITH_AES_128_CBC_SHA"), "{e}");
    // Only TLS 1.2 suites while TLS 1.3 is enabled too.
    refused(
        &format!("{BASE}ssl.ciphersuites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"),
        "ssl.ciphersuites",
    );
}

#[test]
fn tls_keys_zlock_does_not_implement_stop_the_start() {
    for line in [
        "ssl.quorum.clientHostnameVerification=true",
        "zookeeper.ssl.quorum.context.supplier.class=com.example.Ctx",
        "ssl.crl=true",
        "ssl.ocsp=true",
        "ssl.context.supplier.class=com.example.Ctx",
        "ssl.clientHostnameVerification=true",
        "ssl.keyStore.provider=BC",
        "ssl.authProvider=myx509",
        "authProvider.1=com.example.MyProvider",
    ] {
        let key = line.split('=').next().unwrap();
        refused(&format!("{BASE}{line}\n"), key);
        // Also without a secure port: the operator asked for something zlock lacks.
        refused(&format!("clientPort=2181\n{line}\n"), key);
    }
}

#[test]
fn a_secure_port_needs_its_stores() {
    refused(
        "clientPort=2181\nsecureClientPort=2281\nssl.trustStore.location=/ca.pem\n",
        "ssl.keyStore.location",
    );
    refused(
        "clientPort=2181\nsecureClientPort=2281\nssl.keyStore.location=/s.pem\n",
        "ssl.trustStore.location",
    );
    // No client certificates asked for: no trust store needed.
    apply(
        "clientPort=2181\nsecureClientPort=2281\nssl.keyStore.location=/s.pem\n\
         ssl.clientAuth=none\n",
    )
    .unwrap();
    refused(&format!("{BASE}ssl.clientAuth=maybe\n"), "ssl.clientAuth");
    refused(&format!("{BASE}secureClientPort=x\n"), "secureClientPort");
}

#[test]
fn a_password_file_loses_one_trailing_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pw");
    std::fs::write(&path, "s3cret \n").unwrap();
    let s = StoreConfig {
        password_path: Some(path),
        ..StoreConfig::default()
    };
    assert_eq!(s.password().unwrap().as_deref(), Some("s3cret "));
}

#[test]
fn the_admin_servers_https_keys_and_the_quorum_stores_are_read() {
    let c = apply(
        "admin.forceHttps=true\nadmin.needClientAuth=true\n\
         ssl.quorum.keyStore.location=/q.p12\nssl.quorum.keyStore.password=pw\n\
         ssl.quorum.trustStore.location=/ca.pem\n",
    )
    .unwrap();
    assert!(c.admin.force_https && c.admin.need_client_auth && c.admin.https());
    assert_eq!(
        c.tls.quorum_key_store.location.as_deref(),
        Some(std::path::Path::new("/q.p12"))
    );
    assert_eq!(c.tls.quorum_key_store.password.as_deref(), Some("pw"));
    refused("admin.portUnification=yes\n", "admin.portUnification");
    // TLS between members needs both quorum stores (see `quorum_tls_tests`).
    refused("sslQuorum=true\n", "ssl.quorum.keyStore.location");
}

#[test]
fn a_members_client_port_is_a_plain_port_too() {
    apply(
        "secureClientPort=2281\nssl.keyStore.location=/s.pem\nssl.trustStore.location=/c.pem\n\
         server.1=127.0.0.1:2888:3888;2181\n",
    )
    .unwrap();
}
