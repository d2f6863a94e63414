//! TLS key and trust stores read into rustls's DER types: PEM files and PKCS12 stores,
//! as ZooKeeper's `ssl.keyStore.*` / `ssl.trustStore.*` (server) and
//! `zookeeper.ssl.*` (client) keys name them. The server reads its stores with it, the
//! client its CAs and its certificate, so both take the same files the same way.
//!
//! Bytes in, DER out: no file access and no config keys here; a caller reads the file
//! and names it (and the key that named it) in its own error around a [`Problem`].
//!
//! A PEM key store holds the certificate chain (leaf first) and one private key
//! (PKCS#8, PKCS#1 or SEC1; or an encrypted PKCS#8 key, `ENCRYPTED PRIVATE KEY`, PBES2
//! as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it, decrypted with the store's
//! password, as ZooKeeper's PEM reader takes `ssl.keyStore.password`); a PEM trust store
//! holds certificates. A PKCS12 key
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
        "its private key is encrypted and no password is given (the store's .password \
         or .passwordPath)"
    )]
    EncryptedKeyNoPassword,
    #[error(
        "cannot decrypt its private key (is the password right? PKCS#8 with PBES2, as \
         openssl pkcs8 -topk8 -v2 aes-256-cbc writes it, is read): {0}"
    )]
    EncryptedKey(String),
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
    pem_identity_with(bytes, None)
}

/// A PEM key store whose key may be encrypted with `password`.
pub fn pem_identity_with(bytes: &[u8], password: Option<&str>) -> Result<Identity, Problem> {
    let key = pem_key_with(bytes, password)?;
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
    pem_key_with(bytes, None)
}

/// The label of an encrypted PKCS#8 key's PEM block.
const ENCRYPTED: &str = "ENCRYPTED PRIVATE KEY";

/// The one private key of a PEM file, an encrypted one decrypted with `password`.
pub fn pem_key_with(
    bytes: &[u8],
    password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, Problem> {
    let mut key = encrypted_key(bytes, password)?;
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
    key.ok_or(Problem::NoPemKey)
}

/// The file's `ENCRYPTED PRIVATE KEY` block, decrypted (none: `None`).
fn encrypted_key(
    bytes: &[u8],
    password: Option<&str>,
) -> Result<Option<PrivateKeyDer<'static>>, Problem> {
    let text = String::from_utf8_lossy(bytes);
    let begin = format!("-----BEGIN {ENCRYPTED}-----");
    let end = format!("-----END {ENCRYPTED}-----");
    let Some(start) = text.find(&begin) else {
        return Ok(None);
    };
    let Some(stop) = text[start..].find(&end).map(|i| start + i + end.len()) else {
        return Err(Problem::EncryptedKey(
            "its PEM block has no END line".into(),
        ));
    };
    if text[stop..].contains(&begin) {
        return Err(Problem::TwoKeys);
    }
    let password = password.ok_or(Problem::EncryptedKeyNoPassword)?;
    let bad = |e: &dyn std::fmt::Display| Problem::EncryptedKey(e.to_string());
    let (label, doc) = pkcs8::Document::from_pem(&text[start..stop]).map_err(|e| bad(&e))?;
    if label != ENCRYPTED {
        return Err(bad(&format!("a {label} block")));
    }
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes()).map_err(|e| bad(&e))?;
    let plain = info.decrypt(password).map_err(|e| bad(&e))?;
    Ok(Some(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        plain.as_bytes().to_vec(),
    ))))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use pkcs8::der::pem::LineEnding;

    /// A certificate and its key: the key as PKCS#8 DER, and encrypted under `password`
    /// in PEM (PBES2, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it).
    fn encrypted(password: &str) -> (String, Vec<u8>, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = key.serialize_der();
        let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).unwrap();
        // PBKDF2-SHA256 and AES-256-CBC, as OpenSSL writes it (pkcs8's own default,
        // scrypt, takes tens of seconds in a debug build).
        let (salt, iv) = (rand::random::<[u8; 16]>(), rand::random::<[u8; 16]>());
        let params =
            pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, &salt, &iv).unwrap();
        let pem = info
            .encrypt_with_params(params, password)
            .unwrap()
            .to_pem(ENCRYPTED, LineEnding::LF)
            .unwrap()
            .to_string();
        (cert.pem(), der, pem)
    }

    #[test]
    fn an_encrypted_key_is_read_with_its_password() {
        let (cert, der, key) = encrypted("s3cret");
        let file = format!("{cert}{key}");
        let id = pem_identity_with(file.as_bytes(), Some("s3cret")).unwrap();
        assert_eq!(id.key.secret_der(), der.as_slice());
        assert_eq!(id.chain.len(), 1);
        assert!(matches!(
            pem_identity_with(file.as_bytes(), Some("wrong")),
            Err(Problem::EncryptedKey(_))
        ));
        assert!(matches!(
            pem_identity(file.as_bytes()),
            Err(Problem::EncryptedKeyNoPassword)
        ));
        // An encrypted key and a plain one: which is meant?
        let sections = pem_sections(file.as_bytes()).unwrap();
        assert_eq!(
            sections.len(),
            1,
            "the encrypted block is not a section rustls reads"
        );
        let two = format!(
            "{file}-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64_of(&der)
        );
        assert!(matches!(
            pem_identity_with(two.as_bytes(), Some("s3cret")),
            Err(Problem::TwoKeys)
        ));
    }

    fn base64_of(der: &[u8]) -> String {
        pkcs8::der::pem::encode_string("X", LineEnding::LF, der)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
