//! The machinery shared by the recipes that queue with ephemeral sequential nodes
//! ([`Mutex`](super::Mutex), [`ReadWriteLock`](super::ReadWriteLock),
//! [`Semaphore`](super::Semaphore), [`LeaderLatch`](super::LeaderLatch)).
//!
//! - Protected creates (Curator's `withProtection`): each node is named
//!   `_c_<guid>-<marker>NNNNNNNNNN`, so a create whose reply was lost is found again by
//!   its GUID instead of being left behind as an orphan that blocks everyone.
//! - [`Pending`]: the node of an acquire that has not settled; dropped armed, it spawns
//!   the node's removal (finding it by GUID if the create was still in flight).
//! - [`LockCore`]: one queue of lock nodes with a per-instance reentrant hold. The
//!   children are put in queue order by [`zlock_proto::lock_order`], the rule the
//!   server's native lock uses too (every sequential child counts, whatever its
//!   prefix). What "first enough to hold" means is a [`Rule`] given per acquire, from
//!   the same module: the mutex and the write lock hold when first, the read lock when
//!   no writer precedes it.
//! - [`Hold`]: the held node, released on `release` or drop, with the `lost()` future.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zlock_proto::lock_order::{self, Mode};

use super::metrics::{self, LockMetrics};
use super::{create_parents, default_window, delete_node, session_in_doubt, spawn_delete};
use crate::{
    lock_flags, lock_mode, Acl, CheckVersionRequest, Client, ConnectionState, CreateMode,
    DeleteRequest, Error, ErrorCode, LockRequest, MultiOp, MultiResult, NativeLock, Result,
};

/// Curator's protection prefix: `_c_<guid>-`.
const PROTECTED_PREFIX: &str = "_c_";

/// How long an acquire may wait.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    No,
    Forever,
    Until(Instant),
}

/// What a contender does after listing the queue.
pub(crate) enum Decision {
    Hold,
    /// Wait for this sibling (a node name) to go, then look again.
    Watch(String),
}

/// Given the contenders in queue order ([`lock_order::queue`]) and the index of our
/// own node, decide.
pub(crate) type Rule<'a> = &'a (dyn Fn(&[String], usize) -> Decision + Sync);

/// [`Mode::Exclusive`]: holds when first; otherwise watches the node just before (the
/// mutex, the write lock).
pub(crate) fn first_holds(sorted: &[String], idx: usize) -> Decision {
    if Mode::Exclusive.holds(sorted, idx) {
        return Decision::Hold;
    }
    match idx.checked_sub(1) {
        None => Decision::Hold,
        Some(p) => Decision::Watch(sorted[p].clone()),
    }
}

/// One queue of lock nodes under `path`, as seen by one recipe instance.
pub(crate) struct LockCore {
    pub(crate) client: Client,
    pub(crate) path: String,
    /// What our nodes are named after the protection prefix, before the sequence.
    marker: &'static str,
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

impl LockCore {
    pub(crate) fn new(client: Client, path: &str, marker: &'static str) -> Arc<LockCore> {
        Arc::new(LockCore {
            client,
            path: path.trim_end_matches('/').to_owned(),
            marker,
            held: std::sync::Mutex::new(None),
            acquiring: tokio::sync::Mutex::new(()),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this instance holds its lock now.
    pub(crate) fn holds(&self) -> bool {
        self.held().is_some()
    }

    /// Counts one more guard on the held node, if there is one.
    fn reenter(self: &Arc<Self>, metrics: Option<&LockMetrics>) -> Option<Hold> {
        let mut held = self.held();
        let h = held.as_mut()?;
        h.count += 1;
        Some(Hold {
            core: Arc::clone(self),
            node: h.node.clone(),
            czxid: h.czxid,
            metrics: metrics.cloned(),
            released: false,
        })
    }

    /// Acquires (or re-enters) under `rule`, recording the outcome on `metrics`.
    /// `None` when `wait` ran out; no node is left behind then.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        wait: Wait,
        rule: Rule<'_>,
        metrics: Option<&LockMetrics>,
    ) -> Result<Option<Hold>> {
        self.acquire_with(wait, rule, metrics, true).await
    }

    /// As [`LockCore::acquire`]; `native_ok: false` keeps to the recipe even when the
    /// server offers the native lock (a rule the server cannot know, such as a read lock
    /// taken by the holder of the write lock).
    pub(crate) async fn acquire_with(
        self: &Arc<Self>,
        wait: Wait,
        rule: Rule<'_>,
        metrics: Option<&LockMetrics>,
        native_ok: bool,
    ) -> Result<Option<Hold>> {
        let started = Instant::now();
        let outcome = self
            .acquire_unobserved(wait, rule, metrics, native_ok)
            .await;
        metrics::observe(metrics, started, &outcome, 1);
        outcome
    }

    async fn acquire_unobserved(
        self: &Arc<Self>,
        wait: Wait,
        rule: Rule<'_>,
        metrics: Option<&LockMetrics>,
        native_ok: bool,
    ) -> Result<Option<Hold>> {
        if let Some(h) = self.reenter(metrics) {
            return Ok(Some(h));
        }
        let _serial = match wait {
            Wait::Until(d) => match tokio::time::timeout_at(d, self.acquiring.lock()).await {
                Ok(s) => s,
                Err(_) => return Ok(None),
            },
            Wait::No | Wait::Forever => self.acquiring.lock().await,
        };
        if let Some(h) = self.reenter(metrics) {
            return Ok(Some(h));
        }
        if native_ok && self.client.uses_native_locks() {
            return self.acquire_native(wait, metrics).await;
        }
        let client = &self.client;
        let mut pending = Pending::new(client, &self.path);
        let (node, czxid) =
            create_node(client, &self.path, &pending.guid, self.marker, b"").await?;
        pending.node = Some(node.clone());
        let own = node_name(&node).to_owned();
        loop {
            // A connection loss while the session lives is not a failure: the watch or
            // the listing is simply tried again once the client has reconnected.
            let children = match client.get_children(&self.path, false).await {
                Ok(c) => c,
                Err(Error::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            };
            let sorted = lock_order::queue(children);
            let Some(idx) = sorted.iter().position(|c| *c == own) else {
                return Err(Error::Server(ErrorCode::NoNode));
            };
            let pred = match rule(&sorted, idx) {
                Decision::Hold => {
                    pending.disarm();
                    return Ok(Some(self.hold_node(node, czxid, metrics)));
                }
                Decision::Watch(pred) => format!("{}/{pred}", self.path),
            };
            if matches!(wait, Wait::No) {
                return pending.remove().await.map(|()| None);
            }
            let (stat, watcher) = match client.exists_watch(&pred).await {
                Ok(w) => w,
                Err(Error::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            };
            if stat.is_none() {
                continue;
            }
            match wait {
                Wait::Until(d) => match tokio::time::timeout_at(d, watcher).await {
                    Ok(r) => {
                        r?;
                    }
                    Err(_) => return pending.remove().await.map(|()| None),
                },
                Wait::No | Wait::Forever => {
                    watcher.await?;
                }
            }
        }
    }
}

impl LockCore {
    /// The same acquire through zlock's native lock operation: one round trip creates
    /// the node (same name) and answers whether it holds; a queued node waits for the
    /// grant the server pushes, with no listing and no watch. The server applies the
    /// same [`lock_order`] rule to the same queue, so recipe and native contenders mix.
    async fn acquire_native(
        self: &Arc<Self>,
        wait: Wait,
        metrics: Option<&LockMetrics>,
    ) -> Result<Option<Hold>> {
        self.acquire_native_releasing(wait, metrics, String::new())
            .await
    }

    /// [`LockCore::acquire_native`] that also deletes `release` (a node of ours under
    /// the lock path, "" for none) in the same request and commit.
    async fn acquire_native_releasing(
        self: &Arc<Self>,
        wait: Wait,
        metrics: Option<&LockMetrics>,
        release: String,
    ) -> Result<Option<Hold>> {
        let mut pending = Pending::new(&self.client, &self.path);
        let mode = if self.marker == lock_order::READ_MARKER {
            lock_mode::READ
        } else {
            lock_mode::EXCLUSIVE
        };
        let mut req = native_request(&self.path, &pending.guid, self.marker, mode, 1);
        req.release = release;
        let Some((node, czxid)) = native_contend(&self.client, &mut pending, req, wait).await?
        else {
            return Ok(None);
        };
        Ok(Some(self.hold_node(node, czxid, metrics)))
    }

    /// Records `node` as this instance's hold (count 1) and returns its first guard.
    fn hold_node(
        self: &Arc<Self>,
        node: String,
        czxid: i64,
        metrics: Option<&LockMetrics>,
    ) -> Hold {
        *self.held() = Some(Held {
            node: node.clone(),
            czxid,
            count: 1,
        });
        Hold {
            core: Arc::clone(self),
            node,
            czxid,
            metrics: metrics.cloned(),
            released: false,
        }
    }
}

/// A native lock request for a protected node `<path>/_c_<guid>-<marker>NNNNNNNNNN`.
pub(crate) fn native_request(
    path: &str,
    guid: &str,
    marker: &str,
    mode: i32,
    leases: i32,
) -> LockRequest {
    LockRequest {
        path: path.to_owned(),
        prefix: format!("{PROTECTED_PREFIX}{guid}-{marker}"),
        data: Some(Vec::new()),
        acl: Acl::open_unsafe(),
        mode,
        leases,
        flags: 0,
        release: String::new(),
        ..LockRequest::default()
    }
}

/// One contender through zlock's native lock: sends `req` for `pending`'s node (TRY
/// when `wait` is [`Wait::No`]), asks again with RESUME after a lost reply (the server
/// finds the node by its GUID), then waits for the pushed grant as `wait` allows. The
/// node and its czxid once held (`pending` disarmed); `None` when busy or out of time
/// (the node removed).
pub(crate) async fn native_contend(
    client: &Client,
    pending: &mut Pending,
    mut req: LockRequest,
    wait: Wait,
) -> Result<Option<(String, i64)>> {
    if matches!(wait, Wait::No) {
        req.flags |= lock_flags::TRY;
    }
    let answer = loop {
        match client.lock_native(req.clone()).await {
            Ok(a) => break a,
            Err(Error::ConnectionLoss) => req.flags |= lock_flags::RESUME,
            Err(e) => return Err(e),
        }
    };
    let held = match answer {
        NativeLock::Granted { node, czxid } => (node, czxid),
        NativeLock::Busy => return Ok(None),
        NativeLock::Queued { node, grant, .. } => {
            pending.node = Some(node);
            let g = match wait {
                Wait::Until(d) => match tokio::time::timeout_at(d, grant).await {
                    Ok(r) => r?,
                    Err(_) => return pending.remove().await.map(|()| None),
                },
                Wait::No | Wait::Forever => grant.await?,
            };
            (g.node, g.czxid)
        }
    };
    pending.disarm();
    Ok(Some(held))
}

impl LockCore {
    /// Releases `hold` and queues again, recording the new acquire on `metrics`. On the
    /// native path one request does both (see [`crate::Mutex::reacquire`]); otherwise,
    /// or while other guards of this instance still share the hold, a release and an
    /// acquire under `rule`.
    pub(crate) async fn reacquire(
        self: &Arc<Self>,
        mut hold: Hold,
        rule: Rule<'_>,
        metrics: Option<&LockMetrics>,
    ) -> Result<Hold> {
        let started = Instant::now();
        let outcome = if self.client.uses_native_locks() {
            let _serial = self.acquiring.lock().await;
            hold.released = true;
            if let Some(m) = &hold.metrics {
                m.released();
            }
            match hold.unhold() {
                Some(old) => {
                    self.acquire_native_releasing(Wait::Forever, metrics, old)
                        .await
                }
                // Other guards of this instance still share the node: it stays held.
                None => Ok(self.reenter(metrics)),
            }
        } else {
            match hold.release().await {
                Ok(()) => {
                    self.acquire_unobserved(Wait::Forever, rule, metrics, false)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        metrics::observe(metrics, started, &outcome, 1);
        match outcome {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(Error::Protocol(
                "lock acquire ended without the lock".into(),
            )),
            Err(e) => Err(e),
        }
    }
}

/// A held lock node. Released by [`Hold::release`] or on drop; the node is deleted
/// when the last hold of the owning instance goes.
pub(crate) struct Hold {
    core: Arc<LockCore>,
    node: String,
    czxid: i64,
    metrics: Option<LockMetrics>,
    released: bool,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("node", &self.node)
            .field("fencing_token", &self.czxid)
            .finish()
    }
}

impl Hold {
    pub(crate) fn fencing_token(&self) -> i64 {
        self.czxid
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    pub(crate) fn lost(&self) -> impl Future<Output = ConnectionState> + Send + 'static {
        let client = self.core.client.clone();
        let window = default_window(&client);
        session_in_doubt(client, window)
    }

    pub(crate) fn lost_after(
        &self,
        window: Duration,
    ) -> impl Future<Output = ConnectionState> + Send + 'static {
        session_in_doubt(self.core.client.clone(), window)
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        self.released = true;
        if let Some(m) = &self.metrics {
            m.released();
        }
        match self.unhold() {
            Some(node) => delete_node(&self.core.client, &node).await,
            None => Ok(()),
        }
    }

    /// `ops` applied only if the lock node still exists: one multi `[check(node),
    /// ops...]`. The results of `ops` (without the check's).
    pub(crate) async fn fenced(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(MultiOp::Check(CheckVersionRequest {
            path: self.node.clone(),
            version: -1,
        }));
        all.extend(ops);
        let mut rs = multi_checked(&self.core.client, all).await?;
        rs.remove(0);
        Ok(rs)
    }

    /// `ops` and the release in one multi (`[ops..., delete(node)]`; fenced by the
    /// delete). On any failure nothing of `ops` is applied and the node is deleted
    /// anyway. While other guards share the hold the node stays: `[check(node), ops...]`.
    pub(crate) async fn release_with(mut self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        self.released = true;
        if let Some(m) = &self.metrics {
            m.released();
        }
        let Some(node) = self.unhold() else {
            return self.fenced(ops).await;
        };
        let n = ops.len();
        let mut all = ops;
        all.push(MultiOp::Delete(DeleteRequest {
            path: node.clone(),
            version: -1,
        }));
        match multi_checked(&self.core.client, all).await {
            Ok(mut rs) => {
                rs.truncate(n);
                Ok(rs)
            }
            Err(e) => {
                // Released whatever happened to the writes.
                delete_node(&self.core.client, &node).await?;
                Err(e)
            }
        }
    }

    /// Drops one count of the hold; the node to delete if it was the last.
    fn unhold(&self) -> Option<String> {
        let mut held = self.core.held();
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

impl Drop for Hold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(m) = &self.metrics {
            m.released();
        }
        if let Some(node) = self.unhold() {
            spawn_delete(self.core.client.clone(), node);
        }
    }
}

/// A multi whose failure (the first op's error code, as ZooKeeper reports it) is an
/// `Err`.
async fn multi_checked(client: &Client, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
    let rs = client.multi(ops).await?;
    let failed = rs.iter().find_map(|r| match r {
        MultiResult::Error(code) if *code != 0 => Some(*code),
        _ => None,
    });
    match failed {
        Some(code) => Err(Error::from_code(code)),
        None => Ok(rs),
    }
}

/// A contender's node until its acquire settles; dropping it armed spawns its removal.
pub(crate) struct Pending {
    client: Client,
    parent: String,
    pub(crate) guid: String,
    /// The created node's path, once the create has answered.
    pub(crate) node: Option<String>,
    armed: bool,
}

impl Pending {
    /// A fresh GUID for one node about to be created under `parent`.
    pub(crate) fn new(client: &Client, parent: &str) -> Pending {
        Pending {
            client: client.clone(),
            parent: parent.to_owned(),
            guid: new_guid(),
            node: None,
            armed: true,
        }
    }

    /// The node is kept (held, or owned by someone else from now on).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the node now (awaited) and disarms.
    pub(crate) async fn remove(&mut self) -> Result<()> {
        if let Some(node) = &self.node {
            delete_node(&self.client, node).await?;
        }
        self.armed = false;
        Ok(())
    }
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
        let parent = std::mem::take(&mut self.parent);
        let guid = std::mem::take(&mut self.guid);
        rt.spawn(async move {
            if let Ok(Some(name)) = find_by_guid(&client, &parent, &guid).await {
                let _ = delete_node(&client, &format!("{parent}/{name}")).await;
            }
        });
    }
}

/// Creates the protected ephemeral sequential node
/// `<parent>/_c_<guid>-<marker>NNNNNNNNNN` with `data`, creating missing parents as
/// containers; returns its path and czxid. A lost reply is resolved by looking for
/// the GUID before creating again.
pub(crate) async fn create_node(
    client: &Client,
    parent: &str,
    guid: &str,
    marker: &str,
    data: &[u8],
) -> Result<(String, i64)> {
    let prefix = format!("{parent}/{PROTECTED_PREFIX}{guid}-{marker}");
    let mut may_exist = false;
    loop {
        if may_exist {
            match find_by_guid(client, parent, guid).await {
                Ok(Some(name)) => {
                    let node = format!("{parent}/{name}");
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
            .create(&prefix, data, CreateMode::EphemeralSequential)
            .await
        {
            Ok((node, stat)) => return Ok((node, stat.czxid)),
            Err(Error::Server(ErrorCode::NoNode)) => create_parents(client, &prefix).await?,
            Err(Error::ConnectionLoss) => may_exist = true,
            Err(e) => return Err(e),
        }
    }
}

/// The child of `parent` carrying `guid`, if any.
async fn find_by_guid(client: &Client, parent: &str, guid: &str) -> Result<Option<String>> {
    let tag = format!("{PROTECTED_PREFIX}{guid}-");
    match client.get_children(parent, false).await {
        Ok(children) => Ok(children.into_iter().find(|c| c.starts_with(&tag))),
        Err(Error::Server(ErrorCode::NoNode)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last path segment.
pub(crate) fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A random UUID-formatted (version 4 layout) identifier for one node.
pub(crate) fn new_guid() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_order_ignores_prefixes_and_counts_every_kind() {
        let v = lock_order::queue(vec![
            "_c_bbb-lock-0000000003".into(),
            "_c_aaa-lock-0000000010".into(),
            "lock-0000000001".into(),
            "unrelated".into(),
            "_c_ccc-__READ__0000000002".into(),
            "_c_ddd-lock--000000001".into(),
        ]);
        assert_eq!(
            v,
            vec![
                "lock-0000000001",
                "_c_ccc-__READ__0000000002",
                "_c_bbb-lock-0000000003",
                "_c_aaa-lock-0000000010",
                "_c_ddd-lock--000000001",
            ]
        );
        assert!(matches!(first_holds(&v, 0), Decision::Hold));
        assert!(matches!(first_holds(&v, 2), Decision::Watch(p) if p == v[1]));
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
