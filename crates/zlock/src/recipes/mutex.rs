//! The fair lock: Curator's `InterProcessMutex` recipe.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{create_parents, default_window, delete_node, session_in_doubt, spawn_delete};
use crate::{Client, ConnectionState, CreateMode, Error, ErrorCode, Result};

/// The part of a node name after which the sequence number follows (Curator's).
const LOCK_NAME: &str = "lock-";
/// Curator's protection prefix: `_c_<guid>-`.
const PROTECTED_PREFIX: &str = "_c_";

/// A fair, distributed, reentrant lock with the semantics of Apache Curator's
/// `InterProcessMutex`, and node names Curator recognises, so Curator clients and
/// zlock clients contending on one path exclude each other.
///
/// # Algorithm
/// Each acquire creates an ephemeral sequential node
/// `<lock_path>/_c_<guid>-lock-NNNNNNNNNN` (parents are created as containers if
/// missing), lists the children and holds the lock if its node has the lowest sequence
/// number (names are sorted by the 10-digit suffix, ignoring the prefix). Otherwise it
/// watches only the node just before its own and re-checks when that one goes. A
/// release deletes one node and wakes exactly one waiter; waiters get the lock in the
/// order they queued (FIFO).
///
/// # Guarantees
/// - Mutual exclusion among all sessions using this recipe (or Curator's) on one path,
///   as long as each holder's session is alive.
/// - A holder that crashes releases when its session expires (its node is ephemeral).
/// - [`MutexGuard::fencing_token`] is the lock node's creation zxid: strictly increasing
///   across all holders of the lock, so a protected resource can refuse a stale holder.
/// - Reentrant per `Mutex` instance: while one of its guards is alive, another acquire
///   on the same instance (from any task) returns at once with a new guard on the same
///   node; the node is deleted when the last guard is released. Two `Mutex` instances
///   on the same path (even in one process, with one [`Client`]) exclude each other.
///
/// # Connection loss and session expiry
/// - A create whose reply is lost (`ConnectionLoss`) is retried after looking for the
///   node by its GUID among the children, so no orphan node blocks everyone.
/// - While waiting, the predecessor's watch survives a reconnect (the client
///   re-registers it); a lost session fails the acquire with
///   [`Error::SessionExpired`].
/// - While holding, the lock is safe as long as the session lives. Use
///   [`MutexGuard::lost`] to learn when it may not be: the connection has been
///   suspended longer than the safe window, or the session is lost.
///
/// # Cancellation safety
/// Dropping an `acquire` future (or an `acquire_timeout` that timed out) removes its
/// node: a cleanup task is spawned that deletes it, or, if the create was still in
/// flight, finds it by its GUID and deletes it. A timed-out `acquire_timeout` and a
/// failed `try_acquire` delete their node before returning. Dropping a
/// [`MutexGuard`] releases it through a spawned task; prefer [`MutexGuard::release`]
/// to know when the lock is free.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use std::time::Duration;
/// use zlock::{recipes::Mutex, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let lock = Mutex::new(zk.clone(), "/locks/orders");
/// let guard = lock.acquire().await?;
/// let token = guard.fencing_token(); // pass it to the protected resource
/// let lost = guard.lost();
/// tokio::select! {
///     () = async { /* critical section using `token` */ } => {}
///     state = lost => eprintln!("lock may be lost ({state:?}), stopping"),
/// }
/// guard.release().await?;
///
/// if let Some(g) = lock.acquire_timeout(Duration::from_secs(2)).await? {
///     g.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct Mutex {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    path: String,
    /// The node this instance holds and how many guards share it.
    held: std::sync::Mutex<Option<Held>>,
    /// Serialises the acquires of this instance so that reentrancy is well defined.
    acquiring: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
struct Held {
    node: String,
    czxid: i64,
    count: usize,
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one more guard on the held node, if there is one.
    fn reenter(self: &Arc<Self>) -> Option<MutexGuard> {
        let mut held = self.held();
        let h = held.as_mut()?;
        h.count += 1;
        Some(MutexGuard {
            inner: Arc::clone(self),
            node: h.node.clone(),
            czxid: h.czxid,
            released: false,
        })
    }
}

impl Mutex {
    /// A lock on `lock_path` (its children are the contenders' nodes).
    pub fn new(client: Client, lock_path: &str) -> Mutex {
        let path = lock_path.trim_end_matches('/').to_owned();
        Mutex {
            inner: Arc::new(Inner {
                client,
                path,
                held: std::sync::Mutex::new(None),
                acquiring: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// Waits for the lock.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] / [`Error::Closed`] if the session ends while waiting;
    /// `Server(NoNode)` if this contender's node vanished; other server errors (e.g.
    /// `NoAuth`).
    pub async fn acquire(&self) -> Result<MutexGuard> {
        match self.acquire_inner(Wait::Forever).await? {
            Some(g) => Ok(g),
            None => Err(Error::Protocol(
                "lock acquire ended without the lock".into(),
            )),
        }
    }

    /// Takes the lock only if it is free now (or already held by this instance);
    /// otherwise removes its node and returns `None`.
    ///
    /// # Errors
    /// As [`Mutex::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        self.acquire_inner(Wait::No).await
    }

    /// Waits at most `timeout` for the lock; `None` (and no node left behind) if it
    /// did not come.
    ///
    /// # Errors
    /// As [`Mutex::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        self.acquire_inner(Wait::Until(Instant::now() + timeout))
            .await
    }

    async fn acquire_inner(&self, wait: Wait) -> Result<Option<MutexGuard>> {
        if let Some(g) = self.inner.reenter() {
            return Ok(Some(g));
        }
        let _serial = match wait {
            Wait::Until(d) => match tokio::time::timeout_at(d, self.inner.acquiring.lock()).await {
                Ok(s) => s,
                Err(_) => return Ok(None),
            },
            Wait::No | Wait::Forever => self.inner.acquiring.lock().await,
        };
        if let Some(g) = self.inner.reenter() {
            return Ok(Some(g));
        }
        let client = &self.inner.client;
        let mut pending = Pending {
            client: client.clone(),
            lock_path: self.inner.path.clone(),
            guid: new_guid(),
            node: None,
            armed: true,
        };
        let (node, czxid) = create_node(client, &self.inner.path, &pending.guid).await?;
        pending.node = Some(node.clone());
        let own = node_name(&node).to_owned();
        loop {
            let children = client.get_children(&self.inner.path, false).await?;
            let sorted = sorted_contenders(children);
            let Some(idx) = sorted.iter().position(|c| *c == own) else {
                return Err(Error::Server(ErrorCode::NoNode));
            };
            if idx == 0 {
                pending.armed = false;
                *self.inner.held() = Some(Held {
                    node: node.clone(),
                    czxid,
                    count: 1,
                });
                return Ok(Some(MutexGuard {
                    inner: Arc::clone(&self.inner),
                    node,
                    czxid,
                    released: false,
                }));
            }
            if matches!(wait, Wait::No) {
                delete_node(client, &node).await?;
                pending.armed = false;
                return Ok(None);
            }
            let pred = format!("{}/{}", self.inner.path, sorted[idx - 1]);
            let (stat, watcher) = client.exists_watch(&pred).await?;
            if stat.is_none() {
                continue;
            }
            match wait {
                Wait::Until(d) => match tokio::time::timeout_at(d, watcher).await {
                    Ok(r) => {
                        r?;
                    }
                    Err(_) => {
                        delete_node(client, &node).await?;
                        pending.armed = false;
                        return Ok(None);
                    }
                },
                Wait::No | Wait::Forever => {
                    watcher.await?;
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Wait {
    No,
    Forever,
    Until(Instant),
}

/// A contender's node until the acquire settles; dropping it armed spawns its removal.
struct Pending {
    client: Client,
    lock_path: String,
    guid: String,
    node: Option<String>,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(node) = self.node.take() {
            spawn_delete(self.client.clone(), node);
            return;
        }
        // The create may still be in flight: requests of a session are ordered, so a
        // listing sent now sees it if it was applied.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let lock_path = std::mem::take(&mut self.lock_path);
        let guid = std::mem::take(&mut self.guid);
        rt.spawn(async move {
            if let Ok(Some(name)) = find_by_guid(&client, &lock_path, &guid).await {
                let _ = delete_node(&client, &format!("{lock_path}/{name}")).await;
            }
        });
    }
}

/// Creates this contender's protected node; returns its path and czxid.
async fn create_node(client: &Client, lock_path: &str, guid: &str) -> Result<(String, i64)> {
    let prefix = format!("{lock_path}/{PROTECTED_PREFIX}{guid}-{LOCK_NAME}");
    let mut may_exist = false;
    loop {
        if may_exist {
            match find_by_guid(client, lock_path, guid).await {
                Ok(Some(name)) => {
                    let node = format!("{lock_path}/{name}");
                    match client.exists(&node, false).await {
                        Ok(Some(stat)) => return Ok((node, stat.czxid)),
                        Ok(None) => {}
                        Err(Error::ConnectionLoss) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Ok(None) => {}
                Err(Error::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            }
        }
        match client
            .create(&prefix, b"", CreateMode::EphemeralSequential)
            .await
        {
            Ok((node, stat)) => return Ok((node, stat.czxid)),
            Err(Error::Server(ErrorCode::NoNode)) => create_parents(client, &prefix).await?,
            Err(Error::ConnectionLoss) => may_exist = true,
            Err(e) => return Err(e),
        }
    }
}

/// The child of `lock_path` carrying `guid`, if any.
async fn find_by_guid(client: &Client, lock_path: &str, guid: &str) -> Result<Option<String>> {
    let tag = format!("{PROTECTED_PREFIX}{guid}-");
    match client.get_children(lock_path, false).await {
        Ok(children) => Ok(children.into_iter().find(|c| c.starts_with(&tag))),
        Err(Error::Server(ErrorCode::NoNode)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last path segment.
fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The sequence number of a contender's node (the digits after the last `lock-`).
fn sequence(name: &str) -> Option<u64> {
    let i = name.rfind(LOCK_NAME)?;
    name[i + LOCK_NAME.len()..].parse().ok()
}

/// Lock contenders sorted by sequence number; other children are ignored.
fn sorted_contenders(children: Vec<String>) -> Vec<String> {
    let mut v: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| sequence(&c).map(|s| (s, c)))
        .collect();
    v.sort();
    v.into_iter().map(|(_, c)| c).collect()
}

/// A random UUID-formatted (version 4 layout) identifier for one acquire.
fn new_guid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut w = [0u64; 2];
    for (i, x) in w.iter_mut().enumerate() {
        // RandomState carries per-process random keys.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u128(t);
        h.write_usize(i);
        h.write_u32(std::process::id());
        *x = h.finish();
    }
    let hi = (w[0] & 0xffff_ffff_ffff_0fff) | 0x4000;
    let lo = (w[1] & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// Proof of holding a [`Mutex`]. Released by [`MutexGuard::release`] or on drop (the
/// node is deleted when the last guard of the owning `Mutex` instance goes).
#[must_use = "dropping the guard releases the lock"]
pub struct MutexGuard {
    inner: Arc<Inner>,
    node: String,
    czxid: i64,
    released: bool,
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("node", &self.node)
            .field("fencing_token", &self.czxid)
            .finish()
    }
}

impl MutexGuard {
    /// The lock node's creation zxid: strictly increasing across all holders of the
    /// lock. Reentrant guards of one hold share it.
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// The path of the lock node held.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Resolves when the lock may be lost: the connection has stayed Suspended for
    /// the safe window (a third of the session timeout), or the session is Lost or
    /// the client Closed. Returns that state. A holder should stop its critical
    /// section when it fires. Cancellation safe; independent of the guard's lifetime.
    pub fn lost(&self) -> impl Future<Output = ConnectionState> + Send + 'static {
        let client = self.inner.client.clone();
        let window = default_window(&client);
        session_in_doubt(client, window)
    }

    /// As [`MutexGuard::lost`] with a chosen window (`Duration::ZERO`: fire as soon as
    /// the connection is suspended, the most conservative choice).
    pub fn lost_after(
        &self,
        window: Duration,
    ) -> impl Future<Output = ConnectionState> + Send + 'static {
        session_in_doubt(self.inner.client.clone(), window)
    }

    /// Releases this guard; the node is deleted (and awaited) when it was the last
    /// guard of the hold.
    ///
    /// # Errors
    /// The delete's error other than `NoNode` (e.g. [`Error::SessionExpired`], in which
    /// case the node is gone with the session anyway).
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        match self.unhold() {
            Some(node) => delete_node(&self.inner.client, &node).await,
            None => Ok(()),
        }
    }

    /// Drops one count of the hold; the node to delete if it was the last.
    fn unhold(&self) -> Option<String> {
        let mut held = self.inner.held();
        match held.as_mut() {
            Some(h) if h.node == self.node => {
                h.count = h.count.saturating_sub(1);
                if h.count == 0 {
                    *held = None;
                    Some(self.node.clone())
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(node) = self.unhold() {
            spawn_delete(self.inner.client.clone(), node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_by_suffix_ignoring_prefix() {
        let v = sorted_contenders(vec![
            "_c_bbb-lock-0000000003".into(),
            "_c_aaa-lock-0000000010".into(),
            "lock-0000000001".into(),
            "unrelated".into(),
        ]);
        assert_eq!(
            v,
            vec![
                "lock-0000000001",
                "_c_bbb-lock-0000000003",
                "_c_aaa-lock-0000000010"
            ]
        );
    }

    #[test]
    fn guid_is_uuid_shaped_and_unique() {
        let a = new_guid();
        let b = new_guid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(
            a.split('-').map(str::len).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
    }
}
