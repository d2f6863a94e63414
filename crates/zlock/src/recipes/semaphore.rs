//! The counting semaphore: Curator's `InterProcessSemaphoreV2` recipe.

use std::time::Duration;

use tokio::time::Instant;
use zlock_proto::lock_order::{self, Mode};

use super::acquire::{Lock, Options, Recipe, Tunable, Wait};
use super::guard::{Guard, Held, HeldNode};
use super::metrics;
use super::native;
use super::nodes::{delete_node, spawn_delete};
use super::protected::{create_node, node_name, Pending};
use super::Mutex;
use crate::{Client, Error, ErrorCode, Result};

/// Curator's marker of a lease node: `_c_<guid>-lease-NNNNNNNNNN`.
const LEASE_NAME: &str = "lease-";

/// A distributed counting semaphore: at most `max_leases` leases are held at once
/// across all sessions, with the layout of Apache Curator's
/// `InterProcessSemaphoreV2` so Curator clients share the leases.
///
/// # Algorithm
/// Under the semaphore path, `locks` holds an internal [`Mutex`] (Curator's
/// `InterProcessMutex`) that serialises acquirers, and `leases` holds one ephemeral
/// sequential node `_c_<guid>-lease-NNNNNNNNNN` per lease. An acquirer takes the
/// internal mutex, creates its lease node and lists `leases` with a child watch: if
/// its node is among the first `max_leases` it holds the lease, otherwise it waits
/// for the children to change (a release) and looks again. The internal mutex is
/// released as soon as the lease is held, so acquirers queue FIFO on the mutex and
/// only the head of that queue watches `leases`.
///
/// On a zlock server (when the client takes the native lock path) a single lease is one
/// request instead: the server creates the lease node, says at once whether it is
/// among the first `max_leases`, and pushes the grant when a lease before it goes; no
/// internal mutex, no listing, no watch. `acquire_many(n > 1)` keeps the internal mutex
/// (two acquirers each holding part of what they need would otherwise wait for each
/// other forever). Both kinds count every node under `leases` by its sequence number,
/// so they mix, and mix with Curator.
///
/// `max_leases` is a property of each client, not of the path (as in Curator): all
/// users of one path must agree on it.
///
/// # Guarantees
/// - While every holder's session lives, at most `max_leases` leases are held.
/// - A crashed holder's leases go with its session.
/// - Waiters are served in the order they queued on the internal mutex.
///
/// # Connection loss and session expiry
/// Lease and mutex nodes are protected creates: a create whose reply is lost is found
/// again by its GUID. A waiter's watch survives a reconnect; a lost session fails the
/// acquire with [`Error::SessionExpired`]. A lease holds only while its session
/// lives: [`Guard::lost`] resolves when that is in doubt (as [`crate::MutexGuard::lost`]).
///
/// # Cancellation safety
/// Dropping an acquire future removes whatever it had made: the internal mutex node,
/// the lease node being waited on, and (for [`Semaphore::acquire_many`]) the leases
/// already obtained, each through a spawned task. A timed-out `acquire_timeout` and a
/// failed `try_acquire` remove their nodes before returning. Dropping a [`Lease`]
/// releases it through a spawned task; prefer [`Guard::release`].
///
/// # Metrics
/// Reports to [`LockMetrics::global`](super::LockMetrics::global) unless [`Lock::with_metrics`] says
/// otherwise; each lease counts as one acquisition and one release.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use std::time::Duration;
/// use zlock::{recipes::Semaphore, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let pool = Semaphore::new(zk, "/semaphores/db", 3); // at most 3 users at once
/// let lease = pool.acquire().await?;
/// // use one of the three slots
/// lease.release().await?;
///
/// if let Some(leases) = pool.acquire_many_timeout(2, Duration::from_secs(1)).await? {
///     for l in leases {
///         l.release().await?;
///     }
/// }
/// # Ok(()) }
/// ```
pub type Semaphore = Lock<Leases>;

/// One lease of a [`Semaphore`]. Released by [`Guard::release`] or on drop.
pub type Lease = Guard<LeaseNode>;

/// The semaphore's recipe (see [`Semaphore`]).
pub struct Leases {
    client: Client,
    locks_path: String,
    leases_path: String,
    max_leases: usize,
    options: Options,
}

impl Recipe for Leases {
    type Held = LeaseNode;

    /// One lease. Without waiting (`try_acquire`) the recipe also answers `None` while
    /// another acquirer is between taking the internal mutex and getting its lease (or
    /// waits for one), as in Curator.
    async fn contend(&self, wait: Wait) -> Result<Option<Lease>> {
        Ok(self
            .acquire_leases(1, wait)
            .await?
            .and_then(|mut v| v.pop()))
    }
}

impl Tunable for Leases {
    fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }
}

impl Lock<Leases> {
    /// A semaphore on `path` allowing `max_leases` holders at once.
    pub fn new(client: Client, path: &str, max_leases: usize) -> Semaphore {
        let path = path.trim_end_matches('/');
        Lock {
            recipe: Leases {
                client,
                locks_path: format!("{path}/locks"),
                leases_path: format!("{path}/leases"),
                max_leases,
                options: Options::default(),
            },
        }
    }

    /// The number of leases that may be held at once.
    pub fn max_leases(&self) -> usize {
        self.recipe.max_leases
    }

    /// Waits for `n` leases, taken one after another (as Curator does); on an error
    /// the ones already taken are released.
    ///
    /// # Errors
    /// As [`Lock::acquire`]; `Server(BadArguments)` if `n > max_leases` (it
    /// could never be granted).
    pub async fn acquire_many(&self, n: usize) -> Result<Vec<Lease>> {
        self.recipe
            .acquire_leases(n, Wait::Forever)
            .await?
            .ok_or_else(|| Error::Protocol("semaphore acquire ended without a lease".into()))
    }

    /// Waits at most `timeout` for `n` leases in all; `None` (the ones taken released,
    /// no node left behind) if they did not all come.
    ///
    /// # Errors
    /// As [`Semaphore::acquire_many`].
    pub async fn acquire_many_timeout(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Option<Vec<Lease>>> {
        self.recipe
            .acquire_leases(n, Wait::Until(Instant::now() + timeout))
            .await
    }
}

impl Leases {
    async fn acquire_leases(&self, n: usize, wait: Wait) -> Result<Option<Vec<Lease>>> {
        let started = Instant::now();
        let outcome = self.acquire_leases_unobserved(n, wait).await;
        let count = outcome
            .as_ref()
            .map_or(0, |o| o.as_ref().map_or(0, Vec::len));
        metrics::observe(
            self.options.metrics.as_ref(),
            started,
            &outcome,
            count as u64,
        );
        outcome
    }

    async fn acquire_leases_unobserved(&self, n: usize, wait: Wait) -> Result<Option<Vec<Lease>>> {
        if n > self.max_leases || self.max_leases == 0 {
            return Err(Error::Server(ErrorCode::BadArguments));
        }
        let mut leases = Vec::with_capacity(n);
        let native = n == 1 && self.client.uses_native_locks();
        if !native && self.options.lock_delay.is_some() {
            return Err(Error::LockDelayUnsupported);
        }
        while leases.len() < n {
            let got = if native {
                self.queue_lease_native(wait).await
            } else {
                self.acquire_one(wait).await
            };
            let failed = match got {
                Ok(Some(lease)) => {
                    leases.push(lease);
                    continue;
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            for lease in leases {
                let _ = lease.release().await;
            }
            return failed;
        }
        // Counted from here on: leases given back above were never handed out.
        for lease in &mut leases {
            lease.count_on(self.options.metrics.clone());
        }
        Ok(Some(leases))
    }

    /// One lease: take the internal mutex, queue a lease node, wait for it to be
    /// among the first `max_leases`, release the mutex (awaited, whatever the
    /// outcome, so the next acquirer can go on at once).
    async fn acquire_one(&self, wait: Wait) -> Result<Option<Lease>> {
        // A fresh (non-reentrant) mutex per acquire: two tasks sharing this
        // `Semaphore` must queue on it like two processes would.
        let mutex = Mutex::new(self.client.clone(), &self.locks_path).without_metrics();
        let Some(serial) = mutex.recipe.contend(wait).await? else {
            return Ok(None);
        };
        let outcome = self.queue_lease(wait).await;
        match (outcome, serial.release().await) {
            (Ok(lease), Ok(())) => Ok(lease),
            (Err(e), _) => Err(e),
            (Ok(lease), Err(e)) => {
                if let Some(lease) = lease {
                    let _ = lease.release().await;
                }
                Err(e)
            }
        }
    }

    /// One lease through the native lock path: one request creates the lease node and
    /// answers whether it is among the first `max_leases`; if not, the server pushes
    /// the grant when it is.
    async fn queue_lease_native(&self, wait: Wait) -> Result<Option<Lease>> {
        let mut pending = Pending::new(&self.client, &self.leases_path);
        let req = native::request(
            &self.leases_path,
            &pending.guid,
            LEASE_NAME,
            Mode::Semaphore(self.max_leases),
            &self.options,
            String::new(),
        );
        let held = native::contend(&self.client, &mut pending, req, wait).await?;
        Ok(held.map(|(node, czxid)| self.lease(node, czxid)))
    }

    /// Creates a lease node and waits (with the internal mutex held) until it is
    /// among the first `max_leases`.
    async fn queue_lease(&self, wait: Wait) -> Result<Option<Lease>> {
        let client = &self.client;
        let mut pending = Pending::new(client, &self.leases_path);
        let (node, czxid) =
            create_node(client, &self.leases_path, &pending.guid, LEASE_NAME, b"").await?;
        pending.node = Some(node.clone());
        let own = node_name(&node).to_owned();
        loop {
            let (children, changed) = client.get_children_watch(&self.leases_path).await?;
            let sorted = lock_order::queue(children);
            let Some(idx) = sorted.iter().position(|c| *c == own) else {
                return Err(Error::Server(ErrorCode::NoNode));
            };
            if Mode::Semaphore(self.max_leases).holds(&sorted, idx) {
                pending.disarm();
                return Ok(Some(self.lease(node, czxid)));
            }
            match wait {
                Wait::No => return pending.remove().await.map(|()| None),
                Wait::Until(d) => match tokio::time::timeout_at(d, changed).await {
                    Ok(r) => {
                        r?;
                    }
                    Err(_) => return pending.remove().await.map(|()| None),
                },
                Wait::Forever => {
                    changed.await?;
                }
            }
        }
    }

    /// A lease on `node`, counted on the metrics only once handed out.
    fn lease(&self, node: String, czxid: i64) -> Lease {
        let node = HeldNode {
            client: self.client.clone(),
            path: node,
            czxid,
        };
        Guard::new(LeaseNode(node), None)
    }
}

/// What a [`Lease`] holds: its node.
pub struct LeaseNode(HeldNode);

impl Held for LeaseNode {
    fn held_node(&self) -> &HeldNode {
        &self.0
    }

    async fn release(&mut self) -> Result<()> {
        delete_node(&self.0.client, &self.0.path).await
    }

    fn release_on_drop(&mut self) {
        spawn_delete(self.0.client.clone(), std::mem::take(&mut self.0.path));
    }
}
