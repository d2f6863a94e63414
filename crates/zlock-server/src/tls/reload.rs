//! `client.certReload=true` (ZooKeeper 3.8.1's key): the client port's key and trust
//! stores are read again when their files change, without a restart. New handshakes
//! use the new certificates; connections already up keep theirs (and their sessions).
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
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// How often the watcher reads the store files.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// The client port's TLS acceptor, which the watcher may replace while it serves.
#[derive(Clone)]
pub(crate) struct Acceptor(Arc<RwLock<TlsAcceptor>>);

impl Acceptor {
    pub fn new(config: Arc<rustls::ServerConfig>) -> Acceptor {
        Acceptor(Arc::new(RwLock::new(TlsAcceptor::from(config))))
    }

    /// The acceptor for a handshake starting now.
    pub fn current(&self) -> TlsAcceptor {
        match self.0.read() {
            Ok(a) => a.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn replace(&self, config: Arc<rustls::ServerConfig>) {
        let next = TlsAcceptor::from(config);
        match self.0.write() {
            Ok(mut a) => *a = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
    }
}

/// The files a client port's TLS is built from.
fn watched(cfg: &TlsConfig) -> Vec<PathBuf> {
    [&cfg.key_store, &cfg.trust_store]
        .into_iter()
        .flat_map(|s| [s.location.clone(), s.password_path.clone()])
        .flatten()
        .collect()
}

/// The watched files' bytes (a missing or unreadable file reads as none).
fn read_all(files: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    files.iter().map(|f| std::fs::read(f).ok()).collect()
}

/// Rebuilds `acceptor` from `cfg`'s stores each time their files change, until
/// `stopping` turns true. The caller built the first one from the same files.
pub(crate) async fn watch_stores(
    acceptor: Acceptor,
    cfg: TlsConfig,
    mut stopping: watch::Receiver<bool>,
) {
    let files = watched(&cfg);
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
            let cfg = cfg.clone();
            tokio::task::spawn_blocking(move || super::server_config(&cfg)).await
        };
        match built {
            Ok(Ok(config)) => {
                acceptor.replace(config);
                tracing::info!(files = ?files, "client.certReload: the client port's certificates were read again; new connections use them");
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "client.certReload: the changed stores do not build; the certificates in use stay");
            }
            Err(_) => return,
        }
    }
}
