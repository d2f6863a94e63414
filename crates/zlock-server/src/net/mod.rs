//! The network edge: the accept loop, one task per connection, four-letter words, and
//! each connection's outgoing queue.

pub(crate) mod connection;
pub(crate) mod fourlw;
pub(crate) mod listener;
pub(crate) mod out;
