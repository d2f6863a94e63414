//! The accept loop: one task per connection, `maxClientCnxns` per client IP; and what
//! answers the client port before it runs, while an ensemble member starts.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::tls::Port;
use super::Shared;
use super::{connection, fourlw};
use crate::config::ServerConfig;

/// A client's connection taken while the member started, for [`accept_loop`] to serve.
pub(crate) type Held = (TcpStream, SocketAddr);

/// Answers the client port while an ensemble member starts (it waits for its peers to
/// say where they stand, or opens its log), until `started`; then hands the listener
/// back for [`accept_loop`], with the clients' connections taken meanwhile. Four-letter
/// words are answered as by a member that serves nobody ([`fourlw::not_serving`]), as a
/// ZooKeeper server answers them while it looks for a leader, so an operator can tell a
/// member that waits from one that hangs. A client's connection (its first bytes are
/// looked at, not read) is held as the accept queue held it before: it is served once
/// the member runs (a session then waits for the quorum, as any does), or dropped after
/// the longest session timeout a client could ask for, so that a member that waits for
/// long holds no more than that time's worth of connections. A four-letter word still
/// being answered when `started` comes finishes on its own.
pub(crate) async fn while_starting(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    mut started: oneshot::Receiver<()>,
) -> (TcpListener, Vec<Held>) {
    let (go, going) = watch::channel(false);
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    tasks.spawn(not_serving(stream, addr, config.clone(), going.clone()));
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
    // Held connections come back at once; four-letter words finish on their own.
    let _ = go.send(true);
    let mut held = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(Some(h)) = r {
            held.push(h);
        }
    }
    (listener, held)
}

/// One connection to a member that serves nobody yet: a four-letter word's answer, or
/// a client's connection held until `go` (then returned) or for at most the longest
/// session timeout (then dropped). A connection that says nothing is held likewise.
async fn not_serving(
    mut stream: TcpStream,
    addr: SocketAddr,
    config: Arc<ServerConfig>,
    mut go: watch::Receiver<bool>,
) -> Option<Held> {
    let quiet = Duration::from_millis(config.max_session_timeout());
    let deadline = tokio::time::Instant::now() + quiet;
    let mut first = [0u8; 4];
    let seen = async {
        // peek returns what has arrived so far without taking it: wait for four bytes.
        loop {
            match stream.peek(&mut first).await {
                Ok(4) => return true,
                Ok(0) | Err(_) => return false,
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    tokio::select! {
        peeked = seen => {
            if !peeked {
                return None;
            }
        }
        _ = go.wait_for(|g| *g) => return Some((stream, addr)),
        () = tokio::time::sleep_until(deadline) => return None,
    }
    if let Some(word) = fourlw::detect(&first) {
        let mut taken = [0u8; 4];
        let _ = stream.read_exact(&mut taken).await;
        let text = fourlw::not_serving(word, &config);
        let _ = stream.write_all(text.as_bytes()).await;
        let _ = stream.shutdown().await;
        return None;
    }
    tokio::select! {
        _ = go.wait_for(|g| *g) => Some((stream, addr)),
        () = tokio::time::sleep_until(deadline) => None,
    }
}

/// Serves the clients of `listener`, and first those of `held` (connections taken
/// while the member started, see [`while_starting`]), until `shutdown`. `port` says
/// what each connection's task does about TLS (see [`Port`]).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    held: Vec<Held>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    port: Port,
) {
    let mut tasks = JoinSet::new();
    let serve = |(stream, addr): Held, shutdown: &watch::Receiver<bool>| {
        connection::serve(stream, addr, shared.clone(), shutdown.clone(), port.clone())
    };
    for h in held {
        tasks.spawn(serve(h, &shutdown));
    }
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
                    tasks.spawn(serve((stream, addr), &shutdown));
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
