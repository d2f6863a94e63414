//! Certificates read again while the server runs: `client.certReload=true` (ZooKeeper
//! 3.8.1's key) for the client port's key and trust stores, `sslQuorumReloadCertFiles
//! =true` for the members' (`ssl.quorum.*`). New handshakes use the new certificates;
//! connections already up keep theirs (and their sessions, or their links).
//!
//! How a change is seen: every [`POLL`] the watcher reads the store files (and their
//! password files) and compares their bytes with the last ones it built from. ZooKeeper
//! watches the files' directories for change events instead; reading a few small
//! files once a second is cheaper to get right (a certificate renewed by a rename, by
//! a rewrite in place, or through a symlink all show as new bytes) and costs nothing
//! that matters.
//!
//! A change that does not build (a half-written file, a key that does not match its
//! certificate, a wrong password) is logged once at warn and the certificates in use
//! stay; the next change is tried again. A file written in two steps may be caught
//! between them: the poll after the second step builds it.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::TlsError;
use crate::config::{StoreConfig, TlsConfig};

/// How often the watcher reads the store files.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// A value a watcher may replace while others use it (a rustls acceptor or connector):
/// each use takes the one in place at that moment.
#[derive(Clone)]
pub(crate) struct Swap<T>(Arc<RwLock<T>>);

impl<T: Clone> Swap<T> {
    pub fn new(value: T) -> Swap<T> {
        Swap(Arc::new(RwLock::new(value)))
    }

    /// The value in place now.
    pub fn current(&self) -> T {
        match self.0.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn replace(&self, value: T) {
        match self.0.write() {
            Ok(mut v) => *v = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
    }
}

/// A TLS port's acceptor, which a watcher may replace while it serves.
pub(crate) type Acceptor = Swap<TlsAcceptor>;

/// A dialling side's connector (a member's links), which a watcher may replace.
pub(crate) type Connector = Swap<TlsConnector>;

/// An acceptor for `config`.
pub(crate) fn acceptor(config: Arc<rustls::ServerConfig>) -> Acceptor {
    Swap::new(TlsAcceptor::from(config))
}

/// The files `stores` are built from: their locations and password files.
pub(crate) fn store_files(stores: &[&StoreConfig]) -> Vec<PathBuf> {
    stores
        .iter()
        .flat_map(|s| [s.location.clone(), s.password_path.clone()])
        .flatten()
        .collect()
}

/// The client port's store files (`client.certReload`).
pub(crate) fn client_files(cfg: &TlsConfig) -> Vec<PathBuf> {
    store_files(&[&cfg.key_store, &cfg.trust_store])
}

/// The watched files' bytes (a missing or unreadable file reads as none).
fn read_all(files: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    files.iter().map(|f| std::fs::read(f).ok()).collect()
}

/// Calls `rebuild` each time `files` change, until `stopping` turns true; `key` (the
/// switch that asked for it) names the watcher in the log. The caller built the first
/// configuration from the same files.
pub(crate) async fn watch_files<F>(
    key: &'static str,
    files: Vec<PathBuf>,
    rebuild: F,
    mut stopping: watch::Receiver<bool>,
) where
    F: Fn() -> Result<(), TlsError> + Send + Sync + 'static,
{
    let rebuild = Arc::new(rebuild);
    let read = {
        let files = files.clone();
        move || read_all(&files)
    };
    let Ok(mut seen) = tokio::task::spawn_blocking(read.clone()).await else {
        return;
    };
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
        let Ok(now) = tokio::task::spawn_blocking(read.clone()).await else {
            return;
        };
        if now == seen {
            continue;
        }
        seen = now;
        let built = {
            let rebuild = rebuild.clone();
            tokio::task::spawn_blocking(move || rebuild()).await
        };
        match built {
            Ok(Ok(())) => {
                tracing::info!(key, files = ?files, "certificates read again; new connections use them");
            }
            Ok(Err(e)) => {
                tracing::warn!(key, error = %e, "the changed stores do not build; the certificates in use stay");
            }
            Err(_) => return,
        }
    }
}

/// `client.certReload`: rebuilds the client port's `acceptor` from `cfg`'s stores
/// each time their files change, until `stopping` turns true.
pub(crate) async fn watch_stores(
    acceptor: Acceptor,
    cfg: TlsConfig,
    stopping: watch::Receiver<bool>,
) {
    let files = client_files(&cfg);
    let rebuild = move || {
        acceptor.replace(TlsAcceptor::from(super::server_config(&cfg)?));
        Ok(())
    };
    watch_files("client.certReload", files, rebuild, stopping).await;
}
