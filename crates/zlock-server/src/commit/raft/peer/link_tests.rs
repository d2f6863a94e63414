//! [`Links`] on loopback with certificates made at test time: what each side of a link
//! takes and refuses (`sslQuorum`, `portUnification`, the trust store,
//! `ssl.quorum.hostnameVerification`), and an unreadable store named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use tokio::net::TcpListener;

use super::{read_frame, write_frame, Link, Links};
use crate::config::TlsConfig;
use crate::tls::throwaway;

/// A CA, another CA, and member certificates written as PEM key stores in `dir`:
/// `member.pem` (127.0.0.1, the CA), `misnamed.pem` (elsewhere.example, the CA),
/// `rogue.pem` (127.0.0.1, the other CA); `ca.pem` the CA.
fn certificates(dir: &Path) {
    let ca = throwaway::ca(throwaway::subject("zlock", "test CA")).unwrap();
    let other = throwaway::ca(throwaway::subject("zlock", "other CA")).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (file, issuer, name) in [
        ("member.pem", &ca, "127.0.0.1"),
        ("misnamed.pem", &ca, "elsewhere.example"),
        ("rogue.pem", &other, "127.0.0.1"),
    ] {
        let subject = throwaway::subject("zlock", "member");
        let (cert, key) = throwaway::member(issuer, subject, &[name]).unwrap();
        std::fs::write(dir.join(file), cert.pem() + &key.serialize_pem()).unwrap();
    }
}

/// A member's settings: `zoo.cfg` lines applied over the quorum stores of `dir`.
fn config(dir: &Path, key_store: &str, lines: &str) -> TlsConfig {
    let text = format!(
        "ssl.quorum.keyStore.location={}\nssl.quorum.trustStore.location={}\n{lines}",
        dir.join(key_store).display(),
        dir.join("ca.pem").display()
    );
    let mut c = crate::config::ServerConfig::default();
    c.apply_text(Path::new("zoo.cfg"), &text).unwrap();
    c.tls
}

fn links(cfg: &TlsConfig) -> Links {
    Links::tls(
        cfg.quorum.ssl_quorum,
        cfg.quorum.port_unification,
        crate::tls::quorum::server_config(cfg).unwrap(),
        crate::tls::quorum::client_config(cfg).unwrap(),
        Duration::from_secs(2),
    )
}

/// A member accepting on a loopback port with `accepting`: each link it takes is
/// answered one frame (the number it was sent, plus one). Its address.
async fn member(accepting: Links) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((s, from)) = l.accept().await {
            let accepting = accepting.clone();
            tokio::spawn(async move {
                if let Some(mut link) = accepting.accept(s, from).await {
                    if let Ok(n) = read_frame::<u64>(&mut link).await {
                        let _ = write_frame(&mut link, &(n + 1)).await;
                    }
                }
            });
        }
    });
    addr
}

/// Whether a link dialled with `dialling` to `addr` carries a frame there and back.
async fn talks(dialling: &Links, addr: &str) -> bool {
    let exchange = async {
        let mut link = dialling.dial(addr).await.ok()?;
        write_frame(&mut link, &41u64).await.ok()?;
        read_frame::<u64>(&mut link).await.ok()
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), exchange).await;
    matches!(answer, Ok(Some(42)))
}

#[tokio::test]
async fn tls_links_need_a_certificate_the_trust_store_vouches_for_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let good = links(&config(dir.path(), "member.pem", "sslQuorum=true\n"));
    let rogue = links(&config(dir.path(), "rogue.pem", "sslQuorum=true\n"));
    let to_good = member(good.clone()).await;
    let to_rogue = member(rogue.clone()).await;
    assert!(talks(&good, &to_good).await, "TLS to TLS");
    assert!(matches!(good.dial(&to_good).await, Ok(Link::Tls(_))));
    // The rogue's certificate, as a server and as a client, is refused.
    assert!(!talks(&good, &to_rogue).await, "dialled a rogue");
    assert!(!talks(&rogue, &to_good).await, "accepted a rogue");
    // Plain text to a TLS-only port is closed.
    assert!(
        !talks(&Links::default(), &to_good).await,
        "plain to TLS only"
    );
}

#[tokio::test]
async fn port_unification_takes_both_and_a_plain_port_refuses_tls() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let tls = links(&config(dir.path(), "member.pem", "sslQuorum=true\n"));
    let unified = links(&config(dir.path(), "member.pem", "portUnification=true\n"));
    let plain = Links::default();
    let to_unified = member(unified.clone()).await;
    assert!(talks(&tls, &to_unified).await, "TLS to unified");
    assert!(talks(&plain, &to_unified).await, "plain to unified");
    // portUnification alone still dials plain (the first step of the switch).
    assert!(matches!(
        unified.dial(&to_unified).await,
        Ok(Link::Plain(_))
    ));
    let to_plain = member(plain.clone()).await;
    assert!(talks(&plain, &to_plain).await, "plain to plain");
    assert!(!talks(&tls, &to_plain).await, "TLS to plain only");
}

#[tokio::test]
async fn hostname_verification_checks_the_dialled_host_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let misnamed = member(links(&config(
        dir.path(),
        "misnamed.pem",
        "sslQuorum=true\n",
    )))
    .await;
    let strict = links(&config(dir.path(), "member.pem", "sslQuorum=true\n"));
    assert!(
        !talks(&strict, &misnamed).await,
        "a certificate for another host"
    );
    let e = strict.dial(&misnamed).await.err().expect("refused");
    assert!(e.to_string().contains("not valid for name"), "{e}");
    let lax = links(&config(
        dir.path(),
        "member.pem",
        "sslQuorum=true\nssl.quorum.hostnameVerification=false\n",
    ));
    assert!(talks(&lax, &misnamed).await, "hostname verification off");
    // Off, the chain is still checked.
    let rogue = member(links(&config(dir.path(), "rogue.pem", "sslQuorum=true\n"))).await;
    assert!(
        !talks(&lax, &rogue).await,
        "another CA with verification off"
    );
}

#[test]
fn a_missing_store_is_named_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let cfg = config(dir.path(), "absent.pem", "sslQuorum=true\n");
    let e = crate::tls::quorum::client_config(&cfg).expect_err("refused");
    let e = e.to_string();
    assert!(
        e.contains("ssl.quorum.keyStore.location") && e.contains("absent.pem"),
        "{e}"
    );
    let e = crate::tls::quorum::server_config(&cfg).expect_err("refused");
    assert!(e.to_string().contains("absent.pem"), "{e}");
}

/// `sslQuorumReloadCertFiles`: a member's stores rewritten for another CA (its own
/// certificate and its trust store) and [`Links::reload`]ed: from then on it takes
/// only members of the new CA and dials with its new certificate; before, the other
/// way round.
#[tokio::test]
async fn reloaded_stores_are_used_by_the_links_made_after() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    // A second directory: the same files, of new CAs ("member.pem" and "ca.pem"
    // there: the renewal).
    let next = tempfile::tempdir().unwrap();
    certificates(next.path());
    let live = dir.path().join("live");
    std::fs::create_dir(&live).unwrap();
    let copy = |from: &Path, file: &str, to: &str| {
        std::fs::copy(from.join(file), live.join(to)).unwrap();
    };
    copy(dir.path(), "member.pem", "member.pem");
    copy(dir.path(), "ca.pem", "ca.pem");
    let cfg = config(&live, "member.pem", "sslQuorum=true\n");
    let reloading = links(&cfg);
    let at = member(reloading.clone()).await;
    let old = links(&config(dir.path(), "member.pem", "sslQuorum=true\n"));
    let new = links(&config(next.path(), "member.pem", "sslQuorum=true\n"));
    assert!(talks(&old, &at).await, "the first CA's member, before");
    assert!(!talks(&new, &at).await, "the new CA's member, before");

    copy(next.path(), "member.pem", "member.pem");
    copy(next.path(), "ca.pem", "ca.pem");
    reloading.reload(&cfg).unwrap();
    assert!(talks(&new, &at).await, "the new CA's member, after");
    assert!(!talks(&old, &at).await, "the first CA's member, after");
    // Dialling too: the new certificate is shown, the new CA trusted.
    let to_new = member(new.clone()).await;
    assert!(
        talks(&reloading, &to_new).await,
        "dialling the new CA's member"
    );

    // A store that does not build leaves the links as they are.
    std::fs::write(live.join("member.pem"), "not a store").unwrap();
    assert!(reloading.reload(&cfg).is_err());
    assert!(talks(&new, &at).await, "still the new CA's");
}

/// A connection to a TLS-only quorum port closed before its first byte (a dial given
/// up between its connect and its handshake) is closed quietly, not logged as a plain
/// member's refusal, which would mute the next real one for a minute; a plain member
/// that speaks is still refused.
#[tokio::test]
async fn a_connection_closed_before_its_first_byte_is_no_refusal() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let tls = links(&config(dir.path(), "member.pem", "sslQuorum=true\n"));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = l.local_addr().unwrap();
    let silent = tokio::net::TcpStream::connect(at).await.unwrap();
    let (s, from) = l.accept().await.unwrap();
    drop(silent);
    assert!(tls.accept(s, from).await.is_none());
    assert!(
        tls.refusals.is_quiet(&from.ip().to_string()),
        "logged as a refusal"
    );
    let to_tls = member(tls.clone()).await;
    assert!(
        !talks(&Links::default(), &to_tls).await,
        "plain to TLS only"
    );
    assert!(
        !tls.refusals.is_quiet("127.0.0.1"),
        "a plain member is refused"
    );
}
