//! The stages every request moves through: net → commit → apply → net.
//!
//! ```text
//!  connection tasks ──Item──▶ commit thread ──Batch──▶ apply thread ──Out──▶ connection
//!        (tokio)              (WAL, fsync)              (State, watches)       writers
//!                ▲                                            │
//!                └──────── Expire / DeleteExpired ◀───────────┘
//! ```
//!
//! - The commit thread turns each write into a [`Txn`](zlock_core::Txn), gives it the
//!   next log index (= its zxid), appends every item queued while the previous fsync ran
//!   and fsyncs once (group commit). Reads ride along in the same batch, so a read never
//!   overtakes an earlier write of its session and every session's replies leave in
//!   request order.
//! - A read (or ping) of a session with nothing of its own in the commit stage skips that
//!   stage and goes straight to the apply thread: it cannot overtake anything of its
//!   session, and it does not wait for another session's fsync. Each connection counts
//!   its items inside the commit stage ([`InFlight`]); the apply thread counts them down
//!   once their replies are queued.
//! - The apply thread owns the [`State`](zlock_core::State). It applies a batch only
//!   after its fsync, so no reply, watch event or other effect of a change is visible
//!   before the change is durable. It also tracks session liveness and proposes
//!   expiries.

pub(crate) mod apply;
pub(crate) mod commit;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use zlock_core::{SessionId, Txn};
use zlock_proto::records::Id;
use zlock_proto::Request;

/// A slot of a connection's outstanding-request budget; freed once the reply is written.
pub(crate) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// What a connection's writer task receives.
#[derive(Debug)]
pub(crate) enum Out {
    /// Encoded frames (length prefix included), written in order.
    Frame(Vec<u8>),
    /// A reply frame and the budget slot its request held, released once written.
    Reply(Vec<u8>, Permit),
    /// Flush and close the connection.
    Close,
}

/// A connection as the pipeline sees it: where to send its frames.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    pub id: u64,
    pub tx: mpsc::UnboundedSender<Out>,
}

/// The outcome of a handshake, for the connection task.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handshake {
    pub session_id: SessionId,
    pub timeout_ms: i32,
}

/// Four-letter-word and admin queries answered by the apply thread.
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
    /// The apply thread found a session silent past its timeout.
    Expire { session: SessionId },
    /// The apply thread found containers or TTL nodes that may be removable.
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

/// A connection's count of its items between entering the commit stage and leaving the
/// apply thread.
pub(crate) type InFlight = Arc<std::sync::atomic::AtomicUsize>;

/// What the apply thread receives.
pub(crate) enum ApplyMsg {
    /// A batch the commit stage has made durable.
    Batch(Vec<Committed>),
    /// A read that needs no ordering behind the commit stage.
    Direct(Item),
}

/// An item after the commit stage: with its Txn if it was a write.
pub(crate) struct Committed {
    pub item: Item,
    pub txn: Option<(u64, Txn)>,
}
