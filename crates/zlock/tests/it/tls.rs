//! The client over TLS (`TlsOptions`) against zlock's `secureClientPort` with
//! `ssl.clientAuth=need`: the operations, a watch and a lock through it; the client
//! certificate as the session's x509 identity; the failures (an untrusted server, a
//! misnamed one, no client certificate, unreadable files) as typed errors within a
//! bound; and a session moved to another member of a TLS ensemble.

use std::time::Duration;

use zlock::recipes::Mutex;
use zlock::{perms, Acl, Client, ConnectionState, CreateMode, Error, ErrorCode, Id, TlsError};
use zlock::{EventType, TlsOptions};
use zlock_testkit::pki::Pki;
use zlock_testkit::{ChildEnsemble, EnsembleOptions};

use crate::common::{within, T};

/// Trusting the test CA, with `who`'s certificate.
pub fn tls_as(pki: &Pki, who: &str) -> TlsOptions {
    TlsOptions::new(pki.path("ca.pem")).client_cert(
        pki.path(&format!("{who}.crt")),
        pki.path(&format!("{who}.key")),
    )
}

/// Connects over TLS, bounded by [`T`].
pub async fn connect_tls(connect: &str, tls: TlsOptions) -> Result<Client, Error> {
    within(
        "a TLS connect",
        Client::builder(connect)
            .session_timeout_ms(10_000)
            .tls(tls)
            .connect(),
    )
    .await
    .map(|(c, _)| c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_watches_and_a_lock_over_tls_with_x509_identities() {
    let pki = Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    // An IP address in the connect string is checked against the IP SAN, a name
    // against the DNS SAN.
    let alice = connect_tls(&server.secure.to_string(), tls_as(&pki, "alice"))
        .await
        .unwrap();
    let bob = connect_tls(
        &format!("localhost:{}", server.secure.port()),
        tls_as(&pki, "bob"),
    )
    .await
    .unwrap();

    alice
        .create("/tls", b"v1", CreateMode::Persistent)
        .await
        .unwrap();
    let (data, _, changed) = alice.get_data_watch("/tls").await.unwrap();
    assert_eq!(data, b"v1");
    bob.set_data("/tls", b"v2", -1).await.unwrap();
    let ev = within("the watch to fire", changed).await.unwrap();
    assert_eq!(
        (ev.event_type, ev.path.as_str()),
        (EventType::NodeDataChanged, "/tls")
    );
    assert_eq!(bob.get_data("/tls", false).await.unwrap().0, b"v2");

    let mine = Mutex::new(alice.clone(), "/tls-lock");
    let theirs = Mutex::new(bob.clone(), "/tls-lock");
    let held = within("alice's lock", mine.acquire()).await.unwrap();
    assert!(
        theirs.try_acquire().await.unwrap().is_none(),
        "held by alice"
    );
    held.release().await.unwrap();
    let next = within("bob's lock after the release", theirs.acquire())
        .await
        .unwrap();
    next.release().await.unwrap();

    // alice's certificate is her identity: a node only x509:CN=alice,O=zlock may read.
    let only_alice = vec![Acl {
        perms: perms::ALL,
        id: Id::new("x509", "CN=alice,O=zlock"),
    }];
    alice
        .create_with_acl("/alice-only", b"s", only_alice, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(alice.get_data("/alice-only", false).await.unwrap().0, b"s");
    assert_eq!(
        bob.get_data("/alice-only", false).await.unwrap_err(),
        Error::Server(ErrorCode::NoAuth)
    );
    alice.close().await.unwrap();
    bob.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_or_misnamed_server_or_no_client_certificate_fails_the_handshake() {
    let pki = Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    let addr = server.secure.to_string();

    let stranger = TlsOptions::new(pki.path("other-ca.pem"))
        .client_cert(pki.path("alice.crt"), pki.path("alice.key"));
    match connect_tls(&addr, stranger).await {
        Err(Error::TlsHandshake(host, why)) => {
            assert_eq!(host, addr);
            assert!(why.contains("UnknownIssuer"), "{why}");
        }
        other => panic!("an untrusted server: {:?}", other.map(|_| ())),
    }

    // No certificate, against ssl.clientAuth=need: the server's alert, by name.
    match connect_tls(&addr, TlsOptions::new(pki.path("ca.pem"))).await {
        Err(Error::TlsHandshake(host, why)) => {
            assert_eq!(host, addr);
            assert!(why.contains("CertificateRequired"), "{why}");
        }
        other => panic!("no client certificate: {:?}", other.map(|_| ())),
    }

    // A certificate of the trusted CA for another name.
    let misnamed = pki.start_server("misnamed.pem").unwrap();
    match connect_tls(&misnamed.secure.to_string(), tls_as(&pki, "alice")).await {
        Err(Error::TlsHandshake(_, why)) => assert!(why.contains("not valid for name"), "{why}"),
        other => panic!("a misnamed server: {:?}", other.map(|_| ())),
    }
}

/// PKCS12 stores (a trust store with the CA marked trusted, a key store with alice's
/// key and chain) work as the PEM files do; a wrong password is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pkcs12_stores_serve_as_pem_files_do() {
    let pki = Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    let addr = server.secure.to_string();
    let tls = TlsOptions::default()
        .add_ca_pkcs12(pki.path("trust.p12"), "trustpw")
        .client_pkcs12(pki.path("alice.p12"), "alicepw");
    let alice = connect_tls(&addr, tls).await.unwrap();
    let only_alice = vec![Acl {
        perms: perms::ALL,
        id: Id::new("x509", "CN=alice,O=zlock"),
    }];
    alice
        .create_with_acl("/p12", b"p", only_alice, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(alice.get_data("/p12", false).await.unwrap().0, b"p");
    alice.close().await.unwrap();

    let wrong = TlsOptions::default()
        .add_ca_pkcs12(pki.path("trust.p12"), "trustpw")
        .client_pkcs12(pki.path("alice.p12"), "nope");
    match connect_tls(&addr, wrong).await {
        Err(e @ Error::Tls(TlsError::Invalid { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("alice.p12") && text.contains("password"),
                "{text}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// An encrypted PEM key (PBES2, as OpenSSL writes it) with its password; without the
/// password, an error naming the file before any connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_key_is_read_with_its_password() {
    let pki = Pki::make().unwrap();
    let server = pki.start_server("server.pem").unwrap();
    let addr = server.secure.to_string();
    let key = pki.path("alice-encrypted.key");
    let tls = TlsOptions::new(pki.path("ca.pem")).client_cert(pki.path("alice.crt"), &key);
    let alice = connect_tls(&addr, tls.clone().key_password("alicepw"))
        .await
        .unwrap();
    let only_alice = vec![Acl {
        perms: perms::ALL,
        id: Id::new("x509", "CN=alice,O=zlock"),
    }];
    alice
        .create_with_acl("/enc", b"e", only_alice, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(alice.get_data("/enc", false).await.unwrap().0, b"e");
    alice.close().await.unwrap();
    match connect_tls(&addr, tls).await {
        Err(e @ Error::Tls(TlsError::Invalid { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("alice-encrypted.key") && text.contains("no password"),
                "{text}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn unreadable_or_invalid_files_are_named_before_connecting() {
    let pki = Pki::make().unwrap();
    // No server at all: the files are read first.
    let nowhere = "127.0.0.1:1";
    let absent = pki.path("absent.pem");
    match connect_tls(nowhere, TlsOptions::new(&absent)).await {
        Err(Error::Tls(TlsError::Read { path, .. })) => assert_eq!(path, absent),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A key file that holds a certificate only.
    let wrong = TlsOptions::new(pki.path("ca.pem"))
        .client_cert(pki.path("alice.crt"), pki.path("alice.crt"));
    match connect_tls(nowhere, wrong).await {
        Err(e @ Error::Tls(TlsError::Invalid { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("alice.crt") && text.contains("no PRIVATE KEY"),
                "{text}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A session on a TLS ensemble (each member's client port takes TLS clients:
/// `client.portUnification`), its member killed: it resumes on another member over TLS
/// with its id and its ephemeral node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_session_moves_to_another_member_with_its_ephemerals() {
    let pki = Pki::make().unwrap();
    let mut keys: Vec<String> = pki
        .server_keys("server.pem")
        .lines()
        .map(str::to_owned)
        .collect();
    keys.push("client.portUnification=true".into());
    let mut ens = ChildEnsemble::start_with(EnsembleOptions {
        extra: keys,
        ..EnsembleOptions::default()
    })
    .await
    .unwrap();
    ens.leader().await.unwrap();
    // The hosts are tried in order: the session starts on member 0.
    let alice = connect_tls(&ens.connect_string_from(0), tls_as(&pki, "alice"))
        .await
        .unwrap();
    let id = alice.session_id();
    alice
        .create("/mine", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let mut state = alice.state_stream();
    ens.kill9(0);
    within(
        "the session to resume on another member",
        state.wait_for(|s| *s == ConnectionState::Reconnected),
    )
    .await
    .unwrap();
    assert_eq!(alice.session_id(), id);
    // Answered by member 1 or 2 (member 0 is gone), over TLS.
    let stat = within("a read after the move", alice.exists("/mine", false))
        .await
        .unwrap()
        .expect("the ephemeral node survives the move");
    assert_eq!(stat.ephemeral_owner, id);
    // Another client, on the members left, sees it too.
    let others = format!("{},{}", ens.client_addr(1), ens.client_addr(2));
    let bob = connect_tls(&others, tls_as(&pki, "bob")).await.unwrap();
    let stat = bob
        .exists("/mine", false)
        .await
        .unwrap()
        .expect("seen by bob");
    assert_eq!(stat.ephemeral_owner, id);
    alice.close().await.unwrap();
    let gone = tokio::time::timeout(T, async {
        while bob.exists("/mine", false).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "the ephemeral node goes with the closed session"
    );
}
