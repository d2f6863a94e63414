//! One guard for every lock recipe: proof of holding, its fencing token, the
//! "may be lost" future, and the release, awaited or on drop (counted once on the
//! recipe's metrics either way).

use std::future::Future;
use std::time::Duration;

use super::lost::{default_window, session_in_doubt};
use super::metrics::LockMetrics;
use crate::{Client, ConnectionState, Result};

/// A node a guard holds: the session holding it, its path and its czxid.
pub struct HeldNode {
    pub(crate) client: Client,
    pub(crate) path: String,
    pub(crate) czxid: i64,
}

/// What a guard holds: a lock node, and how it is given back. Implemented in this
/// crate only.
pub trait Held: Send + Sync + 'static {
    #[doc(hidden)]
    fn held_node(&self) -> &HeldNode;
    /// Gives the hold back (awaited); called at most once.
    #[doc(hidden)]
    fn release(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// Gives the hold back without waiting: its guard was dropped.
    #[doc(hidden)]
    fn release_on_drop(&mut self);
}

/// Proof of holding a lock (or a semaphore's lease). Released by [`Guard::release`] or
/// on drop, through a spawned task; prefer `release` to know when the lock is free.
#[must_use = "dropping the guard releases the lock"]
pub struct Guard<H: Held> {
    pub(crate) held: H,
    /// Where the release is counted.
    metrics: Option<LockMetrics>,
    released: bool,
}

impl<H: Held> std::fmt::Debug for Guard<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("node", &self.node())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

impl<H: Held> Guard<H> {
    pub(crate) fn new(held: H, metrics: Option<LockMetrics>) -> Guard<H> {
        Guard {
            held,
            metrics,
            released: false,
        }
    }

    /// The lock node's creation zxid: strictly increasing across the holders of an
    /// exclusive lock, so a protected resource can refuse a stale holder. Reentrant
    /// guards of one hold share it.
    pub fn fencing_token(&self) -> i64 {
        self.held.held_node().czxid
    }

    /// The path of the node held.
    pub fn node(&self) -> &str {
        &self.held.held_node().path
    }

    /// Resolves when the hold may be lost: the connection has stayed Suspended for
    /// the safe window (a third of the session timeout), or the session is Lost or
    /// the client Closed. Returns that state. A holder should stop its critical
    /// section when it fires. Cancellation safe; independent of the guard's lifetime.
    pub fn lost(&self) -> impl Future<Output = ConnectionState> + Send + 'static {
        let client = self.held.held_node().client.clone();
        let window = default_window(&client);
        session_in_doubt(client, window)
    }

    /// As [`Guard::lost`] with a chosen window (`Duration::ZERO`: fire as soon as the
    /// connection is suspended, the most conservative choice).
    pub fn lost_after(
        &self,
        window: Duration,
    ) -> impl Future<Output = ConnectionState> + Send + 'static {
        session_in_doubt(self.held.held_node().client.clone(), window)
    }

    /// Releases this guard: its node is deleted (and awaited), for a reentrant lock
    /// when this was the last guard of the hold.
    ///
    /// # Errors
    /// The delete's error other than `NoNode` (e.g. [`crate::Error::SessionExpired`],
    /// in which case the node is gone with the session anyway).
    pub async fn release(mut self) -> Result<()> {
        self.settle();
        self.held.release().await
    }

    /// Counts the release from here on on `metrics` (a semaphore hands its leases
    /// out only once it has them all).
    pub(crate) fn count_on(&mut self, metrics: Option<LockMetrics>) {
        self.metrics = metrics;
    }

    /// Marks the guard released (counted once): the caller gives the hold back.
    pub(crate) fn settle(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            if let Some(m) = &self.metrics {
                m.released();
            }
        }
    }
}

impl<H: Held> Drop for Guard<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.settle();
        self.held.release_on_drop();
    }
}
