//! An async client for the ZooKeeper wire protocol, for zlock and Apache ZooKeeper.
//!
//! One connection per [`Client`] with many requests in flight, a connect string with
//! several hosts and a chroot (`h1:2181,h2:2181/app`), reconnection that resumes the
//! same session, typed watchers ([`OneshotWatcher`], [`PersistentWatcher`]) plus a
//! catch-all event receiver, and the connection state as a stream in Curator's terms
//! ([`ConnectionState`]).
//!
//! # On connection loss
//! - Requests already written fail with [`Error::ConnectionLoss`]: they may or may not
//!   have been applied. Reads can be retried with [`RetryPolicy`].
//! - The state becomes [`ConnectionState::Suspended`]; the client tries the hosts
//!   round-robin (20 ms backoff doubling to 1 s) to resume the same session. Requests
//!   made meanwhile wait in call order.
//! - On success: [`ConnectionState::Reconnected`], auth re-sent, watches re-registered
//!   relative to the last zxid seen (so changes made while away still fire).
//! - If the server says the session expired, or no host resumes it within the session
//!   timeout: [`ConnectionState::Lost`], and every pending and later call fails with
//!   [`Error::SessionExpired`]. The client never opens a new session by itself: make a
//!   new [`Client`].
//!
//! # Backpressure
//! Each session queues at most 4 MiB of requests not yet written to the socket; later
//! requests wait in line, in call order (see [`Client`]). Replies are read while
//! requests are written, so a caller may keep thousands of requests in flight on one
//! connection.
//!
//! # Cancellation safety
//! A request is queued when its method is called (for [`Client::send`]) or first polled
//! (for the `async fn`s); dropping the future later does not withdraw it, unless it is
//! still waiting in line for room in the queue. Watchers and the state stream are
//! cancellation safe.
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
//! Watching a node and the connection:
//!
//! ```no_run
//! # async fn demo() -> Result<(), zlock::Error> {
//! use zlock::{Client, ConnectionState};
//! let (zk, _events) = Client::connect("h1:2181,h2:2181/app", 10_000).await?;
//! let mut state = zk.state_stream();
//! tokio::spawn(async move {
//!     while state.changed().await.is_ok() {
//!         if *state.borrow() == ConnectionState::Lost {
//!             eprintln!("session lost");
//!         }
//!     }
//! });
//! let (_data, _stat, changed) = zk.get_data_watch("/config").await?; // /app/config
//! let event = changed.await?; // fires once, even across a reconnect
//! println!("{:?} {}", event.event_type, event.path);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`Client`] (`client`): the handle (clone it freely) and its plumbing;
//!   `client::ops` its ZooKeeper operations; `client::native` zlock's native lock
//!   ([`Client::lock_native`], [`NativeLock`], [`GrantWaiter`], [`LockPath`], the
//!   server's feature bits).
//! - [`connect`]: connect strings ([`connect::rotate_hosts`] spreads sessions over hosts)
//!   and [`ClientBuilder`] (the session timeout, TLS).
//! - `tls`: [`TlsOptions`] (trusted CAs, a client certificate) read into rustls, the
//!   handshake, [`TlsError`].
//! - `chroot`: client paths to server paths and back.
//! - `queue`: the session's request queue, bounded in bytes, callers waiting in line.
//! - `session`: the actor that owns the socket: `connection` (one connection's
//!   read/write loop), `handshake`, `watches` (the watch registry, SetWatches, removal
//!   of dropped watchers), `grants` (native lock waiters, re-sent with RESUME after a
//!   reconnect), `reconnect`.
//! - `watcher`: typed watchers and [`ConnectionState`].
//! - [`RetryPolicy`]: retries ConnectionLoss for idempotent operations.
//! - [`Error`]: ZooKeeper codes plus client-local failures.
//! - [`recipes`]: Curator's recipes: the fair [`Mutex`] (InterProcessMutex),
//!   [`ReadWriteLock`], [`Semaphore`] (InterProcessSemaphoreV2), [`LeaderLatch`], plus
//!   [`NaiveLock`] and client-side [`LockMetrics`]. The locks are [`recipes::Lock`]s
//!   (one `acquire` / `try_acquire` / `acquire_timeout`) giving [`recipes::Guard`]s;
//!   on a zlock server they take the native one-round-trip lock path. Their modules:
//!   `acquire`, `guard`, `core` (the queue lock), `hold` (reentrancy), `protected`
//!   (GUID-named nodes), `order` (queue order), `native` (the lock request), one per
//!   recipe.

mod chroot;
mod client;
pub mod connect;
mod error;
mod queue;
pub mod recipes;
mod retry;
mod session;
mod tls;
mod watcher;

pub use client::{Client, CreateMode, GrantWaiter, LockPath, NativeLock};
pub use connect::ClientBuilder;
pub use error::{Error, Result};
pub use recipes::{
    LeaderLatch, Lease, LockMetrics, LockMetricsSnapshot, Mutex, MutexGuard, NaiveGuard, NaiveLock,
    ReadLock, ReadWriteGuard, ReadWriteLock, Semaphore, WriteLock,
};
pub use retry::RetryPolicy;
pub use tls::{Pkcs12Store, TlsError, TlsOptions};
pub use watcher::{ConnectionState, EventType, OneshotWatcher, PersistentWatcher, WatchedEvent};
pub use zlock_proto::records::{
    lock_flags, lock_mode, perms, Acl, CheckVersionRequest, CreateRequest, DeleteRequest, Id,
    LockGrant, LockRequest, MultiOp, MultiResult, SetDataRequest, Stat, WatcherEvent,
};
pub use zlock_proto::ErrorCode;
