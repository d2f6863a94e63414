//! The lock queues of the standard recipes, derived from the tree, for `locks` and the
//! dashboard: a service that locks with Curator or kazoo (most of the seeds' users)
//! never touches zlock's native lock index, so without this its locks would not show.
//!
//! A queue is the ephemeral sequential children of one parent, in queue order
//! (`zlock_proto::lock_order`: by create counter, as every recipe orders them). A parent
//! is found through the tree's index of ephemeral nodes, so a look costs the number of
//! ephemeral nodes, not of all znodes. Which recipe made an entry is read from its name:
//! Curator's `_c_<uuid>-lock-`, `-__READ__`, `-__WRIT__` and `-lease-`, kazoo's
//! `<uuid>__lock__` and `__rlock__`, and the plain `lock-` of ZooKeeper's own recipe
//! and the seeds'. Who holds follows the recipes' rules: a reader holds when no writer
//! is before it, any other entry when it is first; a semaphore's lease node exists only
//! while its lease is held (Curator creates it after taking the semaphore's internal
//! lock), so every lease holds. Paths the native index follows are left to it (it shows
//! native and recipe entries of one path as one queue).

use std::collections::BTreeSet;

use serde_json::{json, Value};
use zlock_core::locks::recipe_contender as contender;
use zlock_core::tree::Node;
use zlock_core::State;
use zlock_proto::lock_order;

/// The recipe that named an entry.
fn recipe(name: &str) -> &'static str {
    if name.starts_with("_c_") {
        "curator"
    } else if name.contains("__lock__") || name.contains("__rlock__") {
        "kazoo"
    } else {
        "plain"
    }
}

/// Whether the entry reads (Curator's `__READ__`, kazoo's `__rlock__`).
fn reads(name: &str) -> bool {
    lock_order::is_reader(name) || name.contains("__rlock__")
}

/// Whether the entry is a semaphore's lease (Curator's `-lease-`).
fn lease(name: &str) -> bool {
    name.contains("-lease-")
}

/// The recipe queues outside `followed` (the native index's paths), by path.
pub(super) fn queues(st: &State, followed: &BTreeSet<String>) -> Vec<Value> {
    let mut parents: BTreeSet<&str> = BTreeSet::new();
    for (_, paths) in st.tree.ephemeral_sessions() {
        for p in paths {
            let parent = zlock_core::path::parent(p);
            let name = p.rsplit('/').next().unwrap_or(p);
            if contender(name) && !followed.contains(parent) {
                parents.insert(parent);
            }
        }
    }
    parents
        .into_iter()
        .filter_map(|parent| queue(st, parent))
        .collect()
}

/// One parent's queue, if it has ephemeral children named as contenders.
fn queue(st: &State, parent: &str) -> Option<Value> {
    let node = st.tree.get(parent)?;
    let mut entries: Vec<(lock_order::QueueKey, String, &Node)> = node
        .children
        .iter()
        .filter(|c| contender(c))
        .filter_map(|c| {
            let path = zlock_core::path::join(parent, c);
            let n = st.tree.get(&path)?;
            if n.kind.ephemeral_owner().0 == 0 {
                return None;
            }
            Some((lock_order::QueueKey::of(&**c)?, path, n))
        })
        .collect();
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut writer_before = false;
    let entries: Vec<Value> = entries
        .iter()
        .enumerate()
        .map(|(i, (key, path, n))| {
            let name = key.name();
            let (mode, holds) = if lease(name) {
                ("lease", true)
            } else if reads(name) {
                ("read", !writer_before)
            } else {
                writer_before = true;
                ("write", i == 0)
            };
            let owner = n.kind.ephemeral_owner().0;
            json!({
                "node": path,
                "session_id": owner,
                "session_id_hex": format!("0x{owner:x}"),
                "state": if holds { "holds" } else { "queued" },
                "mode": mode,
                "leases": null,
                "lock_delay_ms": 0,
                "czxid": n.czxid,
                "ctime": n.ctime,
                "recipe": recipe(name),
            })
        })
        .collect();
    Some(json!({
        "path": parent,
        "entries": entries,
        "lock_delay_until": null,
        "recipe": true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_are_told_by_their_names() {
        assert_eq!(recipe("_c_0f3e-lock-0000000001"), "curator");
        assert_eq!(recipe("8d1c__lock__0000000002"), "kazoo");
        assert_eq!(recipe("lock-0000000003"), "plain");
        assert!(reads("_c_0f3e-__READ__0000000004"));
        assert!(reads("8d1c__rlock__0000000005"));
        assert!(!reads("_c_0f3e-__WRIT__0000000006"));
        assert!(lease("_c_0f3e-lease-0000000007"));
        for yes in [
            "_c_0f3e-lock-0000000001",
            "8d1c__lock__0000000002",
            "lock-0000000003",
            "_c_0f3e-__READ__0000000004",
            "_c_0f3e-lease-0000000007",
            // A create counter wrapped past 2^31 (eleven characters).
            "lock--1500000000",
            "lock--000000001",
        ] {
            assert!(contender(yes), "{yes}");
        }
        for no in [
            "instance-0000000001",
            "_c_0f3e-latch-0000000001",
            "lock",
            "n_0000000001",
        ] {
            assert!(!contender(no), "{no}");
        }
    }
}
