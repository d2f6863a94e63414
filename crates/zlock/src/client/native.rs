//! zlock's native lock from the client's side: whether the server offers it, which way
//! the recipes take ([`LockPath`]), and the one-round-trip lock request with the
//! [`GrantWaiter`] of a queued node.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::oneshot;
use zlock_proto::records::{
    LockGrant, LockRequest, LockResponse, FEATURE_LOCK_DELAY, FEATURE_NATIVE_LOCK,
    LOCK_DELAY_SERVER_DEFAULT,
};
use zlock_proto::{ErrorCode, Request};

use super::{decode_reply, Client};
use crate::chroot::strip_chroot;
use crate::error::{Error, Result};
use crate::session::{GrantWait, OnReply};

/// Which way the lock recipes take (see [`Client::with_lock_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockPath {
    /// The native one-round-trip lock when the server offers it, else the standard
    /// recipe.
    #[default]
    Auto,
    /// Always the standard ZooKeeper recipe (create, getChildren, watch).
    Recipe,
    /// Always the native lock; fails with `Unimplemented` on a server without it.
    Native,
}

/// What [`Client::lock_native`] answers.
#[derive(Debug)]
pub enum NativeLock {
    /// The contender's node holds now.
    Granted { node: String, czxid: i64 },
    /// The node is queued; `grant` resolves when the server grants it.
    Queued {
        node: String,
        czxid: i64,
        grant: GrantWaiter,
    },
    /// A try (`LockRequest` flag TRY) found the lock busy: nothing was created.
    Busy,
}

/// Resolves when the server pushes the grant for a queued native lock request:
/// `Ok(grant)` (node path relative to the chroot, and its czxid), or the session's
/// fate ([`Error::SessionExpired`], [`Error::Closed`]). Cancellation safe; dropping it
/// does not remove the node (delete it).
#[derive(Debug)]
pub struct GrantWaiter {
    rx: oneshot::Receiver<Result<LockGrant>>,
    chroot: Arc<str>,
    gone: Error,
}

impl std::future::Future for GrantWaiter {
    type Output = Result<LockGrant>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.rx).poll(cx).map(|r| {
            let mut g = r.map_err(|_| this.gone.clone())??;
            g.node = strip_chroot(&this.chroot, &g.node);
            Ok(g)
        })
    }
}

impl Client {
    /// Does the server take zlock's native lock operation? (Learned in the handshake;
    /// false for Apache ZooKeeper.)
    pub fn server_has_native_locks(&self) -> bool {
        self.features.load(Ordering::Relaxed) & FEATURE_NATIVE_LOCK != 0
    }

    /// This handle with the lock recipes set to take `path` (default [`LockPath::Auto`]).
    /// The session is shared with the original handle.
    pub fn with_lock_path(mut self, path: LockPath) -> Client {
        self.lock_path = path;
        self
    }

    /// Should the lock recipes use the native lock on this handle?
    pub fn uses_native_locks(&self) -> bool {
        match self.lock_path {
            LockPath::Auto => self.server_has_native_locks(),
            LockPath::Recipe => false,
            LockPath::Native => true,
        }
    }

    /// zlock's native lock (one round trip): creates the ephemeral sequential node
    /// `req.path/req.prefixNNNNNNNNNN` (missing parents as containers) and answers
    /// whether it holds; a queued node's [`GrantWaiter`] resolves when the server grants
    /// it, in the commit that removed the last node before it. Release is an ordinary
    /// [`Client::delete`] of the node. After a reconnect the client re-registers queued
    /// waiters by itself. On a lost reply, call again with the RESUME flag: the server
    /// finds the node by its prefix instead of queueing a second one.
    ///
    /// # Errors
    /// `Server(Unimplemented)` without sending anything if the server does not offer
    /// the native lock (Apache ZooKeeper would close the connection), or `req` sets
    /// `lock_delay_ms` and the server does not offer lock-delay (a zlock server older
    /// than it would ignore the field); `Server(BadArguments)` for a lock-delay over
    /// [`MAX_LOCK_DELAY_MS`](zlock_proto::records::MAX_LOCK_DELAY_MS); otherwise the
    /// errors of a create.
    pub async fn lock_native(&self, req: LockRequest) -> Result<NativeLock> {
        let features = self.features.load(Ordering::Relaxed);
        let delay_asked = req.lock_delay_ms != LOCK_DELAY_SERVER_DEFAULT;
        if features & FEATURE_NATIVE_LOCK == 0
            || (delay_asked && features & FEATURE_LOCK_DELAY == 0)
        {
            return Err(Error::Server(ErrorCode::Unimplemented));
        }
        let (gtx, grx) = oneshot::channel();
        let (h, body) = self
            .submit_then(&Request::Lock(req), |sent| match sent {
                // Kept to re-send the waiter after a reconnect.
                Request::Lock(req) => OnReply::Grant(GrantWait {
                    sink: gtx,
                    req: req.clone(),
                }),
                _ => OnReply::Nothing,
            })
            .await?;
        let r: LockResponse = decode_reply(&h, &body)?;
        let node = strip_chroot(&self.chroot, &r.node);
        Ok(if r.granted {
            NativeLock::Granted {
                node,
                czxid: r.czxid,
            }
        } else if r.node.is_empty() {
            NativeLock::Busy
        } else {
            NativeLock::Queued {
                node,
                czxid: r.czxid,
                grant: GrantWaiter {
                    rx: grx,
                    chroot: self.chroot.clone(),
                    gone: self.gone(),
                },
            }
        })
    }
}
