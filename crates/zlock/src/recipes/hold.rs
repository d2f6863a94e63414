//! Holds of a queue-lock instance: the node it holds and how many guards share it
//! (reentrancy: another acquire on the same instance counts one more guard on the same
//! node), and [`Hold`], what each of those guards holds.

use std::marker::PhantomData;
use std::sync::{Arc, MutexGuard, PoisonError};

use super::core::LockCore;
use super::guard::{Held, HeldNode};
use super::nodes::{delete_node, spawn_delete};
use crate::Result;

/// The node an instance holds, if any, and its guards.
#[derive(Default)]
pub(crate) struct Holds(std::sync::Mutex<Option<Shared>>);

struct Shared {
    node: String,
    czxid: i64,
    count: usize,
}

impl Holds {
    fn lock(&self) -> MutexGuard<'_, Option<Shared>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_held(&self) -> bool {
        self.lock().is_some()
    }

    /// Counts one more guard on the held node, if there is one: its node and czxid.
    pub(crate) fn reenter(&self) -> Option<(String, i64)> {
        let mut held = self.lock();
        let h = held.as_mut()?;
        h.count += 1;
        Some((h.node.clone(), h.czxid))
    }

    /// `node` is held now, by its first guard.
    pub(crate) fn start(&self, node: &str, czxid: i64) {
        *self.lock() = Some(Shared {
            node: node.to_owned(),
            czxid,
            count: 1,
        });
    }

    /// Drops one guard of `node`; true if it was the last (the node is to go).
    fn leave(&self, node: &str) -> bool {
        let mut held = self.lock();
        match held.as_mut() {
            Some(h) if h.node == node => {
                h.count = h.count.saturating_sub(1);
                if h.count == 0 {
                    *held = None;
                    true
                } else {
                    false
                }
            }
            _ => false,
        }
    }
}

/// One guard's share of a held lock node. `S` tells the recipes apart
/// ([`MutexGuard`](super::MutexGuard), [`ReadWriteGuard`](super::ReadWriteGuard)).
pub struct Hold<S> {
    core: Arc<LockCore>,
    node: HeldNode,
    side: PhantomData<fn() -> S>,
}

impl<S> Hold<S> {
    pub(crate) fn new(core: Arc<LockCore>, node: String, czxid: i64) -> Hold<S> {
        let node = HeldNode {
            client: core.client.clone(),
            path: node,
            czxid,
        };
        Hold {
            core,
            node,
            side: PhantomData,
        }
    }

    /// Gives up this share; the node to delete if it was the last.
    pub(crate) fn unhold(&self) -> Option<String> {
        let node = &self.node.path;
        self.core.holds.leave(node).then(|| node.clone())
    }
}

impl<S: 'static> Held for Hold<S> {
    fn held_node(&self) -> &HeldNode {
        &self.node
    }

    async fn release(&mut self) -> Result<()> {
        match self.unhold() {
            Some(node) => delete_node(&self.node.client, &node).await,
            None => Ok(()),
        }
    }

    fn release_on_drop(&mut self) {
        if let Some(node) = self.unhold() {
            spawn_delete(self.node.client.clone(), node);
        }
    }
}
