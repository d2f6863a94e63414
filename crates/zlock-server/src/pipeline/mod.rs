//! The stages every request moves through: net → commit (+ apply) → net.
//!
//! ```text
//!  connection tasks ──Item──▶ commit thread: append, fsync, apply ──frames──▶ sockets
//!   (tokio; reads of    ▲                    │ (Core, under its lock)
//!    idle sessions      └── Expire / DeleteExpired ◀── ticker thread (liveness)
//!    apply in place)
//! ```
//!
//! - The commit thread turns each write into a [`Txn`](zlock_core::Txn), gives it the
//!   next log index (= its zxid), appends every item queued while the previous fsync ran
//!   and fsyncs once (group commit). Then it applies the batch to the [`apply::Core`]
//!   (state, sessions, watches) under the core's lock and writes the replies, watch
//!   events and lock grants straight to the sockets ([`ConnOut`](crate::net::out::ConnOut)): no thread hand-off
//!   between the fsync and the wire. Nothing is applied, so nothing is visible, before
//!   its fsync returned.
//! - Reads ride along in a batch when their session has something of its own in the
//!   commit stage, so a read never overtakes an earlier write of its session and every
//!   session's replies leave in request order. A read (or ping) of a session with nothing
//!   in the commit stage is answered at once by the connection task itself, under the
//!   core's lock: it cannot overtake anything of its session, and it does not wait for
//!   another session's fsync. Each connection counts its items inside the commit stage
//!   ([`InFlight`]); the commit thread counts them down once their replies are queued.
//! - A ticker thread checks session liveness and proposes expiries and container
//!   removals through the commit stage, like any other write.
//!
//! Why one thread for fsync and apply: on the small machines zlock runs on, a wake-up
//! between threads costs about as much as applying a whole batch, and every acknowledged
//! write already waits for its fsync; applying right after it takes two thread hand-offs
//! out of every write's path (measured: one fewer context switch pair per request).

pub(crate) mod apply;
pub(crate) mod commit;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use zlock_core::{SessionId, Txn};
use zlock_proto::records::Id;
use zlock_proto::Request;

/// A slot of a connection's outstanding-request budget; freed once the reply is written.
pub(crate) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// A connection as the pipeline sees it: where its frames go.
pub(crate) type ConnHandle = Arc<crate::net::out::ConnOut>;

/// The outcome of a handshake, for the connection task.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handshake {
    pub session_id: SessionId,
    pub timeout_ms: i32,
}

/// Four-letter-word and admin queries, answered from the core in commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminQuery {
    Srvr,
    Stat,
    Mntr,
    Cons,
    Wchs,
    Wchc,
    Wchp,
    Dump,
    Crst,
    Srst,
}

/// One unit of work entering the pipeline.
#[derive(Debug)]
pub(crate) enum Item {
    /// A new session's handshake.
    Connect {
        conn: ConnHandle,
        timeout_ms: i32,
        passwd: Vec<u8>,
        read_only: Option<bool>,
        /// zlock feature bits the client offered (see `ConnectRequest::features`).
        features: Option<i32>,
        done: oneshot::Sender<Option<Handshake>>,
    },
    /// A reconnect to an existing session.
    Resume {
        conn: ConnHandle,
        session_id: SessionId,
        last_zxid_seen: i64,
        passwd: Vec<u8>,
        read_only: Option<bool>,
        features: Option<i32>,
        done: oneshot::Sender<Option<Handshake>>,
    },
    /// A request from an established session.
    Request {
        session: SessionId,
        conn_id: u64,
        xid: i32,
        auth: Arc<Vec<Id>>,
        req: Request,
        received: Instant,
        inflight: InFlight,
        permit: Permit,
    },
    /// A reply built by the connection itself (auth, unimplemented ops), kept in order.
    Reply {
        session: SessionId,
        conn_id: u64,
        frame: Vec<u8>,
        /// Close the connection after this reply (a failed auth).
        close: bool,
        inflight: InFlight,
        permit: Permit,
    },
    /// The connection of a session went away (the session lives on until it expires).
    Disconnected { session: SessionId, conn_id: u64 },
    /// The ticker found a session silent past its timeout.
    Expire { session: SessionId },
    /// The ticker found containers or TTL nodes that may be removable.
    DeleteExpired { paths: Vec<String> },
    /// A four-letter word or admin query.
    Admin {
        query: AdminQuery,
        done: oneshot::Sender<String>,
    },
    /// A snapshot at this index was written: older log segments may go.
    Purge { through: u64 },
    /// Flush and stop.
    Shutdown,
}

/// A connection's count of its items between entering the commit stage and their
/// replies being queued.
pub(crate) type InFlight = Arc<std::sync::atomic::AtomicUsize>;

/// An item after the commit stage: with its Txn if it was a write.
pub(crate) struct Committed {
    pub item: Item,
    pub txn: Option<(u64, Txn)>,
}
