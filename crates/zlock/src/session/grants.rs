//! Grant waiters: native lock requests the server queued, waiting for the grant it
//! pushes (`XID_LOCK_GRANT`). Not watches: the server keeps a waiter per connection, so
//! after a reconnect each one is re-sent as its request with RESUME, which finds the
//! node and answers granted, or queued (waiting again).

use std::collections::HashMap;

use tokio::sync::oneshot;
use zlock_proto::records::{lock_flags, LockGrant, LockRequest, LockResponse, ReplyHeader};
use zlock_proto::{ErrorCode, OpCode, Reader, Record};

use super::connection::{write_request, Xids};
use super::handshake::perr;
use super::{OnReply, Pending};
use crate::error::{Error, Result};

/// A native lock request and where its grant goes.
pub(crate) struct GrantWait {
    pub sink: oneshot::Sender<Result<LockGrant>>,
    /// The request as sent (server paths), to re-send after a reconnect.
    pub req: LockRequest,
}

/// The queued native lock requests of a session, by node (server path).
pub(super) struct Grants {
    waiting: HashMap<String, GrantWait>,
    /// `waiting` size at which given-up waits are next pruned.
    prune_at: usize,
}

/// Waiters re-sent on the current connection, by xid: the node each waits on. If the
/// connection breaks before they are answered they wait on (see [`Grants::restore`]).
pub(super) type Resent = HashMap<i32, String>;

impl Grants {
    pub(super) fn new() -> Grants {
        Grants {
            waiting: HashMap::new(),
            prune_at: 64,
        }
    }

    /// The reply to a lock request: a queued waiter waits for its grant (or, for a
    /// re-sent request after a reconnect, is told it holds now).
    pub(super) fn answered(&mut self, h: &ReplyHeader, body: &[u8], w: GrantWait) {
        if h.err != 0 {
            let _ = w.sink.send(Err(Error::from_code(h.err)));
            return;
        }
        match LockResponse::decode(&mut Reader::new(body)) {
            Ok(r) if r.granted => {
                let _ = w.sink.send(Ok(LockGrant {
                    node: r.node,
                    czxid: r.czxid,
                }));
            }
            Ok(r) if !r.node.is_empty() => {
                // Waits given up (their GrantWaiter dropped) are pruned now and then,
                // not on every insert: a session may queue thousands of nodes.
                if self.waiting.len() >= self.prune_at {
                    self.waiting.retain(|_, w| !w.sink.is_closed());
                    self.prune_at = (2 * self.waiting.len()).max(64);
                }
                self.waiting.insert(r.node, w);
            }
            Ok(_) => {
                let _ = w.sink.send(Err(Error::Server(ErrorCode::NoNode)));
            }
            Err(e) => {
                let _ = w.sink.send(Err(perr(e)));
            }
        }
    }

    /// A grant the server pushed.
    pub(super) fn granted(&mut self, g: LockGrant) {
        if let Some(w) = self.waiting.remove(&g.node) {
            let _ = w.sink.send(Ok(g));
        }
    }

    /// Re-sends every waiter still listened to with RESUME on a new connection: the
    /// grant may have been pushed while we were away. Their replies come back through
    /// [`Grants::answered`].
    pub(super) fn resend(
        &mut self,
        out: &mut Vec<u8>,
        xids: &mut Xids,
        pending: &mut Pending,
    ) -> Resent {
        let mut resent = Resent::new();
        self.waiting.retain(|_, w| !w.sink.is_closed());
        for (node, mut w) in self.waiting.drain() {
            w.req.flags |= lock_flags::RESUME;
            let xid = xids.next();
            write_request(out, xid, OpCode::Lock, |o| w.req.encode(o));
            resent.insert(xid, node);
            let (done, _) = oneshot::channel();
            pending.push_back((xid, done, OnReply::Grant(w)));
        }
        resent
    }

    /// A re-sent waiter whose connection broke before its answer: it waits on, to be
    /// re-sent on the next connection.
    pub(super) fn restore(&mut self, node: String, w: GrantWait) {
        self.waiting.insert(node, w);
    }

    /// Ends every waiter with `err`.
    pub(super) fn fail_all(&mut self, err: &Error) {
        for (_, w) in self.waiting.drain() {
            let _ = w.sink.send(Err(err.clone()));
        }
    }
}
