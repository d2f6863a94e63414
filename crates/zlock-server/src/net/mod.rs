//! The network edge: the accept loop, one task per connection, four-letter words.

pub(crate) mod connection;
pub(crate) mod fourlw;
pub(crate) mod listener;
