//! Reading the server's key and trust stores, as ZooKeeper's `ssl.keyStore.*` /
//! `ssl.trustStore.*` keys name them: the file, its type and password from the config
//! here; the PEM and PKCS12 formats in `zlock_keystore` (which the client reads its
//! files with too).

use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use zlock_keystore::Identity;

use super::TlsError;
use crate::config::{location_key, Store, StoreConfig, StoreType, StoreTypeError};

/// What is wrong with a store zlock could open.
#[derive(Debug, thiserror::Error)]
pub enum StoreProblem {
    #[error(transparent)]
    Type(#[from] StoreTypeError),
    #[error(transparent)]
    Content(#[from] zlock_keystore::Problem),
}

struct Source<'a> {
    store: Store,
    path: &'a Path,
}

impl Source<'_> {
    fn bad(&self, problem: impl Into<StoreProblem>) -> TlsError {
        TlsError::Store {
            key: location_key(self.store),
            path: self.path.to_owned(),
            problem: problem.into(),
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
        key: store.password_path_key(),
        path: cfg.password_path.clone().unwrap_or_default(),
        source,
    })?;
    Ok((path, kind, password.unwrap_or_default()))
}

/// A key store (`store`: which keys name it): the server's chain and key.
pub(crate) fn identity(store: Store, cfg: &StoreConfig) -> Result<Identity, TlsError> {
    let (path, kind, password) = open(store, cfg)?;
    let src = Source { store, path: &path };
    let bytes = src.read()?;
    match kind {
        // An encrypted PEM key is read with the store's password, as ZooKeeper does.
        StoreType::Pem => {
            zlock_keystore::pem_identity_with(&bytes, Some(&*password).filter(|p| !p.is_empty()))
        }
        StoreType::Pkcs12 => zlock_keystore::pkcs12_identity(&bytes, &password),
    }
    .map_err(|p| src.bad(p))
}

/// A trust store's certificates (`store`: which keys name it).
pub(crate) fn trusted(
    store: Store,
    cfg: &StoreConfig,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let (path, kind, password) = open(store, cfg)?;
    let src = Source { store, path: &path };
    let bytes = src.read()?;
    match kind {
        StoreType::Pem => zlock_keystore::pem_certificates(&bytes),
        StoreType::Pkcs12 => zlock_keystore::pkcs12_trusted(&bytes, &password),
    }
    .map_err(|p| src.bad(p))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use p12_keystore::{KeyStore, KeyStoreEntry};

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
        let id = identity(Store::Key, &good).unwrap();
        assert_eq!(id.chain.len(), 1);
        let e = err(identity(
            Store::Key,
            &pem_store(dir.path(), "c.pem", &cert.pem()),
        ));
        assert!(
            e.contains("ssl.keyStore.location") && e.contains("no PRIVATE KEY"),
            "{e}"
        );
        let encrypted = format!(
            "{}-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
            cert.pem()
        );
        let e = err(identity(
            Store::Key,
            &pem_store(dir.path(), "e.pem", &encrypted),
        ));
        assert!(e.contains("encrypted"), "{e}");
        let e = err(trusted(
            Store::Trust,
            &pem_store(dir.path(), "k.pem", &key.serialize_pem()),
        ));
        assert!(
            e.contains("ssl.trustStore.location") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = err(identity(
            Store::Key,
            &StoreConfig {
                location: Some(dir.path().join("absent.pem")),
                ..StoreConfig::default()
            },
        ));
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
        assert_eq!(identity(Store::Key, &cfg).unwrap().chain.len(), 1);
        cfg.password = Some("wrong".into());
        let e = err(identity(Store::Key, &cfg));
        assert!(
            e.contains("ssl.keyStore.location") && e.contains("password"),
            "{e}"
        );
        // The key store is no trust store: it holds no trusted certificate.
        cfg.password = Some("right".into());
        let e = err(trusted(Store::Trust, &cfg));
        assert!(e.contains("no trusted certificate"), "{e}");
    }
}
