//! Lock recipes built on [`Client`](crate::Client).
//!
//! - [`Mutex`]: the fair lock (Curator's `InterProcessMutex`): one ephemeral sequential
//!   node per contender, each waiter watches only its predecessor, FIFO hand-over,
//!   reentrant per `Mutex` instance, fencing tokens, a "lock may be lost" future.
//! - [`ReadWriteLock`]: Curator's `InterProcessReadWriteLock`: shared readers, an
//!   exclusive writer, one fair queue for both, reentrant per instance, downgrade.
//! - [`Semaphore`]: Curator's `InterProcessSemaphoreV2`: at most `max_leases`
//!   [`Lease`]s at once, acquirers serialised by an internal [`Mutex`].
//! - [`LeaderLatch`]: Curator's `LeaderLatch`: exactly one leader among the started
//!   latches, leadership as a `watch` stream.
//! - [`NaiveLock`]: every contender races to create one ephemeral node; kept for
//!   comparison (herd effect, no fairness).
//! - [`LockMetrics`]: client-side counters and a wait-time histogram, fed by
//!   `Mutex`, `ReadWriteLock` and `Semaphore` (to [`LockMetrics::global`] by
//!   default).
//!
//! Every lock recipe is a [`Lock`] (one `acquire` / `try_acquire` / `acquire_timeout`)
//! whose guards are [`Guard`]s (one fencing token, `lost()`, `release`, release on
//! drop).
//!
//! # Layout
//! - `acquire`: [`Lock`] and what a recipe implements for it; the recipes' options.
//! - `guard`: [`Guard`] and what a guard holds.
//! - `core`: the queue lock shared by the mutex and the read-write lock: create, check
//!   the queue, wait on the node ahead (or the native grant).
//! - `hold`: the per-instance reentrant hold and its guards' shares.
//! - `protected`: protected nodes (`_c_<guid>-`), found again by GUID after a lost
//!   reply, removed when an acquire is given up.
//! - `order`: what a contender does given the queue order of [`zlock_proto::lock_order`].
//! - `native`: the native lock request (built only there) and its grant.
//! - `nodes`, `lost`: node chores (parents, deletes) and the "may be lost" future.
//! - One module per recipe, plus `metrics`.
//!
//! Against a zlock server the client takes zlock's native lock path
//! ([`Client::lock_native`](crate::Client::lock_native)) for `Mutex`, `ReadWriteLock`
//! and single `Semaphore` leases: the same nodes, made and granted in one round trip,
//! the grant pushed by the server (no listing, no watch). Against Apache ZooKeeper, or
//! with [`LockPath::Recipe`](crate::LockPath::Recipe), the recipes above run as
//! described. Both kinds of contender share one queue.

mod acquire;
mod core;
mod guard;
mod hold;
mod leader_latch;
mod lost;
mod metrics;
mod mutex;
mod naive;
mod native;
mod nodes;
mod order;
mod protected;
mod rwlock;
mod semaphore;

pub use acquire::Lock;
pub use guard::Guard;

pub use leader_latch::LeaderLatch;
pub use metrics::{LockMetrics, LockMetricsSnapshot};
pub use mutex::{Mutex, MutexGuard};
pub use naive::{NaiveGuard, NaiveLock};
pub use rwlock::{ReadLock, ReadWriteGuard, ReadWriteLock, WriteLock};
pub use semaphore::{Lease, Semaphore};
