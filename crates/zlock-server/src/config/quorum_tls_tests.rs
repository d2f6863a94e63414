//! The keys of TLS between members (`sslQuorum`, `portUnification`, `ssl.quorum.*`)
//! through [`ServerConfig::apply_text`], as a `zoo.cfg` gives them.

use super::tls_tests::{apply, refused};
use super::*;

const STORES: &str = "ssl.quorum.keyStore.location=/etc/zk/member.pem\n\
    ssl.quorum.trustStore.location=/etc/zk/ca.pem\n";

#[test]
fn plain_by_default_with_zookeepers_defaults() {
    let q = apply("clientPort=2181\n").unwrap().tls.quorum;
    assert!(!q.enabled() && !q.ssl_quorum && !q.port_unification);
    assert!(q.hostname_verification, "ZooKeeper's default");
    assert_eq!(q.protocols, [Protocol::Tls13, Protocol::Tls12]);
    assert_eq!(q.handshake_timeout_ms, 5000);
}

#[test]
fn every_quorum_key_is_read_with_or_without_the_zookeeper_prefix() {
    let c = apply(&format!(
        "{STORES}sslQuorum=true\nzookeeper.portUnification=true\n\
         ssl.quorum.hostnameVerification=false\nssl.quorum.protocol=TLSv1.3\n\
         zookeeper.ssl.quorum.enabledProtocols=TLSv1.2\n\
         ssl.quorum.ciphersuites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n\
         ssl.quorum.handshakeDetectionTimeoutMillis=900\nssl.quorum.clientAuth=NEED\n\
         ssl.quorum.clientHostnameVerification=false\nssl.quorum.allowReverseDnsLookup=false\n\
         ssl.quorum.crl=false\nssl.quorum.ocsp=false\nssl.quorum.sslProvider=JDK\n\
         sslQuorumReloadCertFiles=true\nssl.quorum.keyStore.type=PEM\n"
    ))
    .unwrap();
    let q = &c.tls.quorum;
    assert!(q.ssl_quorum && q.port_unification && q.enabled());
    assert!(!q.hostname_verification);
    assert_eq!(q.protocols, [Protocol::Tls12], "enabledProtocols wins");
    assert_eq!(q.cipher_suites, ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]);
    assert_eq!(q.handshake_timeout_ms, 900);
    assert!(q.reload_cert_files);
    assert_eq!(c.tls.quorum_key_store.kind(), Ok(StoreType::Pem));
    // The client port's settings are its own.
    assert!(!c.tls.enabled());
    assert_eq!(c.tls.protocols, [Protocol::Tls13, Protocol::Tls12]);
    assert!(c.tls.cipher_suites.is_empty());
}

#[test]
fn port_unification_alone_needs_the_stores_too() {
    // It takes TLS members, whose certificates are checked against the trust store.
    let q = apply(&format!("{STORES}portUnification=true\n"))
        .unwrap()
        .tls
        .quorum;
    assert!(q.enabled() && !q.ssl_quorum);
    refused("portUnification=true\n", "ssl.quorum.keyStore.location");
    // And `client.portUnification` is the client port's, not this.
    let c = apply(
        "client.portUnification=true\nssl.keyStore.location=/s.pem\n\
         ssl.trustStore.location=/c.pem\n",
    )
    .unwrap();
    assert!(c.tls.port_unification && !c.tls.quorum.enabled());
}

#[test]
fn ssl_quorum_without_both_stores_is_refused_naming_the_missing_one() {
    let e = refused(
        "sslQuorum=true\nssl.quorum.trustStore.location=/ca.pem\n",
        "ssl.quorum.keyStore.location",
    );
    assert!(e.contains("both quorum stores"), "{e}");
    refused(
        "sslQuorum=true\nssl.quorum.keyStore.location=/m.pem\n",
        "ssl.quorum.trustStore.location",
    );
    let e = refused(
        "sslQuorum=true\nssl.quorum.keyStore.location=/m.jks\n\
         ssl.quorum.trustStore.location=/ca.pem\n",
        "ssl.quorum.keyStore.location",
    );
    assert!(e.contains("-deststoretype PKCS12"), "{e}");
    // The client port's stores are not the members'.
    refused(
        "clientPort=2181\nsecureClientPort=2281\nssl.keyStore.location=/s.pem\n\
         ssl.trustStore.location=/c.pem\nsslQuorum=true\n",
        "ssl.quorum.keyStore.location",
    );
}

#[test]
fn quorum_settings_zlock_does_not_honour_stop_the_start_by_name() {
    for (line, why) in [
        (
            "ssl.quorum.clientHostnameVerification=true",
            "not its address",
        ),
        ("ssl.quorum.allowReverseDnsLookup=true", "never looks"),
        ("ssl.quorum.crl=true", "revocation"),
        ("ssl.quorum.ocsp=true", "OCSP"),
        ("ssl.quorum.clientAuth=want", "only need"),
        ("ssl.quorum.clientAuth=none", "only need"),
        (
            "ssl.quorum.context.supplier.class=com.example.Ctx",
            "ssl.quorum.protocol",
        ),
        ("ssl.quorum.keyStore.provider=BC", "TLS setting"),
        (
            "ssl.quorum.enabledProtocols=TLSv1.1",
            "TLSv1.2 and TLSv1.3 only",
        ),
        (
            "ssl.quorum.ciphersuites=TLS_RSA_WITH_AES_128_CBC_SHA",
            "is not a suite",
        ),
        ("ssl.quorum.handshakeDetectionTimeoutMillis=0", "at least 1"),
        ("sslQuorum=yes", "true or false"),
        ("portUnification=1", "true or false"),
    ] {
        let key = line.split('=').next().unwrap_or(line);
        let e = refused(&format!("{STORES}{line}\n"), key);
        assert!(e.contains(why), "{line}: {e}");
    }
    // A TLS 1.2 suite alone while TLS 1.3 is enabled too: no suite for 1.3.
    refused(
        &format!("{STORES}sslQuorum=true\nssl.quorum.ciphersuites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"),
        "ssl.quorum.ciphersuites",
    );
}
