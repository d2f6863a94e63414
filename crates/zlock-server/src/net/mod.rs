//! The network edge: the accept loop, one task per connection, four-letter words, each
//! connection's outgoing queue and the frames written into it.

pub(crate) mod connection;
pub(crate) mod fourlw;
pub(crate) mod frames;
pub(crate) mod listener;
pub(crate) mod out;

use std::sync::Arc;

/// A slot of a connection's outstanding-request budget; freed once the reply is written.
pub(crate) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

/// A connection as the rest of the server sees it: where its frames go.
pub(crate) type ConnHandle = Arc<out::ConnOut>;

/// A connection's count of its items between entering the commit stage and their
/// replies being queued.
pub(crate) type InFlight = Arc<std::sync::atomic::AtomicUsize>;
