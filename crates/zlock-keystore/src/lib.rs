//! TLS key and trust stores read into rustls's DER types: PEM files and PKCS12 stores,
//! as ZooKeeper's `ssl.keyStore.*` / `ssl.trustStore.*` (server) and
//! `zookeeper.ssl.*` (client) keys name them. The server reads its stores with it, the
//! client its CAs and its certificate, so both take the same files the same way.
//!
//! Bytes in, DER out: no file access and no config keys here; a caller reads the file
//! and names it (and the key that named it) in its own error around a [`Problem`].
//!
//! A PEM key store holds the certificate chain (leaf first) and one unencrypted private
//! key (PKCS#8, PKCS#1 or SEC1); a PEM trust store holds certificates. A PKCS12 key
//! store's first private key entry gives the key and its chain; a PKCS12 trust store's
//! certificates are those marked trusted, as Java reads them (keytool marks them;
//! `openssl pkcs12 -export -nokeys` needs `-jdktrust anyExtendedKeyUsage`, OpenSSL 3.2+).

use p12_keystore::{KeyStore, KeyStoreEntry};
use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What is wrong with a store's bytes.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("cannot read it as PKCS12 (is the password right?): {0}")]
    Pkcs12(p12_keystore::error::Error),
    #[error("no private key entry in the PKCS12 store")]
    NoPkcs12Key,
    #[error(
        "no trusted certificate in the PKCS12 store: as Java, zlock takes only \
         certificates marked trusted (keytool -importcert marks them; OpenSSL 3.2+ with \
         pkcs12 -export -nokeys -jdktrust anyExtendedKeyUsage), or use a PEM trust store"
    )]
    NoTrustedCertificate,
    #[error("not a PEM file: {0}")]
    Pem(rustls_pki_types::pem::Error),
    #[error("no CERTIFICATE in the file")]
    NoPemCertificate,
    #[error("more than one private key in the file")]
    TwoKeys,
    #[error(
        "its private key is encrypted, which zlock does not read yet: write it \
         unencrypted (openssl pkcs8 -topk8 -nocrypt) in a file only its user can read, \
         or use a PKCS12 store with a password"
    )]
    EncryptedKey,
    #[error(
        "no PRIVATE KEY in the file (a PEM key store holds the certificate chain and \
         the key)"
    )]
    NoPemKey,
    #[error("no certificate for the private key")]
    NoChain,
}

/// A certificate chain (leaf first) and its private key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// A PEM key store: its certificates and its one private key.
pub fn pem_identity(bytes: &[u8]) -> Result<Identity, Problem> {
    let key = pem_key(bytes)?;
    let chain = pem_sections(bytes)?
        .into_iter()
        .filter(|(k, _)| *k == SectionKind::Certificate)
        .map(|(_, der)| CertificateDer::from(der))
        .collect::<Vec<_>>();
    if chain.is_empty() {
        return Err(Problem::NoChain);
    }
    Ok(Identity { chain, key })
}

/// The one private key of a PEM file.
pub fn pem_key(bytes: &[u8]) -> Result<PrivateKeyDer<'static>, Problem> {
    let mut key = None;
    for (kind, der) in pem_sections(bytes)? {
        let k = match kind {
            SectionKind::PrivateKey => PrivateKeyDer::Pkcs8(der.into()),
            SectionKind::RsaPrivateKey => PrivateKeyDer::Pkcs1(der.into()),
            SectionKind::EcPrivateKey => PrivateKeyDer::Sec1(der.into()),
            _ => continue,
        };
        if key.replace(k).is_some() {
            return Err(Problem::TwoKeys);
        }
    }
    key.ok_or_else(|| {
        let encrypted = bytes
            .windows(b"ENCRYPTED PRIVATE KEY".len())
            .any(|w| w == b"ENCRYPTED PRIVATE KEY");
        if encrypted {
            Problem::EncryptedKey
        } else {
            Problem::NoPemKey
        }
    })
}

/// The certificates of a PEM file (at least one).
pub fn pem_certificates(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let certs: Vec<_> = pem_sections(bytes)?
        .into_iter()
        .filter(|(k, _)| *k == SectionKind::Certificate)
        .map(|(_, der)| CertificateDer::from(der))
        .collect();
    if certs.is_empty() {
        return Err(Problem::NoPemCertificate);
    }
    Ok(certs)
}

/// A PKCS12 key store's first private key entry: its chain and key.
pub fn pkcs12_identity(bytes: &[u8], password: &str) -> Result<Identity, Problem> {
    let ks = pkcs12(bytes, password)?;
    let Some((_, chain)) = ks.private_key_chain() else {
        return Err(Problem::NoPkcs12Key);
    };
    let identity = Identity {
        chain: chain
            .chain()
            .iter()
            .map(|c| CertificateDer::from(c.as_der().to_vec()))
            .collect(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().to_vec())),
    };
    if identity.chain.is_empty() {
        return Err(Problem::NoChain);
    }
    Ok(identity)
}

/// A PKCS12 trust store's trusted certificates (at least one).
pub fn pkcs12_trusted(
    bytes: &[u8],
    password: &str,
) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let certs: Vec<_> = pkcs12(bytes, password)?
        .entries()
        .filter_map(|(_, e)| match e {
            KeyStoreEntry::Certificate(c) => Some(CertificateDer::from(c.as_der().to_vec())),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(Problem::NoTrustedCertificate);
    }
    Ok(certs)
}

fn pkcs12(bytes: &[u8], password: &str) -> Result<KeyStore, Problem> {
    KeyStore::from_pkcs12(bytes, password).map_err(Problem::Pkcs12)
}

fn pem_sections(bytes: &[u8]) -> Result<Vec<(SectionKind, Vec<u8>)>, Problem> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Problem::Pem)
}
