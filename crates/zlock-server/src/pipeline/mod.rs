//! The stages every request moves through on this member: net → sequencer → commit →
//! core (state machine + router) → net.
//!
//! ```text
//!  connection tasks ──Item──▶ sequencer thread ──Txns──▶ commit stage (WAL: append, fsync)
//!   (tokio; reads of            │ registers requests            │ committed entries, in order
//!    idle sessions are          ▼ with the router               ▼
//!    answered in place)       core: state.apply(index, txn) → router: replies, watch events,
//!                                   lock grants ──frames──▶ sockets
//!                              ticker thread: session tracker → Expire / DeleteExpired Items
//! ```
//!
//! - The sequencer turns each write into a [`Txn`](zlock_core::Txn) with everything fixed
//!   in it (origin, time, passwords) and proposes the batch to the
//!   [`Commit`](crate::commit::Commit) stage. The Txn carries no local context: the
//!   waiting request is registered with the [`router::Router`], which matches the applied
//!   result to it by origin (member, session, xid).
//! - Committed entries come back in log order to the core's
//!   [`Apply`](crate::commit::Apply), which applies them to the state and lets the router
//!   answer. Nothing is applied, so nothing is visible, before it is durable.
//! - Reads never enter the log. A read of a session with nothing in the commit stage is
//!   answered at once by the connection task itself, under the core's lock: it cannot
//!   overtake anything of its session, and it does not wait for another session's fsync.
//!   A read that follows a write of its session is queued by the router behind that
//!   write and answered right after it. Each connection counts its items inside the
//!   commit stage ([`InFlight`](crate::conn::InFlight)).
//! - Either way a read holds the lock for a bounded walk: a long one (getAllChildrenNumber
//!   of a big subtree) is served there on an O(1) copy of the tree and finished by the
//!   [`long_read`] thread, its reply's place on the connection held meanwhile.
//! - A ticker thread asks the session tracker which sessions are past their timeout and
//!   proposes their expiries, and container removals, like any other write.

pub(crate) mod core;
pub(crate) mod long_read;
pub(crate) mod router;
pub(crate) mod sequencer;
pub(crate) mod ticker;

use std::sync::Arc;
use std::time::Instant;

use crate::conn::{ConnHandle, InFlight, Permit};

use tokio::sync::oneshot;
use zlock_core::SessionId;
use zlock_proto::records::{Acl, Id};
use zlock_proto::Request;

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

/// Where a restore's outcome goes: the restored state's zxid, or why not.
pub(crate) type RestoreDone = oneshot::Sender<Result<i64, String>>;

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
        asker: Asker,
        auth: Arc<Vec<Id>>,
        req: Request,
    },
    /// A reply built by the connection itself (auth, unimplemented ops), kept in order.
    Reply {
        session: SessionId,
        asker: Asker,
        frame: Vec<u8>,
        /// Close the connection after this reply (a failed auth).
        close: bool,
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
    /// An image of the applied state, for a backup (`crate::admin::snapshot`): O(1)
    /// under the core's lock, in commit order.
    Image {
        done: oneshot::Sender<zlock_core::snapshot::Image>,
    },
    /// A backup's prepared state to serve instead of the current one (the AdminServer's
    /// `restore`, single node only): a batch ends with it, and the sequencer swaps the
    /// state once everything before it is applied (see `Core::restore`). The answer is
    /// the restored state's zxid, or why not.
    Restore {
        state: Box<zlock_core::State>,
        done: RestoreDone,
    },
    /// The ACL of a node, as applied (None: no such node), for the AdminServer's
    /// authorization of a command (`crate::admin::auth`), read in commit order.
    Acl {
        path: String,
        done: oneshot::Sender<Option<Arc<Vec<Acl>>>>,
    },
    /// An AdminServer command answered from the core (see `crate::admin::json`).
    AdminJson {
        query: crate::admin::json::Query,
        done: oneshot::Sender<crate::admin::json::Fields>,
    },
    /// A metrics scrape: the applied state's numbers (see `crate::metrics`).
    Scrape { done: oneshot::Sender<Box<Scrape>> },
    /// A snapshot at this index was written: older log segments may go.
    Purge { through: u64 },
    /// In an ensemble: this member lost touch with its quorum. Every client connection
    /// is closed, and what this batch sequenced before it is not proposed: the clients
    /// move to another member, and no write of theirs may still be on its way from
    /// this one when they write again there.
    OutOfTouch,
    /// From the commit stage: it could not tell what became of batches it was handed
    /// ([`CommitError::Unavailable`](crate::commit::CommitError)), which is handled as
    /// [`Item::OutOfTouch`]; or it failed, and the server stops.
    Trouble(crate::commit::CommitError),
    /// Flush and stop.
    Shutdown,
}

/// Who asked, on which connection, and what answering frees: it travels with a request
/// until its reply is queued.
#[derive(Debug)]
pub(crate) struct Asker {
    pub conn_id: u64,
    pub xid: i32,
    pub received: Instant,
    /// The request's slot of its connection's budget, freed once the reply is written.
    pub permit: Permit,
    /// Its connection's count of items in the commit stage (counted down once the reply
    /// of an item that went through it is queued).
    pub inflight: InFlight,
}

/// What a scrape reads from the core, copied under its lock (see `Item::Scrape`).
#[derive(Debug)]
pub(crate) struct Scrape {
    pub latency: crate::stats::Latency,
    pub znode_count: usize,
    pub watch_count: usize,
    pub ephemerals_count: usize,
    pub global_sessions: usize,
    /// An O(1) copy, for `approximate_data_size` off the lock.
    pub nodes: zlock_core::tree::Nodes,
    /// Requests waiting for their commit (or queued behind their session's writes).
    pub waiting: usize,
    pub lock_waiters: usize,
    pub lock_paths: usize,
    pub lock_delays: usize,
    pub lock_holders: usize,
    pub lock_longest_wait_ms: i64,
    pub ensemble: Option<crate::commit::raft::RaftFacts>,
    /// Since when this member leads; `None` unless it is an ensemble's leader.
    pub led_since: Option<std::time::Instant>,
}

/// How often the ticker looks at session liveness and containers, and an ensemble
/// member reports its sessions' activity to the leader.
pub(crate) const TICK: std::time::Duration = std::time::Duration::from_millis(100);
