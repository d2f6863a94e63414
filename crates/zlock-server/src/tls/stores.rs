//! Reading key and trust stores: PEM files and PKCS12 stores, as ZooKeeper's
//! `ssl.keyStore.*` / `ssl.trustStore.*` keys name them.
//!
//! A PEM key store holds the certificate chain (leaf first) and one unencrypted private
//! key (PKCS#8, PKCS#1 or SEC1); a PEM trust store holds certificates. A PKCS12 key
//! store's first private key entry gives the key and its chain; a PKCS12 trust store's
//! certificates are those marked trusted, as Java reads them (keytool marks them;
//! `openssl pkcs12 -export -nokeys` needs `-jdktrust anyExtendedKeyUsage`, OpenSSL 3.2+).

use std::path::{Path, PathBuf};

use p12_keystore::{KeyStore, KeyStoreEntry};
use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::TlsError;
use crate::config::{location_key, Store, StoreConfig, StoreType, StoreTypeError};

/// What is wrong with a store zlock could open.
#[derive(Debug, thiserror::Error)]
pub enum StoreProblem {
    #[error(transparent)]
    Type(#[from] StoreTypeError),
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
         unencrypted (openssl pkcs8 -topk8 -nocrypt) in a file only zlock's user can \
         read, or use a PKCS12 store with a password"
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

/// The server's certificate chain and private key.
pub(crate) struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

struct Source<'a> {
    store: Store,
    path: &'a Path,
}

impl Source<'_> {
    fn bad(&self, problem: StoreProblem) -> TlsError {
        TlsError::Store {
            key: location_key(self.store),
            path: self.path.to_owned(),
            problem,
        }
    }

    fn read(&self) -> Result<Vec<u8>, TlsError> {
        std::fs::read(self.path).map_err(|source| TlsError::Read {
            key: location_key(self.store),
            path: self.path.to_owned(),
            source,
        })
    }
}

/// The store's file, type and password, or why not.
fn open(store: Store, cfg: &StoreConfig) -> Result<(PathBuf, StoreType, String), TlsError> {
    let key = location_key(store);
    let Some(path) = cfg.location.clone() else {
        return Err(TlsError::Missing { key });
    };
    let kind = cfg.kind().map_err(|e| TlsError::Store {
        key,
        path: path.clone(),
        problem: e.into(),
    })?;
    let password = cfg.password().map_err(|source| TlsError::Read {
        key: match store {
            Store::Key => "ssl.keyStore.passwordPath",
            Store::Trust => "ssl.trustStore.passwordPath",
        },
        path: cfg.password_path.clone().unwrap_or_default(),
        source,
    })?;
    Ok((path, kind, password.unwrap_or_default()))
}

/// The key store: the server's chain and key.
pub(crate) fn identity(cfg: &StoreConfig) -> Result<Identity, TlsError> {
    let (path, kind, password) = open(Store::Key, cfg)?;
    let src = Source {
        store: Store::Key,
        path: &path,
    };
    let bytes = src.read()?;
    let identity = match kind {
        StoreType::Pem => pem_identity(&src, &bytes)?,
        StoreType::Pkcs12 => {
            let ks = pkcs12(&src, &bytes, &password)?;
            let Some((_, chain)) = ks.private_key_chain() else {
                return Err(src.bad(StoreProblem::NoPkcs12Key));
            };
            Identity {
                chain: chain
                    .chain()
                    .iter()
                    .map(|c| CertificateDer::from(c.as_der().to_vec()))
                    .collect(),
                key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().to_vec())),
            }
        }
    };
    if identity.chain.is_empty() {
        return Err(src.bad(StoreProblem::NoChain));
    }
    Ok(identity)
}

/// The trust store's certificates.
pub(crate) fn trusted(cfg: &StoreConfig) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let (path, kind, password) = open(Store::Trust, cfg)?;
    let src = Source {
        store: Store::Trust,
        path: &path,
    };
    let bytes = src.read()?;
    let certs: Vec<_> = match kind {
        StoreType::Pem => pem_sections(&src, &bytes)?
            .into_iter()
            .filter(|(k, _)| *k == SectionKind::Certificate)
            .map(|(_, der)| CertificateDer::from(der))
            .collect(),
        StoreType::Pkcs12 => pkcs12(&src, &bytes, &password)?
            .entries()
            .filter_map(|(_, e)| match e {
                KeyStoreEntry::Certificate(c) => Some(CertificateDer::from(c.as_der().to_vec())),
                _ => None,
            })
            .collect(),
    };
    if certs.is_empty() {
        return Err(src.bad(match kind {
            StoreType::Pem => StoreProblem::NoPemCertificate,
            StoreType::Pkcs12 => StoreProblem::NoTrustedCertificate,
        }));
    }
    Ok(certs)
}

fn pkcs12(src: &Source<'_>, bytes: &[u8], password: &str) -> Result<KeyStore, TlsError> {
    KeyStore::from_pkcs12(bytes, password).map_err(|e| src.bad(StoreProblem::Pkcs12(e)))
}

fn pem_sections(src: &Source<'_>, bytes: &[u8]) -> Result<Vec<(SectionKind, Vec<u8>)>, TlsError> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| src.bad(StoreProblem::Pem(e)))
}

fn pem_identity(src: &Source<'_>, bytes: &[u8]) -> Result<Identity, TlsError> {
    let mut chain = Vec::new();
    let mut key = None;
    for (kind, der) in pem_sections(src, bytes)? {
        let k = match kind {
            SectionKind::Certificate => {
                chain.push(CertificateDer::from(der));
                continue;
            }
            SectionKind::PrivateKey => PrivateKeyDer::Pkcs8(der.into()),
            SectionKind::RsaPrivateKey => PrivateKeyDer::Pkcs1(der.into()),
            SectionKind::EcPrivateKey => PrivateKeyDer::Sec1(der.into()),
            _ => continue,
        };
        if key.replace(k).is_some() {
            return Err(src.bad(StoreProblem::TwoKeys));
        }
    }
    let Some(key) = key else {
        let encrypted = bytes
            .windows(b"ENCRYPTED PRIVATE KEY".len())
            .any(|w| w == b"ENCRYPTED PRIVATE KEY");
        return Err(src.bad(if encrypted {
            StoreProblem::EncryptedKey
        } else {
            StoreProblem::NoPemKey
        }));
    };
    Ok(Identity { chain, key })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pem_store(dir: &Path, name: &str, text: &str) -> StoreConfig {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        StoreConfig {
            location: Some(path),
            ..StoreConfig::default()
        }
    }

    fn err(r: Result<impl Sized, TlsError>) -> String {
        match r {
            Ok(_) => panic!("read"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_pem_key_store_needs_its_key_and_says_when_it_is_encrypted() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let good = pem_store(dir.path(), "s.pem", &(cert.pem() + &key.serialize_pem()));
        let id = identity(&good).unwrap();
        assert_eq!(id.chain.len(), 1);
        let e = err(identity(&pem_store(dir.path(), "c.pem", &cert.pem())));
        assert!(
            e.contains("ssl.keyStore.location") && e.contains("no PRIVATE KEY"),
            "{e}"
        );
        let encrypted = format!(
            "{}-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
            cert.pem()
        );
        let e = err(identity(&pem_store(dir.path(), "e.pem", &encrypted)));
        assert!(e.contains("encrypted"), "{e}");
        let e = err(trusted(&pem_store(
            dir.path(),
            "k.pem",
            &key.serialize_pem(),
        )));
        assert!(
            e.contains("ssl.trustStore.location") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = err(identity(&StoreConfig {
            location: Some(dir.path().join("absent.pem")),
            ..StoreConfig::default()
        }));
        assert!(e.contains("cannot read") && e.contains("absent.pem"), "{e}");
    }

    #[test]
    fn a_pkcs12_store_with_a_wrong_password_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut ks = KeyStore::new();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let chain = p12_keystore::PrivateKeyChain::new(
            key.serialize_der(),
            [7u8; 20],
            [p12_keystore::Certificate::from_der(cert.der()).unwrap()],
        );
        ks.add_entry("k", KeyStoreEntry::PrivateKeyChain(chain));
        let path = dir.path().join("s.p12");
        std::fs::write(&path, ks.writer("right").write().unwrap()).unwrap();
        let mut cfg = StoreConfig {
            location: Some(path),
            password: Some("right".into()),
            ..StoreConfig::default()
        };
        assert_eq!(identity(&cfg).unwrap().chain.len(), 1);
        cfg.password = Some("wrong".into());
        let e = err(identity(&cfg));
        assert!(
            e.contains("ssl.keyStore.location") && e.contains("password"),
            "{e}"
        );
        // The key store is no trust store: it holds no trusted certificate.
        cfg.password = Some("right".into());
        let e = err(trusted(&cfg));
        assert!(e.contains("no trusted certificate"), "{e}");
    }
}
