//! A connection's send side, below everything that produces replies: its outgoing
//! queue and the socket writes ([`out`]), the frames written into it ([`frames`]), a
//! TLS connection's bytes ([`tls`]), and the handles the pipeline keeps of a
//! connection. The pipeline (which queues replies, events and grants) and the network
//! edge (which reads requests, in `net`) both use it; it uses neither.

pub(crate) mod frames;
pub(crate) mod out;
pub(crate) mod tls;

use std::sync::Arc;

/// A slot of a connection's outstanding-request budget; freed once the reply is written.
pub(crate) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// A connection as the rest of the server sees it: where its frames go.
pub(crate) type ConnHandle = Arc<out::ConnOut>;

/// A connection's count of its items between entering the commit stage and their
/// replies being queued.
pub(crate) type InFlight = Arc<std::sync::atomic::AtomicUsize>;
