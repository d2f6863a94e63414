//! The lock core: one queue of lock nodes under a path, as seen by one recipe instance
//! (the mutex, each side of the read-write lock). An acquire re-enters the instance's
//! hold, or creates a protected node and holds once the [`Rule`] says so, watching the
//! node it waits for meanwhile; on a zlock server the native lock does the same in one
//! round trip, the grant pushed by the server.

use std::sync::Arc;

use tokio::time::Instant;
use zlock_proto::lock_order::{self, Mode};

use super::acquire::{Options, Wait};
use super::guard::Guard;
use super::hold::{Hold, Holds};
use super::metrics;
use super::native;
use super::order::{Decision, Rule};
use super::protected::{create_node, node_name, Pending};
use crate::{Client, Error, ErrorCode, Result};

/// One queue of lock nodes under `path`, as seen by one recipe instance.
pub(crate) struct LockCore {
    pub(crate) client: Client,
    pub(crate) path: String,
    /// What our nodes are named after the protection prefix, before the sequence.
    marker: &'static str,
    /// How the server queues our nodes on the native path.
    mode: Mode,
    /// The node this instance holds and how many guards share it.
    pub(crate) holds: Holds,
    /// Serialises the acquires of this instance so that reentrancy is well defined.
    acquiring: tokio::sync::Mutex<()>,
}

type Acquired<S> = Result<Option<Guard<Hold<S>>>>;

impl LockCore {
    pub(crate) fn new(client: Client, path: &str, marker: &'static str) -> Arc<LockCore> {
        let mode = if marker == lock_order::READ_MARKER {
            Mode::Read
        } else {
            Mode::Exclusive
        };
        Arc::new(LockCore {
            client,
            path: path.trim_end_matches('/').to_owned(),
            marker,
            mode,
            holds: Holds::default(),
            acquiring: tokio::sync::Mutex::new(()),
        })
    }

    /// Acquires (or re-enters) under `rule`, recording the outcome on the metrics of
    /// `options`. `None` when `wait` ran out; no node is left behind then. `native_ok:
    /// false` keeps to the recipe even when the server offers the native lock (a rule
    /// the server cannot know, such as a read lock taken by the holder of the write
    /// lock).
    pub(crate) async fn acquire<S: 'static>(
        self: &Arc<Self>,
        wait: Wait,
        rule: Rule<'_>,
        options: &Options,
        native_ok: bool,
    ) -> Acquired<S> {
        let started = Instant::now();
        let outcome = self
            .acquire_unobserved(wait, rule, options, native_ok)
            .await;
        metrics::observe(options.metrics.as_ref(), started, &outcome, 1);
        outcome
    }

    /// One more guard on this instance's hold, if it has one.
    fn reenter<S: 'static>(self: &Arc<Self>, options: &Options) -> Option<Guard<Hold<S>>> {
        let (node, czxid) = self.holds.reenter()?;
        Some(self.guard(node, czxid, options))
    }

    /// `node` is this instance's hold now: its first guard.
    fn hold_node<S: 'static>(
        self: &Arc<Self>,
        node: String,
        czxid: i64,
        options: &Options,
    ) -> Guard<Hold<S>> {
        self.holds.start(&node, czxid);
        self.guard(node, czxid, options)
    }

    fn guard<S: 'static>(
        self: &Arc<Self>,
        node: String,
        czxid: i64,
        options: &Options,
    ) -> Guard<Hold<S>> {
        let hold = Hold::new(Arc::clone(self), node, czxid);
        Guard::new(hold, options.metrics.clone())
    }

    async fn acquire_unobserved<S: 'static>(
        self: &Arc<Self>,
        wait: Wait,
        rule: Rule<'_>,
        options: &Options,
        native_ok: bool,
    ) -> Acquired<S> {
        if let Some(g) = self.reenter(options) {
            return Ok(Some(g));
        }
        let _serial = match wait {
            Wait::Until(d) => match tokio::time::timeout_at(d, self.acquiring.lock()).await {
                Ok(s) => s,
                Err(_) => return Ok(None),
            },
            Wait::No | Wait::Forever => self.acquiring.lock().await,
        };
        if let Some(g) = self.reenter(options) {
            return Ok(Some(g));
        }
        if self.client.uses_native_locks() {
            if native_ok {
                return self.acquire_native(wait, options, String::new()).await;
            }
        } else if options.lock_delay.is_some() {
            return Err(Error::LockDelayUnsupported);
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
                    return Ok(Some(self.hold_node(node, czxid, options)));
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

    /// The same acquire through zlock's native lock operation: one round trip creates
    /// the node (same name) and answers whether it holds; a queued node waits for the
    /// grant the server pushes, with no listing and no watch. The server applies the
    /// same [`lock_order`] rule to the same queue, so recipe and native contenders mix.
    /// `release` (a node of ours under the lock path, "" for none) is deleted in the
    /// same request and commit.
    async fn acquire_native<S: 'static>(
        self: &Arc<Self>,
        wait: Wait,
        options: &Options,
        release: String,
    ) -> Acquired<S> {
        let mut pending = Pending::new(&self.client, &self.path);
        let req = native::request(
            &self.path,
            &pending.guid,
            self.marker,
            self.mode,
            options,
            release,
        );
        let Some((node, czxid)) = native::contend(&self.client, &mut pending, req, wait).await?
        else {
            return Ok(None);
        };
        Ok(Some(self.hold_node(node, czxid, options)))
    }

    /// Releases `guard` and queues again, recording the new acquire on the metrics of
    /// `options`. On the native path one request does both (see
    /// [`crate::Mutex::reacquire`]); otherwise, or while other guards of this instance
    /// still share the hold, a release and an acquire under `rule`.
    pub(crate) async fn reacquire<S: 'static>(
        self: &Arc<Self>,
        mut guard: Guard<Hold<S>>,
        rule: Rule<'_>,
        options: &Options,
    ) -> Result<Guard<Hold<S>>> {
        let started = Instant::now();
        let outcome = if self.client.uses_native_locks() {
            let _serial = self.acquiring.lock().await;
            guard.settle();
            match guard.held.unhold() {
                Some(old) => self.acquire_native(Wait::Forever, options, old).await,
                // Other guards of this instance still share the node: it stays held.
                None => Ok(self.reenter(options)),
            }
        } else {
            match guard.release().await {
                Ok(()) => {
                    self.acquire_unobserved(Wait::Forever, rule, options, false)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        metrics::observe(options.metrics.as_ref(), started, &outcome, 1);
        match outcome {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(Error::Protocol(
                "lock acquire ended without the lock".into(),
            )),
            Err(e) => Err(e),
        }
    }
}
