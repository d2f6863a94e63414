//! ZooKeeper semantics as pure, synchronous code: no tokio, no clock, no I/O.
//!
//! Time, session ids and zxids come in through [`Txn`]s, so applying one log gives one
//! state everywhere.
//!
//! # Layout
//! - [`txn`]: the log payload (with its origin) and its versioned encoding.
//! - [`ids`]: member ids and log positions.
//! - [`state`]: the state machine ([`State::apply`] for writes, [`State::read`] for reads).
//! - `write`, `read`: the operations, in ZooKeeper's check order.
//! - [`tree`]: znodes, Stat, children, ephemeral/container/TTL indexes.
//! - [`watches`]: the watch registry and which events a change fires.
//! - [`locks`]: the native lock: contender queues by lock path, grants.
//! - [`sessions`]: session liveness: deadlines in tick-sized expiry buckets, time passed in.
//! - [`path`], [`acl`]: validation and permission checks.
//! - [`snapshot`]: the state's snapshot encoding.

pub mod acl;
pub mod ids;
pub mod locks;
pub mod path;
pub mod read;
pub mod sessions;
pub mod snapshot;
pub mod state;
pub mod tree;
pub mod txn;
pub mod watches;
mod write;

pub use ids::{LogIndex, MemberId, Zxid};
pub use state::{Answer, Applied, Config, ConfigNode, OutOfOrder, Reply, Session, Sessions, State};
pub use tree::SessionId;
pub use txn::{Origin, Txn, TxnBody, TxnClock};
