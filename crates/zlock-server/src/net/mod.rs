//! The network edge: the accept loop, one task per connection (reading requests),
//! four-letter words, and the TLS handshake (`tls`). What a connection sends goes
//! through [`crate::conn`], below the pipeline.

pub(crate) mod connection;
pub(crate) mod fourlw;
pub(crate) mod listener;
pub(crate) mod tls;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::pipeline::core::Core;
use crate::pipeline::Item;
use crate::stats::Stats;

pub(crate) use crate::conn::{ConnHandle, InFlight, Permit};

/// What every connection task shares.
pub(crate) struct Shared {
    pub config: Arc<ServerConfig>,
    /// Bounded (`globalOutstandingLimit`): a connection that finds it full waits,
    /// so memory stays bounded however many connections pipeline requests.
    pub commit: mpsc::Sender<Item>,
    /// The core, for reads that need not queue behind the commit stage.
    pub core: Arc<std::sync::Mutex<Core>>,
    pub stats: Arc<Stats>,
    pub next_conn_id: AtomicU64,
    /// In an ensemble: waits until this member has caught up with the leader.
    pub barrier: Option<Arc<crate::commit::raft::Barrier>>,
    /// In an ensemble: carries `reconfig` requests to the leader.
    pub reconfig: Option<Arc<crate::commit::raft::reconfig::Reconfigurer>>,
    /// In an ensemble: whether this member is in touch with a quorum.
    pub quorum: Option<tokio::sync::watch::Receiver<crate::ensemble::Touch>>,
}
