//! The accept loop: one task per connection, `maxClientCnxns` per client IP; and what
//! answers the client port before it runs, while an ensemble member starts.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::Shared;
use super::{connection, fourlw};
use crate::config::ServerConfig;

/// Answers the client port while an ensemble member starts (it waits for its peers to
/// say where they stand, or opens its log), until `started`; then hands the listener
/// back for [`accept_loop`]. Four-letter words are answered as by a member that serves
/// nobody ([`fourlw::not_serving`]), as a ZooKeeper server answers them while it looks
/// for a leader, so an operator can tell a member that waits from one that hangs; any
/// other connection is closed as soon as its first four bytes show it is not a word,
/// so that its client tries another member rather than wait in the accept queue. A
/// connection still being answered when `started` comes finishes on its own.
pub(crate) async fn while_starting(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    mut started: oneshot::Receiver<()>,
) -> TcpListener {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    tasks.spawn(not_serving(stream, config.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut started => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.detach_all();
    listener
}

/// One connection to a member that serves nobody yet: a four-letter word's answer, or
/// nothing. A client that says nothing is dropped after the longest session timeout it
/// could ask for, as the accept loop's connections are.
async fn not_serving(mut stream: TcpStream, config: Arc<ServerConfig>) {
    let mut first = [0u8; 4];
    let quiet = Duration::from_millis(config.max_session_timeout());
    let Ok(Ok(_)) = tokio::time::timeout(quiet, stream.read_exact(&mut first)).await else {
        return;
    };
    if let Some(word) = fourlw::detect(&first) {
        let text = fourlw::not_serving(word, &config);
        let _ = stream.write_all(text.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    let limit = shared.config.max_client_cnxns as usize;
                    if limit > 0 && shared.stats.conns_from(addr.ip()) >= limit {
                        tracing::warn!(%addr, limit, "too many connections from this address");
                        shared.stats.connections_rejected.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                        continue;
                    }
                    tasks.spawn(connection::serve(stream, addr, shared.clone(), shutdown.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}
