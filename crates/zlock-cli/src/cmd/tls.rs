//! The TLS flags every command that talks to a server takes (`--tls-ca`, `--tls-cert`,
//! `--tls-key`), and ZooKeeper's client properties file as zkCli reads it
//! (`-client-configuration FILE`): `zookeeper.client.secure`, `zookeeper.ssl.keyStore.*`,
//! `zookeeper.ssl.trustStore.*`. Flags override the file.
//!
//! The stores' types are told as the server tells its own (`.type`, else the file name:
//! `zlock_server::config::StoreConfig`), and read as it reads them (`zlock_keystore`):
//! a PEM key store is the chain then the key in one file, as ZooKeeper's; a PKCS12
//! store takes its `.password` or `.passwordPath`; JKS is refused by name.

use std::path::{Path, PathBuf};

use zlock::TlsOptions;
use zlock_server::config::{StoreConfig, StoreType, StoreTypeError};

/// `--help`'s paragraph on the TLS flags (a macro, for `concat!` into the epilogues).
macro_rules! tls_help {
    () => {
        "\
TLS (a server's secureClientPort, or a clientPort with client.portUnification):
  zlock ls / --server 127.0.0.1:2281 --tls-ca ca.pem --tls-cert alice.crt --tls-key alice.key
or ZooKeeper's client properties file, as zkCli takes it:
  zlock ls / --server 127.0.0.1:2281 -client-configuration client.properties
with, in client.properties:
  zookeeper.client.secure=true
  zookeeper.ssl.trustStore.location=/etc/zk/ca.pem
  zookeeper.ssl.keyStore.location=/etc/zk/alice.pem    # chain, then the key
Stores are PEM or PKCS12 (zookeeper.ssl.*.password; JKS: convert it to PKCS12).
Flags override the file. The server's name or IP address, as in --server, is
checked against its certificate."
    };
}
pub(crate) use tls_help;

/// The TLS flags, flattened into each command's arguments.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect over TLS, trusting the CA certificates in this PEM file
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Present this client certificate (PEM chain; the key may follow it in the file)
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM, unencrypted)
    #[arg(long = "tls-key", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// ZooKeeper's client properties file (zkCli's -client-configuration; the
    /// zookeeper.client.secure and zookeeper.ssl.* keys are read)
    #[arg(long = "client-configuration", value_name = "FILE")]
    pub client_configuration: Option<PathBuf>,
}

/// Why the TLS flags or the properties file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsArgsError {
    #[error("cannot read the client configuration {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: expected key=value, not {text:?}", .path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{key}: {problem}")]
    Store { key: &'static str, problem: String },
    #[error(
        "TLS needs the CAs to trust: --tls-ca, or zookeeper.ssl.trustStore.location in \
         the client configuration"
    )]
    NoTrustStore,
}

const KEY_STORE: &str = "zookeeper.ssl.keyStore";
const TRUST_STORE: &str = "zookeeper.ssl.trustStore";

/// What the properties file says about TLS.
#[derive(Debug, Default, PartialEq)]
struct ClientProperties {
    secure: bool,
    key_store: StoreConfig,
    trust_store: StoreConfig,
}

impl TlsArgs {
    /// The TLS to connect with: None for plain TCP (no TLS flag, and no file saying
    /// `zookeeper.client.secure=true`).
    pub fn options(&self) -> Result<Option<TlsOptions>, TlsArgsError> {
        let props = match &self.client_configuration {
            Some(path) => read_properties(path)?,
            None => ClientProperties::default(),
        };
        if !props.secure && self.ca.is_none() && self.cert.is_none() {
            return Ok(None);
        }
        let mut tls = TlsOptions::default();
        match (&self.ca, store(TRUST_STORE, &props.trust_store)?) {
            (Some(ca), _) => tls.ca.push(ca.clone()),
            (None, Some(Located::Pem(path, _))) => tls.ca.push(path),
            (None, Some(Located::Pkcs12(path, password))) => {
                tls = tls.add_ca_pkcs12(path, &password)
            }
            (None, None) => return Err(TlsArgsError::NoTrustStore),
        }
        match (&self.cert, store(KEY_STORE, &props.key_store)?) {
            (Some(cert), _) => {
                tls.cert = Some(cert.clone());
                tls.key = self.key.clone();
            }
            (None, Some(Located::Pem(path, password))) => {
                tls.cert = Some(path);
                tls.key_password = password;
            }
            (None, Some(Located::Pkcs12(path, password))) => {
                tls = tls.client_pkcs12(path, &password)
            }
            (None, None) => {}
        }
        Ok(Some(tls))
    }
}

/// A store of the properties file, by type.
enum Located {
    /// PEM: a trust store's certificates, or a key store's chain and key (with the
    /// password of an encrypted key, if given).
    Pem(PathBuf, Option<String>),
    /// PKCS12 and its password.
    Pkcs12(PathBuf, String),
}

/// A store's file and type, if it has a file.
fn store(prefix: &'static str, store: &StoreConfig) -> Result<Option<Located>, TlsArgsError> {
    let key = location_key(prefix);
    let Some(path) = &store.location else {
        return Ok(None);
    };
    let bad = |problem: String| TlsArgsError::Store { key, problem };
    let password = store
        .password()
        .map_err(|e| bad(format!("reading its passwordPath: {e}")))?;
    match store.kind().map_err(|e| bad(e.to_string()))? {
        StoreType::Pem => Ok(Some(Located::Pem(path.clone(), password))),
        StoreType::Pkcs12 => Ok(Some(Located::Pkcs12(
            path.clone(),
            password.unwrap_or_default(),
        ))),
    }
}

fn location_key(prefix: &str) -> &'static str {
    if prefix == KEY_STORE {
        "zookeeper.ssl.keyStore.location"
    } else {
        "zookeeper.ssl.trustStore.location"
    }
}

fn read_properties(path: &Path) -> Result<ClientProperties, TlsArgsError> {
    let text = std::fs::read_to_string(path).map_err(|source| TlsArgsError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_properties(path, &text)
}

/// The TLS keys of a Java properties file (`key=value` or `key: value` lines, `#` and
/// `!` comments); other keys (zkCli's many) are left alone.
fn parse_properties(path: &Path, text: &str) -> Result<ClientProperties, TlsArgsError> {
    let mut props = ClientProperties::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((k, v)) = line.split_once(['=', ':']) else {
            return Err(TlsArgsError::Syntax {
                path: path.to_owned(),
                line: i + 1,
                text: raw.to_owned(),
            });
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "zookeeper.client.secure" {
            props.secure = v.eq_ignore_ascii_case("true");
            continue;
        }
        for (prefix, store) in [
            (KEY_STORE, &mut props.key_store),
            (TRUST_STORE, &mut props.trust_store),
        ] {
            let Some(field) = k.strip_prefix(prefix).and_then(|f| f.strip_prefix('.')) else {
                continue;
            };
            match field {
                "location" => store.location = Some(PathBuf::from(v)),
                "password" => store.password = Some(v.to_owned()),
                "passwordPath" => store.password_path = Some(PathBuf::from(v)),
                "type" => {
                    store.store_type = Some(match v.to_ascii_uppercase().as_str() {
                        "PEM" => StoreType::Pem,
                        "PKCS12" => StoreType::Pkcs12,
                        "JKS" => {
                            return Err(TlsArgsError::Store {
                                key: location_key(prefix),
                                problem: StoreTypeError::Jks.to_string(),
                            })
                        }
                        other => {
                            return Err(TlsArgsError::Store {
                                key: location_key(prefix),
                                problem: format!("type {other:?}: expected PEM or PKCS12"),
                            })
                        }
                    })
                }
                _ => {}
            }
        }
    }
    Ok(props)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(file: &str, ca: Option<&str>) -> (tempfile::TempDir, TlsArgs) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.properties");
        std::fs::write(&path, file).unwrap();
        let a = TlsArgs {
            ca: ca.map(PathBuf::from),
            client_configuration: Some(path),
            ..TlsArgs::default()
        };
        (dir, a)
    }

    #[test]
    fn the_file_names_the_stores_and_flags_override_it() {
        let file = "# zkCli\nzookeeper.client.secure=true\n\
                    zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n\
                    zookeeper.ssl.keyStore.location=/k/alice.pem\n\
                    zookeeper.ssl.trustStore.location : /k/ca.pem\n";
        let (_d, a) = args(file, None);
        let tls = a.options().unwrap().unwrap();
        assert_eq!(tls.ca, vec![PathBuf::from("/k/ca.pem")]);
        assert_eq!(tls.cert, Some(PathBuf::from("/k/alice.pem")));
        assert_eq!(tls.key, None);
        let (_d, a) = args(file, Some("/flag/ca.pem"));
        assert_eq!(
            a.options().unwrap().unwrap().ca,
            vec![PathBuf::from("/flag/ca.pem")]
        );
        // Not secure, no flags: plain TCP.
        let (_d, a) = args("zookeeper.ssl.trustStore.location=/k/ca.pem\n", None);
        assert_eq!(a.options().unwrap(), None);
    }

    #[test]
    fn pkcs12_stores_take_their_passwords_and_jks_is_refused_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "trustpw\n").unwrap();
        let file = format!(
            "zookeeper.client.secure=true\nzookeeper.ssl.trustStore.location=/k/t.p12\n\
             zookeeper.ssl.trustStore.passwordPath={}\n\
             zookeeper.ssl.keyStore.location=/k/alice\nzookeeper.ssl.keyStore.type=PKCS12\n\
             zookeeper.ssl.keyStore.password=alicepw\n",
            pw.display()
        );
        let (_d, a) = args(&file, None);
        let tls = a.options().unwrap().unwrap();
        assert!(tls.ca.is_empty());
        assert_eq!(tls.ca_pkcs12.len(), 1);
        assert_eq!(tls.ca_pkcs12[0].path, PathBuf::from("/k/t.p12"));
        assert_eq!(tls.ca_pkcs12[0].password, "trustpw");
        let key_store = tls.client_pkcs12.unwrap();
        assert_eq!(key_store.path, PathBuf::from("/k/alice"));
        assert_eq!(key_store.password, "alicepw");
        // A PEM key store's password is its encrypted key's.
        let (_d, a) = args(
            "zookeeper.client.secure=true\nzookeeper.ssl.trustStore.location=/k/ca.pem\n\
             zookeeper.ssl.keyStore.location=/k/alice.pem\n\
             zookeeper.ssl.keyStore.password=alicepw\n",
            None,
        );
        let tls = a.options().unwrap().unwrap();
        assert_eq!(tls.cert, Some(PathBuf::from("/k/alice.pem")));
        assert_eq!(tls.key_password.as_deref(), Some("alicepw"));
        let (_d, a) = args(
            "zookeeper.client.secure=true\nzookeeper.ssl.trustStore.location=/k/t\n\
             zookeeper.ssl.trustStore.type=JKS\n",
            None,
        );
        let e = a.options().unwrap_err().to_string();
        assert!(
            e.contains("zookeeper.ssl.trustStore.location") && e.contains("JKS"),
            "{e}"
        );
        let (_d, a) = args("zookeeper.client.secure=true\n", None);
        assert!(matches!(a.options(), Err(TlsArgsError::NoTrustStore)));
        let (_d, a) = args("nonsense\n", None);
        assert!(matches!(
            a.options(),
            Err(TlsArgsError::Syntax { line: 1, .. })
        ));
    }
}
