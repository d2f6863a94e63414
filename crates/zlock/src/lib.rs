//! An async client for the ZooKeeper wire protocol, for zlock and Apache ZooKeeper.
//!
//! This first version holds one connection per [`Client`] with many requests in
//! flight; reconnection, recipes and the native lock path come with their own issues.
//!
//! ```no_run
//! # async fn demo() -> Result<(), zlock::Error> {
//! use zlock::{Client, CreateMode};
//! let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
//! zk.ensure_path("/orders").await?;
//! let (path, _stat) = zk.create("/orders/o-", b"42", CreateMode::PersistentSequential).await?;
//! println!("created {path}");
//! zk.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`Client`]: the handle (clone it freely).
//! - `session`: the actor that owns the socket.
//! - [`Error`]: ZooKeeper codes plus client-local failures.

mod client;
mod error;
mod session;

pub use client::{Client, CreateMode};
pub use error::{Error, Result};
pub use zlock_proto::records::{Acl, Id, MultiOp, MultiResult, Stat, WatcherEvent};
pub use zlock_proto::ErrorCode;
