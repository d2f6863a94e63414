//! Reconnection: the hosts round-robin with a short backoff (20 ms doubling to 1 s),
//! each asked to resume the session (id, password, last zxid seen), until one does,
//! the server says it expired, or the session timeout passes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tokio::time::Instant;

use super::handshake::handshake;
use super::{Actor, Stream};
use crate::error::Error;

impl Actor {
    /// A connection that resumed the session; None = lost (expired, or no host
    /// answered within the session timeout, after which the server expires it).
    pub(super) async fn reconnect(&mut self) -> Option<(Stream, BytesMut)> {
        let deadline = Instant::now() + Duration::from_millis(self.timeout_ms.max(1) as u64);
        let mut backoff = Duration::from_millis(20);
        // One slow host must not use up the whole session timeout.
        let attempt_limit = Duration::from_millis(
            (self.timeout_ms as u64 / self.hosts.len().max(1) as u64).max(100),
        );
        loop {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    session = self.session_id,
                    "no host resumed the session in time"
                );
                return None;
            }
            let host = self.hosts[self.next_host % self.hosts.len()].clone();
            self.next_host = self.next_host.wrapping_add(1);
            let attempt = tokio::time::timeout(
                attempt_limit.min(deadline - now),
                handshake(
                    &host,
                    self.tls.as_ref(),
                    self.timeout_ms,
                    self.session_id,
                    &self.passwd,
                    self.last_zxid,
                ),
            )
            .await;
            match attempt {
                Ok(Ok((s, b, est))) => {
                    if est.session_id != self.session_id {
                        tracing::warn!("server answered with another session: treating as expired");
                        return None;
                    }
                    self.timeout_ms = est.timeout_ms;
                    self.features.store(est.features, Ordering::Relaxed);
                    return Some((s, b));
                }
                Ok(Err(Error::SessionExpired)) => {
                    tracing::warn!(session = self.session_id, host, "session expired");
                    return None;
                }
                Ok(Err(e)) => tracing::debug!(host, "reconnect failed: {e}"),
                Err(_) => tracing::debug!(host, "reconnect timed out"),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}
