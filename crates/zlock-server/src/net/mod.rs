//! The network edge: the accept loop, one task per connection, four-letter words, each
//! connection's outgoing queue and the frames written into it, and TLS on the secure
//! client port (`tls`).

pub(crate) mod connection;
pub(crate) mod fourlw;
pub(crate) mod frames;
pub(crate) mod listener;
pub(crate) mod out;
pub(crate) mod tls;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::pipeline::core::Core;
use crate::pipeline::Item;
use crate::stats::Stats;

/// A slot of a connection's outstanding-request budget; freed once the reply is written.
pub(crate) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// A connection as the rest of the server sees it: where its frames go.
pub(crate) type ConnHandle = Arc<out::ConnOut>;

/// A connection's count of its items between entering the commit stage and their
/// replies being queued.
pub(crate) type InFlight = Arc<std::sync::atomic::AtomicUsize>;

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
