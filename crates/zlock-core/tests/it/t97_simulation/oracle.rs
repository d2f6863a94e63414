//! The lock oracle: who holds what, judged from the tree alone with the queue rule
//! (Curator's: contenders ordered by their 10-digit sequence suffix; an exclusive or
//! write contender holds when it is first, a reader when no writer is before it, a
//! semaphore contender when fewer than N are before it). Written apart from
//! `zlock_core::locks` on purpose: it is what the native index must agree with.
//!
//! Checks 2 and 3 of the module doc live here: [`Oracle::check`] after every Txn (and
//! after a recipe's getChildren), [`Oracle::on_grant`] for every pushed grant.

use std::collections::BTreeMap;

use zlock_core::locks::Grant;
use zlock_core::tree::DataTree;
use zlock_core::SessionId;
use zlock_proto::records::LockResponse;

/// What kind of lock a lock path is; every contender on it follows the same rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    /// Read nodes have `__READ__` in their name, write nodes `__WRIT__`.
    ReadWrite,
    /// A counting semaphore of this many leases.
    Semaphore(usize),
}

/// The lock paths of the simulation. The deep one has missing ancestors, which the
/// native request creates as containers (and the container sweep may remove again).
pub const LOCKS: [(&str, Kind); 4] = [
    ("/locks/ex", Kind::Exclusive),
    ("/app/locks/deep", Kind::Exclusive),
    ("/locks/rw", Kind::ReadWrite),
    ("/locks/sem", Kind::Semaphore(3)),
];

/// A contender node the simulation made, native or recipe.
#[derive(Debug, Clone)]
pub struct Contender {
    pub session: SessionId,
    /// Index into [`LOCKS`].
    pub lock: usize,
    /// Made by a native lock request (grants are pushed), or by a recipe's create
    /// (the client looks with getChildren).
    pub native: bool,
    /// For a native node: the prefix and mode its RESUME re-sends.
    pub prefix: String,
    pub mode: i32,
    /// Holds the lock: granted (reply or push), or a recipe that saw itself first.
    pub holds: bool,
}

/// The 10-digit sequence suffix, as Curator sorts contenders (None: not a contender).
fn sequence(name: &str) -> Option<i64> {
    let tail = name.get(name.len().checked_sub(10)?..)?;
    tail.parse::<i32>().ok().map(i64::from)
}

fn is_read(name: &str) -> bool {
    name.contains("__READ__")
}

/// The contenders under a lock, in queue order, each with whether the queue rule lets
/// it hold.
pub fn queue<'a>(kind: Kind, names: impl Iterator<Item = &'a str>) -> Vec<(&'a str, bool)> {
    let mut q: Vec<(i64, &str)> = names.filter_map(|n| Some((sequence(n)?, n))).collect();
    q.sort();
    let mut writers_before = 0;
    q.iter()
        .enumerate()
        .map(|(before, &(_, name))| {
            let holds = match kind {
                Kind::Exclusive => before == 0,
                Kind::ReadWrite if is_read(name) => writers_before == 0,
                Kind::ReadWrite => before == 0,
                Kind::Semaphore(n) => before < n,
            };
            writers_before += usize::from(!is_read(name));
            (name, holds)
        })
        .collect()
}

#[derive(Debug, Default)]
pub struct Oracle {
    /// Contender nodes by full path.
    pub nodes: BTreeMap<String, Contender>,
    /// Grants pushed, grants by reply, recipe holds (for the coverage report).
    pub pushed: u64,
    pub by_reply: u64,
    pub recipe_holds: u64,
}

impl Oracle {
    /// The nodes of `session` under lock `li`, in path order.
    pub fn nodes_of(&self, session: SessionId, li: usize) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, c)| c.session == session && c.lock == li)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Folds in the answer to a native lock request of `session` on lock `li`.
    pub fn on_lock_reply(
        &mut self,
        tree: &DataTree,
        session: SessionId,
        li: usize,
        (prefix, mode): (&str, i32),
        r: &LockResponse,
    ) -> Result<(), String> {
        if r.node.is_empty() {
            if r.granted {
                return Err("a lock reply without a node says granted".into());
            }
            return Ok(());
        }
        match tree.get(&r.node) {
            Some(n) if n.kind.ephemeral_owner() == session => {}
            _ => {
                return Err(format!(
                    "lock reply names {}, not a node of the caller",
                    r.node
                ))
            }
        }
        if let Some(c) = self.nodes.get_mut(&r.node) {
            // A RESUME found the node again.
            if c.holds && !r.granted {
                return Err(format!(
                    "RESUME of the holding node {} says not granted",
                    r.node
                ));
            }
            if !c.holds && r.granted {
                self.by_reply += 1;
            }
            c.holds |= r.granted;
            return Ok(());
        }
        self.by_reply += u64::from(r.granted);
        self.nodes.insert(
            r.node.clone(),
            Contender {
                session,
                lock: li,
                native: true,
                prefix: prefix.to_owned(),
                mode,
                holds: r.granted,
            },
        );
        Ok(())
    }

    /// A pushed grant: to a native waiter of that session, once, with the
    /// node's czxid as the fencing token.
    pub fn on_grant(&mut self, tree: &DataTree, (session, g): &Grant) -> Result<(), String> {
        let Some(c) = self.nodes.get_mut(&g.node) else {
            return Err(format!(
                "grant of {} to {session:#x}: not a contender",
                g.node
            ));
        };
        if !c.native || c.session != *session {
            return Err(format!(
                "grant of {} to {session:#x}: its contender is {:#x} (native: {})",
                g.node, c.session, c.native
            ));
        }
        if c.holds {
            return Err(format!("second grant of {} (already held)", g.node));
        }
        let czxid = tree.get(&g.node).map(|n| n.czxid);
        if czxid != Some(g.czxid) {
            return Err(format!(
                "grant of {} carries czxid {} not {czxid:?}",
                g.node, g.czxid
            ));
        }
        c.holds = true;
        self.pushed += 1;
        Ok(())
    }

    /// A recipe client's getChildren of its lock: it holds if the list shows it may.
    pub fn on_recipe_view(&mut self, node: &str, children: &[String]) {
        let Some(c) = self.nodes.get_mut(node) else {
            return;
        };
        let name = zlock_core::path::name(node);
        let kind = LOCKS[c.lock].1;
        let ok = queue(kind, children.iter().map(|s| s.as_str()))
            .iter()
            .any(|(n, ok)| *n == name && *ok);
        if ok && !c.holds {
            c.holds = true;
            self.recipe_holds += 1;
        }
    }

    /// Drops contenders whose node is gone (deleted, or its session closed): they hold
    /// nothing any more.
    pub fn reconcile(&mut self, tree: &DataTree) {
        self.nodes.retain(|p, _| tree.contains(p));
    }

    /// Checks 2 and 3 against the tree: every holder may hold by the queue rule; no
    /// native waiter that may hold is left ungranted; and per lock, holders
    /// never break exclusion.
    pub fn check(&self, tree: &DataTree) -> Result<(), String> {
        // Which children may hold, per lock, computed once.
        let allowed: Vec<Vec<String>> = LOCKS
            .iter()
            .map(|(path, kind)| match tree.get(path) {
                Some(n) => queue(*kind, n.children.iter().map(|c| &**c))
                    .into_iter()
                    .filter(|(_, ok)| *ok)
                    .map(|(c, _)| zlock_core::path::join(path, c))
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        let mut holders: [Vec<&str>; LOCKS.len()] = Default::default();
        for (p, c) in &self.nodes {
            let ok = allowed[c.lock].contains(p);
            if c.holds {
                if !ok {
                    return Err(format!("{p} holds but the queue rule says it may not"));
                }
                holders[c.lock].push(p);
            } else if c.native && ok {
                return Err(format!(
                    "lost waiter: {p} ({:#x}) may hold but was never granted",
                    c.session
                ));
            }
        }
        for (li, hs) in holders.iter().enumerate() {
            let (path, kind) = LOCKS[li];
            let readers = hs.iter().filter(|p| is_read(p)).count();
            let writers = hs.len() - readers;
            let broken = match kind {
                Kind::Exclusive => hs.len() > 1,
                Kind::ReadWrite => writers > 1 || (writers == 1 && readers > 0),
                Kind::Semaphore(n) => hs.len() > n,
            };
            if broken {
                return Err(format!(
                    "exclusion broken on {path} ({kind:?}): holders {hs:?}"
                ));
            }
        }
        Ok(())
    }
}
